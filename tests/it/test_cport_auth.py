#!/usr/bin/env python3
"""Authentication on the cluster port and on the client port
(docs/security.md; docs/cluster.md, "Cluster port admission" and
"Replication").

1. Wrong-token Hellos are throttled: 4 threads on 127.0.0.1 (where ringctl
   and the peers come from too) send Hellos with a wrong token to node a's
   cluster port as fast as the node answers, for 4 s. The node checks at
   most about one per 160 ms from that source once throttled (asserted:
   under 15 a second over the last 2 s); meanwhile `ringctl status`
   succeeds within 5 s, and a fresh Hello with the right token is
   accepted within 3 s.
2. The rc_peer challenge on the client port: replica writes are refused
   before it; `rc_peer` answers `NONCE a <32 hex>`, a fresh one each
   time; the proof (HMAC-SHA256 keyed with the token, as server/peerauth.h)
   makes the connection a peer and its rc_set is applied; the same proof
   replayed on another connection (with or without a new challenge) is
   refused and its rc_set too; a nonce is used up by a wrong proof; the
   old fixed proof gets an error that names it; replication between the
   nodes (which now authenticate this way) works: a set at a is read at b.
3. A peer's epoch far ahead is not believed: a peer connection (Hello as
   PEER with the token) whose Ping claims epoch 10^12 leaves a's
   behind_epoch at 0 (the node keeps serving) and a's log says so; a Ping
   claiming a's epoch + 5 (within the margin, HEALTH_EPOCH_MARGIN_DEFAULT
   = 1000) still makes it behind, as before.
"""
import hashlib
import hmac
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
from rctest import recv_until  # noqa: E402
from test_cport import frame, read_frame, fb, fv, one, Admin  # noqa: E402
from test_cport import HELLO, ERROR  # noqa: E402

PING, PONG = 8, 9       # proto/frame.h

FLOOD_S = 4.0
THREADS = 4
MAX_RATE = 15.0         # checks per second from one source, throttled (~6)


class WrongTokens:
    """Threads sending wrong-token Hellos; records when each was answered."""

    def __init__(self, port):
        self.port = port
        self.stop = threading.Event()
        self.answered = []      # monotonic time of each Error reply
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, daemon=True)
                        for _ in range(THREADS)]

    def start(self):
        for th in self.threads:
            th.start()
        return self

    def run(self):
        while not self.stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            except OSError:
                continue
            try:
                s.sendall(frame(HELLO, fb(1, "ringcache") + fb(2, b"not-the-token")))
                r = read_frame(s, timeout=5)
                if r is not None and r[0] == ERROR:
                    with self.lock:
                        self.answered.append(time.monotonic())
            except OSError:
                pass
            finally:
                s.close()

    def finish(self):
        self.stop.set()
        for th in self.threads:
            th.join(10)

    def rate(self, since, until):
        with self.lock:
            n = sum(1 for x in self.answered if since <= x < until)
        return n / (until - since)


def good_hello(port, timeout):
    """Seconds until a Hello with the right token was answered with a
    Hello, or None."""
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        with open(CL.token_file, "rb") as f:
            tok = f.read().strip()
        s.sendall(frame(HELLO, fb(1, "ringcache") + fb(2, tok)))
        r = read_frame(s, timeout=timeout)
        return time.monotonic() - t0 if r is not None and r[0] == HELLO else None
    finally:
        s.close()


CL = None


def token():
    with open(CL.token_file, "rb") as f:
        return f.read().strip()


def proof(node_id, nonce, peer_id, cluster=b"ringcache"):
    """server/peerauth.c: HMAC-SHA256(token, domain || length-prefixed fields)."""
    msg = b"ringcache rc_peer v2"
    for f in (cluster, node_id, nonce, peer_id):
        msg += struct.pack(">I", len(f)) + f
    return hmac.new(token(), msg, hashlib.sha256).hexdigest().encode()


def line(sock, data):
    sock.sendall(data)
    return recv_until(sock, b"\r\n", timeout=10)


def challenge(sock):
    r = line(sock, b"rc_peer\r\n").split()
    return r[2] if len(r) == 3 and r[0] == b"NONCE" and r[1] == b"a" else None


