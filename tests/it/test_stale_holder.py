"""A transition while a member is recovering never wipes the live copy
(issue 11, finding 3). R=2, three nodes: b is restarted (it comes back
empty, recovering: it holds nothing current), then d joins. Before the
fix the nodes still took b as the only holder of the arcs b was primary
of: b sourced nothing, their current secondary was marked importing and
purged its good copy, and 493 of 3000 keys were gone from every owner;
the commit then cleared b's recovering for ranges nobody refilled. Now
ringctl names b as stale in the Prepare, every node leaves it out of the
holders, the arcs are copied from their other owner, and b imports what it
owns in the new epoch. Then the same with a leave while a member is
recovering. loadgen's sweep reads every acknowledged key at every owner."""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import failover_lib as fl  # noqa: E402

NKEYS = 3000


def recovering(cl, nid):
    return fl.status_row(cl, nid).get("flags") == "recovering"


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["st-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        if not t.ok(view.refresh(1), "the client learns epoch 1 from `config`"):
            return
        hist = lg.History(keys, size=50)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "fill: every key acknowledged on both owners")
        phase = 1
        steps = [("join d", ["join", "d", None], "b"), ("leave d", ["leave", "d"], "c")]
        d = cl.add("d")
        e_from = e1
        for label, args, victim in steps:
            args = [x if x is not None else d.addr_s for x in args]
            cl.nodes[victim].restart()
            t.ok(lg.wait_for(lambda: recovering(cl, victim), 10, 0.05),
                 "%s restarted with its state directory: it is recovering" % victim,
                 fl.status_row(cl, victim))
            rc, out, err = cl.ctl(*args)
            t.ok(rc == 0, "%s while %s is recovering: exit 0" % (label, victim),
                 (rc, lg.tail(out), lg.tail(err)))
            t.ok("%s is recovering" % victim in err,
                 "ringctl names %s as holding nothing current" % victim, lg.tail(err))
            e_to = cl.store_active()
            ids = ["a", "b", "c", "d"] if label.startswith("join") else ["a", "b", "c"]
            conv = cl.converged(cl.store_epoch(), ids)
            t.ok(all(v == (cl.store_epoch(), 0) for v in conv.values()),
                 "every node at the new epoch", conv)
            t.ok(lg.wait_for(lambda: not recovering(cl, victim), 10, 0.05),
                 "%s is no longer recovering once it imported its ranges" % victim,
                 fl.status_row(cl, victim))
            extra = [("d", d.addr)] if label.startswith("leave") else ()
            lg.check_transition(t, cl, hist, phase, e_from, e_to, label + " with "
                                + victim + " recovering", extra=extra)
            e_from = e_to
            phase += 1
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 170, "a transition while a member is recovering")


if __name__ == "__main__":
    main()
