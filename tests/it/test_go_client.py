"""The Go package (client/go/ringcache) against a real 3-node R=2
ringcached cluster: its own Go tests (client/go/ringcache/*_test.go, built
by make into client/go/ringcache.test) run here with the cluster in their
environment: every gomemcache call, misses, CAS conflicts, values up to
1 MiB, binary keys, GetMulti, 32 goroutines on one client, GetOrCompute's
herd, Locate against `ringctl locate` and the golden vectors; then a node
stalled and killed with every key still read; on a second cluster a join
and a leave under a running Go load with no miss of an acknowledged key.
Skipped (only) when the Go package was not built (no go at configure)."""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import goext  # noqa: E402
import loadgen  # noqa: E402

BIN = os.path.join("client", "go", "ringcache.test")
VECTORS = os.path.join(os.environ.get("RC_SRCDIR", "."), "tests", "vectors", "ring-v1")


def go_env(cl, steps=False):
    return {"RC_GO_MEMBERS": os.path.join(cl.store, "active.members"),
            "RC_GO_SEEDS": ",".join(n.addr_s for n in cl.nodes.values()),
            "RC_GO_RINGCTL": loadgen.RINGCTL, "RC_GO_VECTORS": os.path.abspath(VECTORS),
            "RC_GO_STEPS": "1" if steps else "0"}


def scenario_calls(t):
    cl, ok = loadgen.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        goext.run(t, BIN, "^Test(Constructors|Calls|GetMulti|ValuesAndKeys|NodeCalls|Concurrent|"
                  "GetOrCompute|Locate|GoldenVectors)$", go_env(cl))

        def on_step(what):
            node = cl.nodes["c"]
            if what == "stop c":
                os.kill(node.pid, signal.SIGSTOP)
                return "ok"
            if what == "kill c":
                node.stop(signal.SIGKILL)
                return "ok"
            return "unknown step " + what
        goext.run(t, BIN, "^TestKill$", go_env(cl, steps=True), on_step)
    finally:
        loadgen.close_cluster(t, cl)


def scenario_join_leave(t):
    cl, ok = loadgen.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return

        def on_step(what):
            if what == "join":
                d = cl.add("d")
                rc, out, err = cl.ctl("join", "d", d.addr_s)
            elif what == "leave":
                rc, out, err = cl.ctl("leave", "b")
            else:
                return "unknown step " + what
            t.ok(rc == 0, "ringctl %s under the Go load" % what, (out[-300:], err[-300:]))
            return "ok" if rc == 0 else "ringctl %s failed (%d)" % (what, rc)
        goext.run(t, BIN, "^TestJoinLeave$", go_env(cl, steps=True), on_step)
    finally:
        loadgen.close_cluster(t, cl)


def main():
    why = goext.not_built(BIN)
    if why:
        t = loadgen.Tap()
        t.skip("ringcache Go package", why)
        t.done()
    loadgen.tap_main([scenario_calls, scenario_join_leave], seconds=400)


if __name__ == "__main__":
    main()
