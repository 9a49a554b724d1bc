#!/usr/bin/env python3
"""The cluster limits (docs/operations.md, "Limits"), each pushed past,
with the cluster port driven by test_cport.py's small admin client.

1. --max-frame-bytes 1m on node a of {a, b}: an authenticated admin or
   peer connection whose frame header announces 1 MiB + 1 gets an Error
   "frame payload too large" and is closed at once (its payload never
   sent); a frame of exactly 1 MiB is read and answered; b (default 4m)
   reads the 1 MiB + 1 one. Meanwhile 200 oversized headers and 16
   frames of 1 MiB in flight: a client of a's client port and another
   admin connection are served within a short deadline, a and b keep
   seeing each other up (heartbeats on their own peer connections), and
   a's RSS stays under baseline + 32 MiB.
2. --handoff-window 4: a source holding 96 MiB copies half of it to a
   joining node that is stopped (SIGSTOP) mid-copy, with the rate limit
   lifted: the source's unacknowledged batches stay at 4 or fewer, it
   sends at most a window more while the destination is stopped, and its
   RSS stays under baseline + 8 MiB (unbounded, it would queue the 48 MiB
   moving: before this limit, a walk step of 256 64 KiB items queued 16 MiB);
   a client of the source is served meanwhile. After SIGCONT the copy
   completes, fences and commits, and every key is read back from its
   owner at the new epoch: nothing lost, updates made during the stop
   there, deletes gone.

Under ASan+UBSan (rctest.sanitized()) the nodes run with a 16 MiB
quarantine and each RSS bound is doubled plus 24 MiB; deadlines are 4x.
"""
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import (Tap, Node, wait_until, recv_until, free_cluster_ports, sanitized,  # noqa: E402
                    rss_kb, rss_bound_kb as bound_kb, RssSampler as Rss)
from test_cport import (frame, read_frame, decode, one, fb, fv, membership, Admin,  # noqa: E402
                        Client, closed_by_peer, cmd, TOKEN, CLUSTER_ID, HELLO, ADMIN_REQUEST,
                        ADMIN_REPLY, BATCH, ERROR)

SAN = sanitized()
SLOW = 4 if SAN else 1
PROBE_DEADLINE = 2.0 * SLOW
if SAN:
    opts = os.environ.get("ASAN_OPTIONS", "")
    os.environ["ASAN_OPTIONS"] = (opts + ":" if opts else "") + "quarantine_size_mb=16"

tap = Tap()


def check_rss(r, extra_mib, what):
    b = bound_kb(r.base, extra_mib)
    tap.ok(r.peak <= b, "%s: RSS baseline %d KiB, peak %d KiB, bound %d KiB"
           % (what, r.base, r.peak, b))


class Prober(threading.Thread):
    """Another client of a node's client port (declaring epoch `epoch`, so
    it is served where it asks or told MOVED): set/get of `key` until
    stop(), each within PROBE_DEADLINE."""

    def __init__(self, port, key, epoch=0):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=PROBE_DEADLINE)
        if epoch:
            cmd(self.sock, b"epoch %d\r\n" % epoch)
        self.key = key
        self.rounds, self.errors, self.worst = 0, [], 0.0
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            v = b"%d" % self.rounds
            t0 = time.monotonic()
            try:
                self.sock.sendall(b"set %s 0 0 %d\r\n%s\r\nget %s\r\n"
                                  % (self.key, len(v), v, self.key))
                r = recv_until(self.sock, b"END\r\n", timeout=PROBE_DEADLINE)
            except OSError as e:
                r = repr(e).encode()
            self.worst = max(self.worst, time.monotonic() - t0)
            want = b"STORED\r\nVALUE %s 0 %d\r\n%s\r\nEND\r\n" % (self.key, len(v), v)
            if r != want:
                self.errors.append(r[:200])
                if len(self.errors) > 3:
                    return
            self.rounds += 1
            time.sleep(0.02)

    def stop(self):
        self.halt.set()
        self.join(PROBE_DEADLINE + 5)
        self.sock.close()


def check_served(p, what):
    tap.ok(not p.errors and p.rounds > 0 and p.worst < PROBE_DEADLINE,
           "%s: a client served throughout (%d set+get, worst %.3f s, deadline %.1f s)"
           % (what, p.rounds, p.worst, PROBE_DEADLINE), p.errors)


def start_node(tmp, nid, extra=()):
    sd = os.path.join(tmp, nid)
    os.makedirs(sd, exist_ok=True)
    for _ in range(5):
        n = Node(args=["-t", "2", "--id", nid, "--state-dir", sd,
                       "--token-file", os.path.join(tmp, "token")] + list(extra),
                 port=free_cluster_ports(), stderr=os.path.join(tmp, nid + ".log"))
        try:
            n.start()
        except RuntimeError:
            continue
        n.nid, n.cport, n.addr = nid, n.port + 10000, "127.0.0.1:%d" % n.port
        if wait_until(lambda: _can_connect(n.cport), 5 * SLOW):
            return n
        n.stop()
    raise RuntimeError("node %s did not start" % nid)


