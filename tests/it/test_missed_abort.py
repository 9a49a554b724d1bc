"""A node that missed an abort can always be brought back by ringctl
(issue 11, finding 2). A join of d is stopped after PREPARE (T1: every node
pending), c is paused (SIGSTOP) while T1 is aborted, so c keeps T1. Then a
second join (T2) fails at c (another transition is pending there) and
aborts itself, which replaces the store's aborted.meta with T2. Before the
fix only the last aborted transition was kept: `ringctl abort` sent T2's
token, c refused it, and c stayed pending with T1 for good (abort, join
and repair all exited 1). Now the store keeps the last aborted tokens
(aborted.tokens) and `ringctl abort` tries them on every node still
pending; then a join succeeds."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

NKEYS = 1000


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"])
    c = cl.nodes["c"]
    stopped = False
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
        d = cl.add("d")
        rc, out, err = cl.ctl("join", "d", d.addr_s, env={"RINGCTL_EXIT_AFTER": "prepare"})
        t.ok(rc == 4, "join d (T1) stopped after PREPARE", (rc, lg.tail(err)))
        os.kill(c.pid, signal.SIGSTOP)
        stopped = True
        rc, out, err = cl.ctl("abort")
        os.kill(c.pid, signal.SIGCONT)
        stopped = False
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
        if stopped:
            os.kill(c.pid, signal.SIGCONT)
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 170, "a node that missed an abort")


if __name__ == "__main__":
    main()
