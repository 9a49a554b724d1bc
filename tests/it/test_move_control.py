"""An operator's hand on a running move (issue 23): ringctl pause, rate and
unpause on a join that copies. R=2, a b c hold 16000 keys of 1 KB; d
joins at 0.25 MiB/s (its share would take over half a minute):

- `ringctl pause` with nothing pending is refused;
- once d imports, `ringctl pause`: d's imported bytes stop growing within
  2 s and stay put for 3 s more, the join still runs and is still pending
  (no stall abort);
- `ringctl rate 0` (unlimited) while paused: still paused;
- `ringctl unpause`: the join ends (exit 0) in less than half the time the
  rest would take at 0.25 MiB/s; epoch 2, every key reads back;
- `ringctl history` has the join, committed."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

NKEYS = 16000
RATE = 0.25  # MiB/s


def value(k):
    return (k * 100).encode()[:1000].ljust(1000, b".")


def imported(node):
    c = lg.Conn(node.addr, 5.0)
    try:
        c.send(b"stats\r\n")
        n = 0
        while True:
            ln = c.readline()
            if ln == b"END":
                return n
            if ln.startswith(b"STAT cluster_bytes_imported "):
                n = int(ln.split()[2])
    finally:
        c.close()


def steady(node, secs):
    """d's imported bytes at the start and end of secs."""
    a = imported(node)
    time.sleep(secs)
    return a, imported(node)


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2)
    join = None
    try:
        if not ok:
            return
        rc, out, err = cl.ctl("pause")
        t.ok(rc != 0 and "no move is pending" in err, "pause with nothing pending: refused",
             (rc, err))
        keys = ["mc-%d" % i for i in range(NKEYS)]
        c = lg.Conn(cl.nodes["a"].addr, 10.0)
        try:
            for j in range(0, NKEYS, 200):
                part = keys[j:j + 200]
                c.send(b"".join(b"set %s 0 0 1000 noreply\r\n%s\r\n" % (k.encode(), value(k))
                                for k in part))
            c.send(b"mn\r\n")
            t.ok(c.readline() == b"MN", "%d keys of 1 KB written" % NKEYS)
        finally:
            c.close()
        d = cl.add("d")
        join = cl.ctl_bg("join", "d", d.addr_s, "--rate", str(RATE))
        t.ok(lg.wait_for(lambda: imported(d) > 0, 30, 0.05), "d imports (the copy runs)")
        rc, out, err = cl.ctl("pause")
        t.ok(rc == 0, "ringctl pause: exit 0", (rc, err))
        # Within the admin's poll (0.5 s) and what was in flight, it stops.
        lg.wait_for(lambda: (lambda s: s[0] == s[1])(steady(d, 0.5)), 4, 0)
        a0, a1 = steady(d, 3.0)
        t.ok(a0 == a1 and a0 > 0, "paused: d's imported bytes stay at %d for 3 s" % a0, (a0, a1))
        t.ok(join.poll() is None and cl.store_pending(),
             "paused: the join still runs, the transition is pending (no stall abort)")
        rc, out, err = cl.ctl("rate", "0")
        t.ok(rc == 0, "ringctl rate 0 (unlimited) while paused: exit 0", (rc, err))
        b0, b1 = steady(d, 1.5)
        t.ok(b0 == b1 == a1, "still paused after the rate change (%d bytes)" % b1, (b0, b1))
        rc, out, err = cl.ctl("unpause")
        t.ok(rc == 0, "ringctl unpause: exit 0", (rc, err))
        t0 = time.monotonic()
        try:
            jout, jerr = join.communicate(timeout=120)
        except Exception as e:  # noqa: BLE001
            jout, jerr = "", str(e)
        took = time.monotonic() - t0
        final = imported(d)
        rest = (final - b1) / (RATE * 1048576.0)
        t.ok(join.returncode == 0 and "copy: paused" in jerr and "copy: running" in jerr,
             "the join ends with exit 0; its admin paused and went on", (join.returncode,
                                                                          lg.tail(jerr)))
        t.ok(took < rest / 2, "after unpause it took %.1f s for %d bytes: under half the %.1f s "
             "they take at %.2f MiB/s (the new rate applies)" % (took, final - b1, rest, RATE))
        t.ok(cl.store_epoch() == 2 and not cl.store_pending(), "epoch 2, nothing pending")
        ids = ["a", "b", "c", "d"]
        bad = []
        for nid in ids:
            c = lg.Conn(cl.nodes[nid].addr, 10.0)
            try:
                for j in range(0, NKEYS, 100):
                    part = keys[j:j + 100]
                    vals, err = c.get_multi(part)
                    bad.extend((nid, k) for k in part if (vals or {}).get(k) != value(k))
            finally:
                c.close()
        t.ok(not bad, "every key reads back through every member: %d wrong" % len(bad), bad[:5])
        rc, out, err = cl.ctl("history")
        t.ok(rc == 0 and "committed" in out and "join d" in out, "history: the join, committed",
             out)
    finally:
        if join is not None and join.poll() is None:
            lg.stop_proc(join, 10.0)
        lg.close_cluster(t, cl)


def main():
    lg.tap_main([scenario], 300, "ringctl pause, rate, unpause on a running join")


if __name__ == "__main__":
    main()
