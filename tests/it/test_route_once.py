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
- a replica's own view of the post-image is not a client request: 0 there;
- a plain client's multi-get at a node that owns only some of its keys
  (R=1 and R=2), with keys on 2 other owners: 1 look-up per key there (not
  one more per relayed part, nor one more per key when some are local), 1
  per relayed key at its owner; with local and remote keys, a key repeated
  in the line, gets, and a get relayed whole.
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


def get_seq(c, line):
    """Send a get line: ([(key, value), ...] in reply order, None), or
    (None, the error line)."""
    c.send(line)
    got = []
    while True:
        r = c.readline()
        if r == b"END":
            return got, None
        if not r.startswith(b"VALUE "):
            return None, r
        p = r.split()
        got.append((p[1].decode(), c.readn(int(p[3]))))


def multiget(t, replicas):
    """Multi-gets of a plain client at node a, which owns some of their
    keys: each key is looked up once at a, and once at the owner a relays
    it to."""
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=replicas, mem=64)
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["mget-%d" % i for i in range(300)]
        owners = lg.locate(e1, keys, replicas)
        here = "a"
        local = [k for k in keys if here in owners[k]]
        remote = {n: [k for k in keys if here not in owners[k] and owners[k][0] == n]
                  for n in ("b", "c")}
        values = {k: ("v-%s-%d" % (k, replicas)).encode() for k in keys}
        stored = []
        for n in cl.nodes:
            c = lg.Conn(cl.nodes[n].addr, 5.0)
            try:
                stored += [c.store("set", k, values[k]) for k in keys if owners[k][0] == n]
            finally:
                c.close()
        t.ok(len(local) >= 20 and all(len(r) >= 20 for r in remote.values()) and
             stored == [b"STORED"] * len(keys),
             "R=%d: keys stored at their primaries, some owned by %s, some by each other node"
             % (replicas, here), {"local": len(local), "stored": set(stored)})
        lb, lc = remote["b"], remote["c"]

        def want(line, touch):
            """The reply a relays: each relayed part's keys (a part per
            owner list, or per primary for gat, in the order the line
            first names it), then the local ones (any owner reads, the
            primary touches), each in line order; and the look-ups per
            node."""
            def part(k):
                return owners[k][:1] if touch else owners[k]

            def is_local(k):
                return here in part(k)[:1] if touch else here in owners[k]

            parts = []
            for k in line:
                if not is_local(k) and part(k) not in parts:
                    parts.append(part(k))
            seq = [k for p in parts for k in line if not is_local(k) and part(k) == p]
            seq += [k for k in line if is_local(k)]
            per = {n: 0 for n in cl.nodes}
            per[here] = len(line)
            for k in line:
                if not is_local(k):
                    per[owners[k][0]] += 1
            return [(k, values[k]) for k in seq], per

        def mget(desc, cmd, line):
            expect, per = want(line, cmd.startswith(b"gat"))
            before = counts(cl)
            c = lg.Conn(cl.nodes[here].addr, 5.0)
            try:
                got, err = get_seq(c, b"%s %s\r\n" % (cmd, " ".join(line).encode()))
            finally:
                c.close()
            d = delta(before, counts(cl))
            t.ok(err is None and got == expect and d == per,
                 "R=%d %s (%d keys): values in order, owner look-ups per node %s"
                 % (replicas, desc, len(line), d),
                 {"want": (expect, per), "got": (got, err)})

        mget("get of remote keys on 2 owners", b"get", [lb[0], lc[0], lb[1], lc[1], lb[2], lc[2]])
        mget("get of local keys and remote keys on 2 owners", b"get",
             [local[0], lb[3], local[1], lc[3], lc[4], local[2], lb[4]])
        mget("get with keys repeated", b"get",
             [local[3], lb[5], local[3], lc[5], lb[5], local[4], lc[5], lb[5]])
        mget("gets of local and remote keys", b"gets", [lc[6], local[5], lb[6], local[6], lc[7]])
        mget("get of one owner's keys (relayed whole)", b"get", [lb[7], lb[8], lb[9]])
        mget("get of local keys", b"get", [local[7], local[8], local[9]])
        mget("get of more keys than route_get keeps inline", b"get",
             local[:20] + lb[:20] + lc[:20] + local[:10] + lc[:10])
        prim = [k for k in local if owners[k][0] == here]
        mget("gat of local and remote keys", b"gat 0",
             [prim[0], lb[10], local[10], prim[1], lc[10], prim[0]])
        mget("gat of many keys", b"gat 0", prim[:8] + lb[:4] + local[:4] + lc[:4])
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main([scenario, (multiget, 1), (multiget, 2)], 240, "route once")


if __name__ == "__main__":
    main()
