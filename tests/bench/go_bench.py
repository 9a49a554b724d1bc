#!/usr/bin/python3
"""Go client benchmark (not a test): starts a 3-node R=2 ringcached
cluster and runs tests/bench/go_bench/ (built by `make bench`): the
ringcache Go package against gomemcache over the same three nodes, and
against gomemcache talking to one relaying node; get, set and a 100-key
GetMulti in alternating rounds. Prints its `figure value` lines:

  go_<op>_ops_<client>        calls per second (get_multi: calls of 100 keys)
  go_<op>_ratio_<client>      ringcache's calls per second over <client>'s

Run from a build directory (or RC_BUILDDIR=...) after `make bench`:
  python3 ../tests/bench/go_bench.py [--seconds S --rounds N --conc G]
The issue's target: go_get_multi_ratio_gomemcache >= 1.5.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "it"))
import loadgen  # noqa: E402

BIN = os.path.join(loadgen.BUILDDIR, "tests", "bench", "go_bench", "go_bench")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="per client, op and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--conc", type=int, default=1, help="goroutines per client")
    a = ap.parse_args()
    if not os.path.exists(BIN):
        sys.exit("go_bench: %s not built (make bench; needs golang-go and "
                 "golang-github-bradfitz-gomemcache-dev at configure)" % BIN)
    cl, nodes = loadgen.bench_cluster()
    try:
        p = loadgen.track(subprocess.Popen(
            [BIN, "-members", os.path.join(cl.store, "active.members"),
             "-servers", ",".join(n.addr_s for n in nodes), "-relay", nodes[0].addr_s,
             "-seconds", str(a.seconds), "-rounds", str(a.rounds), "-keys", str(a.keys),
             "-value-size", str(a.value_size), "-conc", str(a.conc)]))
        rc = p.wait(timeout=60 + a.rounds * 9 * 3 * a.seconds)
        if rc != 0:
            sys.exit("go_bench exited %d" % rc)
    finally:
        cl.close()
        cl.cleanup_dir()


if __name__ == "__main__":
    main()
