#!/usr/bin/env python3
"""handoff benchmark (not a test): a 3-node ringcache cluster holding
--items items (default 1M) of 100-1000 bytes under a steady get/set load
(Python threads); join a 4th node; then the same on 3 plain memcached with
client-side libmemcached-style ketama placement (160 points per server: 40
MD5 digests x 4 points; key hash = the first 4 bytes of MD5, little-endian)
adding a 4th. Latency is measured by tests/bench/latprobe (C, open loop,
fixed rate, latency from the scheduled send time), so the figure is the
node's and not the Python interpreter's. Prints one `figure value` line per
result:

  join_s                       wall time of `ringctl join` (leave_s: of `ringctl
                               leave` with --op leave)
  copy_mb_s                    bytes the sources sent / the copy window (from
                               ringctl's "prepare:" line to "copy: caught up")
  copied_over_imported         bytes sent (sources' transfers) / bytes imported
                               (the joiner's cluster_bytes_imported)
  fence_ms_max                 max NodeStatus fence_held_ms, else ringctl's
                               fence_ms (Fence sent to all replies received)
  p99_ratio_nonmoving          prober p99 service time (request sent to reply
                               read) of gets to keys whose primary does not
                               change, during the copy window over before the join
  p99_ratio_nonmoving_join     the same over the whole join (fence, commit, cleanup)
  p99_ratio_nonmoving_sched    the copy-window ratio with latency counted from the
                               scheduled send time: adds the prober's own waits for
                               a CPU, which on a shared 2-core box are the stalls
                               of the whole machine (they hit the before window too)
  p99_ratio_nonmoving_py       the Python load's own p99 ratio (copy window)
  tryagain_window_ms           prober on moving keys at their old primary: first
                               TRYAGAIN to the end of the last one (the fence as
                               clients see it, Fence to Commit)
  hit_ratio_after_over_before  get hit ratio in a window after the join over before
  throttle_rate_mib            the sources' copy rate in force at the end of the copy
                               (the adaptive throttle's, server/throttle.h; mean, MiB/s)
  throttle_cuts                the sources' copy_throttle_cuts during the join
  ketama_hit_ratio_after_over_before   the same for memcached + ketama

--op leave runs the other way: 4 nodes hold the items and d leaves (d
alone sources everything, a b c import; memcached + ketama drops its 4th);
"the join" below is then the leave.

--throttle adaptive (the default) or off (every node with -o copy_throttle=off)
runs the ringcache part so; both runs it --rounds times each way, alternating,
and prints every figure with an _adaptive and an _off suffix (the median of
the rounds), then copy_mb_s_adaptive_over_off and
p99_ratio_nonmoving_adaptive_over_off.

Usage: make bench && RC_BUILDDIR=_build python3 tests/bench/handoff_bench.py
       [--items N] [--secs S] [--threads T] [--sample K] [--rate MBPS]
       [--probe-rate OPS] [--throttle adaptive|off|both] [--rounds N] [--floor MIBPS]
       [--op join|leave] [--skip-ketama]
"""
import argparse
import bisect
import collections
import hashlib
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "it"))
os.environ.setdefault("RC_BUILDDIR", os.path.join(HERE, "..", "..", "_build"))
import loadgen as lg  # noqa: E402


def size_of(i):
    return 100 + (i * 2654435761 % 901)


def key_of(i):
    return "hb-%d" % i


def value_of(i):
    return b"v" * size_of(i)


# ---------------------------------------------------------------- fill

def fill(groups, declare_epoch=None, batch=500):
    """groups: {addr: [i, ...]}: pipelined sets to each address in
    parallel; returns how many were STORED."""
    stored = [0]
    lock = threading.Lock()

    def run(addr, idx):
        c = lg.Conn(addr, 30.0)
        n = 0
        try:
            if declare_epoch:
                c.declare(declare_epoch)
            for j in range(0, len(idx), batch):
                chunk = idx[j:j + batch]
                c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (key_of(i).encode(), size_of(i),
                                                               value_of(i)) for i in chunk))
                for _ in chunk:
                    n += c.readline() == b"STORED"
        finally:
            c.close()
        with lock:
            stored[0] += n
    ts = [threading.Thread(target=run, args=(a, ix)) for a, ix in groups.items()]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return stored[0]


