"""ringctl's cluster administration (init, status, plan, join, leave, abort,
resume) end to end against scripted cluster-port nodes: this file run with
--fake-node is a small process that speaks the cluster port (frames +
protobuf, docs/cluster.md) and keeps a node's transition state in a file,
so every admin path (races, refusals, restarts, fault injection, resume
after a commit) is exercised independently of ringcached's handoff. Real
nodes are driven by test_admin_node.py."""

import json
import os
import random
import shutil
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))

# ---------------------------------------------------------------- protobuf


def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, value):
    """Encode one field: int -> varint, bytes/str -> length-delimited."""
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return varint(num << 3) + varint(value) if value else b""
    if isinstance(value, str):
        value = value.encode()
    return varint((num << 3) | 2) + varint(len(value)) + value


def decode(buf):
    """Decode a message into {field: [values]} (ints or bytes)."""
    out = {}
    i = 0
    while i < len(buf):
        key = 0
        shift = 0
        while True:
            b = buf[i]
            i += 1
            key |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        num, wt = key >> 3, key & 7
        if wt == 0:
            v = 0
            shift = 0
            while True:
                b = buf[i]
                i += 1
                v |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
        elif wt == 2:
            n = 0
            shift = 0
            while True:
                b = buf[i]
                i += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            v = buf[i:i + n]
            i += n
        else:
            raise ValueError("wire type %d" % wt)
        out.setdefault(num, []).append(v)
    return out


def first(msg, num, default=None):
    return msg.get(num, [default])[0]


F_HELLO, F_ADMIN_REQUEST, F_ADMIN_REPLY, F_ERROR = 1, 3, 4, 7
PH_NONE, PH_PREPARED, PH_COPYING, PH_FENCED = 0, 1, 2, 3

# ---------------------------------------------------------------- fake node


class FakeNode:
    def __init__(self, opts):
        self.o = opts
        self.lock = threading.Lock()
        self.boot = random.getrandbits(63) | 1
        self.state_path = opts["state"]
        try:
            with open(self.state_path) as f:
                self.s = json.load(f)
        except FileNotFoundError:
            self.s = {"active": 0, "pending": 0, "token": "", "phase": PH_NONE,
                      "source": False}
        self.copy_t0 = None
        with open(opts["token_file"], "rb") as f:
            self.atoken = f.read().split(b"\n")[0]

    def save(self):
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.s, f)
        os.rename(tmp, self.state_path)

    def status(self):
        s = self.s
        tr = b""
        if s["phase"] in (PH_COPYING, PH_FENCED) and s["source"]:
            total = 200
            if self.o.get("transfer_error"):
                tr = field(10, field(1, "x") + field(9, "injected transfer error"))
            else:
                el = time.monotonic() - (self.copy_t0 or time.monotonic())
                sent = total if s["phase"] == PH_FENCED else min(total, int(el * 1000))
                tr = field(10, field(1, "new") + field(2, sent) + field(3, sent * 100)
                           + field(4, total) + field(5, total * 100) + field(6, sent == total))
        return (field(1, self.o["id"]) + field(2, self.boot) + field(3, s["active"])
                + field(4, s["pending"]) + field(5, s["phase"]) + field(6, 1000)
                + field(7, 100000) + tr)

    def reply(self, ok, err=""):
        return F_ADMIN_REPLY, field(1, ok) + field(2, err) + field(3, self.status())

    def handle(self, req):
        s = self.s
        if 1 in req:                                  # Prepare
            p = decode(req[1][0])
            m = decode(first(p, 1, b""))
            epoch, tok, frm = first(m, 1, 0), first(p, 2, b"").hex(), first(p, 3, 0)
            if self.o.get("refuse_prepare"):
                return self.reply(False, "prepare refused (injected)")
            if s["pending"]:
                if s["token"] == tok:
                    return self.reply(True)
                return F_ERROR, field(1, "another transition is pending") + field(
                    2, s["active"]) + field(3, s["pending"])
            if s["active"] != 0 and s["active"] != frm:
                return self.reply(False, "active epoch %d is not %d" % (s["active"], frm))
            s.update(pending=epoch, token=tok, phase=PH_PREPARED, source=s["active"] != 0)
            self.save()
            return self.reply(True)
        if 2 in req or 3 in req:                      # StartCopy, Fence
            tok = first(decode(req.get(2, req.get(3))[0]), 1, b"").hex()
            if not s["pending"] or tok != s["token"]:
                return self.reply(False, "no such pending transition")
            if 2 in req and s["phase"] == PH_PREPARED:
                s["phase"] = PH_COPYING
                self.copy_t0 = time.monotonic()
            elif 2 in req and self.copy_t0 is None:
                self.copy_t0 = time.monotonic()
            if 3 in req:
                s["phase"] = PH_FENCED
            self.save()
            return self.reply(True)
        if 4 in req:                                  # Commit
            c = decode(req[4][0])
            tok = first(c, 1, b"").hex()
            m = first(c, 2)
            epoch = first(decode(m), 1, 0) if m is not None else 0
            if not s["pending"]:
                if m is None:
                    return self.reply(False, "commit: no pending transition")
                if s["active"] == epoch:
                    return self.reply(True)
                if s["active"] != 0:
                    return self.reply(False, "commit: no pending transition for %d" % epoch)
                s["active"] = epoch
            else:
                if tok != s["token"]:
                    return self.reply(False, "commit: token does not match")
                if s["source"] and s["phase"] != PH_FENCED:
                    return self.reply(False, "commit: source not fenced")
                s.update(active=s["pending"], pending=0, token="", phase=PH_NONE)
            self.save()
            return self.reply(True)
        if 5 in req:                                  # Abort
            tok = first(decode(req[5][0]), 1, b"").hex()
            if s["pending"] and tok == s["token"]:
                s.update(pending=0, token="", phase=PH_NONE)
                self.save()
            return self.reply(True)
        if 6 in req:
            return self.reply(True)
        return F_ERROR, field(1, "unknown admin request")


