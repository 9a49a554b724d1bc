#!/usr/bin/env python3
"""`ringcached --metrics ADDR:PORT` (server/metrics.c): a 3-node R=1
cluster, each node with its own metrics port. Known traffic is sent to each
key's owner as a declared client (so every node counts exactly what it was
sent): sets, get hits and misses, gets + cas badval / hit / miss, delete,
incr, decr and touch hits and misses. Each node's scrape must show exactly
those counts under memcached_exporter's names and labels, its items, the
cluster gauges (epoch 1, no pending, phase none, 3 members, both peers up),
memcached_exporter's accepting_connections, item_too_large (one set over
-I counted), item_no_memory and malloced_bytes, ringcache_ready 1,
and `promtool check metrics` must print nothing; after c is killed, a and
b show ringcache_peer_up{peer="c"} 0. A plain client's gets sent
to a non-owner show in that node's ringcache_forwarded_total. Then, when
Debian's prometheus is installed, a real server scrapes the three nodes
every second until sum(memcached_commands_total{command="set"}) equals the
sets sent. Other paths answer 404, other methods on /metrics 405."""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

IDS = ["a", "b", "c"]
NSETS = 30     # keys mk-0..29 set at their owners
NHITS = 20     # gets of mk-0..19
NMISS = 7      # gets of keys never set
NFWD = 5       # plain gets through a node that does not own the key

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """Exposition text -> {(name, ((label, value), ...)): float}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if m is None:
            raise ValueError("not a sample line: %r" % line)
        labels = tuple(sorted(LABEL.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def http_req(port, method="GET", path="/metrics"):
    """(status, body text) of one request to 127.0.0.1:port."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request(method, path)
        r = c.getresponse()
        return r.status, r.read().decode(errors="replace"), r.getheader("Content-Type")
    finally:
        c.close()


def cmd(stats, command, status):
    return stats.get(("memcached_commands_total",
                      (("command", command), ("status", status))))


class Traffic:
    """Per-node expected counts of the traffic sent."""

    def __init__(self):
        self.n = {i: {} for i in IDS}
        self.items = {i: set() for i in IDS}

    def add(self, nid, command, status, k=1):
        d = self.n[nid]
        d[(command, status)] = d.get((command, status), 0) + k


def send_traffic(t, cl, owner, conns):
    """The traffic, each request at the key's owner (declared epoch 1).
    Returns a Traffic with what every node must count."""
    tr = Traffic()
    ok = True

    def at(key):
        return conns[owner[key]], owner[key]

    for i in range(NSETS):
        k = "mk-%d" % i
        c, nid = at(k)
        ok = c.store("set", k, b"v%d" % i) == b"STORED" and ok
        tr.add(nid, "set", "hit")
        tr.items[nid].add(k)
    for i in range(NHITS):
        k = "mk-%d" % i
        c, nid = at(k)
        vals, err = c.get_multi([k])
        ok = err is None and k in vals and ok
        tr.add(nid, "get", "hit")
    for i in range(NMISS):
        k = "miss-%d" % i
        c, nid = at(k)
        vals, err = c.get_multi([k])
        ok = err is None and not vals and ok
        tr.add(nid, "get", "miss")
    # cas: gets (a get hit), a stale unique (badval), the right one (hit),
    # a key that is absent (miss).
    k = "mk-0"
    c, nid = at(k)
    c.send(b"gets mk-0\r\n")
    line = c.readline()
    ok = line.startswith(b"VALUE mk-0 ") and ok
    unique = int(line.split()[4])
    c.readn(int(line.split()[3]))
    ok = c.readline() == b"END" and ok
    tr.add(nid, "get", "hit")
    ok = c.simple("cas mk-0 0 0 1 %d\r\nx" % (unique + 1000)) == b"EXISTS" and ok
    tr.add(nid, "cas", "badval")
    ok = c.simple("cas mk-0 0 0 1 %d\r\ny" % unique) == b"STORED" and ok
    tr.add(nid, "cas", "hit")
    c, nid = at("miss-0")
    ok = c.simple("cas miss-0 0 0 1 1\r\nz") == b"NOT_FOUND" and ok
    tr.add(nid, "cas", "miss")
    # delete, incr, decr, touch: a hit and a miss each.
    c, nid = at("mk-1")
    ok = c.delete("mk-1") == b"DELETED" and ok
    tr.add(nid, "delete", "hit")
    tr.items[nid].discard("mk-1")
    c, nid = at("miss-1")
    ok = c.delete("miss-1") == b"NOT_FOUND" and ok
    tr.add(nid, "delete", "miss")
    c, nid = at("num")
    ok = c.store("set", "num", b"10") == b"STORED" and ok
    tr.add(nid, "set", "hit")
    tr.items[nid].add("num")
    ok = c.simple("incr num 5") == b"15" and ok
    tr.add(nid, "incr", "hit")
    ok = c.simple("decr num 3") == b"12" and ok
    tr.add(nid, "decr", "hit")
    ok = c.simple("touch num 100") == b"TOUCHED" and ok
    tr.add(nid, "touch", "hit")
    c, nid = at("miss-2")
    ok = c.simple("incr miss-2 1") == b"NOT_FOUND" and ok
    tr.add(nid, "incr", "miss")
    ok = c.simple("decr miss-2 1") == b"NOT_FOUND" and ok
    tr.add(nid, "decr", "miss")
    ok = c.simple("touch miss-2 100") == b"NOT_FOUND" and ok
    tr.add(nid, "touch", "miss")
    t.ok(ok, "the traffic got the replies expected at each key's owner")
    return tr


