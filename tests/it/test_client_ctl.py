"""ringctl's data commands end to end (get, set, delete, mget, stats, TSV
and --human, exit codes), the client/examples/basic program, and
deploy/local-cluster.sh up/status/down, against real nodes on loopback."""

import os
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from client_lib import (BUILDDIR, RINGCTL, SRCDIR, Cluster, Tap, accepts,  # noqa: E402
                        mc_get, mc_stats, node_binary, run)
from rctest import free_cluster_ports  # noqa: E402


def ctl(cl, *args, stdin=None):
    return run([RINGCTL, "--members", cl.members, "--timeout", "500"] + list(args), stdin=stdin)


def test_ringctl(t, cl):
    rc, out, err = ctl(cl, "set", "k1", "v1", "--ttl", "100", "--flags", "5")
    owner = out.strip().split("\t")[-1] if rc == 0 else None
    t.ok(rc == 0 and out.startswith("k1\t") and owner in cl.by_id
         and mc_get(cl.by_id[owner].port, "k1") == "v1",
         "set prints key<TAB>owner and the value is on that node", (rc, out, err))
    ctl(cl, "set", "k2", "two words")
    rc, out, err = ctl(cl, "get", "k1", "k2")
    t.ok(rc == 0 and out == "k1\tv1\nk2\ttwo words\n", "get prints key<TAB>value", (rc, out, err))
    rc, out, err = ctl(cl, "get", "k1", "nope")
    t.ok(rc == 1 and out == "k1\tv1\n" and "nope" in err, "a miss is a line on stderr and exit 1",
         (rc, out, err))
    rc, out, err = ctl(cl, "--human", "get", "k1", "k2")
    t.ok(rc == 0 and out == "k1   v1\nk2   two words\n", "--human aligns the columns", repr(out))

    keys = ["m%d" % i for i in range(40)]
    for k in keys[::2]:
        ctl(cl, "set", k, "val-" + k)
    rc, out, err = ctl(cl, "mget", stdin="\n".join(keys) + "\n")
    rows = [l.split("\t") for l in out.splitlines()]
    want = [k for k in keys[::2]]
    ok_nodes = all(mc_get(cl.by_id[r[1]].port, r[0]) == r[2] for r in rows if r[1] in cl.by_id)
    t.ok(rc == 1 and [r[0] for r in rows] == want and all(r[2] == "val-" + r[0] for r in rows)
         and ok_nodes and err.count("not found") == 20,
         "mget reads stdin, prints key<TAB>node<TAB>value in input order, misses on stderr",
         (rc, out[:300], err[:300]))

    rc, out, err = ctl(cl, "delete", "k1")
    rc2, _, _ = ctl(cl, "get", "k1")
    rc3, _, err3 = ctl(cl, "delete", "k1")
    t.ok(rc == 0 and out == "k1\tdeleted\n" and rc2 == 1 and rc3 == 1 and "not found" in err3,
         "delete, then the key is gone and a second delete is a miss", (rc, out, rc2, rc3))

    rc, out, err = ctl(cl, "stats")
    lines = [l.split("\t") for l in out.splitlines()]
    items = {r[0]: r[1:] for r in lines[1:]}
    want_items = [mc_stats(cl.by_id[i].port)["curr_items"] for i in cl.IDS]
    t.ok(rc == 0 and lines[0] == ["stat"] + cl.IDS and items.get("curr_items") == want_items,
         "stats: a row per stat, a column per node", (rc, lines[:2], items.get("curr_items"),
                                                     want_items))

    bad = [
        ctl(cl, "set", "bad key", "v")[0],
        ctl(cl, "set", "k", "v", "--flags", "-1")[0],
        ctl(cl, "set", "k", "v", "--ttl", "soon")[0],
        ctl(cl, "set", "k")[0],
        ctl(cl, "get")[0],
        run([RINGCTL, "get", "k"])[0],
        run([RINGCTL, "--members", "/nonexistent.members", "get", "k"])[0],
    ]
    t.ok(bad == [2] * len(bad), "bad usage and bad input exit 2 with nothing sent", bad)


