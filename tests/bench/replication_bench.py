#!/usr/bin/env python3
"""Replication benchmark (not a test): set throughput with R = 1, 2, 3.

Three 3-node clusters (same node flags, same machine) are started at once,
with replicas 1, 2 and 3 in their memberships. Each pass runs a burst of
tests/bench/replication_load (sets of 100-byte values, each sent to its
key's primary) against every cluster back to back, rotating who goes
first, so all three see the same background load; a ratio is the median
over passes of the per-pass ratio, a rate the median of its bursts. Two
client shapes are measured:

  request/response: 32 client threads, one set in flight per connection
  (how most memcached clients talk):
    set_ops_s/r1, set_ops_s/r2, set_ops_s/r3
    set_ratio/r2_over_r1   (target >= 0.6)
    set_ratio/r3_over_r1
  pipelined: 2 threads, 32 sets in flight per connection (the node's raw
  capacity; replication's extra round trip and work weigh most here):
    set_ops_s_pipelined/r1 ... set_ratio_pipelined/r3_over_r1

usage: RC_BUILDDIR=... replication_bench.py [--passes N] [--secs S]
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "it"))
import loadgen as lg  # noqa: E402

LOAD = os.path.join(lg.BUILDDIR, "tests", "bench", "replication_load")


def measure(a, clusters, suffix, threads, depth):
    """Interleaved passes of one client shape; returns its figure lines.
    Any error reply fails the whole run (exit 1, no figures): a rate with
    errors in it measures nothing."""
    rates = {1: [], 2: [], 3: []}
    ratio2, ratio3 = [], []
    order = [1, 2, 3]
    for _ in range(a.passes):
        got = {}
        for r in order:
            out = subprocess.run(
                [LOAD, "--members", clusters[r][1], "--secs", str(a.secs),
                 "--threads", str(threads), "--depth", str(depth), "--size", str(a.size)],
                capture_output=True, text=True, timeout=a.secs * 10 + 30)
            f = out.stdout.split()
            if out.returncode != 0 or len(f) < 6:
                sys.exit("R=%d: load failed: %s %s" % (r, out.stdout, out.stderr))
            ops, errors, secs = int(f[1]), int(f[3]), float(f[5])
            if errors:
                sys.exit("FAILED: R=%d (%s, %d threads x depth %d): %d of %d replies were "
                         "errors; %s" % (r, suffix or "request/response", threads, depth,
                                         errors, ops, out.stderr.strip()))
            got[r] = ops / secs
            rates[r].append(got[r])
        ratio2.append(got[2] / got[1])
        ratio3.append(got[3] / got[1])
        order = order[1:] + order[:1]
    lines = ["set_ops_s%s/r%d %.0f" % (suffix, r, statistics.median(rates[r]))
             for r in (1, 2, 3)]
    lines.append("set_ratio%s/r2_over_r1 %.3f" % (suffix, statistics.median(ratio2)))
    lines.append("set_ratio%s/r3_over_r1 %.3f" % (suffix, statistics.median(ratio3)))
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--secs", type=float, default=2.0)
    ap.add_argument("--size", type=int, default=100)
    a = ap.parse_args()
    if not os.access(LOAD, os.X_OK):
        sys.exit("build it first: make bench (missing %s)" % LOAD)
    clusters = {}
    try:
        for r in (1, 2, 3):
            cl = lg.Cluster(replicas=r, mem=256)
            ids = ["n%d" % i for i in range(3)]
            for i in ids:
                cl.add(i)
            rc, out, err = cl.ctl("init", "--members", cl.write_members(ids))
            if rc != 0 or any(v != (1, 0) for v in cl.converged(1, ids).values()):
                sys.exit("R=%d: ringctl init failed: %s %s" % (r, out, err))
            clusters[r] = (cl, os.path.join(cl.dir, "init.members"))
        figures = []
        for suffix, threads, depth in (("", 32, 1), ("_pipelined", 2, 32)):
            figures += measure(a, clusters, suffix, threads, depth)
        print("\n".join(figures))
    finally:
        for cl, _ in clusters.values():
            cl.close()
            cl.cleanup_dir()


if __name__ == "__main__":
    main()
