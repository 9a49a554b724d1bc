"""flush_all is one CAS floor for the whole cluster, in order on its
connection (issue 26, findings f23 and f22; docs/guarantees.md
"flush_all").

- f23, two nodes, R=1, -t 4, one plain connection to a, keys owned by b:
  pipelined `flush_all` + `set k` + `get k` keeps the set (a fresh read
  at b finds it), and `set k` + `flush_all` + `get k` misses. Before, the
  flush reached b on another upstream than the relayed set, in either
  order: hundreds of rounds went wrong.
- f22, two nodes, R=2, -t 4: one connection pipelines sets of fresh keys,
  another, to the other node, sends flush_all in the middle; after
  each round both owners hold the same keys (declared connections). Before, the flush and the images
  reached the replica unordered and the owners differed on thousands.
- f17, R=2, a, b, c: `flush_all 6` through a, then d joins at once; 1.5 s
  past the moment no owner serves a pre-flush value. Before, the flush
  never reached d (not yet a member), which served what it imported."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import test_cas_order as co  # noqa: E402

ROUNDS = 300
F22_ROUNDS = 30
F22_KEYS = 400
F17_KEYS = 1500
F17_DELAY = 6


def read_until_end(c):
    """The lines of one get's reply, END excluded."""
    out = []
    while True:
        line = c.readline()
        if line == b"END" or line.startswith(b"SERVER_ERROR") or line.startswith(b"ERROR"):
            return out if line == b"END" else out + [line]
        out.append(line)
        if line.startswith(b"VALUE "):
            c.readn(int(line.split()[3]))


def order(t, cl):
    a, b = cl.nodes["a"], cl.nodes["b"]
    cand = ["fo-%d" % i for i in range(ROUNDS * 5)]
    owners = lg.locate(cl.store_active(), cand, 1)
    keys = [k for k in cand if owners[k][0] == "b"][:ROUNDS]
    c = lg.Conn(a.addr, 10.0)
    at_b = lg.Conn(b.addr, 10.0)
    at_b.declare(cl.store_epoch())
    lost, kept, bad = [], [], []
    try:
        for i, k in enumerate(keys):
            v = b"v%d" % i
            c.send(b"flush_all\r\nset %s 0 0 %d\r\n%s\r\nget %s\r\n"
                   % (k.encode(), len(v), v, k.encode()))
            r = [c.readline(), c.readline()] + read_until_end(c)
            if r[:3] != [b"OK", b"STORED", b"VALUE %s 0 %d" % (k.encode(), len(v))]:
                bad.append((k, r))
            vals, err = at_b.get_multi([k])
            if vals is None or vals.get(k) != v:
                lost.append((k, vals, err))
            c.send(b"set %s 0 0 %d\r\n%s\r\nflush_all\r\nget %s\r\n"
                   % (k.encode(), len(v), v, k.encode()))
            r = [c.readline(), c.readline()] + read_until_end(c)
            if r[:2] != [b"STORED", b"OK"]:
                bad.append((k, r))
            elif r[2:]:
                kept.append((k, r[2:]))
    finally:
        c.close()
        at_b.close()
    t.ok(not bad, "%d rounds of pipelined flush_all and a relayed set: every reply as "
         "expected" % len(keys), bad[:3])
    t.ok(not lost, "flush_all + set + get: the set survives the flush sent before it "
         "(%d of %d gone)" % (len(lost), len(keys)), lost[:3])
    t.ok(not kept, "set + flush_all + get: the flush removes the set sent before it "
         "(%d of %d read back)" % (len(kept), len(keys)), kept[:3])


