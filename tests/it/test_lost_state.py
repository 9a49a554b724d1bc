"""A member that lost its state directory is never an owner of data it does
not hold (issue 11, finding 10). R=2, three nodes, keys on both owners;
b is killed, its state directory deleted, and b restarted: it has no
membership. Before the fix its peers' post-images got OK and were dropped
(acknowledged writes missing on one owner), and `ringctl resume` pushed the
active epoch onto it, so it served its ranges empty as a member. Now:

- a write whose replica is b is not acknowledged as STORED: b refuses the
  replica write (no membership) and the client gets SERVER_ERROR replica
  unavailable; every STORED reply is on both owners;
- b serves nothing itself (before, it served as a plain cache at a
  member's address and acknowledged writes that its repair then dropped);
- a flush_all sent to b is refused (no membership), not answered OK while
  the members keep every value (before: OK, and the flushed keys read back
  at their owners, "resurrected" in the nemesis, seed 2708);
- `ringctl resume` refuses to hand b the epoch, naming b and `repair`;
- `ringctl repair b` brings b back: afterwards every key holds, on both of
  its owners, its last acknowledged value (or the value of a later write
  that was refused with "replica unavailable", which stays applied at the
  primary)."""
import os
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

NKEYS = 1500


def value_of(k, gen):
    return ("%s-%d" % (k, gen)).encode()



def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["ls-%d" % i for i in range(NKEYS)]
        owners = lg.locate(e1, keys, 2)
        acked = {}

        def write_all(gen):
            """Every key at its primary; returns the replies by key."""
            out = {}
            for nid in cl.nodes:
                mine = [k for k in keys if owners[k][0] == nid]
                c = lg.Conn(cl.nodes[nid].addr, 10.0)
                try:
                    c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(value_of(k, gen)),
                                                                 value_of(k, gen)) for k in mine))
                    for k in mine:
                        out[k] = c.readline()
                finally:
                    c.close()
            return out

        r = write_all(1)
        t.ok(all(v == b"STORED" for v in r.values()), "%d keys set on both owners" % NKEYS)
        acked.update({k: value_of(k, 1) for k in keys})
        b = cl.nodes["b"]
        b.stop(signal.SIGKILL)
        shutil.rmtree(b.state_dir, ignore_errors=True)
        os.makedirs(b.state_dir, exist_ok=True)
        b.start()
        t.ok(lg.node_epoch(b.addr) == (0, 0), "b restarted without its state: no membership")
        r = write_all(2)
        with_b = [k for k in keys if "b" in owners[k] and owners[k][0] != "b"]
        stored_b = [k for k in with_b if r[k] == b"STORED"]
        # replica unavailable: b refused the post-image; UNAVAILABLE: the
        # heartbeats still saw b down from its kill (refused before it ran).
        t.ok(not stored_b and all(r[k].startswith(b"SERVER_ERROR replica unavailable") or
                                  r[k].startswith(b"SERVER_ERROR UNAVAILABLE owner b is down")
                                  for k in with_b),
             "writes whose replica is the stateless b: none answered STORED (%d of %d), "
             "all 'replica unavailable' or 'UNAVAILABLE'" % (len(stored_b), len(with_b)),
             [(k, r[k]) for k in with_b[:3]])
        c = lg.Conn(b.addr, 10.0)
        try:
            c.send(b"flush_all\r\n")
            fl = c.readline()
        finally:
            c.close()
        t.ok(fl.startswith(b"SERVER_ERROR no membership"),
             "flush_all sent to the stateless b: SERVER_ERROR no membership, not OK", fl)
        at_a = [k for k in keys if owners[k][0] == "a"][:50]
        got = lg.read_keys(cl.nodes["a"].addr, at_a)
        t.ok(all(got.get(k) is not None for k in at_a),
             "and the members still hold what it did not flush (%d of %d read at a)"
             % (sum(got.get(k) is not None for k in at_a), len(at_a)))
        maybe = {}
        at_b = [k for k in keys if owners[k][0] == "b"]
        t.ok(all(r[k].startswith(b"SERVER_ERROR no membership") for k in at_b),
             "writes sent to the stateless b itself are refused, not stored as a plain cache "
             "(%d of %d)" % (sum(r[k].startswith(b"SERVER_ERROR no membership") for k in at_b),
                             len(at_b)), [(k, r[k]) for k in at_b[:3]])
        for k, v in r.items():
            if v == b"STORED":
                acked[k] = value_of(k, 2)
            else:
                # Not acknowledged, yet applied at the primary ("the write
                # stays applied"): either value is right afterwards.
                maybe[k] = value_of(k, 2)
        rc, out, err = cl.ctl("resume")
        t.ok(rc == 1 and "no state" in out + err and "repair b" in out + err,
             "ringctl resume refuses to give b the epoch (exit 1, names repair)",
             (rc, lg.tail(out), lg.tail(err)))
        t.ok(lg.node_epoch(b.addr) == (0, 0), "b still has no membership after resume")
        rc, out, err = cl.ctl("repair", "b")
        t.ok(rc == 0, "ringctl repair b: exit 0", (rc, lg.tail(out), lg.tail(err)))
        ep = cl.store_epoch()
        conv = cl.converged(ep, ["a", "b", "c"], timeout=20.0)
        t.ok(all(v == (ep, 0) for v in conv.values()), "every node at epoch %d" % ep, conv)
        e2 = cl.store_active()
        owners2 = lg.locate(e2, keys, 2)
        have = {nid: lg.read_keys(cl.nodes[nid].addr, [k for k in keys if nid in owners2[k]])
                for nid in cl.nodes}
        bad = [(k, nid) for k in keys for nid in owners2[k]
               if have[nid].get(k) not in (acked[k], maybe.get(k, acked[k]))]
        t.ok(not bad, "after repair every acknowledged value is on both of its owners "
             "(%d copies missing or stale)" % len(bad), bad[:5])
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 170, "a member that lost its state directory")


if __name__ == "__main__":
    main()
