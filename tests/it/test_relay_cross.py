#!/usr/bin/env python3
"""Two primaries relaying writes to each other (server/forward.c, struct
fwd_up): plain clients at x write keys whose primary is y, and at y keys
whose primary is x, R=2, one worker thread per node.

Each primary holds a relayed write's reply until the other owner acked its
post-image. When the post-images rode the same upstream as relayed client
writes, x's ack to y queued (at x, in the order of that connection) behind
the held reply of a write y had relayed, and y's ack to x likewise: both
waited for the 1 s forward timeout and failed (`SERVER_ERROR forward
timeout` / `replica unavailable`), again and again. Found by
tests/it/test_missed_writes.py scenario 3 (the survivors of a failover relay
to each other). Before the fix this test saw dozens of such writes in 3 s;
now every write must be STORED in well under the timeout.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

SECS = 3.0
CONNS = 4          # writer connections at each node
SIZE = 40
FWD_TIMEOUT = 1.0  # server/forward.h FWD_TIMEOUT_MS_DEFAULT


def writer(addr, keys, stop, out):
    c = None
    i = 0
    while not stop.is_set():
        k = keys[i % len(keys)]
        i += 1
        t0 = time.monotonic()
        try:
            if c is None:
                c = lg.Conn(addr, 5.0)
            line = c.store("set", k, lg.make_value(k, i, SIZE))
        except (OSError, ConnectionError, lg.ProtoError) as e:
            line = ("connection: %s" % e).encode()
            if c is not None:
                c.close()
            c = None
        out.append((time.monotonic() - t0, line, k))
    if c is not None:
        c.close()


def scenario(t):
    cl, ok = lg.start_cluster(t, ["x", "y"], replicas=2, mem=64, node_args=("-t", "1"))
    stop = threading.Event()
    threads = []
    try:
        if not ok:
            return
        universe = ["rx-%d" % i for i in range(2000)]
        own = lg.locate(cl.store_active(), universe)
        by = {n: [k for k in universe if own[k][0] == n] for n in ("x", "y")}
        outs = []
        for at, prim in (("x", "y"), ("y", "x")):
            ks = by[prim]
            for j in range(CONNS):
                out = []
                outs.append(out)
                threads.append(threading.Thread(target=writer, daemon=True,
                                                args=(cl.nodes[at].addr, ks[j::CONNS], stop,
                                                      out)))
        for th in threads:
            th.start()
        time.sleep(SECS)
        stop.set()
        for th in threads:
            th.join(10)
        reps = [r for o in outs for r in o]
        bad = [r for r in reps if r[1] != b"STORED"]
        slow = [r for r in reps if r[0] >= FWD_TIMEOUT / 2]
        t.diag("%d writes relayed between x and y, %d not STORED, max latency %.1f ms"
               % (len(reps), len(bad), 1000 * max((r[0] for r in reps), default=0.0)))
        t.ok(len(reps) > 200, "writes relayed both ways (%d)" % len(reps))
        t.ok(not bad, "every relayed write STORED (%d were not)" % len(bad),
             "\n".join("%.3f s: %s %s" % (r[0], r[1][:60], r[2]) for r in bad[:5]))
        t.ok(not slow, "no relayed write took >= %.1f s (%d did)" % (FWD_TIMEOUT / 2, len(slow)))
    finally:
        stop.set()
        for th in threads:
            th.join(10)
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 120, "relayed writes both ways")


if __name__ == "__main__":
    main()
