"""ringctl history: the kept report of past moves (issue 23). R=2, a b c:
no move yet; join d (committed: its epochs, items and bytes as the join
printed them); a join of a node that does not answer (aborted, with the
reason); leave d (committed); --last 1 shows the newest only; bad
arguments are a usage error. Each line survives the admin that wrote it:
the report is read by a later ringctl from the store."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402


def rows(out):
    """The history's rows (after the header line)."""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return lines[1:] if lines and lines[0].startswith("started") else []


def field(out, name):
    for ln in out.splitlines():
        k, _, v = ln.partition("\t")
        if k == name:
            return v
    return None


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        rc, out, err = cl.ctl("history")
        t.ok(rc == 0 and "no move recorded yet" in out, "before any move: history says so",
             (rc, out, err))
        c = lg.Conn(cl.nodes["a"].addr, 10.0)
        try:
            bad = [k for k in ("h-%d" % i for i in range(500))
                   if c.store("set", k, b"x" * 200) != b"STORED"]
        finally:
            c.close()
        t.ok(not bad, "500 keys written", bad[:3])
        d = cl.add("d")
        rc, out, err = cl.ctl("join", "d", d.addr_s)
        items = int(field(out, "moved_items") or -1)
        if not t.ok(rc == 0 and items > 0, "join d: exit 0, %d items moved" % items,
                    (rc, lg.tail(err))):
            return
        rc, out, err = cl.ctl("history")
        r = rows(out)
        t.ok(rc == 0 and len(r) == 1 and "1 -> 2" in r[0] and "committed" in r[0]
             and " %d items" % items in r[0] and "join d " + d.addr_s in r[0],
             "history: one row, epoch 1 -> 2, committed, %d items, the op" % items, out)
        # A join to an address where nothing listens: its Prepare fails.
        dead = "127.0.0.1:%d" % lg.free_port()
        rc, out, err = cl.ctl("join", "e", dead)
        t.ok(rc != 0 and cl.store_epoch() == 2 and not cl.store_pending(),
             "join e at a dead address: refused, epoch 2, nothing pending", (rc, lg.tail(err)))
        rc, out, err = cl.ctl("history")
        r = rows(out)
        t.ok(rc == 0 and len(r) == 2 and "2 -> 3" in r[1] and "aborted" in r[1]
             and "prepare" in r[1] and "join e " + dead in r[1],
             "history: the aborted join is the second row, with its reason", out)
        rc, out, err = cl.ctl("leave", "d")
        t.ok(rc == 0, "leave d: exit 0", (rc, lg.tail(err)))
        rc, out, err = cl.ctl("history")
        r = rows(out)
        t.diag(out)
        t.ok(rc == 0 and len(r) == 3 and "committed" in r[2] and "leave d" in r[2],
             "history: the leave is the third row, committed", out)
        rc, out, err = cl.ctl("history", "--last", "1")
        r = rows(out)
        t.ok(rc == 0 and len(r) == 1 and "leave d" in r[0], "history --last 1: the leave only",
             out)
        rc, out, err = cl.ctl("history", "--last", "x")
        t.ok(rc == 2 and "--last" in err, "history --last x: usage error (exit 2)", (rc, err))
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main([scenario], 180, "ringctl history")


if __name__ == "__main__":
    main()
