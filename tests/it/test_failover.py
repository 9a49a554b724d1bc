"""Node failure under load (issue 6): three nodes, R=2, a recorded
writer/reader load whose client fails over down the preference list.
`kill -9` one node: the others see it down (heartbeats, `ringctl status`),
0 stale reads, 0 errors on keys it does not own, 0 read errors past 1 s
on its keys; writes to its keys fail at once with SERVER_ERROR
UNAVAILABLE (no node takes them over on its own guess: only the store
moves a primary). Then `ringctl remove --failed`: epoch 2 without it,
writes to its keys work again, every key back on 2 distinct nodes. Then a
fresh node joins: capacity restored, no stale read, no orphan.

Checks that need replicated writes (a secondary holding current data) are
TODO lines while the node does not replicate (tests/it/failover_lib.py)."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import failover_lib as fl  # noqa: E402

NKEYS = 3000


def reads_clean(t, hist, phase, label):
    viol, _ = lg.check_reads(hist, [r for r in hist.reads if r[8] == phase])
    n = sum(1 for r in hist.reads if r[8] == phase)
    t.ok(not viol["stale"] and not viol["resurrected"] and not viol["phantom"]
         and not viol["corrupt"],
         "%s: 0 stale, resurrected, phantom or corrupt reads (of %d)" % (label, n),
         [r[:6] for v in viol.values() for r in v[:3]])
    return viol


def scenario(t):
    why = lg.supports_cluster()
    if why:
        t.skip("node failure under load", why)
        return
    lg.Client = fl.FailoverClient    # the load's clients fail over
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        e1 = cl.store_active()
        repl = fl.replicated(cl, e1)
        todo = None if repl else "writes are not replicated yet: a secondary holds nothing"
        t.diag("replicated writes: %s" % repl)
        keys = ["fk-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        if not t.ok(view.refresh(1), "the client learns epoch 1"):
            return
        hist = lg.History(keys, size=120)
        load = lg.Load(hist, view, "epoch", writers=3, readers=2, seed=11)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "fill: every key acknowledged")
        own1 = lg.locate(e1, keys)
        on_b = {k for k in keys if own1[k][0] == "b"}
        others = set(keys) - on_b
        owned_b = {k for k in keys if "b" in own1[k]}
        free_b = set(keys) - owned_b

        # ---- kill -9 b under load
        load.start(1)
        lg.wait_for(lambda: load.counts["W"] + load.counts["R"] > 1500, 20, 0.02)
        t_kill = time.monotonic()
        cl.nodes["b"].stop(signal.SIGKILL)

        def seen_down():
            row = fl.status_row(cl, "b")
            by = set(row.get("seen_down_by", "-").split(","))
            return row.get("state") == "down" and {"a", "c"} <= by
        det = lg.wait_for(seen_down, 10, 0.05)
        t_det = time.monotonic() - t_kill
        t.ok(det, "a and c see b down (ringctl status: state down, seen_down_by a,c) "
             "%.2f s after kill -9" % t_det, fl.status_row(cl, "b"))
        t.ok(t_det < 3.0, "detection within 3 s (%.2f s)" % t_det)
        # Three seconds of load after the kill: the unavailability measured
        # below is bounded by it (a key never restored counts 3 s).
        lg.wait_for(lambda: time.monotonic() > t_kill + 3.0, 10, 0.05)
        load.stop()
        viol = reads_clean(t, hist, 1, "b killed")
        lost_b = [r for r in viol["lost"] if r[0] in on_b]
        lost_o = [r for r in viol["lost"] if r[0] not in on_b]
        t.ok(not lost_o, "b killed: 0 misses of acknowledged values on the others' keys",
             lost_o[:5])
        t.ok(not lost_b, "b killed: no read of b's keys missed an acknowledged value (%d "
             "misses; reads error until the keys are served again)" % len(lost_b), lost_b[:5])
        errs = lg.phase_errors(hist, 1, others)
        werrs = lg.phase_errors(hist, 1, free_b)["write_errors"]
        t.ok(not werrs and not errs["read_errors"],
             "b killed: 0 write errors on the %d keys b does not own, 0 read errors on the %d "
             "keys b is not the primary of (writes %d, reads %d)"
             % (len(free_b), len(others), len(werrs), len(errs["read_errors"])),
             [x[:6] for x in (werrs + errs["read_errors"])[:6]])
        # Writes to b's keys (primary or replica) cannot reach every owner:
        # they fail at once, at every node, until the store declares b
        # failed; none is acknowledged with one copy.
        probe = {}
        for nid in ("a", "c"):
            k = next(k for k in sorted(owned_b) if nid in own1[k])
            c = lg.Conn(cl.nodes[nid].addr, 5.0)
            try:
                probe[nid] = c.store("set", k, b"x")
            finally:
                c.close()
        t.ok(all(r.startswith(b"SERVER_ERROR UNAVAILABLE owner b is down") for r in
                 probe.values()),
             "b killed: a write to a key b owns fails at once with SERVER_ERROR UNAVAILABLE "
             "at a and at c", probe)
        acked_b = [(k, o) for k in owned_b for o in hist.ops[k]
                   if o[8] == 1 and o[4] == "ok" and o[2] >= t_kill + t_det + 0.5]
        t.ok(not acked_b, "b killed: no write to b's keys acknowledged once b is seen down "
             "(acknowledged %d)" % len(acked_b), acked_b[:5])
        unav = fl.unavailability(hist, 1, on_b, t_kill, reads_only=True)
        t.diag("client-visible read unavailability of b's keys: %.2f s (until the end of the "
               "phase if never restored)" % unav)
        t.diag("\n".join("last failure: %.3f s after the kill (start %.3f s) %s %s %s node %s %s"
                          % f for f in fl.failed_ops(hist, 1, on_b, t_kill)[:3]))
        t.diag("load errors: %d, first: %r" % (len(load.errors), load.errors[:3]))
        fl.todo_ok(t, unav <= 1.0, "b killed: read unavailability of b's keys %.2f s <= 1 s"
                   % unav, todo,
                   "\n".join(["latest failures: end, start (s after the kill), op, key, "
                              "status, node, why"]
                             + ["%.3f %.3f %s %s %s %s %s" % f
                                for f in fl.failed_ops(hist, 1, on_b, t_kill, True)[:8]]))
        # The measure above means something only if the load kept going on
        # b's keys past the first retry interval (a dead load fails nothing).
        late = sum(1 for r in hist.reads if r[8] == 1 and r[0] in on_b and r[1] >= t_kill + 1.0)
        t.ok(late > 0, "b killed: the load kept reading b's keys from 1 s after the kill "
             "(%d reads)" % late)

        # ---- remove --failed b under load
        rc, out, err = lg.run_load_around(load, 2, lambda: cl.ctl("remove", "--failed", "b"))
        t.ok(rc == 0, "ringctl remove --failed b exits 0", (rc, lg.tail(out), lg.tail(err)))
        e2 = cl.store_active()
        t.ok(cl.store_epoch() == 2 and not cl.store_pending()
             and {i for i, _ in lg.parse_members(e2)["nodes"]} == {"a", "c"},
             "the store's active is epoch 2 with a and c", e2)
        conv = cl.converged(2, ["a", "c"])
        t.ok(all(v == (2, 0) for v in conv.values()), "a and c report EPOCH 2 0", conv)
        reads_clean(t, hist, 2, "remove --failed")
        own2 = lg.locate(e2, keys)
        same = {k for k in others if own1[k] == own2[k]}
        errs = lg.phase_errors(hist, 2, same)
        t.ok(not errs["write_errors"] and not errs["read_errors"] and not errs["tryagain"],
             "remove --failed: 0 errors or TRYAGAIN on the %d keys whose owners did not change"
             % len(same), [x[:6] for v in errs.values() for x in v[:3]])
        prim = fl.copies(hist, e2, primary_only=True)
        miss_o = [m for m in prim["missing"] if m[0] not in on_b]
        miss_b = [m for m in prim["missing"] if m[0] in on_b]
        t.ok(not miss_o and not prim["errors"] and prim["moved"] == 0,
             "remove --failed: every key whose primary survived is on its epoch-2 primary",
             (miss_o[:5], prim["errors"][:3], prim["moved"]))
        fl.todo_ok(t, not miss_b, "remove --failed: b's keys came back from their replicas "
                   "(%d of %d missing)" % (len(miss_b), len(on_b)), todo, miss_b[:5])
        allc = fl.copies(hist, e2)
        fl.todo_ok(t, not allc["missing"] and not allc["errors"] and allc["moved"] == 0,
                   "remove --failed: every key on 2 distinct nodes (missing %d, MOVED %d)"
                   % (len(allc["missing"]), allc["moved"]), todo,
                   (allc["missing"][:5], allc["errors"][:3]))

        # ---- a fresh node joins: capacity restored. Keys lost above are
        # written again first, so the join is judged on its own.
        view.refresh(2)
        if miss_b:
            lg.fill_fast(hist, view, phase=3, keys=sorted({m[0] for m in miss_b}))
        d = cl.add("d")
        rc, out, err = lg.run_load_around(load, 4, lambda: cl.ctl("join", "d", d.addr_s))
        t.ok(rc == 0, "ringctl join d exits 0", (rc, lg.tail(out), lg.tail(err)))
        e3 = cl.store_active()
        t.ok(cl.store_epoch() == 3
             and {i for i, _ in lg.parse_members(e3)["nodes"]} == {"a", "c", "d"},
             "epoch 3 with a c d", e3)
        conv = cl.converged(3, ["a", "c", "d"])
        t.ok(all(v == (3, 0) for v in conv.values()), "a c d report EPOCH 3 0", conv)
        if repl:
            lg.check_transition(t, cl, hist, 4, e2, e3, "join d after remove --failed")
        else:
            reads_clean(t, hist, 4, "join d")
            prim = fl.copies(hist, e3, primary_only=True)
            t.ok(not prim["missing"] and not prim["errors"] and prim["moved"] == 0,
                 "join d: every acknowledged key on its epoch-3 primary",
                 (prim["missing"][:5], prim["errors"][:3], prim["moved"]))
            st = cl.status()
            mr = lg.status_counter(st, "misrouted")
            orph = lg.status_counter(st, "orphans")
            t.ok(st["rc"] == 0 and len(mr) == 3 and not any(mr.values())
                 and not any(orph.values()),
                 "join d: ringctl status exits 0, misrouted %s, orphans %s" % (mr, orph),
                 (st["raw"][-600:], st["err"][-300:]))
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
