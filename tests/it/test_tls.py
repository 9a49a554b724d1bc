#!/usr/bin/env python3
"""TLS on the client port (-Z, memcached 1.6's -o ssl_*): a throwaway CA,
server and client certificates made with the openssl CLI; pymemcache over
TLS (set/get, large values, multi-get, pipelining), openssl s_client,
plaintext and bad certificates refused per connection while the node keeps
serving, ssl_verify_mode=2, ssl_min_version=tlsv1.3, refresh_certs and
SIGHUP, start-up errors, the stats names. The same client checks run
against Debian's memcached -Z when its build has TLS, to show the same
behaviour. TAP."""
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import Tap, Node, RINGCACHED, wait_until  # noqa: E402
import tlscerts  # noqa: E402

try:
    from pymemcache.client.base import Client
except ImportError:
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        from pymemcache.client.base import Client
    except ImportError:
        print("1..0 # SKIP python3-pymemcache not installed")
        sys.exit(0)

if shutil.which("openssl") is None:
    print("1..0 # SKIP the openssl command is not installed")
    sys.exit(0)

MEMCACHED = shutil.which("memcached") or "/usr/bin/memcached"
TIMEOUT = 30.0  # generous: CI runs the tests in parallel under ASan


class Pki:
    """A CA, two server certificates (serials 1001 and 2002), a client
    certificate, and a rogue CA with its own server and client certs."""

    def __init__(self, d):
        self.d = d
        self.cas = {}
        self.ca = self.make_ca("ca", "ringcache test CA")
        self.rogue = self.make_ca("rogue", "rogue CA")
        self.srv1 = self.make_cert("srv1", "ca", "1001", server=True)
        self.srv2 = self.make_cert("srv2", "ca", "2002", server=True)
        self.cli = self.make_cert("cli", "ca", "3003", server=False)
        self.rogue_srv = self.make_cert("rsrv", "rogue", "4004", server=True)
        self.rogue_cli = self.make_cert("rcli", "rogue", "5005", server=False)

    def make_ca(self, name, cn):
        self.cas[name] = tlscerts.make_ca(self.d, name, cn)
        return self.cas[name][1]

    def make_cert(self, name, ca, serial, server):
        key, crt = tlscerts.make_cert(
            self.d, name, self.cas[ca], san="IP:127.0.0.1,DNS:localhost" if server else None,
            usage="serverAuth" if server else "clientAuth", serial=serial)
        return crt, key


def client_ctx(pki, ca=None, cert=None, maxv=None, minv=None):
    ctx = ssl.create_default_context(cafile=ca or pki.ca)
    if cert is not None:
        ctx.load_cert_chain(cert[0], cert[1])
    if maxv is not None:
        ctx.maximum_version = maxv
    if minv is not None:
        ctx.minimum_version = minv
    return ctx


def tls_connect(port, ctx, timeout=TIMEOUT, rcvbuf=None):
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.settimeout(timeout)
    if rcvbuf is not None:
        # Before connect: shrinking it on an open connection stalls TCP.
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    raw.connect(("127.0.0.1", port))
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        return ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    except Exception:
        raw.close()
        raise


def recv_until(sock, terminator, want_len=None, timeout=TIMEOUT):
    """Read until the data ends with terminator; '' on EOF."""
    buf = bytearray()
    deadline = time.monotonic() + timeout
    while not buf.endswith(terminator) and time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 20)
        except socket.timeout:
            break
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def request(sock, data, terminator=b"\r\n"):
    sock.sendall(data)
    return recv_until(sock, terminator)


def stats(port, ctx, which=b""):
    s = tls_connect(port, ctx)
    try:
        out = request(s, b"stats " + which + b"\r\n", b"END\r\n")
    finally:
        s.close()
    d = {}
    for line in out.decode().splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == "STAT":
            d[parts[1]] = parts[2]
    return d


