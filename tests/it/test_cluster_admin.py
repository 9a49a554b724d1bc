"""Admin faults under load, R=1: two `ringctl join` of different nodes
started at once (exactly one exits 0, the other 3, the store's epoch goes up
by exactly 1); the admin killed with SIGKILL while `status` shows COPYING,
then `resume` (consistent at N+1) or `abort` (consistent at N, the joiner
purged what it imported). The copy is rate-limited (--rate 1) over ~16 MB so
that it lasts long enough to race and to kill."""
import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

NKEYS = 16000
SIZE = 1000


def join_paused_in_copy(cl, node):
    """Start `ringctl join` with RINGCTL_PAUSE_AT=copy: it stops right after
    StartCopy (the nodes copy on) until its pause file is removed, so a
    kill -9 lands in COPY for certain. Returns (proc, copying, status):
    copying is true when the admin reached the pause and `ringctl status`
    shows a COPYING phase."""
    pause = os.path.join(cl.dir, "pause-copy-%s" % node.id)
    proc = cl.ctl_bg("join", "--rate", "1", node.id, node.addr_s,
                     env={"RINGCTL_PAUSE_AT": "copy", "RINGCTL_PAUSE_FILE": pause})
    paused = lg.wait_for(lambda: proc.poll() is not None or os.path.exists(pause), 30, 0.02)
    raw = cl.status()["raw"] if paused and proc.poll() is None else ""
    return proc, (paused and proc.poll() is None and os.path.exists(pause)
                  and re.search(r"copy", raw, re.I) is not None), raw


def scenario(t):
    why = lg.supports_cluster()
    if why:
        t.skip("racing admins, admin killed during COPY then resume/abort", why)
        return
    cl, ok = lg.start_cluster(t, ["a", "b", "c"])
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["rk-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        if not t.ok(view.refresh(1), "the client learns epoch 1 from `config`"):
            return
        hist = lg.History(keys, size=SIZE)
        load = lg.Load(hist, view, "epoch", writers=2, readers=1, seed=5, progress=t.diag)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "fill: %d keys of %d bytes" % (NKEYS, SIZE))

        # ---- two admins racing
        e, f = cl.add("e"), cl.add("f")

        def race():
            # Options before the operands: ringctl's getopt stops at the
            # first operand ("+"), so `join ID ADDR --rate R` is refused.
            p1 = cl.ctl_bg("join", "--rate", "1", "e", e.addr_s)
            p2 = cl.ctl_bg("join", "--rate", "1", "f", f.addr_s)
            outs = [p.communicate(timeout=90) for p in (p1, p2)]
            return [p1.returncode, p2.returncode], outs
        rcs, outs = lg.run_load_around(load, 1, race)
        t.ok(sorted(rcs) == [0, 3], "two admins racing: one exits 0, the other 3 (%s)" % rcs,
             [lg.tail(o[1]) for o in outs])
        e2 = cl.store_active()
        ids2 = {i for i, _ in lg.parse_members(e2)["nodes"]}
        t.ok(cl.store_epoch() == 2 and len(ids2 & {"e", "f"}) == 1 and not cl.store_pending(),
             "the store's epoch went up by exactly 1 with exactly one of e, f", e2)
        winner = "e" if "e" in ids2 else "f"
        loser = cl.nodes["f" if winner == "e" else "e"]
        conv = cl.converged(2, sorted(ids2))
        t.ok(all(v == (2, 0) for v in conv.values()), "every member at EPOCH 2 0", conv)
        lg.check_transition(t, cl, hist, 1, e1, e2, "race winner %s" % winner,
                            extra=[(loser.id, loser.addr)])

        # ---- the admin killed during COPY, then resume
        d = cl.add("d")
        state = {}

        def kill_then_resume():
            p, state["copying"], state["raw"] = join_paused_in_copy(cl, d)
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            state["out"] = p.communicate(timeout=10)
            state["killed_rc"] = p.returncode
            return cl.ctl("resume")
        rc, out, err = lg.run_load_around(load, 2, kill_then_resume)
        t.ok(state["copying"] and state["killed_rc"] == -signal.SIGKILL,
             "ringctl join killed with SIGKILL while status shows COPYING",
             (state["raw"][-600:], state["out"]))
        t.ok(rc == 0 and cl.store_epoch() == 3 and not cl.store_pending(),
             "resume finishes the join: exit 0, epoch 3", (rc, lg.tail(out), lg.tail(err)))
        e3 = cl.store_active()
        ids3 = sorted(i for i, _ in lg.parse_members(e3)["nodes"])
        conv = cl.converged(3, ids3)
        t.ok(all(v == (3, 0) for v in conv.values()), "every member at EPOCH 3 0", conv)
        lg.check_transition(t, cl, hist, 2, e2, e3, "kill -9 in COPY + resume",
                            extra=[(loser.id, loser.addr)])

        # ---- the admin killed during COPY, then abort
        attempted = lg.members_text(lg.parse_members(e3)["nodes"] + [(loser.id, loser.addr_s)],
                                    4, cl.replicas, cl.vnodes)

        def kill_then_abort():
            p, state["copying"], state["raw"] = join_paused_in_copy(cl, loser)
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            out = p.communicate(timeout=10)
            state["killed_rc"], state["out"] = p.returncode, out
            return cl.ctl("abort")
        rc, out, err = lg.run_load_around(load, 3, kill_then_abort)
        t.ok(state["copying"] and state["killed_rc"] == -signal.SIGKILL,
             "ringctl join %s killed with SIGKILL while COPYING" % loser.id,
             (state["raw"][-600:], state["out"]))
        t.ok(rc == 0 and cl.store_epoch() == 3 and not cl.store_pending(),
             "abort: exit 0, the store still at epoch 3", (rc, lg.tail(out), lg.tail(err)))
        conv = cl.converged(3, ids3)
        t.ok(all(v == (3, 0) for v in conv.values()), "every member still at EPOCH 3 0", conv)
        lg.check_transition(t, cl, hist, 3, e3, e3, "kill -9 in COPY + abort",
                            extra=[(loser.id, loser.addr)], attempted=attempted)
    finally:
        cl.close()
        if t.failed == 0:
            cl.cleanup_dir()
        else:
            t.diag("logs kept in %s" % cl.dir)


def main():
    t = lg.Tap()
    lg.watchdog(170)
    lg.run_tap(t, scenario)
    t.done()


if __name__ == "__main__":
    main()