def test_example(t, cl):
    rc, out, err = run([os.path.join(BUILDDIR, "client", "examples", "basic"), cl.members])
    t.ok(rc == 0 and "basic: ok" in out, "client/examples/basic runs against the cluster",
         (rc, out[-300:], err[-300:]))


def test_dead_node_stats(t, cl):
    cl.by_id["cache-b"].signal(signal.SIGKILL)
    cl.by_id["cache-b"].proc.wait(timeout=5)
    rc, out, err = ctl(cl, "stats")
    lines = [l.split("\t") for l in out.splitlines()]
    pid_row = [r for r in lines if r[0] == "pid"]
    t.ok(rc == 1 and pid_row and pid_row[0][2] == "-" and pid_row[0][1] != "-"
         and "cache-b" in err, "stats with a dead node: '-' in its column, exit 1", (rc, out[:200], err))


def test_local_cluster(t):
    script = os.path.join(SRCDIR, "deploy", "local-cluster.sh")
    d = tempfile.mkdtemp(prefix="rc-lc-")
    # local-cluster.sh runs cluster-mode nodes: each binds base+i and
    # base+i+10000. Room for 4 (up starts 3, add would take the 4th).
    base = free_cluster_ports(4)
    env = dict(os.environ, RC_BUILDDIR=BUILDDIR, RINGCACHED=node_binary())
    if os.path.basename(node_binary()) == "memcached":
        env["RC_NODE_ARGS"] = "-U 0" + (" -u root" if os.geteuid() == 0 else "")
    args = ["--dir", d, "--base-port", str(base)]
    pids = []
    try:
        rc, out, err = run(["bash", script, "up"] + args, env=env, timeout=30)
        members = os.path.join(d, "cluster.members")
        text = open(members).read() if os.path.exists(members) else ""
        pids = [int(open(os.path.join(d, i + ".pid")).read()) for i in Cluster.IDS
                if os.path.exists(os.path.join(d, i + ".pid"))]
        t.ok(rc == 0 and len(pids) == 3 and all(accepts(base + i) for i in range(3))
             and "replicas 2" in text and "vnodes 320" in text
             and all("node %s 127.0.0.1:%d" % (nid, base + i) in text
                     for i, nid in enumerate(Cluster.IDS)),
             "local-cluster.sh up starts three nodes and writes cluster.members", (rc, out, err, text))
        for i in range(9):
            run([RINGCTL, "--members", members, "set", "lc%d" % i, "x"])
        rc, out, err = run(["bash", script, "status"] + args, env=env)
        rows = [l.split("\t") for l in out.splitlines()]
        items = sum(int(r[4].split()[1]) for r in rows if len(r) == 5 and r[2] == "up")
        t.ok(rc == 0 and len(rows) == 3 and all(r[2] == "up" for r in rows) and items == 18,
             "status shows each node up with its item count (9 keys, R=2: 18 copies)",
             (rc, out, err))
        rc, out, err = run(["bash", script, "down"] + args, env=env, timeout=30)
        left = [p for p in pids if os.path.exists("/proc/%d" % p)
                and open("/proc/%d/stat" % p).read().split()[2] != "Z"]
        rc2, out2, _ = run(["bash", script, "status"] + args, env=env)
        t.ok(rc == 0 and not left and not any(f.endswith(".pid") for f in os.listdir(d))
             and rc2 == 1 and out2.count("\tdown") == 3,
             "down stops them by PID and leaves no process", (rc, out, err, left, out2))
    finally:
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)


def main():
    t = Tap(13)
    cl = None
    try:
        cl = Cluster()
        test_ringctl(t, cl)
        test_example(t, cl)
        test_dead_node_stats(t, cl)
        cl.stop()
        cl = None
        test_local_cluster(t)
    except Exception as e:
        t.ok(False, "test aborted: %r" % e)
    finally:
        if cl:
            cl.stop()
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