COMMANDS = [("get", "hit"), ("get", "miss"), ("set", "hit"), ("cas", "hit"), ("cas", "miss"),
            ("cas", "badval"), ("delete", "hit"), ("delete", "miss"), ("incr", "hit"),
            ("incr", "miss"), ("decr", "hit"), ("decr", "miss"), ("touch", "hit"),
            ("touch", "miss"), ("flush", "hit")]


def check_node(t, nid, text, tr, promtool):
    st = parse(text)
    want = {c: tr.n[nid].get(c, 0) for c in COMMANDS}
    got = {c: cmd(st, *c) for c in COMMANDS}
    t.ok(got == want, "%s: memcached_commands_total{command,status} match the traffic" % nid,
         {"want": want, "got": got})
    g = {n: st.get((n, ())) for n in (
        "memcached_up", "memcached_current_items", "memcached_limit_bytes",
        "memcached_max_connections", "ringcache_cluster_epoch",
        "ringcache_cluster_pending_epoch", "ringcache_cluster_members",
        "ringcache_cluster_member", "ringcache_cluster_recovering")}
    t.ok(g == {"memcached_up": 1, "memcached_current_items": len(tr.items[nid]),
               "memcached_limit_bytes": 64 * 1024 * 1024, "memcached_max_connections": 1024,
               "ringcache_cluster_epoch": 1, "ringcache_cluster_pending_epoch": 0,
               "ringcache_cluster_members": 3, "ringcache_cluster_member": 1,
               "ringcache_cluster_recovering": 0},
         "%s: up 1, %d items, limit 64 MiB, 1024 connections max, epoch 1, no pending, "
         "3 members, a member, not recovering" % (nid, len(tr.items[nid])), g)
    phases = {p: st.get(("ringcache_cluster_phase", (("phase", p),)))
              for p in ("none", "prepared", "copying", "fenced")}
    t.ok(phases == {"none": 1, "prepared": 0, "copying": 0, "fenced": 0},
         "%s: ringcache_cluster_phase{phase=\"none\"} 1, the others 0" % nid, phases)
    ver = [k for k in st if k[0] == "memcached_version"]
    t.ok(len(ver) == 1 and ver[0][1][0][0] == "version" and st[ver[0]] == 1,
         "%s: memcached_version{version=...} 1" % nid, ver)
    t.ok(all(st.get((n, ()), 0) > 0 for n in (
        "memcached_read_bytes_total", "memcached_written_bytes_total",
        "memcached_connections_total", "memcached_current_connections",
        "memcached_current_bytes")),
        "%s: bytes read and written, connections, current bytes are counted" % nid)
    g = {n: st.get((n, ())) for n in (
        "memcached_accepting_connections", "memcached_item_too_large_total",
        "memcached_item_no_memory_total", "ringcache_ready")}
    t.ok(g == {"memcached_accepting_connections": 1, "memcached_item_too_large_total": 0,
               "memcached_item_no_memory_total": 0, "ringcache_ready": 1}
         and st.get(("memcached_malloced_bytes", ()), 0) >= st.get(("memcached_current_bytes", ())),
         "%s: accepting connections 1, item_too_large 0, item_no_memory 0, ready 1, "
         "malloced_bytes >= current_bytes" % nid, (g, st.get(("memcached_malloced_bytes", ()))))
    for n in ("memcached_uptime_seconds", "memcached_items_evicted_total",
              "memcached_items_reclaimed_total", "ringcache_forwarded_total",
              "ringcache_moved_total", "ringcache_tryagain_total",
              "ringcache_replication_acks_total", "ringcache_replication_failures_total",
              "ringcache_replication_skipped_total", "ringcache_handoff_imported_items"):
        if (n, ()) not in st:
            t.ok(False, "%s: %s is exposed" % (nid, n))
            break
    else:
        t.ok(True, "%s: uptime, evictions, reclaimed, forwarded, MOVED, TRYAGAIN, "
             "replication and handoff figures are exposed" % nid)
    if promtool is None:
        t.skip("%s: promtool check metrics" % nid, "promtool is not installed (Debian: prometheus)")
    else:
        r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        t.ok(r.returncode == 0 and r.stdout == "" and r.stderr == "",
             "%s: promtool check metrics: exit 0, prints nothing" % nid,
             (r.returncode, r.stdout[-1500:], r.stderr[-1500:]))


