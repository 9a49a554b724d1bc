"""CAS order follows time across restarts and joins (issue 26, finding f19).
R=2, three nodes. A replica orders images by CAS and keeps tombstones
(deletes, expiries) for 10 s; before, every node counted CAS from 1, so a
restarted or freshly joined primary minted CAS below what its replica
held, the replica dropped the image under its tombstone and the write was
acknowledged yet absent there. Now a CAS is a hybrid logical clock.

- repair: 300 keys with primary b are written 20 times and deleted; b is
  killed (-9), restarted and repaired; the keys set through b are all at
  their replica;
- join: 300 keys a joining d becomes primary of are set with a 2 s TTL
  and left to expire; d joins and sets them; all are at their replica.
Replicas are read on declared connections, so each serves its own copy."""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

NKEYS = 300


def pipeline(addr, reqs, timeout=10.0):
    """Send the requests (bytes) on one connection; their first reply lines."""
    c = lg.Conn(addr, timeout)
    try:
        c.send(b"".join(reqs))
        return [c.readline() for _ in reqs]
    finally:
        c.close()


def set_req(k, v, ttl=0):
    return b"set %s 0 %d %d\r\n%s\r\n" % (k.encode(), ttl, len(v), v)


def at_replicas(t, cl, keys, value, what):
    """Every key of keys read at its second owner (declared connection)
    holds value: one TAP line."""
    ep = cl.store_epoch()
    members = cl.store_active()
    owners = lg.locate(members, keys, 2)
    missing = []
    for nid in cl.nodes:
        mine = [k for k in keys if owners[k][1] == nid]
        if mine:
            got = lg.read_keys(cl.nodes[nid].addr, mine, epoch=ep)
            missing += [(k, nid) for k in mine if got.get(k) != value]
    t.ok(not missing, "%s: every acknowledged set is at its replica (%d of %d missing)"
         % (what, len(missing), len(keys)), missing[:5])


def on_cluster(body, ids=("a", "b", "c"), replicas=2, node_args=()):
    """A scenario: body(t, cl) on a fresh cluster (R=2 a, b, c unless told)."""
    def run(t):
        cl, ok = lg.start_cluster(t, list(ids), replicas=replicas, node_args=node_args)
        try:
            if ok:
                body(t, cl)
        finally:
            lg.close_cluster(t, cl)
    return run


def repair(t, cl):
    cand = ["co-r%d" % i for i in range(NKEYS * 4)]
    owners = lg.locate(cl.store_active(), cand, 2)
    keys = [k for k in cand if owners[k][0] == "b"][:NKEYS]
    b = cl.nodes["b"]
    for gen in range(20):
        r = pipeline(b.addr, [set_req(k, b"old-%d" % gen) for k in keys])
        if not all(x == b"STORED" for x in r):
            break
    t.ok(all(x == b"STORED" for x in r), "%d keys set 20 times at their primary b"
         % len(keys), r[:3])
    r = pipeline(b.addr, [b"delete %s\r\n" % k.encode() for k in keys])
    t.ok(all(x == b"DELETED" for x in r), "and deleted (the replica keeps tombstones)",
         r[:3])
    b.restart()
    rc, out, err = cl.ctl("repair", "b")
    t.ok(rc == 0, "b killed -9, restarted, ringctl repair b: exit 0",
         (rc, lg.tail(out), lg.tail(err)))
    ep = cl.store_epoch()
    conv = cl.converged(ep, ["a", "b", "c"], timeout=20.0)
    t.ok(all(v == (ep, 0) for v in conv.values()), "every node at epoch %d" % ep, conv)
    owners2 = lg.locate(cl.store_active(), keys, 2)
    keys = [k for k in keys if owners2[k][0] == "b"]
    r = pipeline(b.addr, [set_req(k, b"new") for k in keys])
    t.ok(len(keys) > NKEYS // 2 and all(x == b"STORED" for x in r),
         "%d keys set through the repaired b: all STORED" % len(keys), r[:3])
    at_replicas(t, cl, keys, b"new", "after the repair")


def join(t, cl):
    d = cl.add("d")
    cand = ["co-j%d" % i for i in range(NKEYS * 8)]
    after = lg.locate(cl.members(["a", "b", "c", "d"], epoch=2), cand, 2)
    keys = [k for k in cand if after[k][0] == "d"][:NKEYS]
    owners = lg.locate(cl.store_active(), keys, 2)
    for nid in ("a", "b", "c"):
        mine = [k for k in keys if owners[k][0] == nid]
        r = pipeline(cl.nodes[nid].addr, [set_req(k, b"old", ttl=2) for k in mine])
        t.ok(all(x == b"STORED" for x in r), "%d keys set with a 2 s TTL at %s"
             % (len(mine), nid), r[:3])

    def expired():
        ep = cl.store_epoch()
        return all(not lg.read_keys(cl.nodes[nid].addr,
                                    [k for k in keys if nid in owners[k]], epoch=ep)
                   for nid in ("a", "b", "c"))
    t.ok(lg.wait_for(expired, 8.0, 0.1), "they expired at both owners")
    rc, out, err = cl.ctl("join", "d", d.addr_s)
    t.ok(rc == 0, "ringctl join d: exit 0", (rc, lg.tail(out), lg.tail(err)))
    conv = cl.converged(2, ["a", "b", "c", "d"], timeout=20.0)
    t.ok(all(v == (2, 0) for v in conv.values()), "every node at epoch 2", conv)
    r = pipeline(d.addr, [set_req(k, b"new") for k in keys])
    t.ok(all(x == b"STORED" for x in r), "%d keys set through the new primary d: all STORED"
         % len(keys), r[:3])
    at_replicas(t, cl, keys, b"new", "after the join")


def main():
    lg.tap_main([on_cluster(repair), on_cluster(join)], 170, "CAS order across restarts and joins")


if __name__ == "__main__":
    main()