def locate_primaries(text, n):
    """Primary id of key_of(i) for i < n, via `ringctl locate`."""
    fd_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "hb-%d.members" % os.getpid())
    with open(fd_path, "w") as f:
        f.write(text)
    try:
        r = subprocess.run([lg.RINGCTL, "locate", "--members", fd_path, "--replicas", "1"],
                           input="".join(key_of(i) + "\n" for i in range(n)),
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(r.stderr)
        return [line.rpartition("\t")[2] for line in r.stdout.splitlines()]
    finally:
        os.unlink(fd_path)


# ---------------------------------------------------------------- steady load

class Steady:
    """T threads: 90% gets, 10% sets on a sample of keys, through op(kind,
    i) -> (ok, hit). Records (t0, latency, i, kind, hit, ok)."""

    def __init__(self, op_factory, sample, threads):
        self.op_factory = op_factory
        self.sample = sample
        self.threads = threads
        self.stop_ev = threading.Event()
        self.recs = []
        self.ts = []

    def _run(self, seed):
        op = self.op_factory()
        rng = random.Random(seed)
        out = []
        while not self.stop_ev.is_set():
            i = rng.choice(self.sample)
            kind = "set" if rng.random() < 0.1 else "get"
            t0 = time.monotonic()
            ok, hit = op(kind, i)
            out.append((t0, time.monotonic() - t0, i, kind, hit, ok))
        self.recs.extend(out)

    def start(self):
        self.ts = [threading.Thread(target=self._run, args=(s,), daemon=True)
                   for s in range(self.threads)]
        for t in self.ts:
            t.start()

    def stop(self):
        self.stop_ev.set()
        for t in self.ts:
            t.join(60)

    def window(self, t_lo, t_hi, keys=None):
        return [r for r in self.recs if t_lo <= r[0] < t_hi and (keys is None or r[2] in keys)]


def hit_ratio(recs):
    g = [r for r in recs if r[3] == "get"]
    return sum(1 for r in g if r[4]) / float(len(g)) if g else float("nan")


def p99(recs):
    lat = sorted(r[1] for r in recs if r[5])
    return lat[int(len(lat) * 0.99)] if lat else float("nan")



# ---------------------------------------------------------------- C prober

LATPROBE = os.path.join(os.environ["RC_BUILDDIR"], "tests", "bench", "latprobe")


def prober_priority():
    """The prober runs at nice -10 where allowed, so what it measures is the
    nodes' delay, not its own wait for a CPU on a saturated box (the
    Python load and the nodes stay at nice 0)."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    except OSError:
        pass


class Prober:
    """tests/bench/latprobe fed with (addr, key) pairs: open-loop gets at a
    fixed rate; stop() returns [(t_sched, latency_s, answer, late_s)]."""

    def __init__(self, pairs, rate, declare=None):
        self.out = tempfile.TemporaryFile()
        self.proc = None
        if not pairs:
            return
        random.Random(11).shuffle(pairs)
        self.proc = lg.track(subprocess.Popen(
            [LATPROBE, "--rate", str(rate), "--secs", "3600"]
            + (["--declare", str(declare)] if declare else []), stdin=subprocess.PIPE,
            stdout=self.out, stderr=subprocess.PIPE, preexec_fn=prober_priority))
        self.proc.stdin.write("".join("%s:%d %s\n" % (h, p, k) for (h, p), k in pairs).encode())
        self.proc.stdin.close()
        line = self.proc.stderr.readline()
        if b"ready" not in line:
            raise RuntimeError("latprobe: %s" % line)

    def stop(self):
        if self.proc is None:
            return []
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        self.out.seek(0)
        recs = []
        for line in self.out.read().decode().splitlines():
            t, lat, ans, late = line.split()
            recs.append((float(t), float(lat) / 1e6, ans, float(late) / 1e6))
        return recs


def p99_probe(recs, lo, hi, service=True):
    """p99 of the answered gets scheduled in [lo, hi): their service time
    (sent to answered), or with service=False their latency from the
    scheduled time (adds the prober's own wait for a CPU)."""
    lat = sorted(r[1] - (r[3] if service else 0) for r in recs
                 if lo <= r[0] < hi and r[2] in ("hit", "miss"))
    return lat[int(len(lat) * 0.99)] if lat else float("nan")


def n_probe(recs, lo, hi):
    return sum(1 for r in recs if lo <= r[0] < hi)


def tryagain_window(recs):
    """Seconds from the first TRYAGAIN a moving key got to the end of the
    last one (the fence as clients see it: fence to commit), or None."""
    t = [(r[0], r[0] + r[1]) for r in recs if r[2] == "tryagain"]
    return (max(e for _, e in t) - min(s for s, _ in t)) if t else None


def run_ctl_marked(cl, args, patterns):
    """Run ringctl, timestamping (time.monotonic) the first stderr line that
    matches each pattern: (rc, stdout, {name: t, 'lines': [...]})."""
    p = lg.track(subprocess.Popen(cl.ctl_cmd(*args), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    cl.ctl_procs.append(p)
    marks = {"lines": []}
    out = []
    t_out = threading.Thread(target=lambda: out.append(p.stdout.read()), daemon=True)
    t_out.start()
    for line in p.stderr:
        t = time.monotonic()
        marks["lines"].append(line)
        for name, pat in patterns.items():
            if name not in marks and re.match(pat, line):
                marks[name] = t
    rc = p.wait(3600)
    t_out.join(60)
    return rc, "".join(out), marks


# ---------------------------------------------------------------- ringcache

def bench_ringcache(a, figures, throttle="adaptive"):
    cl = lg.Cluster(replicas=1, mem=a.mem, node_args=["-v"] + (
        ["-o", "copy_throttle=off"] if throttle == "off" else
        ["-o", "copy_throttle_floor=%d" % a.floor] if a.floor else []))
    try:
        # --op join: d joins a b c (they source, d imports); leave: d
        # leaves a b c d (d sources everything, a b c import).
        first, final = (["a", "b", "c"], ["a", "b", "c", "d"]) if a.op == "join" else \
            (["a", "b", "c", "d"], ["a", "b", "c"])
        sources = ["a", "b", "c"] if a.op == "join" else ["d"]
        dests = ["d"] if a.op == "join" else ["a", "b", "c"]
        for i in first:
            cl.add(i)
        rc, out, err = cl.ctl("init", "--members", cl.write_members(first))
        if rc != 0:
            raise RuntimeError("ringctl init: %s %s" % (out, err))
        cl.converged(1, first)
        e1 = cl.store_active()
        d = cl.add("d") if a.op == "join" else cl.nodes["d"]
        cuts0 = sum(int(lg.node_stats(cl.nodes[i].addr).get("copy_throttle_cuts", 0))
                    for i in sources)
        e2_planned = cl.members(final, epoch=2)
        t = time.monotonic()
        prim1 = locate_primaries(e1, a.items)
        prim2 = locate_primaries(e2_planned, a.items)
        addr = {i: cl.nodes[i].addr for i in cl.nodes}
        groups = {}
        for i, p in enumerate(prim1):
            groups.setdefault(addr[p], []).append(i)
        stored = fill(groups, declare_epoch=1)
        print("# ringcache: filled %d/%d items in %.1f s" % (stored, a.items,
                                                             time.monotonic() - t), flush=True)
        rng = random.Random(7)
        sample = rng.sample(range(a.items), min(a.sample, a.items))
        nonmoving = {i for i in sample if prim1[i] == prim2[i]}
        view = lg.View([key_of(i) for i in sample], [addr["a"]], async_refresh=True)
        view.refresh(1)

        def factory():
            c = lg.Client(view, "epoch", timeout=5.0)

            def op(kind, i):
                if kind == "get":
                    r = c.op("get", key_of(i))
                    return r.status in ("hit", "miss"), r.status == "hit"
                r = c.op("set", key_of(i), value_of(i))
                return r.status == "ok", None
            return op
        load = Steady(factory, sample, a.threads)
        load.start()
        # The C probers: gets at a fixed rate to keys whose primary does not
        # change (the p99 figure), and to keys that move, at their old
        # primary (the client-side TRYAGAIN window of the fence).
        moving = [i for i in sample if prim1[i] != prim2[i]]
        probe_nm = Prober([(addr[prim1[i]], key_of(i)) for i in sorted(nonmoving)],
                          a.probe_rate)
        probe_mv = Prober([(addr[prim1[i]], key_of(i)) for i in moving], a.probe_rate / 2,
                          declare=1)
        t_before = time.monotonic()
        time.sleep(a.secs)     # a measurement window of fixed length, not a wait
        t_join = time.monotonic()
        # Options before the operands (ringctl stops option parsing at the first).
        args = [a.op] + (["--rate", str(a.rate)] if a.rate else []) + \
            (["d", d.addr_s] if a.op == "join" else ["d"])
        rc, out, marks = run_ctl_marked(cl, args, {
            "copy_start": r"ringctl: prepare: ", "copy_end": r"ringctl: copy: caught up",
            "fence_end": r"ringctl: fence: ", "commit": r"ringctl: commit: store"})
        t_done = time.monotonic()
        if rc != 0:
            raise RuntimeError("ringctl %s: exit %d: %s %s" % (a.op, rc, out[-500:],
                                                                "".join(marks["lines"])[-500:]))
        for line in marks["lines"]:
            if re.match(r"ringctl: (copy: caught|fence|commit)", line):
                print("# " + line.rstrip(), flush=True)
        for nid, n in sorted(cl.nodes.items()):
            with open(n.log, "rb") as f:
                for line in f.read().decode(errors="replace").splitlines():
                    if re.search(r"fence|priority|stall|suspect|down", line):
                        print("# node %s: %s" % (nid, line.strip()), flush=True)
        thr = [lg.node_stats(cl.nodes[i].addr) for i in sources]
        figures["throttle_cuts"] = sum(int(s.get("copy_throttle_cuts", 0)) for s in thr) - cuts0
        figures["throttle_rate_mib"] = sum(int(s.get("copy_rate_bytes", 0)) for s in thr) / \
            float(len(thr)) / 1048576.0
        print("# throttle %s: sources' rate at the end %s MiB/s, least %s MiB/s, cuts %d "
              "(for the wait alone %s), p99/baseline us %s, wait/baseline us %s" % (
                  throttle, [round(int(s.get("copy_rate_bytes", 0)) / 1048576.0, 1) for s in thr],
                  [round(int(s.get("copy_rate_min_bytes", 0)) / 1048576.0, 1) for s in thr],
                  figures["throttle_cuts"], [s.get("copy_throttle_cuts_wait") for s in thr],
                  [(s.get("copy_throttle_p99_us"), s.get("copy_throttle_baseline_us"))
                   for s in thr],
                  [(s.get("copy_throttle_wait_us"), s.get("copy_throttle_wait_baseline_us"))
                   for s in thr]), flush=True)
        time.sleep(a.secs)     # the window after the join
        t_end = time.monotonic()
        load.stop()
        nm = probe_nm.stop()
        mv = probe_mv.stop()
        st = cl.status()
        figures[a.op + "_s"] = t_done - t_join
        summary = dict(l.split("\t", 1) for l in out.splitlines() if "\t" in l)
        # Bytes the sources sent: NodeStatus transfers as ringctl reports
        # them (the join summary's moved_bytes), else the status table.
        sent = int(summary.get("moved_bytes", 0)) or sum(
            lg.status_counter(st, "bytes_sent").values())
        # Bytes imported at the destinations: their own counters when they
        # expose one (status or stats), else the value bytes of the keys
        # whose primary changed.
        imported = sum(v for n, v in lg.status_counter(st, "bytes_imported").items()
                       if n in dests)
        if not imported:
            for n in dests:
                dst = lg.node_stats(cl.nodes[n].addr)
                imported += int(dst.get("bytes_imported", dst.get("cluster_bytes_imported", 0)))
        how = "node counter"
        if not imported:
            imported = sum(size_of(i) + len(key_of(i)) for i in range(a.items)
                           if prim2[i] != prim1[i])
            how = "key+value bytes of the keys whose primary changed (no node counter)"
        print("# copied_over_imported: sent %d bytes, imported %d bytes (%s)" % (sent, imported,
                                                                               how), flush=True)
        c0, c1 = marks.get("copy_start", t_join), marks.get("copy_end", t_done)
        figures["copy_mb_s"] = sent / 1e6 / (c1 - c0) if sent and c1 > c0 else float("nan")
        figures["copied_over_imported"] = sent / float(imported) if imported else float("nan")
        fence = lg.status_counter(st, "fence_held_ms")
        figures["fence_ms_max"] = (max(fence.values()) if fence
                                   else float(summary.get("fence_ms", "nan")))
        # p99 of the C prober on non-moving keys: during the copy (StartCopy
        # to caught up) over the window before the join.
        pb, pc = p99_probe(nm, t_before, t_join), p99_probe(nm, c0, c1)
        pj = p99_probe(nm, t_join, t_done)
        sb, sc = p99_probe(nm, t_before, t_join, False), p99_probe(nm, c0, c1, False)
        figures["p99_ratio_nonmoving"] = pc / pb
        figures["p99_ratio_nonmoving_join"] = pj / pb
        figures["p99_ratio_nonmoving_sched"] = sc / sb
        if a.dump:
            with open(os.path.join(a.dump, "probe-nonmoving.txt"), "w") as f:
                f.write("# t_join %.6f copy %.6f %.6f t_done %.6f\n" % (t_join, c0, c1, t_done))
                f.writelines("%.6f %.6f %s %.6f\n" % r for r in nm)
        tw = tryagain_window(mv)
        print("# moving-key prober answers: %s" % sorted(
            collections.Counter(r[2] for r in mv).items()), flush=True)
        if tw is not None:
            figures["tryagain_window_ms"] = tw * 1e3
        before = load.window(t_before, t_join, nonmoving)
        during = load.window(c0, c1, nonmoving)
        figures["p99_ratio_nonmoving_py"] = p99(during) / p99(before)
        hb = hit_ratio(load.window(t_before, t_join))
        ha = hit_ratio(load.window(t_done, t_end))
        figures["hit_ratio_after_over_before"] = ha / hb
        ev = {}
        for nid, n in cl.nodes.items():
            ev[nid] = int(lg.node_stats(n.addr).get("evictions", 0))
        print("# ringcache: copy window %.2f s of a %.2f s move; prober p99 service time "
              "before %.3f ms, copy %.3f ms, join %.3f ms; from the scheduled time before %.3f "
              "ms, copy %.3f ms (%d/%d/%d probes, %d errors); python load p99 before "
              "%.2f ms, copy %.2f ms (%d ops)" % (c1 - c0, t_done - t_join, pb * 1e3, pc * 1e3,
                                                  pj * 1e3, sb * 1e3, sc * 1e3,
                                                  n_probe(nm, t_before, t_join),
                                                  n_probe(nm, c0, c1), n_probe(nm, t_join, t_done),
                                                  sum(1 for r in nm if r[2] not in
                                                      ("hit", "miss")),
                                                  p99(before) * 1e3, p99(during) * 1e3,
                                                  len(during)), flush=True)
        print("# ringcache: hit before %.4f after %.4f, bytes sent %d imported %d, evictions %s, "
              "ops %d" % (hb, ha, sent, imported, ev, len(load.recs)), flush=True)
        if any(ev.values()):
            print("# INVALID: evictions; raise --mem", flush=True)
    finally:
        cl.close()
        cl.cleanup_dir()


# ---------------------------------------------------------------- memcached + ketama

class Ketama:
    """libmemcached-style weighted ketama with equal weights."""

    def __init__(self, servers):
        pts = []
        for host, port in servers:
            for j in range(40):
                d = hashlib.md5(("%s:%d-%d" % (host, port, j)).encode()).digest()
                for h in range(4):
                    pts.append(((d[3 + h * 4] << 24) | (d[2 + h * 4] << 16)
                                | (d[1 + h * 4] << 8) | d[h * 4], (host, port)))
        pts.sort()
        self.pos = [p for p, _ in pts]
        self.srv = [s for _, s in pts]

    def server(self, key):
        d = hashlib.md5(key.encode()).digest()
        h = (d[3] << 24) | (d[2] << 16) | (d[1] << 8) | d[0]
        i = bisect.bisect_left(self.pos, h)
        return self.srv[i if i < len(self.pos) else 0]


def bench_ketama(a, figures):
    procs = []

    def start():
        for _ in range(5):
            port = lg.free_port_pair(0)
            cmd = ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "2",
                   "-m", str(a.mem)] + (["-u", "root"] if os.getuid() == 0 else [])
            p = lg.track(subprocess.Popen(cmd, stdin=subprocess.DEVNULL))
            if lg.wait_for(lambda: p.poll() is not None or lg.can_connect(port), 10) \
                    and p.poll() is None:
                procs.append(p)
                return ("127.0.0.1", port)
        raise RuntimeError("memcached did not start")
    try:
        servers = [start() for _ in range(3 if a.op == "join" else 4)]
        ring = {"k": Ketama(servers)}
        t = time.monotonic()
        groups = {}
        for i in range(a.items):
            groups.setdefault(ring["k"].server(key_of(i)), []).append(i)
        stored = fill(groups)
        print("# ketama: filled %d/%d items in %.1f s" % (stored, a.items, time.monotonic() - t),
              flush=True)
        rng = random.Random(7)
        sample = rng.sample(range(a.items), min(a.sample, a.items))

        def factory():
            conns = {}

            def op(kind, i):
                s = ring["k"].server(key_of(i))
                c = conns.get(s)
                try:
                    if c is None:
                        c = conns[s] = lg.Conn(s, 5.0)
                    if kind == "get":
                        vals, err = c.get_multi([key_of(i)])
                        return vals is not None, bool(vals)
                    return c.store("set", key_of(i), value_of(i)) == b"STORED", None
                except (OSError, lg.ProtoError):
                    conns.pop(s, None)
                    return False, False
            return op
        load = Steady(factory, sample, a.threads)
        load.start()
        t_before = time.monotonic()
        time.sleep(a.secs)
        if a.op == "join":
            servers.append(start())
        else:
            servers.pop()
        t_join = time.monotonic()
        ring["k"] = Ketama(servers)    # every client switches to the new list
        time.sleep(a.secs)
        t_end = time.monotonic()
        load.stop()
        hb = hit_ratio(load.window(t_before, t_join))
        ha = hit_ratio(load.window(t_join, t_end))
        figures["ketama_hit_ratio_after_over_before"] = ha / hb
        print("# ketama: hit before %.4f after %.4f, ops %d" % (hb, ha, len(load.recs)),
              flush=True)
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()


def both(a, figures):
    """--throttle both: a.rounds runs each way, alternating which goes
    first; each figure's median gets the way's suffix."""
    runs = {"adaptive": [], "off": []}
    for r in range(a.rounds):
        for way in (("adaptive", "off") if r % 2 == 0 else ("off", "adaptive")):
            f = {}
            print("# round %d: --throttle %s" % (r + 1, way), flush=True)
            bench_ringcache(a, f, way)
            print("# round %d %s: %s" % (r + 1, way, " ".join(
                "%s=%.3f" % kv for kv in sorted(f.items()))), flush=True)
            runs[way].append(f)
    for way, fs in runs.items():
        for k in set().union(*fs):
            vals = sorted(f[k] for f in fs if k in f)
            mid = len(vals) // 2
            figures["%s_%s" % (k, way)] = (vals[mid] if len(vals) % 2
                                           else (vals[mid - 1] + vals[mid]) / 2.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1000000)
    ap.add_argument("--secs", type=float, default=5.0, help="load window before and after")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--sample", type=int, default=50000, help="keys the live load touches")
    ap.add_argument("--mem", type=int, default=1024, help="-m of every node (MiB)")
    ap.add_argument("--rate", type=str, default=None, help="ringctl join/leave --rate MBPS")
    ap.add_argument("--op", choices=("join", "leave"), default="join",
                    help="d joins a b c, or leaves a b c d")
    ap.add_argument("--probe-rate", type=float, default=2000.0,
                    help="gets/s of the C latency prober (non-moving keys)")
    ap.add_argument("--dump", help="write the prober's records into this directory")
    ap.add_argument("--throttle", choices=("adaptive", "off", "both"), default="adaptive",
                    help="the nodes' -o copy_throttle; both: alternate, --rounds each")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each way with --throttle both")
    ap.add_argument("--floor", type=int, default=None,
                    help="-o copy_throttle_floor (MiB/s) of the adaptive nodes")
    ap.add_argument("--skip-ketama", action="store_true")
    ap.add_argument("--skip-ringcache", action="store_true")
    a = ap.parse_args()
    figures = {}
    try:
        if not a.skip_ringcache:
            why = lg.supports_cluster()
            if why:
                print("# ringcache part skipped: %s" % why, flush=True)
            elif a.throttle == "both":
                both(a, figures)
            else:
                bench_ringcache(a, figures, a.throttle)
        if not a.skip_ketama:
            bench_ketama(a, figures)
    finally:
        lg.kill_all()
    for k in ("join_s", "leave_s", "copy_mb_s", "copied_over_imported", "fence_ms_max",
              "p99_ratio_nonmoving", "p99_ratio_nonmoving_join", "p99_ratio_nonmoving_sched",
              "p99_ratio_nonmoving_py",
              "tryagain_window_ms", "hit_ratio_after_over_before", "throttle_rate_mib",
              "throttle_cuts", "ketama_hit_ratio_after_over_before"):
        for kk in (k, k + "_adaptive", k + "_off"):
            if kk in figures:
                print("%s %.3f" % (kk, figures[kk]))
    for k in ("copy_mb_s", "p99_ratio_nonmoving", "p99_ratio_nonmoving_join"):
        if k + "_adaptive" in figures and k + "_off" in figures:
            print("%s_adaptive_over_off %.3f" % (k, figures[k + "_adaptive"]
                                                 / figures[k + "_off"]))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