def metrics_nodes(cl, ids):
    """Start a node of cl per id, each with --metrics on a free port of its
    own: {id: metrics port}."""
    mports = {}
    for nid in ids:
        mports[nid] = lg.free_port_pair(offset=0)
        cl.node_args = ["--metrics", "127.0.0.1:%d" % mports[nid]]
        cl.add(nid)
    return mports


def peers_up(port, nid):
    """{peer: value} of ringcache_peer_up at a node."""
    st = parse(http_req(port)[1])
    return {dict(k[1])["peer"]: v for k, v in st.items() if k[0] == "ringcache_peer_up"}


def prom_query(port, q):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": q}))
    with urllib.request.urlopen(url, timeout=3) as r:
        d = json.loads(r.read().decode())
    res = d.get("data", {}).get("result", [])
    return float(res[0]["value"][1]) if res else None


def start_prometheus(mports, rules=None):
    """Debian's Prometheus scraping 127.0.0.1:PORT for each of mports every
    second as job "ringcache", with the rule file rules (a path, copied
    beside its config) evaluated every second: (process, its port, its
    directory, its log file), or None when it is not installed."""
    prom = shutil.which("prometheus")
    if prom is None:
        return None
    d = tempfile.mkdtemp(prefix="rc-prom-")
    port = lg.free_port_pair(offset=0)
    cfg = os.path.join(d, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n")
        if rules is not None:
            shutil.copy(rules, d)
            f.write("rule_files: [%s]\n" % os.path.basename(rules))
        f.write("scrape_configs:\n  - job_name: ringcache\n    static_configs:\n"
                "      - targets: [%s]\n"
                % ", ".join("'127.0.0.1:%d'" % p for p in mports))
    log = open(os.path.join(d, "prometheus.log"), "wb")
    p = lg.track(subprocess.Popen(
        [prom, "--config.file", cfg, "--storage.tsdb.path", os.path.join(d, "data"),
         "--web.listen-address", "127.0.0.1:%d" % port], stdin=subprocess.DEVNULL,
        stdout=log, stderr=log))
    return p, port, d, log


def prometheus_scrapes(t, mports, sets):
    started = start_prometheus(mports)
    if started is None:
        t.skip("a Prometheus server scrapes the three nodes",
               "the prometheus server is not installed (Debian: prometheus)")
        return
    p, port, d, log = started
    last = [None]

    def poll():
        if p.poll() is not None:
            return True
        try:
            last[0] = prom_query(port, 'sum(memcached_commands_total{command="set"})')
        except OSError:
            return False
        except ValueError:
            return False
        return last[0] == sets
    try:
        lg.wait_for(poll, 60.0, 0.2)
        t.ok(p.poll() is None and last[0] == sets,
             "prometheus (scrape_interval 1s): sum(memcached_commands_total{command=\"set\"}) "
             "= %d" % sets, (p.poll(), last[0]))
        up = None
        if p.poll() is None:
            try:
                up = prom_query(port, "sum(memcached_up)")
            except (OSError, ValueError) as e:
                up = str(e)
        t.ok(up == 3, "prometheus: sum(memcached_up) = 3", up)
    finally:
        lg.stop_proc(p, 10.0)
        log.close()
        if t.failed == 0:
            shutil.rmtree(d, ignore_errors=True)
        else:
            t.diag("prometheus files kept in %s" % d)


def scenario(t):
    cl = lg.Cluster(replicas=1, mem=64)
    conns = {}
    try:
        mports = metrics_nodes(cl, IDS)
        rc, out, err = cl.ctl("init", "--members", cl.write_members(IDS))
        t.ok(rc == 0 and cl.store_epoch() == 1, "ringctl init: exit 0, epoch 1 in the store",
             (rc, out[-500:], err[-500:]))
        conv = cl.converged(1, IDS)
        if not t.ok(all(v == (1, 0) for v in conv.values()), "every node reports EPOCH 1 0",
                    conv):
            return
        st, body, ctype = http_req(mports["a"])
        t.ok(st == 200 and ctype == "text/plain; version=0.0.4; charset=utf-8",
             "GET /metrics: 200, text/plain; version=0.0.4", (st, ctype))
        t.ok(http_req(mports["a"], "GET", "/")[0] == 404
             and http_req(mports["a"], "GET", "/metricsx")[0] == 404,
             "GET / and GET /metricsx: 404")
        t.ok(http_req(mports["a"], "POST")[0] == 405, "POST /metrics: 405")

        keys = (["mk-%d" % i for i in range(NSETS)] + ["miss-%d" % i for i in range(NMISS)]
                + ["num"] + ["fw-%d" % i for i in range(50)])
        owner = {k: o[0] for k, o in lg.locate(cl.store_active(), keys).items()}
        for nid in IDS:
            conns[nid] = lg.Conn(cl.nodes[nid].addr, 5.0)
            conns[nid].declare(1)
        tr = send_traffic(t, cl, owner, conns)
        promtool = shutil.which("promtool")
        for nid in IDS:
            st, body, _ = http_req(mports[nid])
            check_node(t, nid, body, tr, promtool)
        ups = {}
        for nid in IDS:
            ups[nid] = lg.wait_for(lambda: peers_up(mports[nid], nid) == {
                o: 1 for o in IDS if o != nid}, 10.0, 0.1)
        t.ok(all(ups.values()), "ringcache_peer_up{peer} is 1 for both peers at every node",
             {n: peers_up(mports[n], n) for n in IDS})

        # Forwarding: a plain connection to a asks for keys a does not own.
        fw = [k for k in keys if k.startswith("fw-") and owner[k] != "a"][:NFWD]
        before = parse(http_req(mports["a"])[1]).get(("ringcache_forwarded_total", ()))
        plain = lg.Conn(cl.nodes["a"].addr, 5.0)
        try:
            res = [plain.get_multi([k]) for k in fw]
        finally:
            plain.close()
        after = parse(http_req(mports["a"])[1]).get(("ringcache_forwarded_total", ()))
        t.ok(len(fw) == NFWD and all(r == ({}, None) for r in res)
             and before == 0 and after == NFWD,
             "a: %d plain gets of keys it does not own: ringcache_forwarded_total 0 -> %d"
             % (NFWD, NFWD), (len(fw), res, before, after))

        prometheus_scrapes(t, list(mports.values()), NSETS + 1)

        # A value over the item size limit (-I 1m): SERVER_ERROR, counted
        # (after the Prometheus check: memcached counts it in cmd_set too).
        big = [k for k in keys if owner[k] == "a"][0]
        reply = conns["a"].store("set", big, b"x" * (1024 * 1024 + 1))
        st = parse(http_req(mports["a"])[1])
        t.ok(reply.startswith(b"SERVER_ERROR")
             and st.get(("memcached_item_too_large_total", ())) == 1,
             "a: a set of 1 MiB + 1 byte: SERVER_ERROR, memcached_item_too_large_total 1",
             (reply, st.get(("memcached_item_too_large_total", ()))))

        # Peer health: c killed, a and b see it down.
        cl.nodes["c"].stop(signal.SIGKILL)
        downs = {nid: lg.wait_for(lambda: peers_up(mports[nid], nid) == {
            o: (0 if o == "c" else 1) for o in IDS if o != nid}, 20.0, 0.1) for nid in ("a", "b")}
        t.ok(all(downs.values()), "c killed: ringcache_peer_up{peer=\"c\"} 0 at a and b",
             {n: peers_up(mports[n], n) for n in ("a", "b")})
        for c in conns.values():
            c.close()
        conns = {}
        rcs = {nid: cl.nodes[nid].stop(signal.SIGTERM) for nid in ("a", "b")}
        t.ok(rcs == {"a": 0, "b": 0} and not any(lg.can_connect(mports[n]) for n in IDS),
             "SIGTERM: a and b exit 0 and their metrics ports are closed", rcs)
    finally:
        for c in conns.values():
            c.close()
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 170, "ringcached --metrics")


if __name__ == "__main__":
    main()
