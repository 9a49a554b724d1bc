"""libringcache against three real nodes on loopback: placement checked on
the nodes themselves, one request per node for a multi-get, every
operation's reply codes, many threads on one handle, and failures: a killed
node's keys are misses within the timeout, a stopped (hung) node costs at
most a few timeouts, a restarted node comes back after the retry interval."""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from client_lib import (Cluster, Probe, Tap, mc_get, mc_stats, parse_many,  # noqa: E402
                        wait_for)

# OP_TIMEOUT is what a healthy node must beat for its keys to count as
# hits: 300 ms was once too little for cache-a on a loaded 2-core CI box
# (a hit turned into a miss in the hung-node check). 1000 ms leaves a
# healthy node a wide margin while a hung node still costs only a few
# timeouts; the latency bounds below are OP_TIMEOUT + SLACK, where SLACK
# covers the connect and scheduling of one request, not a second timeout
# (a call that waited for two timeouts still fails them).
OP_TIMEOUT, RETRY, RETRY_MAX = 1000, 300, 600
SLACK = 400
N = 300


def stopped(pid):
    """True once every thread of pid is in the stopped state: kill(2)
    returns before a multi-threaded process has actually stopped."""
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
        return all(open("/proc/%d/task/%s/stat" % (pid, tid)).read().rsplit(")", 1)[1].split()[0]
                   == "T" for tid in tasks)
    except OSError:
        return False


