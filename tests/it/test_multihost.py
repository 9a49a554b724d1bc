"""Across hosts (issue 12): every process on a host of its own, as network
namespaces joined by veth pairs to one bridge (tests/it/netns.py): etcd in
one, four nodes in four others, the load, ringctl and `ringctl watch` in
the client namespace. The membership lives in that etcd.

1. Join and leave under a recorded load (R=2): a b c, join d, leave c,
   with the invariants of the cluster tests (0 acknowledged writes lost, 0
   stale reads, nothing moved that did not change owner).
2. Node a is cut from every other host but the clients (from its peers
   and from etcd: nftables in its namespace) while the load runs, and a
   connection at a keeps writing the keys a is primary of. `ringctl watch`
   (its defaults, store in etcd) sees a down and commits one failover
   through the store, once a's liveness lease in etcd expired (the nodes
   run with --store and renew theirs every second); then the partition
   heals.
   - exactly one store-committed failover: one epoch without a, and no
     other member removed;
   - no write acknowledged by a once it was cut (a write is acknowledged
     only when every owner applied it, and a reaches no other owner);
   - 0 acknowledged writes lost, 0 stale reads, after the heal.
   Figures: the failover time after the partition, the writes refused
   meanwhile."""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import netns  # noqa: E402
import etcdlab  # noqa: E402

NKEYS = 1500
RATE = "0.5"
FAILOVER_TIMEOUT = 30.0


def members_of(text):
    return {i for i, _ in lg.parse_members(text)["nodes"]} if text else set()


class PrimaryWriter:
    """A declared connection at node nid writing, one after the other, the
    keys nid is the primary of; records (invoke, complete, acked)."""

    def __init__(self, addr, keys, epoch):
        self.addr, self.keys, self.epoch = addr, keys, epoch
        self.ops = []
        self.stop = threading.Event()
        self.th = threading.Thread(target=self.run, daemon=True)

    def run(self):
        c, i = None, 0
        while not self.stop.is_set():
            k = self.keys[i % len(self.keys)]
            i += 1
            t0 = time.monotonic()
            try:
                if c is None:
                    c = lg.Conn(self.addr, 2.0)
                    c.declare(self.epoch)
                line = c.store("set", k, b"pw-%d" % i)
                self.ops.append((t0, time.monotonic(), line == b"STORED"))
            except (OSError, ConnectionError, lg.ProtoError):
                self.ops.append((t0, time.monotonic(), False))
                if c is not None:
                    c.close()
                c = None
            self.stop.wait(0.005)
        if c is not None:
            c.close()


