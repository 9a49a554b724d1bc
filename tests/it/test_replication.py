"""Primary-forwarded replication, R=2 on three nodes (docs/cluster.md
"Replication"): every write lands on both owners with the same value,
flags and CAS; every mutating command keeps them identical; gat/gats
replicate the new expiry and every command carries the TTL; flush_all is
cluster-wide; a replica that does not answer makes the write answer
SERVER_ERROR replica unavailable (applied on the primary, counted in
replica_failures) until the heartbeats see it down, then it is skipped
(replica_skipped); after the primary is killed the client library
(ringctl get) reads the latest acknowledged value from the secondary. TAP."""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

try:
    from pymemcache.client.base import Client
    from pymemcache.exceptions import MemcacheServerError
except ImportError:
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        from pymemcache.client.base import Client
        from pymemcache.exceptions import MemcacheServerError
    except ImportError:
        print("1..0 # SKIP python3-pymemcache not installed")
        sys.exit(0)

TIMEOUT_MS = 600
IDS = ["a", "b", "c"]


def eq(t, got, want, desc):
    return t.ok(got == want, desc, "got:  %r\nwant: %r" % (got, want))


def proc_stopped(pid):
    try:
        states = set()
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                states.add(f.read().rsplit(")", 1)[1].split()[0])
        return states == {"T"}
    except (OSError, IndexError):
        return False


class Probe:
    """A declared (epoch 1) connection to one node: it serves the keys it
    owns in any position and never forwards, so it shows what that node
    itself holds."""

    def __init__(self, node):
        self.c = lg.Conn(node.addr)
        self.c.send(b"epoch 1\r\n")
        assert self.c.readline() == b"OK"

    def gets(self, key):
        """(value, flags, cas), None on a miss, or the error line."""
        self.c.send(b"gets " + key.encode() + b"\r\n")
        line = self.c.readline()
        if line == b"END":
            return None
        if not line.startswith(b"VALUE "):
            return line
        p = line.split()
        v = self.c.readn(int(p[3]))
        self.c.readline()
        return v, int(p[2]), int(p[4])

    def close(self):
        self.c.close()


def gat(conn, cmd, ttl, keys):
    """gat/gats through a raw connection: ({key: (value, flags, cas)}, None)
    or (None, the error line)."""
    conn.send(("%s %d %s\r\n" % (cmd, ttl, " ".join(keys))).encode())
    vals = {}
    while True:
        line = conn.readline()
        if line == b"END":
            return vals, None
        if not line.startswith(b"VALUE "):
            return None, line
        p = line.split()
        v = conn.readn(int(p[3]))
        vals[p[1].decode()] = (v, int(p[2]), int(p[4]) if len(p) > 4 else None)


