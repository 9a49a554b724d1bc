"""Faults of a join under load, R=1: RINGCTL_EXIT_AFTER=prepare|copy|fence
then `ringctl abort` (nothing lost, the joiner purged what it imported, no
orphan, epoch unchanged); the joiner restarted during PREPARE, then
`resume` fails cleanly (aborted) or finishes consistently, and a fresh join
succeeds (tests/it/loadgen.py does the checking)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

NKEYS = 2000


def scenario(t):
    why = lg.supports_cluster()
    if why:
        t.skip("abort at each phase, restart during PREPARE", why)
        return
    cl, ok = lg.start_cluster(t, ["a", "b", "c"])
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["ak-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        if not t.ok(view.refresh(1), "the client learns epoch 1 from `config`"):
            return
        hist = lg.History(keys, size=200)
        load = lg.Load(hist, view, "epoch", writers=2, readers=2, seed=3, progress=t.diag)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "fill: every key acknowledged")
        d = cl.add("d")
        attempted = cl.members(["a", "b", "c", "d"], epoch=2)
        phase = 0
        for step in ("prepare", "copy", "fence"):
            phase += 1

            def inject():
                r1 = cl.ctl("join", "d", d.addr_s, env={"RINGCTL_EXIT_AFTER": step})
                pend = cl.store_pending()
                st = cl.status()
                r2 = cl.ctl("abort")
                return r1, pend, st, r2
            (rc, out, err), pend, st, (rc2, out2, err2) = lg.run_load_around(load, phase, inject)
            t.ok(rc == 4 and pend, "RINGCTL_EXIT_AFTER=%s: join exits 4 leaving a pending "
                 "transition" % step, (rc, lg.tail(out), lg.tail(err)))
            t.ok(st["rc"] == 0 and st["raw"].strip() != "",
                 "ringctl status with a pending transition after %s" % step,
                 (st["rc"], st["raw"][-500:], st["err"][-300:]))
            t.ok(rc2 == 0 and not cl.store_pending() and cl.store_epoch() == 1,
                 "abort after %s: exit 0, no pending, the store still at epoch 1" % step,
                 (rc2, lg.tail(out2), lg.tail(err2)))
            conv = cl.converged(1, ["a", "b", "c"])
            conv_d = cl.converged(0, ["d"])
            t.ok(all(v == (1, 0) for v in conv.values()) and conv_d["d"] == (0, 0),
                 "after abort at %s: a b c at EPOCH 1 0, d has no epoch and no pending" % step,
                 (conv, conv_d))
            lg.check_transition(t, cl, hist, phase, e1, e1, "abort at %s" % step,
                                extra=[("d", d.addr)], attempted=attempted)

        # The joiner restarted (empty, new boot id) while PREPARE is pending.
        phase += 1

        def restart_in_prepare():
            r1 = cl.ctl("join", "d", d.addr_s, env={"RINGCTL_EXIT_AFTER": "prepare"})
            d.restart()
            r2 = cl.ctl("resume")
            return r1, r2
        (rc, out, err), (rc2, out2, err2) = lg.run_load_around(load, phase, restart_in_prepare)
        t.ok(rc == 4, "join stopped after prepare (exit 4)", (rc, lg.tail(err)))
        t.ok(rc2 in (0, 1) and not cl.store_pending(),
             "resume after the joiner restarted: finishes (0) or fails cleanly and aborts (1), "
             "no pending left (exit %s)" % rc2, (rc2, lg.tail(out2), lg.tail(err2)))
        if rc2 == 0:
            e2 = cl.store_active()
            t.ok(cl.store_epoch() == 2, "resume committed epoch 2")
            lg.check_transition(t, cl, hist, phase, e1, e2, "resume after restart")
        else:
            t.ok(cl.store_epoch() == 1, "the failed resume left epoch 1")
            lg.check_transition(t, cl, hist, phase, e1, e1, "aborted resume",
                                extra=[("d", d.addr)], attempted=attempted)
            phase += 1
            rc3, out3, err3 = lg.run_load_around(load, phase,
                                                 lambda: cl.ctl("join", "d", d.addr_s))
            t.ok(rc3 == 0 and cl.store_epoch() == 2, "a fresh join of d then succeeds",
                 (rc3, lg.tail(out3), lg.tail(err3)))
            e2 = cl.store_active()
            conv = cl.converged(2, ["a", "b", "c", "d"])
            t.ok(all(v == (2, 0) for v in conv.values()), "every node at EPOCH 2 0", conv)
            lg.check_transition(t, cl, hist, phase, e1, e2, "join after the failed resume")
    finally:
        cl.close()
        if t.failed == 0:
            cl.cleanup_dir()
        else:
            t.diag("logs kept in %s" % cl.dir)


def main():
    t = lg.Tap()
    lg.watchdog(150)
    lg.run_tap(t, scenario)
    t.done()


if __name__ == "__main__":
    main()
