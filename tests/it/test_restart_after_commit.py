"""A joiner restarted right after the store's commit keeps its data
reachable (f07, fault-findings-2.md). R=1, three nodes with data; `ringctl
join d` stops right after the store's commit (RINGCTL_EXIT_AFTER=commit),
d is killed and restarted with its state directory (it reloads the pending
transition but its imported copy is gone), and `ringctl resume` sends the
Commit: every node commits epoch 2, d comes up recovering. Before the fix
the old owners' cleanup then purged the ranges they had handed to d, the
only copies at R=1 (837 of 3000 keys gone in the findings). Now an old
owner purges a range it sent only once the new owner answered a heartbeat
after the commit with something current; d holds nothing, so the ranges
stay where they were, and `ringctl repair d` (remove, then join again)
(--force: at R=1 ringctl warns that d held the only copy) copies them from
there: every acknowledged key is readable again."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import failover_lib as fl  # noqa: E402

NKEYS = 3000


def scenario(t):
    cl, ok, hist, _ = lg.filled_cluster(t, ["a", "b", "c"], "ra", NKEYS)
    keys = hist.keys
    try:
        if not ok:
            return
        d = cl.add("d")
        rc, out, err = cl.ctl("join", "d", d.addr_s, env={"RINGCTL_EXIT_AFTER": "commit"})
        t.ok(rc == 4 and cl.store_epoch() == 2,
             "join d stopped right after the store's commit (exit %d)" % rc, lg.tail(err))
        e2 = cl.store_active()
        mine = [k for k, o in lg.locate(e2, keys).items() if o[0] == "d"]
        t.diag("d gains %d of the %d keys" % (len(mine), NKEYS))
        d.restart()
        rc, out, err = cl.ctl("resume")
        t.ok(rc == 0, "resume after d restarted exits 0", (lg.tail(out), lg.tail(err)))
        conv = cl.converged(2, ["a", "b", "c", "d"])
        t.ok(all(v == (2, 0) for v in conv.values()), "every node at EPOCH 2 0", conv)
        row = fl.status_row(cl, "d")
        t.ok(row.get("flags") == "recovering", "ringctl status: d is recovering", row)
        # At R=1 ringctl cannot tell that d's ranges are still at their old
        # owners, so the repair of d needs --force (docs/cluster.md).
        rc, out, err = cl.ctl("repair", "d", "--force")
        t.ok(rc == 0, "ringctl repair d --force exits 0", (lg.tail(out), lg.tail(err)))
        conv = cl.converged(cl.store_epoch(), ["a", "b", "c", "d"])
        t.ok(all(v == (cl.store_epoch(), 0) for v in conv.values()),
             "every node at the repaired epoch %d" % cl.store_epoch(), conv)
        allc = fl.copies(hist, cl.store_active())
        lost = [k for k, _ in allc["missing"]]
        t.ok(allc["checked"] == NKEYS and not allc["missing"] and not allc["errors"] and
             allc["moved"] == 0,
             "after repair d every acknowledged key is on its owner (missing %d of %d, of "
             "them %d of the %d keys d had gained)"
             % (len(lost), allc["checked"], len(set(lost) & set(mine)), len(mine)),
             (allc["missing"][:5], allc["errors"][:3]))
        row = fl.status_row(cl, "d")
        t.ok(row.get("flags") == "-", "ringctl status: d no longer recovering", row)
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 170, "a joiner restarted right after the store's commit")


if __name__ == "__main__":
    main()
