#!/usr/bin/env python3
"""repair benchmark (not a test): time to restore R copies after a node
dies. A 3-node ringcache cluster with R=2 is filled with --items items
(default 1M) of 100-1000 bytes; one node is killed with SIGKILL; then
`ringctl remove --failed` (unlimited copy rate) publishes the epoch
without it and copies every range it owned from the surviving owners.
Prints one `figure value` line per result:

  items                 items written (acknowledged)
  dead_node_items       curr_items of the killed node before the kill
  detect_s              kill -> both survivors report it down (ringctl status)
  repair_s              wall time of `ringctl remove --failed`
  copied_items          items the sources sent (ringctl's moved_items)
  copied_mb_s           bytes sent / repair_s
  replicated            1 when writes are replicated (secondaries hold copies);
                        0: a dead primary's keys are lost and not copied

Usage: RC_BUILDDIR=_build python3 tests/bench/repair_bench.py [--items N]
"""
import argparse
import os
import re
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "it"))
sys.path.insert(0, HERE)
os.environ.setdefault("RC_BUILDDIR", os.path.join(HERE, "..", "..", "_build"))
import loadgen as lg  # noqa: E402
import failover_lib as fl  # noqa: E402
import handoff_bench as hb  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1000000)
    ap.add_argument("--mem", type=int, default=0, help="MiB per node (default: from --items)")
    a = ap.parse_args()
    mem = a.mem or max(64, int(a.items * 1400 * 2 / 3 / 1048576) + 64)
    cl = lg.Cluster(replicas=2, mem=mem)
    done = False
    try:
        for i in ("a", "b", "c"):
            cl.add(i)
        rc, out, err = cl.ctl("init", "--members", cl.write_members(["a", "b", "c"]))
        if rc != 0:
            sys.exit("init failed: %s" % err)
        e1 = cl.store_active()
        cl.converged(1, ["a", "b", "c"])
        repl = fl.replicated(cl, e1)
        prim = hb.locate_primaries(e1, a.items)
        groups = {}
        for i, p in enumerate(prim):
            groups.setdefault(cl.nodes[p].addr, []).append(i)
        t0 = time.monotonic()
        stored = hb.fill(groups, declare_epoch=1)
        fill_s = time.monotonic() - t0
        if stored != a.items:
            # A repair time of a partial fill measures nothing.
            sys.exit("FAILED: only %d of %d sets were STORED" % (stored, a.items))
        print("items %d" % stored)
        dead = "b"
        st = lg.node_stats(cl.nodes[dead].addr)
        print("dead_node_items %s" % st.get("curr_items", "0"))
        sys.stdout.flush()
        t_kill = time.monotonic()
        cl.nodes[dead].stop(signal.SIGKILL)

        def seen():
            row = fl.status_row(cl, dead)
            return {"a", "c"} <= set(row.get("seen_down_by", "").split(","))
        lg.wait_for(seen, 30, 0.05)
        print("detect_s %.2f" % (time.monotonic() - t_kill))
        t0 = time.monotonic()
        rc, out, err = cl.ctl("remove", "--failed", "--rate", "0", dead, timeout=3600)
        repair_s = time.monotonic() - t0
        if rc != 0:
            sys.exit("remove --failed failed (%d): %s" % (rc, err[-2000:]))
        m_items = re.search(r"^moved_items\t(\d+)", out, re.M)
        m_bytes = re.search(r"^moved_bytes\t(\d+)", out, re.M)
        print("repair_s %.2f" % repair_s)
        print("copied_items %s" % (m_items.group(1) if m_items else "?"))
        if m_bytes:
            print("copied_mb_s %.1f" % (int(m_bytes.group(1)) / 1048576.0 / max(repair_s, 1e-6)))
        print("replicated %d" % (1 if repl else 0))
        for line in err.splitlines():
            if re.search(r"prepare:|caught up|fence:|commit:|cleanup", line):
                print("# " + line)
        print("# fill %.1f s; %s" % (fill_s, "" if repl else
              "writes are not replicated: the dead primary's keys were lost, repair copied "
              "only the ranges whose primary survived"))
        done = True
    finally:
        cl.close()
        if done:
            cl.cleanup_dir()
        else:
            sys.stderr.write("node logs kept in %s\n" % cl.dir)


if __name__ == "__main__":
    main()