def _can_connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def cport_conn(node, role=None):
    """An authenticated cluster-port connection (admin, or peer when role
    is 1)."""
    s = socket.create_connection(("127.0.0.1", node.cport), timeout=10 * SLOW)
    hello = fb(1, "ringcache") + fb(2, TOKEN)
    if role:
        hello += fv(3, role) + fb(4, "limits-test")
    s.sendall(frame(HELLO, hello))
    r = read_frame(s, 10 * SLOW)
    if r is None or r[0] != HELLO:
        raise RuntimeError("hello refused: %r" % (r,))
    return s


def header(ftype, length):
    return b"RC" + bytes([1, ftype]) + struct.pack(">QI", CLUSTER_ID, length)


def padded_status(length):
    """An AdminRequest{status} of exactly `length` bytes: the request, then
    an unknown field (15) of padding, which protobuf skips."""
    n = length - 2 - 1 - 3                  # status field, tag, 3-byte length
    body = b"\x32\x00" + b"\x7a" + bytes([(n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80,
                                          n >> 14]) + b"x" * n
    assert len(body) == length and n < (1 << 21)
    return body


def peers_up(node):
    """{peer id: state} as node's heartbeats see them (1 = up)."""
    ad = Admin(node.cport)
    st = ad.status()
    ad.close()
    return {one(decode(p), 1, b"").decode(): one(decode(p), 2) for p in st.get(16, [])}


def transfers(ad):
    return [decode(t) for t in ad.status().get(10, [])]


# ---- 1. --max-frame-bytes ----------------------------------------------
def case_frames(tmp, nodes):
    limit = 1 << 20
    a = start_node(tmp, "a", ["-m", "64", "--max-frame-bytes", "1m"])
    nodes.append(a)
    b = start_node(tmp, "b", ["-m", "64"])
    nodes.append(b)
    m1 = membership(1, [("a", a.addr), ("b", b.addr)])
    for n in (a, b):
        ad = Admin(n.cport)
        ok, err, _ = ad.request(4, fb(2, m1))
        ad.close()
        tap.ok(ok, "init {a, b} on %s" % n.nid, err)
    tap.ok(wait_until(lambda: peers_up(a).get("b") == 1 and peers_up(b).get("a") == 1,
                      10 * SLOW), "a and b see each other up")
    c = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    tap.eq(cmd(c, b"stats settings\r\n", b"END\r\n").split(b"STAT max_frame_bytes ")[1]
           .split(b"\r\n")[0], b"%d" % limit, "stats settings: max_frame_bytes 1048576")
    c.close()

    for role, ftype, what in ((None, ADMIN_REQUEST, "admin"), (1, BATCH, "peer")):
        s = cport_conn(a, role)
        t0 = time.monotonic()
        s.sendall(header(ftype, limit + 1))
        r = read_frame(s, 10 * SLOW)
        tap.ok(r is not None and r[0] == ERROR and b"too large" in r[1] and closed_by_peer(s),
               "%s connection, a header of %d bytes: Error \"frame payload too large\" and "
               "closed, %.3f s after the header alone" % (what, limit + 1, time.monotonic() - t0),
               r)
        s.close()
    s = cport_conn(a)
    s.sendall(frame(ADMIN_REQUEST, padded_status(limit)))
    r = read_frame(s, 10 * SLOW)
    tap.ok(r is not None and r[0] == ADMIN_REPLY and one(decode(r[1]), 1) == 1,
           "a frame of exactly 1 MiB (a padded Status request) is read and answered", r)
    s.close()
    s = cport_conn(b)
    s.sendall(frame(ADMIN_REQUEST, padded_status(limit + 1)))
    r = read_frame(s, 10 * SLOW)
    tap.ok(r is not None and r[0] == ADMIN_REPLY,
           "b (default 4m) reads and answers the 1 MiB + 1 one", r)
    s.close()

    # The abuse: oversized headers and 1 MiB frames, all at once.
    base = rss_kb(a.pid)
    r = Rss(a.pid, base)
    r.start()
    probe = Prober(a.port, b"probe-a", epoch=0)
    probe.start()
    errs = []
    admin_worst = [0.0]
    halt = threading.Event()

    def admin_prober():
        ad = Admin(a.cport)
        while not halt.is_set():
            t0 = time.monotonic()
            try:
                st = ad.status()
                if one(st, 1) != b"a":
                    errs.append("status: %r" % st)
            except (OSError, RuntimeError) as e:
                errs.append(repr(e))
                return
            admin_worst[0] = max(admin_worst[0], time.monotonic() - t0)
            time.sleep(0.02)
        ad.close()
    at = threading.Thread(target=admin_prober, daemon=True)
    at.start()
    big = [cport_conn(a, 1 if i % 2 else None) for i in range(16)]
    for i, s in enumerate(big):
        s.sendall(frame(BATCH if i % 2 else ADMIN_REQUEST, padded_status(limit)))
    refused = 0
    for i in range(200):
        s = cport_conn(a, 1 if i % 2 else None)
        s.sendall(header(BATCH if i % 2 else ADMIN_REQUEST, limit + 1 + i * 4096))
        rr = read_frame(s, 10 * SLOW)
        refused += rr is not None and rr[0] == ERROR and b"too large" in rr[1] and \
            closed_by_peer(s)
        s.close()
    answered = 0
    for s in big:
        rr = read_frame(s, 10 * SLOW)
        # Admin: a Status reply; peer: the padded request is no HandoffBatch
        # (Error "bad HandoffBatch" or the like), but it was read whole.
        answered += rr is not None and (rr[0] == ADMIN_REPLY or
                                        (rr[0] == ERROR and b"too large" not in rr[1]))
        s.close()
    halt.set()
    at.join(10 * SLOW)
    probe.stop()
    r.stop()
    tap.eq(refused, 200, "200 oversized headers (admin and peer): each refused and closed")
    tap.eq(answered, 16, "16 frames of 1 MiB in flight meanwhile: each read whole")
    check_served(probe, "--max-frame-bytes: a's client port")
    tap.ok(not errs and admin_worst[0] < PROBE_DEADLINE,
           "another admin connection answered throughout (worst Status %.3f s)" % admin_worst[0],
           errs)
    tap.ok(peers_up(a).get("b") == 1 and peers_up(b).get("a") == 1,
           "a and b still see each other up (their own peer connections unaffected)")
    check_rss(r, 32, "--max-frame-bytes (a)")


# ---- 2. --handoff-window -----------------------------------------------
def load(node, keys, value_of):
    s = socket.create_connection(("127.0.0.1", node.port), timeout=30)
    cmd(s, b"epoch 1\r\n")
    for i in range(0, len(keys), 32):
        batch = keys[i:i + 32]
        s.sendall(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(value_of(k)), value_of(k))
                           for k in batch))
        r = recv_until(s, b"STORED\r\n" * len(batch), timeout=30 * SLOW)
        if r != b"STORED\r\n" * len(batch):
            s.close()
            return False
    s.close()
    return True


