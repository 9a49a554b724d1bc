#!/usr/bin/env python3
"""Hot keys (server/hotkeys.c): a 3-node R=1 cluster, every node with
--hotkeys-sample 1 --hotkeys-decay 0 (every request counted, no decay),
two plain connections per node (two workers' sketches to merge). Known
skewed traffic goes to each node: hot-1 to all three, hot-2 to a, hot-3 by
meta mg to b, a binary key (meta b flag) to c, then a churn of 2,000 cold
keys read once each. Each node's `stats hotkeys` must list its hot keys
first with exactly the counts sent and no overestimate (they were counted
before the churn began, so never replaced), the binary key in base64 with
the b marker; /metrics must carry ringcache_hotkey_requests for them and
promtool must accept the page; `ringctl top` must sum hot-1 over the three
nodes, name where each key was seen and its owner by the ring. A relayed
request counts once, at the node its client sent it to. Then single nodes:
--hotkeys-sample 10 scales counts by 10, --hotkeys-sample 0 lists none,
--hotkeys-decay 1 halves the counts within a deadline, bad values are
refused at startup."""
import base64
import os
import re
import shutil
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

IDS = ["a", "b", "c"]
HOTKEY = re.compile(r"^hotkey:(\d+)$")
BINKEY = b"bin key\x01"


def hotkeys(conn):
    """`stats hotkeys` -> [(key, count, err, binary)] in rank order."""
    st = conn.stats("hotkeys")
    rows = []
    for name, value in st.items():
        m = HOTKEY.match(name)
        if m is None:
            raise lg.ProtoError("stats hotkeys: %r" % name)
        p = value.split()
        rows.append((int(m.group(1)), p[0], int(p[1]), int(p[2]), p[3:] == ["b"]))
    rows.sort()
    return [r[1:] for r in rows]


def send_gets(conn, key, n):
    """n pipelined plain gets of key; True when all replies came."""
    conn.send(("get %s\r\n" % key).encode() * n)
    for _ in range(n):
        line = conn.readline()
        while line != b"END":
            if line.startswith(b"VALUE"):
                conn.readn(int(line.split()[3]))
            elif line != b"END":
                return False
            line = conn.readline()
    return True


def send_mg(conn, key, n, binary=False):
    token = base64.b64encode(key).decode() if binary else key.decode()
    conn.send(("mg %s v%s\r\n" % (token, " b" if binary else "")).encode() * n)
    for _ in range(n):
        line = conn.readline()
        if line.startswith(b"VA "):
            conn.readn(int(line.split()[1]))
        elif line != b"EN":
            return False
    return True


def metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        return r.read().decode()


