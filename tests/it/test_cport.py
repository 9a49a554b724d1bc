#!/usr/bin/env python3
"""Cluster port and node-side transitions (docs/cluster.md), driven by a
small admin client written here (protobuf packed by hand, the cluster id
from libxxhash through ctypes).

1. The cluster port rejects garbage, another cluster, a wrong token, an
   oversized frame and a request before Hello, and keeps serving: a good
   connection still works, and so does the client port.
2. `config` and `epoch` on a node without a membership, then after init.
3. End to end: 2 nodes initialised (Commit without pending), keys written,
   a 3rd joins through Prepare/StartCopy/Fence/Commit while keys are
   updated and deleted; every key is then read from its owner, updates are
   there, deletes stay deleted, orphans reach 0, misrouted stays 0.
4. An aborted leave loses nothing and leaves no orphan; a restarted node
   comes back with its epoch, empty, with a new boot id.
"""
import ctypes
import os
import shutil
import socket
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import Tap, Node, wait_until, recv_until, free_cluster_ports  # noqa: E402

HELLO, MEMBERSHIP, ADMIN_REQUEST, ADMIN_REPLY, BATCH, ACK, ERROR = range(1, 8)
TOKEN = b"s3cret-admin-token"

_xx = ctypes.CDLL("libxxhash.so.0")
_xx.XXH3_64bits.restype = ctypes.c_uint64
_xx.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3(b):
    return _xx.XXH3_64bits(b, len(b))


CLUSTER_ID = xxh3(b"ringcache")


# ---- protobuf, by hand -------------------------------------------------

def varint(n):
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def fv(field, v):
    return varint(field << 3) + varint(v) if v else b""


def fb(field, b):
    if isinstance(b, str):
        b = b.encode()
    return varint(field << 3 | 2) + varint(len(b)) + b


