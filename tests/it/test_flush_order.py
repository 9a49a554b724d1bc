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
  never reached d (not yet a member), which served what it imported.
- Skew, R=1, a, b, c with b's clock 3 s behind (RC_TEST_CLOCK_SHIFT):
  a flush_all through a, held open by c stopped; sets at b after b was
  asked survive it, sets before do not. Before, the floor was the
  members' largest counter (a's clock), above every CAS b minted in the
  3 s after: gomemcache's own test (a flush_all it does not wait for,
  then add) saw its add undone by the flush. Then a flush through b,
  the node behind: everything acknowledged before it is still removed
  at a and c, whose counters are ahead of b's proposal (flush_skewed)."""
import os
import signal
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
SKEW_S = 3
FLUSH_LEAD_S = 0.1  # FLUSH_LEAD_MS of server/flush.c
SKEW_KEYS = 50


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


def skewed(t):
    cl = lg.Cluster(replicas=1)
    try:
        cl.add("a")
        os.environ["RC_TEST_CLOCK_SHIFT"] = str(-SKEW_S)
        try:
            cl.add("b")
        finally:
            del os.environ["RC_TEST_CLOCK_SHIFT"]
        cl.add("c")
        rc, out, err = cl.ctl("init", "--members", cl.write_members(["a", "b", "c"]))
        conv = cl.converged(1, ["a", "b", "c"])
        if not t.ok(rc == 0 and all(v == (1, 0) for v in conv.values()),
                    "a, b (clock %d s behind), c: ringctl init, every node at epoch 1"
                    % SKEW_S, (rc, lg.tail(err), conv)):
            return
        skewed_flushes(t, cl)
    finally:
        lg.close_cluster(t, cl)


def skewed_flushes(t, cl):
    a, b, c = (cl.nodes[i] for i in ("a", "b", "c"))
    cand = ["fs-%d" % i for i in range(SKEW_KEYS * 12)]
    owners = lg.locate(cl.store_active(), cand, 1)
    at = {nid: [k for k in cand if owners[k][0] == nid] for nid in ("a", "b", "c")}
    before, after = at["b"][:SKEW_KEYS], at["b"][SKEW_KEYS:2 * SKEW_KEYS]
    # Set at a too, last: a's CAS counter is then its clock's now, 3 s
    # ahead of every CAS b mints.
    for nid, keys in (("b", before), ("a", at["a"][:SKEW_KEYS])):
        r = co.pipeline(cl.nodes[nid].addr, [co.set_req(k, b"before") for k in keys])
        t.ok(all(x == b"STORED" for x in r), "%d keys set at %s" % (len(keys), nid), r[:3])
    asked = int(lg.node_stats(b.addr)["flush_asked"])
    f = lg.Conn(a.addr, 10.0)
    try:
        # c stopped: a waits for its answer, so b has been asked and has
        # not had the floor yet while the second sets run.
        c.proc.send_signal(signal.SIGSTOP)
        try:
            f.send(b"flush_all\r\n")
            seen = lg.wait_for(lambda: int(lg.node_stats(b.addr)["flush_asked"]) > asked, 5.0)
            r = co.pipeline(b.addr, [co.set_req(k, b"after") for k in after])
        finally:
            c.proc.send_signal(signal.SIGCONT)
        fr = f.readline()
        t_ok = time.monotonic()
    finally:
        f.close()
    t.ok(seen and fr == b"OK" and all(x == b"STORED" for x in r),
         "flush_all through a while c is stopped: b asked, %d sets at b meanwhile, then OK"
         % len(after), (seen, fr, r[:3]))
    ep = cl.store_epoch()
    held = lg.read_keys(b.addr, before + after, epoch=ep)
    held_a = lg.read_keys(a.addr, at["a"][:SKEW_KEYS], epoch=ep)
    t.ok(not [k for k in before if k in held] and not held_a,
         "every set acknowledged before the flush is gone (%d of %d at b, %d of %d at a held)"
         % (len([k for k in before if k in held]), len(before), len(held_a), SKEW_KEYS))
    lost = [k for k in after if held.get(k) != b"after"]
    t.ok(not lost, "every set b took after it was asked survives, though b's clock is %d s "
         "behind the flush's (%d of %d lost)" % (SKEW_S, len(lost), len(after)), lost[:3])
    t.ok(lg.node_stats(a.addr)["flush_skewed"] == "0",
         "a's proposal was above every member's counter (flush_skewed 0)")

    # Through b, the node behind: a's and c's counters are ahead of its
    # proposal, so the floor is theirs, and what they hold still goes.
    # First the first flush's lead (100 ms, server/flush.c) must pass:
    # until then every member's counter is that flush's proposal plus a
    # few, b's too, and none is ahead of b's.
    lg.wait_for(lambda: time.monotonic() > t_ok + 2 * FLUSH_LEAD_S, 5.0, 0.05)
    mine = at["a"][:SKEW_KEYS] + at["c"][:SKEW_KEYS]
    for nid in ("a", "c"):
        r = co.pipeline(cl.nodes[nid].addr,
                        [co.set_req(k, b"x") for k in mine if owners[k][0] == nid])
        t.ok(all(x == b"STORED" for x in r), "keys set at %s" % nid, r[:3])
    f = lg.Conn(b.addr, 10.0)
    try:
        fr = f.simple("flush_all")
    finally:
        f.close()
    held = dict(lg.read_keys(a.addr, at["a"][:SKEW_KEYS], epoch=ep))
    held.update(lg.read_keys(c.addr, at["c"][:SKEW_KEYS], epoch=ep))
    t.ok(fr == b"OK" and not held, "flush_all through b: OK, and a and c, ahead of b's "
         "clock, hold none of the %d keys set before (%d held)" % (len(mine), len(held)),
         (fr, sorted(held)[:3]))
    t.ok(lg.node_stats(b.addr)["flush_skewed"] == "1",
         "b counted its floor overtaken by a member's counter (flush_skewed 1)")


def main():
    two = dict(ids=("a", "b"), node_args=("-t", "4"))
    lg.tap_main([co.on_cluster(order, replicas=1, **two), co.on_cluster(identical, **two),
                 co.on_cluster(delayed_join), skewed], 200,
                "flush_all order and identical replicas")


if __name__ == "__main__":
    main()
