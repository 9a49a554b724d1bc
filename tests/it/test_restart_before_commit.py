"""A joiner restarted between the fence and the store's commit is never
committed as an owner of data it lost (issue 11, finding 7). R=1, three
nodes with data; `ringctl join d` is held right before the store's commit
(RINGCTL_PAUSE_AT=commit), d is killed and restarted with its state
directory (it reloads the pending transition but its imported copy is
gone), and ringctl goes on; or d is killed, ringctl goes on while d is
still down, and d comes back a second later (seen in an ASan CI run: the
restarted d did not serve yet, its Status failed twice, and ringctl
committed it). Before the fix ringctl checked boot ids only in
the Fence replies: it committed, d served its arcs empty and the sources'
cleanup purged the only copy (837 of 3000 keys gone). Now the commit
re-checks every node's boot id and aborts: exit 1, epoch 1 unchanged,
every key still on its owner; a fresh join of d then succeeds.

And the last case: R=2, the admin dies right after the store's commit
(RINGCTL_EXIT_AFTER=commit) and d restarts before any node got Commit;
`ringctl resume` then commits d, which reloaded the pending transition but
not what it imported. Before the fix d served the ranges it gained empty
(misses of acknowledged values); now it comes up recovering (its keys
answer TRYAGAIN or go to a live owner, never a miss) until `ringctl
repair d`, after which every key is on every owner."""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import failover_lib as fl  # noqa: E402

NKEYS = 3000


def scenario(t, down_at_check=False):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"])
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["rb-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        if not t.ok(view.refresh(1), "the client learns epoch 1 from `config`"):
            return
        hist = lg.History(keys, size=50)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "fill: every key acknowledged")
        d = cl.add("d")
        attempted = cl.members(["a", "b", "c", "d"], epoch=2)
        pause = os.path.join(tempfile.mkdtemp(prefix="rc-pause-", dir=cl.dir), "commit")
        p = cl.ctl_bg("join", "d", d.addr_s,
                      env={"RINGCTL_PAUSE_AT": "commit", "RINGCTL_PAUSE_FILE": pause})
        held = lg.wait_for(lambda: os.path.exists(pause), 60, 0.02)
        t.ok(held, "ringctl join is held right before the store's commit")
        if down_at_check:
            # The fault: d is down for a second while ringctl checks the
            # boot ids; ringctl must wait for it, not commit on its old
            # Status.
            d.stop(signal.SIGKILL)
            os.unlink(pause)
            time.sleep(1.0)
            d.start()
        else:
            d.restart()
            os.unlink(pause)
        try:
            out, err = p.communicate(timeout=90)
        except Exception:  # noqa: BLE001 (a hung ringctl is a failure)
            os.kill(p.pid, signal.SIGKILL)
            out, err = p.communicate()
        t.ok(p.returncode == 1 and "restarted" in err,
             "the join aborts: d restarted since PREPARE (exit %s)" % p.returncode,
             (lg.tail(out), lg.tail(err)))
        t.ok(cl.store_epoch() == 1 and not cl.store_pending(),
             "the store still at epoch 1, nothing pending")
        conv = cl.converged(1, ["a", "b", "c"])
        conv_d = cl.converged(0, ["d"])
        t.ok(all(v == (1, 0) for v in conv.values()) and conv_d["d"] == (0, 0),
             "a b c at EPOCH 1 0, d with no epoch and nothing pending", (conv, conv_d))
        lg.check_transition(t, cl, hist, 1, e1, e1, "join aborted before the commit",
                            extra=[("d", d.addr)], attempted=attempted)
        rc, out, err = cl.ctl("join", "d", d.addr_s)
        t.ok(rc == 0 and cl.store_epoch() == 2, "a fresh join of d then succeeds",
             (rc, lg.tail(out), lg.tail(err)))
        lg.check_transition(t, cl, hist, 2, e1, cl.store_active(), "join after the abort")
    finally:
        lg.close_cluster(t, cl)


def after_store_commit(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        keys = ["rc-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["a"].addr])
        view.refresh(1)
        hist = lg.History(keys, size=50)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "R=2: fill: every key acknowledged")
        d = cl.add("d")
        rc, out, err = cl.ctl("join", "d", d.addr_s, env={"RINGCTL_EXIT_AFTER": "commit"})
        t.ok(cl.store_epoch() == 2, "R=2: join d stopped right after the store's commit "
             "(exit %d)" % rc, lg.tail(err))
        d.restart()
        rc, out, err = cl.ctl("resume")
        t.ok(rc == 0, "R=2: resume after d restarted exits 0", (lg.tail(out), lg.tail(err)))
        conv = cl.converged(2, ["a", "b", "c", "d"])
        t.ok(all(v == (2, 0) for v in conv.values()), "R=2: every node at EPOCH 2 0", conv)
        e2 = cl.store_active()
        own2 = lg.locate(e2, keys, 2)
        mine = [k for k in keys if "d" in own2[k]]
        served, other = 0, {}
        c = lg.Conn(d.addr, 5.0)
        try:
            c.declare(2)
            for k in mine:
                vals, line = c.get_multi([k])
                if vals is not None:
                    served += 1   # a value or a miss: d would serve its empty copy
                    continue
                tag = line.split(b" ")[1] if line.startswith(b"SERVER_ERROR ") else line
                other[tag] = other.get(tag, 0) + 1
        finally:
            c.close()
        t.ok(served == 0 and set(other) <= {b"TRYAGAIN", b"MOVED"},
             "R=2: d serves none of the %d keys it gained (restarted since the Prepare: "
             "recovering): %d answered from its copy, others %r" % (len(mine), served, other))
        row = fl.status_row(cl, "d")
        t.ok(row.get("flags") == "recovering", "R=2: ringctl status: d is recovering", row)
        rc, out, err = cl.ctl("repair", "d")
        t.ok(rc == 0, "R=2: ringctl repair d exits 0", (lg.tail(out), lg.tail(err)))
        allc = fl.copies(hist, cl.store_active())
        t.ok(not allc["missing"] and not allc["errors"] and allc["moved"] == 0,
             "R=2: after repair d every acknowledged key is on each of its owners (missing %d "
             "of %d)" % (len(allc["missing"]), allc["checked"]),
             (allc["missing"][:5], allc["errors"][:3]))
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main([scenario, (scenario, True), after_store_commit], 250,
                "a joiner restarted before or after the store's commit")


if __name__ == "__main__":
    main()