def decode(buf):
    """{field: [values]}; varints as ints, length-delimited as bytes."""
    out, i = {}, 0
    while i < len(buf):
        key, i = _rdvar(buf, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _rdvar(buf, i)
        elif wt == 2:
            n, i = _rdvar(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        out.setdefault(f, []).append(v)
    return out


def _rdvar(buf, i):
    v = s = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << s
        s += 7
        if b < 0x80:
            return v, i


def one(d, f, default=0):
    return d.get(f, [default])[-1]


def membership(epoch, nodes, replicas=1, vnodes=160):
    body = fv(1, epoch) + fv(2, vnodes) + fv(3, replicas)
    for nid, addr in nodes:
        body += fb(4, fb(1, nid) + fb(2, addr) + fv(3, 1))
    return body


def frame(ftype, payload, cluster=CLUSTER_ID):
    return b"RC" + bytes([1, ftype]) + struct.pack(">QI", cluster, len(payload)) + payload


def read_frame(sock, timeout=10.0):
    """(type, payload) or None when the peer closed first."""
    hdr = _recv_exact(sock, 16, timeout)
    if hdr is None:
        return None
    (length,) = struct.unpack(">I", hdr[12:16])
    body = _recv_exact(sock, length, timeout)
    if body is None:
        return None
    return hdr[3], body


def _recv_exact(sock, n, timeout):
    deadline = time.monotonic() + timeout
    buf = b""
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            d = sock.recv(n - len(buf))
        except (socket.timeout, ConnectionResetError):
            return None
        if not d:
            return None
        buf += d
    return buf


def closed_by_peer(sock, timeout=5.0):
    """Read (and drop) until EOF; True if the peer closed in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(deadline - time.monotonic())
        try:
            if not sock.recv(65536):
                return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
    return False


class Admin:
    """An admin connection to one node's cluster port."""

    def __init__(self, port, token=TOKEN):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.sendall(frame(HELLO, fb(1, "ringcache") + fb(2, token)))
        r = read_frame(self.s)
        if r is None or r[0] != HELLO:
            raise RuntimeError("hello refused: %r" % (r,))
        self.hello = decode(r[1])

    def request(self, field, body, timeout=30.0):
        self.s.sendall(frame(ADMIN_REQUEST, fb(field, body)))
        r = read_frame(self.s, timeout)
        if r is None or r[0] != ADMIN_REPLY:
            raise RuntimeError("no admin reply: %r" % (r,))
        d = decode(r[1])
        st = decode(one(d, 3, b""))
        return bool(one(d, 1)), one(d, 2, b"").decode(), st

    def status(self):
        return self.request(6, b"")[2]

    def close(self):
        self.s.close()


# ---- text protocol -----------------------------------------------------

def cmd(sock, data, term=b"\r\n"):
    sock.sendall(data)
    return recv_until(sock, term, timeout=10)


def get_reply(sock, req, timeout=10.0):
    """A get's reply: up to END, or one SERVER_ERROR line."""
    sock.sendall(req)
    deadline = time.monotonic() + timeout
    buf = b""
    while not (buf.endswith(b"END\r\n") or
               (buf.startswith(b"SERVER_ERROR") and buf.endswith(b"\r\n"))):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        d = sock.recv(65536)
        if not d:
            break
        buf += d
    return buf


class Client:
    """Declares an epoch and follows MOVED (one hop), like a smart client."""

    def __init__(self, nodes, epoch):
        self.socks = {}
        self.nodes = nodes
        self.epoch = epoch

    def sock(self, addr):
        if addr not in self.socks:
            host, port = addr.rsplit(":", 1)
            s = socket.create_connection((host, int(port)), timeout=10)
            assert cmd(s, b"epoch %d\r\n" % self.epoch) == b"OK\r\n"
            self.socks[addr] = s
        return self.socks[addr]

    def call(self, addr, req, term):
        for _ in range(20):
            r = get_reply(self.sock(addr), req) if req.startswith(b"get") else \
                cmd(self.sock(addr), req, term)
            if r.startswith(b"SERVER_ERROR MOVED"):
                addr = r.split()[3].decode()
                continue
            if r.startswith(b"SERVER_ERROR TRYAGAIN"):
                time.sleep(0.01)
                continue
            return addr, r
        return addr, r

    def set(self, key, val, start):
        return self.call(start, b"set %s 0 0 %d\r\n%s\r\n" % (key, len(val), val), b"\r\n")

    def get(self, key, start):
        addr, r = self.call(start, b"get %s\r\n" % key, b"END\r\n")
        if r.startswith(b"VALUE"):
            return addr, r.split(b"\r\n")[1]
        return addr, None if r == b"END\r\n" else r

    def delete(self, key, start):
        return self.call(start, b"delete %s\r\n" % key, b"\r\n")

    def close(self):
        for s in self.socks.values():
            s.close()


def stat(port, name):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    r = cmd(s, b"stats\r\n", b"END\r\n").decode()
    s.close()
    for line in r.split("\r\n"):
        p = line.split()
        if len(p) == 3 and p[1] == name:
            return int(p[2])
    return None


def port_pair():
    """A client port whose cluster port (+10000) is free too, both below
    the ephemeral range (tests/it/rctest.py)."""
    return free_cluster_ports()


def start_node(tmp, nid):
    sd = os.path.join(tmp, nid)
    os.makedirs(sd, exist_ok=True)
    for attempt in range(5):
        n = Node(args=["-t", "2", "-m", "64", "--id", nid, "--state-dir", sd,
                       "--token-file", os.path.join(tmp, "token")],
                 port=port_pair(), stderr=os.path.join(tmp, nid + ".log"))
        try:
            n.start()
        except RuntimeError:
            continue
        n.nid = nid
        n.cport = n.port + 10000
        n.addr = "127.0.0.1:%d" % n.port
        if wait_until(lambda: _can_connect(n.cport), 5):
            return n
        n.stop()
    raise RuntimeError("node %s did not start" % nid)


def _can_connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def main():
    tap = Tap()
    tmp = tempfile.mkdtemp(prefix="rc_cport.")
    nodes = []
    try:
        with open(os.path.join(tmp, "token"), "wb") as f:
            f.write(TOKEN + b"\n")
        a = start_node(tmp, "a")
        b = start_node(tmp, "b")
        nodes += [a, b]
        run(tap, tmp, nodes, a, b)
    finally:
        for n in nodes:
            n.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    tap.done()


def run(tap, tmp, nodes, a, b):
    # ---- 1. the cluster port refuses bad input, one connection at a time
    def conn():
        return socket.create_connection(("127.0.0.1", a.cport), timeout=10)

    s = conn()
    s.sendall(b"get foo\r\n")
    tap.ok(closed_by_peer(s), "garbage closes the connection")
    s.close()

    s = conn()
    s.sendall(frame(HELLO, fb(1, "ringcache") + fb(2, TOKEN), cluster=CLUSTER_ID ^ 1))
    r = read_frame(s)
    tap.ok(r is not None and r[0] == ERROR and b"cluster" in r[1] and closed_by_peer(s),
           "another cluster id: Error, then closed", r)
    s.close()

    s = conn()
    s.sendall(frame(HELLO, fb(1, "ringcache") + fb(2, b"wrong")))
    r = read_frame(s)
    tap.ok(r is not None and r[0] == ERROR and b"wrong token" in r[1] and closed_by_peer(s),
           "wrong token: Error, then closed", r)
    s.close()

    s = conn()
    s.sendall(b"RC\x01\x03" + struct.pack(">QI", CLUSTER_ID, 64 << 20))
    r = read_frame(s)
    tap.ok(r is not None and r[0] == ERROR and b"large" in r[1] and closed_by_peer(s),
           "oversized frame refused from its header", r)
    s.close()

    s = conn()
    s.sendall(frame(ADMIN_REQUEST, fb(6, b"")))
    r = read_frame(s)
    tap.ok(r is not None and r[0] == ERROR and closed_by_peer(s), "a request before Hello", r)
    s.close()

    s = conn()
    s.sendall(frame(HELLO, b"\xff\xff\xff"))
    r = read_frame(s)
    tap.ok(r is not None and r[0] == ERROR and closed_by_peer(s), "undecodable Hello", r)
    s.close()

    s = conn()
    s.sendall(frame(HELLO, fb(1, "ringcache") + fb(2, TOKEN))[:20])
    s.close()   # truncated, then gone

    adm = Admin(a.cport)
    st = adm.status()
    tap.ok(one(st, 1) == b"a" and one(st, 3) == 0 and one(st, 2) != 0,
           "a good connection still works: Status of node a, epoch 0", st)
    adm.close()
    c = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    # A cluster node without a membership serves no keys (issue 11: what it
    # stored would be purged when it joins), but its client port answers.
    r = cmd(c, b"set k 0 0 1\r\nv\r\n")
    tap.ok(r.startswith(b"SERVER_ERROR no membership"),
           "the client port still answers (a node without a membership refuses keys)", r)

    # ---- 2. config and epoch without a membership
    tap.eq(cmd(c, b"config\r\n", b"END\r\n"), b"CONFIG 0 0\r\n\r\nEND\r\n", "config at epoch 0")
    tap.eq(cmd(c, b"epoch\r\n"), b"EPOCH 0 0\r\n", "epoch at epoch 0")
    tap.eq(cmd(c, b"epoch x\r\n"), b"CLIENT_ERROR bad command line format\r\n", "epoch x")
    c.close()

    # ---- 3. init {a, b} at epoch 1, then join c
    m1 = membership(1, [("a", a.addr), ("b", b.addr)])
    admins = {n.nid: Admin(n.cport) for n in (a, b)}
    for nid, ad in admins.items():
        ok, err, st = ad.request(4, fb(2, m1))        # Commit{membership}, no token: init
        tap.ok(ok and one(st, 3) == 1, "init commit on %s" % nid, err)
    ok, _, _ = admins["a"].request(4, fb(2, m1))
    tap.ok(ok, "a repeated init commit is idempotent")
    c = socket.create_connection(("127.0.0.1", b.port), timeout=10)
    conf = cmd(c, b"config\r\n", b"END\r\n")
    text = ("epoch 1\nvnodes 160\nreplicas 1\nnode a %s\nnode b %s\n" % (a.addr, b.addr)).encode()
    tap.eq(conf, b"CONFIG 1 %d\r\n%s\r\nEND\r\n" % (len(text), text), "config after init")
    tap.eq(cmd(c, b"epoch\r\n"), b"EPOCH 1 0\r\n", "epoch after init")
    c.close()

    # The plain-cache key "k" written on a before init is an orphan or owned;
    # cleanup removes it if orphaned.
    tap.ok(wait_until(lambda: one(admins["a"].status(), 13) == 0, 10),
           "cleanup after init leaves no orphan on a")

    keys = [b"key:%d" % i for i in range(3000)]
    cli = Client(nodes, 1)
    bad = [k for k in keys if cli.set(k, b"v1-" + k, a.addr)[1] != b"STORED\r\n"]
    tap.eq(bad, [], "3000 keys written at epoch 1")
    owner1 = {k: cli.get(k, a.addr)[0] for k in keys}
    tap.ok(set(owner1.values()) == {a.addr, b.addr}, "keys spread over a and b")

    cn = start_node(tmp, "c")
    nodes.append(cn)
    admins["c"] = Admin(cn.cport)
    m2 = membership(2, [("a", a.addr), ("b", b.addr), ("c", cn.addr)])
    tok = b"transition-2"
    for nid in "abc":
        ok, err, st = admins[nid].request(1, fb(1, m2) + fb(2, tok) + fv(3, 1))
        tap.ok(ok and one(st, 4) == 2 and one(st, 5) == 1, "prepare on %s" % nid, err)
    ok, err, _ = admins["a"].request(1, fb(1, m2) + fb(2, b"other") + fv(3, 1))
    tap.ok(not ok and "another transition" in err, "a second transition is refused", err)
    ok, err, _ = admins["a"].request(1, fb(1, m2) + fb(2, tok) + fv(3, 1))
    tap.ok(ok, "prepare again with the same token is idempotent", err)

    # Changes after PREPARE are tracked and re-sent.
    upd, dele = keys[:300], keys[300:400]
    for k in upd:
        cli.set(k, b"v2-" + k, a.addr)
    for k in dele:
        cli.delete(k, a.addr)

    for nid in "abc":
        ok, err, _ = admins[nid].request(2, fb(1, tok) + fv(2, 0))
        tap.ok(ok, "start copy on %s" % nid, err)

    # More changes while copying.
    upd2 = keys[1000:1200]
    for k in upd2:
        cli.set(k, b"v3-" + k, a.addr)

    def caught_up():
        for nid in "ab":
            st = admins[nid].status()
            for t in st.get(10, []):
                t = decode(t)
                if not one(t, 6) or one(t, 9, b""):
                    return False
        return True
    tap.ok(wait_until(caught_up, 20), "every transfer walked its arcs")
    for nid in "ab":
        st = admins[nid].status()
        tap.ok(all(one(decode(t), 9, b"") == b"" for t in st.get(10, [])),
               "no transfer error on %s" % nid)

    for nid in "abc":
        ok, err, st = admins[nid].request(3, fb(1, tok))
        tap.ok(ok and one(st, 5) == 3, "fence on %s (held %d ms)" % (nid, one(st, 15)), err)
    # Fenced moving keys answer TRYAGAIN; others are served.
    moved = [k for k in keys if owner1[k] == a.addr]
    s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    cmd(s, b"epoch 1\r\n")
    replies = [get_reply(s, b"get %s\r\n" % k) for k in moved[:200]]
    s.close()
    tap.ok(any(r.startswith(b"SERVER_ERROR TRYAGAIN 1") for r in replies) and
           all(r.startswith(b"SERVER_ERROR TRYAGAIN 1") or r.startswith(b"VALUE") or
               r == b"END\r\n" for r in replies),
           "a fenced arc answers TRYAGAIN, the others are served")

    for nid in "cab":   # destinations first
        ok, err, st = admins[nid].request(4, fb(1, tok))
        tap.ok(ok and one(st, 3) == 2 and one(st, 4) == 0, "commit on %s" % nid, err)

    cli.close()
    cli = Client(nodes, 2)
    lost, stale, resurrected, where = [], [], [], {}
    for k in keys:
        addr, v = cli.get(k, a.addr)
        where[addr] = where.get(addr, 0) + 1
        want = (b"v2-" + k if k in upd else b"v3-" + k if k in upd2 else
                None if k in dele else b"v1-" + k)
        if want is None:
            if v is not None:
                resurrected.append(k)
        elif v is None:
            lost.append(k)
        elif v != want:
            stale.append((k, v))
    tap.eq(lost, [], "no key lost")
    tap.eq(stale, [], "no stale value")
    tap.eq(resurrected, [], "no deleted key resurrected")
    share = where.get(cn.addr, 0) / float(len(keys))
    tap.ok(0.2 < share < 0.47, "the new node owns %.2f of the keys" % share)
    st = admins["c"].status()
    tap.ok(one(st, 11) > 0 and one(st, 12) > 0,
           "c imported %d items, %d bytes" % (one(st, 11), one(st, 12)))
    tap.ok(wait_until(lambda: all(one(admins[n].status(), 13) == 0 for n in "abc"), 15),
           "orphans 0 on every node after cleanup",
           [one(admins[n].status(), 13) for n in "abc"])
    tap.eq([stat(n.port, "misrouted") for n in nodes], [0, 0, 0], "misrouted 0")

    # ---- 4. an aborted leave of b changes nothing
    m3 = membership(3, [("a", a.addr), ("c", cn.addr)])
    tok3 = b"transition-3"
    for nid in "abc":
        ok, err, _ = admins[nid].request(1, fb(1, m3) + fb(2, tok3) + fv(3, 2))
        tap.ok(ok, "prepare leave on %s" % nid, err)
    for nid in "abc":
        admins[nid].request(2, fb(1, tok3) + fv(2, 0))
    tap.ok(wait_until(lambda: one(admins["c"].status(), 11) > 0 or
                      one(admins["a"].status(), 11) > 0, 10), "the leave copy started")
    ok, err, _ = admins["a"].request(5, fb(1, b"nope"))
    tap.ok(not ok, "abort with a wrong token is refused")
    for nid in "abc":
        ok, err, st = admins[nid].request(5, fb(1, tok3) + fv(2, 3))
        tap.ok(ok and one(st, 4) == 0 and one(st, 3) == 2, "abort on %s" % nid, err)
    tap.ok(all(one(admins[n].status(), 13) == 0 for n in "abc"),
           "no orphan after the abort (imports purged)")
    cli.close()
    cli = Client(nodes, 2)
    lost = [k for k in keys if k not in dele and cli.get(k, b.addr)[1] is None]
    tap.eq(lost, [], "nothing lost by the abort")
    cli.close()

    # ---- 5. restart: epoch back, store empty, new boot id
    boot = one(admins["b"].status(), 2)
    for ad in admins.values():
        ad.close()
    b.stop()
    b.start()
    tap.ok(wait_until(lambda: _can_connect(b.cport), 5), "b restarted")
    ad = Admin(b.cport)
    st = ad.status()
    tap.ok(one(st, 3) == 2 and one(st, 6) == 0 and one(st, 2) != boot,
           "after a restart: epoch 2, empty, new boot id")
    ad.close()

    # ---- 6. every node stops cleanly (sanitizer reports fail the exit code)
    for n in list(nodes):
        rc = n.stop()
        log = open(os.path.join(tmp, n.nid + ".log"), errors="replace").read()
        tap.ok(rc == 0 and "Sanitizer" not in log and "runtime error" not in log,
               "node %s exits 0 after SIGTERM" % n.nid, "rc %r\n%s" % (rc, log[-3000:]))


if __name__ == "__main__":
    main()
