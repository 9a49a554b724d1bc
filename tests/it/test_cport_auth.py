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
"""
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
from test_cport import frame, read_frame, fb, HELLO, ERROR  # noqa: E402

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
            token = f.read().strip()
        s.sendall(frame(HELLO, fb(1, "ringcache") + fb(2, token)))
        r = read_frame(s, timeout=timeout)
        return time.monotonic() - t0 if r is not None and r[0] == HELLO else None
    finally:
        s.close()


CL = None


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