def scenario(t):
    label = "four nodes and etcd on hosts of their own"
    try:
        lab = netns.NetLab(["etcd", "a", "b", "c", "d"]).setup()
    except netns.Unavailable as ex:
        t.skip(label, str(ex))
        return
    work = tempfile.mkdtemp(prefix="rc-multihost-")
    cl = watch = e = None
    load = pw = None
    try:
        lab.enter()
        e = etcdlab.Etcd(work, name="store", host=lab.addr("etcd"),
                         popen=lambda argv, **kw: lab.popen("etcd", argv, **kw)).start()
        cl, ok = netns.start_cluster(t, lab, ["a", "b", "c"], replicas=2, mem=64, etcd=e,
                                     node_store=True)
        if not ok:
            return
        t.ok(lg.wait_for(lambda: all(cl.store_record("alive/" + i).startswith("boot ")
                                     for i in ("a", "b", "c")), 10, 0.1),
             "every node holds its liveness record alive/ID in etcd")
        t.diag("etcd at %s; nodes at %s" % (e.endpoint, ", ".join(
            "%s %s" % (i, n.addr_s) for i, n in sorted(cl.nodes.items()))))
        e1 = cl.store_active()
        keys = ["mh-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["b"].addr])
        t.ok(view.refresh(1) and view.epoch == 1, "the client learns epoch 1 across hosts")
        hist = lg.History(keys, size=100)
        load = lg.Load(hist, view, "epoch", writers=3, readers=2, seed=12, progress=t.diag)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "fill: every key acknowledged")

        # ---- 1. join and leave under load, across hosts.
        d = cl.add("d")
        rc, out, err = lg.run_load_around(load, 1, lambda: cl.ctl("join", "--rate", RATE, "d",
                                                                 d.addr_s))
        t.ok(rc == 0, "join d under load across hosts: exit 0", (rc, lg.tail(out), lg.tail(err)))
        e2 = cl.store_active()
        lg.check_transition(t, cl, hist, 1, e1, e2, "join across hosts")
        rc, out, err = lg.run_load_around(load, 2, lambda: cl.ctl("leave", "--rate", RATE, "c"))
        t.ok(rc == 0, "leave c under load across hosts: exit 0",
             (rc, lg.tail(out), lg.tail(err)))
        e3 = cl.store_active()
        lg.check_transition(t, cl, hist, 2, e2, e3, "leave across hosts",
                            extra=[("c", cl.nodes["c"].addr)] if cl.nodes["c"].alive() else [])
        cl.nodes["c"].stop()

        # ---- 2. a cut from its peers and etcd; watch fails it over.
        wlog = open(os.path.join(cl.dir, "watch.log"), "wb")
        watch = lg.track(subprocess.Popen(cl.ctl_cmd("watch"), stdin=subprocess.DEVNULL,
                                          stdout=wlog, stderr=wlog))
        wlog.close()
        cl.ctl_procs.append(watch)
        epoch3 = cl.store_epoch()
        # Keys of its own (not the recorded load's), a the primary of each.
        pkeys = ["mhp-%d" % i for i in range(600)]
        own3 = lg.locate(e3, pkeys)
        a_primary = [k for k in pkeys if own3[k][0] == "a"]
        pw = PrimaryWriter(cl.nodes["a"].addr, a_primary, epoch3)
        load.start(3)
        pw.th.start()
        lg.wait_for(lambda: load.counts["W"] + load.counts["R"] > 500 and len(pw.ops) > 50,
                    20, 0.05)
        w_err0 = load.counts["Werr"]
        lab.partition("a", "peers")
        t_part = time.monotonic()
        effect = {"a->b": lab.reachable("a", (lab.addr("b"), netns.NODE_PORT + 10000), 0.5),
                  "a->etcd": lab.reachable("a", (lab.addr("etcd"), 2379), 0.5),
                  "client->a": lab.reachable(None, cl.nodes["a"].addr, 0.5)}
        t.ok(effect == {"a->b": False, "a->etcd": False, "client->a": True},
             "the partition is in force: a reaches neither its peers nor etcd; clients reach it",
             effect)
        alive_gone = [None]

        def lease_watch():
            if alive_gone[0] is None and cl.store_record("alive/a") == "":
                alive_gone[0] = time.monotonic() - t_part
            return cl.store_epoch() > epoch3 and not cl.store_pending()
        failed_over = lg.wait_for(lease_watch, FAILOVER_TIMEOUT, 0.05)
        t_fo = time.monotonic() - t_part
        t.ok(alive_gone[0] is not None and alive_gone[0] <= t_fo + 0.1,
             "a's liveness lease in etcd expired (%.2f s after the partition) before its "
             "failover was committed (%.2f s)" % (alive_gone[0] or -1, t_fo))
        e4 = cl.store_active()
        t.ok(failed_over and members_of(e4) == members_of(e3) - {"a"},
             "watch committed the failover through etcd %.2f s after the partition (epoch %d "
             "without a)" % (t_fo, cl.store_epoch()), e4)
        refused = load.counts["Werr"] - w_err0
        # The partition stays a little past the failover, then heals.
        lg.wait_for(lambda: time.monotonic() > t_part + t_fo + 2.0, 10, 0.05)
        lab.heal("a")
        t_heal = time.monotonic()
        lg.wait_for(lambda: load.counts["W"] > 0 and time.monotonic() > t_heal + 2.0, 10, 0.05)
        load.stop()
        pw.stop.set()
        pw.th.join(10)
        acked_after = [o for o in pw.ops if o[2] and o[0] > t_part + 0.05]
        acked_before = [o for o in pw.ops if o[2] and o[1] < t_part]
        t.ok(acked_before and not acked_after,
             "no write acknowledged by a once it was cut (%d acknowledged before, %d of %d "
             "attempts after)" % (len(acked_before), len(acked_after),
                                  sum(1 for o in pw.ops if o[0] > t_part + 0.05)),
             acked_after[:5])
        t.diag("figures: failover %.2f s after the partition; %d load writes refused "
               "(SERVER_ERROR UNAVAILABLE) until then" % (t_fo, refused))

        # Exactly one store-committed failover: epochs after 3 remove only a.
        final = cl.store_epoch()
        removals = []
        prev = members_of(e3)
        for ep in range(epoch3 + 1, final + 1):
            m = members_of(cl.store_record("history/epoch-%d.members" % ep))
            removals += sorted(prev - m)
            prev = m
        t.ok(removals == ["a"], "exactly one store-committed failover: epochs %d..%d removed %s"
             % (epoch3 + 1, final, removals or "nobody"))
        # The writer's own keys go (so the sweep's item counts are the load's).
        dc = lg.Conn(cl.nodes["b"].addr, 5.0)
        try:
            for k in a_primary:
                dc.delete(k)
        finally:
            dc.close()
        # 0 lost, 0 stale: the reads of the phase, then every owner swept.
        viol, _ = lg.check_reads(hist, [r for r in hist.reads if r[8] == 3])
        t.ok(not viol["stale"] and not viol["lost"] and not viol["resurrected"],
             "across the partition: 0 stale reads, 0 misses of acknowledged values, "
             "0 resurrected deletes (%d reads)" % sum(1 for r in hist.reads if r[8] == 3),
             [r[:6] for r in (viol["stale"] + viol["lost"])[:5]])
        res = lg.sweep(hist, cl.store_active())
        t.diag("after the heal: " + lg.sweep_summary(res))
        t.ok(not res["lost"] and not res["resurrected"] and not res["phantom"]
             and not res["corrupt"] and not res["errors"],
             "after the heal: 0 acknowledged writes lost on the owners (%d acked keys)"
             % res["acked_keys"], (res["lost"] + res["errors"])[:5])
        try:
            with open(os.path.join(cl.dir, "watch.log")) as f:
                t.diag("ringctl watch: " + lg.tail(f.read(), 600))
        except OSError:
            pass
    finally:
        if pw is not None:
            pw.stop.set()
        if load is not None:
            load.stop()
        lg.stop_proc(watch)
        if cl is not None:
            lg.close_cluster(t, cl)
        if e is not None:
            e.stop()
        lab.close()
        if t.failed == 0:
            shutil.rmtree(work, ignore_errors=True)
        else:
            t.diag("etcd data and log kept in %s" % work)


def main():
    why = etcdlab.available()
    t = lg.Tap()
    lg.watchdog(300)
    if why:
        t.skip("hosts as network namespaces, membership in etcd", why)
    else:
        lg.run_tap(t, scenario)
    t.done()


if __name__ == "__main__":
    main()
