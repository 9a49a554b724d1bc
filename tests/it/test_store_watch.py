"""Nodes watch the membership store themselves (`ringcached --store`,
issue 12): the admin dies right after the store's commit
(RINGCTL_EXIT_AFTER=commit), so no node gets Commit, and nobody runs
`ringctl resume`. Each node reads the commit from the store and, its
admin's Commit not come within its grace (1 s), commits the epoch it had
prepared: the cluster converges with no admin. Under a recorded load,
R=2, a join of d and then a leave of d, each stopped after the commit;
loadgen's checker counts lost, stale and resurrected values. Run with the
store in etcd (started here) and in a directory. Then the store is
stopped: the nodes keep serving and log it, and find it again."""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import etcdlab  # noqa: E402

NKEYS = 1500


def scenario(t, backend):
    work = tempfile.mkdtemp(prefix="rc-sw-")
    e = None
    if backend == "etcd":
        why = etcdlab.available()
        if why:
            t.skip("nodes watch an etcd store", why)
            return
        e = etcdlab.Etcd(work, name="sw").start()
        cl = lg.Cluster(replicas=2, etcd=e)
    else:
        cl = lg.Cluster(replicas=2)
    label = "store in %s" % backend
    try:
        cl.node_args = ["--store", cl.store, "-v"]
        for i in ("a", "b", "c"):
            cl.add(i)
        rc, out, err = cl.ctl("init", "--members", cl.write_members(["a", "b", "c"]))
        t.ok(rc == 0 and cl.store_epoch() == 1, "%s: ringctl init, nodes started with --store"
             % label, (rc, lg.tail(err)))
        if e is not None:
            t.ok(lg.wait_for(lambda: all(cl.store_record("alive/" + i).startswith("boot ")
                                         for i in ("a", "b", "c")), 10, 0.1),
                 "%s: every node keeps its liveness record alive/ID on a lease" % label)
        e1 = cl.store_active()
        keys = ["sw-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        t.ok(view.refresh(1), "%s: the client learns epoch 1" % label)
        hist = lg.History(keys, size=150)
        load = lg.Load(hist, view, "epoch", writers=2, readers=2, seed=9, progress=t.diag)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "%s: fill: every key acknowledged" % label)
        d = cl.add("d")
        steps = [("join", ["join", "d", d.addr_s], ["a", "b", "c", "d"], 2),
                 ("leave", ["leave", "d"], ["a", "b", "c"], 3)]
        e_from = e1
        for phase, (name, args, ids, epoch) in enumerate(steps, 1):
            def inject():
                r = cl.ctl(*args, env={"RINGCTL_EXIT_AFTER": "commit"})
                t0 = time.monotonic()
                ok = lg.wait_for(lambda: all(v == (epoch, 0) for v in
                                             cl.converged(epoch, ids, timeout=0.2).values()),
                                 20, 0.1)
                return r, ok, time.monotonic() - t0
            (rc, out, err), conv, secs = lg.run_load_around(load, phase, inject)
            t.ok(rc == 4 and cl.store_epoch() == epoch and not cl.store_pending(),
                 "%s: %s with RINGCTL_EXIT_AFTER=commit exits 4 after the store committed "
                 "epoch %d" % (label, name, epoch), (rc, lg.tail(out), lg.tail(err)))
            t.ok(conv, "%s: with no admin and no resume every node of epoch %d committed it "
                 "from the store (%.1f s after the admin died)" % (label, epoch, secs),
                 cl.converged(epoch, ids, timeout=0.2))
            e_to = cl.store_active()
            extra = [("d", d.addr)] if name == "leave" else ()
            lg.check_transition(t, cl, hist, phase, e_from, e_to, "%s: %s committed from the "
                                "store" % (label, name), extra=extra)
            e_from = e_to
        if e is not None:
            # A node gone: etcd drops its record once the lease runs out.
            cl.nodes["d"].stop()
            t0 = time.monotonic()
            gone = lg.wait_for(lambda: cl.store_record("alive/d") == "", 15, 0.1)
            t.ok(gone, "%s: d stopped: its liveness record is gone %.1f s later (3 s lease)"
                 % (label, time.monotonic() - t0))
        logs = "".join(open(cl.nodes[i].log, errors="replace").read() for i in ("a", "b", "c"))
        t.ok("committing it from the store" in logs,
             "%s: the nodes log the commit they took from the store" % label)

        # The store goes away: the nodes serve on and say so.
        if e is not None:
            e.stop()
        else:
            os.rename(cl.store, cl.store + ".away")
        load.start(9)
        try:
            n0 = load.counts["W"] + load.counts["R"]
            err0 = load.counts["Werr"] + load.counts["Rerr"]
            ok = lg.wait_for(lambda: load.counts["W"] + load.counts["R"] > n0 + 1500, 30, 0.05)
            errs = load.counts["Werr"] + load.counts["Rerr"] - err0
        finally:
            load.stop()
        t.ok(ok and errs == 0, "%s: store gone: the nodes keep serving (%d operations, %d "
             "errors)" % (label, load.counts["W"] + load.counts["R"] - n0, errs),
             load.errors[-3:])
        if e is not None:
            def logged():
                return "serving on at the epoch this node has" in open(
                    cl.nodes["a"].log, errors="replace").read()
            t.ok(lg.wait_for(logged, 15, 0.2), "%s: store gone: the node logs it and serves "
                 "on" % label)
            e.start()
            t.ok(lg.wait_for(lambda: "answers again: watching it" in open(
                cl.nodes["a"].log, errors="replace").read(), 20, 0.2),
                "%s: store back: the node watches it again" % label)
        else:
            os.rename(cl.store + ".away", cl.store)
    finally:
        lg.close_cluster(t, cl)
        if e is not None:
            e.stop()
        if t.failed == 0:
            shutil.rmtree(work, ignore_errors=True)


def main():
    lg.tap_main([(scenario, "etcd"), (scenario, "dir")], 280, "nodes watch the store")


if __name__ == "__main__":
    main()
