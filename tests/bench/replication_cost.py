#!/usr/bin/env python3
"""Replication cost benchmark (not a test): node work per client set at
R=1 and R=2, in the pipelined shape of replication_bench.py (2 threads, 32
sets of 100 bytes in flight per connection, each sent to its key's
primary, 3 nodes of 2 workers).

  instructions_per_set/r1, instructions_per_set/r2: user-space
  instructions of the 3 nodes per acknowledged set, the nodes run under
  valgrind --tool=callgrind (counters zeroed after a 1 s warm-up burst,
  dumped after the measured one). Repeatable to about 1% where time is
  not: a machine without hardware counters (perf stat -e instructions
  "not supported", as on the 2-core VM) can still compare two builds.
  task_clock_us_per_set/r1, task_clock_us_per_set/r2: the same burst on
  the nodes run natively, perf stat task-clock (noisy on a shared machine).
  syscalls_per_batch/r1, syscalls_per_batch/r2: in that burst, the nodes'
  system calls per client batch of 32 sets (reads, writes and epoll
  waits, each kind also alone): what bounds a pipelined replicated write
  on loopback, where the kernel's TCP path is most of the cost. Each
  replica peer of a batch adds a send and a read on each side.

usage: RC_BUILDDIR=... replication_cost.py [--secs S] [--no-callgrind] [--no-perf]
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "it"))
import loadgen as lg  # noqa: E402

LOAD = os.path.join(lg.BUILDDIR, "tests", "bench", "replication_load")
SHAPE = ["--threads", "2", "--depth", "32", "--size", "100"]


def burst(members, secs, prefix=()):
    """One replication_load burst (run under prefix); returns the sets
    acknowledged and the prefix's stderr."""
    out = subprocess.run(list(prefix) + [LOAD, "--members", members, "--secs", str(secs)] + SHAPE,
                         capture_output=True, text=True, timeout=secs * 30 + 60)
    f = out.stdout.split()
    if out.returncode != 0 or len(f) < 6 or int(f[3]) != 0:
        sys.exit("load failed: %s %s" % (out.stdout, out.stderr))
    return int(f[1]), out.stderr


def cluster(replicas):
    cl = lg.Cluster(replicas=replicas, mem=256, node_args=["--forward-timeout=5000"])
    ids = ["n0", "n1", "n2"]
    for i in ids:
        n = lg.NodeProc(cl, i)
        cl.nodes[i] = n.start(timeout=60)
    rc, out, err = cl.ctl("init", "--members", cl.write_members(ids))
    if rc != 0 or any(v != (1, 0) for v in cl.converged(1, ids).values()):
        cl.close()
        sys.exit("R=%d: ringctl init failed: %s %s" % (replicas, out, err))
    return cl, os.path.join(cl.dir, "init.members")


def last_total(outdir, pid):
    """Ir of the newest callgrind dump of pid."""
    best = None
    for f in glob.glob(os.path.join(outdir, "out.%d.*" % pid)):
        n = int(f.rsplit(".", 1)[1])
        with open(f) as fh:
            for line in fh:
                if line.startswith("totals:") and (best is None or n > best[0]):
                    best = (n, int(line.split()[1]))
    if best is None:
        sys.exit("no callgrind dump of node %d in %s" % (pid, outdir))
    return best[1]


def callgrind_cost(replicas, secs):
    outdir = tempfile.mkdtemp(prefix="rc-cg-")
    wrap = os.path.join(outdir, "node.sh")
    with open(wrap, "w") as f:
        f.write("#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=%s/out.%%p "
                "--dump-instr=no %s \"$@\" 2>>%s/valgrind.log\n" % (outdir, real, outdir))
    os.chmod(wrap, 0o755)
    lg.RINGCACHED = wrap
    cl = None
    try:
        cl, members = cluster(replicas)
        burst(members, 1)
        pids = [n.proc.pid for n in cl.nodes.values()]
        for p in pids:
            subprocess.run(["callgrind_control", "-z", str(p)], capture_output=True, timeout=120)
        ops, _ = burst(members, secs)
        for p in pids:
            subprocess.run(["callgrind_control", "-d", str(p)], capture_output=True, timeout=120)
        return sum(last_total(outdir, p) for p in pids) / ops
    finally:
        lg.RINGCACHED = real
        if cl is not None:
            cl.close()
            cl.cleanup_dir()
        shutil.rmtree(outdir, ignore_errors=True)


SYSCALLS = ("read", "readv", "sendmsg", "writev", "epoll_wait")


def perf_cost(replicas, secs):
    """perf stat counts the nodes for exactly as long as the burst runs:
    task-clock us per set, and {syscall: count per batch of 32 sets} (empty
    when the kernel offers no syscall tracepoints to this user)."""
    cl, members = cluster(replicas)
    try:
        pids = ",".join(str(n.proc.pid) for n in cl.nodes.values())
        events = ["task-clock"] + ["syscalls:sys_enter_" + n for n in SYSCALLS]
        ops, err = burst(members, secs, ["perf", "stat", "-x,", "-e", ",".join(events), "-p",
                                         pids, "--"])
        if "task-clock" not in err:
            ops, err = burst(members, secs, ["perf", "stat", "-x,", "-e", "task-clock", "-p",
                                             pids, "--"])
        clock, calls = None, {}
        for line in err.splitlines():
            p = line.split(",")
            if len(p) > 2 and p[2] == "task-clock":
                clock = float(p[0]) * 1000 / ops
            elif len(p) > 2 and p[2].startswith("syscalls:sys_enter_") and p[0].isdigit():
                calls[p[2][len("syscalls:sys_enter_"):]] = int(p[0]) * 32.0 / ops
        if clock is None:
            sys.exit("perf stat gave no task-clock: %s" % err)
        return clock, calls
    finally:
        cl.close()
        cl.cleanup_dir()


real = lg.RINGCACHED


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--secs", type=float, default=4.0)
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--no-perf", action="store_true")
    a = ap.parse_args()
    if not os.access(LOAD, os.X_OK):
        sys.exit("build it first: make bench (missing %s)" % LOAD)
    lines = []
    for r in (1, 2):
        if not a.no_callgrind:
            lines.append("instructions_per_set/r%d %.0f" % (r, callgrind_cost(r, a.secs)))
        if not a.no_perf:
            clock, calls = perf_cost(r, a.secs)
            lines.append("task_clock_us_per_set/r%d %.2f" % (r, clock))
            if calls:
                lines.append("syscalls_per_batch/r%d %.1f (%s)" % (
                    r, sum(calls.values()),
                    " ".join("%s %.1f" % (n, calls[n]) for n in SYSCALLS if n in calls)))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
