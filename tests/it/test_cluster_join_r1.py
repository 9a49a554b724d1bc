"""Join a 4th node to a 3-node cluster under a recorded writer/reader load,
then have one node leave, with R=1 (test_cluster_join_r2.py: R=2); after
each transition sweep every key and assert the invariants of issue 5
(tests/it/loadgen.py does the checking)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

NKEYS = 2000
# MiB/s: stretches the copy of the ~1/4 of 400 KB that moves to about half a
# second, so the load runs through every phase.
RATE = "0.2"


def scenario(t, replicas):
    why = lg.supports_cluster()
    if why:
        t.skip("join/leave under load, R=%d" % replicas, why)
        return
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=replicas)
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["jk-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        if not t.ok(view.refresh(1) and view.epoch == 1,
                    "the client learns epoch 1 from `config`", view.text):
            return
        probe = lg.probe_routing(cl, e1)
        t.diag("routing probe: %s" % probe)
        if not probe["forwards"]:
            t.skip("plain memcached readers (no epoch) during the transitions",
                   "a plain client's get at a non-owner is answered MOVED, not forwarded")
        secondaries = probe["secondary_reads"] is not False
        if not secondaries:
            t.skip("the sweep reads every secondary owner",
                   "a declared get at a secondary owner is answered MOVED (reads at the "
                   "primary only)")
        hist = lg.History(keys, size=200)
        load = lg.Load(hist, view, "epoch", writers=3, readers=2, seed=replicas,
                       progress=t.diag, plain_readers=1 if probe["forwards"] else 0)
        filled = lg.fill_fast(hist, view)
        t.ok(filled == NKEYS, "fill: %d of %d keys acknowledged" % (filled, NKEYS))

        d = cl.add("d")
        rc, out, err = lg.run_load_around(
            load, 1, lambda: cl.ctl("join", "--rate", RATE, "d", d.addr_s))
        t.ok(rc == 0, "ringctl join d under load exits 0", (rc, lg.tail(out), lg.tail(err)))
        e2 = cl.store_active()
        t.ok(cl.store_epoch() == 2 and not cl.store_pending()
             and {i for i, _ in lg.parse_members(e2)["nodes"]} == {"a", "b", "c", "d"},
             "the store's active is epoch 2 with a b c d, no pending", e2)
        conv = cl.converged(2, ["a", "b", "c", "d"])
        t.ok(all(v == (2, 0) for v in conv.values()), "every node reports EPOCH 2 0", conv)
        t.ok(view.epoch == 2, "the load's client adopted epoch 2 (from MOVED or a poll)",
             view.epoch)
        t.diag("join summary: " + " ".join(out.split()))
        lg.check_transition(t, cl, hist, 1, e1, e2, "join R=%d" % replicas,
                            secondaries=secondaries)

        b_addr = cl.nodes["b"].addr
        rc, out, err = lg.run_load_around(
            load, 2, lambda: cl.ctl("leave", "--rate", RATE, "b"))
        t.ok(rc == 0, "ringctl leave b under load exits 0", (rc, lg.tail(out), lg.tail(err)))
        e3 = cl.store_active()
        t.ok(cl.store_epoch() == 3 and not cl.store_pending()
             and {i for i, _ in lg.parse_members(e3)["nodes"]} == {"a", "c", "d"},
             "the store's active is epoch 3 with a c d", e3)
        conv = cl.converged(3, ["a", "c", "d"])
        t.ok(all(v == (3, 0) for v in conv.values()), "a c d report EPOCH 3 0", conv)
        extra = [("b", b_addr)] if cl.nodes["b"].alive() else []
        t.diag("leave summary: " + " ".join(out.split()))
        lg.check_transition(t, cl, hist, 2, e2, e3, "leave R=%d" % replicas, extra=extra,
                            secondaries=secondaries)
    finally:
        cl.close()
        if t.failed == 0:
            cl.cleanup_dir()
        else:
            t.diag("logs kept in %s" % cl.dir)


def main(replicas):
    t = lg.Tap()
    lg.watchdog(120)
    lg.run_tap(t, scenario, replicas)
    t.done()


if __name__ == "__main__":
    main(1)