def cluster_scenario(t):
    cl = lg.Cluster(replicas=1, mem=64)
    conns = []
    try:
        mport = lg.free_port_pair(offset=0)
        for nid in IDS:
            cl.node_args = ["--hotkeys-sample", "1", "--hotkeys-decay", "0"]
            if nid == "a":
                cl.node_args += ["--metrics", "127.0.0.1:%d" % mport]
            cl.add(nid)
        members = cl.write_members(IDS)
        rc, out, err = cl.ctl("init", "--members", members)
        if not t.ok(rc == 0 and all(v == (1, 0) for v in cl.converged(1, IDS).values()),
                    "ringctl init: the three nodes run epoch 1", (rc, err[-300:])):
            return
        c = {nid: [lg.Conn(cl.nodes[nid].addr, 10.0) for _ in range(2)] for nid in IDS}
        conns = [x for pair in c.values() for x in pair]
        ok = c["a"][0].store("set", "hot-1", b"v") == b"STORED"
        sent = {"a": {"hot-1": 1}, "b": {}, "c": {}}
        # hot-1 at every node over both connections, 300 a node; hot-2 at
        # a; hot-3 (meta) at b; the binary key at c.
        for nid in IDS:
            ok = send_gets(c[nid][0], "hot-1", 150) and send_gets(c[nid][1], "hot-1", 150) and ok
            sent[nid]["hot-1"] = sent[nid].get("hot-1", 0) + 300
        ok = send_gets(c["a"][0], "hot-2", 120) and send_gets(c["a"][1], "hot-2", 80) and ok
        sent["a"]["hot-2"] = 200
        ok = send_mg(c["b"][0], b"hot-3", 100) and send_mg(c["b"][1], b"hot-3", 60) and ok
        sent["b"]["hot-3"] = 160
        ok = send_mg(c["c"][1], BINKEY, 150, binary=True) and ok
        for nid in IDS:
            ok = send_gets(c[nid][0], " ".join("cold-%s-%d" % (nid, i) for i in range(1000)),
                           1) and ok
            ok = send_gets(c[nid][1], " ".join("cold2-%s-%d" % (nid, i) for i in range(1000)),
                           1) and ok
        t.ok(ok, "the traffic got its replies")

        tops = {nid: hotkeys(c[nid][0]) for nid in IDS}
        want = {
            "a": [("hot-1", 301, 0, False), ("hot-2", 200, 0, False)],
            "b": [("hot-1", 300, 0, False), ("hot-3", 160, 0, False)],
        }
        for nid in ("a", "b"):
            t.ok(tops[nid][:2] == want[nid],
                 "%s: stats hotkeys lists its hot keys first with the exact counts sent, "
                 "overestimate 0 (each was counted on both workers)" % nid,
                 {"want": want[nid], "got": tops[nid][:4]})
        # The binary key went over one connection: the other worker's full
        # sketch may have counted it up to its smallest counter, which the
        # merge adds to the count and to the bound.
        b64 = base64.b64encode(BINKEY).decode()
        binrow = [r for r in tops["c"] if r[0] == b64]
        t.ok(tops["c"][0] == ("hot-1", 300, 0, False) and binrow and binrow[0][3]
             and binrow[0][1] - binrow[0][2] <= 150 <= binrow[0][1] and binrow[0][2] < 40
             and tops["c"][1] == binrow[0],
             "c: hot-1 300 first, then the binary key in base64 with the b marker, "
             "150 within its bound", tops["c"][:4])
        t.ok(all(len(tops[nid]) <= 64 and all(r[1] - r[2] <= 2 for r in tops[nid][2:])
                 for nid in IDS),
             "every node: at most 64 keys listed; the cold ones read once or twice "
             "(count minus bound <= 2)", {nid: (len(tops[nid]), tops[nid][2:4]) for nid in IDS})
        # Forwarded gets (a plain client at a non-owner) counted once: the
        # owners of hot-2 did not list it.
        owner = {k: o[0] for k, o in lg.locate(cl.store_active(), ["hot-1", "hot-2",
                                                                    "hot-3"]).items()}
        others = [n for n in IDS if n != "a"]
        t.ok(all("hot-2" not in [r[0] for r in tops[n]] for n in others),
             "hot-2, sent only to a, is not counted again where a relayed it (owner %s)"
             % owner["hot-2"], {n: tops[n][:3] for n in others})

        page = metrics(mport)
        m = re.search(r'^ringcache_hotkey_requests\{key="hot-1"\} (\d+)$', page, re.M)
        t.ok(m is not None and int(m.group(1)) == 301,
             "a's /metrics: ringcache_hotkey_requests{key=\"hot-1\"} 301",
             m.group(0) if m else page[-400:])
        t.ok(re.search(r'^ringcache_hotkey_overestimate\{key="hot-2"\} 0$', page, re.M),
             "a's /metrics: ringcache_hotkey_overestimate{key=\"hot-2\"} 0")
        promtool = shutil.which("promtool")
        if promtool is None:
            t.skip("promtool check metrics", "promtool is not installed (Debian: prometheus)")
        else:
            r = subprocess.run([promtool, "check", "metrics"], input=page, capture_output=True,
                               text=True, timeout=30)
            t.ok(r.returncode == 0 and r.stdout == "" and r.stderr == "",
                 "promtool check metrics: the page with hot keys passes, prints nothing",
                 (r.returncode, r.stdout[-300:], r.stderr[-300:]))

        rc, out, err = cl.ctl("--members", members, "top", "-n", "5")
        rows = [line.split("\t") for line in out.splitlines()[1:]]
        t.ok(rc == 0 and out.splitlines()[0].split("\t") == [
            "rank", "key", "requests", "overest", "seen_at", "owners"],
            "ringctl top: exit 0, a header line", (rc, out[:300], err[-300:]))
        by_key = {r[1]: r for r in rows}
        binshow = base64.b64encode(BINKEY).decode() + " (b64)"
        t.ok(len(rows) == 5 and rows[0][:5] == ["1", "hot-1", "901", "0", "a,b,c"]
             and rows[0][5] == owner["hot-1"],
             "ringctl top: hot-1 first, 901 requests summed over a, b, c, its owner named",
             rows[:2])
        t.ok(by_key.get("hot-2", [None] * 6)[2:] == ["200", "0", "a", owner["hot-2"]]
             and by_key.get("hot-3", [None] * 6)[2:] == ["160", "0", "b", owner["hot-3"]],
             "ringctl top: hot-2 200 seen at a, hot-3 160 seen at b, each with its owner",
             rows)
        brow = by_key.get(binshow, [None] * 6)
        t.ok(brow[0] is not None and brow[4:] == ["c", "-"] and binrow
             and int(brow[2]) == binrow[0][1] and int(brow[3]) == binrow[0][2],
             "ringctl top: the binary key in base64 as c counted it, seen at c "
             "(no owner: not a text key)", (rows, binrow))
        rc, out, err = cl.ctl("--members", members, "top", "-n", "0")
        t.ok(rc == 2 and "-n" in err, "ringctl top -n 0: usage error, exit 2", (rc, err))
        rc, out, err = cl.ctl("--members", members, "stats", "hotkeys")
        t.ok(rc == 0 and out.splitlines()[0].split("\t") == ["stat", "a", "b", "c"]
             and any(line.startswith("hotkey:1\t") for line in out.splitlines()),
             "ringctl stats hotkeys: one column per node", (rc, out[:300], err[-300:]))
    finally:
        for x in conns:
            x.close()
        lg.close_cluster(t, cl)


