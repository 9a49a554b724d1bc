"""A deep pipeline of replicated writes on one connection (issue 23).

Three nodes, R=2, one declared connection to a, every key's primary a
(half of them replicated to b, half to c):

1. Rounds of pipelined sets, incrs and deletes (400 commands a send, the
   replies read after each send): every reply is the one its own command
   should get, in request order (a held reply may never be passed by a
   later one, nor be answered for another command), and afterwards every
   key reads the same at its replica, asked directly, as the client was
   told (value, counter, deleted).
2. The same shape, replies read by a second thread, and c killed with -9
   right after a send a third of the way in (2,000 writes unanswered):
   every reply is still its own command's, in
   order; every write replicated to b is acknowledged, and its value is at
   b; of the writes replicated to c, the acknowledged ones are a prefix
   (c acknowledged them in order before it died: nothing is acknowledged
   without c's ack once c is gone), the rest answer SERVER_ERROR, and
   some of each happened (the kill landed mid-pipeline).
"""
import os
import re
import signal
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

PER_SEND = 400
ROUNDS = 12
NKEYS = 600  # per replica node (b, c)


def pick_keys(e1, n):
    """{replica id: [n (value key, counter key, flip key)]}, every key's
    owners (a, that replica)."""
    cand = ["rp%s-%d" % (r, i) for r in "vnd" for i in range(n * 10)]
    owners = lg.locate(e1, cand, 2)
    out = {}
    for rep in ("b", "c"):
        role = [[k for k in cand if k.startswith("rp" + r) and tuple(owners[k]) == ("a", rep)][:n]
                for r in "vnd"]
        out[rep] = list(zip(*role))
    return out


def commands(keys, rnd):
    """One round's (command bytes, expected reply, key, replica, model
    update) for every key triple: a set of its value, an incr of its
    counter, and a set or delete of its flip key (deleted in odd rounds)."""
    out = {"b": [], "c": []}
    for rep in ("b", "c"):
        for kv, kn, kd in keys[rep]:
            v = b"%s:%d" % (kv.encode(), rnd)
            out[rep].append((b"set %s 0 0 %d\r\n%s\r\n" % (kv.encode(), len(v), v), b"STORED",
                             kv, rep, v))
            out[rep].append((b"incr %s 1\r\n" % kn.encode(), b"%d" % (rnd + 1), kn, rep,
                             b"%d" % (rnd + 1)))
            if rnd % 2 == 0:
                out[rep].append((b"set %s 0 0 1\r\nx\r\n" % kd.encode(), b"STORED", kd, rep,
                                 b"x"))
            else:
                out[rep].append((b"delete %s\r\n" % kd.encode(), b"DELETED", kd, rep, None))
    # Interleave b's and c's commands: consecutive replies wait on
    # different replicas.
    mixed = []
    for x, y in zip(out["b"], out["c"]):
        mixed += [x, y]
    return mixed


def seed_counters(c, keys):
    data = b"".join(b"set %s 0 0 1\r\n0\r\n" % kn.encode()
                    for rep in keys for _, kn, _ in keys[rep])
    c.send(data)
    bad = [line for line in (c.readline() for _ in range(sum(map(len, keys.values()))))
           if line != b"STORED"]
    return bad


def check_replica(t, cl, model, rep, what):
    """Every key of model replicated to rep reads at rep (directly) as the
    client was told."""
    ks = [k for k, (r, _) in model.items() if r == rep]
    got = lg.read_keys(cl.nodes[rep].addr, ks, 1, batch=200)
    diff = [(k, model[k][1], got.get(k)) for k in ks if got.get(k) != model[k][1]]
    t.ok(not diff, "%s: %d keys read at replica %s as acknowledged (%d differ)"
         % (what, len(ks), rep, len(diff)), diff[:5])


