"""No split brain across a network partition (issue 11, finding 4).

A 3-node R=2 cluster, each node in its own network namespace
(tests/it/netns.py), `ringctl watch` running with its defaults as
deploy/local-cluster.sh starts it, the test's clients in the client
namespace. Load at every node X, all values unique (tests/nemesis/
checker.py History: per-key sequence numbers, real-time order):

  dw-X  declared connection (`epoch 1`) at X: set/delete of keys X owns,
        each followed by a get. A declared write is served only by the
        node that acts as the key's primary (else MOVED): STORED here means
        X acknowledged it as acting primary.
  pw-X  plain connection at X: set/delete of any key (X relays)
  pr-X  plain connection at X: gets of any key

Then node a is partitioned for 6 s ("peers": from b and c only, clients
still reach it; then, on a fresh cluster, "all": from everyone), healed;
the writers stop at the heal, the readers go on for 3 s. The test waits
(bounded) for every node to be up, at no pending epoch, phase NONE, not
recovering, reads every key at every owner of the store's membership and
requires: 0 acknowledged writes lost, 0 stale reads (a read begun after an
acknowledgement returning an older value), 0 resurrected deletes, no node
recovering or pending, and no split brain: no key that two different
nodes both acknowledged writes for as acting primary during the partition
with one of those nodes' last acknowledged value missing afterwards (the
final value at an owner older than it, or absent)."""
import os
import random
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "nemesis"))
import loadgen as lg  # noqa: E402
import netns  # noqa: E402
import checker as ck  # noqa: E402

IDS = ("a", "b", "c")
NKEYS = 120
SIZE = 40
PART_SECS = 6.0
AFTER_HEAL_READS = 3.0
RECOVER_TIMEOUT = 75.0        # watch: --down-after 10 s per node, then repair


def outcome(line):
    if line in (b"STORED", b"DELETED", b"NOT_FOUND"):
        return "ok"
    if (line.startswith(b"SERVER_ERROR TRYAGAIN") or line.startswith(b"SERVER_ERROR MOVED")
            or line.startswith(b"SERVER_ERROR no membership") or line == b"NOT_STORED"):
        return "fail"
    return "unknown"


class Worker:
    """One connection to one node, reopened after an error (a new session)."""

    def __init__(self, h, name, addr, declare=None):
        self.h = h
        self.name = name
        self.addr = addr
        self.declare = declare
        self.c = None
        self.gen = 0
        self.nid = name.split("-")[1]

    def session(self):
        return "%s/%d" % (self.name, self.gen)

    def conn(self):
        if self.c is None:
            self.gen += 1
            c = lg.Conn(self.addr, 2.5)
            if self.declare:
                c.declare(self.declare)
            self.c = c
        return self.c

    def drop(self):
        if self.c is not None:
            self.c.close()
            self.c = None

    def write(self, k, delete):
        s = self.h.seq(k)
        if delete:
            req = b"delete %s\r\n" % k.encode()
        else:
            v = ck.reg_value(k, s, SIZE)
            req = b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(v), v)
        t0 = time.monotonic()
        sent = False
        try:
            c = self.conn()
            sess = self.session()
            sent = True
            c.send(req)
            line = c.readline()
            o, why = outcome(line), line.decode(errors="replace")
        except (OSError, ConnectionError, lg.ProtoError) as e:
            sess = self.session()
            self.drop()
            o, why = ("unknown" if sent else "fail"), str(e)
        return self.h.add(sess, self.nid, k, "delete" if delete else "set", s, t0,
                          time.monotonic(), o, None if o == "ok" else why)

    def get(self, k):
        t0 = time.monotonic()
        try:
            c = self.conn()
            sess = self.session()
            c.send(b"get %s\r\n" % k.encode())
            line = c.readline()
            val = None
            if line.startswith(b"VALUE "):
                val = c.readn(int(line.split()[3]))
                line = c.readline()
            if line != b"END":
                return self.h.add(sess, self.nid, k, "get", None, t0, time.monotonic(), "fail",
                                  line.decode(errors="replace"))
            return self.h.add(sess, self.nid, k, "get",
                              ck.reg_seq(k, val) if val is not None else None, t0,
                              time.monotonic(), "ok")
        except (OSError, ConnectionError, lg.ProtoError) as e:
            sess = self.session()
            self.drop()
            return self.h.add(sess, self.nid, k, "get", None, t0, time.monotonic(), "fail",
                              str(e))


def healthy(cl):
    """None when the store has nothing pending and every member is up, at
    no pending epoch, phase NONE, flags -; else why not."""
    if cl.store_pending():
        return "store pending"
    st = cl.status()
    if st["rc"] != 0:
        return "ringctl status exit %d: %s" % (st["rc"], lg.tail(st["err"], 200))
    ids = [i for i, _ in lg.parse_members(cl.store_active())["nodes"]]
    bad = []
    for i in ids:
        row = st["nodes"].get(i)
        if row is None:
            bad.append("%s not in status" % i)
        elif (row.get("state") != "up" or row.get("pending") != "0"
              or row.get("phase") != "NONE" or row.get("flags") != "-"):
            bad.append("%s: %s" % (i, " ".join("%s=%s" % (k, row.get(k)) for k in
                                              ("state", "pending", "phase", "flags"))))
    return "; ".join(bad) or None


