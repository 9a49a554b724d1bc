"""Node failure, the other shapes (issue 6):
- a node paused with SIGSTOP, removed (`remove --failed`), its keys
  rewritten elsewhere, then resumed with SIGCONT: it never serves a stale
  value (it stalled, so it serves nothing until a heartbeat round told it
  epoch 2 exists; then TRYAGAIN naming epoch 2);
- a node killed and restarted on its state directory comes back empty and
  recovering: its keys answer TRYAGAIN (never a miss, never an old value)
  until `ringctl repair` removes it and joins it again;
- R = 1: `remove --failed` needs --force; `ringctl watch` removes a node
  that stays down (its keys become misses) unless --keep-sole-copies."""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import failover_lib as fl  # noqa: E402

NKEYS = 1500


def latest_acked(hist, k):
    ok = [o for o in hist.ops[k] if o[4] == "ok"]
    return ok[-1][0] if ok else None


def paused_and_restarted(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        e1 = cl.store_active()
        repl = fl.replicated(cl, e1)
        todo = None if repl else "writes are not replicated yet: a secondary holds nothing"
        keys = ["pk-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        view.refresh(1)
        hist = lg.History(keys, size=64)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "fill: every key acknowledged")
        own1 = lg.locate(e1, keys)
        on_c = [k for k in keys if own1[k][0] == "c"]
        c = cl.nodes["c"]

        # ---- SIGSTOP c, remove it, rewrite its keys elsewhere, SIGCONT.
        os.kill(c.pid, signal.SIGSTOP)
        t_stop = time.monotonic()
        try:
            rc, out, err = cl.ctl("remove", "--failed", "c")
            t.ok(rc == 0, "remove --failed c while c is stopped exits 0 (it does not answer "
                 "Hello)", (rc, lg.tail(out), lg.tail(err)))
            t.ok(cl.store_epoch() == 2, "the store's active is epoch 2")
            view.refresh(2)
            n = lg.fill_fast(hist, view, phase=1, keys=on_c)
            t.ok(n == len(on_c), "c's %d keys rewritten at epoch 2 on a and b" % len(on_c))
            # c stays stopped over 3.5 s: longer than the stall limit
            # (CLUSTER_STALL_MS), so both detectors are exercised.
            lg.wait_for(lambda: time.monotonic() > t_stop + 3.5, 10, 0.05)
        finally:
            os.kill(c.pid, signal.SIGCONT)
        t_cont = time.monotonic()
        stale, served, replies = [], 0, {}
        conns = []
        try:
            # A plain request at a node that must not serve is relayed and
            # retried for up to FWD_RETRY_TIMEOUTS (3) forward timeouts:
            # the client waits longer than that.
            plain = lg.Conn(c.addr, 6.0)
            old = lg.Conn(c.addr, 6.0)
            old.declare(1)
            conns = [plain, old]
            i = 0
            while time.monotonic() < t_cont + 2.5:
                k = on_c[i % len(on_c)]
                i += 1
                for cn in conns:
                    vals, line = cn.get_multi([k])
                    if vals is None:
                        tag = line.decode(errors="replace").rsplit(" ", 1)[0] \
                            if line.startswith(b"SERVER_ERROR MOVED") else line.decode(
                                errors="replace")
                        replies[tag] = replies.get(tag, 0) + 1
                        continue
                    served += 1
                    seq = lg.parse_value(k, vals[k]) if k in vals else None
                    if seq is None or seq < latest_acked(hist, k):
                        stale.append((k, seq, latest_acked(hist, k), time.monotonic() - t_cont))
        finally:
            for cn in conns:
                cn.close()
        t.diag("after SIGCONT: replies %s, values served %d" % (replies, served))
        t.ok(not stale and served == 0,
             "resumed after removal: c serves no value of its old keys (stale %d, served %d)"
             % (len(stale), served), stale[:5])
        t.ok(replies.get("SERVER_ERROR TRYAGAIN 2", 0) > 0,
             "c learnt epoch 2 from its peers: TRYAGAIN naming epoch 2", replies)
        t.ok(lg.node_epoch(c.addr) == (1, 0), "c itself stays at epoch 1 (nobody commits a "
             "membership without it to it)")

        # ---- kill -9 a and restart it on its state directory.
        e2 = cl.store_active()
        own2 = lg.locate(e2, keys)
        on_a = [k for k in keys if own2[k][0] == "a"]
        a = cl.nodes["a"]
        a.restart()
        t.ok(lg.node_epoch(a.addr) == (2, 0), "a restarted at epoch 2 (its state directory)")
        row = fl.status_row(cl, "a")
        t.ok(row.get("flags") == "recovering", "ringctl status: a is recovering", row)
        got = {}
        cn = lg.Conn(a.addr, 3.0)
        try:
            cn.declare(2)
            for k in on_a[:200]:
                vals, line = cn.get_multi([k])
                tag = "value" if vals and k in vals else "miss" if vals is not None \
                    else line.decode(errors="replace")
                got[tag] = got.get(tag, 0) + 1
            wline = cn.store("set", on_a[0], b"x")
        finally:
            cn.close()
        # Replicated (R=2): a read goes MOVED to a live replica instead.
        t.ok(list(got) == ["SERVER_ERROR TRYAGAIN 2"] or
             (got and all(g.startswith("SERVER_ERROR MOVED 2 ") for g in got)),
             "restarted a: its keys answer TRYAGAIN (or MOVED to a live replica), never a "
             "miss or a value", got)
        t.ok(wline.startswith(b"SERVER_ERROR TRYAGAIN"), "restarted a: a write answers TRYAGAIN",
             wline)
        rc, out, err = cl.ctl("repair", "a")
        t.ok(rc == 0, "ringctl repair a (remove --failed, join) exits 0",
             (rc, lg.tail(out), lg.tail(err)))
        e4 = cl.store_active()
        t.ok(cl.store_epoch() == 4 and {i for i, _ in lg.parse_members(e4)["nodes"]}
             == {"a", "b"}, "epoch 4 with a and b", e4)
        row = fl.status_row(cl, "a")
        t.ok(row.get("flags") == "-" and row.get("active") == "4",
             "a serves again at epoch 4 (not recovering)", row)
        prim = fl.copies(hist, e4, primary_only=True)
        t.ok(not prim["errors"] and prim["moved"] == 0, "every key answered by its "
             "epoch-4 primary", prim["errors"][:3])
        fl.todo_ok(t, not prim["missing"], "after repair: every acknowledged key is back "
                   "(%d missing)" % len(prim["missing"]), todo, prim["missing"][:5])
    finally:
        cl.close()
        if t.failed == 0:
            cl.cleanup_dir()
        else:
            t.diag("logs kept in %s" % cl.dir)


def watch_r1(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=1)
    watch = None
    try:
        if not ok:
            return
        cl.nodes["c"].stop(signal.SIGKILL)
        rc, out, err = cl.ctl("remove", "--failed", "c")
        t.ok(rc == 2 and "--force" in err and "gone" in err and cl.store_epoch() == 1,
             "R=1: remove --failed without --force is refused (exit 2) with a warning",
             (rc, lg.tail(err)))
        rc, out, err = cl.ctl("remove", "--failed", "b")
        t.ok(rc == 2 and cl.store_epoch() == 1, "R=1: a live node is not removed as failed "
             "either (exit 2)", (rc, lg.tail(err)))
        # --keep-sole-copies: the watch leaves a dead sole owner alone.
        rc, out, err = cl.ctl("watch", "--once", "--down-after", "0", "--keep-sole-copies")
        t.ok("watch\tc\tremove --failed\tfailed" in out and "--force" in err
             and cl.store_epoch() == 1,
             "R=1: watch --keep-sole-copies does not remove c (the removal is refused)",
             (rc, lg.tail(out), lg.tail(err)))
        # By default (no --force) it removes it: a cache's dead node's keys
        # become misses, and it says so.
        watch = cl.ctl_bg("watch", "--down-after", "1", "--interval", "0.2")
        t0 = time.monotonic()
        done = lg.wait_for(lambda: cl.store_epoch() == 2 and not cl.store_pending(), 30, 0.1)
        took = time.monotonic() - t0
        t.ok(done and {i for i, _ in lg.parse_members(cl.store_active())["nodes"]}
             == {"a", "b"}, "watch removed c after it stayed down (%.1f s)" % took,
             cl.store_active())
        conv = cl.converged(2, ["a", "b"])
        t.ok(all(v == (2, 0) for v in conv.values()), "a and b at EPOCH 2 0", conv)
        watch.send_signal(signal.SIGTERM)
        try:
            out, err = watch.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            watch.kill()
            out, err = watch.communicate()
        t.ok("watch\tc\tremove --failed\tdone" in out and watch.returncode == 0
             and "its keys become misses" in err,
             "watch reports the removal, warns that c's keys become misses, and stops on "
             "SIGTERM (exit %s)" % watch.returncode, (lg.tail(out), lg.tail(err)))
        watch = None

        # A store it cannot read is tried again each round; SIGTERM still
        # stops it cleanly (exit 0: it used to exit with the last round's 1).
        bad = os.path.join(cl.dir, "bad-store")
        os.makedirs(bad, exist_ok=True)
        with open(os.path.join(bad, "active.members"), "w") as f:
            f.write("epoch 3\nreplicas 2\nnode a nowhere\n")
        wlog = os.path.join(cl.dir, "watch-bad.log")
        with open(wlog, "wb") as fh:
            watch = lg.track(subprocess.Popen(
                [lg.RINGCTL, "--store", bad, "--token-file", cl.token_file, "watch",
                 "--interval", "0.1"], stdin=subprocess.DEVNULL, stdout=fh, stderr=fh))

        def logged():
            with open(wlog, errors="replace") as fh:
                return fh.read().count("cannot read the store") >= 2
        tried = lg.wait_for(logged, 20, 0.05)
        watch.send_signal(signal.SIGTERM)
        try:
            watch.wait(timeout=20)
        except subprocess.TimeoutExpired:
            watch.kill()
            watch.wait()
        with open(wlog, errors="replace") as fh:
            text = fh.read()
        t.ok(tried and watch.returncode == 0 and "active.members:" in text,
             "watch on a malformed store: names file:line, tries again each round and exits 0 "
             "on SIGTERM (exit %s)" % watch.returncode, lg.tail(text))
        watch = None
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
            watch.wait()
        cl.close()
        if t.failed == 0:
            cl.cleanup_dir()


def scenario(t):
    why = lg.supports_cluster()
    if why:
        t.skip("pause, restart, watch", why)
        return
    paused_and_restarted(t)
    watch_r1(t)


def main():
    t = lg.Tap()
    lg.watchdog(150)
    lg.run_tap(t, scenario)
    t.done()


if __name__ == "__main__":
    main()
