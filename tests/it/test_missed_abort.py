"""A node that missed an abort can always be brought back by ringctl
(issue 11, finding 2). A join of d is stopped after PREPARE (T1: every node
pending), c is paused (SIGSTOP) while T1 is aborted, so c keeps T1. Then a
second join (T2) fails at c (another transition is pending there) and
aborts itself, which replaces the store's aborted.meta with T2. Before the
fix only the last aborted transition was kept: `ringctl abort` sent T2's
token, c refused it, and c stayed pending with T1 for good (abort, join
and repair all exited 1). Now the store keeps the last aborted tokens
(aborted.tokens) and `ringctl abort` tries them on every node still
pending; then a join succeeds.

And the number of an aborted epoch is used again (f20). R=2, n1..n3: a
join of n4 (T1, epoch 2) is prepared everywhere, n1 is paused (SIGSTOP),
T1 is aborted, and `ringctl remove --failed n1` commits epoch 2 = {n2, n3}:
the number n1 holds pending, another membership. The keys are rewritten
to v2 through n2, then n1 resumes. Before the fix n1 learnt it was behind
only from an epoch above its pending one, so it served epoch 1 again: it
read v1 for every key it led (380/380 in the findings) and acknowledged
writes that reached neither epoch-2 owner. Now the Pongs carry the
identity of the active epoch (a digest of its membership): n1 sees that
epoch 2 is not the one it prepared, drops T1 and is behind epoch 2
(TRYAGAIN), never stale, nothing acknowledged that the owners lack. The
same with the nodes watching the store (--store).

And `ringctl resume` with nothing pending in the store (as `ringctl watch`
runs it) tells a node the abort it missed too (resume_reaborts)."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import failover_lib as fl  # noqa: E402

NKEYS = 1000


def abort_missed_by(cl, c):
    """A join of a new node d stopped after PREPARE (every node pending),
    then aborted while c is paused (SIGSTOP), so c keeps it pending.
    -> (d, (join exit, stderr), (abort exit, stderr))."""
    d = cl.add("d")
    jrc, _, jerr = cl.ctl("join", "d", d.addr_s, env={"RINGCTL_EXIT_AFTER": "prepare"})
    os.kill(c.pid, signal.SIGSTOP)
    try:
        arc, _, aerr = cl.ctl("abort")
    finally:
        os.kill(c.pid, signal.SIGCONT)
    return d, (jrc, jerr), (arc, aerr)


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"])
    c = cl.nodes["c"]
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["ma-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        if not t.ok(view.refresh(1), "the client learns epoch 1 from `config`"):
            return
        hist = lg.History(keys, size=50)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "fill: every key acknowledged")
        d, (rc, err), (arc, aerr) = abort_missed_by(cl, c)
        t.ok(rc == 4, "join d (T1) stopped after PREPARE", (rc, lg.tail(err)))
        rc, err = arc, aerr
        t.ok(not cl.store_pending() and lg.node_epoch(c.addr)[1] == 2,
             "T1 aborted in the store while c was paused: c is still pending with it",
             (rc, lg.tail(err), lg.node_epoch(c.addr)))
        rc, out, err = cl.ctl("join", "d", d.addr_s)
        t.ok(rc == 1 and not cl.store_pending() and cl.store_epoch() == 1,
             "a second join (T2) fails at c and aborts itself", (rc, lg.tail(err)))
        rc, out, err = cl.ctl("abort")
        conv = cl.converged(1, ["a", "b", "c"])
        t.ok(rc == 0 and all(v == (1, 0) for v in conv.values()),
             "ringctl abort brings c back: it is told the abort of T1 (exit %s)" % rc,
             (conv, lg.tail(out), lg.tail(err)))
        rc, out, err = cl.ctl("join", "d", d.addr_s)
        t.ok(rc == 0 and cl.store_epoch() == 2, "then the join succeeds",
             (rc, lg.tail(out), lg.tail(err)))
        conv = cl.converged(2, ["a", "b", "c", "d"])
        t.ok(all(v == (2, 0) for v in conv.values()), "every node at EPOCH 2 0", conv)
        # c was stopped: it serves nothing until every peer answered it
        # again (docs/guarantees.md, "No split brain"); on a loaded machine
        # that can outlast the transitions above. Wait for it, bounded.
        t0 = time.monotonic()

        def c_serves():
            cn = lg.Conn(c.addr, 3.0)
            try:
                cn.declare(2)
                vals, line = cn.get_multi(keys[:50])
                return vals is not None or not line.startswith(b"SERVER_ERROR TRYAGAIN")
            finally:
                cn.close()
        t.ok(lg.wait_for(c_serves, 30, 0.05), "c serves again after its pause (%.2f s after the "
             "join)" % (time.monotonic() - t0))
        lg.check_transition(t, cl, hist, 1, e1, cl.store_active(), "join after the recovery")
    finally:
        lg.close_cluster(t, cl)


def resume_reaborts(t):
    """`ringctl resume` with nothing pending in the store also tells a
    node the abort it missed (found by the nemesis: b cut off from
    everyone during an abort kept the join prepared; resume, which
    `ringctl watch` runs, said "finishing" and left it so, and the next
    join failed at b, "token does not match the pending transition")."""
    cl, ok = lg.start_cluster(t, ["a", "b", "c"])
    c = cl.nodes["c"]
    try:
        if not ok:
            return
        d, (rc, err), (arc, aerr) = abort_missed_by(cl, c)
        t.ok(rc == 4, "join d stopped after PREPARE", (rc, lg.tail(err)))
        rc, err = arc, aerr
        t.ok(not cl.store_pending() and lg.node_epoch(c.addr) == (1, 2),
             "aborted in the store while c was paused: c is still pending with it",
             (rc, lg.tail(err), lg.node_epoch(c.addr)))
        rc, out, err = cl.ctl("resume")
        conv = cl.converged(1, ["a", "b", "c"])
        t.ok(rc == 0 and all(v == (1, 0) for v in conv.values()),
             "ringctl resume (nothing pending in the store) brings c back: exit %s, %s"
             % (rc, conv), (lg.tail(out), lg.tail(err)))
        rc, out, err = cl.ctl("join", "d", d.addr_s)
        t.ok(rc == 0 and cl.store_epoch() == 2, "then a join succeeds",
             (rc, lg.tail(out), lg.tail(err)))
    finally:
        lg.close_cluster(t, cl)


def sees_down(cl, who, whom):
    row = fl.status_row(cl, who)
    return whom in [x.split(":")[0] for x in row.get("sees_down", "-").split(",")
                    if x.split(":")[1:] in ([], ["down"])]


def value_of(vals_line, k):
    """A single get's answer: the value, None (a miss) or 'error:<tag>'."""
    vals, line = vals_line
    if vals is None:
        tag = line.split(b" ")[1] if line.startswith(b"SERVER_ERROR ") else line
        return "error:" + tag.decode(errors="replace")
    return vals.get(k)