def split_brain(h, t_from, t_to):
    """Keys that two different nodes acknowledged declared writes for (each
    as the key's acting primary) between t_from and t_to, and those of them
    for which one such node's last acknowledged write is missing from the
    final value at some owner. -> (keys, [(key, node, its last write,
    owner, final value)])"""
    acts = {}
    for op in h.ops:
        if (op.kind in ("set", "delete") and op.outcome == "ok"
                and op.session.startswith("dw-") and t_from <= op.invoke <= t_to):
            last = acts.setdefault(op.key, {}).get(op.node)
            if last is None or op.value > last.value:
                acts[op.key][op.node] = op
    keys = {k: v for k, v in acts.items() if len(v) >= 2}
    writes = {}
    for op in h.ops:
        if op.kind in ("set", "delete"):
            writes.setdefault(op.key, {})[op.value] = op
    bad = []
    for key, node, value in h.final:
        if key not in keys:
            continue
        ix = ck._KeyIndex(writes[key])
        for who, w in sorted(keys[key].items()):
            if value is None:
                missing = w.kind == "set" and not ix.delete_after(w, float("inf"))
            else:
                s = ix.writes.get(value)
                if s is None:
                    missing = True
                elif s.value >= w.value:
                    missing = False
                else:
                    missing = w.invoke > (s.complete if s.outcome == "ok" else float("inf"))
            if missing:
                bad.append((key, who, w, node, value))
    return keys, bad


def final_read(cl, h, keys):
    members = cl.store_active()
    m = lg.parse_members(members)
    owners = lg.locate(members, keys)
    errs = []
    for nid, a in m["nodes"]:
        mine = [k for k in keys if nid in owners[k]]
        try:
            vals = lg.read_keys(lg.parse_addr(a), mine, epoch=m["epoch"], batch=40)
        except (OSError, ConnectionError, lg.ProtoError) as e:
            errs.append("%s: %s" % (nid, e))
            continue
        for k in mine:
            v = vals.get(k)
            h.add_final(k, nid, ck.reg_seq(k, v) if v is not None else None)
    return m["epoch"], errs


