"""resume finishes a committed transition on every node (issue 11,
finding 1): the admin dies right after the store's commit (the last store
write; RINGCTL_EXIT_AFTER=commit), so no node got Commit: they stay pending
and fenced, the moving ranges answer TRYAGAIN. `ringctl resume` must then
commit every node (the store keeps the committed transition's record, and
its token, as committed.meta) and exit 0; before the fix it exited 1
("token does not match the pending transition") and the cluster stayed
fenced for good. Under a recorded load, R=2: a join of d, then a leave of
d, each stopped right after the commit and resumed; loadgen's checker
counts lost, stale and resurrected values across each."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

NKEYS = 2000


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["rc-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        if not t.ok(view.refresh(1), "the client learns epoch 1 from `config`"):
            return
        hist = lg.History(keys, size=200)
        load = lg.Load(hist, view, "epoch", writers=2, readers=2, seed=5, progress=t.diag)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "fill: every key acknowledged")
        d = cl.add("d")
        phase = 0
        steps = [("join", ["join", "d", d.addr_s], ["a", "b", "c", "d"], 2),
                 ("leave", ["leave", "d"], ["a", "b", "c"], 3)]
        e_from = e1
        for name, args, ids, epoch in steps:
            phase += 1

            def inject():
                r1 = cl.ctl(*args, env={"RINGCTL_EXIT_AFTER": "commit"})
                stuck = cl.converged(epoch - 1, ids, timeout=2.0)
                r2 = cl.ctl("resume")
                return r1, stuck, r2
            (rc, out, err), stuck, (rc2, out2, err2) = lg.run_load_around(load, phase, inject)
            t.ok(rc == 4 and cl.store_epoch() == epoch and not cl.store_pending(),
                 "%s with RINGCTL_EXIT_AFTER=commit exits 4 after the store committed epoch %d"
                 % (name, epoch), (rc, lg.tail(out), lg.tail(err)))
            t.ok(any(v[1] == epoch for v in stuck.values()),
                 "the nodes were left pending with epoch %d (no Commit reached them)" % epoch,
                 stuck)
            t.ok(rc2 == 0, "ringctl resume exits 0 (it finishes the committed %s)" % name,
                 (rc2, lg.tail(out2), lg.tail(err2)))
            conv = cl.converged(epoch, ids)
            t.ok(all(v == (epoch, 0) for v in conv.values()),
                 "after resume every node of epoch %d reports EPOCH %d 0" % (epoch, epoch), conv)
            e_to = cl.store_active()
            extra = [("d", d.addr)] if name == "leave" else ()
            lg.check_transition(t, cl, hist, phase, e_from, e_to, "%s resumed after commit"
                                % name, extra=extra)
            e_from = e_to
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 170, "resume after the store's commit")


if __name__ == "__main__":
    main()
