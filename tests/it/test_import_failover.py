"""Write failover never lands on a node that is importing the arc (issue 11,
finding 9). R=2, three nodes, numeric values. `ringctl leave a` copies
slowly (--rate 0.05); while it copies, a is paused (SIGSTOP) until its
peers see it down, and every key whose primary is a and whose second owner
b is being refilled (b purged the arc at PREPARE and imports it from a)
gets `incr 1` through b. Before the fix b took the writes over on its
purged copy: incr answered NOT_FOUND for keys that exist, acknowledged sets
were rolled back by the copy. Now no node takes over a write without the
store's authority: b answers UNAVAILABLE (a is seen down, not declared
failed) or TRYAGAIN for those keys; no reply is NOT_FOUND, and after the
leave every key holds its value plus exactly the increments that were
acknowledged."""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import failover_lib as fl  # noqa: E402

NKEYS = 3000



def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2)
    a = cl.nodes["a"]
    stopped = False
    try:
        if not ok:
            return
        e1 = cl.store_active()
        keys = ["if-%d" % i for i in range(NKEYS)]
        owners1 = lg.locate(e1, keys, 2)
        owners2 = lg.locate(cl.members(["b", "c"], epoch=2), keys, 2)
        bad = []
        for nid in cl.nodes:
            c = lg.Conn(cl.nodes[nid].addr, 10.0)
            mine = [k for k in keys if owners1[k][0] == nid]
            c.send(b"".join(b"set %s 0 0 2\r\n10\r\n" % k.encode() for k in mine))
            bad += [k for k in mine if c.readline() != b"STORED"]
            c.close()
        t.ok(not bad, "%d keys set to 10 on both owners" % NKEYS, bad[:5])
        target = [k for k in keys if list(owners1[k]) == ["a", "b"] and "b" in owners2[k]]
        t.ok(len(target) > 50, "%d keys whose primary is a and whose second owner b "
             "re-imports them" % len(target))
        p = cl.ctl_bg("leave", "a", "--rate", "0.05")
        copying = lg.wait_for(lambda: fl.status_row(cl, "b").get("phase", "").lower()
                              in ("copying", "COPYING".lower()), 30, 0.05)
        t.ok(copying, "leave a is copying", fl.status_row(cl, "b"))
        os.kill(a.pid, signal.SIGSTOP)
        stopped = True

        def b_sees_a_down():
            return "b" in set(fl.status_row(cl, "a").get("seen_down_by", "-").split(","))
        t.ok(lg.wait_for(b_sees_a_down, 10, 0.05), "b sees a down", fl.status_row(cl, "a"))
        c = lg.Conn(cl.nodes["b"].addr, 10.0)
        c.declare(1)
        c.send(b"".join(b"incr %s 1\r\n" % k.encode() for k in target))
        replies = {k: c.readline() for k in target}
        c.close()
        os.kill(a.pid, signal.SIGCONT)
        stopped = False
        acked = {k for k, r in replies.items() if r.isdigit()}
        notfound = [k for k, r in replies.items() if r == b"NOT_FOUND"]
        other = [(k, r) for k, r in replies.items()
                 if not r.isdigit() and r != b"NOT_FOUND"
                 and not r.startswith(b"SERVER_ERROR TRYAGAIN")
                 and not r.startswith(b"SERVER_ERROR UNAVAILABLE owner a is down")]
        t.ok(not notfound and not other,
             "incr through b while a is down and b imports: %d acknowledged, %d TRYAGAIN or "
             "UNAVAILABLE, %d NOT_FOUND, %d other"
             % (len(acked), len(target) - len(acked) - len(other) - len(notfound),
                len(notfound), len(other)), (notfound[:3], other[:3]))
        out, err = p.communicate(timeout=120)
        t.ok(p.returncode == 0 and cl.store_epoch() == 2, "the leave finishes (exit %s)"
             % p.returncode, (lg.tail(out), lg.tail(err)))
        conv = cl.converged(2, ["b", "c"])
        t.ok(all(v == (2, 0) for v in conv.values()), "b and c at EPOCH 2 0", conv)
        have = {nid: lg.read_keys(cl.nodes[nid].addr, [k for k in keys if nid in owners2[k]])
                for nid in ("b", "c")}
        want = {k: b"11" if k in acked else b"10" for k in keys}
        wrong = [(k, nid, have[nid].get(k)) for k in keys for nid in owners2[k]
                 if have[nid].get(k) != want[k]]
        t.ok(not wrong, "after the leave every key holds 10 plus its acknowledged "
             "increments on both owners (%d copies differ)" % len(wrong), wrong[:5])
    finally:
        if stopped:
            os.kill(a.pid, signal.SIGCONT)
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 170, "write failover on an importing node")


if __name__ == "__main__":
    main()
