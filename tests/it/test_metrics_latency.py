#!/usr/bin/env python3
"""The latency histograms and handoff progress of `ringcached --metrics`
(server/latency.c, server/metrics.c) on a 3-node R=2 cluster. A plain
client sends NSETS sets, NGETS gets and NNOOP `mn` to node a, one request
at a time, and times the whole run. At a, ringcache_command_duration_seconds
_count must equal what was sent for set, get and meta_noop, its buckets must
be cumulative, monotone and end at _count (+Inf), and its _sum positive and
below the wall time of the run; `stats latency` must say the same counts.
Across the cluster the set and get counts are what a was sent plus what a
forwarded (an owner times a relayed request too), and at every node
ringcache_replication_duration_seconds_count equals
ringcache_replication_acks_total, NSETS in all (R=2: one replica each).
Then d joins: once the cluster is at epoch 2, every source has sent as many
items as its streams planned, and what the nodes imported is what they
sent. Every scrape passes `promtool check metrics` silently; with Debian's
prometheus installed, a real server scrapes the nodes and its
histogram_quantile over the set histogram is a bucket bound."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import test_metrics as tm  # noqa: E402

IDS = ["a", "b", "c"]
NSETS = 60
NGETS = 40
NNOOP = 5
HIST = "ringcache_command_duration_seconds"
REPL = "ringcache_replication_duration_seconds"


def scrape(port):
    return tm.parse(tm.http_req(port)[1])


def gauge(st, name):
    return st.get((name, ()), 0.0)


def buckets(st, name, label=None):
    """[(le, cumulative count)] of one histogram, in bound order."""
    out = []
    for (n, labels), v in st.items():
        d = dict(labels)
        if n != name + "_bucket" or (label is not None and d.get("command") != label):
            continue
        if label is None and "command" in d:
            continue
        le = d["le"]
        out.append((float("inf") if le == "+Inf" else float(le), v))
    return sorted(out)


def hist(st, name, label=None):
    """(count, sum, buckets) of one histogram (label: its command)."""
    labels = (("command", label),) if label is not None else ()
    return (st.get((name + "_count", labels)), st.get((name + "_sum", labels)),
            buckets(st, name, label))


def check_hist(t, what, h, count, wall):
    n, s, b = h
    t.ok(n == count, "%s: _count = %d" % (what, count), n)
    mono = all(b[i][1] <= b[i + 1][1] for i in range(len(b) - 1))
    t.ok(len(b) == 22 and mono and b[-1][0] == float("inf") and b[-1][1] == n,
         "%s: 22 buckets, cumulative and monotone, +Inf = _count" % what, b)
    t.ok(s is not None and 0 < s < wall, "%s: 0 < _sum < the run's wall time %.3f s"
         % (what, wall), s)


def promtool_check(t, promtool, nid, text):
    if promtool is None:
        t.skip("%s: promtool check metrics" % nid, "promtool is not installed (Debian: prometheus)")
        return
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=30)
    t.ok(r.returncode == 0 and r.stdout == "" and r.stderr == "",
         "%s: promtool check metrics: exit 0, prints nothing" % nid,
         (r.returncode, r.stdout[-800:], r.stderr[-800:]))


def send_traffic(t, conn):
    """The traffic, one request at a time; returns its wall time."""
    ok = True
    t0 = time.monotonic()
    for i in range(NSETS):
        ok = conn.store("set", "lat-%d" % i, b"v%d" % i) == b"STORED" and ok
    for i in range(NGETS):
        vals, err = conn.get_multi(["lat-%d" % i])
        ok = err is None and vals == {"lat-%d" % i: b"v%d" % i} and ok
    for _ in range(NNOOP):
        ok = conn.simple("mn") == b"MN" and ok
    wall = time.monotonic() - t0
    t.ok(ok, "%d sets, %d gets and %d mn through a: the replies expected"
         % (NSETS, NGETS, NNOOP))
    return wall


def prometheus_quantile(t, mports):
    prom = shutil.which("prometheus")
    if prom is None:
        t.skip("a Prometheus server computes histogram_quantile",
               "the prometheus server is not installed (Debian: prometheus)")
        return
    d = tempfile.mkdtemp(prefix="rc-prom-")
    port = lg.free_port_pair(offset=0)
    cfg = os.path.join(d, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: ringcache\n    static_configs:\n"
                "      - targets: [%s]\n" % ", ".join("'127.0.0.1:%d'" % p for p in mports))
    log = open(os.path.join(d, "prometheus.log"), "wb")
    p = lg.track(subprocess.Popen(
        [prom, "--config.file", cfg, "--storage.tsdb.path", os.path.join(d, "data"),
         "--web.listen-address", "127.0.0.1:%d" % port], stdin=subprocess.DEVNULL,
        stdout=log, stderr=log))
    last = [None, None]
    q_count = 'sum(%s_count{command="set"})' % HIST
    q_p50 = 'histogram_quantile(0.5, sum by (le) (%s_bucket{command="set"}))' % HIST

    def poll():
        if p.poll() is not None:
            return True
        try:
            last[0] = tm.prom_query(port, q_count)
            last[1] = tm.prom_query(port, q_p50)
        except (OSError, ValueError):
            return False
        return last[0] is not None and last[0] >= NSETS and last[1] is not None
    try:
        lg.wait_for(poll, 60.0, 0.2)
        t.ok(p.poll() is None and last[0] is not None and last[0] >= NSETS,
             "prometheus: %s >= %d" % (q_count, NSETS), last)
        t.ok(last[1] is not None and 0 < last[1] <= 1.048576,
             "prometheus: %s is within the buckets" % q_p50, last)
    finally:
        lg.stop_proc(p, 10.0)
        log.close()
        if t.failed == 0:
            shutil.rmtree(d, ignore_errors=True)
        else:
            t.diag("prometheus files kept in %s" % d)


def scenario(t):
    cl = lg.Cluster(replicas=2, mem=64)
    conn = None
    promtool = shutil.which("promtool")
    try:
        mports = {}
        for nid in IDS + ["d"]:
            mports[nid] = lg.free_port_pair(offset=0)
        for nid in IDS:
            cl.node_args = ["--metrics", "127.0.0.1:%d" % mports[nid]]
            cl.add(nid)
        rc, out, err = cl.ctl("init", "--members", cl.write_members(IDS))
        conv = cl.converged(1, IDS)
        if not t.ok(rc == 0 and all(v == (1, 0) for v in conv.values()),
                    "ringctl init: every node at epoch 1", (rc, err[-500:], conv)):
            return

        conn = lg.Conn(cl.nodes["a"].addr, 5.0)
        wall = send_traffic(t, conn)
        st = {nid: scrape(mports[nid]) for nid in IDS}
        for label, n in (("set", NSETS), ("get", NGETS), ("meta_noop", NNOOP)):
            check_hist(t, "a: %s{command=\"%s\"}" % (HIST, label), hist(st["a"], HIST, label), n,
                       wall)
        sl = conn.stats("latency")
        t.ok(sl.get("latency:set:count") == str(NSETS) and sl.get("latency:get:count")
             == str(NGETS) and sl.get("latency:set:le_inf") == str(NSETS)
             and int(sl.get("latency:set:sum_us", "0")) > 0,
             "a: stats latency shows the same counts", {k: v for k, v in sl.items()
                                                         if k.endswith((":count", ":sum_us"))})

        fwd = gauge(st["a"], "ringcache_forwarded_total")
        total = sum(hist(st[n], HIST, c)[0] for n in IDS for c in ("set", "get"))
        t.ok(0 < fwd < NSETS + NGETS and total == NSETS + NGETS + fwd,
             "cluster: set + get counts = %d sent + %d forwarded by a" % (NSETS + NGETS, fwd),
             (total, fwd))

        # Replication: every ack is timed, one per set (R=2).
        def repl_settled():
            for nid in IDS:
                st[nid] = scrape(mports[nid])
            return sum(gauge(st[n], "ringcache_replication_acks_total") for n in IDS) >= NSETS
        lg.wait_for(repl_settled, 10.0, 0.05)
        acks = {n: gauge(st[n], "ringcache_replication_acks_total") for n in IDS}
        counts = {n: hist(st[n], REPL)[0] for n in IDS}
        t.ok(acks == counts and sum(acks.values()) == NSETS,
             "every node: %s_count = ringcache_replication_acks_total, %d in all"
             % (REPL, NSETS), (acks, counts))
        for nid in IDS:
            n, s, b = hist(st[nid], REPL)
            if n:
                check_hist(t, "%s: %s" % (nid, REPL), (n, s, b), acks[nid], wall)
        for nid in IDS:
            promtool_check(t, promtool, nid, tm.http_req(mports[nid])[1])

        # A join: sources send what they planned, destinations import it.
        cl.node_args = ["--metrics", "127.0.0.1:%d" % mports["d"]]
        d = cl.add("d")
        rc, out, err = cl.ctl("join", "d", d.addr_s)
        conv = cl.converged(2, IDS + ["d"], 30.0)
        t.ok(rc == 0 and all(v == (2, 0) for v in conv.values()),
             "ringctl join d: exit 0, every node at epoch 2", (rc, err[-500:], conv))
        st = {nid: scrape(mports[nid]) for nid in IDS + ["d"]}
        planned = {n: gauge(st[n], "ringcache_handoff_planned_items") for n in st}
        sent = {n: gauge(st[n], "ringcache_handoff_sent_items") for n in st}
        imported = {n: gauge(st[n], "ringcache_handoff_imported_items") for n in st}
        t.ok(sum(planned.values()) > 0 and planned == sent,
             "after the join: every node's ringcache_handoff_sent_items = _planned_items",
             (planned, sent))
        t.ok(sum(imported.values()) == sum(sent.values()) and imported["d"] > 0,
             "after the join: the items imported are the items sent", (imported, sent))
        t.ok(all(gauge(st[n], "ringcache_handoff_sent_bytes") > 0 for n in st if sent[n] > 0)
             and all(gauge(st[n], "ringcache_handoff_planned_bytes") > 0
                     for n in st if planned[n] > 0),
             "after the join: bytes planned and sent at every source")
        t.ok(all(gauge(st[n], "ringcache_cluster_epoch") == 2
                 and st[n].get(("ringcache_cluster_phase", (("phase", "none"),))) == 1
                 for n in st), "after the join: ringcache_cluster_epoch 2, phase none everywhere")
        promtool_check(t, promtool, "d", tm.http_req(mports["d"])[1])
        prometheus_quantile(t, list(mports.values()))
    finally:
        if conn is not None:
            conn.close()
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 170, "ringcached --metrics latency")


if __name__ == "__main__":
    main()
