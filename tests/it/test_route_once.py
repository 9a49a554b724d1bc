"""One owner look-up per keyed request (issue 10): the node decides where a
request goes once (server/route.c) and carries that decision, with the
key's owner list, through the store and replication. `stats` route_lookups
counts every owner look-up a node makes for a request; this test reads it
around single requests on a real 3-node R=2 cluster:

- a replicated set at the primary: 1 look-up there (not one per step:
  route check, re-check after the data block, replication plan, fan-out);
- the same when the data block arrives in a later packet than the line;
- a set sent to a node that owns nothing of the key: 1 look-up to relay it,
  1 at the primary that serves it;
- delete, incr, touch and a read at the secondary: 1 each;
- a replica's own view of the post-image is not a client request: 0 there.
Every reply is checked too, so a counter that moved for a failed request
would not pass."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402


def lookups(cl, nid):
    return int(lg.node_stats(cl.nodes[nid].addr).get("route_lookups", -1))


def counts(cl):
    return {nid: lookups(cl, nid) for nid in cl.nodes}


def delta(before, after):
    return {nid: after[nid] - before[nid] for nid in before}


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2, mem=64)
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["once-%d" % i for i in range(200)]
        owners = lg.locate(e1, keys, 2)
        key = next(k for k in keys if owners[k][0] == "a")
        prim, sec = owners[key]
        other = next(n for n in cl.nodes if n not in owners[key])
        t.ok(lookups(cl, "a") >= 0, "stats reports route_lookups")

        def one(desc, nid, send, want_reply, expect):
            before = counts(cl)
            c = lg.Conn(cl.nodes[nid].addr, 5.0)
            try:
                for part in send:
                    c.send(part)
                    if len(send) > 1:
                        # Interleave: the next part goes in a later packet,
                        # so the node reads it in a later callback.
                        time.sleep(0.05)
                got = c.readline()
            finally:
                c.close()
            after = counts(cl)
            d = delta(before, after)
            t.ok(got == want_reply and d == expect,
                 "%s: reply %r, owner look-ups per node %s" % (desc, got, d),
                 {"want": (want_reply, expect)})

        zero = {n: 0 for n in cl.nodes}
        set_line = b"set %s 0 0 5\r\n" % key.encode()
        one("replicated set at the primary", prim, [set_line + b"hello\r\n"], b"STORED",
            dict(zero, **{prim: 1}))
        one("replicated set, data block in a later packet", prim, [set_line, b"hellp\r\n"],
            b"STORED", dict(zero, **{prim: 1}))
        one("set through a node that owns nothing of the key", other,
            [set_line + b"hellq\r\n"], b"STORED", dict(zero, **{other: 1, prim: 1}))
        one("touch at the primary", prim, [b"touch %s 0\r\n" % key.encode()], b"TOUCHED",
            dict(zero, **{prim: 1}))
        one("read at the secondary", sec, [b"get %s\r\n" % key.encode()],
            b"VALUE %s 0 5" % key.encode(), dict(zero, **{sec: 1}))
        one("delete at the primary", prim, [b"delete %s\r\n" % key.encode()], b"DELETED",
            dict(zero, **{prim: 1}))
        one("add then incr at the primary", prim,
            [b"add %s 0 0 1\r\n7\r\n" % key.encode()], b"STORED", dict(zero, **{prim: 1}))
        one("incr at the primary", prim, [b"incr %s 5\r\n" % key.encode()], b"12",
            dict(zero, **{prim: 1}))
        # Both owners hold the result: the replica applied the post-images.
        vals = {n: lg.Conn(cl.nodes[n].addr, 5.0) for n in (prim, sec)}
        got = {}
        for n, c in vals.items():
            c.declare(1)
            got[n], _ = c.get_multi([key])
            c.close()
        t.ok(all(g == {key: b"12"} for g in got.values()),
             "the incremented value is on both owners", got)
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 120, "route once")


if __name__ == "__main__":
    main()