def read_frame(sock):
    hdr = b""
    while len(hdr) < 16:
        d = sock.recv(16 - len(hdr))
        if not d:
            return None
        hdr += d
    typ, cid, ln = hdr[3], hdr[4:12], struct.unpack(">I", hdr[12:16])[0]
    body = b""
    while len(body) < ln:
        d = sock.recv(ln - len(body))
        if not d:
            return None
        body += d
    return typ, cid, body


def send_frame(sock, typ, cid, body):
    sock.sendall(b"RC\x01" + bytes([typ]) + cid + struct.pack(">I", len(body)) + body)


def fake_node_main(argv):
    opts = {"refuse_prepare": False, "transfer_error": False}
    it = iter(argv)
    for a in it:
        if a == "--refuse-prepare":
            opts["refuse_prepare"] = True
        elif a == "--transfer-error":
            opts["transfer_error"] = True
        else:
            opts[a.lstrip("-").replace("-", "_")] = next(it)
    node = FakeNode(opts)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            f = read_frame(self.request)
            if f is None or f[0] != F_HELLO:
                return
            hello = decode(f[2])
            if first(hello, 2, b"") != node.atoken:
                send_frame(self.request, F_ERROR, f[1], field(1, "bad admin token"))
                return
            with node.lock:
                send_frame(self.request, F_HELLO, f[1], field(4, opts["id"])
                           + field(5, node.boot) + field(6, node.s["active"]))
            while True:
                f = read_frame(self.request)
                if f is None:
                    return
                with node.lock:
                    typ, body = node.handle(decode(f[2]))
                send_frame(self.request, typ, f[1], body)
                if typ == F_ERROR:
                    return

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    socketserver.ThreadingTCPServer.daemon_threads = True
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", int(opts["port"])), Handler)
    srv.serve_forever()


if len(sys.argv) > 1 and sys.argv[1] == "--fake-node":
    fake_node_main(sys.argv[2:])
    sys.exit(0)

# ---------------------------------------------------------------- the test

from rctest import (Tap, wait_until, can_connect, BUILDDIR,  # noqa: E402
                    CLUSTER_PORT_OFFSET, free_cluster_ports)

RINGCTL = os.path.join(BUILDDIR, "client", "ringctl")


def free_cport():
    """A cluster port whose client port (port - 10000) is valid, both below
    the ephemeral range (tests/it/rctest.py)."""
    return free_cluster_ports() + CLUSTER_PORT_OFFSET


