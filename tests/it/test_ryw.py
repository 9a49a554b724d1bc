"""Read-your-writes on one connection at every node (issue 11, finding RYW).

A plain memcached client may talk to any node. At a key's second owner a
write goes to the key's primary (relayed) while a read could be served
from the local copy, which the primary's post-image has not reached yet:
a pipelined `set k v` + `get k` returned the previous value there, and
`delete k` + `get k` the deleted one. memcached answers every command of
a connection in order, so a connection must read its own writes at every
node: at the primary, at the second owner and at a node that owns nothing
of the key. Each round below pipelines a write and a read in one packet
and checks the read against the write, on a 3-node R=2 cluster."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

ROUNDS = 300


def read_get(c):
    """The value of a one-key get reply, or None for a miss; an error line
    raises."""
    line = c.readline()
    if line == b"END":
        return None
    p = line.split()
    if len(p) < 4 or p[0] != b"VALUE":
        raise lg.ProtoError("get: %r" % line)
    v = c.readn(int(p[3]))
    end = c.readline()
    if end != b"END":
        raise lg.ProtoError("get: no END: %r" % end)
    return v


def rounds_at(addr, key, tag):
    """ROUNDS pipelined write+read pairs on one connection at addr: returns
    the rounds whose read did not see the write just acknowledged."""
    bad = []
    c = lg.Conn(addr, 10.0)
    k = key.encode()
    try:
        for i in range(ROUNDS):
            v = b"%s-%d" % (tag.encode(), i)
            kind = i % 3
            if kind == 0:
                c.send(b"set %s 0 0 %d\r\n%s\r\nget %s\r\n" % (k, len(v), v, k))
                ack, want = c.readline(), (b"STORED", v)
            elif kind == 1:
                c.send(b"delete %s\r\nget %s\r\n" % (k, k))
                ack, want = c.readline(), (b"DELETED", None)
            else:
                c.send(b"add %s 0 0 1\r\n5\r\nincr %s 7\r\nget %s\r\n" % (k, k, k))
                add = c.readline()
                ack = c.readline()   # incr's reply
                if add != b"STORED":
                    ack = add
                want = (b"12", b"12")
            got = read_get(c)
            if (ack, got) != want:
                bad.append((i, ack, got, want))
    finally:
        c.close()
    return bad


def noreply_at(addr, key, tag):
    """ROUNDS pipelined `set k v noreply` (or `delete k noreply`) + `get k`
    on one connection at addr: a noreply write leaves no reply to wait
    for, yet the get must see it. Returns the rounds whose get did not."""
    bad = []
    c = lg.Conn(addr, 10.0)
    k = key.encode()
    try:
        for i in range(ROUNDS):
            v = b"%s-%d" % (tag.encode(), i)
            if i % 2 == 0:
                c.send(b"set %s 0 0 %d noreply\r\n%s\r\nget %s\r\n" % (k, len(v), v, k))
                want = v
            else:
                c.send(b"delete %s noreply\r\nget %s\r\n" % (k, k))
                want = None
            got = read_get(c)
            if got != want:
                bad.append((i, got, want))
    finally:
        c.close()
    return bad


def multi_at(addr, k2, k1):
    """Pipelined sets of k2 (a key addr is the second owner of) and k1 (one
    it is the primary of), then one get of both: ROUNDS times; returns the
    rounds whose get missed either write."""
    bad = []
    c = lg.Conn(addr, 10.0)
    try:
        for i in range(ROUNDS):
            v = b"m-%d" % i
            c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(v), v)
                            for k in (k2, k1)) + b"get %s %s\r\n" % (k1.encode(), k2.encode()))
            acks = [c.readline(), c.readline()]
            vals, err = {}, None
            while True:
                line = c.readline()
                if line == b"END":
                    break
                p = line.split()
                if p[:1] != [b"VALUE"]:
                    err = line
                    break
                vals[p[1].decode()] = c.readn(int(p[3]))
            if acks != [b"STORED", b"STORED"] or vals != {k1: v, k2: v}:
                bad.append((i, acks, vals, err))
    finally:
        c.close()
    return bad


def declared_at(addr, key, other):
    """A declared connection (`epoch 1`, as a relaying node's upstream or a
    smart client) at the key's second owner pipelines `set key` (MOVED to
    the primary) + `get key` + `get other` (also owned here): the lines
    answered."""
    c = lg.Conn(addr, 5.0)
    try:
        c.declare(1)
        c.send(b"set %s 0 0 2\r\nv1\r\nget %s\r\nget %s\r\n" % (
            key.encode(), key.encode(), other.encode()))
        set_line = c.readline()
        get_line = c.readline()
        try:
            other = read_get(c)
        except lg.ProtoError as e:
            other = "error: %s" % e
        return set_line, get_line, other
    finally:
        c.close()


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2, mem=64)
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["ryw-%d" % i for i in range(100)]
        owners = lg.locate(e1, keys, 2)
        for role in ("primary", "second owner", "non-owner"):
            bad = []
            for nid in cl.nodes:
                key = next(k for k in keys
                           if (role == "primary" and owners[k][0] == nid)
                           or (role == "second owner" and owners[k][1] == nid)
                           or (role == "non-owner" and nid not in owners[k]))
                bad += [(nid, key) + b for b in rounds_at(cl.nodes[nid].addr, key,
                                                            role[:3] + nid)]
            t.ok(not bad, "pipelined write then read on one connection at each node as the "
                 "key's %s: %d rounds each, %d reads missed the write" % (role, ROUNDS, len(bad)),
                 bad[:5])
        for role in ("second owner", "non-owner"):
            bad = []
            for nid in cl.nodes:
                key = next(k for k in keys
                           if (role == "second owner" and owners[k][1] == nid)
                           or (role == "non-owner" and nid not in owners[k]))
                bad += [(nid, key) + b for b in noreply_at(cl.nodes[nid].addr, key,
                                                             "nr" + role[:3] + nid)]
            t.ok(not bad, "pipelined noreply write then read on one connection at each node "
                 "as the key's %s: %d rounds each, %d reads missed the write"
                 % (role, ROUNDS, len(bad)), bad[:5])
        bad = []
        for nid in cl.nodes:
            k2 = next(k for k in keys if owners[k][1] == nid)
            k1 = next(k for k in keys if owners[k][0] == nid)
            bad += [(nid,) + b for b in multi_at(cl.nodes[nid].addr, k2, k1)]
        t.ok(not bad, "sets of a key the node is second owner of and of one it is primary of, "
             "then a get of both, pipelined: %d rounds per node, %d missed a write"
             % (ROUNDS, len(bad)), bad[:5])
        # A relaying node sends a write to the node its own view names and
        # pipelines the client's get behind it; when this node's view names
        # another acting primary (the relaying node saw the primary
        # recovering a moment longer: the nemesis's one ryw, 0.5 s after a
        # repair), the write is MOVED there and the get must not be read
        # here before it: MOVED too, and only that key's.
        got = []
        for nid in cl.nodes:
            mine = [k for k in keys if owners[k][1] == nid]
            got.append((nid,) + declared_at(cl.nodes[nid].addr, mine[0], mine[1]))
        t.ok(all(g[1].startswith(b"SERVER_ERROR MOVED") and g[2] == g[1]
                 and not isinstance(g[3], str) for g in got),
             "declared connection at the second owner: a get pipelined behind its MOVED set "
             "of the key is MOVED the same way; a get of another key is served", got)
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 150, "read your writes")


if __name__ == "__main__":
    main()
