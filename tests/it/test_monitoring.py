#!/usr/bin/env python3
"""The alert rules and the dashboard in deploy/monitoring/, against what the
node really exports. Offline: `promtool check rules` passes; `promtool test
rules ringcache-rules.test.yml` passes (each alert fires on recorded series
when it should and not before, and not on look-alikes), and fails on a copy
of the rules with one threshold changed (the tests can fail); the dashboard
is JSON whose every panel has queries. Live: a 3-node R=2 cluster with
--metrics is scraped (every name a rule, a panel or a template variable
queries must be a family on a node's /metrics page, or Prometheus' up, or
a recording rule of the file); Debian's Prometheus loads the rules and
scrapes the nodes as job "ringcache": every rule evaluates with health ok,
every panel query runs without error, no alert is pending on the healthy
cluster, and once c is killed RingcacheTargetDown goes pending for c and
RingcachePeerDown for peer c."""
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
import test_metrics as tm  # noqa: E402
from test_metrics import http_req  # noqa: E402

yaml = lg.debian_import("yaml")

SRCDIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MDIR = os.path.join(SRCDIR, "deploy", "monitoring")
RULES = os.path.join(MDIR, "ringcache-rules.yml")
RULES_TEST = os.path.join(MDIR, "ringcache-rules.test.yml")
DASHBOARD = os.path.join(MDIR, "ringcache-dashboard.json")
IDS = ["a", "b", "c"]
KEYWORDS = {"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan", "atan2"}
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "15s", "$job": "ringcache",
                "$instance": ".*", "${datasource}": ""}


def metric_names(expr):
    """The metric names a PromQL expression selects (no parser in Debian's
    Python: strings, label matchers, ranges, grouping clauses, template
    variables and function calls are removed first)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)", e):
        rest = e[m.end():].lstrip()
        if rest.startswith("(") or m.group(1) in KEYWORDS:
            continue
        names.add(m.group(1))
    return names


def dashboard_queries(d):
    """[(panel title, expr)] of every panel (rows' nested panels too) and
    the metric of each label_values() template variable."""
    out = []
    for p in d.get("panels", []):
        for q in [p] + p.get("panels", []):
            for tgt in q.get("targets", []):
                out.append((q.get("title"), tgt.get("expr", "")))
    for v in d.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        m = re.match(r"label_values\((.*),\s*\w+\)$", q)
        if m:
            out.append(("variable " + v.get("name", "?"), m.group(1)))
    return out


def rule_exprs(doc):
    recorded, exprs = set(), []
    for g in doc.get("groups", []):
        for r in g.get("rules", []):
            if "record" in r:
                recorded.add(r["record"])
            exprs.append((r.get("alert") or r.get("record"), r["expr"]))
    return recorded, exprs


def families(text):
    """Names a /metrics page lets a query select: each family, plus a
    histogram's _bucket, _sum and _count."""
    out = set()
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            out.add(m.group(1))
            if m.group(2) in ("histogram", "summary"):
                out.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
    return out


def offline(t, promtool):
    r = subprocess.run([promtool, "check", "rules", RULES], capture_output=True, text=True,
                       timeout=60)
    t.ok(r.returncode == 0 and "SUCCESS" in r.stdout, "promtool check rules ringcache-rules.yml",
         r.stdout[-1500:] + r.stderr[-1500:])
    r = subprocess.run([promtool, "test", "rules", os.path.basename(RULES_TEST)], cwd=MDIR,
                       capture_output=True, text=True, timeout=120)
    t.ok(r.returncode == 0 and "SUCCESS" in r.stdout,
         "promtool test rules ringcache-rules.test.yml: SUCCESS",
         r.stdout[-3000:] + r.stderr[-1500:])
    # The same tests against rules with TargetDown's `for` made 10m: fail.
    d = tempfile.mkdtemp(prefix="rc-rules-")
    try:
        with open(RULES) as f:
            text = f.read()
        broken = text.replace("expr: up{job=\"ringcache\"} == 0\n        for: 1m",
                              "expr: up{job=\"ringcache\"} == 0\n        for: 10m")
        with open(os.path.join(d, "ringcache-rules.yml"), "w") as f:
            f.write(broken)
        shutil.copy(RULES_TEST, d)
        r = subprocess.run([promtool, "test", "rules", os.path.basename(RULES_TEST)], cwd=d,
                           capture_output=True, text=True, timeout=120)
        t.ok(broken != text and r.returncode != 0 and "RingcacheTargetDown" in r.stdout + r.stderr,
             "promtool test rules fails on rules with RingcacheTargetDown's `for` changed",
             r.stdout[-800:])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    t.ok(metric_names('sum by (job) (rate(memcached_comands_total{job="x",a=~"b"}[5m] '
                      'offset 1h)) / on (job) group_left max(x:y:z) > 0.8 * $job') ==
         {"memcached_comands_total", "x:y:z"},
         "the name extractor finds a misspelt metric and a recorded name, nothing else")


def prom_get(port, path, **params):
    url = "http://127.0.0.1:%d%s?%s" % (port, path, urllib.parse.urlencode(params))
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read().decode())


