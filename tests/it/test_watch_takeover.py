"""A transition whose admin died is finished automatically within a bounded
time (issue 11, finding 12). `ringctl watch --transition-timeout 2` runs
beside an R=2 cluster under load. A join of d stops right after its fence
(RINGCTL_EXIT_AFTER=fence: the admin is gone, the moving ranges answer
TRYAGAIN); before the fix watch only waited and the ranges stayed fenced
for good. Now watch sees that the transition record has not been written
for the timeout (the admin re-stores it while it runs) and resumes it.
Then a leave of d stops right after the store's commit
(RINGCTL_EXIT_AFTER=commit: nothing pending in the store, every node still
pending): watch sees nodes pending with nothing pending in the store and
resumes that too. The checker counts lost and stale values across both."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

NKEYS = 2000


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2)
    w = None
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["wt-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        if not t.ok(view.refresh(1), "the client learns epoch 1 from `config`"):
            return
        hist = lg.History(keys, size=200)
        load = lg.Load(hist, view, "epoch", writers=2, readers=2, seed=9, progress=t.diag)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "fill: every key acknowledged")
        w = cl.ctl_bg("watch", "--interval", "0.2", "--transition-timeout", "2",
                      "--down-after", "60")
        d = cl.add("d")
        steps = [("join", ["join", "d", d.addr_s], "fence", ["a", "b", "c", "d"], 2),
                 ("leave", ["leave", "d"], "commit", ["a", "b", "c"], 3)]
        e_from = e1
        phase = 0
        for name, args, step, ids, epoch in steps:
            phase += 1

            def inject():
                r = cl.ctl(*args, env={"RINGCTL_EXIT_AFTER": step})
                t0 = time.monotonic()
                conv = cl.converged(epoch, ids, timeout=30.0)
                return r, conv, time.monotonic() - t0
            (rc, out, err), conv, took = lg.run_load_around(load, phase, inject, timeout=60.0)
            t.ok(rc == 4, "%s stopped after %s (exit 4): its admin is gone" % (name, step),
                 (rc, lg.tail(out), lg.tail(err)))
            t.ok(all(v == (epoch, 0) for v in conv.values()) and cl.store_epoch() == epoch
                 and not cl.store_pending(),
                 "watch finished the %s: every node at EPOCH %d 0 after %.1f s" % (name, epoch,
                                                                                took), conv)
            t.ok(took < 20, "within the bound (timeout 2 s + resume): %.1f s" % took)
            e_to = cl.store_active()
            extra = [("d", d.addr)] if name == "leave" else ()
            lg.check_transition(t, cl, hist, phase, e_from, e_to, "%s finished by watch" % name,
                                extra=extra)
            e_from = e_to
    finally:
        if w is not None and w.poll() is None:
            w.send_signal(signal.SIGTERM)
            try:
                w.wait(10)
            except Exception:  # noqa: BLE001
                w.kill()
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 170, "watch finishes a transition whose admin died")


if __name__ == "__main__":
    main()