def identical(t, cl):
    a, b = cl.nodes["a"], cl.nodes["b"]
    ep = cl.store_epoch()
    keys_all, wrong, diff, held = [], [], [], 0
    for rnd in range(F22_ROUNDS):
        keys = ["fi-%d-%d" % (rnd, i) for i in range(F22_KEYS)]
        keys_all += keys
        val = b"%d" % rnd * 4000  # large: the sets take a while to apply and replicate
        reqs = [b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(val), val) for k in keys]
        w = lg.Conn(a.addr, 10.0)
        f = lg.Conn(b.addr, 10.0)
        try:
            # The flush goes while the sets are being applied and
            # replicated: some replies read, more in the pipeline,
            # at different points from round to round.
            n = (rnd * 37) % (F22_KEYS // 4)
            w.send(b"".join(reqs[:F22_KEYS // 2]))
            r = [w.readline() for _ in reqs[:n]]
            f.send(b"flush_all\r\n")
            w.send(b"".join(reqs[F22_KEYS // 2:]))
            r += [w.readline() for _ in reqs[n:]]
            fr = f.readline()
        finally:
            w.close()
            f.close()
        if fr != b"OK" or any(x != b"STORED" for x in r):
            wrong.append((rnd, fr, [x for x in r if x != b"STORED"][:3]))
        # Quiesced (every reply is in): compare the owners before the next
        # round's flush removes these keys.
        ha = lg.read_keys(a.addr, keys, epoch=ep)
        hb = lg.read_keys(b.addr, keys, epoch=ep)
        diff += [k for k in keys if ha.get(k) != hb.get(k)]
        held += len(ha)
    t.ok(not wrong, "%d rounds of %d pipelined sets with a flush_all on another connection: "
         "all STORED, flush OK" % (F22_ROUNDS, F22_KEYS), wrong[:3])
    t.ok(not diff, "after each round both owners hold the same keys (%d of %d differ; %d "
         "survived their round's flush)" % (len(diff), len(keys_all), held), diff[:5])


def delayed_join(t, cl):
    """f17: a delayed flush_all reaches a node that joins before its moment
    (it comes with the handoff)."""
    keys = ["fd-%d" % i for i in range(F17_KEYS)]
    owners = lg.locate(cl.store_active(), keys, 2)
    for nid in ("a", "b", "c"):
        mine = [k for k in keys if owners[k][0] == nid]
        r = co.pipeline(cl.nodes[nid].addr, [co.set_req(k, b"old") for k in mine])
        t.ok(all(x == b"STORED" for x in r), "%d keys set at %s" % (len(mine), nid), r[:3])
    d = cl.add("d")
    c = lg.Conn(cl.nodes["a"].addr, 10.0)
    try:
        r = c.simple("flush_all %d" % F17_DELAY)
    finally:
        c.close()
    # The moment is the node's clock in whole seconds plus the delay.
    moment = int(time.time()) + F17_DELAY
    t.ok(r == b"OK", "flush_all %d through a: OK" % F17_DELAY, r)
    rc, out, err = cl.ctl("join", "d", d.addr_s)
    t.ok(rc == 0, "ringctl join d right after: exit 0", (rc, lg.tail(out), lg.tail(err)))
    t.ok(time.time() < moment - 1, "the join finished before the moment")
    lg.wait_for(lambda: time.time() >= moment + 1.5, F17_DELAY + 5, 0.1)
    ep = cl.store_epoch()
    owners = lg.locate(cl.store_active(), keys, 2)
    served = []
    for nid in cl.nodes:
        mine = [k for k in keys if nid in owners[k]]
        served += [(k, nid) for k in lg.read_keys(cl.nodes[nid].addr, mine, epoch=ep)]
    t.ok(not served, "1.5 s past the moment no owner serves a pre-flush value (%d of %d "
         "copies)" % (len(served), 2 * len(keys)), served[:5])


def main():
    two = dict(ids=("a", "b"), node_args=("-t", "4"))
    lg.tap_main([co.on_cluster(order, replicas=1, **two), co.on_cluster(identical, **two),
                 co.on_cluster(delayed_join)], 170,
                "flush_all order and identical replicas")


if __name__ == "__main__":
    main()
