#!/usr/bin/env python3
"""GET /ready on the metrics port (server/ready.c): 200 only for a node
serving, 503 with a one-line reason otherwise, and the ringcache_ready
gauge agreeing. A plain node (no cluster) answers 200 "ready: a single
node", and 503 "shutting down" (memcached_accepting_connections 0) after
SIGTERM while it still drains a reply to a client. A 3-node R=2 cluster: 503 "no membership yet" before ringctl init,
200 "member" on all three after it; b killed and restarted on its state
directory comes back recovering (503) until `ringctl repair b`, then 200;
c in a leave stopped after its FENCE is 503 "leaving" (a and b stay 200),
200 again after the abort, and 503 "not a member of epoch N" once a leave
committed; a started node never joined is 503. Other methods answer 405,
other paths 404."""
import os
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
from test_metrics import http_req, parse  # noqa: E402

IDS = ["a", "b", "c"]


def ready(port):
    """(status, body line) of GET /ready; (None, error) when unreachable."""
    try:
        st, body, _ = http_req(port, "GET", "/ready")
    except OSError as e:
        return None, str(e)
    return st, body


def gauge(port, name="ringcache_ready"):
    try:
        return parse(http_req(port)[1]).get((name, ()))
    except OSError:
        return None


def wait_ready(port, status, words, timeout=20.0):
    """Poll GET /ready until it answers status with words in its line;
    returns the last answer."""
    last = [None]

    def poll():
        last[0] = ready(port)
        return last[0][0] == status and words in last[0][1]
    lg.wait_for(poll, timeout, 0.05)
    return last[0]


def answered(port, timeout=10.0):
    """The first answer of GET /ready once the metrics port listens (it
    opens a moment after the client port)."""
    last = [None]

    def poll():
        last[0] = ready(port)
        return last[0][0] is not None
    lg.wait_for(poll, timeout, 0.02)
    return last[0]


def one_line(body):
    return body.endswith("\n") and body.count("\n") == 1


def plain(t):
    cl = lg.Cluster(plain=True, mem=16)
    try:
        port = lg.free_port_pair(offset=0)
        cl.node_args = ["--metrics", "127.0.0.1:%d" % port]
        cl.add("p")
        st, body = answered(port)
        t.ok(st == 200 and body == "ready: a single node (no cluster)\n",
             "plain node: GET /ready 200 \"ready: a single node (no cluster)\"", (st, body))
        t.ok(gauge(port) == 1, "plain node: ringcache_ready 1", gauge(port))
        t.ok(http_req(port, "POST", "/ready")[0] == 405
             and http_req(port, "GET", "/readyz")[0] == 404,
             "POST /ready: 405; GET /readyz: 404")

        # SIGTERM while a client that does not read is owed 16 MiB: the
        # node flushes it (up to 5 s) before it exits; meanwhile it is not
        # ready and accepts nothing.
        node = cl.nodes["p"]
        s = socket.create_connection(node.addr, timeout=5)
        v = b"z" * (256 * 1024)
        s.sendall(b"set v 0 0 %d\r\n" % len(v) + v + b"\r\n")
        t.ok(s.recv(64) == b"STORED\r\n", "plain node: set 256 KiB")
        s.sendall(b"get" + b" v" * 64 + b"\r\n")
        t.ok(lg.wait_for(lambda: int(lg.node_stats(node.addr)["bytes_written"]) > 64 * 1024, 5.0),
             "the node is writing a 64-key multi-get the client does not read")
        os.kill(node.pid, signal.SIGTERM)
        got = wait_ready(port, 503, "shutting down", timeout=4.0)
        acc = gauge(port, "memcached_accepting_connections")
        t.ok(got == (503, "not ready: shutting down\n") and acc == 0,
             "SIGTERM: 503 \"not ready: shutting down\", memcached_accepting_connections 0 "
             "while the reply drains", (got, acc))
        n = 0
        s.settimeout(10)
        while True:
            d = s.recv(1 << 20)
            if not d:
                break
            n += len(d)
        s.close()
        try:  # no second SIGTERM: wait for the first to end it
            node.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        rc = node.stop()
        t.ok(n == 64 * (len(b"VALUE v 0 %d\r\n" % len(v)) + len(v) + 2) + 5 and rc == 0,
             "the client gets every byte, the node exits 0", (n, rc))
    finally:
        lg.close_cluster(t, cl)