def reused_epoch(t, store):
    """f20: n1 missed the abort of T1 (epoch 2); epoch 2 is then committed
    without it. store: the nodes also watch the membership store."""
    label = "f20%s" % (" (--store)" if store else "")
    cl = lg.Cluster(replicas=2)
    n1 = None
    stopped = False
    try:
        if store:
            cl.node_args = ["--store", cl.store]
        for i in ("n1", "n2", "n3"):
            cl.add(i)
        rc, out, err = cl.ctl("init", "--members", cl.write_members(["n1", "n2", "n3"]))
        conv = cl.converged(1, ["n1", "n2", "n3"])
        if not t.ok(rc == 0 and all(v == (1, 0) for v in conv.values()),
                    "%s: init, every node at EPOCH 1 0" % label, (rc, lg.tail(err), conv)):
            return
        n1, n2 = cl.nodes["n1"], cl.nodes["n2"]
        universe = ["re-%d" % i for i in range(600)]
        own1 = lg.locate(cl.store_active(), universe)
        keys = [k for k in universe if own1[k][0] == "n1"]
        c = lg.Conn(n2.addr, 5.0)
        stored = sum(1 for k in keys if c.store("set", k, b"v1-" + k.encode()) == b"STORED")
        c.close()
        t.ok(stored == len(keys), "%s: v1 of the %d keys n1 leads set through n2"
             % (label, len(keys)))
        n4 = cl.add("n4")
        rc, out, err = cl.ctl("join", "n4", n4.addr_s, env={"RINGCTL_EXIT_AFTER": "prepare"})
        t.ok(rc == 4, "%s: join n4 (T1, epoch 2) stopped after PREPARE" % label,
             (rc, lg.tail(err)))
        os.kill(n1.pid, signal.SIGSTOP)
        stopped = True
        rc, out, err = cl.ctl("abort")
        t.ok(not cl.store_pending() and cl.store_epoch() == 1,
             "%s: T1 aborted in the store while n1 is paused" % label, (rc, lg.tail(err)))
        t.ok(lg.wait_for(lambda: sees_down(cl, "n2", "n1") and sees_down(cl, "n3", "n1"),
                         15, 0.1), "%s: n2 and n3 see n1 down" % label)
        rc, out, err = cl.ctl("remove", "--failed", "n1")
        t.ok(rc == 0 and cl.store_epoch() == 2,
             "%s: remove --failed n1 commits epoch 2 = {n2, n3} (exit %d)" % (label, rc),
             (lg.tail(out), lg.tail(err)))
        conv = cl.converged(2, ["n2", "n3"])
        t.ok(all(v == (2, 0) for v in conv.values()), "%s: n2 and n3 at EPOCH 2 0" % label,
             conv)
        c = lg.Conn(n2.addr, 5.0)
        stored = sum(1 for k in keys if c.store("set", k, b"v2-" + k.encode()) == b"STORED")
        c.close()
        t.ok(stored == len(keys), "%s: v2 of the %d keys set through n2 (%d STORED)"
             % (label, len(keys), stored))
        os.kill(n1.pid, signal.SIGCONT)
        stopped = False

        # n1 settles: its post-stall round ends and it serves again (the
        # old code: a read gives a value), or it dropped T1 (pending 0).
        def settled():
            try:
                if lg.node_epoch(n1.addr)[1] != 2:
                    return True
                cn = lg.Conn(n1.addr, 3.0)
                try:
                    return cn.get_multi(keys[:1])[0] is not None
                finally:
                    cn.close()
            except (OSError, lg.ProtoError):
                return False
        t.ok(lg.wait_for(settled, 20, 0.05), "%s: n1 answers after its pause (EPOCH %r)"
             % (label, lg.node_epoch(n1.addr)))
        # As a client still holding epoch 1 (declared: a TRYAGAIN is
        # answered at once rather than retried by a relay), then a few
        # plain reads (a timeout is no answer, not a stale one).
        kinds, stale = {}, 0
        for k in keys[:5]:
            cn = lg.Conn(n1.addr, 3.0)
            try:
                v = value_of(cn.get_multi([k]), k)
            except (OSError, lg.ProtoError):
                v = "error:timeout"
            finally:
                cn.close()
            kind = "v1" if v == b"v1-" + k.encode() else \
                "v2" if v == b"v2-" + k.encode() else \
                v if isinstance(v, str) else "miss" if v is None else "other"
            kinds["plain " + kind] = kinds.get("plain " + kind, 0) + 1
            stale += kind in ("v1", "miss", "other")
        cn = lg.Conn(n1.addr, 5.0)
        try:
            cn.declare(1)
            for _ in range(2):
                for k in keys:
                    v = value_of(cn.get_multi([k]), k)
                    kind = "v1" if v == b"v1-" + k.encode() else \
                        "v2" if v == b"v2-" + k.encode() else \
                        v if isinstance(v, str) else "miss" if v is None else "other"
                    kinds[kind] = kinds.get(kind, 0) + 1
                    stale += kind in ("v1", "miss", "other")
            t.ok(stale == 0, "%s: no read of n1's keys at n1 returns v1 (or a miss): %d of %d "
                 "did, answers %r" % (label, stale, 2 * len(keys) + 5, kinds))
            acked = [k for k in keys if cn.store("set", k, b"v3-" + k.encode()) == b"STORED"]
        finally:
            cn.close()
        own2 = lg.locate(cl.store_active(), acked, 2)
        lost = []
        for k in acked:
            for nid in own2[k]:
                oc = lg.Conn(cl.nodes[nid].addr, 5.0)
                try:
                    oc.declare(2)
                    if value_of(oc.get_multi([k]), k) != b"v3-" + k.encode():
                        lost.append((k, nid))
                finally:
                    oc.close()
        t.ok(not lost, "%s: writes to n1: %d of %d acknowledged, %d acknowledged copies "
             "missing on an epoch-2 owner" % (label, len(acked), len(keys), len(lost)),
             lost[:5])
        # n1 dropped T1, so it takes a later transition: it joins again
        # (before, "another transition is pending" refused it).
        rc, out, err = cl.ctl("join", "n1", n1.addr_s)
        conv = cl.converged(3, ["n1", "n2", "n3"])
        t.ok(rc == 0 and all(v == (3, 0) for v in conv.values()),
             "%s: n1 joins again: every node at EPOCH 3 0 (exit %d)" % (label, rc),
             (conv, lg.tail(err)))
        want = {k: (b"v3-" if k in acked else b"v2-") + k.encode() for k in keys}
        cn = lg.Conn(n1.addr, 5.0)
        try:
            got = {k: value_of(cn.get_multi([k]), k) for k in keys}
        finally:
            cn.close()
        bad = [(k, got[k]) for k in keys if got[k] != want[k]]
        t.ok(not bad, "%s: then n1 serves the current value of each of the %d keys (%d did not)"
             % (label, len(keys), len(bad)), bad[:5])
    finally:
        if stopped and n1 is not None and n1.pid is not None:
            os.kill(n1.pid, signal.SIGCONT)
        lg.close_cluster(t, cl)


def main():
    lg.tap_main([scenario, resume_reaborts, (reused_epoch, False), (reused_epoch, True)], 360,
                "a node that missed an abort")


if __name__ == "__main__":
    main()
