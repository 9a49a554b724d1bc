"""A joiner restarted between the fence and the store's commit is never
committed as an owner of data it lost (issue 11, finding 7). R=1, three
nodes with data; `ringctl join d` is held right before the store's commit
(RINGCTL_PAUSE_AT=commit), d is killed and restarted with its state
directory (it reloads the pending transition but its imported copy is
gone), and ringctl goes on. Before the fix ringctl checked boot ids only in
the Fence replies: it committed, d served its arcs empty and the sources'
cleanup purged the only copy (837 of 3000 keys gone). Now the commit
re-checks every node's boot id and aborts: exit 1, epoch 1 unchanged,
every key still on its owner; a fresh join of d then succeeds."""
import os
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

NKEYS = 3000


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"])
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["rb-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        if not t.ok(view.refresh(1), "the client learns epoch 1 from `config`"):
            return
        hist = lg.History(keys, size=50)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "fill: every key acknowledged")
        d = cl.add("d")
        attempted = cl.members(["a", "b", "c", "d"], epoch=2)
        pause = os.path.join(tempfile.mkdtemp(prefix="rc-pause-", dir=cl.dir), "commit")
        p = cl.ctl_bg("join", "d", d.addr_s,
                      env={"RINGCTL_PAUSE_AT": "commit", "RINGCTL_PAUSE_FILE": pause})
        held = lg.wait_for(lambda: os.path.exists(pause), 60, 0.02)
        t.ok(held, "ringctl join is held right before the store's commit")
        d.restart()
        os.unlink(pause)
        try:
            out, err = p.communicate(timeout=90)
        except Exception:  # noqa: BLE001 (a hung ringctl is a failure)
            os.kill(p.pid, signal.SIGKILL)
            out, err = p.communicate()
        t.ok(p.returncode == 1 and "restarted" in err,
             "the join aborts: d restarted since PREPARE (exit %s)" % p.returncode,
             (lg.tail(out), lg.tail(err)))
        t.ok(cl.store_epoch() == 1 and not cl.store_pending(),
             "the store still at epoch 1, nothing pending")
        conv = cl.converged(1, ["a", "b", "c"])
        conv_d = cl.converged(0, ["d"])
        t.ok(all(v == (1, 0) for v in conv.values()) and conv_d["d"] == (0, 0),
             "a b c at EPOCH 1 0, d with no epoch and nothing pending", (conv, conv_d))
        lg.check_transition(t, cl, hist, 1, e1, e1, "join aborted before the commit",
                            extra=[("d", d.addr)], attempted=attempted)
        rc, out, err = cl.ctl("join", "d", d.addr_s)
        t.ok(rc == 0 and cl.store_epoch() == 2, "a fresh join of d then succeeds",
             (rc, lg.tail(out), lg.tail(err)))
        lg.check_transition(t, cl, hist, 2, e1, cl.store_active(), "join after the abort")
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 170, "a joiner restarted before the commit")


if __name__ == "__main__":
    main()
