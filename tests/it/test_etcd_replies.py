#!/usr/bin/env python3
"""What the etcd backend of the membership store does with replies a real
etcd never sends (found by tests/fuzz/etcd_fuzz): a fake etcd JSON gateway
here answers JSON nulls where the gateway puts strings. A node watching
that store logs the bad reply and keeps serving; ringctl fails with one
clear line, not a signal. TAP."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import Tap, Node, request, wait_until, RINGCACHED  # noqa: E402

RINGCTL = os.path.join(os.path.dirname(os.path.dirname(RINGCACHED)), "client", "ringctl")
HDR = {"revision": "5"}
# A range reply whose kv has a mod_revision but a JSON null for its value.
NULL_VALUE = {"header": HDR, "kvs": [{"mod_revision": "5", "value": None}], "count": "1"}
tap = Tap()


class FakeEtcd:
    """A scripted etcd v3 JSON gateway on a free loopback port: replies maps
    a path to a JSON-able reply (bytes: a plain-text HTTP 400, as etcd's
    gateway refuses some requests); every request's path is recorded."""

    def __init__(self, replies):
        self.replies = replies
        self.paths = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                fake.paths.append(self.path)
                reply = fake.replies.get(self.path, {"header": HDR})
                text = isinstance(reply, bytes)  # etcd's plain-text errors: HTTP 400
                body = reply if text else json.dumps(reply).encode()
                self.send_response(400 if text else 200)
                self.send_header("Content-Type", "text/plain" if text else "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
        return False

    def spec(self, extra=""):
        return "etcd://127.0.0.1:%d/rc%s" % (self.server.server_address[1], extra)


def ringctl(spec, token_file, *args):
    return subprocess.run([RINGCTL, "--store", spec, "--token-file", token_file] + list(args),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def fails_cleanly(r, what, needle):
    tap.ok(r.returncode > 0, "%s: ringctl exits with an error, not a signal" % what,
           "exit %d\n%s" % (r.returncode, r.stderr[-2000:]))
    tap.ok(needle in r.stderr, "%s: it says %r" % (what, needle), r.stderr[-2000:])


work = tempfile.mkdtemp(prefix="rc-etcd-replies-")
try:
    token = os.path.join(work, "token")
    with open(token, "w") as f:
        f.write("fuzz-admin-token\n")
    password = os.path.join(work, "password")
    with open(password, "w") as f:
        f.write("secret\n")

    # 1. A node watching the store: its read of active.members gets a null
    # value (it used to crash on it, strlen(NULL)).
    with FakeEtcd({"/v3/kv/range": NULL_VALUE,
                   "/v3/lease/grant": {"header": HDR, "ID": "77", "TTL": "10"}}) as etcd:
        log = os.path.join(work, "node.log")
        state = os.path.join(work, "state")
        os.mkdir(state)
        node = Node(args=["-t", "1", "--id", "a", "--state-dir", state, "--token-file", token,
                          "--store", etcd.spec()], stderr=log)
        try:
            node.start(timeout=30)
            saw = wait_until(lambda: "/v3/kv/range" in etcd.paths, 30)
            tap.ok(saw, "node: it read active.members from the store", etcd.paths)

            def logged():
                with open(log) as f:
                    return "the value is not base64" in f.read()
            tap.ok(wait_until(logged, 30), "node: it logs that the value is not base64",
                   open(log).read()[-2000:])
            tap.ok(node.alive(), "node: still running after the null value")
            try:
                s = node.connect()
                r = request(s, b"version\r\n", b"\r\n", timeout=10)
                s.close()
            except OSError as e:
                r = repr(e).encode()
            # Without a membership a cluster node answers no keys; it answers.
            tap.ok(r.startswith(b"VERSION "), "node: still serving", r)
        finally:
            node.stop()

    # 2. ringctl status reads the records in one txn: a null value there.
    txn = {"header": HDR, "succeeded": True,
           "responses": [{"response_range": NULL_VALUE}, {"response_range": {"header": HDR}},
                         {"response_range": {"header": HDR}}]}
    with FakeEtcd({"/v3/kv/range": NULL_VALUE, "/v3/kv/txn": txn}) as etcd:
        fails_cleanly(ringctl(etcd.spec(), token, "status"), "status, null value",
                      "the value is not base64")

    # 3. etcd auth: an authenticate reply whose token is null.
    with FakeEtcd({"/v3/auth/authenticate": {"header": HDR, "token": None}}) as etcd:
        fails_cleanly(ringctl(etcd.spec("?user=root&password-file=" + password), token,
                              "status"), "auth, null token", "no token in the reply")

    # 4. etcd's gateway refuses in plain text (a client certificate's
    # CommonName with auth on): the reason is quoted, for the admin and for
    # a client made from the store (ringctl get --store).
    cn = b"CommonName of client sending a request against gateway will be ignored\n"
    with FakeEtcd({"/v3/auth/authenticate": cn}) as etcd:
        spec = etcd.spec("?user=root&password-file=" + password)
        fails_cleanly(ringctl(spec, token, "status"), "auth, plain-text refusal",
                      "HTTP 400, not a JSON object (unexpected character): CommonName of client")
        fails_cleanly(ringctl(spec, token, "get", "k"), "client from the store, plain-text refusal",
                      "CommonName of client")
finally:
    shutil.rmtree(work, ignore_errors=True)
tap.done()
