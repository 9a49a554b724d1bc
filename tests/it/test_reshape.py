"""Membership changes that keep the node set, each a transition like a
join (copy, fence, commit), under a recorded read/write load on a 3-node
cluster, checked as the cluster tests check a join: `ringctl reweight b 3`
(b's share grows), `ringctl replicas 3` (every key gains a third copy),
`ringctl vnodes 64` (every point moves), `ringctl replicas 2` and
`reweight b 1` back: after each, 0 lost, stale or resurrected values, no
errors on ranges whose owners did not change, every owner serving its keys
(a third copy included) at the new epoch. Bad requests change nothing:
a non-member, an R above the member count, the value already in place,
a weight out of range. Then `join d ADDR e ADDR` and `leave d e`: two
nodes in one transition each, checked the same way."""
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
        keys = ["rs-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        hist = lg.History(keys, size=200)
        t.ok(view.refresh(1), "the client learns epoch 1", view.text)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "fill: every key acknowledged")
        load = lg.Load(hist, view, "epoch", writers=3, readers=2, seed=5, progress=t.diag)

        for bad, why in ((("reweight", "z", "2"), "not a member"),
                         (("replicas", "4"), "needs at least 4 members"),
                         (("replicas", "2"), "nothing to change"),
                         (("reweight", "b", "1001"), "expected 1..1000")):
            rc, out, err = cl.ctl(*bad)
            t.ok(rc == 2 and why in err and cl.store_epoch() == 1 and not cl.store_pending(),
                 "ringctl %s: refused (exit 2, %r), nothing recorded" % (" ".join(bad), why),
                 (rc, lg.tail(err)))

        steps = [("reweight", "b", "3"), ("replicas", "3"), ("vnodes", "64"),
                 ("replicas", "2"), ("reweight", "b", "1")]
        for phase, cmd in enumerate(steps, 1):
            before = cl.store_active()
            rc, out, err = lg.run_load_around(load, phase, lambda cmd=cmd: cl.ctl(*cmd))
            after = cl.store_active()
            label = "ringctl " + " ".join(cmd)
            m = lg.parse_members(after)
            t.ok(rc == 0 and m["epoch"] == phase + 1 and not cl.store_pending(),
                 "%s under load: exit 0, epoch %d" % (label, phase + 1),
                 (rc, lg.tail(out), lg.tail(err)))
            lg.check_transition(t, cl, hist, phase, before, after, label, reshape=True)
        # Several nodes in one transition: d and e join together, then
        # leave together (one epoch each).
        d, e = cl.add("d"), cl.add("e")
        for phase, cmd, want in ((6, ("join", "d", d.addr_s, "e", e.addr_s), "abcde"),
                                 (7, ("leave", "d", "e"), "abc")):
            before = cl.store_active()
            rc, out, err = lg.run_load_around(load, phase, lambda cmd=cmd: cl.ctl(*cmd))
            after = cl.store_active()
            label = "ringctl %s %s" % (cmd[0], " ".join(cmd[1::2] if cmd[0] == "join"
                                                          else cmd[1:]))
            ids = "".join(sorted(i for i, _ in lg.parse_members(after)["nodes"]))
            t.ok(rc == 0 and ids == want and cl.store_epoch() == phase + 1,
                 "%s: one transition (epoch %d), members %s" % (label, phase + 1, want),
                 (rc, lg.tail(out), lg.tail(err), ids))
            lg.check_transition(t, cl, hist, phase, before, after, label, reshape=True,
                                extra=[(n, cl.nodes[n].addr) for n in "de"]
                                if cmd[0] == "leave" else ())
        rc, out, err = cl.ctl("join", "f", d.addr_s, "g", d.addr_s)
        t.ok(rc == 2 and "already the address" in err and cl.store_epoch() == 8,
             "a multi-node join naming one address twice is refused before anything is "
             "recorded", (rc, lg.tail(err)))
        final = lg.parse_members(cl.store_active())
        t.ok(final["replicas"] == 2 and "vnodes 64" in cl.store_active()
             and "node b " in cl.store_active(), "the store holds R=2, vnodes 64, b back at weight 1",
             cl.store_active())
        rc, out, err = cl.ctl("history")
        ops = [l for l in out.splitlines() if "reweight" in l or "replicas" in l or "vnodes" in l]
        t.ok(rc == 0 and len(ops) == 5 and "+e" in out,
             "ringctl history lists the five changes, and the two-node join as one", out[-1500:])
    finally:
        lg.close_cluster(t, cl)


def main():
    t = lg.Tap()
    why = lg.supports_cluster()
    if why:
        t.skip("reweight, replicas, vnodes", why)
    else:
        lg.watchdog(400)
        lg.run_tap(t, scenario)
    t.done()


if __name__ == "__main__":
    main()
