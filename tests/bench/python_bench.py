#!/usr/bin/python3
"""Python client benchmark (not a test): ringcache.Client against
pymemcache's HashClient (and pylibmc when installed) over the same 3-node
R=2 ringcached cluster, and against pymemcache's Client talking to one
relaying node. Operations: get, set and a 100-key get_many; each client
runs each operation for --seconds, in alternating rounds (--rounds), one
thread. Prints `figure value` lines (operations per second, the best
round) and the ratios:

  py_<op>_ops_<client>        ops/s (get_many: calls/s of 100 keys)
  py_<op>_ratio_<client>      ringcache's ops/s over <client>'s

Run from a build directory (or RC_BUILDDIR=...) with Debian's python3 and
the module built: /usr/bin/python3 ../tests/bench/python_bench.py
The issue's target: py_get_many_ratio_hashclient >= 2.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "it"))
import pyext  # noqa: E402
import loadgen  # noqa: E402


def clients(cl, nodes):
    """name -> client object, every one over the same nodes."""
    import ringcache
    out = {"ringcache": ringcache.Client(members_file=os.path.join(cl.store, "active.members"),
                                         default_noreply=False)}
    pm = loadgen.debian_import("pymemcache.client.hash")
    if pm is not None:
        out["hashclient"] = pm.HashClient([n.addr for n in nodes], default_noreply=False)
        base = loadgen.debian_import("pymemcache.client.base")
        out["relay1"] = base.Client(nodes[0].addr, default_noreply=False)
    pylibmc = loadgen.debian_import("pylibmc")
    if pylibmc is not None:
        out["pylibmc"] = pylibmc.Client(["%s:%d" % n.addr for n in nodes],
                                        behaviors={"ketama": True, "tcp_nodelay": True})
    return out


def run_op(c, op, keys, value, seconds):
    """Calls per second of op on c for `seconds`."""
    n, i, nk = 0, 0, len(keys)
    batch = keys[:100]
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        for _ in range(50):
            k = keys[i % nk]
            i += 1
            if op == "get":
                c.get(k)
            elif op == "set":
                c.set(k, value)
            else:
                j = (i * 100) % (nk - 100)
                batch = keys[j:j + 100]
                c.get_multi(batch) if not hasattr(c, "get_many") else c.get_many(batch)
        n += 50
    return n / seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="per client, op and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--value-size", type=int, default=100)
    a = ap.parse_args()
    why = pyext.not_built()
    if why:
        sys.exit("python_bench: " + why)
    pyext.setup()
    cl, nodes = loadgen.bench_cluster()
    try:
        cs = clients(cl, nodes)
        keys = ["bench:%d" % i for i in range(a.keys)]
        value = b"x" * a.value_size
        cs["ringcache"].set_many({k: value for k in keys})
        best = {}
        for _r in range(a.rounds):
            for op in ("get", "set", "get_many"):
                for name, c in cs.items():
                    v = run_op(c, op, keys, value, a.seconds)
                    best[(op, name)] = max(best.get((op, name), 0), v)
        for op in ("get", "set", "get_many"):
            for name in cs:
                print("py_%s_ops_%s %.0f" % (op, name, best[(op, name)]))
            for name in cs:
                if name != "ringcache":
                    print("py_%s_ratio_%s %.2f" % (op, name, best[(op, "ringcache")]
                                                   / max(best[(op, name)], 1e-9)))
    finally:
        cl.close()
        cl.cleanup_dir()


if __name__ == "__main__":
    main()
