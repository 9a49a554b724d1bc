"""Self-test of the cluster invariant harness (tests/it/loadgen.py): the
checker must report nothing on a clean run and DETECT every planted
violation. Runs against plain ringcached nodes with no membership, routed by
a membership known only to the client (owners from `ringctl locate`), so it
does not depend on the cluster implementation."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402


def judge_cases(t):
    """The classification on hand-made histories: (seq, kind, t0, t1,
    status, node, moved, tryagain, phase)."""
    def w(seq, kind, t0, t1, status="ok"):
        return (seq, kind, t0, t1, status, "a", 0, 0, 0)
    ops = [w(1, "s", 0, 1), w(2, "s", 2, 3), w(3, "d", 4, 5), w(4, "s", 6, 7, "indet"),
           w(5, "s", 8, 9)]
    cases = [
        ((1.5, 1.6, "hit", 1), None, "a read after the first ack sees it"),
        ((1.5, 2.5, "hit", 2), None, "a read overlapping a write may see the new value"),
        ((2.5, 3.5, "hit", 1), None, "a read that started before an ack may see the old value"),
        ((3.5, 3.6, "hit", 1), "stale", "an older value after an ack is stale"),
        ((5.5, 5.6, "hit", 2), "resurrected", "a value from before an acked delete is resurrected"),
        ((5.5, 5.6, "miss", None), None, "a miss after an acked delete"),
        ((3.5, 3.6, "miss", None), "lost", "a miss of an acked value"),
        ((3.5, 4.5, "miss", None), None, "a miss while a delete runs"),
        ((6.5, 7.5, "hit", 4), None, "an indeterminate write may be seen"),
        ((7.5, 7.6, "hit", 4), None, "an indeterminate write seen after it ended"),
        ((1.5, 1.6, "hit", 9), "phantom", "a value never written"),
        ((6.5, 6.6, "hit", 5), "phantom", "a value whose write had not started"),
        ((1.5, 1.6, "hit", -1), "corrupt", "a value that is not this key's"),
        ((9.5, 9.6, "hit", 4), "stale", "an older unacked value after a newer ack"),
    ]
    bad = []
    for (t0, t1, st, seq), want, desc in cases:
        got = lg.judge(ops, t0, t1, st, seq)
        if got != want:
            bad.append("%s: got %r want %r" % (desc, got, want))
    t.ok(not bad, "judge classifies %d hand-made observations" % len(cases), "\n".join(bad))
    t.ok(lg.unacked_applied(ops, 4) and not lg.unacked_applied(ops, 5),
         "unacked-applied: a value from an indeterminate write is counted")


def movement_cases(t, keys):
    a = [("a", "127.0.0.1:1"), ("b", "127.0.0.1:2"), ("c", "127.0.0.1:3")]
    d = a + [("d", "127.0.0.1:4")]
    mv = lg.movement(lg.members_text(a), lg.members_text(d, 2), keys)
    t.ok(not mv["survivor_moves"] and mv["frac_ok"] and not mv["set_violations"]
         and len(mv["nonmoving"]) == len(keys) - mv["primary_changed"],
         "a join: 0 keys between survivors, primary-changed %.3f vs 1/4, non-moving set"
         % mv["primary_frac"], mv["survivor_moves"][:5])
    mv2 = lg.movement(lg.members_text(d, 2, replicas=2), lg.members_text(d[:2] + d[3:], 3, 2),
                      keys)
    t.ok(not mv2["survivor_moves"] and mv2["frac_ok"] and not mv2["set_violations"],
         "a leave with R=2: 0 between survivors, owner sets only lose the leaver (%.3f, sets %.3f)"
         % (mv2["primary_frac"], mv2["set_frac"]))
    # A weight change moves keys between nodes present in both: detected.
    text_w = lg.members_text(a).replace("node b 127.0.0.1:2", "node b 127.0.0.1:2 weight=3")
    mv3 = lg.movement(lg.members_text(a), text_w, keys)
    t.ok(len(mv3["survivor_moves"]) > 0 and not mv3["frac_ok"],
         "planted: a reweight moves %d keys between survivors and is detected"
         % len(mv3["survivor_moves"]))
    # A swap of two nodes (the new node also displaces a survivor) is a
    # set violation for a join.
    e = [("a", "127.0.0.1:1"), ("b", "127.0.0.1:2"), ("x", "127.0.0.1:5"), ("d", "127.0.0.1:4")]
    mv4 = lg.movement(lg.members_text(a), lg.members_text(e, 2), keys)
    t.ok(len(mv4["survivor_moves"]) > 0 or len(mv4["set_violations"]) > 0,
         "planted: a membership that replaced a node is not a clean join")


def epoch_client(t):
    """The epoch-declaring client against nodes given epoch 2 through their
    state directories (docs/cluster.md), starting from a stale epoch-1 view
    without node c: it must follow MOVED, learn epoch 2 from `config`, and
    the declared sweep must find everything on its owners."""
    r = lg.subprocess.run([lg.RINGCACHED, "--help"], capture_output=True, text=True)
    if "--state-dir" not in r.stdout + r.stderr:
        t.skip("epoch-declaring client against cluster nodes", "ringcached has no --state-dir")
        return
    cl = lg.Cluster(mem=64)
    try:
        ids = ["a", "b", "c"]
        for i in ids:
            n = lg.NodeProc(cl, i)
            n.port = lg.free_port_pair()
            cl.nodes[i] = n
        text = cl.members(ids, epoch=2)
        for i in ids:
            with open(os.path.join(cl.nodes[i].state_dir, "active.members"), "w") as f:
                f.write(text)
            cl.nodes[i].start()
        conv = cl.converged(2, ids)
        t.ok(all(v == (2, 0) for v in conv.values()), "nodes started at EPOCH 2 0", conv)
        keys = ["ek-%d" % i for i in range(1500)]
        stale = lg.members_text([(i, cl.nodes[i].addr_s) for i in ("a", "b")], epoch=1)
        view = lg.View(keys, [cl.nodes["a"].addr], members=stale)
        hist = lg.History(keys, size=100)
        load = lg.Load(hist, view, "epoch", writers=3, readers=2, seed=2)
        acked = load.fill()
        moved = sum(o[6] for k in keys for o in hist.ops[k])
        t.ok(acked == len(keys) and view.epoch == 2 and moved > 0,
             "from a stale view: %d MOVED followed, epoch 2 learnt, %d/%d acked"
             % (moved, acked, len(keys)))
        lg.run_load_around(load, 1, lambda: None, 1500, 1500)
        viol, _ = lg.check_reads(hist)
        t.ok(not any(viol.values()) and load.counts["Werr"] == 0 and load.counts["Rerr"] == 0,
             "epoch load: %d writes, %d reads, no error or violation"
             % (load.counts["W"], load.counts["R"]), (load.errors[:3], viol))
        res = lg.sweep(hist, text)
        t.diag(lg.sweep_summary(res))
        t.ok(lg.sweep_clean(res) and res["misrouted"] == {i: 0 for i in ids},
             "declared sweep at epoch 2: every key on its owner, no orphan, misrouted 0")
        owners = lg.locate(text, keys)
        k = keys[0]
        other = [i for i in ids if i not in owners[k]][0]
        c = lg.Conn(cl.nodes[other].addr)
        try:
            c.declare(2)
            vals, err = c.get_multi([k])
        finally:
            c.close()
        t.ok(vals is None and lg.parse_redirect(err) == (
            "moved", 2, cl.nodes[owners[k][0]].addr_s),
            "a declared get at a non-owner is MOVED to the owner", err)
    finally:
        cl.close()
        cl.cleanup_dir()


def main():
    t = lg.Tap()
    lg.watchdog(120)
    cl = lg.Cluster(plain=True, mem=64)
    try:
        run(t, cl)
    finally:
        cl.close()
        cl.cleanup_dir()
    lg.run_tap(t, epoch_client)
    t.done()


def run(t, cl):
    run_id = "%x" % (int(time.time() * 1000) & 0xffffff)
    keys = ["st-%s-%d" % (run_id, i) for i in range(1200)]
    judge_cases(t)
    movement_cases(t, ["mv-%d" % i for i in range(3000)])

    for i in ("a", "b", "c"):
        cl.add(i)
    members = cl.members(["a", "b", "c"])
    view = lg.View(keys, [n.addr for n in cl.nodes.values()], members)
    hist = lg.History(keys, size=120)
    load = lg.Load(hist, view, "route", writers=3, readers=2, seed=1, progress=t.diag)
    acked = load.fill()
    t.ok(acked == len(keys), "fill: every key acknowledged (%d)" % acked)
    load.start(phase=1)
    lg.wait_for(lambda: load.counts["W"] > 3000 and load.counts["R"] > 1500, 20, 0.05)
    load.stop()
    t.ok(load.counts["W"] > 1000 and load.counts["Werr"] == 0 and load.counts["Rerr"] == 0,
         "load: %d writes, %d reads, no errors" % (load.counts["W"], load.counts["R"]),
         load.errors[:5])
    viol, unacked = lg.check_reads(hist)
    t.ok(not any(viol.values()), "clean run: no stale/resurrected/lost/phantom read in %d reads"
         % len(hist.reads), {k: v[:3] for k, v in viol.items() if v})
    res = lg.sweep(hist, members, declare=False)
    t.diag(lg.sweep_summary(res))
    t.ok(lg.sweep_clean(res) and sum(res["found"].values()) > 0,
         "clean run: the sweep finds every acked key on its owner and no orphan")
    t.ok(lg.evicted(res) is None, "clean run: no evictions")
    nm = lg.phase_errors(hist, 1, set(keys))
    t.ok(not any(nm.values()), "clean run: no errors, TRYAGAIN or MOVED on any key")

    # ---- plant violations behind the checker's back
    owners = lg.locate(members, keys)
    addr = {i: cl.nodes[i].addr for i in cl.nodes}
    cli = lg.Client(view, "route")

    def last_set(k):
        return max(o[0] for o in hist.ops[k] if o[1] == "s" and o[4] == "ok")

    def write_ok(k, kind="s"):
        s = hist.next_seq(k)
        r = cli.op("set" if kind == "s" else "delete", k, lg.make_value(k, s, hist.size))
        hist.add_write(k, s, kind, r, 2)
        assert r.status == "ok", (k, r.status, r.why)
        return s

    def direct(node, k, value):
        c = lg.Conn(addr[node])
        try:
            assert c.store("set", k, value) == b"STORED"
        finally:
            c.close()

    def direct_delete(node, k):
        c = lg.Conn(addr[node])
        try:
            c.delete(k)
        finally:
            c.close()

    live = [k for k in keys if hist.ops[k][-1][1] == "s" and hist.ops[k][-1][4] == "ok"]
    k_stale, k_gone, k_res, k_orphan, k_phantom, k_corrupt = live[:6]
    write_ok(k_stale)
    s2 = write_ok(k_stale)
    direct(owners[k_stale][0], k_stale, lg.make_value(k_stale, s2 - 1, hist.size))
    direct_delete(owners[k_gone][0], k_gone)
    s_old = write_ok(k_res)
    write_ok(k_res, "d")
    direct(owners[k_res][0], k_res, lg.make_value(k_res, s_old, hist.size))
    other = [i for i in addr if i not in owners[k_orphan]][0]
    direct(other, k_orphan, lg.make_value(k_orphan, last_set(k_orphan), hist.size))
    direct(owners[k_phantom][0], k_phantom,
           lg.make_value(k_phantom, hist.seq[k_phantom] + 50, hist.size))
    direct(owners[k_corrupt][0], k_corrupt, lg.make_value(k_stale, 1, hist.size))

    n_reads = len(hist.reads)
    for k in (k_stale, k_gone, k_res, k_phantom, k_corrupt):
        hist.add_read(k, cli.op("get", k), 2)
    cli.close()
    viol, _ = lg.check_reads(hist, hist.reads[n_reads:])
    t.ok([r[0] for r in viol["stale"]] == [k_stale], "planted: a stale read is detected",
         viol)
    t.ok([r[0] for r in viol["lost"]] == [k_gone],
         "planted: a read miss of an acked (unrecorded-deleted) key is detected", viol)
    t.ok([r[0] for r in viol["resurrected"]] == [k_res],
         "planted: a read of a resurrected delete is detected", viol)
    t.ok([r[0] for r in viol["phantom"]] == [k_phantom], "planted: a phantom value is detected")
    t.ok([r[0] for r in viol["corrupt"]] == [k_corrupt], "planted: another key's value is detected")

    res = lg.sweep(hist, members, declare=False, orphan_wait=0.5)
    t.diag(lg.sweep_summary(res))
    t.ok(sorted(r[0] for r in res["lost"]) == sorted([k_stale, k_gone]),
         "sweep: the stale value and the deleted key are lost acked writes",
         [r[:3] for r in res["lost"]])
    t.ok([r[0] for r in res["resurrected"]] == [k_res], "sweep: the resurrected delete")
    t.ok([r[0] for r in res["phantom"]] == [k_phantom]
         and [r[0] for r in res["corrupt"]] == [k_corrupt], "sweep: phantom and corrupt values")
    t.ok(res["orphans"] == {i: (1 if i == other else 0) for i in addr},
         "sweep: the item planted on a non-owner is an orphan of %s" % other, res["orphans"])
    t.ok(not lg.sweep_clean(res), "sweep: the planted run is not clean")

    # R=2 membership over data written once: every second replica is missing.
    members2 = lg.members_text([(i, cl.nodes[i].addr_s) for i in ("a", "b", "c")], 1, 2)
    res2 = lg.sweep(hist, members2, declare=False, orphan_wait=0)
    t.ok(len(res2["lost"]) > len(keys) // 2,
         "sweep with R=2: keys missing on their second owner are lost (%d)" % len(res2["lost"]))

    # Non-moving-range errors: a node killed under load shows errors on its
    # keys and none elsewhere.
    load.start(phase=3)
    lg.wait_for(lambda: load.counts["W"] > 5000, 20, 0.05)
    cl.nodes["c"].stop(signal.SIGKILL)
    w0 = load.counts["W"]
    lg.wait_for(lambda: load.counts["W"] > w0 + 1500, 20, 0.05)
    load.stop()
    on_c = {k for k in keys if owners[k][0] == "c"}
    e_c = lg.phase_errors(hist, 3, on_c)
    e_ab = lg.phase_errors(hist, 3, set(keys) - on_c)
    t.ok(len(e_c["write_errors"]) + len(e_c["read_errors"]) > 0 and not any(e_ab.values()),
         "a dead node: errors on its keys (%d writes, %d reads), none on the others"
         % (len(e_c["write_errors"]), len(e_c["read_errors"])),
         {k: v[:2] for k, v in e_ab.items()})
    t.ok(lg.misrouted_acks(hist, 3, [owners]) == [],
         "acks came from the primary per the client's membership")
    fake = {k: ("b",) if v[0] == "a" else v for k, v in owners.items()}
    t.ok(len(lg.misrouted_acks(hist, 3, [fake])) > 0,
         "planted: acks by a node that is not the primary are detected")

    # A run with evictions is invalid.
    small = lg.Cluster(plain=True, mem=2, node_args=["-I", "64k"])
    try:
        small.add("e")
        m_e = small.members(["e"])
        hist_e = lg.History(["ev-%s-%d" % (run_id, i) for i in range(3000)], size=1000)
        view_e = lg.View(hist_e.keys, [small.nodes["e"].addr], m_e)
        lg.Load(hist_e, view_e, "route").fill()
        res_e = lg.sweep(hist_e, m_e, declare=False, orphan_wait=0)
        t.ok(lg.evicted(res_e) is not None and len(res_e["lost"]) > 0,
             "a run with evictions is reported invalid (%s)" % lg.evicted(res_e))
    finally:
        small.close()
        small.cleanup_dir()


if __name__ == "__main__":
    main()