class Fake:
    def __init__(self, tmp, nid, *flags):
        self.id = nid
        self.cport = free_cport()
        self.addr = "127.0.0.1:%d" % (self.cport - 10000)
        self.state = os.path.join(tmp, "%s.json" % nid)
        self.tmp = tmp
        self.proc = None
        self.start(*flags)

    def start(self, *flags):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--fake-node", "--id", self.id,
             "--port", str(self.cport), "--state", self.state,
             "--token-file", os.path.join(self.tmp, "token")] + list(flags),
            stdin=subprocess.DEVNULL)
        if not wait_until(lambda: can_connect(self.cport), 10):
            raise RuntimeError("fake node %s did not start" % self.id)

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def restart(self, *flags):
        self.stop()
        wait_until(lambda: not can_connect(self.cport), 5)
        self.start(*flags)

    def st(self):
        with open(self.state) as f:
            return json.load(f)


def main():
    t = Tap()
    tmp = tempfile.mkdtemp(prefix="rc-admin-")
    fakes = {}
    procs = []
    all_err = []
    try:
        with open(os.path.join(tmp, "token"), "w") as f:
            f.write("s3cret-admin-token\n")
        with open(os.path.join(tmp, "bad-token"), "w") as f:
            f.write("wrong\n")
        store = os.path.join(tmp, "store")
        for nid in ("a", "b", "c", "d", "e", "f"):
            fakes[nid] = Fake(tmp, nid)
        members = os.path.join(tmp, "c.members")
        with open(members, "w") as f:
            f.write("epoch 5\nvnodes 160\nreplicas 1\n")
            for nid in ("a", "b", "c"):
                f.write("node %s %s\n" % (nid, fakes[nid].addr))

        def ctl(*args, env=None, token="token", timeout=60):
            e = dict(os.environ)
            e.pop("RINGCTL_EXIT_AFTER", None)
            e.update(env or {})
            p = subprocess.run([RINGCTL, "--store", store, "--token-file",
                                os.path.join(tmp, token), "--timeout", "2000"] + list(args),
                               capture_output=True, text=True, timeout=timeout, env=e)
            all_err.append(p.stderr)
            return p.returncode, p.stdout, p.stderr

        def store_file(name):
            try:
                with open(os.path.join(store, name)) as f:
                    return f.read()
            except FileNotFoundError:
                return None

        def epochs(*ids):
            return [fakes[i].st()["active"] for i in ids]

        def pendings(*ids):
            return [fakes[i].st()["pending"] for i in ids]

        # init
        rc, out, err = ctl("init", "--members", members)
        rows = [l.split("\t") for l in out.splitlines()]
        t.ok(rc == 0 and sorted(r[0] for r in rows) == ["a", "b", "c"]
             and all(r[2] == "ok" for r in rows) and epochs("a", "b", "c") == [1, 1, 1]
             and "\nepoch 1\n" in (store_file("active.members") or ""),
             "init stores epoch 1 (the file's epoch replaced) and commits it to every node",
             (rc, out, err))
        rc, out, err = ctl("init", "--members", members)
        t.ok(rc == 3 and "already" in err, "a second init exits 3", (rc, err))

        # status
        rc, out, err = ctl("status")
        lines = out.splitlines()
        rows = [l.split("\t") for l in lines[4:]]
        t.ok(rc == 0 and lines[0] == "epoch\t1" and lines[1] == "pending\tnone"
             and lines[2] == "phase\tNONE" and lines[3].startswith("id\taddr\tstate\tactive\tpending\tphase\titems\tbytes\tshare")
             and len(rows) == 3 and all(r[2] == "up" and r[3] == "1" and r[6] == "1000"
                                        for r in rows)
             and abs(sum(float(r[8]) for r in rows) - 1.0) < 0.001,
             "status: store epoch, no pending, every node up at epoch 1, shares sum to 1",
             (rc, out, err))
        rc, out, err = ctl("--human", "status")
        t.ok(rc == 0 and "%" in out and "\t" not in out, "status --human aligns columns",
             (rc, out))
        rc, out, err = ctl("status", token="bad-token")
        t.ok(rc == 1 and "token" in err and out.count("\tdown\t") == 3,
             "status with a wrong token: nodes refuse, reported down, exit 1", (rc, out, err))

        # plan
        rc, out, err = ctl("plan", "join", "d", fakes["d"].addr)
        kv = dict(l.split("\t", 1) for l in out.splitlines() if l.count("\t") == 1)
        t.ok(rc == 0 and 0.1 < float(kv.get("primary_moved", 0)) < 0.5
             and 0 < float(kv.get("move_items_estimate", "0")) < 3000
             and "estimate" in err and store_file("pending.meta") is None,
             "plan join: moved fraction about 1/4, an item estimate, no side effect",
             (rc, out, err))
        rc, out, err = ctl("plan", "leave", "zz")
        t.ok(rc == 2, "plan leave of a non-member is bad input (2)", (rc, err))

        # join
        rc, out, err = ctl("join", "d", fakes["d"].addr)
        kv = dict(l.split("\t", 1) for l in out.splitlines() if l.count("\t") == 1)
        t.ok(rc == 0 and kv.get("epoch") == "2" and int(kv.get("moved_items", 0)) > 0
             and epochs("a", "b", "c", "d") == [2, 2, 2, 2]
             and store_file("pending.meta") is None and store_file("pending.members") is None
             and "node d " in (store_file("active.members") or "")
             and store_file("history/epoch-2.members") is not None,
             "join: PREPARE..COMMIT; store and every node at epoch 2; summary printed",
             (rc, out, err[-2000:]))

        # two admins racing
        env = {"RINGCTL_EXIT_AFTER": "prepare"}
        base = [RINGCTL, "--store", store, "--token-file", os.path.join(tmp, "token")]
        e = dict(os.environ)
        e.update(env)
        p1 = subprocess.Popen(base + ["join", "e", fakes["e"].addr], env=e,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        p2 = subprocess.Popen(base + ["join", "f", fakes["f"].addr], env=e,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs += [p1, p2]
        o1, e1 = p1.communicate(timeout=60)
        o2, e2 = p2.communicate(timeout=60)
        codes = sorted([p1.returncode, p2.returncode])
        loser_err = e1 if p1.returncode == 3 else e2
        t.ok(codes == [3, 4] and "pending" in loser_err and "epoch 2 -> 3" in loser_err,
             "two admins race: exactly one proceeds (held after PREPARE, exit 4), the other "
             "exits 3 and prints the winner's pending", (codes, e1[-800:], e2[-800:]))
        winner = "e" if p1.returncode == 4 else "f"
        meta = store_file("pending.meta") or ""
        t.ok("phase PREPARED" in meta and "boot a " in meta
             and fakes[winner].st()["pending"] == 3,
             "the winner's pending is in the store with boot ids; nodes are prepared", meta)
        rc, out, err = ctl("status")
        t.ok(rc == 0 and out.splitlines()[1].startswith("pending\t3\tPREPARED\tjoin " + winner)
             and out.splitlines()[2] == "phase\tPREPARED",
             "status shows the pending transition", out)
        rc, out, err = ctl("abort")
        t.ok(rc == 0 and store_file("pending.meta") is None
             and pendings("a", "b", "c", "d", winner) == [0, 0, 0, 0, 0]
             and epochs("a", "b", "c", "d") == [2, 2, 2, 2],
             "abort: pending deleted in the store, every node dropped it, epoch 2 untouched",
             (rc, out, err))
        rc, out, err = ctl("abort")
        t.ok(rc == 0 and "nothing pending" in out, "abort again is a no-op (idempotent)",
             (rc, out, err))

        # admin dies after COPY, then resume
        rc, out, err = ctl("join", "e", fakes["e"].addr, env={"RINGCTL_EXIT_AFTER": "copy"})
        t.ok(rc == 4 and "phase COPYING" in (store_file("pending.meta") or ""),
             "RINGCTL_EXIT_AFTER=copy exits 4 with phase COPYING recorded", (rc, err[-500:]))
        rc, out, err = ctl("resume")
        t.ok(rc == 0 and epochs("a", "b", "c", "d", "e") == [3] * 5
             and store_file("pending.meta") is None and "\nepoch 3\n" in store_file("active.members"),
             "resume after COPY finishes the join (epoch 3)", (rc, out, err[-1500:]))

        # admin dies after FENCE, then resume: a leave
        rc, out, err = ctl("leave", "e", env={"RINGCTL_EXIT_AFTER": "fence"})
        t.ok(rc == 4 and "phase FENCED" in (store_file("pending.meta") or ""),
             "RINGCTL_EXIT_AFTER=fence exits 4 with phase FENCED recorded", (rc, err[-500:]))
        rc, out, err = ctl("resume")
        t.ok(rc == 0 and epochs("a", "b", "c", "d", "e") == [4] * 5
             and "node e " not in store_file("active.members"),
             "resume after FENCE commits the leave (epoch 4 without e)", (rc, out, err[-1500:]))

        # the store committed, the nodes never heard: resume re-sends Commit
        rc, out, err = ctl("join", "e", fakes["e"].addr, env={"RINGCTL_EXIT_AFTER": "fence"})
        pend = store_file("pending.members")
        with open(os.path.join(store, "active.members"), "w") as f:
            f.write("# rev 9999\n" + pend.split("\n", 1)[1])
        os.unlink(os.path.join(store, "pending.members"))
        rc, out, err = ctl("resume")
        t.ok(rc == 0 and epochs("a", "b", "c", "d", "e") == [5] * 5
             and store_file("pending.meta") is None and "committed" in err,
             "commit recorded in the store but not delivered: resume re-sends Commit",
             (rc, out, err[-1500:]))
        rc, out, err = ctl("abort")
        t.ok(rc == 0 and "nothing pending" in out, "abort after the commit has nothing to do",
             (rc, out))

        # a node refuses PREPARE
        fakes["f"].restart("--refuse-prepare")
        rc, out, err = ctl("join", "f", fakes["f"].addr)
        t.ok(rc == 1 and "refused" in err and store_file("pending.meta") is None
             and "phase ABORTED" in (store_file("aborted.meta") or "")
             and pendings("a", "b", "c", "d", "e") == [0] * 5 and epochs("a") == [5],
             "a node refusing PREPARE: abort, exit 1, nobody keeps a pending", (rc, err[-1000:]))
        fakes["f"].restart()

        # an unreachable node
        dead = "127.0.0.1:%d" % (free_cport() - 10000)
        rc, out, err = ctl("join", "g", dead)
        t.ok(rc == 1 and "Connection refused" in err and store_file("pending.meta") is None,
             "an unreachable node during PREPARE: abort, exit 1", (rc, err[-800:]))

        # a node restarted between PREPARE and resume
        rc, out, err = ctl("join", "f", fakes["f"].addr, env={"RINGCTL_EXIT_AFTER": "prepare"})
        fakes["a"].restart()
        rc, out, err = ctl("resume")
        t.ok(rc == 1 and "restarted" in err and store_file("pending.meta") is None
             and pendings("a", "b", "f") == [0, 0, 0] and epochs("a", "f") == [5, 0],
             "a node restarted since PREPARE: resume aborts instead and says so",
             (rc, out, err[-1000:]))

        # a transfer error during COPY
        fakes["c"].restart("--transfer-error")
        rc, out, err = ctl("join", "f", fakes["f"].addr)
        t.ok(rc == 1 and "injected transfer error" in err and store_file("pending.meta") is None
             and pendings("a", "c", "f") == [0, 0, 0],
             "a transfer error during COPY: abort, exit 1", (rc, err[-1000:]))
        fakes["c"].restart()

        # usage and malformed store files
        rc1 = ctl("join", "a", fakes["a"].addr)[0]
        rc2 = ctl("leave", "nobody")[0]
        rc3 = ctl("join")[0]
        rc4 = subprocess.run([RINGCTL, "--store", store, "status"], capture_output=True).returncode
        t.ok([rc1, rc2, rc3, rc4] == [2, 2, 2, 2],
             "join of a member, leave of a stranger, missing args, no token: exit 2",
             [rc1, rc2, rc3, rc4])
        with open(os.path.join(store, "pending.meta"), "w") as f:
            f.write("# rev 77\ntoken 00\nphase PREPARED\n")
        rc, out, err = ctl("status")
        t.ok(rc == 2 and os.path.join(store, "pending.meta") + ":2: token" in err,
             "a malformed pending.meta: file:line and exit 2", (rc, err))
        os.unlink(os.path.join(store, "pending.meta"))
        with open(os.path.join(store, "active.members"), "a") as f:
            f.write("node broken\n")
        rc, out, err = ctl("status")
        t.ok(rc == 2 and "active.members:" in err, "a malformed active.members: file:line, exit 2",
             (rc, err))
        bad = [e for e in all_err + [e1, e2]
               if "Sanitizer" in e or "runtime error" in e]
        t.ok(not bad, "no sanitizer report from any ringctl run", "\n".join(bad)[:3000])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for fk in fakes.values():
            fk.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    t.done()


main()
