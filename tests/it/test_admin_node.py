"""ringctl init, status, plan, join and leave against real ringcached nodes
on loopback (cluster port = client port + 10000, admin token, state
directories): the store and every node agree on the epoch after each
step, and data written before a join is still readable after it.
Skips (TAP # SKIP) only while ringcached lacks the cluster flags or does
not serve its cluster port yet."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from rctest import (Tap, Node, RINGCACHED, BUILDDIR, wait_until, can_connect, request,  # noqa: E402
                    free_cluster_ports)

RINGCTL = os.path.join(BUILDDIR, "client", "ringctl")


def port_pair():
    """A client port p with p and p + 10000 free on 127.0.0.1, both below
    the ephemeral range (tests/it/rctest.py)."""
    return free_cluster_ports()


def skip_all(t, why):
    print("1..0 # SKIP %s" % why)
    sys.exit(0)


def epoch_of(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        r = request(s, b"epoch\r\n", timeout=5).decode()
    parts = r.split()
    return (int(parts[1]), int(parts[2])) if len(parts) == 3 and parts[0] == "EPOCH" else r


def main():
    t = Tap()
    helptext = subprocess.run([RINGCACHED, "--help"], capture_output=True, text=True).stdout
    for flag in ("--id", "--state-dir", "--token-file", "--cluster-port"):
        if flag not in helptext:
            skip_all(t, "ringcached has no %s option yet" % flag)
    tmp = tempfile.mkdtemp(prefix="rc-admin-node-")
    nodes = {}
    try:
        token = os.path.join(tmp, "token")
        with open(token, "w") as f:
            f.write("node-admin-token\n")
        store = os.path.join(tmp, "store")

        def start(nid):
            sd = os.path.join(tmp, "state-" + nid)
            os.makedirs(sd, exist_ok=True)
            n = Node(args=["--id", nid, "--state-dir", sd, "--token-file", token, "-t", "2",
                           "-m", "64"], port=port_pair(),
                     stderr=os.path.join(tmp, nid + ".log"))
            n.start()
            nodes[nid] = n
            return n

        for nid in ("a", "b", "c"):
            start(nid)
        if not wait_until(lambda: can_connect(nodes["a"].port + 10000), 3):
            skip_all(t, "ringcached does not serve its cluster port yet")
        members = os.path.join(tmp, "c.members")
        with open(members, "w") as f:
            f.write("epoch 1\nvnodes 160\nreplicas 1\n")
            for nid in ("a", "b", "c"):
                f.write("node %s 127.0.0.1:%d\n" % (nid, nodes[nid].port))

        def ctl(*args, timeout=60):
            p = subprocess.run([RINGCTL, "--store", store, "--token-file", token,
                                "--timeout", "2000"] + list(args),
                               capture_output=True, text=True, timeout=timeout)
            return p.returncode, p.stdout, p.stderr

        rc, out, err = ctl("init", "--members", members)
        t.ok(rc == 0 and out.count("\tok") == 3, "init: every node takes epoch 1", (rc, out, err))
        eps = {n: epoch_of(nodes[n].port) for n in nodes}
        t.eq(eps, {"a": (1, 0), "b": (1, 0), "c": (1, 0)}, "every node reports EPOCH 1 0")

        rc, out, err = ctl("status")
        rows = [l.split("\t") for l in out.splitlines()[4:]]
        t.ok(rc == 0 and out.startswith("epoch\t1\npending\tnone\n") and len(rows) == 3
             and all(r[2] == "up" and r[3] == "1" for r in rows)
             and abs(sum(float(r[8]) for r in rows) - 1) < 0.001,
             "status: all up at epoch 1, shares sum to 1", (rc, out, err))

        # Some data, then plan and join a fourth node.
        keys = ["k%d" % i for i in range(300)]
        set_fail = sum(subprocess.run([RINGCTL, "--members", members, "set", k, "v-" + k],
                                      capture_output=True, timeout=30).returncode != 0
                       for k in keys)
        t.eq(set_fail, 0, "300 keys written through ringctl set at epoch 1")
        rc, out, err = ctl("plan", "join", "d", "127.0.0.1:1")
        kv = dict(l.split("\t", 1) for l in out.splitlines() if l.count("\t") == 1)
        t.ok(rc == 0 and 0 < float(kv.get("move_items_estimate", "0")) < 300
             and 0.1 < float(kv.get("primary_moved", "0")) < 0.5,
             "plan join: an estimate of the items to move from the nodes' counts",
             (rc, out, err))

        d = start("d")
        rc, out, err = ctl("join", "d", "127.0.0.1:%d" % d.port)
        kv = dict(l.split("\t", 1) for l in out.splitlines() if l.count("\t") == 1)
        eps = {n: epoch_of(nodes[n].port) for n in nodes}
        t.ok(rc == 0 and kv.get("epoch") == "2" and all(v == (2, 0) for v in eps.values()),
             "join d: exit 0, the store and all four nodes at epoch 2", (rc, out, err[-2000:], eps))
        members2 = os.path.join(tmp, "c2.members")
        with open(members2, "w") as f:
            f.write(open(os.path.join(store, "active.members")).read())
        got = subprocess.run([RINGCTL, "--members", members2, "mget"], input="\n".join(keys),
                             capture_output=True, text=True, timeout=60)
        hits = [l.split("\t") for l in got.stdout.splitlines()]
        t.ok(len(hits) == len(keys) and all(h[2] == "v-" + h[0] for h in hits)
             and any(h[1] == "d" for h in hits),
             "every key written before the join is read back at epoch 2, some from d",
             (len(hits), got.stderr[-500:]))

        rc, out, err = ctl("leave", "b")
        eps = {n: epoch_of(nodes[n].port) for n in nodes}
        t.ok(rc == 0 and all(v == (3, 0) for v in eps.values()),
             "leave b: exit 0, every node at epoch 3", (rc, out, err[-2000:], eps))
        rc, out, err = ctl("status")
        t.ok(rc == 0 and out.startswith("epoch\t3\n"), "status after the leave", (rc, out, err))
    finally:
        for n in nodes.values():
            n.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    t.done()


main()
