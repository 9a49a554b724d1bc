"""Reads of a kill -9'd primary's keys through a survivor (issue 11, finding
"kill -9"): plain memcached clients read every key through the nodes that
are not its primary while that primary is killed. A node relaying a read
to the dead primary gets a refused or reset connection; it must try the
key's next owner within the same request, so the readers see no error and
no miss of an acknowledged value (before the fix, 42-164 of 20000 reads
answered SERVER_ERROR forward failed in the first 0.13 s).

3 nodes, R=2; every key is set once (acknowledged by both owners) before
the kill; four reader threads loop over the dead node's keys through the
two survivors (single-key gets and 20-key multi-gets) from 0.5 s before
the kill to 2.5 s after it (past the heartbeats' detection)."""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

NKEYS = 3000


def value_of(k):
    return ("v-" + k).encode()


def reader(addr, keys, multi, stop, out):
    """Read keys at addr (a plain client) until stop is set: counts reads,
    errors and misses in out."""
    c = None
    i = 0
    while not stop.is_set():
        try:
            if c is None:
                c = lg.Conn(addr, 5.0)
            if multi:
                batch = [keys[(i + j) % len(keys)] for j in range(20)]
                i += 20
                vals, err = c.get_multi(batch)
                out["reads"] += len(batch)
                if vals is None:
                    out["errors"].append((batch[0], err))
                    continue
                for k in batch:
                    if vals.get(k) != value_of(k):
                        out["misses"].append((k, vals.get(k)))
            else:
                k = keys[i % len(keys)]
                i += 1
                vals, err = c.get_multi([k])
                out["reads"] += 1
                if vals is None:
                    out["errors"].append((k, err))
                elif vals.get(k) != value_of(k):
                    out["misses"].append((k, vals.get(k)))
        except (OSError, lg.ProtoError) as e:
            out["errors"].append(("-", repr(e)))
            if c is not None:
                c.close()
            c = None
    if c is not None:
        c.close()


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2, mem=64)
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["kr-%d" % i for i in range(NKEYS)]
        owners = lg.locate(e1, keys, 2)
        bad = []
        for nid in cl.nodes:
            c = lg.Conn(cl.nodes[nid].addr, 10.0)
            mine = [k for k in keys if owners[k][0] == nid]
            c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(value_of(k)),
                                                         value_of(k)) for k in mine))
            bad += [(k, r) for k in mine for r in [c.readline()] if r != b"STORED"]
            c.close()
        t.ok(not bad, "%d keys set at their primaries, every one STORED on both owners"
             % NKEYS, bad[:5])
        victim = "a"
        dead = [k for k in keys if owners[k][0] == victim]
        outs, threads, stop = [], [], threading.Event()
        for nid in cl.nodes:
            if nid == victim:
                continue
            for multi in (False, True):
                out = {"reads": 0, "errors": [], "misses": []}
                outs.append(out)
                threads.append(threading.Thread(
                    target=reader, args=(cl.nodes[nid].addr, dead, multi, stop, out)))
        for th in threads:
            th.start()
        lg.wait_for(lambda: sum(o["reads"] for o in outs) > 2000, 10, 0.01)
        before = sum(o["reads"] for o in outs)
        t_kill = time.monotonic()
        cl.nodes[victim].stop(signal.SIGKILL)
        lg.wait_for(lambda: time.monotonic() > t_kill + 2.5, 10, 0.05)
        stop.set()
        for th in threads:
            th.join(15)
        reads = sum(o["reads"] for o in outs)
        errors = [e for o in outs for e in o["errors"]]
        misses = [m for o in outs for m in o["misses"]]
        t.ok(reads - before > 1000, "the readers kept reading after the kill (%d reads before, "
             "%d after)" % (before, reads - before))
        t.ok(not errors, "reads of the killed primary's keys through the survivors: %d reads, "
             "%d errors" % (reads, len(errors)), errors[:5])
        t.ok(not misses, "no read missed an acknowledged value (%d misses)" % len(misses),
             misses[:5])
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 120, "reads after kill -9")


if __name__ == "__main__":
    main()