def main():
    t = Tap(17)
    cl = probe = None
    try:
        cl = Cluster()
        t.diag("nodes: %s (%s)" % (" ".join("%s:%d" % (i, n.port) for i, n in cl.by_id.items()),
                                    cl.binary))
        # No epoch poll: its `epoch` requests would perturb the exact
        # per-node request counts below (test_client_epoch.py covers it).
        probe = Probe(cl.members, OP_TIMEOUT, RETRY, RETRY_MAX, poll=0)

        # Placement: written through the client, read back from each node
        # with a plain memcached get.
        res, _ = parse_many(probe.cmd("many set k %d" % N))
        t.ok(len(res) == N and all(c == "OK" for _, c, _ in res.values()),
             "set %d keys through the client" % N,
             [k for k, v in res.items() if v[1] != "OK"][:10])
        owner = {k: v[0] for k, v in res.items()}
        wrong = []
        for k, o in owner.items():
            for nid, node in cl.by_id.items():
                v = mc_get(node.port, k)
                if (nid == o) != (v == "value-of-" + k):
                    wrong.append((k, o, nid, v))
        t.ok(not wrong, "every key is on its ring owner and on no other node", wrong[:10])
        per = {nid: sum(1 for o in owner.values() if o == nid) for nid in cl.IDS}
        t.ok(all(per[nid] > 0 for nid in cl.IDS), "the keys spread over all three nodes %s" % per)

        # Multi-get: one `get k...` line per node. cmd_get counts keys;
        # bytes_read grows by exactly that one line (plus our stats call).
        before = {nid: mc_stats(n.port) for nid, n in cl.by_id.items()}
        out = probe.cmd("mget k %d" % N)
        after = {nid: mc_stats(n.port) for nid, n in cl.by_id.items()}
        rows = [l.split() for l in out[:-1]]
        t.ok(len(rows) == N and all(r[2] == "OK" and r[1] == owner[r[0]] for r in rows)
             and out[-1].startswith("result OK"),
             "multi-get of %d keys returns every value from its owner (%s)" % (N, out[-1]),
             [r for r in rows if r[2] != "OK"][:10])
        d_get = {nid: int(after[nid]["cmd_get"]) - int(before[nid]["cmd_get"]) for nid in cl.IDS}
        t.ok(d_get == per, "each node's cmd_get grew by its own key count", (d_get, per))
        want_bytes = {nid: len("get " + " ".join("k%d" % i for i in range(N)
                                                 if owner["k%d" % i] == nid) + "\r\n")
                      + len("stats\r\n") for nid in cl.IDS}
        d_bytes = {nid: int(after[nid]["bytes_read"]) - int(before[nid]["bytes_read"])
                   for nid in cl.IDS}
        t.ok(d_bytes == want_bytes, "each node received exactly one get request",
             (d_bytes, want_bytes))

        # Every operation once, with its reply code.
        got = dict(l.split(" ", 1) for l in probe.cmd("ops opkey"))
        want = {
            "get_miss": "ENOTFOUND", "replace_missing": "ENOTSTORED",
            "append_missing": "ENOTSTORED", "add": "OK", "add_again": "ENOTSTORED",
            "incr": "OK 15", "decr": "OK 0", "replace": "OK", "append": "OK",
            "prepend": "OK", "gets": "start-mid-end 6", "cas": "OK", "cas_stale": "EEXISTS",
            "incr_text": "ENONNUMERIC", "touch": "OK", "get": "new 7", "delete": "OK",
            "delete_again": "ENOTFOUND", "touch_missing": "ENOTFOUND",
            "cas_missing": "ENOTFOUND", "set_big": "OK", "get_big": "OK 1",
            "set_too_big": "ETOOBIG", "set_ttl": "OK", "get_expired": "ENOTFOUND",
        }
        t.ok(got == want, "get/gets/set/add/replace/append/prepend/cas/delete/incr/decr/touch",
             "\n".join("%s: got %s want %s" % (k, got.get(k), w) for k, w in want.items()
                       if got.get(k) != w))

        out = probe.cmd("threads 8 150", timeout=120)
        t.ok(out and out[0].startswith("errors 0 "), "8 threads share one handle: %s" % out)

        # SIGKILL one node: its keys are misses (reads) and EDOWN (writes),
        # fast; the other nodes keep answering.
        victim = "cache-b"
        cl.by_id[victim].signal(signal.SIGKILL)
        cl.by_id[victim].proc.wait(timeout=5)
        res, max_ms = parse_many(probe.cmd("many get k %d" % N))
        bad = [(k, v) for k, v in res.items()
               if v[1] != ("ENOTFOUND" if owner[k] == victim else "OK")]
        t.ok(not bad, "after SIGKILL of %s its keys are misses, the others hits" % victim, bad[:10])
        t.ok(max_ms < OP_TIMEOUT + SLACK, "every read returned within the timeout (max %.1f ms)" % max_ms)
        res, max_ms = parse_many(probe.cmd("many set k %d" % N))
        bad = [(k, v) for k, v in res.items()
               if v[1] != ("EDOWN" if owner[k] == victim else "OK")]
        t.ok(not bad and max_ms < OP_TIMEOUT + SLACK,
             "writes to the dead node fail with EDOWN, the others succeed (max %.1f ms)" % max_ms,
             bad[:10])
        rows = [l.split() for l in probe.cmd("mget k %d" % N)[:-1]]
        bad = [r for r in rows if (r[1:] != ["-", "ENOTFOUND"] if owner[r[0]] == victim
                                   else r[1:] != [owner[r[0]], "OK"])]
        t.ok(len(rows) == N and not bad, "multi-get: the dead node's keys are misses", bad[:10])

        # SIGSTOP another node: it accepts but never answers. Only the op
        # that finds out waits (a timeout per retry interval at most).
        hung = "cache-c"
        cl.by_id[hung].signal(signal.SIGSTOP)
        t.ok(wait_for(lambda: stopped(cl.by_id[hung].pid), 5.0),
             "%s is stopped (every thread in state T)" % hung)
        t0 = time.monotonic()
        res, max_ms = parse_many(probe.cmd("many get k %d" % N))
        elapsed = (time.monotonic() - t0) * 1000
        cl.by_id[hung].signal(signal.SIGCONT)
        slow = [k for k, v in res.items() if v[2] > OP_TIMEOUT / 2]
        bad = [(k, v) for k, v in res.items()
               if v[1] != ("OK" if owner[k] == "cache-a" else "ENOTFOUND")]
        t.ok(not bad and max_ms < OP_TIMEOUT + SLACK,
             "a hung node's keys are misses within the timeout (max %.1f ms)" % max_ms, bad[:10])
        t.ok(len(slow) <= 1 + int(elapsed / RETRY),
             "only %d of %d reads waited for the hung node (%.0f ms in all)"
             % (len(slow), N, elapsed))

        # Restart the killed node on the same port: back after the retry
        # interval (it restarts empty, so writes are what we wait for).
        cl.by_id[victim].start()
        t0 = time.monotonic()

        def victim_back():
            r, _ = parse_many(probe.cmd("many set k %d" % N))
            return all(v[1] == "OK" for v in r.values())
        back = wait_for(victim_back, RETRY_MAX / 1000.0 + 3.0, step=0.05)
        took = (time.monotonic() - t0) * 1000
        t.ok(back and took <= RETRY_MAX + 1500,
             "a restarted node takes writes again after the retry interval (%.0f ms)" % took)
        res, _ = parse_many(probe.cmd("many get k %d" % N))
        t.ok(all(v[1] == "OK" for v in res.values()), "and every key reads back from its owner",
             [k for k, v in res.items() if v[1] != "OK"][:10])
    except Exception as e:  # a crash is a failure, reported as TAP
        t.ok(False, "test aborted: %r" % e)
    finally:
        if probe:
            probe.close()
        if cl:
            for n in cl.nodes:
                n.signal(signal.SIGCONT)
            cl.stop()
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
