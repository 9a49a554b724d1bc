"""Replica writes are fenced by epoch and sender (issue 26, findings f18
and f20's write half; docs/cluster.md "Replication").

`rc_set` / `rc_del` name the epoch they were sent in and the sender's
node id; a replica applies one only from the key's acting primary of its
active epoch (or of the epoch before it, from a sender that has not
committed yet), and refuses anything else with `SERVER_ERROR fenced
<reason> epoch <n>`, leaving the key as it was. The test speaks to node b
as a peer itself (the rc_peer challenge, as the nodes do), R=2, a b c:
1. images of a key whose owners are [a, b], from c (not its primary), and
   from a claiming an epoch b never saw, are refused; b's copy is unchanged;
   an old-format image (no epoch, no sender) gets a protocol error;
2. f18, made deterministic: a is killed, `ringctl remove --failed a`
   commits epoch 2 = {b, c}; half of a's keys are deleted through b
   (DELETED), the other half rewritten; then a's late post-images arrive
   at b (epoch 1, sender a, CAS above anything b holds, as a's counter
   would be): every one is refused, no acknowledged delete is served again
   and b and c agree on every key.
3. f18 with real processes (root: network namespaces, tests/it/netns.py,
   and a cgroup freezer, tests/it/freezer.py): a is cut from its peers,
   100 sets of v1 are pipelined to it (applied there, their images to b
   wait in a's TCP send queue), a is frozen before its forward timeout
   could reset that connection, `remove --failed a` commits epoch 2, half
   the keys are deleted through b, then the cut heals with a still frozen:
   its kernel retransmits the images to b. Once a's send queue toward b is
   empty, no acknowledged delete may be served again and b and c must
   agree on every key (the finding: 100/100 and 200/200 with the old code).
On a build without the fencing the images are sent in the format it
speaks (it has no epoch to check), and b applies them: the test fails.
"""
import hashlib
import hmac
import os
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import freezer  # noqa: E402
import loadgen as lg  # noqa: E402
import netns  # noqa: E402

NKEYS = 40          # keys with owners [a, b]
BIG = 10 ** 12      # a CAS above anything minted in this test


class Peer:
    """A raw peer connection to one node (rc_peer proven as peer_id)."""

    def __init__(self, cl, node, node_id, peer_id=b"x"):
        self.c = lg.Conn(node.addr, 10.0)
        r = self.c.simple("rc_peer").split()
        if len(r) != 3 or r[0] != b"NONCE" or r[1] != node_id:
            raise lg.ProtoError("rc_peer: %r" % (r,))
        with open(cl.token_file, "rb") as f:
            token = f.read().strip()
        msg = b"ringcache rc_peer v2"
        for fld in (b"ringcache", node_id, r[2], peer_id):
            msg += struct.pack(">I", len(fld)) + fld
        proof = hmac.new(token, msg, hashlib.sha256).hexdigest().encode()
        r = self.c.simple("rc_peer %s %s" % (peer_id.decode(), proof.decode()))
        if r != b"OK":
            raise lg.ProtoError("rc_peer proof: %r" % r)
        # A server without fencing (the base build) takes rc_del with 2
        # arguments only: anything longer is a format error.
        r = self.c.simple("rc_del fence-probe 1 1 a")
        self.legacy = r == b"CLIENT_ERROR bad command line format"

    def set(self, key, val, cas, epoch, sender):
        tail = b"" if self.legacy else b" %d %s" % (epoch, sender.encode())
        self.c.send(b"rc_set %s 0 0 %d %d%s\r\n%s\r\n" % (key.encode(), cas, len(val), tail, val))
        return self.c.readline()

    def delete(self, key, cas, epoch, sender):
        tail = b"" if self.legacy else b" %d %s" % (epoch, sender.encode())
        self.c.send(b"rc_del %s %d%s\r\n" % (key.encode(), cas, tail))
        return self.c.readline()

    def close(self):
        self.c.close()


