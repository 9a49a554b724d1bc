"""ringctl --json (issue 27): every command that prints gives one JSON
object on stdout, with the facts of its text output. R=2, a b c: init,
status, locate, ring, set/get/mg/mget/stats/top/ms/md/delete through
--members, plan join,
join d (the result against history --json), rate with nothing pending, an
unknown member (valid JSON with the text's exit code), RINGCTL_JSON=1, and
watch --once removing a dead node as a JSON event line."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402


def jctl(t, cl, *args, want_rc=0, env=None, stdin=None):
    """ringctl --json ARGS: (rc, the parsed object or None, stderr)."""
    cmd = cl.ctl_cmd("--json", *args)
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(cmd, input=stdin or "", capture_output=True, text=True, timeout=90,
                       env=e)
    try:
        obj = json.loads(p.stdout)
    except ValueError:
        obj = None
    t.ok(obj is not None and isinstance(obj, dict) and obj.get("ok") == (want_rc == 0)
         and p.returncode == want_rc,
         "ringctl --json %s: one JSON object, exit %d" % (" ".join(args[:3]), want_rc),
         (p.returncode, p.stdout[-800:], lg.tail(p.stderr)))
    return p.returncode, obj or {}, p.stderr


def scenario(t):
    # Every keyed request counted in the hot-key sketch (for top).
    cl = lg.Cluster(replicas=2, node_args=("--hotkeys-sample", "1"))
    try:
        for i in "abc":
            cl.add(i)
        mem = cl.write_members(["a", "b", "c"])
        rc, ini, _ = jctl(t, cl, "init", "--members", mem)
        t.ok(ini.get("epoch") == 1 and [(n["id"], n["addr"], n["result"])
                                        for n in ini.get("nodes", [])]
             == [(i, cl.nodes[i].addr_s, "ok") for i in "abc"],
             "init --json: epoch 1, each node and its result", ini)
        conv = cl.converged(1, ["a", "b", "c"])
        if not t.ok(all(v == (1, 0) for v in conv.values()), "every node at EPOCH 1 0", conv):
            return

        # status: the store's epoch and every node, as the text says.
        rc, st, _ = jctl(t, cl, "status")
        text = cl.status()
        nodes = {n["id"]: n for n in st.get("nodes", [])}
        t.ok(st.get("epoch") == 1 == text["epoch"] and st.get("pending") is None
             and st.get("phase") == text["phase"] and set(nodes) == set(text["nodes"])
             and all(n["state"] == "up" and n["active"] == 1 and n["addr"] ==
                     cl.nodes[i].addr_s and isinstance(n["share"], float)
                     for i, n in nodes.items()),
             "status --json: epoch 1, nothing pending, a b c up at epoch 1", st)

        # locate: the same owners as the text form, per key.
        keys = ["k%d" % i for i in range(20)]
        p = subprocess.run([lg.RINGCTL, "locate", "--members", mem] + keys,
                           capture_output=True, text=True, timeout=30)
        want = {ln.split("\t")[0]: ln.split("\t")[1].split(",") for ln in p.stdout.splitlines()}
        rc, lo, _ = jctl(t, cl, "locate", "--members", mem, *keys)
        got = {o["key"]: o["nodes"] for o in lo.get("owners", [])}
        t.ok(len(want) == 20 and got == want, "locate --json: each key's owners as locate's text",
             (got, want))

        rc, ring, _ = jctl(t, cl, "ring", "--members", mem)
        share = sum(n["share_pct"] for n in ring.get("nodes", []))
        t.ok(ring.get("epoch") == 1 and ring.get("replicas") == 2 and
             [n["id"] for n in ring.get("nodes", [])] == ["a", "b", "c"]
             and abs(share - 100) < 0.01 and ring.get("points") == 480,
             "ring --json: epoch 1, R=2, a b c, shares add to 100%, 480 points", ring)

        # Data commands (--members before the command).
        rc, s, _ = jctl(t, cl, "--members", mem, "set", "k1", "hello")
        t.ok(s.get("stored") == [{"key": "k1", "node": want["k1"][0]}],
             "set --json: the key and its owner (locate's first)", s)
        rc, g, _ = jctl(t, cl, "--members", mem, "get", "k1")
        t.ok(g.get("values") == [{"key": "k1", "value": "hello"}], "get --json: the value", g)
        rc, g, err = jctl(t, cl, "--members", mem, "get", "k1", "nope", want_rc=1)
        t.ok(g.get("values") == [{"key": "k1", "value": "hello"}] and g.get("code") == 1
             and "nope" in g.get("error", ""),
             "get --json of a hit and a miss: the hit, and the miss as error, code 1", g)
        rc, m, _ = jctl(t, cl, "--members", mem, "mg", "k1", "v", "c", "s")
        t.ok(m.get("key") == "k1" and m.get("value") == "hello" and m.get("size") == 5
             and isinstance(m.get("cas"), int) and m.get("status") == "hit",
             "mg --json: key, status, value, size and cas as fields", m)
        rc, mg, _ = jctl(t, cl, "--members", mem, "mget", stdin="k1\nk2\n", want_rc=1)
        vals = mg.get("values", [])
        t.ok(len(vals) == 1 and vals[0]["key"] == "k1" and vals[0]["value"] == "hello"
             and vals[0]["node"] in want["k1"], "mget --json: the hit with the node that served it",
             mg)
        rc, sts, _ = jctl(t, cl, "--members", mem, "stats")
        rows = {r["stat"]: r for r in sts.get("stats", [])}
        t.ok("curr_items" in rows and all(isinstance(rows["curr_items"].get(i), int)
                                          for i in "abc"),
             "stats --json: a row per stat, a number per node", list(rows)[:5])
        rc, top, _ = jctl(t, cl, "--members", mem, "top", "-n", "3")
        k1 = [k for k in top.get("keys", []) if k["key"] == "k1"]
        t.ok(len(top.get("keys", [])) <= 3 and top["keys"][0]["rank"] == 1 and len(k1) == 1
             and k1[0]["requests"] >= 4 and k1[0]["owners"] == want["k1"]
             and isinstance(k1[0]["seen_at"], list),
             "top --json: ranked keys, k1 with its requests and owners (as locate)", top)
        rc, ms, _ = jctl(t, cl, "--members", mem, "ms", "k2", "v2", "T60")
        t.ok(ms.get("key") == "k2" and ms.get("status") == "stored"
             and ms.get("owner", "").startswith(want["k2"][0] + " "),
             "ms --json: stored, on locate's first owner", ms)
        rc, md, _ = jctl(t, cl, "--members", mem, "md", "k2")
        t.ok(md.get("status") == "deleted", "md --json: deleted", md)
        rc, d, _ = jctl(t, cl, "--members", mem, "delete", "k1")
        t.ok(d.get("deleted") == [{"key": "k1", "result": "deleted"}], "delete --json", d)

        # plan join (a dry run), then the join and its history.
        d_node = cl.add("d")
        rc, pl, _ = jctl(t, cl, "plan", "join", "d", d_node.addr_s)
        t.ok(pl.get("epoch") == {"from": 1, "to": 2} and
             {n["id"] for n in pl.get("nodes", [])} == {"a", "b", "c", "d"}
             and isinstance(pl.get("primary_moved"), float),
             "plan join --json: epochs 1 -> 2, a row per node, the share moved", pl)
        rc, jn, _ = jctl(t, cl, "join", "d", d_node.addr_s)
        t.ok(jn.get("epoch") == 2 and jn.get("op", "").startswith("join d")
             and isinstance(jn.get("moved_items"), int) and jn.get("cleanup") == "done",
             "join --json: epoch 2, the op, items moved, cleanup done", jn)
        rc, hi, _ = jctl(t, cl, "history")
        rc2, hout, _ = cl.ctl("history")
        mv = hi.get("moves", [])
        t.ok(len(mv) == 1 == len(hout.splitlines()) - 1 and mv[0]["from_epoch"] == 1
             and mv[0]["epoch"] == 2 and mv[0]["outcome"] == "committed"
             and mv[0]["items"] == jn.get("moved_items") and mv[0]["op"] == jn.get("op"),
             "history --json: the join, as its text row and the join's result say",
             (mv, hout))

        # Commands that act: rate with nothing pending fails as the text.
        rc_text, _, _ = cl.ctl("rate", "5")
        rc, r, _ = jctl(t, cl, "rate", "5", want_rc=rc_text)
        t.ok(rc_text == 1 and r.get("code") == 1 and "no move is pending" in r.get("error", ""),
             "rate --json with no move: error and code, exit 1 as the text", r)
        # A bad member id: valid JSON, the same exit code as the text.
        rc_text, _, err_text = cl.ctl("leave", "zz")
        rc, bad, err = jctl(t, cl, "leave", "zz", want_rc=rc_text)
        t.ok(rc_text != 0 and bad.get("code") == rc_text and "zz" in bad.get("error", ""),
             "leave --json of an unknown member: error naming it, code %d" % rc_text,
             (bad, err_text))
        rc, w, _ = jctl(t, cl, "status", "--watch", want_rc=2)
        t.ok("--watch" in w.get("error", ""), "status --watch --json: refused (exit 2)", w)
        rc_text, out_text, _ = cl.ctl("resume")
        rc, rs, _ = jctl(t, cl, "resume", want_rc=rc_text)
        tf = dict(ln.split("\t", 1) for ln in out_text.splitlines() if "\t" in ln)
        t.ok(rc_text == 0 and rs.get("epoch") == int(tf.get("epoch", -1)) == 2
             and rs.get("op") == tf.get("op") and rs.get("cleanup") == tf.get("cleanup")
             and rs.get("nodes_not_committed") == int(tf.get("nodes_not_committed", -1)),
             "resume --json (re-sends epoch 2): the text's fields, typed", (rs, out_text))
        rc, u, _ = jctl(t, cl, "bogus", want_rc=2)
        t.ok("unknown command" in u.get("error", ""), "an unknown command: JSON error, exit 2", u)
        # RINGCTL_JSON=1 is --json; --human is ignored under it.
        p = subprocess.run(cl.ctl_cmd("--human", "status"), capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, RINGCTL_JSON="1"))
        try:
            env_st = json.loads(p.stdout)
        except ValueError:
            env_st = {}
        t.ok(p.returncode == 0 and env_st.get("epoch") == 2 and len(env_st.get("nodes", [])) == 4,
             "RINGCTL_JSON=1 --human status: JSON, epoch 2, four nodes", p.stdout[-500:])

        # watch: a dead node removed, as a JSON event line, then the result.
        cl.nodes["d"].stop()
        p = subprocess.run(cl.ctl_cmd("--json", "watch", "--once", "--down-after", "0"),
                           capture_output=True, text=True, timeout=120)
        lines = p.stdout.splitlines()
        try:
            objs = [json.loads(ln) for ln in lines]
        except ValueError:
            objs = []
        ev = [o for o in objs if o.get("source") == "watch"]
        t.ok(len(objs) == len(lines) >= 2 and len(ev) == 1 and ev[0]["id"] == "d"
             and ev[0]["action"] == "remove --failed" and ev[0]["outcome"] == "done"
             and ev[0].get("result", {}).get("epoch") == 3 and objs[-1].get("command") == "watch",
             "watch --once --json: one JSON line per event (d removed, epoch 3), then the result",
             (p.returncode, p.stdout[-800:], lg.tail(p.stderr)))
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main([scenario], 240, "ringctl --json")


if __name__ == "__main__":
    main()