def single_scenario(t):
    port = lg.free_port()
    p = subprocess.Popen([lg.RINGCACHED, "-p", str(port), "--hotkeys-sample", "10",
                          "--hotkeys-decay", "1"], stdin=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    lg.track(p)
    conn = None
    try:
        if not t.ok(lg.wait_for(lambda: lg.can_connect(port), 10.0),
                    "a single node with --hotkeys-sample 10 --hotkeys-decay 1 listens"):
            return
        conn = lg.Conn(("127.0.0.1", port), 10.0)
        ok = send_gets(conn, "s-hot", 1000) and send_gets(conn, "s-warm", 300)
        rows = hotkeys(conn)
        counts = {r[0]: r[1] for r in rows}
        t.ok(ok and counts.get("s-hot") in (1000, 990, 1010) and
             counts.get("s-warm") in (290, 300, 310),
             "sampled 1 in 10: counts scaled by 10, exact to one sample", rows)
        before = counts.get("s-hot", 0)
        # Decay runs when a sample lands after the period: keep sending.
        halved = lg.wait_for(lambda: send_gets(conn, "s-other", 10) and dict(
            (r[0], r[1]) for r in hotkeys(conn)).get("s-hot", 0) <= before // 2, 10.0, 0.1)
        t.ok(halved, "--hotkeys-decay 1: the counts are halved within the deadline",
             hotkeys(conn)[:3])
        conn.close()
        conn = None
    finally:
        if conn is not None:
            conn.close()
        lg.stop_proc(p)

    port = lg.free_port()
    p = subprocess.Popen([lg.RINGCACHED, "-p", str(port), "--hotkeys-sample", "0"],
                         stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lg.track(p)
    try:
        if t.ok(lg.wait_for(lambda: lg.can_connect(port), 10.0),
                "a node with --hotkeys-sample 0 listens"):
            conn = lg.Conn(("127.0.0.1", port), 10.0)
            ok = send_gets(conn, "k", 100)
            t.ok(ok and hotkeys(conn) == [], "--hotkeys-sample 0: stats hotkeys lists nothing")
            st = conn.stats("settings")
            t.ok(st.get("hotkeys_sample") == "0" and st.get("hotkeys_decay") == "60",
                 "stats settings: hotkeys_sample 0, hotkeys_decay 60 (the default)", st)
            conn.close()
    finally:
        lg.stop_proc(p)

    for bad in (["--hotkeys-sample", "-1"], ["--hotkeys-sample", "x"],
                ["--hotkeys-decay", "86401"]):
        r = subprocess.run([lg.RINGCACHED, "-p", "0"] + bad, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=30)
        t.ok(r.returncode != 0 and bad[0] in r.stderr and "must be" in r.stderr,
             "ringcached %s: refused at startup with a message" % " ".join(bad),
             (r.returncode, r.stderr[:200]))


def main():
    lg.tap_main([cluster_scenario, single_scenario], 170, "hot keys")


if __name__ == "__main__":
    main()