def peer_proof(t, cl):
    a, b = cl.nodes["a"], cl.nodes["b"]
    s1 = lg_connect(a)
    r = line(s1, b"rc_set k1 0 0 1 1\r\nx\r\n")
    t.ok(r.startswith(b"CLIENT_ERROR rc_set is for cluster peers"),
         "rc_set before rc_peer is refused", r)
    n1 = challenge(s1)
    n2 = challenge(lg_connect(a))
    t.ok(n1 is not None and len(n1) == 32 and n2 is not None and n1 != n2,
         "rc_peer answers NONCE a <32 hex>, a fresh nonce each time", (n1, n2))
    p1 = proof(b"a", n1, b"b")
    r = line(s1, b"rc_peer b " + p1 + b"\r\n")
    t.ok(r == b"OK\r\n", "the proof for that nonce makes the connection a peer", r)
    # An image names its epoch and sender (fenced replica writes: a key
    # whose primary is b, sent by b in epoch 1).
    own = lg.locate(cl.store_active(), ["pk%d" % i for i in range(64)])
    pk = [k for k, o in sorted(own.items()) if o[0] == "b"][0].encode()
    r = line(s1, b"rc_set " + pk + b" 0 0 99 3 1 b\r\nabc\r\n")
    t.ok(r == b"OK\r\n", "its rc_set is applied", r)

    s2 = lg_connect(a)
    r = line(s2, b"rc_peer b " + p1 + b"\r\n")
    t.ok(r.startswith(b"CLIENT_ERROR no peer challenge"),
         "the proof replayed on a new connection without a challenge is refused", r)
    n3 = challenge(s2)
    r = line(s2, b"rc_peer b " + p1 + b"\r\n")
    t.ok(n3 is not None and r == b"CLIENT_ERROR bad peer authentication\r\n",
         "the proof replayed after a new challenge is refused", r)
    r = line(s2, b"rc_peer b " + proof(b"a", n3, b"b") + b"\r\n")
    t.ok(r.startswith(b"CLIENT_ERROR no peer challenge"),
         "a nonce is used up by a wrong proof (the right one comes too late)", r)
    r = line(s2, b"rc_set pk2 0 0 99 3\r\nabc\r\n")
    t.ok(r.startswith(b"CLIENT_ERROR rc_set is for cluster peers"),
         "the replaying connection's rc_set is refused", r)
    r = line(s2, b"rc_peer 0123456789abcdef\r\n")
    t.ok(r.startswith(b"CLIENT_ERROR old peer proof"),
         "the old fixed proof gets an error that names it", r)
    n4 = challenge(s2)
    r = line(s2, b"rc_peer b " + proof(b"b", n4, b"b") + b"\r\n")
    t.ok(r == b"CLIENT_ERROR bad peer authentication\r\n",
         "a proof made for another node id is refused", r)
    for s in (s1, s2):
        s.close()

    # Replication between the nodes authenticates with the challenge.
    c = lg.Conn(a.addr)
    try:
        r = c.simple("set rk 0 0 5\r\nhello")
    finally:
        c.close()
    got = lg.read_keys(b.addr, ["rk"])
    t.ok(r == b"STORED" and got.get("rk") in (b"hello", "hello"),
         "a set at a is replicated to b (peers pass the challenge)", (r, got))


def fake_ping(port, epoch):
    """A peer connection that sends one Ping claiming epoch; True once
    its Pong came."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(frame(HELLO, fb(1, "ringcache") + fb(2, token()) + fv(3, 1) + fb(4, "zz")))
        r = read_frame(s)
        if r is None or r[0] != HELLO:
            return False
        s.sendall(frame(PING, fb(1, "zz") + fv(2, epoch) + fv(3, 1)))
        r = read_frame(s)
        return r is not None and r[0] == PONG
    finally:
        s.close()


def far_epoch(t, cl):
    a = cl.nodes["a"]
    cport = a.port + 10000
    adm = Admin(cport, token())
    try:
        st = adm.status()
        active = one(st, 3)
        t.ok(fake_ping(cport, 10 ** 12), "a fake peer's Ping claiming epoch 10^12 is answered")
        st = adm.status()
        t.ok(one(st, 18) == 0 and one(st, 3) == active,
             "a is not behind after it (behind_epoch 0, still at epoch %d)" % active,
             {k: st[k] for k in (3, 18) if k in st})
        r = lg.Conn(a.addr)
        try:
            got = r.simple("set fk 0 0 1\r\nx")
        finally:
            r.close()
        t.ok(got == b"STORED", "a still serves writes", got)
        t.ok(lg.wait_for(lambda: b"beyond the highest this node knows" in
                         open(a.log, "rb").read(), 5),
             "a logs the ignored claim", a.tail(5))
        t.ok(fake_ping(cport, active + 5), "a Ping claiming epoch %d is answered" % (active + 5))
        ok = lg.wait_for(lambda: one(adm.status(), 18) == active + 5, 5)
        t.ok(ok, "an epoch within the margin still makes a behind (%d)" % (active + 5),
             one(adm.status(), 18))
    finally:
        adm.close()


def lg_connect(node):
    s = socket.create_connection(node.addr, timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def throttle(t, cl):
    a = cl.nodes["a"]
    cport = a.port + 10000
    flood = WrongTokens(cport).start()
    t0 = time.monotonic()
    try:
        lg.wait_for(lambda: time.monotonic() - t0 >= 1.0, 5)
        s0 = time.monotonic()
        rc, out, err = cl.ctl("status", timeout=30)
        took = time.monotonic() - s0
        t.ok(rc == 0 and took < 5.0,
             "ringctl status succeeds during the wrong-token flood (%.2f s)" % took,
             (rc, lg.tail(out), lg.tail(err)))
        g = good_hello(cport, 10)
        t.ok(g is not None and g < 3.0,
             "a Hello with the right token is accepted during the flood (%s s)"
             % (None if g is None else "%.2f" % g))
        lg.wait_for(lambda: time.monotonic() - t0 >= FLOOD_S, FLOOD_S + 5)
    finally:
        flood.finish()
    end = time.monotonic()
    r = flood.rate(end - 2.0, end)
    t.ok(len(flood.answered) > 0 and r < MAX_RATE,
         "wrong-token Hellos from one source are throttled: %.1f/s over the last 2 s "
         "(%d answered in %.1f s)" % (r, len(flood.answered), end - t0))
    t.ok(a.alive(), "node a still runs")


def scenario(t):
    global CL
    cl = CL = lg.Cluster(replicas=2, node_args=["-v"])
    try:
        for i in ("a", "b"):
            cl.add(i)
        rc, out, err = cl.ctl("init", "--members", cl.write_members(["a", "b"]))
        conv = cl.converged(1, ["a", "b"])
        if not t.ok(rc == 0 and all(v == (1, 0) for v in conv.values()),
                    "2 nodes, R=2: ringctl init, every node at epoch 1", (rc, err, conv)):
            return
        throttle(t, cl)
        peer_proof(t, cl)
        far_epoch(t, cl)
    finally:
        lg.close_cluster(t, cl)


def main():
    t = lg.Tap()
    lg.watchdog(150)
    why = lg.supports_cluster()
    if why:
        t.skip("cluster port authentication", why)
    else:
        lg.run_tap(t, scenario)
    t.done()


if __name__ == "__main__":
    main()
