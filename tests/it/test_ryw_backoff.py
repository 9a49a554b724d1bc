"""Read-your-writes on one connection while the relayed write is retried
(docs/guarantees.md "Per connection"; the nemesis harness's `ryw` class).

A plain memcached client pipelines `set k v` + `get k` at a node that
relays both to k's acting primary. When that primary answers the set
TRYAGAIN (here: it was killed with -9 and restarted on its state
directory, so it comes back recovering), the relaying node retries the
set after a backoff; the get is answered MOVED (a recovering primary
sends reads to a live replica) and was sent there at once, read before
the set took effect: the client saw STORED and then the older value.
Now a connection's later relayed requests are held while an earlier one
is retried, and sent after it (server/forward.c, struct fwd_order).

3 nodes, R=2, a longer forward timeout (so a set retried through the
recovery is not given up before `ringctl repair` lets it through). One
connection per key, each key's primary is a, the connections at b and c
(the key's second owner or a node that owns nothing of it); each loops
rounds of one packet `set k <unique>` + `get k`. a is killed and
restarted; once its counters show relayed writes answered TRYAGAIN and
reads MOVED, `ringctl repair a` runs; the rounds go on until every
connection did more after it. A round whose set answered STORED and whose
get returned anything but that value is a violation: there must be none
(before the fix: 12 of 898 rounds, one per connection, the round that
spanned the repair). Meanwhile 12 more connections pipeline two noreply
sets and a get and close at once, while a is recovering: their sets (the
second held behind the first) must still be applied. The nodes then stop
with SIGTERM: exit 0, no sanitizer report in their logs."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

CONNS = 12
ROUNDS_BEFORE = 20   # per connection, before the kill
ROUNDS_AFTER = 20    # per connection, after the repair
FORWARD_TIMEOUT_MS = 4000


def read_get(c):
    """A one-key get reply: (value or None for a miss, None) or (None,
    the error line)."""
    line = c.readline()
    if line == b"END":
        return None, None
    p = line.split()
    if len(p) < 4 or p[0] != b"VALUE":
        return None, line
    v = c.readn(int(p[3]))
    end = c.readline()
    if end != b"END":
        raise lg.ProtoError("get: no END: %r" % end)
    return v, None


def rounds(addr, key, tag, stop, out):
    """Pipelined set+get rounds on one connection at addr until stop;
    appends (start, end, set reply, get value, get error, value set) to
    out["rounds"]; a lost connection is counted and reopened."""
    c = None
    k = key.encode()
    i = 0
    while not stop.is_set():
        try:
            if c is None:
                c = lg.Conn(addr, 60.0)
            v = b"%s-%d" % (tag.encode(), i)
            i += 1
            t0 = time.monotonic()
            c.send(b"set %s 0 0 %d\r\n%s\r\nget %s\r\n" % (k, len(v), v, k))
            ack = c.readline()
            got, err = read_get(c)
            out["rounds"].append((t0, time.monotonic(), ack, got, err, v))
        except (OSError, lg.ProtoError) as e:
            out["lost"].append(repr(e))
            if c is not None:
                c.close()
            c = None
    if c is not None:
        c.close()


def counter(addr, name):
    try:
        return int(lg.node_stats(addr).get(name, 0))
    except (OSError, lg.ProtoError, ValueError):
        return 0


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2, mem=64,
                              node_args=["--forward-timeout", str(FORWARD_TIMEOUT_MS)])
    threads, stop = [], threading.Event()
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["rb-%d" % i for i in range(400)]
        owners = lg.locate(e1, keys, 2)
        mine = [k for k in keys if owners[k][0] == "a"][:CONNS]
        outs = []
        for j, k in enumerate(mine):
            nid = "b" if j % 2 == 0 else "c"
            role = "second owner" if owners[k][1] == nid else "non-owner"
            out = {"key": k, "at": nid, "role": role, "rounds": [], "lost": []}
            outs.append(out)
            threads.append(threading.Thread(target=rounds, args=(
                cl.nodes[nid].addr, k, "%s%d" % (nid, j), stop, out)))
        t.diag("%d connections: %s" % (len(outs), ", ".join(
            "%s at %s (%s)" % (o["key"], o["at"], o["role"]) for o in outs)))
        for th in threads:
            th.start()
        t.ok(lg.wait_for(lambda: all(len(o["rounds"]) >= ROUNDS_BEFORE for o in outs), 30),
             "every connection ran %d rounds before the fault" % ROUNDS_BEFORE)

        a = cl.nodes["a"]
        t_kill = time.monotonic()
        a.restart()     # kill -9, then start again on its state directory
        tried = lg.wait_for(lambda: counter(a.addr, "tryagain") >= 3 * CONNS
                            and counter(a.addr, "moved") >= CONNS // 2, 30, 0.05)
        t.ok(tried, "restarted a is recovering: relayed sets answered TRYAGAIN, gets MOVED "
             "(tryagain %d, moved %d)" % (counter(a.addr, "tryagain"),
                                          counter(a.addr, "moved")))
        # Connections that close while their requests are retried or held:
        # two noreply sets (the second is held behind the first) and a get,
        # then close at once. What was held goes on without them.
        gone = [k for k in keys if owners[k][0] == "a"][CONNS:CONNS + 2 * CONNS]
        for j in range(0, len(gone) - 1, 2):
            k1, k2 = gone[j].encode(), gone[j + 1].encode()
            c = lg.Conn(cl.nodes["b" if j % 4 == 0 else "c"].addr, 5.0)
            c.send(b"set %s 0 0 4 noreply\r\ngone\r\nset %s 0 0 4 noreply\r\ngone\r\n"
                   b"get %s\r\n" % (k1, k2, k1))
            c.close()
        rc, out, err = cl.ctl("repair", "a")
        t_repair = time.monotonic()
        t.ok(rc == 0, "ringctl repair a exits 0 (%.1f s after the kill)" % (t_repair - t_kill),
             (rc, lg.tail(out), lg.tail(err)))
        counts = [len(o["rounds"]) for o in outs]
        done = lg.wait_for(lambda: all(len(o["rounds"]) >= n + ROUNDS_AFTER
                                       for o, n in zip(outs, counts)), 60)
        stop.set()
        for th in threads:
            th.join(90)
        t.ok(done and not any(th.is_alive() for th in threads),
             "every connection ran %d more rounds after the repair" % ROUNDS_AFTER)

        total = sum(len(o["rounds"]) for o in outs)
        bad, errs, spanned = [], [], 0
        for o in outs:
            for r in o["rounds"]:
                t0, t1, ack, got, err, v = r
                if ack == b"STORED" and t0 < t_repair and t1 > t_kill:
                    spanned += 1
                if ack == b"STORED" and got != v:
                    (errs if err is not None else bad).append(
                        (o["key"], o["at"], round(t0 - t_kill, 3), round(t1 - t_kill, 3),
                         v, got, err))
        lost = [e for o in outs for e in o["lost"]]
        t.diag("%d rounds, %d STORED between the kill and the repair's end, %d connections "
               "lost, %d gets answered an error after STORED"
               % (total, spanned, len(lost), len(errs)))
        t.ok(spanned > 0, "some sets were STORED through a's restart and repair (%d)" % spanned)
        t.ok(not bad, "pipelined set + get on one connection through a retried relay: "
             "%d of %d rounds read something other than the value just stored"
             % (len(bad), total), bad[:8])
        t.ok(len(errs) <= len(outs), "at most one get per connection answered an error after "
             "its set was STORED (%d)" % len(errs), errs[:5])
        e3 = cl.store_active()
        prim = lg.locate(e3, gone, 2)
        got = {}
        for nid in cl.nodes:
            got.update(lg.read_keys(cl.nodes[nid].addr, [k for k in gone if prim[k][0] == nid],
                                    lg.parse_members(e3)["epoch"]))
        missing = [k for k in gone if got.get(k) != b"gone"]
        t.ok(not missing, "noreply sets of %d connections closed while they were retried or "
             "held are applied: %d missing" % (len(gone) // 2, len(missing)), missing[:5])
        rcs = {nid: n.stop() for nid, n in cl.nodes.items()}
        t.ok(all(v == 0 for v in rcs.values()), "every node exits 0 after SIGTERM", rcs)
        logs = ""
        for n in cl.nodes.values():
            with open(n.log, errors="replace") as f:
                logs += f.read()
        t.ok("ERROR: AddressSanitizer" not in logs and "runtime error" not in logs
             and "LeakSanitizer" not in logs, "no sanitizer report in the node logs",
             logs[-3000:])
    finally:
        stop.set()
        for th in threads:
            th.join(5)
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 200, "read your writes through a retried relay")


if __name__ == "__main__":
    main()