def serial_seen(port, ctx):
    s = tls_connect(port, ctx)
    try:
        return s.getpeercert()["serialNumber"]
    finally:
        s.close()


def closed_without_reply(sock):
    """True when the server closes the connection having sent nothing
    readable as a reply (EOF, a reset, or a TLS alert)."""
    try:
        data = sock.recv(4096)
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return data == b"" or not data.startswith((b"VERSION", b"ERROR"))


def memcached_has_tls():
    if not os.access(MEMCACHED, os.X_OK):
        return False
    try:
        out = subprocess.run([MEMCACHED, "-h"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return b"--enable-ssl" in out


def server(kind, tls_opts, extra=None):
    """A ringcached or memcached Node with -Z and these -o ssl_* options."""
    args = ["-Z", "-o", ",".join(tls_opts)] + list(extra or [])
    if kind == "memcached":
        args = ["-U", "0"] + (["-u", "nobody"] if os.getuid() == 0 else []) + args
        return Node(args=args, binary=MEMCACHED, stderr=os.devnull)
    return Node(args=args)


def check(tap, kind, desc, fn):
    """Run one shared check. ringcached must pass it; where memcached
    fails one, that is reported as a TAP TODO (its bug, not ours)."""
    try:
        cond, diag = fn()
    except Exception as e:  # a timeout, a reset: the check failed
        cond, diag = False, repr(e)
    desc = "%s: %s" % (kind, desc)
    if cond or kind == "ringcached":
        tap.ok(cond, desc, diag)
        return cond
    tap.n += 1
    print("not ok %d - %s # TODO %s fails this (%s)" % (tap.n, desc, MEMCACHED,
                                                        str(diag)[:120].replace("\n", " ")))
    sys.stdout.flush()
    return False


def client_checks(tap, kind, pki, extra=None):
    """The behaviour both servers should share, each check on its own
    connection so that one stuck server connection fails one check."""
    ctx = client_ctx(pki)
    node = server(kind, ["ssl_chain_cert=" + pki.srv1[0], "ssl_key=" + pki.srv1[1]],
                  extra).start()
    tmo = TIMEOUT if kind == "ringcached" else 10.0

    def pymc():
        return Client(("127.0.0.1", node.port), tls_context=ctx, timeout=tmo,
                      connect_timeout=10, default_noreply=False)

    def set_get():
        mc = pymc()
        ok = mc.set("a", b"1", flags=5) and mc.get("a") == b"1"
        mc.close()
        return ok, None

    def large():
        big = os.urandom(700 * 1024)
        mc = pymc()
        ok = mc.set("big", big) and mc.get("big") == big
        mc.close()
        return ok, None

    def multi():
        many = {"k%d" % i: ("v%d" % i).encode() * 20 for i in range(2000)}
        mc = pymc()
        mc.set_many(many)
        got = mc.get_many(list(many))
        mc.close()
        return got == many, (len(got), len(many))

    def pipelined():
        s = tls_connect(node.port, ctx, tmo)
        reqs = b"".join(b"set p%d 0 0 %d\r\n%s\r\n" % (i, len(b"x%d" % i), b"x%d" % i)
                        for i in range(300))
        reqs += b"".join(b"get p%d\r\n" % i for i in range(300))
        want = b"STORED\r\n" * 300 + b"".join(
            b"VALUE p%d 0 %d\r\nx%d\r\nEND\r\n" % (i, len(b"x%d" % i), i) for i in range(300))
        got = request(s, reqs, b"VALUE p299 0 4\r\nx299\r\nEND\r\n")
        s.close()
        return got == want, (len(got), len(want), got[-80:])

    def large_sets():
        # Data blocks split across TLS records, several in one write.
        vals = [os.urandom(150 * 1024) for _ in range(12)]
        reqs = b"".join(b"set L%d 0 0 %d\r\n%s\r\n" % (i, len(v), v) for i, v in enumerate(vals))
        s = tls_connect(node.port, ctx, tmo)
        got = request(s, reqs + b"get L11\r\n", b"END\r\n")
        s.close()
        return got == b"STORED\r\n" * 12 + b"VALUE L11 0 %d\r\n%s\r\nEND\r\n" % (
            len(vals[11]), vals[11]), got[:100]

    def plaintext():
        p = socket.create_connection(("127.0.0.1", node.port), timeout=tmo)
        p.sendall(b"version\r\nget a\r\n")
        closed = closed_without_reply(p)
        p.close()
        return closed, None

    def still_serves():
        s = tls_connect(node.port, ctx, tmo)
        got = request(s, b"get a\r\n", b"END\r\n")
        s.close()
        return got == b"VALUE a 5 1\r\n1\r\nEND\r\n", got

    def wrong_ca():
        try:
            tls_connect(node.port, client_ctx(pki, ca=pki.rogue), tmo).close()
        except ssl.SSLCertVerificationError:
            return True, None
        return False, "connected"

    try:
        check(tap, kind, "-Z: pymemcache over TLS: set, get", set_get)
        check(tap, kind, "a 700 KiB value over TLS (records split and joined)", large)
        check(tap, kind, "pymemcache set_many, then a multi-get of 2000 keys in one request", multi)
        check(tap, kind, "600 pipelined requests in one write: replies in order", pipelined)
        check(tap, kind, "12 pipelined 150 KiB sets in one write, then a get", large_sets)
        before = int(stats(node.port, ctx).get("ssl_handshake_errors", "0"))
        check(tap, kind, "plaintext on the TLS port: closed, no reply", plaintext)
        check(tap, kind, "still serves TLS clients after it", still_serves)
        check(tap, kind, "the plaintext client is counted in ssl_handshake_errors", lambda: (
            wait_until(lambda: int(stats(node.port, ctx).get("ssl_handshake_errors", "0")) >
                       before, TIMEOUT), None))
        check(tap, kind, "a client trusting another CA fails verification", wrong_ca)
    finally:
        node.stop()


def s_client_check(tap, pki):
    node = server("ringcached", ["ssl_chain_cert=" + pki.srv1[0],
                                 "ssl_key=" + pki.srv1[1]]).start()
    try:
        proc = subprocess.run(
            ["openssl", "s_client", "-connect", "127.0.0.1:%d" % node.port, "-CAfile", pki.ca,
             "-verify_return_error", "-servername", "localhost", "-ign_eof"],
            input=b"version\r\nquit\r\n", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            timeout=60)
        out = proc.stdout.decode(errors="replace")
        tap.ok(proc.returncode == 0 and "Verify return code: 0 (ok)" in out and "VERSION " in out,
               "openssl s_client: handshake verified against the CA, VERSION over it",
               out[-600:])
    finally:
        node.stop()


def verify_mode_checks(tap, kind, pki):
    node = server(kind, ["ssl_chain_cert=" + pki.srv1[0], "ssl_key=" + pki.srv1[1],
                         "ssl_ca_cert=" + pki.ca, "ssl_verify_mode=2"]).start()
    try:
        def works(ctx):
            try:
                s = tls_connect(node.port, ctx)
                # TLS 1.3: the server judges the client's certificate after
                # the client thinks the handshake is done; the first read
                # shows the verdict.
                got = request(s, b"version\r\n")
                s.close()
                return got.startswith(b"VERSION ")
            except (ssl.SSLError, OSError):
                return False
        tap.ok(not works(client_ctx(pki)),
               "%s ssl_verify_mode=2: a client without a certificate fails" % kind)
        tap.ok(not works(client_ctx(pki, cert=pki.rogue_cli)),
               "%s ssl_verify_mode=2: a client certificate from another CA fails" % kind)
        tap.ok(works(client_ctx(pki, cert=pki.cli)),
               "%s ssl_verify_mode=2: a client certificate from ssl_ca_cert works" % kind)
    finally:
        node.stop()


def min_version_checks(tap, kind, pki, value):
    node = server(kind, ["ssl_chain_cert=" + pki.srv1[0], "ssl_key=" + pki.srv1[1],
                         "ssl_min_version=" + value]).start()
    try:
        try:
            tls_connect(node.port, client_ctx(pki, maxv=ssl.TLSVersion.TLSv1_2)).close()
            refused = False
        except ssl.SSLError:
            refused = True
        tap.ok(refused, "%s ssl_min_version=%s: a TLS 1.2-only client is refused" % (kind, value))
        s = tls_connect(node.port, client_ctx(pki))
        tap.ok(s.version() == "TLSv1.3" and request(s, b"version\r\n").startswith(b"VERSION "),
               "%s ssl_min_version=%s: a TLS 1.3 client works" % (kind, value))
        s.close()
    finally:
        node.stop()


def refresh_checks(tap, pki, d):
    crt, key = os.path.join(d, "live.crt"), os.path.join(d, "live.key")
    shutil.copy(pki.srv1[0], crt)
    shutil.copy(pki.srv1[1], key)
    ctx = client_ctx(pki)
    node = server("ringcached", ["ssl_chain_cert=" + crt, "ssl_key=" + key]).start()
    try:
        old = tls_connect(node.port, ctx)
        tap.eq(old.getpeercert()["serialNumber"], "03E9", "refresh_certs: serial 1001 at start")
        shutil.copy(pki.srv2[0], crt)
        shutil.copy(pki.srv2[1], key)
        tap.eq(request(old, b"refresh_certs\r\n"), b"OK\r\n",
               "refresh_certs after new files are in place: OK")
        tap.eq(serial_seen(node.port, ctx), "07D2",
               "a new connection sees the new certificate (serial 2002)")
        tap.eq(request(old, b"set o 0 0 2\r\nok\r\nget o\r\n", b"END\r\n"),
               b"STORED\r\nVALUE o 0 2\r\nok\r\nEND\r\n",
               "the connection opened before the refresh still works")
        st = stats(node.port, ctx)
        tap.ok(int(st.get("time_since_server_cert_refresh", "-1")) in (0, 1, 2),
               "time_since_server_cert_refresh restarts at the refresh", st.get(
                   "time_since_server_cert_refresh"))

        with open(crt, "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\nnot a certificate\n")
        got = request(old, b"refresh_certs\r\n")
        tap.ok(got.startswith(b"SERVER_ERROR Error loading the certificate chain: " +
                              crt.encode()) and got.endswith(b"\r\n") and got.count(b"\r\n") == 1,
               "refresh_certs with a broken chain file: one SERVER_ERROR line naming it", got)
        tap.eq(serial_seen(node.port, ctx), "07D2",
               "after the failed refresh new connections still get the last good certificate")
        shutil.copy(pki.srv1[0], crt)  # chain 1001 with key 2002: a mismatch
        got = request(old, b"refresh_certs\r\n")
        tap.ok(got.startswith(b"SERVER_ERROR Error"), "a key that does not match the new "
               "certificate: SERVER_ERROR, nothing half-loaded", got)
        tap.eq(serial_seen(node.port, ctx), "07D2", "... and the old pair is still served")

        shutil.copy(pki.srv1[1], key)
        os.kill(node.pid, signal.SIGHUP)
        tap.ok(wait_until(lambda: serial_seen(node.port, ctx) == "03E9", TIMEOUT),
               "SIGHUP reloads the files (serial 1001 again); the node keeps running")
        tap.ok(node.alive() and request(old, b"version\r\n").startswith(b"VERSION "),
               "the old connection survives both refreshes")
        old.close()
    finally:
        node.stop()

    n = Node(args=["-o", "modern"]).start()
    try:
        s = socket.create_connection(("127.0.0.1", n.port), timeout=TIMEOUT)
        tap.eq(request(s, b"refresh_certs\r\n"), b"SERVER_ERROR TLS not enabled\r\n",
               "refresh_certs without -Z: SERVER_ERROR TLS not enabled")
        s.close()
    finally:
        n.stop()


def slow_reader_check(tap, pki):
    """A client pipelines gets of a large value without reading: the node
    stops parsing at --max-output-bytes (its replies wait inside the
    connection, not unbounded), serves others meanwhile, and every reply
    arrives intact once the client reads."""
    ctx = client_ctx(pki)
    node = server("ringcached", ["ssl_chain_cert=" + pki.srv1[0], "ssl_key=" + pki.srv1[1]],
                  ["--max-output-bytes", "64k"]).start()
    try:
        val = os.urandom(100 * 1024)
        s = tls_connect(node.port, ctx, rcvbuf=65536)
        tap.eq(request(s, b"set v 0 0 %d\r\n%s\r\n" % (len(val), val)), b"STORED\r\n",
               "slow reader: a 100 KiB value stored")
        n = 150
        base = int(stats(node.port, ctx)["cmd_get"])
        sender = threading.Thread(target=s.sendall, args=(b"get v\r\n" * n,))
        sender.start()
        other = tls_connect(node.port, ctx)
        tap.ok(request(other, b"get v\r\n", b"END\r\n").endswith(val + b"\r\nEND\r\n"),
               "another TLS client is served while the first one does not read")
        other.close()
        sender.join(60)
        # Everything it sent is in; unread replies stop its parsing at the
        # cap (plus what the kernel buffers take), far short of all of them.
        # (The other client's get counts once.)
        reached = wait_until(lambda: int(stats(node.port, ctx)["cmd_get"]) >= base + n, 2.0)
        tap.ok(not reached, "--max-output-bytes holds over TLS: the node stops parsing the "
               "non-reader's gets (%d of %d done)" % (int(stats(node.port, ctx)["cmd_get"]) -
                                                       base - 1, n))
        one = b"VALUE v 0 %d\r\n%s\r\nEND\r\n" % (len(val), val)
        got = bytearray()
        deadline = time.monotonic() + 120
        while len(got) < len(one) * n and time.monotonic() < deadline:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            got += chunk
        tap.ok(got == one * n, "the slow reader then gets all %d replies (%d MiB) intact" % (
            n, len(one) * n >> 20), (len(got), len(one) * n))
        s.close()
    finally:
        node.stop()


def start_errors(tap, pki, d):
    garbage = os.path.join(d, "garbage.crt")
    with open(garbage, "w") as f:
        f.write("hello\n")

    def run(opts):
        p = subprocess.run([RINGCACHED, "-p", "0", "-Z", "-o", ",".join(opts)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        return p.returncode, p.stderr.decode(errors="replace")
    rc, err = run(["ssl_chain_cert=" + os.path.join(d, "missing.crt")])
    tap.ok(rc == 1 and "Error loading the certificate chain: " in err and
           "No such file or directory" in err and len(err.splitlines()) == 1,
           "-Z with a missing chain file: exit 1, one line naming it and why", (rc, err))
    rc, err = run(["ssl_chain_cert=" + garbage, "ssl_key=" + pki.srv1[1]])
    tap.ok(rc == 1 and "Error loading the certificate chain: " + garbage in err,
           "-Z with a chain file that is not PEM: exit 1, said so", (rc, err))
    rc, err = run(["ssl_chain_cert=" + pki.srv1[0], "ssl_key=" + pki.srv2[1]])
    tap.ok(rc == 1 and "Error loading the key" in err or "Error validating" in err,
           "-Z with a key that does not match the certificate: exit 1, said so", (rc, err))
    rc, err = run(["ssl_chain_cert=" + pki.srv1[0]])
    tap.ok(rc == 1 and "Error loading the key: " + pki.srv1[0] in err,
           "-Z without ssl_key: the key is looked for in the chain file", (rc, err))
    rc, err = run(["ssl_chain_cert=" + pki.srv1[0], "ssl_key=" + pki.srv1[1],
                   "ssl_ca_cert=" + garbage])
    tap.ok(rc == 1 and "Error loading the CA certificate: " + garbage in err,
           "-Z with a broken ssl_ca_cert: exit 1, said so", (rc, err))
    rc, err = run(["ssl_chain_cert=" + pki.srv1[0], "ssl_key=" + pki.srv1[1],
                   "ssl_ciphers=NO-SUCH-CIPHER"])
    tap.ok(rc == 1 and "Error setting the provided cipher(s): NO-SUCH-CIPHER" in err,
           "-Z with an unknown ssl_ciphers list: exit 1, said so", (rc, err))


def stats_checks(tap, pki, memcached):
    opts = ["ssl_chain_cert=" + pki.srv1[0], "ssl_key=" + pki.srv1[1], "ssl_ca_cert=" + pki.ca,
            "ssl_verify_mode=1", "ssl_min_version=tlsv1.3" if not memcached else
            "ssl_min_version=3"]
    ctx = client_ctx(pki)
    want_general = {"ssl_handshake_errors", "time_since_server_cert_refresh"}
    node = server("ringcached", opts[:4] + ["ssl_min_version=tlsv1.3"]).start()
    try:
        g = stats(node.port, ctx)
        st = stats(node.port, ctx, b"settings")
    finally:
        node.stop()
    tap.ok(want_general <= set(g), "stats: ssl_handshake_errors, time_since_server_cert_refresh",
           sorted(k for k in g if "ssl" in k or "cert" in k))
    tap.ok(st.get("ssl_enabled") == "yes" and st.get("ssl_chain_cert") == pki.srv1[0] and
           st.get("ssl_key") == pki.srv1[1] and st.get("ssl_ca_cert") == pki.ca and
           st.get("ssl_verify_mode") == "1" and st.get("ssl_min_version") == "tlsv1.3",
           "stats settings: ssl_enabled, ssl_chain_cert, ssl_key, ssl_ca_cert, ssl_verify_mode, "
           "ssl_min_version as configured", {k: v for k, v in st.items() if k.startswith("ssl")})
    if not memcached:
        tap.skip("memcached's ssl_* stats names match", "memcached built without TLS")
        return
    node = server("memcached", opts).start()
    try:
        mg = stats(node.port, ctx)
        mst = stats(node.port, ctx, b"settings")
    finally:
        node.stop()
    names = lambda d: sorted(k for k in d if k.startswith("ssl_") or "cert" in k)  # noqa: E731
    tap.eq(names(g), names(mg), "stats: the same TLS names as memcached's")
    tap.eq({k: st[k] for k in names(st)}, {k: mst[k] for k in names(mst)},
           "stats settings: the same ssl_* names and values as memcached's")


def main():
    tap = Tap()
    d = tempfile.mkdtemp(prefix="rc-tls-")
    os.chmod(d, 0o755)
    try:
        pki = Pki(d)
        memcached = memcached_has_tls()
        client_checks(tap, "ringcached", pki)
        if memcached:
            client_checks(tap, "memcached", pki)
        else:
            tap.skip("memcached -Z: the same client checks", "memcached built without TLS")
        s_client_check(tap, pki)
        verify_mode_checks(tap, "ringcached", pki)
        min_version_checks(tap, "ringcached", pki, "tlsv1.3")
        min_version_checks(tap, "ringcached", pki, "3")
        if memcached:
            verify_mode_checks(tap, "memcached", pki)
            min_version_checks(tap, "memcached", pki, "3")
        refresh_checks(tap, pki, d)
        slow_reader_check(tap, pki)
        start_errors(tap, pki, d)
        stats_checks(tap, pki, memcached)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    tap.done()


main()
