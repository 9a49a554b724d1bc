"""The handoff's adaptive throttle (issue 23) on real joins. R=1, a b c hold
48000 keys of 1 KB; every node runs with -o copy_throttle_floor=1 (MiB/s):

- d joins with no client load at --rate 2 (MiB/s): exit 0; on the sources
  the controller ran (copy_throttle_decisions grew), never cut
  (copy_throttle_cuts unchanged) and the least rate of the copy is the
  cap, above the floor;
- e joins at --rate 50 under a heavy pipelined get
  load on every node (a subprocess), after 2.5 s of it (the controller's
  baseline is the p99 of the 2 s before a copy): exit 0; the controller
  cut the rate on a source (copy_throttle_cuts grew), whose least rate
  is then under the cap and not under the floor; every key reads back;
- a second cluster with -o copy_throttle=off joins d under the same load
  (2.5 s of it first, too):
  exit 0, no decision and no cut, `stats settings` says off, the rate
  shown is ringctl's default, unlimited (0), every key reads back;
- bad values of the two options stop the start with one line, exit 2."""
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

NKEYS = 48000
VSIZE = 1000
MIB = 1 << 20
FLOOR = 1  # MiB/s
CAP = 2    # MiB/s, the unloaded join
CAP_LOADED = 50  # MiB/s, the loaded one
PIPE = 100  # gets a batch of the load


def key(i):
    return "ct-%d" % i


VALUE = b"x" * VSIZE


# ---------------------------------------------------------------- the load (a subprocess)

def load_main(addrs):
    """Pipelined gets of the test's keys to every address until killed:
    PIPE gets a write, then their replies (each ends in END; the values
    are x's, so END\\r\\n is only ever a terminator)."""
    def run(addr, seed):
        s = socket.create_connection(lg.parse_addr(addr), 10.0)
        i = seed
        while True:
            req = []
            for _ in range(PIPE):
                i = (i * 1103515245 + 12345) % (1 << 31)
                req.append(b"get %s\r\n" % key(i % NKEYS).encode())
            s.sendall(b"".join(req))
            n, tail = 0, b""
            while n < PIPE:
                b = s.recv(1 << 20)
                if not b:
                    return
                buf = tail + b
                n += buf.count(b"END\r\n")
                tail = buf[-4:]
    ts = [threading.Thread(target=run, args=(a, k), daemon=True) for k, a in enumerate(addrs)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()


class Load:
    """load_main in a subprocess against the given nodes."""

    def __init__(self, nodes):
        self.nodes = nodes
        self.proc = lg.track(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--load"] + [n.addr_s for n in nodes],
            stdin=subprocess.DEVNULL))

    def running(self, t, gets=20000):
        """Whether every node served `gets` more gets within 20 s."""
        base = {n.id: gets_of(n) for n in self.nodes}
        ok = lg.wait_for(lambda: self.proc.poll() is None and all(
            gets_of(n) - base[n.id] >= gets for n in self.nodes), 20, 0.1)
        return t.ok(ok, "the pipelined load runs on %s" % " ".join(n.id for n in self.nodes),
                    {n.id: gets_of(n) - base[n.id] for n in self.nodes})

    def stop(self):
        lg.stop_proc(self.proc, 10.0)


def gets_of(node):
    return int(lg.node_stats(node.addr).get("cmd_get", 0))


# ---------------------------------------------------------------- helpers

FIELDS = ("copy_throttle_p99_us", "copy_throttle_baseline_us", "copy_throttle_decisions",
          "copy_throttle_cuts", "copy_throttle_rises", "copy_throttle_cuts_wait",
          "copy_rate_bytes", "copy_rate_min_bytes", "copy_throttle_wait_us",
          "copy_throttle_wait_baseline_us")


def throttle_stats(cl, ids):
    out = {}
    for nid in ids:
        st = lg.node_stats(cl.nodes[nid].addr)
        out[nid] = {f: int(st.get(f, -1)) for f in FIELDS}
    return out


def fill(t, cl):
    c = lg.Conn(cl.nodes["a"].addr, 10.0)
    try:
        for j in range(0, NKEYS, 200):
            c.send(b"".join(b"set %s 0 0 %d noreply\r\n%s\r\n" % (key(i).encode(), VSIZE, VALUE)
                            for i in range(j, min(j + 200, NKEYS))))
        c.send(b"mn\r\n")
        return t.ok(c.readline() == b"MN", "%d keys of 1 KB written" % NKEYS)
    finally:
        c.close()


def join(t, cl, nid, args, timeout=180):
    """ringctl join nid (args before the operands); exit 0 within timeout."""
    n = cl.add(nid)
    p = cl.ctl_bg(*(["join"] + args + [nid, n.addr_s]))
    try:
        out, err = p.communicate(timeout=timeout)
    except Exception as e:  # noqa: BLE001
        lg.stop_proc(p, 10.0)
        out, err = "", str(e)
    return t.ok(p.returncode == 0, "ringctl join %s %s: exit 0" % (" ".join(args), nid),
                (p.returncode, lg.tail(err)))