def live(t, promtool, dash, recorded, rexprs):
    cl = lg.Cluster(replicas=2, mem=32)
    prom, d, log = None, None, None
    try:
        mports = tm.metrics_nodes(cl, IDS)
        rc, out, err = cl.ctl("init", "--members", cl.write_members(IDS))
        conv = cl.converged(1, IDS)
        t.ok(rc == 0 and all(v == (1, 0) for v in conv.values()),
             "a 3-node R=2 cluster at epoch 1", (rc, conv, err[-500:]))
        c = lg.Conn(cl.nodes["a"].addr, 5.0)
        try:
            for i in range(50):
                c.store("set", "mon-%d" % i, b"v")
                c.get_multi(["mon-%d" % i, "absent-%d" % i])
        finally:
            c.close()
        have = {"up"} | recorded
        for nid in IDS:
            have |= families(http_req(mports[nid])[1])
        wanted = {}
        for where, expr in [("rule " + n, e) for n, e in rexprs] + \
                [("panel " + str(n), e) for n, e in dashboard_queries(dash)]:
            for name in metric_names(expr):
                wanted.setdefault(name, []).append(where)
        missing = {n: w for n, w in wanted.items() if n not in have}
        t.ok(len(wanted) >= 30 and not missing,
             "every one of the %d metric names the rules and the dashboard query is on the "
             "nodes' /metrics pages (or up, or a recording rule)" % len(wanted), missing)

        started = tm.start_prometheus([mports[n] for n in IDS], RULES)
        if started is None:
            t.skip("Prometheus loads the rules and runs the dashboard's queries",
                   "the prometheus server is not installed (Debian: prometheus)")
            return
        prom, port, d, log = started
        last = {}

        def rules_ok():
            if prom.poll() is not None:
                return True
            try:
                up = prom_get(port, "/api/v1/query", query='count(up{job="ringcache"} == 1)')
                rg = prom_get(port, "/api/v1/rules")["data"]["groups"]
            except (OSError, ValueError):
                return False
            res = up["data"]["result"]
            last["up"] = float(res[0]["value"][1]) if res else 0
            last["rules"] = {r["name"]: (r["health"], r.get("lastError", ""))
                             for g in rg for r in g["rules"]}
            return last["up"] == 3 and len(last["rules"]) == len(rexprs) and all(
                h == "ok" for h, _ in last["rules"].values())
        lg.wait_for(rules_ok, 60.0, 0.2)
        t.ok(prom.poll() is None and last.get("up") == 3 and len(last.get("rules", {})) ==
             len(rexprs) and all(h == "ok" for h, _ in last["rules"].values()),
             "prometheus scrapes the 3 nodes as job ringcache and evaluates all %d rules with "
             "health ok" % len(rexprs), last)
        errors = {}
        for title, expr in dashboard_queries(dash):
            q = expr
            for k, v in GRAFANA_VARS.items():
                q = q.replace(k, v)
            try:
                r = prom_get(port, "/api/v1/query", query=q)
                if r.get("status") != "success":
                    errors[title] = r
            except (OSError, ValueError) as e:
                errors[title] = "%s: %s" % (q, e)
        t.ok(not errors, "each of the dashboard's %d queries runs in Prometheus"
             % len(dashboard_queries(dash)), errors)
        r = prom_get(port, "/api/v1/query", query='ringcache_ready{job="ringcache"} == 1')
        t.ok(len(r["data"]["result"]) == 3, "ringcache_ready 1 on the three nodes",
             r["data"]["result"])
        alerts = prom_get(port, "/api/v1/alerts")["data"]["alerts"]
        t.ok(alerts == [], "healthy cluster: no alert pending or firing", alerts)

        cl.nodes["c"].stop(signal.SIGKILL)
        want = {("RingcacheTargetDown", "127.0.0.1:%d" % mports["c"]), ("RingcachePeerDown", "c")}
        seen = [set()]

        def pending():
            try:
                al = prom_get(port, "/api/v1/alerts")["data"]["alerts"]
            except (OSError, ValueError):
                return False
            seen[0] = {(a["labels"]["alertname"],
                        a["labels"].get("instance") or a["labels"].get("peer")) for a in al}
            return want <= seen[0]
        lg.wait_for(pending, 30.0, 0.2)
        t.ok(want <= seen[0], "c killed: RingcacheTargetDown for c and RingcachePeerDown for "
             "peer c become active (pending)", seen[0])
    finally:
        if prom is not None:
            lg.stop_proc(prom, 10.0)
        if log is not None:
            log.close()
        if d is not None:
            if t.failed == 0:
                shutil.rmtree(d, ignore_errors=True)
            else:
                t.diag("prometheus files kept in %s" % d)
        lg.close_cluster(t, cl)


def scenario(t):
    promtool = shutil.which("promtool")
    if promtool is None or yaml is None:
        t.skip("deploy/monitoring rules and dashboard",
               "promtool (Debian: prometheus) or python3-yaml not installed")
        return
    offline(t, promtool)
    with open(DASHBOARD) as f:
        try:
            dash = json.load(f)
        except ValueError as e:
            t.ok(False, "ringcache-dashboard.json parses", str(e))
            return
    qs = dashboard_queries(dash)
    t.ok(dash.get("title") and len(qs) >= 20 and all(e.strip() for _, e in qs),
         "ringcache-dashboard.json parses; %d queries, none empty" % len(qs))
    titles = " ".join(str(p.get("title", "")) for p in dash.get("panels", [])).lower()
    t.ok(all(w in titles for w in ("hit ratio", "ops", "evictions", "memory", "connections",
                                   "items", "epoch", "peer", "tryagain", "unavailable",
                                   "move", "hot keys")),
         "the dashboard has memcached-mixin's panels plus epochs, peers, TRYAGAIN/UNAVAILABLE, "
         "move progress and hot keys", titles)
    with open(RULES) as f:
        recorded, rexprs = rule_exprs(yaml.safe_load(f))
    live(t, promtool, dash, recorded, rexprs)


def main():
    lg.tap_main(scenario, 200, "deploy/monitoring")


if __name__ == "__main__":
    main()