def case_handoff(tmp, nodes):
    window = 4
    src = start_node(tmp, "s", ["-m", "256", "--handoff-window", str(window)])
    nodes.append(src)
    dst = start_node(tmp, "j", ["-m", "256"])
    nodes.append(dst)
    ad_s, ad_d = Admin(src.cport), Admin(dst.cport)
    m1 = membership(1, [("s", src.addr)])
    ok, err, _ = ad_s.request(4, fb(2, m1))
    tap.ok(ok, "init {s}", err)
    vlen = 64 << 10
    keys = [b"h%05d" % i for i in range(1536)]             # 96 MiB

    def v1(k):
        return (k + b":v1:") * (vlen // (len(k) + 4))
    tap.ok(load(src, keys, v1), "%d keys of %d KiB written to s" % (len(keys), vlen >> 10))
    base = rss_kb(src.pid)

    m2 = membership(2, [("s", src.addr), ("j", dst.addr)])
    tok = b"limits-join"
    for nid, ad in (("s", ad_s), ("j", ad_d)):
        ok, err, _ = ad.request(1, fb(1, m2) + fb(2, tok) + fv(3, 1))
        tap.ok(ok, "prepare the join of j on %s" % nid, err)
    # Slowly at first (1 MiB/s), so that j can be stopped mid-copy.
    for nid, ad in (("s", ad_s), ("j", ad_d)):
        ok, err, _ = ad.request(2, fb(1, tok) + fv(2, 1 << 20))
        tap.ok(ok, "start copy on %s at 1 MiB/s" % nid, err)
    tap.ok(wait_until(lambda: any(one(t, 2) > 0 for t in transfers(ad_s)), 10 * SLOW),
           "the copy to j has started")
    r = Rss(src.pid, base)
    r.start()
    sent0 = max(one(t, 3) for t in transfers(ad_s))
    os.kill(dst.pid, signal.SIGSTOP)
    try:
        probe = Prober(src.port, b"probe-s", epoch=1)
        probe.start()
        ok, err, _ = ad_s.request(2, fb(1, tok) + fv(2, 0))
        tap.ok(ok, "j stopped; the rate limit lifted on s (a fast sender)", err)
        # Writes to moving keys while j is stopped: tracked, re-sent later.
        upd, dele = keys[:100], keys[100:150]
        c = socket.create_connection(("127.0.0.1", src.port), timeout=10)
        cmd(c, b"epoch 1\r\n")
        bad = [k for k in upd if cmd(c, b"set %s 0 0 5\r\nv2-ok\r\n" % k) != b"STORED\r\n"]
        bad += [k for k in dele if cmd(c, b"delete %s\r\n" % k) != b"DELETED\r\n"]
        c.close()
        tap.eq(bad, [], "100 updates and 50 deletes on s while j is stopped")
        samples = []
        t_end = time.monotonic() + 3.0 * SLOW
        while time.monotonic() < t_end:
            t = transfers(ad_s)
            samples.append((one(t[0], 3), one(t[0], 8)) if t else (None, None))
            time.sleep(0.1)
        probe.stop()
        r.stop()
        sent = [x[0] for x in samples]
        tap.ok(samples and all(x[1] is not None and x[1] <= window for x in samples),
               "while j is stopped: s has at most %d batches unacknowledged (max seen %s)"
               % (window, max((x[1] for x in samples if x[1] is not None), default=None)))
        half = len(sent) // 2
        # What j had acknowledged before it stopped frees at most the
        # window again: 4 batches of at most 256 KiB of keys and values.
        tap.ok(sent and sent[half] == sent[-1] and sent[-1] - sent0 <= 2 * window * (256 << 10),
               "and sends nothing more once they are out: %d bytes more than before the stop, "
               "then none over the last %.1f s (of about 48 MiB moving)"
               % (sent[-1] - sent0, 1.5 * SLOW))
        check_served(probe, "--handoff-window: s's client port")
        # In flight: 4 batches (1 MiB) in s's output and the kernel's
        # buffers, one being built; unbounded, it would queue the 48 MiB.
        check_rss(r, 8, "--handoff-window (s, the sender, with j stopped)")
    finally:
        os.kill(dst.pid, signal.SIGCONT)

    def copied():
        t = transfers(ad_s)
        return t and one(t[0], 6) and one(t[0], 8) == 0 and one(t[0], 9, b"") == b""
    tap.ok(wait_until(copied, 60 * SLOW, 0.1), "after SIGCONT the copy completes: %r"
           % [(one(t, 2), one(t, 3), one(t, 9, b"")) for t in transfers(ad_s)])
    for nid, ad in (("s", ad_s), ("j", ad_d)):
        ok, err, st = ad.request(3, fb(1, tok), timeout=60 * SLOW)
        tap.ok(ok, "fence on %s" % nid, err)
    for nid, ad in (("j", ad_d), ("s", ad_s)):
        ok, err, st = ad.request(4, fb(1, tok), timeout=60 * SLOW)
        tap.ok(ok and one(st, 3) == 2, "commit on %s" % nid, err)
    cli = Client([src, dst], 2)
    lost, wrong, where = [], [], {}
    for k in keys:
        addr, v = cli.get(k, src.addr)
        where[addr] = where.get(addr, 0) + 1
        want = b"v2-ok" if k in upd else None if k in dele else v1(k)
        if want is None and v is not None:
            wrong.append((k, "resurrected"))
        elif want is not None and v is None:
            lost.append(k)
        elif v != want:
            wrong.append((k, v[:20] if v else v))
    cli.close()
    tap.eq(lost, [], "no key lost")
    tap.eq(wrong, [], "updates made during the stop are there, deletes gone")
    tap.ok(0.3 < where.get(dst.addr, 0) / len(keys) < 0.7,
           "j owns %d of the %d keys" % (where.get(dst.addr, 0), len(keys)))
    st = ad_d.status()
    tap.ok(one(st, 11) > 0, "j imported %d items, %d bytes" % (one(st, 11), one(st, 12)))
    ad_s.close()
    ad_d.close()


def main():
    tmp = tempfile.mkdtemp(prefix="rc_limits.")
    nodes = []
    try:
        with open(os.path.join(tmp, "token"), "wb") as f:
            f.write(TOKEN + b"\n")
        case_frames(tmp, nodes)
        case_handoff(tmp, nodes)
        for n in list(nodes):
            rc = n.stop()
            log = open(os.path.join(tmp, n.nid + ".log"), errors="replace").read()
            tap.ok(rc == 0 and "Sanitizer" not in log and "runtime error" not in log,
                   "node %s exits 0 after SIGTERM" % n.nid, "rc %r\n%s" % (rc, log[-3000:]))
    finally:
        for n in nodes:
            if n.alive():
                try:
                    os.kill(n.pid, signal.SIGCONT)
                except OSError:
                    pass
            n.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    tap.done()


if __name__ == "__main__":
    main()