def all_readable(t, cl, via):
    bad = []
    c = lg.Conn(cl.nodes[via].addr, 10.0)
    try:
        for j in range(0, NKEYS, 100):
            part = [key(i) for i in range(j, min(j + 100, NKEYS))]
            vals, err = c.get_multi(part)
            bad.extend(k for k in part if (vals or {}).get(k) != VALUE)
    finally:
        c.close()
    t.ok(not bad, "every key reads back through %s: %d wrong" % (via, len(bad)), bad[:5])


def delta(after, before, nid, f):
    return after[nid][f] - before[nid][f]


def join_under_load(t, cl, src, nid, args):
    """Join nid (ringctl args) while a pipelined load runs on src, which it
    starts 2.5 s before: the baseline is the p99 of the 2 s before a copy,
    a window of that length under the load, not a wait for anything.
    Returns src's throttle stats before and after, or None."""
    load = Load([cl.nodes[n] for n in src])
    try:
        if not load.running(t):
            return None
        time.sleep(2.5)
        before = throttle_stats(cl, src)
        ok = join(t, cl, nid, args)
        after = throttle_stats(cl, src)
    finally:
        load.stop()
    return (before, after) if ok else None


# ---------------------------------------------------------------- scenarios

def throttle_on(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"],
                              node_args=["-o", "copy_throttle_floor=%d" % FLOOR])
    try:
        if not ok or not fill(t, cl):
            return
        src = ["a", "b", "c"]
        s0 = throttle_stats(cl, src)
        if not join(t, cl, "d", ["--rate", str(CAP)]):
            return
        s1 = throttle_stats(cl, src)
        t.ok(sum(delta(s1, s0, n, "copy_throttle_decisions") for n in src) > 0,
             "no load: the controller decided on the sources", s1)
        t.ok(all(delta(s1, s0, n, "copy_throttle_cuts") == 0 for n in src),
             "no load: no cut", s1)
        t.ok(all(s1[n]["copy_rate_min_bytes"] == CAP * MIB for n in src),
             "no load: the least rate of each copy is the cap (%d MiB/s), over the floor" % CAP,
             s1)
        src = ["a", "b", "c", "d"]
        got = join_under_load(t, cl, src, "e", ["--rate", str(CAP_LOADED)])
        if got is None:
            return
        s2, s3 = got
        t.diag("under load: %s" % {n: {f: delta(s3, s2, n, f) for f in FIELDS[2:6]} for n in src})
        t.diag("under load: least rate, p99 and baseline, wait and baseline (us) %s" % {
            n: (s3[n]["copy_rate_min_bytes"], s3[n]["copy_throttle_p99_us"],
                s3[n]["copy_throttle_baseline_us"], s3[n]["copy_throttle_wait_us"],
                s3[n]["copy_throttle_wait_baseline_us"]) for n in src})
        cut = [n for n in src if delta(s3, s2, n, "copy_throttle_cuts") > 0]
        t.ok(cut, "under load: the controller cut the rate on a source (%s)" % " ".join(cut),
             {n: (s2[n], s3[n]) for n in src})
        t.ok(all(FLOOR * MIB <= s3[n]["copy_rate_min_bytes"] < CAP_LOADED * MIB for n in cut),
             "under load: the copies it cut ran under the cap (%d MiB/s), never under the "
             "floor (%d MiB/s)" % (CAP_LOADED, FLOOR), {n: s3[n] for n in cut})
        all_readable(t, cl, "a")
    finally:
        lg.close_cluster(t, cl)


def throttle_off(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], node_args=["-o", "copy_throttle=off"])
    try:
        if not ok or not fill(t, cl):
            return
        st = lg.Conn(cl.nodes["a"].addr, 5.0)
        try:
            ss = st.stats("settings")
            t.ok(ss.get("copy_throttle") == "off" and ss.get("copy_throttle_floor") == "8",
                 "-o copy_throttle=off: stats settings says off (floor 8, the default)", ss)
        finally:
            st.close()
        src = ["a", "b", "c"]
        got = join_under_load(t, cl, src, "d", [])
        if got is None:
            return
        s0, s1 = got
        t.ok(all(s1[n]["copy_throttle_decisions"] == 0 and s1[n]["copy_throttle_cuts"] == 0
                 for n in src), "off: no decision, no cut", (s0, s1))
        t.ok(all(s1[n]["copy_rate_bytes"] == s1[n]["copy_rate_min_bytes"] == 0
                 for n in src), "off: the rate shown is ringctl's default, unlimited (0)", s1)
        all_readable(t, cl, "a")
    finally:
        lg.close_cluster(t, cl)


def bad_options(t):
    for opt, want in ((["-o", "copy_throttle=maybe"], "-o copy_throttle=maybe: must be on or off"),
                      (["-o", "copy_throttle_floor=0"],
                       "-o copy_throttle_floor=0: must be 1-100000 (MiB/s)"),
                      (["-o", "copy_throttle"], "missing copy_throttle argument")):
        r = subprocess.run([lg.RINGCACHED, "-p", "0"] + opt, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=10)
        lines = r.stderr.splitlines()
        t.ok(r.returncode == 2 and len(lines) == 1 and want in lines[0],
             "%s: exit 2, one line: %s" % (" ".join(opt), want), (r.returncode, r.stderr[:300]))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--load":
        load_main(sys.argv[2:])
        return
    lg.tap_main([bad_options, throttle_on, throttle_off], 400, "the adaptive copy throttle")


if __name__ == "__main__":
    main()
