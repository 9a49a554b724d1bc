"""libringcache's epoch rules (and ringctl --seeds) against real cluster nodes (ringcached --id
--state-dir --token-file, membership installed with `ringctl init`, changed
with `ringctl join`): a client made from seeds learns the membership; a
client holding a stale epoch-1 membership file follows MOVED after a join,
adopts epoch 2 and succeeds (single keys and a multi-get); the poll learns
an epoch without any MOVED; a fenced range (a leave stopped after FENCE)
answers TRYAGAIN and the client turns that into misses for reads and
ETRYAGAIN for writes within the op timeout, never a hang."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from client_lib import (RINGCTL, Node, Probe, Tap, mc_get, mc_stats,  # noqa: E402
                        parse_many, wait_for)
from rctest import free_cluster_ports  # noqa: E402

N = 200
OP_TIMEOUT = 1000           # a healthy node must answer within it
FENCE_TIMEOUT = 600         # the TRYAGAIN budget of the fenced-range probe; also
                            # what its unfenced keys must beat on a busy box
SLACK = 400                 # one request's connect + scheduling on a busy box


def port_pair():
    """A client port p with p + 10000 (the cluster port) free too, both
    below the ephemeral range (tests/it/rctest.py)."""
    return free_cluster_ports()


def epoch_of(port):
    """(active, pending) a node reports to `epoch`."""
    from client_lib import mc_request
    w = mc_request(port, b"epoch\r\n", end=b"\r\n").decode().split()
    return int(w[1]), int(w[2])


def main():
    t = Tap(13)
    tmp = tempfile.mkdtemp(prefix="rc-client-epoch-")
    nodes, probes = {}, []
    try:
        token = os.path.join(tmp, "token")
        with open(token, "w") as f:
            f.write("client-epoch-token\n")
        store = os.path.join(tmp, "store")

        def start(nid):
            sd = os.path.join(tmp, "state-" + nid)
            os.makedirs(sd, exist_ok=True)
            n = Node(port_pair())
            n.args += ["--id", nid, "--state-dir", sd, "--token-file", token]
            n.start()
            nodes[nid] = n
            return n

        def ctl(*args, env=None):
            e = dict(os.environ)
            e.update(env or {})
            p = subprocess.run([RINGCTL, "--store", store, "--token-file", token,
                                "--timeout", "2000"] + list(args),
                               capture_output=True, text=True, timeout=60, env=e)
            return p.returncode, p.stdout, p.stderr

        def probe(*args, **kw):
            p = Probe(*args, **kw)
            probes.append(p)
            return p

        def moved_total():
            return sum(int(mc_stats(n.port).get("moved", 0)) for n in nodes.values())

        for nid in ("a", "b", "c"):
            start(nid)
        m1 = os.path.join(tmp, "epoch1.members")
        with open(m1, "w") as f:
            f.write("epoch 1\nvnodes 160\nreplicas 1\n")
            for nid in ("a", "b", "c"):
                f.write("node %s 127.0.0.1:%d\n" % (nid, nodes[nid].port))
        rc, out, err = ctl("init", "--members", m1)
        t.ok(rc == 0 and all(epoch_of(n.port) == (1, 0) for n in nodes.values()),
             "ringctl init: three nodes at epoch 1", (rc, out, err))

        # 1. From seeds: the membership comes from `config`.
        seeds = "seeds:127.0.0.1:%d,127.0.0.1:%d" % (nodes["b"].port, nodes["a"].port)
        ps = probe(seeds, OP_TIMEOUT, 300, 600, 0)
        ep = ps.cmd("epoch")
        listed = sorted(l.split() for l in ps.cmd("nodes"))
        want = sorted([nid, "127.0.0.1:%d" % nodes[nid].port] for nid in ("a", "b", "c"))
        t.ok(ep == ["epoch 1"] and listed == want,
             "a client made from two seeds learns epoch 1 and all three nodes", (ep, listed))

        # 2. Stale clients: epoch-1 file, no poll; `refresh` confirms that
        # the nodes speak epochs (so connections declare theirs).
        stale = probe(m1, OP_TIMEOUT, 300, 600, 0)
        stale_m = probe(m1, OP_TIMEOUT, 300, 600, 0)
        polling = probe(m1, OP_TIMEOUT, 300, 600, 100)
        outs = [p.cmd("refresh") for p in (stale, stale_m, polling)]
        res, _ = parse_many(stale.cmd("many set k %d" % N))
        t.ok(all(o == ["refresh OK epoch 1"] for o in outs) and len(res) == N
             and all(v[1] == "OK" for v in res.values()),
             "%d keys written at epoch 1 by a file client" % N, (outs, [
                 (k, v) for k, v in res.items() if v[1] != "OK"][:5]))

        # The cluster moves on: d joins (epoch 2), the data is handed off.
        start("d")
        rc, out, err = ctl("join", "d", "127.0.0.1:%d" % nodes["d"].port)
        t.ok(rc == 0 and all(epoch_of(n.port) == (2, 0) for n in nodes.values()),
             "ringctl join d: four nodes at epoch 2", (rc, out[-500:], err[-1500:]))

        # 3. The stale client still routes with epoch 1: keys d took are
        # answered MOVED by their old owner; it learns epoch 2 and reads
        # them from d. Nothing may fail (3 hops would be plenty).
        moved0 = moved_total()
        res, max_ms = parse_many(stale.cmd("many get k %d" % N))
        moved1 = moved_total()
        bad = [(k, v) for k, v in res.items() if v[1] != "OK"]
        on_d = sum(1 for v in res.values() if v[0] == "d")
        t.ok(not bad and stale.cmd("epoch") == ["epoch 2"] and moved1 > moved0 and on_d > 0,
             "stale client: MOVED (%d) taught it epoch 2, all %d reads hit (%d now on d)"
             % (moved1 - moved0, N, on_d), bad[:10])
        res, _ = parse_many(stale.cmd("many set k %d" % N))
        wrong = [k for k, v in res.items()
                 if v[1] != "OK" or mc_get(nodes[v[0]].port, k) != "value-of-" + k]
        t.ok(not wrong, "writes after the change land on their epoch-2 owners (checked on the node)",
             wrong[:10])

        # ringctl's data commands take --seeds instead of --members.
        p = subprocess.run([RINGCTL, "--seeds", "127.0.0.1:%d" % nodes["c"].port, "get"]
                           + sorted(res)[:20], capture_output=True, text=True, timeout=30)
        rows = [l.split("\t") for l in p.stdout.splitlines()]
        t.ok(p.returncode == 0 and len(rows) == 20
             and all(r[-1] == "value-of-" + r[0] for r in rows),
             "ringctl --seeds ADDR get reads through the learnt membership", (p.stdout, p.stderr))

        # 4. A stale multi-get: the nodes answer MOVED for whole requests;
        # the client refreshes and regroups, every key comes back.
        out = stale_m.cmd("mget k %d" % N)
        rows = [l.split() for l in out[:-1]]
        bad = [r for r in rows if r[2] != "OK" or r[1] != res[r[0]][0]]
        t.ok(len(rows) == N and not bad and out[-1].startswith("result OK")
             and stale_m.cmd("epoch") == ["epoch 2"],
             "stale multi-get regroups by the epoch-2 owners (%s)" % out[-1], bad[:10])

        # 5. The poll: no MOVED needed. Wait past one interval, then one
        # call polls first and routes with epoch 2 at once.
        time.sleep(0.15)
        moved0 = moved_total()
        res2, _ = parse_many(polling.cmd("many get k %d" % N))
        t.ok(polling.cmd("epoch") == ["epoch 2"] and moved_total() == moved0
             and all(v[1] == "OK" for v in res2.values()),
             "the epoch poll adopted epoch 2 before any MOVED")

        # 6. Lower epochs are never adopted: an explicit refresh keeps 2.
        t.ok(stale.cmd("refresh") == ["refresh OK epoch 2"], "refresh at the same epoch keeps 2")

        # 7. Fenced ranges: a leave of d stopped right after FENCE leaves
        # d's keys answering TRYAGAIN (nothing else is fenced).
        fenced = probe(m1, FENCE_TIMEOUT, 300, 600, 0)
        fenced.cmd("refresh")
        d_keys = [k for k, v in res.items() if v[0] == "d"][:4]
        others = [k for k, v in res.items() if v[0] != "d"][:8]
        rc, out, err = ctl("leave", "d", env={"RINGCTL_EXIT_AFTER": "fence"})
        t.ok(rc == 4 and d_keys and others, "ringctl leave d stopped after FENCE (exit %d)" % rc,
             err[-1500:])
        got, max_g = parse_many(fenced.cmd("list get " + " ".join(d_keys + others)))
        bad = [(k, v) for k, v in got.items() if v[1] != ("ENOTFOUND" if k in d_keys else "OK")]
        t.ok(not bad and max_g < FENCE_TIMEOUT + SLACK,
             "fenced keys read as misses after the TRYAGAIN budget, others hit (max %.1f ms)"
             % max_g, bad[:10])
        got, max_s = parse_many(fenced.cmd("list set " + " ".join(d_keys + others)))
        bad = [(k, v) for k, v in got.items() if v[1] != ("ETRYAGAIN" if k in d_keys else "OK")]
        t.ok(not bad and max_s < FENCE_TIMEOUT + SLACK
             and min(v[2] for k, v in got.items() if k in d_keys) >= FENCE_TIMEOUT / 4,
             "fenced writes fail with ETRYAGAIN after backing off, never hang (max %.1f ms)"
             % max_s, bad[:10])
        ctl("abort")
    except Exception as e:  # a crash is a failure, reported as TAP
        t.ok(False, "test aborted: %r" % e)
    finally:
        for p in probes:
            p.close()
        for n in nodes.values():
            n.signal(signal.SIGCONT)
            n.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
