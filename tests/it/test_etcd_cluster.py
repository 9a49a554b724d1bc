"""A cluster whose membership lives in a real etcd (`--store etcd://...`):
init, a join and a leave under a recorded load (R=2) with the invariants
of the cluster tests (0 acknowledged writes lost, 0 stale reads), the
records under the cluster's key prefix; then an etcd outage: the nodes
never wait for etcd, so the load goes on without one error while etcd is
down, `ringctl join` fails at once with a message naming etcd and changes
nothing, and once etcd is back the same join succeeds."""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import etcdlab  # noqa: E402

NKEYS = 2000
RATE = "0.2"


def scenario(t):
    work = tempfile.mkdtemp(prefix="rc-etcdcl-")
    e = etcdlab.Etcd(work, name="store").start()
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2, etcd=e)
    try:
        if not ok:
            return
        e1 = cl.store_active()
        t.ok(lg.parse_members(e1)["epoch"] == 1 and not e1.startswith("# rev"),
             "etcd holds the active membership at PREFIX/active.members (epoch 1, no rev line "
             "in the value)", e1[:200])
        keys = ["ek-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        t.ok(view.refresh(1) and view.epoch == 1, "the client learns epoch 1", view.text)
        hist = lg.History(keys, size=200)
        load = lg.Load(hist, view, "epoch", writers=3, readers=2, seed=7, progress=t.diag)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "fill: every key acknowledged")

        d = cl.add("d")
        rc, out, err = lg.run_load_around(
            load, 1, lambda: cl.ctl("join", "--rate", RATE, "d", d.addr_s))
        t.ok(rc == 0, "ringctl join d under load, store in etcd: exit 0",
             (rc, lg.tail(out), lg.tail(err)))
        e2 = cl.store_active()
        t.ok(cl.store_epoch() == 2 and not cl.store_pending(),
             "etcd: active epoch 2, no pending record", e2)
        t.ok(cl.store_record("history/epoch-2.members") == e2,
             "etcd: history/epoch-2.members is the committed membership")
        lg.check_transition(t, cl, hist, 1, e1, e2, "join over etcd")

        rc, out, err = lg.run_load_around(load, 2, lambda: cl.ctl("leave", "--rate", RATE, "b"))
        t.ok(rc == 0, "ringctl leave b under load: exit 0", (rc, lg.tail(out), lg.tail(err)))
        e3 = cl.store_active()
        t.ok(cl.store_epoch() == 3 and {i for i, _ in lg.parse_members(e3)["nodes"]}
             == {"a", "c", "d"}, "etcd: epoch 3 with a c d", e3)
        extra = [("b", cl.nodes["b"].addr)] if cl.nodes["b"].alive() else []
        lg.check_transition(t, cl, hist, 2, e2, e3, "leave over etcd", extra=extra)

        # ---- the admin dies mid-copy: with etcd, its lease tells the watch.
        # Two watches run; one holds the watch role and the other stands
        # by. The holder is killed -9 right after the admin: the standby
        # takes the role once the holder's lease ran out and finishes the
        # join.
        def start_watch(name):
            path = os.path.join(cl.dir, name + ".log")
            with open(path, "wb") as wlog:
                p = lg.track(subprocess.Popen(cl.ctl_cmd("watch"), stdin=subprocess.DEVNULL,
                                              stdout=wlog, stderr=wlog))
            cl.ctl_procs.append(p)
            return p, path

        def log_has(path, text):
            with open(path, errors="replace") as fh:
                return text in fh.read()
        watch, wlog_path = start_watch("watch")
        held = lg.wait_for(lambda: log_has(wlog_path, "this process holds the role"), 20, 0.05)
        watch_b, wblog_path = start_watch("watch-b")
        stood = lg.wait_for(lambda: log_has(wblog_path, "standing by"), 20, 0.05)
        t.ok(held and stood, "two ringctl watch: the first holds the watch role (role/watch), "
             "the second stands by")
        g = cl.add("g")

        def die_and_wait():
            r = cl.ctl("join", "--rate", RATE, "g", g.addr_s, env={"RINGCTL_EXIT_AFTER": "copy"})
            watch.kill()
            watch.wait()
            t0 = time.monotonic()
            ok = lg.wait_for(lambda: cl.store_epoch() == 4 and not cl.store_pending(), 40, 0.1)
            return r, ok, time.monotonic() - t0
        (rc, out, err), done, secs = lg.run_load_around(load, 5, die_and_wait)
        lg.stop_proc(watch_b)
        with open(wblog_path, errors="replace") as f:
            wtext = f.read()
        with open(wlog_path, errors="replace") as f:
            atext = f.read()
        t.ok(rc == 4 and done and "holds the watch role now" in wtext
             and "no admin lease in the store" in wtext and "resuming" not in atext,
             "the admin of join g died after COPY and the watch holding the role was killed -9: "
             "the standby watch took the role, saw the admin lease expire and finished the join "
             "%.1f s later (admin lease 5 s, role lease 5 s)" % secs,
             (rc, lg.tail(err), lg.tail(wtext, 800), lg.tail(atext, 400)))
        e4 = cl.store_active()
        lg.check_transition(t, cl, hist, 5, e3, e4, "join finished by the watch")
        rc, out, err = lg.run_load_around(load, 6, lambda: cl.ctl("leave", "--rate", RATE, "g"))
        t.ok(rc == 0 and cl.store_epoch() == 5, "g leaves again (epoch 5)", (rc, lg.tail(err)))
        e3 = cl.store_active()

        # ---- etcd down: the data path goes on, the admin fails clearly,
        # and a running watch rides the outage out (it used to exit).
        f = cl.add("f")
        w2log_path = os.path.join(cl.dir, "watch2.log")
        with open(w2log_path, "wb") as wlog:
            watch2 = lg.track(subprocess.Popen(cl.ctl_cmd("watch"), stdin=subprocess.DEVNULL,
                                               stdout=wlog, stderr=wlog))
        cl.ctl_procs.append(watch2)
        load.start(3)
        try:
            n0 = load.counts["W"] + load.counts["R"]
            lg.wait_for(lambda: load.counts["W"] + load.counts["R"] > n0 + 300, 20, 0.02)
            e.stop()
            errs0 = load.counts["Werr"] + load.counts["Rerr"]
            n1 = load.counts["W"] + load.counts["R"]
            t0 = time.monotonic()
            rc, out, err = cl.ctl("join", "f", f.addr_s, timeout=60)
            secs = time.monotonic() - t0
            t.ok(rc != 0 and "etcd" in err and e.endpoint in err and secs < 15,
                 "etcd down: ringctl join fails in %.1f s naming the etcd endpoint" % secs,
                 (rc, lg.tail(out), lg.tail(err)))
            lg.wait_for(lambda: load.counts["W"] + load.counts["R"] > n1 + 2000, 30, 0.02)
            done = load.counts["W"] + load.counts["R"] - n1
            errs = load.counts["Werr"] + load.counts["Rerr"] - errs0
            t.ok(done >= 2000 and errs == 0,
                 "etcd down: the nodes keep serving (%d operations, %d errors)" % (done, errs),
                 load.errors[-5:])
            conv = cl.converged(5, ["a", "c", "d"])
            t.ok(all(v == (5, 0) for v in conv.values()),
                 "etcd down: the nodes stay at epoch 5, nothing pending", conv)

            # It notices either reading the store or renewing its role's
            # lease, whichever comes first (then it stands by).
            def saw_outage(text):
                return ("cannot read the store; trying again" in text
                        or "role/watch: etcd" in text)

            def watch2_saw_outage():
                with open(w2log_path, errors="replace") as fh:
                    return saw_outage(fh.read())
            lg.wait_for(watch2_saw_outage, 20, 0.1)
            e.start()
            # A frozen etcd (connections accepted, never answered): the
            # admin gives up after the store's request timeout.
            e.pause()
            t0 = time.monotonic()
            rc, out, err = cl.ctl("status", timeout=60)
            secs = time.monotonic() - t0
            e.resume()
            t.ok(rc != 0 and "etcd" in err and secs < 15,
                 "etcd frozen: ringctl status gives up in %.1f s with a message naming etcd"
                 % secs, (rc, lg.tail(out), lg.tail(err)))
            t.ok(load.counts["Werr"] + load.counts["Rerr"] == errs0,
                 "etcd down then frozen: still no load error", load.errors[-5:])
        finally:
            load.stop()
        t.ok(cl.store_epoch() == 5 and not cl.store_pending(),
             "etcd back: still epoch 5 and no pending record (the failed join wrote nothing)")
        rc, out, err = lg.run_load_around(load, 4, lambda: cl.ctl("join", "--rate", RATE, "f",
                                                                 f.addr_s))
        t.ok(rc == 0 and cl.store_epoch() == 6, "etcd back: the same join succeeds (epoch 6)",
             (rc, lg.tail(out), lg.tail(err)))
        # It holds the role after the outage: role/watch in etcd names this
        # process, and its log's last word on the role is that it holds it.
        # (An outage shorter than a renewal round may not cost the role at
        # all: etcd keeps leases across a restart, so no "lost" is needed.)
        def regained_role():
            with open(w2log_path, errors="replace") as fh:
                text = fh.read()
            last_held = text.rfind("this process holds the role")
            last_lost = max(text.rfind("lost the role"), text.rfind("the role is lost"))
            holder = cl.store_record("role/watch")
            return last_held > last_lost and ("-%d" % watch2.pid) in holder
        regained = lg.wait_for(regained_role, 30, 0.2)
        alive = watch2.poll() is None
        lg.stop_proc(watch2)
        with open(w2log_path, errors="replace") as fh:
            w2text = fh.read()
        t.ok(alive and watch2.returncode == 0 and saw_outage(w2text) and regained,
             "etcd down: ringctl watch logged the outage, kept running through it, held the "
             "watch role after it (role/watch names it) and stopped on SIGTERM (exit 0)",
             (alive, watch2.returncode, regained, cl.store_record("role/watch"),
              lg.tail(w2text, 800)))
        e6 = cl.store_active()
        lg.check_transition(t, cl, hist, 4, e3, e6, "join after the etcd outage")
    finally:
        lg.close_cluster(t, cl)
        e.stop()
        if t.failed == 0:
            import shutil
            shutil.rmtree(work, ignore_errors=True)
        else:
            t.diag("etcd data and log kept in %s" % work)


def main():
    t = lg.Tap()
    lg.watchdog(240)
    why = etcdlab.available() or lg.supports_cluster()
    if why:
        t.skip("a cluster with its membership in etcd", why)
    else:
        lg.run_tap(t, scenario)
    t.done()


if __name__ == "__main__":
    main()
