"""The admin killed at every file operation of the directory store's
transactions (issue 26, f01). R=2, a, b, c, and d joining and leaving in
turn. ringctl runs with RC_MSTORE_CRASH_AT=N and RC_MSTORE_CRASH_TXN=NAME#K
(lib/mstore.c): it exits 137 just before the Nth file operation (create,
write, fsync, rename, link, unlink, mkdir) of the selected transaction:
PREPARE (creates pending.members), the first re-store of the transition
record (pending.meta, the second write of it) and the commit (writes
active.members). For each transaction of a join and of a leave, N goes
1, 2, 3, ... until ringctl runs to its end. After each crash:

- `ringctl resume` exits 0 and leaves nothing pending: the change was
  finished (the epoch moved on) or cleanly never started;
- every node reports the store's epoch, nothing pending;
- every key written (and acknowledged) before the change reads back with
  its value through every member, none answers TRYAGAIN or SERVER_ERROR;
- the next change (the next crash point's join or leave) is accepted.

Before the directory backend's journal, a crash right before the put of
committed.meta (after the unlink of pending.meta) left the store at the
new epoch with nothing to resume: resume exited 1, every node stayed
fenced.

Then (f12) `ringctl watch` with its defaults beside the cluster, a join
held right before its commit with the fence up (RINGCTL_PAUSE_AT=commit):
7 s later (past the 5 s admin lease) the live admin still holds it; then
it is killed with SIGKILL, and within 10 s every key answers through every
node with its value (the watch resumed the join; before, it waited for its
30 s --transition-timeout)."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

NKEYS = 300
# (label, the transaction: a record it writes, and which write of it).
TXNS = [("prepare", "pending.members#1"), ("record", "pending.meta#2"),
        ("commit", "active.members#1")]
# To replay one crash: STORE_CRASH_ONLY=commit (a label) sweeps that
# transaction only, STORE_CRASH_FROM=N from N on.
if os.environ.get("STORE_CRASH_ONLY"):
    TXNS = [x for x in TXNS if x[0] == os.environ["STORE_CRASH_ONLY"]]
FIRST_N = int(os.environ.get("STORE_CRASH_FROM", "1"))


def write_all(cl, ids, keys, gen):
    """Set every key to its generation-gen value through a member, plain
    (relayed to the primary); the keys whose reply was not STORED."""
    c = lg.Conn(cl.nodes[ids[0]].addr, 10.0)
    bad = []
    try:
        for j in range(0, len(keys), 100):
            part = keys[j:j + 100]
            c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(value(k, gen)),
                                                        value(k, gen)) for k in part))
            for k in part:
                r = c.readline()
                if r != b"STORED":
                    bad.append((k, r))
    finally:
        c.close()
    return bad


def value(k, gen):
    return ("%s-g%d" % (k, gen)).encode()


def read_all(cl, ids, keys, gen):
    """Read every key through every member (plain gets): the wrong or
    missing values and the error replies, as (node, key or batch, what)."""
    bad = []
    for nid in ids:
        try:
            c = lg.Conn(cl.nodes[nid].addr, 10.0)
        except OSError as e:
            bad.append((nid, "connect", str(e)))
            continue
        try:
            for j in range(0, len(keys), 50):
                part = keys[j:j + 50]
                vals, err = c.get_multi(part)
                if vals is None:
                    bad.append((nid, part[0], err))
                    continue
                bad.extend((nid, k, vals.get(k)) for k in part if vals.get(k) != value(k, gen))
        except (OSError, lg.ProtoError) as e:
            bad.append((nid, "read", str(e)))
        finally:
            c.close()
    return bad


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        d = cl.add("d")
        keys = ["sc-%d" % i for i in range(NKEYS)]
        # The next N of each (kind, transaction); None once ringctl ran to
        # its end with it. Crash points seen, for the coverage checks.
        nxt = {(kind, sel): FIRST_N for kind in ("join", "leave") for _, sel in TXNS}
        label = {sel: name for name, sel in TXNS}
        seen = {key: [] for key in nxt}
        member = False
        gen = 0
        t0 = time.monotonic()
        while any(v is not None for v in nxt.values()):
            kind = "leave" if member else "join"
            ids = ["a", "b", "c"] + (["d"] if member else [])
            args = ["leave", "d"] if member else ["join", "d", d.addr_s]
            todo = [sel for _, sel in TXNS if nxt[(kind, sel)] is not None]
            gen += 1
            bad = write_all(cl, ids, keys, gen)
            if not t.ok(not bad, "gen %d: every key set (STORED)" % gen, bad[:5]):
                return
            epoch = cl.store_epoch()
            if not todo:
                # This kind's sweep is done: change plainly, to sweep the other.
                rc, out, err = cl.ctl(*args)
                if not t.ok(rc == 0, "%s without a crash: exit 0" % kind,
                            (rc, lg.tail(out), lg.tail(err))):
                    return
                member = not member
                continue
            sel = todo[0]
            n = nxt[(kind, sel)]
            rc, out, err = cl.ctl(*args, env={"RC_MSTORE_CRASH_AT": str(n),
                                              "RC_MSTORE_CRASH_TXN": sel})
            what = "%s %s N=%d" % (kind, label[sel], n)
            if rc == 0:
                nxt[(kind, sel)] = None
                t.ok(seen[(kind, sel)] or FIRST_N > 1,
                     "%s: ringctl ran to its end after %d crash points" % (what, n - 1),
                     (lg.tail(out), lg.tail(err)))
                member = not member
                conv = cl.converged(epoch + 1, ["a", "b", "c"] + (["d"] if member else []))
                t.ok(all(v == (epoch + 1, 0) for v in conv.values()),
                     "%s: every node at epoch %d" % (what, epoch + 1), conv)
                continue
            if not t.ok(rc == 137 and "RC_MSTORE_CRASH_AT" in err,
                        "%s: ringctl exits 137 at the crash point" % what,
                        (rc, lg.tail(out), lg.tail(err))):
                return
            point = [ln for ln in err.splitlines() if "RC_MSTORE_CRASH_AT" in ln][-1]
            point = point.split("exiting before ", 1)[-1].replace(cl.store + "/", "").replace(cl.store, "DIR")
            seen[(kind, sel)].append(point)
            nxt[(kind, sel)] = n + 1
            rc2, out2, err2 = cl.ctl("resume")
            now = cl.store_epoch()
            done = now == epoch + 1
            if not t.ok(rc2 == 0 and now in (epoch, epoch + 1) and not cl.store_pending(),
                        "%s (before %s): resume exits 0, %s" %
                        (what, point, "finished" if done else "not started"),
                        (rc2, now, cl.store_pending(), lg.tail(out2), lg.tail(err2))):
                return
            if done:
                member = not member
            ids = ["a", "b", "c"] + (["d"] if member else [])
            conv = cl.converged(now, ids)
            if not t.ok(all(v == (now, 0) for v in conv.values()),
                        "%s: every member at epoch %d, nothing pending" % (what, now), conv):
                return
            bad = read_all(cl, ids, keys, gen)
            if not t.ok(not bad, "%s: %d keys read back through %d members, no error" %
                        (what, NKEYS, len(ids)), bad[:5]):
                return
        for kind in ("join", "leave") if (("join", "active.members#1")) in seen else ():
            pts = seen[(kind, "active.members#1")]
            t.ok(any(p.startswith("unlink pending.meta") for p in pts) or
                 any("txn.journal" in p for p in pts),
                 "%s commit: the crash points include the store's commit point" % kind, pts)
        t.diag("%d generations in %.0f s" % (gen, time.monotonic() - t0))
        # A further change is accepted after all of it.
        args = ["leave", "d"] if member else ["join", "d", d.addr_s]
        rc, out, err = cl.ctl(*args)
        t.ok(rc == 0, "a further %s: exit 0" % args[0], (rc, lg.tail(out), lg.tail(err)))
    finally:
        lg.close_cluster(t, cl)


def admin_death(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2)
    watch = adm = None
    try:
        if not ok:
            return
        d = cl.add("d")
        ids = ["a", "b", "c"]
        keys = ["ad-%d" % i for i in range(400)]
        bad = write_all(cl, ids, keys, 1)
        if not t.ok(not bad, "400 keys set (STORED)", bad[:5]):
            return
        watch = cl.ctl_bg("watch")
        pause = os.path.join(cl.dir, "pause-commit")
        adm = cl.ctl_bg("join", "d", d.addr_s, env={"RINGCTL_PAUSE_AT": "commit",
                                                     "RINGCTL_PAUSE_FILE": pause})
        lg.wait_for(lambda: os.path.exists(pause) or adm.poll() is not None, 60, 0.05)
        if not t.ok(os.path.exists(pause), "the join is fenced, its admin held before the commit"):
            return
        time.sleep(7)
        t.ok(adm.poll() is None and cl.store_pending() and cl.store_epoch() == 1,
             "7 s later (past the 5 s admin lease) the live admin still holds the transition")
        os.kill(adm.pid, signal.SIGKILL)
        t0 = time.monotonic()
        adm.wait()
        first = None
        while True:
            bad = read_all(cl, ids, keys, 1)
            took = time.monotonic() - t0
            first = bad if first is None else first
            if not bad or took > 20:
                break
            time.sleep(0.1)
        t.diag("right after the kill: %d reads wrong, e.g. %r" % (len(first), first[:3]))
        t.ok(not bad and took < 10, "%.1f s after the admin's SIGKILL every key answers with its "
             "value through a, b and c (bound 10 s)" % took, bad[:5])
        conv = cl.converged(2, ids + ["d"])
        t.ok(all(v == (2, 0) for v in conv.values()) and not cl.store_pending(),
             "the watch finished the join: every node at epoch 2", conv)
        bad = read_all(cl, ids + ["d"], keys, 1)
        t.ok(not bad, "no acknowledged write lost: 400 keys through all 4 nodes", bad[:5])
    finally:
        for p in (adm, watch):
            if p is not None:
                lg.stop_proc(p, 10.0)
        lg.close_cluster(t, cl)


def main():
    lg.tap_main([scenario, admin_death], 600, "the admin killed in the store and with the fence up")


if __name__ == "__main__":
    main()