def read(node, key, epoch):
    """(value or None, cas) of key at node itself (a declared connection:
    an owner serves its own copy)."""
    c = lg.Conn(node.addr, 5.0)
    try:
        c.declare(epoch)
        c.send(b"gets " + key.encode() + b"\r\n")
        line = c.readline()
        if line == b"END":
            return None, 0
        p = line.split()
        if p[0] != b"VALUE":
            raise lg.ProtoError("gets %s at %s: %r" % (key, node.id, line))
        val = c.readn(int(p[3]))
        if c.readline() != b"END":
            raise lg.ProtoError("gets: no END")
        return val, int(p[4])
    finally:
        c.close()


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2)
    peer = None
    try:
        if not ok:
            return
        a, b, c = cl.nodes["a"], cl.nodes["b"], cl.nodes["c"]
        own = lg.locate(cl.store_active(), ["fi-%d" % i for i in range(600)])
        keys = [k for k, o in sorted(own.items()) if o == ("a", "b")][:NKEYS + 1]
        t.ok(len(keys) == NKEYS + 1, "%d keys with owners [a, b]" % len(keys))
        ca = lg.Conn(a.addr, 5.0)
        stored = [ca.store("set", k, b"v0") for k in keys]
        ca.close()
        t.ok(all(r == b"STORED" for r in stored), "v0 of every key set through a (replicated "
             "to b)", set(stored))
        peer = Peer(cl, b, b"b")
        t.diag("b %s the epoch and sender of replica writes" %
               ("does not take" if peer.legacy else "takes"))

        # ---- 1. images from a non-primary, and from an epoch b never saw.
        k0 = keys[0]
        before = read(b, k0, 1)
        t.ok(before[0] == b"v0", "b holds v0 of %s" % k0, before)
        r1 = peer.set(k0, b"from-c", BIG, 1, "c")
        r2 = peer.delete(k0, BIG, 1, "c")
        after = read(b, k0, 1)
        t.ok(r1.startswith(b"SERVER_ERROR fenced not_primary epoch 1") and
             r2.startswith(b"SERVER_ERROR fenced not_primary epoch 1"),
             "rc_set and rc_del of a key whose primary is a, sent by c: refused (%r, %r)"
             % (r1, r2), (r1, r2))
        t.ok(after == before, "b's copy is unchanged: %r" % (after,), (before, after))
        r3 = peer.set(k0, b"from-the-future", BIG, 7, "a")
        after = read(b, k0, 1)
        t.ok(r3.startswith(b"SERVER_ERROR fenced ahead epoch 1") and after == before,
             "an image from a claiming epoch 7: refused (%r), b unchanged" % r3, (r3, after))
        peer.c.send(b"rc_set %s 0 0 %d 3\r\nold\r\n" % (k0.encode(), BIG))
        r4 = peer.c.readline()
        after = read(b, k0, 1)
        t.ok(r4.startswith(b"CLIENT_ERROR rc_set without the sender's epoch") and after == before,
             "an old-format image (no epoch, no sender): a protocol error (%r), b unchanged"
             % r4, (r4, after))
        t.ok(peer.c.simple("version").startswith(b"VERSION"),
             "the peer connection keeps working after the refusals")

        # ---- 2. f18: a's late images after the failover.
        keys = keys[1:]
        a.stop(signal.SIGKILL)
        rc, out, err = cl.ctl("remove", "--failed", "a")
        t.ok(rc == 0 and cl.store_epoch() == 2, "a killed, remove --failed a: epoch 2 = {b, c}",
             (rc, lg.tail(out), lg.tail(err)))
        conv = cl.converged(2, ["b", "c"])
        t.ok(all(v == (2, 0) for v in conv.values()), "b and c at epoch 2", conv)
        gone, kept = keys[:NKEYS // 2], keys[NKEYS // 2:]
        cb = lg.Conn(b.addr, 5.0)
        dels = [cb.delete(k) for k in gone]
        sets = [cb.store("set", k, b"v2") for k in kept]
        cb.close()
        t.ok(all(r == b"DELETED" for r in dels) and all(r == b"STORED" for r in sets),
             "through b: %d deletes DELETED, %d sets of v2 STORED" % (len(gone), len(kept)),
             (set(dels), set(sets)))
        replies = [peer.set(k, b"late-v1", BIG + i, 1, "a") for i, k in enumerate(keys)]
        replies += [peer.delete(k, BIG + 100 + i, 1, "a") for i, k in enumerate(kept[:5])]
        refused = [r for r in replies if r.startswith(b"SERVER_ERROR fenced old_epoch epoch 2")]
        t.ok(len(refused) == len(replies),
             "a's %d late images (epoch 1, sender a): %d refused as old_epoch"
             % (len(replies), len(refused)), set(replies))
        resurrected = [k for k in gone if read(b, k, 2)[0] is not None]
        divergent = [k for k in keys if read(b, k, 2)[0] != read(c, k, 2)[0]]
        stale = [k for k in kept if read(b, k, 2)[0] != b"v2"]
        t.ok(not resurrected, "0 of %d acknowledged deletes served again at b (resurrected: %d)"
             % (len(gone), len(resurrected)), resurrected[:5])
        t.ok(not divergent, "b and c agree on all %d keys (divergent: %d)"
             % (len(keys), len(divergent)), divergent[:5])
        t.ok(not stale, "every rewritten key holds v2 at b (stale: %d)" % len(stale), stale[:5])
    finally:
        if peer is not None:
            peer.close()
        lg.close_cluster(t, cl)


def send_queue(lab, nid, addr):
    """Bytes node nid's kernel still holds unacknowledged toward addr."""
    r = subprocess.run(lab.exec_argv(nid, ["ss", "-tnH", "dst", "%s:%d" % addr]),
                       capture_output=True, text=True, timeout=10)
    total = 0
    for line in r.stdout.splitlines():
        p = line.split()
        if len(p) >= 3 and p[2].isdigit():
            total += int(p[2])
    return total


def frozen_primary(t):
    label = "f18: a frozen primary's images retransmitted after the failover"
    why = freezer.unavailable()
    if why:
        t.skip(label, why)
        return
    try:
        lab = netns.NetLab(["a", "b", "c"]).setup()
    except netns.Unavailable as ex:
        t.skip(label, str(ex))
        return
    cl = None
    try:
        lab.enter()
        cl, ok = netns.start_cluster(t, lab, ["a", "b", "c"], replicas=2, mem=32)
        if not ok:
            return
        a, b, c = cl.nodes["a"], cl.nodes["b"], cl.nodes["c"]
        own = lg.locate(cl.store_active(), ["ff-%d" % i for i in range(1500)])
        keys = [k for k, o in sorted(own.items()) if o == ("a", "b")][:100]
        ca = lg.Conn(a.addr, 5.0)
        stored = [ca.store("set", k, b"v0") for k in keys]
        ca.close()
        t.ok(len(keys) == 100 and all(r == b"STORED" for r in stored),
             "%d keys with owners [a, b]: v0 set through a" % len(keys), set(stored))
        sets0 = int(lg.node_stats(a.addr)["cmd_set"])
        lab.partition("a", "peers")
        cv = lg.Conn(a.addr, 5.0)
        cv.send(b"".join(b"set %s 0 0 2\r\nv1\r\n" % k.encode() for k in keys))
        # a applies them and queues their images to b, which the cut holds
        # in a's kernel; a must freeze before its 1 s forward timeout.
        applied = lg.wait_for(lambda: int(lg.node_stats(a.addr)["cmd_set"]) >= sets0 + len(keys),
                              0.6, 0.01)
        queued = send_queue(lab, "a", b.addr)
        with freezer.Frozen(a.pid, "a"):
            t.ok(applied and queued > 0, "a applied the %d sets of v1 and froze with %d bytes of "
                 "images queued toward b" % (len(keys), queued), (applied, queued))
            rc, out, err = cl.ctl("remove", "--failed", "a")
            t.ok(rc == 0 and cl.store_epoch() == 2,
                 "remove --failed a (frozen): epoch 2 = {b, c}", (rc, lg.tail(out), lg.tail(err)))
            conv = cl.converged(2, ["b", "c"])
            t.ok(all(v == (2, 0) for v in conv.values()), "b and c at epoch 2", conv)
            gone = keys[: len(keys) // 2]
            cb = lg.Conn(b.addr, 5.0)
            dels = [cb.delete(k) for k in gone]
            cb.close()
            t.ok(all(r == b"DELETED" for r in dels),
                 "%d keys deleted through b: DELETED" % len(gone), set(dels))
            lab.heal("a")
            drained = lg.wait_for(lambda: send_queue(lab, "a", b.addr) == 0, 30, 0.1)
            t.ok(drained, "the cut healed, a still frozen: its kernel delivered the queued images "
                 "to b (send queue toward b empty)")

            def counts():
                res = [k for k in gone if read(b, k, 2)[0] is not None or
                       read(c, k, 2)[0] is not None]
                div = [k for k in keys if read(b, k, 2)[0] != read(c, k, 2)[0]]
                return res, div
            # b reads what its kernel acknowledged at once; a harm shows
            # within this window on a build without the fencing.
            deadline = time.monotonic() + 2.0
            res, div = counts()
            while not res and not div and time.monotonic() < deadline:
                time.sleep(0.1)
                res, div = counts()
            t.ok(not res, "0 of %d acknowledged deletes served again (resurrected: %d)"
                 % (len(gone), len(res)), res[:5])
            t.ok(not div, "b and c agree on all %d keys (divergent: %d)" % (len(keys), len(div)),
                 div[:5])
        cv.close()
    finally:
        if cl is not None:
            lg.close_cluster(t, cl)
        lab.close()


def main():
    lg.tap_main([scenario, frozen_primary], 240, "fenced replica writes")


if __name__ == "__main__":
    main()
