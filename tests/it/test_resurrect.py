"""A delete is never undone by a late post-image (fault finding 6).

R=2 replication is primary-forwarded over the *worker's* upstream, so a
set's post-image and the following delete's tombstone, made on two
workers of the key's primary, travel on two connections and can arrive at
the replica in the other order: the replica deleted its copy, then the
late post-image re-created the key, and a delete that was acknowledged
left a value the replica serves (the primary misses). Here, on a 3-node
R=2 cluster with 4 workers per node, two plain connections to each key's
primary (accepted round-robin, so on different workers) pipeline `set k`
on one and `delete k` on the other for each of KEYS fresh keys (which
connection sets alternates), and every reply is awaited: each write's
reply is held until its replica acknowledged, so then every image has
been applied. Each key is then read at both owners as a declared client
(`epoch 1`: an owner serves its own copy): the owners must agree, and a
key whose delete answered DELETED (the delete ran after the set, so it
is the key's last write) must be absent at both."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

KEYS = 2000
BATCH = 100      # keys per pipelined burst on each connection pair


def read_values(addr, keys):
    """{key: value} of the keys present at addr, read as a declared client
    (its local copies); an error line raises."""
    c = lg.Conn(addr, 10.0)
    out = {}
    try:
        c.declare(1)
        for i in range(0, len(keys), BATCH):
            vals, err = c.get_multi(keys[i:i + BATCH])
            if err is not None:
                raise lg.ProtoError("get at %s:%d: %r" % (addr + (err,)))
            out.update(vals)
    finally:
        c.close()
    return out


def race(addr, keys):
    """Two connections to addr; per burst of keys, sets on one and deletes
    on the other sent at once, then every reply read. Returns
    ({key: delete reply}, [unexpected replies])."""
    a, b = lg.Conn(addr, 20.0), lg.Conn(addr, 20.0)
    last, bad = {}, []
    try:
        for i in range(0, len(keys), BATCH):
            burst = keys[i:i + BATCH]
            sets = {True: [], False: []}
            dels = {True: [], False: []}
            for j, k in enumerate(burst):
                # Alternate which connection sets: both workers play both parts.
                on_a = j % 2 == 0
                v = b"v-" + k.encode()
                sets[on_a].append(b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(v), v))
                dels[not on_a].append(b"delete %s\r\n" % k.encode())
            a.send(_interleave(burst, True, sets, dels))
            b.send(_interleave(burst, False, sets, dels))
            for conn, is_a in ((a, True), (b, False)):
                for j, k in enumerate(burst):
                    if (j % 2 == 0) != is_a:
                        line = conn.readline()      # this connection's delete
                        if line not in (b"DELETED", b"NOT_FOUND"):
                            bad.append((k, "delete", line))
                        last[k] = line
                    else:
                        line = conn.readline()
                        if line != b"STORED":
                            bad.append((k, "set", line))
    finally:
        a.close()
        b.close()
    return last, bad


def _interleave(burst, is_a, sets, dels):
    """The requests of one connection, in key order: its sets and deletes."""
    si = di = 0
    out = []
    for j in range(len(burst)):
        if (j % 2 == 0) == is_a:
            out.append(sets[is_a][si])
            si += 1
        else:
            out.append(dels[is_a][di])
            di += 1
    return b"".join(out)


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2, mem=64,
                              node_args=["-t", "4"])
    try:
        if not ok:
            return
        keys = ["res-%d" % i for i in range(KEYS)]
        owners = lg.locate(cl.store_active(), keys, 2)
        last, bad = {}, []
        for nid in cl.nodes:
            mine = [k for k in keys if owners[k][0] == nid]
            l, b = race(cl.nodes[nid].addr, mine)
            last.update(l)
            bad += b
        t.ok(not bad, "%d keys: set and delete of each key on two connections to its primary "
             "(two workers): every reply STORED, DELETED or NOT_FOUND" % KEYS, bad[:5])
        n_del = sum(1 for v in last.values() if v == b"DELETED")
        t.diag("the delete ran last for %d keys, the set for %d" % (n_del, len(keys) - n_del))

        held = {nid: read_values(n.addr, [k for k in keys if nid in owners[k]])
                for nid, n in cl.nodes.items()}
        differ, resurrected, lost = [], [], []
        for k in keys:
            p, r = owners[k][0], owners[k][1]
            vp, vr = held[p].get(k), held[r].get(k)
            if vp != vr:
                differ.append((k, p, vp, r, vr))
            if last.get(k) == b"DELETED" and (vp is not None or vr is not None):
                resurrected.append((k, p, vp, r, vr))
            if last.get(k) == b"NOT_FOUND" and vp is None:
                lost.append((k, p))
        t.ok(not differ, "with everything acknowledged both owners of each key agree: "
             "%d of %d keys differ" % (len(differ), KEYS), differ[:5])
        t.ok(not resurrected, "no key whose last write was an acknowledged delete is present "
             "at an owner: %d resurrected" % len(resurrected), resurrected[:5])
        t.ok(not lost, "a key whose set ran last is at its primary: %d missing" % len(lost),
             lost[:5])
    finally:
        cl.close()
        if t.failed == 0:
            cl.cleanup_dir()
        else:
            t.diag("logs kept in %s" % cl.dir)


def main():
    t = lg.Tap()
    lg.watchdog(150)
    why = lg.supports_cluster()
    if why:
        t.skip("late post-images", why)
    else:
        lg.run_tap(t, scenario)
    t.done()


if __name__ == "__main__":
    main()
