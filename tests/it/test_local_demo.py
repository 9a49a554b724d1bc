"""The README's main job end to end: `deploy/local-cluster.sh demo` (what
deploy/demo.sh runs after building) on free loopback ports: three R=2
nodes, 200 keys written, cache-d joined with every key still a hit, then
cache-b killed -9: every key still reads, `ringctl watch` fails it over
(a new epoch without cache-b), and every key can be written and read again.
Then `down` stops every process it started, by PID."""
import os
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from client_lib import BUILDDIR, SRCDIR, Tap, node_binary, run  # noqa: E402
from rctest import free_cluster_ports  # noqa: E402


def pids_in(d):
    out = []
    for f in os.listdir(d):
        if f.endswith(".pid"):
            try:
                out.append(int(open(os.path.join(d, f)).read()))
            except ValueError:
                pass
    return out


def live(pids):
    return [p for p in pids if os.path.exists("/proc/%d" % p)
            and open("/proc/%d/stat" % p).read().split()[2] != "Z"]


def main():
    if os.path.basename(node_binary()) == "memcached":
        print("1..0 # SKIP the demo runs ringcached's cluster mode")
        return 0
    t = Tap(5)
    script = os.path.join(SRCDIR, "deploy", "local-cluster.sh")
    d = tempfile.mkdtemp(prefix="rc-demo-")
    base = free_cluster_ports(4)
    env = dict(os.environ, RC_BUILDDIR=BUILDDIR, RINGCACHED=node_binary())
    args = ["--dir", d, "--base-port", str(base)]
    started = []
    try:
        rc, out, err = run(["bash", script, "demo"] + args, env=env, timeout=240)
        started = pids_in(d)
        t.ok(rc == 0 and "replicas 2" in open(os.path.join(d, "cluster.members")).read(),
             "local-cluster.sh demo: exit 0, an R=2 cluster", (rc, out[-1500:], err[-1500:]))
        t.ok("hits after the join: 200 of 200" in out, "after the join every key hits",
             out[-1500:])
        t.ok("hits with cache-b dead: 200 of 200" in out,
             "with cache-b killed -9 every key still reads", out[-1500:])
        t.ok("writes after the failover: 200 of 200" in out and "cache-b" not in
             open(os.path.join(d, "cluster.members")).read(),
             "the watch failed cache-b over; every key written and read back after",
             (out[-1500:], err[-1500:]))
        rc, out, err = run(["bash", script, "down"] + args, env=env, timeout=60)
        t.ok(rc == 0 and not live(started) and not pids_in(d),
             "down stops every process the demo started, by PID", (rc, out, err, live(started)))
    finally:
        for p in live(started + pids_in(d)):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        run(["rm", "-rf", d])
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