def scenario(t, mode):
    label = "partition of a from %s" % ("its peers only" if mode == "peers" else "everyone")
    try:
        lab = netns.NetLab(list(IDS)).setup()
    except netns.Unavailable as e:
        t.skip(label, str(e))
        return
    cl = watch = None
    stop_w, stop_r = threading.Event(), threading.Event()
    threads = []
    try:
        lab.enter()
        cl, ok = netns.start_cluster(t, lab, list(IDS), replicas=2, mem=64)
        if not ok:
            return
        wlog = open(os.path.join(cl.dir, "watch.log"), "wb")
        # As deploy/local-cluster.sh starts it: no flags (down-after 10 s).
        watch = lg.track(subprocess.Popen(cl.ctl_cmd("watch"), stdin=subprocess.DEVNULL,
                                          stdout=wlog, stderr=wlog))
        wlog.close()
        cl.ctl_procs.append(watch)
        members = cl.store_active()
        keys = ["p-%d" % i for i in range(NKEYS)]
        owners = lg.locate(members, keys)
        h = ck.History()
        addr = {i: cl.nodes[i].addr for i in IDS}

        def loop(fn, ev):
            while not ev.is_set():
                fn()
                ev.wait(0.003)

        def spawn(fn, ev):
            th = threading.Thread(target=loop, args=(fn, ev), daemon=True)
            threads.append(th)
            th.start()
        for x in IDS:
            rng = random.Random("%s-%s" % (mode, x))
            mine = [k for k in keys if x in owners[k]]
            dw = Worker(h, "dw-" + x, addr[x], declare=1)
            pw = Worker(h, "pw-" + x, addr[x])
            pr = Worker(h, "pr-" + x, addr[x])

            def dstep(w=dw, r=rng, ks=mine):
                k = r.choice(ks)
                w.write(k, r.random() < 0.15)
                w.get(k)

            def pstep(w=pw, r=random.Random(rng.random())):
                w.write(r.choice(keys), r.random() < 0.15)

            def rstep(w=pr, r=random.Random(rng.random())):
                w.get(r.choice(keys))
            spawn(dstep, stop_w)
            spawn(pstep, stop_w)
            spawn(rstep, stop_r)
        acked = lambda: sum(1 for o in list(h.ops) if o.outcome == "ok")  # noqa: E731
        t.ok(lg.wait_for(lambda: acked() >= 600, 30.0, 0.05),
             "load before the partition: %d operations answered" % acked())
        lab.partition("a", mode)
        t_part = time.monotonic()       # the rules are in force from here
        h.fault(t_part, label)
        b_cport = (addr["b"][0], addr["b"][1] + 10000)
        a_cport = (addr["a"][0], addr["a"][1] + 10000)
        effect = {"a->b": lab.reachable("a", b_cport, 0.5),
                  "b->a": lab.reachable("b", a_cport, 0.5),
                  "b->c": lab.reachable("b", (addr["c"][0], addr["c"][1] + 10000), 0.5),
                  "client->a": lab.reachable(None, addr["a"], 0.5),
                  "client->b": lab.reachable(None, addr["b"], 0.5)}
        want = {"a->b": False, "b->a": False, "b->c": True, "client->a": mode == "peers",
                "client->b": True}
        t.ok(effect == want, "%s: in force (%s)" % (label, ", ".join(
            "%s %s" % (k, "open" if v else "cut") for k, v in sorted(effect.items()))),
            "want %r" % want)
        # The fault itself lasts PART_SECS (the load runs meanwhile).
        stop_r.wait(PART_SECS)
        t_heal = time.monotonic()
        lab.heal("a")
        h.fault(t_heal, "heal")
        stop_w.set()
        stop_r.wait(AFTER_HEAL_READS)
        stop_r.set()
        for th in threads:
            th.join(timeout=10)
        t.ok(not any(th.is_alive() for th in threads), "the load stopped")
        by = {}
        for op in h.ops:
            if op.kind in ("set", "delete") and op.session.startswith("dw-") and \
                    t_part <= op.invoke <= t_heal:
                by.setdefault(op.node, [0, 0])[0 if op.outcome == "ok" else 1] += 1
        t.diag("%s: from %.3f to %.3f (monotonic); declared writes invoked meanwhile, "
               "acknowledged/not per node: %s" % (label, t_part, t_heal, by))

        # Recovery: watch (and the nodes) alone; polled with a deadline.
        why = [None]

        def ok_now():
            why[0] = healthy(cl)
            return why[0] is None
        t0 = time.monotonic()
        rec = lg.wait_for(ok_now, RECOVER_TIMEOUT, 0.5)
        st = cl.status()
        h.recovery = {"store_pending": cl.store_pending(),
                      "nodes": {i: st["nodes"].get(i, {"state": "absent"}) for i, _ in
                                lg.parse_members(cl.store_active())["nodes"]},
                      "error": None if st["rc"] == 0 else "status exit %d" % st["rc"]}
        t.ok(rec, "%s: after the heal no node is left recovering or pending (%.1f s; "
             "epoch %d)" % (label, time.monotonic() - t0, cl.store_epoch()),
             "%s\n%s" % (why[0], st["raw"]))
        epoch, errs = final_read(cl, h, keys)
        t.ok(not errs, "%s: every owner at epoch %d answers the final read" % (label, epoch),
             errs[:5])
        res = ck.check(h)
        t.diag("%s: %s" % (label, ck.summary(h, res)))
        for cls, desc in (("lost", "acknowledged writes lost (final value at an owner older "
                           "than an acknowledged write, or missing)"),
                          ("stale", "stale reads (begun after an acknowledgement, an older "
                           "value or a miss)"),
                          ("resurrected", "resurrected deletes"),
                          ("phantom", "phantom values")):
            n = len(res[cls])
            t.ok(n == 0, "%s: %d %s" % (label, n, desc),
                 "\n".join(repr(x) for x in res[cls][:5]))
        keys2, bad = split_brain(h, t_part, t_heal)
        bad_keys = sorted({b[0] for b in bad})
        t.diag("%s: %d keys acknowledged as acting primary by two nodes during the partition"
               % (label, len(keys2)))
        t.ok(not bad_keys, "%s: no split brain: %d keys whose writes acknowledged by one of "
             "two acting primaries are missing afterwards" % (label, len(bad_keys)),
             "\n".join("%s: %s's last ack %r; at owner %s: %r" % b for b in bad[:5]))
        if res["ryw"]:
            t.diag("%s: ryw (a connection's get missing its own acknowledged write, known "
                   "open): %d" % (label, len(res["ryw"])))
        if watch is not None:
            try:
                with open(os.path.join(cl.dir, "watch.log")) as f:
                    t.diag("ringctl watch: " + lg.tail(f.read(), 800))
            except OSError:
                pass
    finally:
        stop_w.set()
        stop_r.set()
        for th in threads:
            th.join(timeout=10)
        lg.stop_proc(watch)
        if cl is not None:
            lg.close_cluster(t, cl)
        lab.close()


def main():
    lg.tap_main([(scenario, "peers"), (scenario, "all")], 400,
                "partitions between network namespaces")


if __name__ == "__main__":
    main()
