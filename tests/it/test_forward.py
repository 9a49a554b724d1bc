"""Forwarding for plain memcached clients (docs/cluster.md "Forwarding"):
three nodes at epoch 1, pymemcache (which never declares an epoch) talks to
node a only; every command on keys of every owner is served, verified on
the owner itself; pipelined mixed local/remote requests keep their order;
a dead or hung owner gives a SERVER_ERROR within the forward timeout while
the connection keeps serving local keys. TAP."""
import os
import signal
import socket
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

TIMEOUT_MS = 600          # --forward-timeout of the nodes
IDS = ["a", "b", "c"]


def raw(addr):
    s = socket.create_connection(addr, timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_all(s, n_bytes=None, until=None, timeout=10.0):
    """Read until `until` (bytes) ends the buffer or n_bytes are in."""
    deadline = time.monotonic() + timeout
    buf = b""
    while True:
        if until is not None and buf.endswith(until):
            return buf
        if n_bytes is not None and len(buf) >= n_bytes:
            return buf
        left = deadline - time.monotonic()
        if left <= 0:
            return buf
        s.settimeout(left)
        try:
            d = s.recv(1 << 20)
        except socket.timeout:
            return buf
        if not d:
            return buf
        buf += d


def parse_stream(rep):
    """Replies as a list: ("VALUE", key, data) for each value, else the
    line text; a trailing "" when the stream ends with CRLF."""
    out, i = [], 0
    while i < len(rep):
        j = rep.find(b"\r\n", i)
        if j < 0:
            out.append(rep[i:].decode(errors="replace") + "<partial>")
            break
        line = rep[i:j]
        i = j + 2
        if line.startswith(b"VALUE "):
            p = line.split()
            n = int(p[3])
            out.append(("VALUE", p[1].decode(), rep[i:i + n]))
            i += n + 2
        else:
            out.append(line.decode(errors="replace"))
    out.append("")
    return out


def proc_state(pid):
    """"T" when every thread of pid is stopped, else another letter."""
    try:
        states = set()
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                states.add(f.read().rsplit(")", 1)[1].split()[0])
        return "T" if states == {"T"} else "R"
    except (OSError, IndexError):
        return None


def node_stat(node, name):
    return int(lg.node_stats(node.addr).get(name, -1))


def owner_get(cl, own, key):
    """(value, flags) of key read on its owner directly, or None."""
    c = lg.Conn(cl.nodes[own[key][0]].addr)
    try:
        c.send(b"get " + key.encode() + b"\r\n")
        line = c.readline()
        if line == b"END":
            return None
        p = line.split()
        v = c.readn(int(p[3]))
        c.readline()
        return v, int(p[2])
    finally:
        c.close()


def eq(t, got, want, desc):
    return t.ok(got == want, desc, "got:  %r\nwant: %r" % (got, want))


def scenario(t):
    why = lg.supports_cluster()
    if why:
        t.skip("forwarding", why)
        return
    cl = lg.Cluster(replicas=1, mem=64, node_args=["--forward-timeout", str(TIMEOUT_MS)])
    try:
        for i in IDS:
            cl.add(i)
        rc, out, err = cl.ctl("init", "--members", cl.write_members(IDS))
        if not t.ok(rc == 0, "ringctl init of a b c", (rc, out, err)):
            return
        conv = cl.converged(1, IDS)
        if not t.ok(all(v == (1, 0) for v in conv.values()), "every node at epoch 1", conv):
            return
        a = cl.nodes["a"]
        keys = ["fk-%d" % i for i in range(90)]
        own = lg.locate(cl.store_active(), keys)
        by_owner = {i: [k for k in keys if own[k][0] == i] for i in IDS}
        t.ok(all(len(v) >= 10 for v in by_owner.values()),
             "the keys spread over every node", {i: len(v) for i, v in by_owner.items()})
        local, remote_b, remote_c = by_owner["a"], by_owner["b"], by_owner["c"]
        remote = remote_b + remote_c

        mc = Client(a.addr, timeout=5, connect_timeout=5, default_noreply=False)
        ok = all(mc.set(k, b"v-" + k.encode(), flags=7) for k in keys)
        t.ok(ok, "pymemcache set of %d keys through node a: all STORED" % len(keys))
        bad = [k for k in keys if owner_get(cl, own, k) != (b"v-" + k.encode(), 7)]
        eq(t, bad, [], "every key is stored ON its owner (value and flags)")
        t.ok(all(lg.node_stats(cl.nodes[i].addr).get("curr_items") == str(len(by_owner[i]))
                 for i in IDS), "each node holds exactly the keys it owns")

        got = mc.get_many(keys)
        eq(t, got, {k: b"v-" + k.encode() for k in keys},
             "a multi-get of keys on all three owners returns every value")
        got = mc.get_many(remote_b[:5])
        eq(t, got, {k: b"v-" + k.encode() for k in remote_b[:5]},
             "a multi-get of keys all on one remote owner (relayed whole)")
        g = mc.gets_many([local[0], remote_b[0], remote_c[0]])
        t.ok(len(g) == 3 and all(cas is not None for _, cas in g.values()),
             "gets across owners returns values with CAS", g)

        # Every mutating command on remote keys, checked on the owner.
        rk, rk2 = remote_b[1], remote_c[1]
        t.ok(mc.delete(rk) and owner_get(cl, own, rk) is None,
             "delete of a remote key removes it on its owner")
        t.ok(mc.delete(rk) is False, "a second delete answers NOT_FOUND")
        t.ok(mc.add(rk, b"added") and owner_get(cl, own, rk) == (b"added", 0),
             "add of a missing remote key")
        t.ok(mc.add(rk, b"again") is False, "add of an existing remote key: NOT_STORED")
        t.ok(mc.replace(rk, b"replaced") and mc.append(rk, b"+a") and mc.prepend(rk, b"p+")
             and owner_get(cl, own, rk) == (b"p+replaced+a", 0),
             "replace, append, prepend of a remote key")
        mc.set(rk2, b"10")
        t.ok(mc.incr(rk2, 5) == 15 and mc.decr(rk2, 3) == 12
             and owner_get(cl, own, rk2) == (b"12", 0), "incr and decr of a remote key")
        v, cas = mc.gets(rk2)
        t.ok(mc.cas(rk2, b"c1", cas) is True and mc.cas(rk2, b"c2", cas) is False
             and owner_get(cl, own, rk2) == (b"c1", 0),
             "cas of a remote key: the right CAS stores, a stale one EXISTS")
        t.ok(mc.touch(rk2, 1000) is True and mc.touch("fk-missing-x", 10) is False,
             "touch of remote keys (TOUCHED / NOT_FOUND)")
        big = os.urandom(300000)
        t.ok(mc.set(remote_c[2], big) and mc.get(remote_c[2]) == big
             and owner_get(cl, own, remote_c[2]) == (big, 0),
             "a 300 KB value forwarded both ways")
        gat = raw(a.addr)
        gat.sendall(b"gat 500 %s\r\n" % remote_b[3].encode())
        rep = recv_all(gat, until=b"END\r\n")
        t.ok(rep.startswith(b"VALUE %s 7 " % remote_b[3].encode()), "gat of a remote key", rep)
        gat.close()

        # Pipelining: one write of many requests, replies in request order.
        s = raw(a.addr)
        lk, r1, r2 = local[1], remote_b[4], remote_c[4]
        req = (b"set %s 0 0 2\r\nL1\r\n" % lk.encode() +
               b"set %s 0 0 2\r\nR1\r\n" % r1.encode() +
               b"get %s\r\n" % r1.encode() +
               b"get %s\r\n" % lk.encode() +
               b"set %s 0 0 2 noreply\r\nR2\r\n" % r2.encode() +
               b"get %s %s %s\r\n" % (r2.encode(), lk.encode(), r1.encode()) +
               b"delete %s\r\n" % r2.encode() +
               b"version\r\n" +
               b"incr %s 1\r\n" % r1.encode() +
               b"get %s\r\n" % r2.encode())
        s.sendall(req)
        rep = recv_all(s, until=b"non-numeric value\r\nEND\r\n")
        items = parse_stream(rep)
        want = ["STORED", "STORED", ("VALUE", r1, b"R1"), "END", ("VALUE", lk, b"L1"), "END"]
        mg = set(items[6:9]) if len(items) > 9 else set()
        ok = items[:6] == want and mg == {("VALUE", r2, b"R2"), ("VALUE", lk, b"L1"),
                                          ("VALUE", r1, b"R1")}
        ok = ok and items[9:11] == ["END", "DELETED"] and len(items) == 15
        ok = ok and items[11].startswith("VERSION ") and items[12:] == [
            "CLIENT_ERROR cannot increment or decrement non-numeric value", "END", ""]
        t.ok(ok, "pipelined local and remote requests are answered in order", items)
        # Many pipelined remote gets in one write.
        s.sendall(b"".join(b"get %s\r\n" % k.encode() for k in remote * 3))
        rep = b""
        while rep.count(b"END\r\n") < len(remote) * 3:
            more = recv_all(s, until=b"END\r\n", timeout=5)
            if not more:
                break
            rep += more
        vals = [it[1] for it in parse_stream(rep) if isinstance(it, tuple)]
        expect = [k for k in remote * 3 if k != r2]
        eq(t, vals, expect, "%d pipelined remote gets come back in request order"
             % (len(remote) * 3))
        s.close()

        fw = node_stat(a, "forwarded")
        t.ok(fw >= len(remote), "stats forwarded counts the forwards (%d)" % fw)

        # A client that closes with forwards in flight.
        for _ in range(20):
            s = raw(a.addr)
            s.sendall(b"".join(b"get %s\r\n" % k.encode() for k in remote) +
                      b"set %s 0 0 1\r\nx\r\n" % remote_c[5].encode())
            s.close()
        t.ok(a.alive() and mc.get(remote_b[0]) == b"v-" + remote_b[0].encode(),
             "clients closing with forwards in flight: the node keeps serving")

        # The owner hangs (SIGSTOP): forward timeout, connection keeps working.
        b = cl.nodes["b"]
        os.kill(b.pid, signal.SIGSTOP)
        try:
            t.ok(lg.wait_for(lambda: proc_state(b.pid) == "T", 5.0), "owner b is stopped")
            t0 = time.monotonic()
            try:
                mc.get(remote_b[0])
                err = None
            except MemcacheServerError as e:
                err = str(e)
            dt = time.monotonic() - t0
            t.ok(err is not None and "forward timeout" in err and dt < TIMEOUT_MS / 1000.0 + 1.0,
                 "a hung owner: SERVER_ERROR forward timeout after %.2f s" % dt, err)
            t.ok(mc.get(local[0]) == b"v-" + local[0].encode(),
                 "the same connection still serves a local key")
            g = mc.get_many([local[0], remote_c[0]])
            eq(t, g, {local[0]: b"v-" + local[0].encode(), remote_c[0]: b"v-" + remote_c[0].encode()},
                 "and keys of the live owner")
        finally:
            os.kill(b.pid, signal.SIGCONT)
        t.ok(lg.wait_for(lambda: mc.get(remote_b[0]) == b"v-" + remote_b[0].encode(), 5.0),
             "after the owner resumes, forwarding to it works again (reconnect)")

        # The owner dies: a clear error within the timeout, local keys fine.
        b.stop(signal.SIGKILL)
        t0 = time.monotonic()
        try:
            mc.set(remote_b[0], b"x")
            err = None
        except MemcacheServerError as e:
            err = str(e)
        dt = time.monotonic() - t0
        t.ok(err is not None and "forward" in err and dt < TIMEOUT_MS / 1000.0 + 1.0,
             "a dead owner: SERVER_ERROR within %.2f s" % dt, err)
        g = mc.get_many([local[0], remote_b[1], remote_c[0]])
        eq(t, g, {local[0]: b"v-" + local[0].encode(), remote_c[0]: b"v-" + remote_c[0].encode()},
             "a multi-get with a dead owner's key: the other keys are served, it is a miss")
        t.ok(mc.get(local[2]) == b"v-" + local[2].encode(),
             "the connection still serves local keys")

        rcs = {i: cl.nodes[i].stop() for i in ("a", "c")}
        eq(t, rcs, {"a": 0, "c": 0}, "nodes exit 0 after SIGTERM")
        logs = ""
        for i in IDS:
            with open(cl.nodes[i].log, errors="replace") as f:
                logs += f.read()
        t.ok("ERROR: AddressSanitizer" not in logs and "runtime error" not in logs,
             "no sanitizer report in the node logs", logs[-3000:])
    finally:
        cl.close()
        cl.cleanup_dir()


if __name__ == "__main__":
    lg.watchdog(120)
    tap = lg.Tap()
    lg.run_tap(tap, scenario)
    tap.done()