def clean_rounds(t, cl, keys):
    c = lg.Conn(cl.nodes["a"].addr, 30.0)
    model, wrong = {}, []
    try:
        c.declare(1)
        t.ok(not seed_counters(c, keys), "counters seeded")
        for rep in keys:
            for _, kn, _ in keys[rep]:
                model[kn] = (rep, b"0")
        for rnd in range(ROUNDS):
            cmds = commands(keys, rnd)
            for j in range(0, len(cmds), PER_SEND):
                part = cmds[j:j + PER_SEND]
                c.send(b"".join(x[0] for x in part))
                for cmd, want, key, rep, val in part:
                    line = c.readline()
                    if line != want:
                        wrong.append((cmd[:40], want, line))
                    else:
                        model[key] = (rep, val)
    finally:
        c.close()
    n = ROUNDS * 3 * 2 * NKEYS
    t.ok(not wrong, "%d pipelined sets/incrs/deletes at R=2 on one connection: every reply "
         "its own command's, in order (%d not)" % (n, len(wrong)), wrong[:5])
    for rep in ("b", "c"):
        check_replica(t, cl, model, rep, "no fault")


def killed_replica(t, cl, keys):
    cmds = []
    for rnd in range(ROUNDS, ROUNDS + 8):
        cmds += commands(keys, rnd)
    replies = []
    c = lg.Conn(cl.nodes["a"].addr, 30.0)
    c.declare(1)
    err = []

    def reader():
        try:
            for _ in cmds:
                replies.append(c.readline())
        except Exception as e:  # noqa: BLE001 (reported below)
            err.append(repr(e))

    th = threading.Thread(target=reader)
    th.start()
    killed_at = None
    try:
        for j in range(0, len(cmds), PER_SEND):
            # At most 4 sends ahead of the replies: the pipeline stays
            # deep but the kill lands in its middle.
            lg.wait_for(lambda: len(replies) >= j - 4 * PER_SEND or err or not th.is_alive(),
                        20)
            c.send(b"".join(x[0] for x in cmds[j:j + PER_SEND]))
            if killed_at is None and j >= len(cmds) // 3:
                # Right after a send: its writes are in flight, some of
                # their images on the way to c or applied there unacked.
                killed_at = len(replies)
                cl.nodes["c"].stop(signal.SIGKILL)
        th.join(60)
    finally:
        c.close()
    t.ok(not err and len(replies) == len(cmds) and killed_at is not None,
         "%d pipelined writes, c killed -9 after %s replies: every reply read"
         % (len(cmds), killed_at), (err, len(replies)))
    bad_b, bad_c, acked_c, failed_c, late = [], [], 0, 0, []
    model = {}
    for i, ((cmd, want, key, rep, val), line) in enumerate(zip(cmds, replies)):
        if rep == "b":
            if line != want:
                bad_b.append((i, cmd[:40], want, line))
            else:
                model[key] = (rep, val)
        elif line == want:
            acked_c += 1
            if failed_c:
                late.append((i, cmd[:40], line))
        elif re.match(rb"SERVER_ERROR (replica unavailable|UNAVAILABLE)", line):
            failed_c += 1
        else:
            bad_c.append((i, cmd[:40], want, line))
    t.ok(not bad_b, "writes replicated to b (alive): every reply its own command's success, "
         "in order (%d not)" % len(bad_b), bad_b[:5])
    t.ok(not bad_c, "writes replicated to c: each its own success or a SERVER_ERROR "
         "(%d other)" % len(bad_c), bad_c[:5])
    t.ok(not late and acked_c > 0 and failed_c > 0,
         "c's acknowledged writes are a prefix (%d acknowledged, then %d failed, %d "
         "acknowledged after a failure)" % (acked_c, failed_c, len(late)), late[:5])
    check_replica(t, cl, model, "b", "c killed mid-pipeline")


def pipeline(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2, mem=64)
    try:
        if not ok:
            return
        keys = pick_keys(cl.store_active(), NKEYS)
        if not t.ok(all(len(v) == NKEYS for v in keys.values()),
                    "%d keys of a replicated to b, %d to c" % (len(keys["b"]), len(keys["c"]))):
            return
        clean_rounds(t, cl, keys)
        killed_replica(t, cl, keys)
    finally:
        cl.close()
        if t.failed == 0:
            cl.cleanup_dir()
        else:
            t.diag("logs kept in %s" % cl.dir)


def main():
    t = lg.Tap()
    lg.watchdog(170)
    why = lg.supports_cluster()
    if why:
        t.skip("replication pipeline", why)
    else:
        lg.run_tap(t, pipeline)
    t.done()


if __name__ == "__main__":
    main()
