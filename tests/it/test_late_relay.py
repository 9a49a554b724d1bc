"""A relayed write that timed out must not run later (server/forward.c
up_fail): a plain client at b writes a key whose primary is a while a is
cut off from b (nftables in a's network namespace, clients still reach
both); b's relay gets no reply, and after the forward timeout the client is
told `SERVER_ERROR forward timeout`. The partition heals and the client
writes a newer value straight at a. Before the fix b closed its upstream
normally, so TCP kept retransmitting the old request and delivered it
after the heal: a ran the stale write over the newer one (a value older
than an acknowledged write, seconds later; the nemesis counted such reads
as stale). Now b resets the upstream on a timeout and the request is
gone. R=1, two nodes, each in a namespace of its own (tests/it/netns.py).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import netns  # noqa: E402

WATCH_SECS = 8.0     # longer than TCP's retransmissions reach after the heal
ROUNDS = 3


def scenario(t):
    label = "a relayed write that timed out"
    try:
        lab = netns.NetLab(["a", "b"]).setup()
    except netns.Unavailable as ex:
        t.skip(label, str(ex))
        return
    cl = None
    try:
        lab.enter()
        cl, ok = netns.start_cluster(t, lab, ["a", "b"], replicas=1, mem=32)
        if not ok:
            return
        own = lg.locate(cl.store_active(), ["lr-%d" % i for i in range(200)])
        keys = [k for k, o in sorted(own.items()) if o[0] == "a"][:ROUNDS]
        a, b = cl.nodes["a"].addr, cl.nodes["b"].addr
        for rnd, key in enumerate(keys):
            old, new = b"old-%d" % rnd, b"new-%d" % rnd
            cb = lg.Conn(b, 10.0)
            lab.partition("a", "peers")
            t0 = time.monotonic()
            line = cb.store("set", key, old)
            waited = time.monotonic() - t0
            cb.close()
            t.ok(line.startswith(b"SERVER_ERROR"),
                 "round %d: the relayed set at b, a cut off: %s after %.1f s"
                 % (rnd, line.decode(errors="replace"), waited), line)
            lab.heal("a")

            def stored():
                c = lg.Conn(a, 2.0)
                try:
                    return c.store("set", key, new) == b"STORED"
                except (OSError, ConnectionError, lg.ProtoError):
                    return False
                finally:
                    c.close()
            t.ok(lg.wait_for(stored, 10, 0.05), "round %d: after the heal the newer value is "
                 "stored at a" % rnd)
            seen = set()
            deadline = time.monotonic() + WATCH_SECS
            c = lg.Conn(a, 5.0)
            try:
                c.declare(1)
                while time.monotonic() < deadline:
                    vals, _ = c.get_multi([key])
                    seen.add(vals.get(key) if vals is not None else None)
                    time.sleep(0.02)
            finally:
                c.close()
            t.ok(seen == {new}, "round %d: for %.0f s after the heal a holds only the newer "
                 "value (the timed-out write never ran)" % (rnd, WATCH_SECS), seen)
    finally:
        if cl is not None:
            lg.close_cluster(t, cl)
        lab.close()


def main():
    lg.tap_main(scenario, 200, "a relayed write that timed out")


if __name__ == "__main__":
    main()
