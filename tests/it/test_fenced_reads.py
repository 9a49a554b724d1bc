#!/usr/bin/env python3
"""Plain reads of a killed primary's keys while `remove --failed` holds its
arcs fenced (server/route.c, decide: where a TRYAGAIN is relayed).

3 nodes a, b, c, R=2. a is killed; `ringctl remove --failed a` stops right
after the store's commit (RINGCTL_EXIT_AFTER=commit), so b and c stay
pending and fenced, and `ringctl resume` finishes it a moment later.
Meanwhile plain gets of a's keys go through b and c. A fenced key answers
TRYAGAIN, which for a plain client is relayed and retried with a backoff
until the fence lifts. It was relayed to the key's first owner, the failed
a: refused, and for a key whose other owner is the node itself there is no
next owner to fall back to, so `SERVER_ERROR forward failed` at once (found
by tests/it/test_missed_writes.py scenario 3, 1-7 per run between the
Prepare and the commit). It now goes to the acting primary (the Prepare
declared a failed): every get must return the value set before the kill.
"""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import failover_lib as fl  # noqa: E402

SIZE = 40
READERS = 4        # reader connections at each of b and c
FENCED = 0.5       # s of reads while fenced, before resume


def sees_down(cl, who, whom):
    row = fl.status_row(cl, who)
    return whom in [x.split(":")[0] for x in row.get("sees_down", "-").split(",")
                    if x.split(":")[1:] in ([], ["down"])]


def reader(addr, keys, want, stop, out):
    c = lg.Conn(addr, 10.0)
    i = 0
    try:
        while not stop.is_set():
            k = keys[i % len(keys)]
            i += 1
            t0 = time.monotonic()
            vals, err = c.get_multi([k])
            t1 = time.monotonic()
            if vals is None:
                out.append((t0, t1, k, "error", err.decode(errors="replace")))
            elif k not in vals:
                out.append((t0, t1, k, "miss", None))
            else:
                out.append((t0, t1, k, "hit" if vals[k] == want[k] else "stale", None))
    except (OSError, ConnectionError, lg.ProtoError) as e:
        out.append((time.monotonic(), time.monotonic(), None, "error", "connection: %s" % e))
    finally:
        c.close()


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2, mem=64)
    stop = threading.Event()
    threads = []
    try:
        if not ok:
            return
        universe = ["fr-%d" % i for i in range(600)]
        own = lg.locate(cl.store_active(), universe)
        keys = [k for k in universe if own[k][0] == "a"]
        want = {k: lg.make_value(k, 1, SIZE) for k in keys}
        c = lg.Conn(cl.nodes["b"].addr, 5.0)
        stored = sum(1 for k in keys if c.store("set", k, want[k]) == b"STORED")
        c.close()
        t.ok(stored == len(keys), "%d of a's keys set through b (%d STORED)"
             % (len(keys), stored))
        cl.nodes["a"].stop(signal.SIGKILL)
        t.ok(lg.wait_for(lambda: sees_down(cl, "b", "a") and sees_down(cl, "c", "a"), 15, 0.1),
             "b and c see a down")
        rc, out, err = cl.ctl("remove", "--failed", "a", env={"RINGCTL_EXIT_AFTER": "commit"})
        t.ok(rc == 4 and cl.store_epoch() == 2,
             "remove --failed a with RINGCTL_EXIT_AFTER=commit exits 4, the store at epoch 2",
             (rc, lg.tail(out), lg.tail(err)))
        outs = []
        for nid in ("b", "c"):
            for j in range(READERS):
                o = []
                outs.append(o)
                threads.append(threading.Thread(target=reader, daemon=True,
                                                args=(cl.nodes[nid].addr, keys[j::READERS],
                                                      want, stop, o)))
        t_fenced = time.monotonic()
        for th in threads:
            th.start()
        time.sleep(FENCED)
        rc2, out2, err2 = cl.ctl("resume")
        t.ok(rc2 == 0, "ringctl resume exits 0", (rc2, lg.tail(out2), lg.tail(err2)))
        conv = cl.converged(2, ["b", "c"])
        t.ok(all(v == (2, 0) for v in conv.values()), "b and c run epoch 2", conv)
        time.sleep(0.3)
        stop.set()
        for th in threads:
            th.join(10)
        reps = [r for o in outs for r in o]
        kinds = {}
        for r in reps:
            kinds[r[3]] = kinds.get(r[3], 0) + 1
        fenced = [r for r in reps if r[0] < t_fenced + FENCED]
        t.diag("%d reads (%d begun while fenced): %s" % (len(reps), len(fenced), kinds))
        bad = [r for r in reps if r[3] != "hit"]
        t.ok(len(fenced) >= 2 * READERS, "reads begun while b and c were fenced (%d)"
             % len(fenced))
        t.ok(not bad, "every read of a's keys through b and c returned the value set before "
             "the kill (%d did not)" % len(bad),
             "\n".join("%.3f s after the fence, took %.3f s: %s %s %s (owners %s)"
                       % (r[0] - t_fenced, r[1] - r[0], r[2], r[3], r[4],
                          ",".join(own.get(r[2], ()))) for r in bad[:5]))
    finally:
        stop.set()
        for th in threads:
            th.join(10)
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 180, "reads of fenced keys of a failed primary")


if __name__ == "__main__":
    main()
