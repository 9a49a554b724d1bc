#!/usr/bin/env python3
"""--metrics-auth: GET /metrics needs HTTP basic auth of a user:password
line of the file (the -Y format): no credentials, a wrong password, an
unknown user or garbage get 401 with WWW-Authenticate; the right ones get
the page; GET /ready stays open for probes. A bad file stops the start
naming file:line; --metrics-auth without --metrics is refused. TAP."""
import base64
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import RINGCACHED, Node, Tap, free_port, wait_until  # noqa: E402

tap = Tap()


def get(port, path, cred=None, raw=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path))
    if cred is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(cred.encode()).decode())
    if raw is not None:
        req.add_header("Authorization", raw)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace"), dict(e.headers)


d = tempfile.mkdtemp(prefix="rc-mauth-")
auth = os.path.join(d, "scrapers")
with open(auth, "w") as f:
    f.write("prom:s3cret-pass\nother:x\n")
mport = free_port()
node = Node(args=["-t", "1", "--metrics", "127.0.0.1:%d" % mport, "--metrics-auth", auth])
try:
    node.start()
    wait_until(lambda: get(mport, "/ready")[0] == 200, 10)
    code, body, hdr = get(mport, "/metrics")
    tap.ok(code == 401 and hdr.get("WWW-Authenticate", "").startswith("Basic"),
           "no credentials: 401 with WWW-Authenticate: Basic", (code, hdr))
    bad = [get(mport, "/metrics", "prom:wrong")[0], get(mport, "/metrics", "nobody:s3cret-pass")[0],
           get(mport, "/metrics", "prom")[0], get(mport, "/metrics", raw="Basic !!!notb64")[0],
           get(mport, "/metrics", raw="Bearer abc")[0]]
    tap.ok(bad == [401] * 5, "wrong password, unknown user, no colon, bad base64, another "
           "scheme: 401 each", bad)
    code, body, _ = get(mport, "/metrics", "prom:s3cret-pass")
    tap.ok(code == 200 and "memcached_up 1" in body, "the right user and password: the page",
           (code, body[:200]))
    tap.ok(get(mport, "/metrics", "other:x")[0] == 200, "any user of the file")
    code, body, _ = get(mport, "/ready")
    tap.ok(code == 200 and body.startswith("ready"), "GET /ready needs no credentials",
           (code, body))
finally:
    node.stop()

r = subprocess.run([RINGCACHED, "-p", str(free_port()), "--metrics-auth", auth],
                   capture_output=True, text=True, timeout=20)
tap.ok(r.returncode != 0 and "--metrics-auth needs --metrics" in r.stderr,
       "--metrics-auth without --metrics is refused", (r.returncode, r.stderr))
badf = os.path.join(d, "bad")
with open(badf, "w") as f:
    f.write("prom:ok\nno-colon-here\n")
r = subprocess.run([RINGCACHED, "-l", "127.0.0.1", "-p", str(free_port()), "--metrics",
                    "127.0.0.1:%d" % free_port(), "--metrics-auth", badf],
                   capture_output=True, text=True, timeout=20)
tap.ok(r.returncode != 0 and (badf + ":2:") in r.stderr,
       "a malformed file stops the start, naming file:line", (r.returncode, r.stderr))
subprocess.run(["rm", "-rf", d])
tap.done()
