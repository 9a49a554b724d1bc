"""Abort leaves epoch N's copies exactly as they were (finding #8). R=2:
`leave a` stopped after the copy (RINGCTL_EXIT_AFTER=copy), then `ringctl
abort`; R=3: `join d` stopped after the copy and after the fence, then
abort; each without and with a write load running through the transition.
After every abort each key is read directly at each of its epoch-1 owners
(owners from `ringctl locate`, a declared client so the owner serves its
own copy) and judged against the key's write history: a copy that misses
an acknowledged value, or holds an older one, counts. Every key is
rewritten before each attempt, so each count is that abort's own. Before
the fix a node that owns an arc in epoch 1 and is refilled in epoch 2
(every old owner but the primary) purged its copy at the Prepare and
again at the abort: 817 of 6000 copies missing at R=2 (710 under load),
2240 of 9000 at R=3 after the copy and after the fence (1975 and 2012
under load). Finally the same transitions run to their end, so the
copies the import merges into are still exact after a commit."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

NKEYS = 3000


def bad_copies(hist, members):
    """Read every key at each of its owners under `members`: (missing,
    wrong, copies read, examples). missing: a miss where an acknowledged
    value must be; wrong: an older value than the last acknowledged write,
    a resurrected delete, a value never written or a corrupt one."""
    owners = lg.locate(members, hist.keys)
    m = lg.parse_members(members)
    addr_of = {i: lg.parse_addr(a) for i, a in m["nodes"]}
    missing, wrong, n, ex = 0, 0, 0, []
    for nid, addr in addr_of.items():
        keys = [k for k in hist.keys if nid in owners[k]]
        got = lg.read_keys(addr, keys, epoch=m["epoch"])
        for k in keys:
            n += 1
            if k in got:
                seq = lg.parse_value(k, got[k])
                v = lg.judge(hist.ops[k], float("inf"), float("inf"), "hit",
                             -1 if seq is None else seq)
            else:
                v = lg.judge(hist.ops[k], float("inf"), float("inf"), "miss", None)
            if v == "lost":
                missing += 1
            elif v:
                wrong += 1
            if v and len(ex) < 5:
                ex.append((k, nid, v, owners[k]))
    return missing, wrong, n, ex


def check_copies(t, hist, members, label):
    missing, wrong, n, ex = bad_copies(hist, members)
    t.diag("%s: %d copies read at their epoch-1 owners, %d missing, %d wrong"
           % (label, n, missing, wrong))
    return t.ok(missing == 0 and wrong == 0,
                "%s: every key at every epoch-1 owner with its value (%d missing, %d wrong "
                "of %d copies)" % (label, missing, wrong, n), ex)


def stopped_then_abort(t, cl, args, step, label):
    """ringctl args stopped after step, then abort: TAP on both exits."""
    rc, out, err = cl.ctl(*args, env={"RINGCTL_EXIT_AFTER": step})
    pend = cl.store_pending()
    rc2, out2, err2 = cl.ctl("abort")
    t.ok(rc == 4 and pend, "%s: stopped after %s (exit 4, pending)" % (label, step),
         (rc, lg.tail(out), lg.tail(err)))
    t.ok(rc2 == 0 and not cl.store_pending() and cl.store_epoch() == 1,
         "%s: abort exits 0, nothing pending, the store at epoch 1" % label,
         (rc2, lg.tail(out2), lg.tail(err2)))


def run(t, replicas, ids, change, steps, final, prefix):
    """One cluster: fill, then for each (step, loaded) the change stopped
    at step and aborted, the copies counted; then the change run to its
    end under load (final: the membership ids after it)."""
    cl, ok = lg.start_cluster(t, ids, replicas=replicas)
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["%s-%d" % (prefix, i) for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes[ids[0]].addr])
        if not t.ok(view.refresh(1), "R=%d: the client learns epoch 1" % replicas):
            return
        hist = lg.History(keys, size=60)
        load = lg.Load(hist, view, "epoch", writers=2, readers=1, seed=replicas)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "R=%d: fill: every key acknowledged" % replicas)
        args, extra, attempted = change(cl)
        check_copies(t, hist, e1, "R=%d before any transition" % replicas)
        phase = 0
        for step, loaded in steps:
            phase += 1
            label = "R=%d %s stopped after %s%s" % (replicas, args[0], step,
                                                    " under load" if loaded else "")
            # Every copy rewritten first, so each count is this abort's own.
            t.ok(lg.fill_fast(hist, view, phase=phase) == NKEYS,
                 "%s: refill: every key acknowledged" % label)
            if loaded:
                lg.run_load_around(load, phase,
                                   lambda: stopped_then_abort(t, cl, args, step, label))
            else:
                stopped_then_abort(t, cl, args, step, label)
            conv = cl.converged(1, ids)
            t.ok(all(v == (1, 0) for v in conv.values()),
                 "%s: every node at EPOCH 1 0 after the abort" % label, conv)
            check_copies(t, hist, e1, label)
            if loaded:
                lg.check_transition(t, cl, hist, phase, e1, e1, label, extra=extra,
                                    attempted=attempted)
        phase += 1
        rc, out, err = lg.run_load_around(load, phase, lambda: cl.ctl(*args))
        t.ok(rc == 0 and cl.store_epoch() == 2, "R=%d %s to its end under load: exit 0, "
             "epoch 2" % (replicas, args[0]), (rc, lg.tail(out), lg.tail(err)))
        e2 = cl.store_active()
        conv = cl.converged(2, final)
        t.ok(all(v == (2, 0) for v in conv.values()), "every node at EPOCH 2 0", conv)
        lg.check_transition(t, cl, hist, phase, e1, e2, "R=%d %s" % (replicas, args[0]),
                            extra=[(i, cl.nodes[i].addr) for i in ids if i not in final])
    finally:
        lg.close_cluster(t, cl)


def leave_a(cl):
    return ["leave", "a"], (), cl.members(["b", "c"], epoch=2)


def join_d(cl):
    d = cl.add("d")
    return ["join", "d", d.addr_s], [("d", d.addr)], cl.members(["a", "b", "c", "d"], epoch=2)


def scenario(t):
    run(t, 2, ["a", "b", "c"], leave_a, [("copy", False), ("copy", True)], ["b", "c"], "l2")
    run(t, 3, ["a", "b", "c"], join_d, [("copy", False), ("fence", False), ("copy", True),
                                        ("fence", True)], ["a", "b", "c", "d"], "j3")


def main():
    lg.tap_main(scenario, 280, "abort keeps epoch N's copies")


if __name__ == "__main__":
    main()