def cluster(t):
    cl = lg.Cluster(replicas=2, mem=32)
    mports = {}

    def start(nid):
        mports.setdefault(nid, lg.free_port_pair(offset=0))
        cl.node_args = ["--metrics", "127.0.0.1:%d" % mports[nid]]
        if nid in cl.nodes:
            return cl.nodes[nid].start()
        return cl.add(nid)
    try:
        for nid in IDS:
            start(nid)
        st, body = answered(mports["a"])
        t.ok(st == 503 and "no membership yet" in body and one_line(body)
             and gauge(mports["a"]) == 0,
             "before ringctl init: 503, one line \"... no membership yet ...\", "
             "ringcache_ready 0", (st, body, gauge(mports["a"])))
        rc, out, err = cl.ctl("init", "--members", cl.write_members(IDS))
        t.ok(rc == 0, "ringctl init: exit 0", (rc, err[-500:]))
        got = {nid: wait_ready(mports[nid], 200, "member") for nid in IDS}
        t.ok(all(v[0] == 200 and "of epoch 1 (3 members)" in v[1] and one_line(v[1])
                 for v in got.values()) and all(gauge(mports[n]) == 1 for n in IDS),
             "after init: 200 \"ready: member N of epoch 1 (3 members)\" on a, b and c, "
             "ringcache_ready 1", got)

        # Keys at b, so its restart has something to be repaired with.
        keys = ["rk-%d" % i for i in range(200)]
        c = lg.Conn(cl.nodes["a"].addr, 5.0)
        try:
            stored = [c.store("set", k, b"v") for k in keys]
        finally:
            c.close()
        t.ok(all(s == b"STORED" for s in stored), "200 keys set through a")

        cl.nodes["b"].stop(signal.SIGKILL)
        start("b")
        st, body = answered(mports["b"])
        t.ok(st == 503 and "recovering" in body and "ringctl repair" in body
             and gauge(mports["b"]) == 0,
             "b killed and restarted: 503 \"... recovering ... (ringctl repair)\", "
             "ringcache_ready 0", (st, body))
        still = wait_ready(mports["b"], 200, "member", timeout=1.5)
        t.ok(still[0] == 503, "b stays 503 while nobody repairs it (1.5 s)", still)
        t.ok(all(ready(mports[n])[0] == 200 for n in ("a", "c")), "a and c stay 200")
        rc, out, err = cl.ctl("repair", "b")
        t.ok(rc == 0, "ringctl repair b: exit 0", (rc, err[-800:]))
        ep = cl.store_epoch()
        got = wait_ready(mports["b"], 200, "of epoch %d" % ep)
        t.ok(got[0] == 200 and gauge(mports["b"]) == 1,
             "after the repair: b 200 \"ready: member ... of epoch %d\", ringcache_ready 1"
             % ep, got)

        # A leave of c stopped right after its FENCE: c is being removed.
        rc, out, err = cl.ctl("leave", "c", env={"RINGCTL_EXIT_AFTER": "fence"})
        t.ok(rc == 4, "ringctl leave c stopped after FENCE (exit 4)", (rc, err[-800:]))
        got = wait_ready(mports["c"], 503, "leaving")
        t.ok(got[0] == 503 and "pending epoch %d removes this node (fenced)" % (ep + 1)
             in got[1], "c fenced away: 503 \"... leaving: pending epoch %d removes this node "
             "(fenced)\"" % (ep + 1), got)
        t.ok(all(ready(mports[n])[0] == 200 for n in ("a", "b")), "a and b stay 200 meanwhile",
             {n: ready(mports[n]) for n in ("a", "b")})
        rc, out, err = cl.ctl("abort")
        t.ok(rc == 0, "ringctl abort: exit 0", (rc, err[-800:]))
        got = wait_ready(mports["c"], 200, "member")
        t.ok(got[0] == 200, "after the abort: c 200 again", got)

        rc, out, err = cl.ctl("leave", "c")
        ep = cl.store_epoch()
        t.ok(rc == 0, "ringctl leave c: exit 0, epoch %d" % ep, (rc, err[-800:]))
        got = wait_ready(mports["c"], 503, "not a member")
        member = {n: gauge(mports[n], "ringcache_cluster_member") for n in IDS}
        t.ok(got[0] == 503 and got[1] == "not ready: not a member of epoch %d\n" % ep
             and member == {"a": 1, "b": 1, "c": 0},
             "c after the leave: 503 \"not ready: not a member of epoch %d\", "
             "ringcache_cluster_member 0 (a and b: 1)" % ep, (got, member))
        got = {n: wait_ready(mports[n], 200, "of epoch %d (2 members)" % ep) for n in ("a", "b")}
        t.ok(all(v[0] == 200 for v in got.values()), "a and b: 200, epoch %d, 2 members" % ep,
             got)

        start("d")
        st, body = answered(mports["d"])
        t.ok(st == 503 and "no membership yet" in body,
             "d started, never joined: 503 \"no membership yet\"", (st, body))
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main([plain, cluster], 170, "GET /ready")


if __name__ == "__main__":
    main()
