"""A member restarted empty while a join is being prepared (found by the
nemesis under heavy load: its CI schedule's combo, the admin killed after
the copy and b killed 0.1-0.5 s into the join, then resume and repair;
hundreds of acknowledged keys answered as misses after the commit).

The admin reads every node's Status to find the stale members (those
holding nothing current: every holder leaves them out and their ranges
are copied to them), then sends the Prepare. A node that restarted after
that read, or whose Prepare came before its restart, is counted by every
holder as holding its ranges: nobody copies them to it, the arcs it was
the primary of are copied from it (empty) to the joining node, and the
commit ends its recovery. Before, the stale list was made again by each
run of the prepare phase, while the nodes kept the list of the first run:

1. R=2, a b c, 300 keys written (acknowledged).
2. `ringctl join d` killed inside the store's transaction that records
   the transition's plan (RC_MSTORE_CRASH_TXN=pending.meta#2): before,
   the Prepare had gone to every node with no stale node and nothing of
   it was recorded; now the plan (boot ids, stale nodes) is recorded
   before any Prepare goes out.
3. b killed -9 and restarted on its state directory (recovering, empty).
4. `ringctl resume`, then (if b still recovers) `ringctl repair b`.
The same with the admin killed at the record's third write (now: after
the Prepare; b's boot id then differs from the plan's, the resume
aborts, the repair refills b).

Every key must read back with its value through every member. Before:
about a third of them missing (d imported nothing from b), b recovering."""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

import test_store_crash as sc  # noqa: E402  (its write_all, read_all and values)

NKEYS = 300


def recovering(cl, nid):
    st = cl.status()
    return "recovering" in st["nodes"].get(nid, {}).get("flags", "")


def scenario(t, txn):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        d = cl.add("d")
        keys = ["rp-%d" % i for i in range(NKEYS)]
        bad = sc.write_all(cl, ["a"], keys, 1)
        if not t.ok(not bad, "%d keys set (STORED)" % NKEYS, bad[:5]):
            return
        rc, out, err = cl.ctl("join", "d", d.addr_s,
                              env={"RC_MSTORE_CRASH_AT": "1",
                                   "RC_MSTORE_CRASH_TXN": txn})
        if not t.ok(rc == 137 and "RC_MSTORE_CRASH_AT" in err,
                    "join d: ringctl killed before the first file operation of %s" % txn,
                    (rc, lg.tail(out), lg.tail(err))):
            return
        b = cl.nodes["b"]
        b.stop(signal.SIGKILL)
        b.start()
        t.ok(lg.wait_for(lambda: recovering(cl, "b"), 20),
             "b killed -9 and restarted on its state directory: recovering")
        rc, out, err = cl.ctl("resume")
        t.diag("resume: exit %d: %s" % (rc, lg.tail(err)))
        if cl.store_pending():
            cl.ctl("abort")
        if recovering(cl, "b"):
            rc, out, err = cl.ctl("repair", "b")
            t.ok(rc == 0, "repair b exits 0", (rc, lg.tail(out), lg.tail(err)))
        ids = [nid for nid, _ in lg.parse_members(cl.store_active())["nodes"]]
        ep = cl.store_epoch()
        conv = cl.converged(ep, ids)
        t.ok(all(v == (ep, 0) for v in conv.values()) and not cl.store_pending(),
             "every member at the store's epoch %d, nothing pending" % ep, conv)
        t.ok(not recovering(cl, "b"), "b is no longer recovering")
        bad = sc.read_all(cl, ids, keys, 1)
        t.ok(not bad, "every key reads back with its value through every member (%s): "
             "%d wrong" % (",".join(ids), len(bad)), bad[:5])
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main([lambda t: scenario(t, "pending.meta#2"),
                 lambda t: scenario(t, "pending.meta#3")], 300, "a member restarted empty while a join is prepared")


if __name__ == "__main__":
    main()
