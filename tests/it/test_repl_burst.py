"""Replication under a deep pipeline, and remove --failed with a recovering
survivor (issue 6; the two bugs the benchmarks found).

1. Three nodes, R=2: every node gets bursts of thousands of pipelined sets
   of its own primary keys at once (as the repair and replication
   benchmarks fill). Every reply must be STORED, no node may skip or fail a
   replica (a healthy peer was skipped when the forward flush failed on a
   stale errno, which made the peers recovering and every later write
   TRYAGAIN), no node may be recovering, and every key must be identical
   on both of its owners.
2. A survivor that is recovering (restarted) when another node dies:
   `ringctl remove --failed` must finish (it waited for transfers from the
   recovering node, which sources nothing, then aborted after 60 s)."""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import failover_lib as fl  # noqa: E402

PER_NODE = 60000    # keys whose primary is each node
BATCH = 500         # sets per pipelined send


def key_of(i):
    return "rb-%d" % i


def value_of(i):
    """100-1000 bytes (as the benchmarks fill), starting with i."""
    return b"%d:" % i + b"x" * (100 + i * 2654435761 % 901)


def burst(addr, idx, epoch, out):
    """Pipelined sets of keys idx to addr; out gets the non-STORED replies."""
    c = lg.Conn(addr, 30.0)
    bad = []
    try:
        c.declare(epoch)
        for j in range(0, len(idx), BATCH):
            chunk = idx[j:j + BATCH]
            c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (key_of(i).encode(),
                                                       len(value_of(i)), value_of(i))
                            for i in chunk))
            for i in chunk:
                line = c.readline()
                if line != b"STORED":
                    bad.append((key_of(i), line))
    except Exception as e:  # noqa: BLE001 (reported as a failure)
        bad.append(("-", repr(e)))
    finally:
        c.close()
    out.extend(bad)


def read_all(addr, keys, epoch):
    """{key: value} of keys at addr (a declared client, batches of gets)."""
    return lg.read_keys(addr, keys, epoch, batch=200)


def pipelined_burst(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2, mem=256)
    try:
        if not ok:
            return
        e1 = cl.store_active()
        n = PER_NODE * 3
        owners = lg.locate(e1, [key_of(i) for i in range(n)], 2)
        groups = {}
        for i in range(n):
            groups.setdefault(owners[key_of(i)][0], []).append(i)
        bad = []
        t0 = time.monotonic()
        # Two connections per node: both its workers open their replica
        # upstreams under the burst (the first flush after a connect is
        # where a stale errno failed them).
        ts = [threading.Thread(target=burst, args=(cl.nodes[nid].addr, idx[h::2], 1, bad))
              for nid, idx in groups.items() for h in (0, 1)]
        for th in ts:
            th.start()
        for th in ts:
            th.join(60)
        t.ok(not bad, "%d pipelined sets (%d per send) at R=2: every reply STORED (%d not, "
             "%.1f s)" % (n, BATCH, len(bad), time.monotonic() - t0), bad[:5])
        stats = {i: lg.node_stats(cl.nodes[i].addr) for i in cl.nodes}
        skipped = {i: int(s.get("replica_skipped", -1)) for i, s in stats.items()}
        failed = {i: int(s.get("replica_failures", -1)) for i, s in stats.items()}
        repl = sum(int(s.get("replicated", 0)) for s in stats.values())
        t.ok(not any(skipped.values()) and not any(failed.values()) and repl == n,
             "no replica skipped %s or failed %s; %d of %d post-images acknowledged"
             % (skipped, failed, repl, n))
        st = cl.status()
        flags = {i: r.get("flags") for i, r in st["nodes"].items()}
        t.ok(st["rc"] == 0 and all(f == "-" for f in flags.values()),
             "ringctl status exits 0, no node recovering or behind: %s" % flags,
             st["raw"][-800:])
        keys = [key_of(i) for i in range(n)]
        per_node = {}
        for nid in cl.nodes:
            mine = [k for k in keys if nid in owners[k]]
            per_node[nid] = read_all(cl.nodes[nid].addr, mine, 1)
        diff = []
        for i in range(n):
            k = key_of(i)
            for nid in owners[k]:
                if per_node[nid].get(k) != value_of(i):
                    diff.append((k, nid, (per_node[nid].get(k) or b"(miss)")[:20]))
        t.ok(not diff, "every key identical on both owners (%d differ)" % len(diff), diff[:5])
    finally:
        cl.close()
        if t.failed == 0:
            cl.cleanup_dir()
        else:
            t.diag("logs kept in %s" % cl.dir)


def remove_with_recovering_survivor(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2, mem=64)
    try:
        if not ok:
            return
        e1 = cl.store_active()
        n = 3000
        owners = lg.locate(e1, [key_of(i) for i in range(n)], 2)
        groups = {}
        for i in range(n):
            groups.setdefault(owners[key_of(i)][0], []).append(i)
        bad = []
        for nid, idx in groups.items():
            burst(cl.nodes[nid].addr, idx, 1, bad)
        t.ok(not bad, "fill of %d keys: every reply STORED" % n, bad[:5])
        # a restarts: it comes back recovering (it served before).
        cl.nodes["a"].restart()

        def recovering():
            return fl.status_row(cl, "a").get("flags", "").startswith("recovering")
        t.ok(lg.wait_for(recovering, 10, 0.05), "a restarted: ringctl status says recovering",
             fl.status_row(cl, "a"))
        cl.nodes["b"].stop(signal.SIGKILL)
        t0 = time.monotonic()
        rc, out, err = cl.ctl("remove", "--failed", "b", timeout=40)
        took = time.monotonic() - t0
        t.ok(rc == 0 and took < 30, "remove --failed b with a recovering: exit 0 in %.1f s "
             "(it used to wait for a's transfers, then abort)" % took,
             (rc, lg.tail(out), lg.tail(err)))
        t.ok("a is recovering" in err, "ringctl warns that a sources nothing", lg.tail(err))
        conv = cl.converged(2, ["a", "c"])
        t.ok(all(v == (2, 0) for v in conv.values()), "a and c report EPOCH 2 0", conv)
        st = cl.status()
        t.ok(fl.status_row(cl, "a").get("flags") == "-",
             "a is no longer recovering after the commit", st["raw"][-600:])
    finally:
        cl.close()
        if t.failed == 0:
            cl.cleanup_dir()
        else:
            t.diag("logs kept in %s" % cl.dir)


def main():
    t = lg.Tap()
    lg.watchdog(170)
    why = lg.supports_cluster()
    if why:
        t.skip("replication burst", why)
    else:
        lg.run_tap(t, pipelined_burst)
        lg.run_tap(t, remove_with_recovering_survivor)
    t.done()


if __name__ == "__main__":
    main()