def scenario(t):
    why = lg.supports_cluster()
    if why:
        t.skip("replication", why)
        return
    cl = lg.Cluster(replicas=2, mem=64, node_args=["--forward-timeout", str(TIMEOUT_MS)])
    probes = {}
    try:
        for i in IDS:
            cl.add(i)
        rc, out, err = cl.ctl("init", "--members", cl.write_members(IDS))
        if not t.ok(rc == 0, "ringctl init of a b c with replicas 2", (rc, out, err)):
            return
        conv = cl.converged(1, IDS)
        if not t.ok(all(v == (1, 0) for v in conv.values()), "every node at epoch 1", conv):
            return
        keys = ["rk-%d" % i for i in range(120)]
        own = lg.locate(cl.store_active(), keys, replicas=2)
        t.ok(all(len(set(own[k])) == 2 for k in keys), "every key has two distinct owners")
        probes = {i: Probe(cl.nodes[i]) for i in IDS}

        def on_owners(k):
            return [probes[o].gets(k) for o in own[k]]

        def identical(k):
            a, b = on_owners(k)
            return a == b and a is not None and not isinstance(a, bytes)

        clients = {i: Client(cl.nodes[i].addr, timeout=5, connect_timeout=5,
                             default_noreply=False) for i in IDS}
        mc = clients["a"]
        ok = all(mc.set(k, b"v-" + k.encode(), flags=5) for k in keys)
        t.ok(ok, "set of %d keys through node a (plain client): all STORED" % len(keys))
        bad = [k for k in keys if not identical(k) or on_owners(k)[0][:2] != (b"v-" + k.encode(), 5)]
        eq(t, bad, [], "every key is on both owners with the same value, flags and CAS")
        items = {i: int(lg.node_stats(cl.nodes[i].addr)["curr_items"]) for i in IDS}
        eq(t, sum(items.values()), 2 * len(keys), "exactly two copies of each key in the cluster")
        repl = sum(int(lg.node_stats(cl.nodes[i].addr)["replicated"]) for i in IDS)
        t.ok(repl >= len(keys), "stats replicated counts the acknowledged post-images (%d)" % repl)

        # Every mutating command keeps the replicas identical.
        k = keys[0]
        pc = clients[own[k][0]]
        t.ok(pc.add(k, b"x") is False and identical(k), "add of a live key: NOT_STORED")
        checks = []
        checks.append(("replace", mc.replace(k, b"r1", flags=9)))
        checks.append(("append", mc.append(k, b"+a")))
        checks.append(("prepend", mc.prepend(k, b"p+")))
        t.ok(all(r for _, r in checks) and identical(k) and on_owners(k)[0][:2] == (b"p+r1+a", 9),
             "replace, append, prepend: both owners hold p+r1+a with flags 9, same CAS",
             (checks, on_owners(k)))
        v, cas = mc.gets(k)
        t.ok(mc.cas(k, b"c1", cas) is True and mc.cas(k, b"c2", cas) is False and identical(k)
             and on_owners(k)[0][0] == b"c1", "cas: stored once, both owners identical",
             on_owners(k))
        k2 = keys[1]
        mc.set(k2, b"100")
        t.ok(mc.incr(k2, 7) == 107 and mc.decr(k2, 10) == 97 and identical(k2)
             and on_owners(k2)[0][0] == b"97", "incr and decr: both owners hold 97, same CAS",
             on_owners(k2))
        k3 = keys[2]
        t.ok(mc.delete(k3) and on_owners(k3) == [None, None], "delete: gone on both owners",
             on_owners(k3))
        t.ok(mc.add(k3, b"added", flags=4) and identical(k3) and on_owners(k3)[0][:2] ==
             (b"added", 4), "add of the deleted key: on both owners, same CAS", on_owners(k3))
        k4 = keys[3]
        before = on_owners(k4)
        t.ok(mc.touch(k4, 2) and identical(k4) and on_owners(k4) == before,
             "touch: both owners keep the same value and CAS")
        gone = lg.wait_for(lambda: on_owners(k4) == [None, None], 6.0)
        t.ok(gone, "the touched expiry travelled: the key expires on both owners", on_owners(k4))
        # gat/gats change the expiry at the primary: the post-image (new
        # TTL, same CAS) reaches the other owner, and the reply comes once
        # it did. A multi-key gat through node a mixes owners.
        g = lg.Conn(cl.nodes["a"].addr)
        gk = keys[5:11]
        for k in gk:
            mc.set(k, b"g-" + k.encode(), flags=3)
        before = {k: on_owners(k) for k in gk}
        vals, err = gat(g, "gats", 0, gk)
        t.ok(err is None and sorted(vals) == sorted(gk) and
             all(vals[k] == before[k][0] for k in gk) and
             all(identical(k) and on_owners(k) == before[k] for k in gk),
             "gats of 6 keys on mixed owners through node a: every VALUE with its CAS, "
             "both owners unchanged and identical", (vals, err))
        vals, err = gat(g, "gat", 2, gk[:3])
        t.ok(err is None and sorted(vals) == sorted(gk[:3]) and
             all(identical(k) for k in gk[:3]), "gat 2 of 3 keys: values returned, "
             "owners identical (same CAS)", (vals, err))

        # Every mutating command carries the expiry: each key below ends
        # with a 2 s TTL through its command and must expire on both
        # owners; the control keys got their TTL removed (gat/gats/touch 0)
        # or never had one and must outlive them on both.
        ttl_keys, keep = {}, {}
        tk = iter(keys[11:40])
        k = next(tk)
        ttl_keys["set"] = k
        mc.set(k, b"s", expire=2)
        k = next(tk)
        ttl_keys["add"] = k
        mc.delete(k)
        mc.add(k, b"a", expire=2)
        k = next(tk)
        ttl_keys["replace"] = k
        mc.set(k, b"x")
        mc.replace(k, b"r", expire=2)
        for cmd in ("append", "prepend", "incr", "decr", "cas"):
            k = next(tk)
            ttl_keys[cmd] = k
            mc.set(k, b"10", expire=2)
            if cmd == "append":
                mc.append(k, b"1")
            elif cmd == "prepend":
                mc.prepend(k, b"1")
            elif cmd == "incr":
                mc.incr(k, 5)
            elif cmd == "decr":
                mc.decr(k, 5)
            else:
                mc.cas(k, b"c", mc.gets(k)[1], expire=2)
        for cmd in ("touch", "gat", "gats"):
            k, kk = next(tk), next(tk)
            ttl_keys[cmd], keep[cmd + " 0"] = k, kk
            mc.set(k, b"t")
            mc.set(kk, b"t", expire=2)
            if cmd == "touch":
                mc.touch(k, 2)
                mc.touch(kk, 0)
            else:
                gat(g, cmd, 2, [k])
                gat(g, cmd, 0, [kk])
        for cmd in ("set", "append", "incr"):
            k = next(tk)
            keep[cmd + " no ttl"] = k
            mc.set(k, b"7")
            if cmd == "append":
                mc.append(k, b"7")
            elif cmd == "incr":
                mc.incr(k, 1)
        bad = [c for c, k in list(ttl_keys.items()) + list(keep.items()) if not identical(k)]
        eq(t, bad, [], "set add replace append prepend incr decr cas touch gat gats: "
           "both owners identical (value, flags, CAS) right after each")
        gone = lg.wait_for(lambda: all(on_owners(k) == [None, None]
                                       for k in ttl_keys.values()), 6.0)
        t.ok(gone, "the 2 s expiry of each command travelled: expired on both owners",
             {c: on_owners(k) for c, k in ttl_keys.items()})
        bad = [c for c, k in keep.items() if not identical(k)]
        eq(t, bad, [], "keys whose TTL was removed (touch/gat/gats 0) or never set are "
           "still on both owners, identical")
        g.close()

        # Writes by a declared client straight to the primary.
        k5 = keys[4]
        d = lg.Conn(cl.nodes[own[k5][0]].addr)
        d.declare(1)
        t.ok(d.store("set", k5, b"direct", flags=2) == b"STORED"
             and identical(k5) and on_owners(k5)[0][:2] == (b"direct", 2),
             "a write sent to the primary by an epoch-declaring client is replicated")
        # A write sent to the secondary by a declared client is redirected.
        d2 = lg.Conn(cl.nodes[own[k5][1]].addr)
        d2.declare(1)
        r = d2.store("set", k5, b"wrong")
        t.ok(r.startswith(b"SERVER_ERROR MOVED 1 ") and on_owners(k5)[0][0] == b"direct",
             "a secondary answers a declared write MOVED (writes go to the primary)", r)
        d.close()
        d2.close()

        # flush_all through one node is cluster-wide.
        t.ok(clients["b"].flush_all() is True, "flush_all through node b answers OK")
        left = [k for k in keys[5:40] if on_owners(k) != [None, None]]
        eq(t, left, [], "after flush_all no owner serves any key")

        # Primary killed: the client library reads the secondary.
        data = {k: b"w2-" + k.encode() for k in keys[40:80]}
        t.ok(all(mc.set(k, v) for k, v in data.items()) and all(identical(k) for k in data),
             "40 keys rewritten, identical on both owners")
        victim = "c"
        vkeys = [k for k in data if own[k][0] == victim]
        survivors = [i for i in IDS if i != victim]
        cl.nodes[victim].stop(signal.SIGKILL)
        seeds = ",".join(cl.nodes[i].addr_s for i in survivors)
        r = subprocess.run([lg.RINGCTL, "--seeds", seeds, "get"] + vkeys, capture_output=True,
                           timeout=60)
        got = dict(line.split(b"\t", 1) for line in r.stdout.splitlines() if b"\t" in line)
        eq(t, got, {k.encode(): data[k] for k in vkeys},
           "primary %s killed: ringctl get (libringcache) reads all %d of its keys from the "
           "secondary, latest acked values" % (victim, len(vkeys)))

        # A dead replica: until the heartbeats see it down a write answers
        # replica unavailable (applied on the primary, not acknowledged);
        # once seen down it fails at once, UNAVAILABLE, without being
        # applied: no write is acknowledged with one copy until the store
        # declares the replica failed (ringctl watch / remove --failed).
        dead_rep = [k for k in keys[80:] if own[k][1] == victim and own[k][0] != victim]
        k6 = dead_rep[0]
        prim = clients[own[k6][0]]
        replies = []

        def write_refused():
            try:
                ok = prim.set(k6, b"after-death")
                replies.append("STORED" if ok else "NOT_STORED")
                return False
            except MemcacheServerError as e:
                replies.append(e.args[0].decode() if isinstance(e.args[0], bytes)
                               else str(e))
                return replies[-1].startswith("UNAVAILABLE owner %s is down" % victim)
        t.ok(lg.wait_for(write_refused, 5.0, 0.05),
             "a write whose replica is dead answers SERVER_ERROR UNAVAILABLE once the replica "
             "is seen down", replies[-5:])
        early = [r for r in replies if r == "replica unavailable"]
        t.ok(len(early) == len(replies) - 1,
             "before that, only SERVER_ERROR replica unavailable (%d times), never STORED"
             % len(early), replies[:5])
        st = lg.node_stats(cl.nodes[own[k6][0]].addr)
        t.ok(int(st["replica_skipped"]) == 0 and int(st["cluster_unavailable"]) >= 1 and
             int(st["replica_failures"]) == len(early),
             "stats: replica_skipped %s, cluster_unavailable %s, replica_failures %s"
             % (st["replica_skipped"], st["cluster_unavailable"], st["replica_failures"]))
        other = [k for k in keys[80:] if victim not in own[k]]
        t.ok(all(mc.set(k, b"fine") for k in other[:5]),
             "writes of keys whose owners are alive answer STORED")

        # A hung replica: answered within the timeout, the connection lives.
        hung = "b" if own[other[0]][1] == "b" else own[other[0]][1]
        hk = [k for k in other if own[k][1] == hung][0]
        hp = clients[own[hk][0]]
        os.kill(cl.nodes[hung].pid, signal.SIGSTOP)
        try:
            t.ok(lg.wait_for(lambda: proc_stopped(cl.nodes[hung].pid), 5.0),
                 "replica %s stopped" % hung)
            t0 = time.monotonic()
            try:
                hp.set(hk, b"hung")
                err = None
            except MemcacheServerError as e:
                err = str(e)
            dt = time.monotonic() - t0
            t.ok(err is not None and "replica unavailable" in err
                 and dt < TIMEOUT_MS / 1000.0 + 1.0,
                 "a hung replica: SERVER_ERROR replica unavailable after %.2f s" % dt, err)
            t.ok(hp.get(hk) == b"hung", "the primary serves the write it applied")
            gc = lg.Conn(cl.nodes[own[hk][0]].addr)
            t0 = time.monotonic()
            vals, err = gat(gc, "gat", 100, [hk])
            dt = time.monotonic() - t0
            t.ok(vals is None and err == b"SERVER_ERROR replica unavailable"
                 and dt < TIMEOUT_MS / 1000.0 + 1.0,
                 "gat with a hung replica: the whole reply is SERVER_ERROR replica "
                 "unavailable after %.2f s" % dt, (vals, err))
            v = gc.simple("version")
            t.ok(v.startswith(b"VERSION "), "the connection keeps working", v)
            gc.close()
        finally:
            os.kill(cl.nodes[hung].pid, signal.SIGCONT)

        for p in probes.values():
            p.close()
        probes = {}
        rcs = {i: cl.nodes[i].stop() for i in survivors}
        eq(t, rcs, {i: 0 for i in survivors}, "the surviving nodes exit 0 after SIGTERM")
        logs = ""
        for i in IDS:
            with open(cl.nodes[i].log, errors="replace") as f:
                logs += f.read()
        t.ok("ERROR: AddressSanitizer" not in logs and "runtime error" not in logs,
             "no sanitizer report in the node logs", logs[-3000:])
    finally:
        for p in probes.values():
            p.close()
        cl.close()
        cl.cleanup_dir()


if __name__ == "__main__":
    lg.watchdog(150)
    tap = lg.Tap()
    lg.run_tap(tap, scenario)
    tap.done()
