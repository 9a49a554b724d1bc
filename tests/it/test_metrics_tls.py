#!/usr/bin/env python3
"""--metrics-tls-cert/--metrics-tls-key (issue 27): /metrics and /ready
over HTTPS with a certificate the test's CA signed; --metrics-auth still
asked for over TLS; a client trusting another CA fails the handshake; plain
HTTP gets no HTTP reply and the node serves on; a missing certificate, a
key of another certificate and the options without --metrics stop the
start with the reason. SIGHUP and refresh_certs reload the certificate
from the same files (a bad file keeps the one in use). TAP."""
import base64
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tlscerts  # noqa: E402
from rctest import RINGCACHED, Node, Tap, free_port, request, wait_until  # noqa: E402

tap = Tap()


def get(port, path, cafile, cred=None):
    """(status, body) of GET https://127.0.0.1:port/path trusting cafile;
    (None, the error) when the request fails before a reply."""
    ctx = ssl.create_default_context(cafile=cafile)
    req = urllib.request.Request("https://127.0.0.1:%d%s" % (port, path))
    if cred is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(cred.encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        return None, repr(getattr(e, "reason", e))


def plain_reply(port):
    """What a plain-HTTP GET /ready gets back (b'' when closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    got = b""
    try:
        s.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n")
        while len(got) < 4096:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    finally:
        s.close()
    return got


def start_fails(args):
    r = subprocess.run([RINGCACHED, "-l", "127.0.0.1", "-p", str(free_port())] + args,
                       capture_output=True, text=True, timeout=20)
    return r.returncode, r.stderr


why = tlscerts.available()
if why:
    tap.skip("metrics over TLS", why)
    tap.done()
    sys.exit(0)
d = tempfile.mkdtemp(prefix="rc-mtls-")
ca = tlscerts.make_ca(d, "ca")
other_ca = tlscerts.make_ca(d, "other-ca")
cert = tlscerts.make_cert(d, "metrics", ca, san="IP:127.0.0.1", usage="serverAuth")
other = tlscerts.make_cert(d, "other", ca, san="IP:127.0.0.1", usage="serverAuth")
auth = os.path.join(d, "scrapers")
with open(auth, "w") as f:
    f.write("prom:s3cret\n")
other_signed = tlscerts.make_cert(d, "other-signed", other_ca, san="IP:127.0.0.1",
                                  usage="serverAuth")
# The node reads its certificate from these two paths; the reload test
# puts another certificate there.
served = (os.path.join(d, "served.key"), os.path.join(d, "served.crt"))


def serve(pair):
    for src, dst in zip(pair, served):
        shutil.copyfile(src, dst)


serve(cert)
mport = free_port()
node = Node(args=["-t", "1", "--metrics", "127.0.0.1:%d" % mport, "--metrics-tls-cert", served[1],
                  "--metrics-tls-key", served[0], "--metrics-auth", auth])
try:
    node.start()
    tap.ok(wait_until(lambda: get(mport, "/ready", ca[1])[0] == 200, 10),
           "GET /ready over HTTPS, the certificate checked against the CA: 200")
    code, body = get(mport, "/ready", ca[1])
    tap.ok(code == 200 and body.startswith("ready"), "its body says ready", (code, body))
    code, body = get(mport, "/metrics", ca[1], "prom:s3cret")
    tap.ok(code == 200 and "memcached_up 1" in body, "GET /metrics over HTTPS with the "
           "scraper's credentials: the page", (code, body[:200]))
    code, body = get(mport, "/metrics", ca[1])
    tap.ok(code == 401, "over HTTPS, --metrics-auth still asks for credentials: 401",
           (code, body[:200]))
    code, err = get(mport, "/metrics", other_ca[1], "prom:s3cret")
    tap.ok(code is None and "CERTIFICATE_VERIFY_FAILED" in err,
           "a client trusting another CA: the handshake fails (certificate verify failed)",
           (code, err))
    got = plain_reply(mport)
    tap.ok(not got.startswith(b"HTTP/"), "plain HTTP gets no HTTP reply (%d bytes, no status "
           "line)" % len(got), got[:80])
    curl = shutil.which("curl")
    if curl:
        r = subprocess.run([curl, "-sS", "--cacert", ca[1], "-u", "prom:s3cret",
                            "https://127.0.0.1:%d/metrics" % mport],
                           capture_output=True, text=True, timeout=20)
        tap.ok(r.returncode == 0 and "memcached_up 1" in r.stdout,
               "curl --cacert CA -u prom:... https://.../metrics: the page",
               (r.returncode, r.stderr))
    else:
        tap.skip("curl over HTTPS", "curl is not installed")
    tap.ok(get(mport, "/ready", ca[1])[0] == 200 and node.alive(),
           "after the plain and refused attempts the node serves on")

    # Reload: another CA's certificate in the same files, then SIGHUP.
    serve(other_signed)
    os.kill(node.pid, signal.SIGHUP)
    tap.ok(wait_until(lambda: get(mport, "/ready", other_ca[1])[0] == 200, 10),
           "SIGHUP reloads the metrics certificate: a client trusting the new CA gets 200")
    code, err = get(mport, "/ready", ca[1])
    tap.ok(code is None and "CERTIFICATE_VERIFY_FAILED" in err,
           "and a client trusting only the old CA now fails the handshake", (code, err))
    # A broken file: refresh_certs says why and the one in use stays.
    with open(served[1], "w") as f:
        f.write("not a certificate\n")
    sock = node.connect()
    try:
        reply = request(sock, b"refresh_certs\r\n")
    finally:
        sock.close()
    tap.ok(reply.startswith(b"SERVER_ERROR") and b"served.crt" in reply,
           "refresh_certs with a broken certificate file: SERVER_ERROR naming it", reply)
    tap.ok(get(mport, "/ready", other_ca[1])[0] == 200,
           "and the metrics port keeps serving the certificate it had")
    serve(cert)
    sock = node.connect()
    try:
        reply = request(sock, b"refresh_certs\r\n")
    finally:
        sock.close()
    tap.ok(reply == b"OK\r\n" and get(mport, "/ready", ca[1])[0] == 200,
           "refresh_certs with the first certificate back: OK, and it is served again", reply)
finally:
    node.stop()

rc, err = start_fails(["--metrics", "127.0.0.1:%d" % free_port(), "--metrics-tls-cert",
                       os.path.join(d, "missing.crt")])
tap.ok(rc != 0 and "missing.crt" in err, "a certificate file that is not there stops the start, "
       "naming it", (rc, err))
rc, err = start_fails(["--metrics", "127.0.0.1:%d" % free_port(), "--metrics-tls-cert", cert[1],
                       "--metrics-tls-key", other[0]])
tap.ok(rc != 0 and other[0] in err and "mismatch" in err,
       "the key of another certificate stops the start, naming the key file", (rc, err))
rc, err = start_fails(["--metrics-tls-cert", cert[1], "--metrics-tls-key", cert[0]])
tap.ok(rc != 0 and "need --metrics" in err, "--metrics-tls-cert without --metrics is refused",
       (rc, err))
rc, err = start_fails(["--metrics", "127.0.0.1:%d" % free_port(), "--metrics-tls-key", cert[0]])
tap.ok(rc != 0 and "--metrics-tls-key needs --metrics-tls-cert" in err,
       "--metrics-tls-key without --metrics-tls-cert is refused", (rc, err))
shutil.rmtree(d, ignore_errors=True)
tap.done()
