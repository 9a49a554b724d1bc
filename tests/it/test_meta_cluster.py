#!/usr/bin/env python3
"""The meta protocol across an R=2 cluster (docs/cluster.md): routing, the
win token, the stale mark and the CAS kept on both owners, through a join
and a failover. Nodes a, b, c, then d joins, then b is killed.

(a) routing: a sequence of every meta command gets the same replies from
    the key's primary, its secondary and a non-owner for a plain client
    (relayed), and from the primary for a declared one; a declared client
    gets `SERVER_ERROR MOVED 1 <primary>` from a non-owner (ms: its data
    swallowed) and, for the commands the primary decides (mg ms md ma),
    from the secondary; a base64 key (b) routes by its decoded bytes.
(b) herd: 50 plain connections spread over every node send
    `mg <missing> N30 c v t` at once: exactly one W (one key per primary).
(c) stale-while-revalidate across nodes: md I, then 50 mg through every
    node: exactly one X W, 49 Z X.
(d) replicas agree: after each mutating meta command (through a
    non-owner) both owners hold the same value, flags and CAS (`gets` from
    a declared connection at each, which any owner serves), and `me` at
    each owner that answers it agrees on CAS and TTL.
(f) join of d: keys vivified (W sent), stale with the token sent, stale
    without it, and plain, whose new primary is d; while the join is held
    fenced (RINGCTL_EXIT_AFTER=fence) a declared client gets `SERVER_ERROR
    TRYAGAIN` on a moving key and is served on a key that does not move, a
    plain one is served once the fence lifts; after the commit the keys
    keep their state at d (Z stays Z, X stays X, the CAS is the same) and a
    herd gets exactly one W per key that had none out.
(e) failover: b's keys in the same four states; kill -9 b, `ringctl
    remove --failed b`; herds of 50 through a, c, d: no W where one was
    out before the failover, exactly one where none was; then md I and a
    herd: exactly one X W.
"""
import base64
import os
import re
import signal
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import failover_lib as fl  # noqa: E402
import meta_lib as ml  # noqa: E402
from meta_lib import Case, S  # noqa: E402

NHERD = 50
TTL = 300            # vivify/stale TTLs: far beyond the test's length

INVAL = "CLIENT_ERROR invalid flag\r\n"
DUP = "CLIENT_ERROR duplicate flag\r\n"

# Every meta command, in an order where each reply is known; run with a
# fresh key (k; k2 a miss; bk the base64 of a key with the same owners)
# from each entry point.
ROUTE_CASE = Case("every meta command", [
    S("mn\r\n", "MN\r\n", probe=False),
    S("me {k}\r\n", "EN\r\n"),
    S("mg {k} v\r\n", "EN\r\n"),
    S("mg {k} Oab k v q\r\nmg {k} v k Oq\r\nmn\r\n", "EN k{k} Oq\r\nMN\r\n"),
    S("ms {k} 2 T100 F5 c k s O1\r\nhi\r\n", "HD c(?cas) k{k} s2 O1\r\n"),
    S("mg {k} s v f t c k Oxx\r\n", "VA 2 s2 f5 t(?:97..100) c{cas} k{k} Oxx\r\nhi\r\n"),
    S("mg {k} v C{cas}\r\n", "HD\r\n"),
    S("me {k}\r\n", "ME {k} exp=(?:97..100) la=(?:0..3) cas={cas} fetch=yes cls=(?*) "
      "size=(?*)\r\n"),
    S("ms {k} 3 q MA\r\nzzz\r\n", ""),
    S("mg {k} v s\r\n", "VA 5 s5\r\nhizzz\r\n"),
    S("ms {k} 1 ME c\r\nx\r\n", "NS c0\r\n"),
    S("ms {k} 1 C{cas}\r\nx\r\n", "EX\r\n"),
    S("ms {k} 2 j\r\nhi\r\n", INVAL),
    S("ms {k} 2\r\nhiXYmn\r\n", "CLIENT_ERROR bad data chunk\r\nMN\r\n"),
    S("mg {k} v q\r\nms {k2} 1 q\r\na\r\nmg {k2} v\r\nmd {k2} q\r\nmg {k2} v q\r\nmn\r\n",
      "VA 5\r\nhizzz\r\nVA 1\r\na\r\nMN\r\n"),
    S("md {k} I T30\r\n", "HD\r\n"),
    S("mg {k} v c\r\n", "VA 5 c(?c2) X W\r\nhizzz\r\n"),
    S("mg {k} v c t\r\n", "VA 5 c{c2} t(?:27..30) Z X\r\nhizzz\r\n"),
    S("ms {k} 2 I C{cas}\r\nst\r\n", "HD\r\n"),
    S("mg {k} v\r\n", "VA 2 Z X\r\nst\r\n"),
    S("md {k} q\r\n", ""),
    S("mg {k} v\r\n", "EN\r\n"),
    S("mg {k} N30 t\r\n", "HD t(?:28..30) W\r\n"),
    S("mg {k} N30 t\r\n", "HD t(?:27..30) Z\r\n"),
    S("ms {k} 1 T0\r\n5\r\n", "HD\r\n"),
    S("ma {k} v\r\n", "VA 1\r\n6\r\n"),
    S("ma {k} q D4\r\n", ""),
    S("ma {k} MD v c\r\n", "VA 1 c(?*)\r\n9\r\n"),
    S("ma {k2} N0 J7 v q\r\n", ""),
    S("ma {k2} v O2 k\r\n", "VA 1 O2 k{k2}\r\n8\r\n"),
    S("md {k2} x\r\n", "HD\r\n"),
    S("mg {k2} v s\r\n", "VA 0 s0\r\n\r\n"),
    S("ms {k2} 2 E777 c\r\nhi\r\n", "HD c777\r\n"),
    S("md {k2} I E778 C777\r\n", "HD\r\n"),
    S("mg {k2} c v\r\n", "VA 2 c778 X W\r\nhi\r\n"),
    S("mg {k} v v\r\n", DUP),
    S("mg {bk} b k v\r\n", "EN k{bk} b\r\n"),
    S("ms {bk} 2 b c\r\nhi\r\n", "HD c(?*)\r\n"),
    S("mg {bk} b k v\r\n", "VA 2 k{bk} b\r\nhi\r\n"),
    S("me {bk} b x\r\n", "ME {bk} exp=-1 la=(?:0..3) cas=(?*) fetch=yes cls=(?*) size=(?*)\r\n"),
    S("md {bk} b q\r\n", ""),
    S("mg {bk} b v\r\n", "EN\r\n"),
])

BIG = "x" * 300000
# Large values: relayed whole, and one over the item size limit (swallowed
# where it is refused, the older value removed as memcached does).
BIG_CASE = Case("large values", [
    S("ms {k} 300000 T0\r\n" + BIG + "\r\n", "HD\r\n"),
    S("mg {k} s v\r\n", "VA 300000 s300000\r\n" + BIG + "\r\n"),
    S("ms {k} 2000000\r\n" + "y" * 2000000 + "\r\n", "SERVER_ERROR object too large for cache\r\n"),
    S("mg {k} v\r\n", "EN\r\n"),
    # The classic set too (a relaying node refused it once without telling
    # the owner, whose older value stayed).
    S("set {k} 0 0 3\r\nold\r\n", "STORED\r\n"),
    S("set {k} 0 0 2000000\r\n" + "y" * 2000000 + "\r\n",
      "SERVER_ERROR object too large for cache\r\n"),
    S("get {k}\r\n", "END\r\n"),
], timeout=10.0)

_NUM_RE = re.compile(rb"(?<=[ =])(c|t|cas=|exp=|la=|size=|cls=)-?[0-9]+")


def masked(transcript, env):
    """A transcript with the keys and the numbers that differ between two
    keys (CAS, TTL, access time, sizes) masked, to compare entry points."""
    out = []
    for got in transcript:
        for name in ("k2", "k", "bk"):
            got = got.replace(env[name].encode(), b"<%s>" % name.encode())
        out.append(_NUM_RE.sub(rb"\1#", got))
    return out


def part(t, name, fn, *args):
    """Run one part; an exception is a failed TAP line (the others go on)."""
    try:
        return fn(t, *args)
    except Exception:
        t.ok(False, "%s ran to its end" % name, traceback.format_exc())
        return None


class Keys:
    """Keys by owner list under the active membership."""

    def __init__(self, members, n=4000, prefix="mk"):
        self.text = ["%s-%d-%d" % (prefix, os.getpid() % 1000, i) for i in range(n)]
        self.bins = ["B%s-%d-%d" % (prefix, os.getpid() % 1000, i) for i in range(n)]
        self.b64 = {b: base64.b64encode(b.encode()).decode() for b in self.bins}
        self.own = lg.locate(members, self.text + self.bins + list(self.b64.values()))
        self.used = set()

    def take(self, pred, n=1, binary=False):
        pool = self.bins if binary else self.text
        out = []
        for k in pool:
            if k not in self.used and pred(self.own[k], k):
                self.used.add(k)
                out.append(k)
                if len(out) == n:
                    return out
        raise RuntimeError("no %d keys with that placement" % n)


def declared(cl, nid, epoch=1):
    c = lg.Conn(cl.nodes[nid].addr, 5.0)
    c.declare(epoch)
    return c


def one_line(c, data):
    """Send data, read one reply line (and its data block)."""
    c.send(data)
    return ml.read_reply(c)


# ---------------------------------------------------------------- (a) routing

def routing(t, cl, keys):
    p, s_, n = "a", "b", "c"
    own = (p, s_)
    addr = {i: cl.nodes[i].addr for i in cl.nodes}
    entries = [("primary, plain", p, None, ["whole"]), ("primary, declared", p, 1, ["whole"]),
               ("secondary, plain", s_, None, ["whole"]),
               ("non-owner, plain (relayed)", n, None, ["whole", "7-byte", "bytewise"])]
    ref = None
    for label, nid, decl, modes in entries:
        for mode, piece in ml.FEED_MODES:
            if mode not in modes:
                continue
            k, k2 = keys.take(lambda o, _: o == own, 2)
            bkey = keys.take(lambda o, _: o == own, 1, binary=True)[0]
            env = ml.case_env(k)
            env.update(k=k, k2=k2, bk=keys.b64[bkey])
            conn = ml.MetaConn(addr[nid], declare=decl)
            tr = []
            try:
                d = ml.run_case(conn, ROUTE_CASE, env, piece, tr)
            finally:
                conn.close()
            t.ok(d is None, "routing: every meta command at %s %s (key owned by %s,%s; %s)"
                 % (label, nid, p, s_, mode), d)
            m = masked(tr, env)
            if ref is None:
                ref = m
            elif d is None:
                diff = [(i, a, b) for i, (a, b) in enumerate(zip(ref, m)) if a != b]
                t.ok(m == ref, "routing: at %s %s (%s) the replies are the primary's, byte for "
                     "byte but for CAS and TTL digits" % (label, nid, mode), diff[:3])

    for label, nid, decl in (("primary, plain", p, None), ("primary, declared", p, 1),
                             ("non-owner, plain (relayed)", n, None)):
        env = ml.case_env("x")
        env["k"] = keys.take(lambda o, _: o == own)[0]
        conn = ml.MetaConn(addr[nid], declare=decl, timeout=10.0)
        try:
            d = ml.run_case(conn, BIG_CASE, env, 0)
        finally:
            conn.close()
        t.ok(d is None, "routing: a 300 KB value and one over the size limit at %s %s"
             % (label, nid), d and d[:600])

    # Declared clients: MOVED from a non-owner for every keyed command, and
    # from the secondary for the commands the primary decides.
    k = keys.take(lambda o, _: o == own)[0]
    bkey = keys.take(lambda o, _: o == own, 1, binary=True)[0]
    moved = "SERVER_ERROR MOVED 1 %s\r\n" % cl.nodes[p].addr_s
    at_n = Case("MOVED", [S("mg {k} v\r\n", moved), S("mg {k} N30 v\r\n", moved),
                          S("ms {k} 2 T0\r\nhi\r\n", moved), S("ms {k} 2 q\r\nhi\r\n", moved),
                          S("md {k}\r\n", moved), S("md {k} I q\r\n", moved),
                          S("ma {k} N0\r\n", moved), S("ma {k} q\r\n", moved),
                          S("me {k}\r\n", moved), S("mg {bk} b v\r\n", moved),
                          S("mn\r\n", "MN\r\n", probe=False)])
    at_s = Case("MOVED", at_n.steps[:8] + [S("mg {bk} b v\r\n", moved)])
    for label, nid, case in (("non-owner", n, at_n), ("secondary", s_, at_s)):
        env = ml.case_env(k)
        env.update(k=k, bk=keys.b64[bkey])
        conn = ml.MetaConn(addr[nid], declare=1)
        try:
            d = ml.run_case(conn, case, env, 0)
        finally:
            conn.close()
        t.ok(d is None, "routing: a declared client at the %s %s gets %s for mg ms md ma%s "
             "(ms: data swallowed; b: by the decoded key)"
             % (label, nid, moved.strip(), " me" if nid == n else ""), d)
    # b routes by the decoded key: its base64 text is owned elsewhere.
    bkey = keys.take(lambda o, b: o == own and p not in keys.own[keys.b64[b]], 1, binary=True)[0]
    env = ml.case_env(k)
    env.update(bk=keys.b64[bkey])
    conn = ml.MetaConn(addr[p], declare=1)
    try:
        d = ml.run_case(conn, Case("b", [S("ms {bk} 2 b\r\nhi\r\n", "HD\r\n"),
                                         S("mg {bk} b v\r\n", "VA 2\r\nhi\r\n")]), env, 0)
    finally:
        conn.close()
    t.ok(d is None, "routing: a declared client at %s is served a base64 key whose decoded "
         "bytes %s owns (its base64 text is owned by %s)"
         % (p, p, ",".join(keys.own[keys.b64[bkey]])), d)
    # me at the secondary (a read any owner could serve, or the primary's):
    # either answer is allowed; say which.
    c = declared(cl, s_)
    try:
        r = one_line(c, ("me %s\r\n" % k).encode())
    finally:
        c.close()
    t.diag("me at the secondary (declared): %r" % (r[0],))


# ---------------------------------------------------------------- herds

def classify(rs):
    """Counts of a herd's replies: W, Z, X, Z+X, X+W, values seen, errors."""
    out = {"n": len(rs), "W": 0, "Z": 0, "X": 0, "XW": 0, "ZX": 0, "err": [], "values": {}}
    for _, rl, data in rs:
        code, fl, toks = ml.parse_meta(rl)
        if code not in ("VA", "HD"):
            out["err"].append(rl)
            continue
        for f in ("W", "Z", "X"):
            out[f] += 1 if f in fl else 0
        if toks[-2:] == ["X", "W"]:
            out["XW"] += 1
        if toks[-2:] == ["Z", "X"]:
            out["ZX"] += 1
        if data is not None:
            out["values"][data] = out["values"].get(data, 0) + 1
    return out


def herd_miss(t, cl, key, nodes, label):
    """A herd on a missing key through `nodes`: one W; the winner stores."""
    addrs = [cl.nodes[i].addr for i in nodes]
    stored = []

    def after_win(c, reply):
        c.send(("ms %s 5 T%d\r\nfresh\r\n" % (key, TTL)).encode())
        stored.append(c.readline())
    rs = ml.herd(addrs, ("mg %s N30 c v t\r\n" % key).encode(), NHERD, after_win)
    k = classify(rs)
    fresh = k["values"].get(b"fresh", 0)
    ok = (k["W"] == 1 and not k["err"] and k["Z"] + fresh == NHERD - 1 and k["X"] == 0
          and stored == [b"HD"])
    t.ok(ok, "%s: herd of %d over %s on a missing key: exactly one W (W %d, Z %d, hits of "
         "the winner's value %d)" % (label, NHERD, ",".join(nodes), k["W"], k["Z"], fresh),
         "errors %r, winner's ms %r, values %r" % (k["err"][:3], stored, k["values"]))


def herd_expect(t, cl, key, nodes, label, flags, wins, value=None, n=NHERD):
    """A herd `mg KEY <flags>` through nodes: `wins` W (0 or 1), every
    other reply Z (and X when stale), the value `value` when given."""
    addrs = [cl.nodes[i].addr for i in nodes]
    rs = ml.herd(addrs, ("mg %s %s\r\n" % (key, flags)).encode(), n)
    k = classify(rs)
    ok = k["W"] == wins and not k["err"] and k["Z"] == n - wins
    if value is not None:
        ok = ok and k["values"] == {value: n}
    t.ok(ok, "%s: herd of %d over %s `mg %s`: %d W, %d Z (W %d, Z %d, X %d)"
         % (label, n, ",".join(nodes), flags, wins, n - wins, k["W"], k["Z"], k["X"]),
         "errors %r, values %r, first replies %r" % (k["err"][:3], k["values"],
                                                     [r[1] for r in rs[:3]]))
    return k


def herds(t, cl, keys):
    nodes = ["a", "b", "c"]
    for prim in nodes:
        key = keys.take(lambda o, _: o[0] == prim)[0]
        herd_miss(t, cl, key, nodes, "herd (primary %s)" % prim)
    # Half the herd declared at the primary, half plain at the others.
    key = keys.take(lambda o, _: o[0] == "a")[0]
    pa = cl.nodes["a"].addr

    def conn(addr, timeout):
        c = lg.Conn(addr, timeout)
        if addr == pa:
            c.declare(1)
        return c
    rs = ml.herd([pa, cl.nodes["b"].addr, pa, cl.nodes["c"].addr],
                 ("mg %s N30 t\r\n" % key).encode(), NHERD, conn_cls=conn)
    k = classify(rs)
    t.ok(k["W"] == 1 and k["Z"] == NHERD - 1 and not k["err"],
         "herd: %d declared at the primary a and %d plain at b and c, mg N30 on a missing "
         "key: exactly one W (W %d, Z %d)" % (NHERD // 2, NHERD // 2, k["W"], k["Z"]),
         "errors %r" % k["err"][:3])
    # (c) stale-while-revalidate through every node
    for prim in nodes:
        key = keys.take(lambda o, _: o[0] == prim)[0]
        other = next(i for i in nodes if i not in keys.own[key])
        c = lg.Conn(cl.nodes[other].addr, 5.0)
        try:
            r0 = c.store("set", key, b"old")
            r1 = one_line(c, ("md %s I\r\n" % key).encode())[0]
        finally:
            c.close()
        t.ok(r0 == b"STORED" and r1 == b"HD", "swr (primary %s): set and md I through %s"
             % (prim, other), (r0, r1))
        k = herd_expect(t, cl, key, nodes, "swr (primary %s)" % prim, "v c", 1, b"old")
        t.ok(k["XW"] == 1 and k["ZX"] == NHERD - 1,
             "swr (primary %s): the winner's reply ends X W, the others' Z X (%d, %d)"
             % (prim, k["XW"], k["ZX"]))


# ---------------------------------------------------------------- (d) replicas

def owner_state(cl, key, nid):
    """(gets reply, me reply) at node nid from a declared connection."""
    c = declared(cl, nid)
    try:
        vals, err = None, None
        c.send(("gets %s\r\n" % key).encode())
        line = c.readline()
        if line.startswith(b"VALUE "):
            p = line.split()
            vals = (p[2], p[4], c.readn(int(p[3])))
            c.readline()
        elif line != b"END":
            err = line
        me = one_line(c, ("me %s\r\n" % key).encode())[0]
    finally:
        c.close()
    return (vals if err is None else err), me


def me_fields(line):
    m = re.match(rb"ME \S+ exp=(-?\d+) la=\d+ cas=(\d+) ", line)
    return (int(m.group(1)), int(m.group(2))) if m else None


def replicas(t, cl, keys):
    own = ("a", "b")
    k, kn, kv, kx = keys.take(lambda o, _: o == own, 4)
    via = "c"
    muts = [
        (k, "ms {k} 2 T100 F3\r\nhi\r\n", "HD"),
        (k, "mg {k} T200\r\n", "HD"),
        (k, "ms {k} 2 MA\r\nzz\r\n", "HD"),
        (k, "ms {k} 1 MP N50\r\n<\r\n", "HD"),
        (k, "md {k} I T150\r\n", "HD"),
        (k, "mg {k} v\r\n", "VA 5 X W"),
        (k, "ms {k} 2 E9001\r\nst\r\n", "HD"),
        (k, "md {k} I E9002 C9001\r\n", "HD"),
        (k, "ms {k} 2 I C9001\r\nol\r\n", "HD"),
        (k, "md {k} x\r\n", "HD"),
        (k, "md {k}\r\n", "HD"),
        (kn, "ms {k} 1 T0\r\n5\r\n", "HD"),
        (kn, "ma {k} D10\r\n", "HD"),
        (kn, "ma {k} MD T60\r\n", "HD"),
        (kn, "ma {k} E4242\r\n", "HD"),
        (kv, "mg {k} N60\r\n", "HD W"),
        (kv, "mg {k} T90\r\n", "HD Z"),
        (kv, "ms {k} 3 MA\r\nabc\r\n", "HD"),
        (kx, "ma {k} N40 J3\r\n", "HD"),
        (kx, "ma {k} MD q\r\nmn\r\n", "MN"),
    ]
    c = lg.Conn(cl.nodes[via].addr, 5.0)
    me_sec = None
    try:
        for key, line, want in muts:
            r = one_line(c, line.replace("{k}", key).encode())[0]
            st = {nid: owner_state(cl, key, nid) for nid in own}
            (gp, mp), (gs, ms_) = st["a"], st["b"]
            mep, mes = me_fields(mp), me_fields(ms_)
            if me_sec is None:
                me_sec = ms_
            ok = r.decode() == want and gp == gs
            me_ok = True
            if mes is not None:
                me_ok = mep is not None and mep[1] == mes[1] and abs(mep[0] - mes[0]) <= 1
            elif not ms_.startswith(b"SERVER_ERROR MOVED"):
                me_ok = ms_ == mp    # EN at both
            t.ok(ok and me_ok, "replicas: after `%s` (through %s) both owners hold the same "
                 "value, flags and CAS%s" % (line.replace("{k}", "K").split("\r\n")[0], via,
                                             ", and me agrees" if mes else ""),
                 "reply %r (want %r)\nprimary:   %r %r\nsecondary: %r %r"
                 % (r, want, gp, mp, gs, ms_))
    finally:
        c.close()
    if me_sec is not None and me_sec.startswith(b"SERVER_ERROR MOVED"):
        t.diag("me at the secondary answers MOVED: the replica's TTL, token and stale mark "
               "are checked through the join and the failover below")


# ---------------------------------------------------------------- states

def make_states(t, cl, keys, pred, label, n=2):
    """Keys in four states, set through their primary: viv (mg N: W sent),
    stale_tok (md I, then mg: X W sent), stale (md I, no token out), plain
    (a value). Returns {state: [(key, cas, exp, when)]} (me's CAS and exp
    at the primary, and the monotonic time it was read)."""
    out = {"viv": [], "stale_tok": [], "stale": [], "plain": []}
    bad = []
    for state in out:
        for key in keys.take(pred, n):
            c = lg.Conn(cl.nodes[keys.own[key][0]].addr, 5.0)
            try:
                if state == "viv":
                    rs = [one_line(c, ("mg %s N%d c\r\n" % (key, TTL)).encode())[0]]
                    ok = re.fullmatch(rb"HD c\d+ W", rs[0])
                else:
                    rs = [c.store("set", key, b"v-" + key.encode(), 0, TTL)]
                    if state != "plain":
                        rs.append(one_line(c, ("md %s I\r\n" % key).encode())[0])
                    if state == "stale_tok":
                        rs.append(one_line(c, ("mg %s\r\n" % key).encode())[0])
                    ok = rs == [b"STORED", b"HD", b"HD X W"][:len(rs)]
                me = one_line(c, ("me %s\r\n" % key).encode())[0]
            finally:
                c.close()
            f = me_fields(me)
            if not ok or f is None:
                bad.append((key, rs, me))
            out[state].append((key, f[1] if f else None, f[0] if f else None, time.monotonic()))
    t.ok(not bad, "%s: %d keys made vivified (W out), stale with the token out, stale, plain"
         % (label, 4 * n), bad[:4])
    return out


def gets_at(cl, key, nid, epoch):
    """(flags, cas, value) of key at node nid (a declared gets), None on a
    miss, the line on an error."""
    c = declared(cl, nid, epoch)
    try:
        c.send(("gets %s\r\n" % key).encode())
        line = c.readline()
        if line == b"END":
            return None
        if not line.startswith(b"VALUE "):
            return line
        p = line.split()
        v = (p[2], p[4], c.readn(int(p[3])))
        c.readline()
        return v
    finally:
        c.close()


def check_states(t, cl, states, nodes, label, owners):
    """After a transition (owners(key): its owner list now): at the acting
    primary the CAS is the same and the TTL went down by the time passed;
    every owner holds the same value, flags and CAS; herds through nodes:
    no W where one was out, exactly one where none was; stale keys stay
    stale, plain ones plain."""
    ep = cl.store_epoch()
    for key, cas, exp, when in [x for v in states.values() for x in v]:
        prim = owners(key)[0]
        c = declared(cl, prim, ep)
        try:
            me = one_line(c, ("me %s\r\n" % key).encode())[0]
        finally:
            c.close()
        f = me_fields(me)
        gone = time.monotonic() - when
        t.ok(f is not None and f[1] == cas and exp - gone - 2 <= f[0] <= exp,
             "%s: %s at its primary %s has its CAS (%s) and its TTL (%d s then, %.1f s ago)"
             % (label, key, prim, cas, exp, gone), me)
        g = {nid: gets_at(cl, key, nid, ep) for nid in owners(key)}
        t.ok(len(set(g.values())) == 1 and None not in g.values() and f is not None
             and list(g.values())[0][1] == str(cas).encode(),
             "%s: %s: its owners %s hold the same value, flags and CAS"
             % (label, key, ",".join(owners(key))), g)
    for key, *_ in states["viv"]:
        herd_expect(t, cl, key, nodes, "%s, vivified before (Z stays Z)" % label,
                    "N%d v" % TTL, 0, b"")
    for key, *_ in states["stale_tok"]:
        k = herd_expect(t, cl, key, nodes, "%s, stale with the token out (Z X stays)" % label,
                        "v", 0, b"v-" + key.encode())
        t.ok(k["ZX"] == NHERD, "%s: every reply ends Z X (%d)" % (label, k["ZX"]))
    for key, *_ in states["stale"]:
        k = herd_expect(t, cl, key, nodes, "%s, stale without a token out (X stays, one W)"
                        % label, "v", 1, b"v-" + key.encode())
        t.ok(k["XW"] == 1 and k["ZX"] == NHERD - 1, "%s: X W once, Z X %d times (%d, %d)"
             % (label, NHERD - 1, k["XW"], k["ZX"]))
    for key, *_ in states["plain"]:
        rs = ml.herd([cl.nodes[i].addr for i in nodes], ("mg %s v\r\n" % key).encode(), 10)
        k = classify(rs)
        t.ok(not k["err"] and k["W"] + k["Z"] + k["X"] == 0
             and k["values"] == {b"v-" + key.encode(): 10},
             "%s: a plain key reads its value without W, Z or X through %s"
             % (label, ",".join(nodes)), (k["err"][:3], k["values"]))


def owners_now(cl, keys):
    keys.own.update(lg.locate(cl.store_active(), keys.text))
    return lambda k: keys.own[k]


# ---------------------------------------------------------------- (f) join

def join(t, cl, keys):
    d = cl.add("d")
    e2 = cl.members(["a", "b", "c", "d"], epoch=2)
    own2 = lg.locate(e2, keys.text)
    states = make_states(t, cl, keys, lambda o, k: k in own2 and own2[k][0] == "d",
                         "join: before, keys whose new primary is d")
    moving, herd_key = keys.take(lambda o, k: k in own2 and own2[k][0] == "d", 2)
    src = keys.own[moving][0]
    still = keys.take(lambda o, k: k in own2 and own2[k] == o and o[0] == src)[0]
    c = lg.Conn(cl.nodes[src].addr, 5.0)
    try:
        r = (c.store("set", still, b"still"), c.store("set", moving, b"moving"))
    finally:
        c.close()
    t.ok(r == (b"STORED", b"STORED"), "join: keys set at %s" % src, r)
    rc, out, err = cl.ctl("join", "d", d.addr_s, env={"RINGCTL_EXIT_AFTER": "fence"})
    t.ok(rc == 4 and cl.store_pending(), "join d with RINGCTL_EXIT_AFTER=fence: exit 4, "
         "the transition pending and fenced", (rc, lg.tail(out), lg.tail(err)))
    tryagain = "SERVER_ERROR TRYAGAIN (?*)\r\n"
    fenced = Case("fenced", [S("mg {k} v\r\n", tryagain), S("mg {k} N30 v\r\n", tryagain),
                             S("ms {k} 2\r\nhi\r\n", tryagain), S("md {k} I\r\n", tryagain),
                             S("ma {k} N0\r\n", tryagain), S("me {k}\r\n", tryagain),
                             S("mg {k2} v\r\n", "VA 5\r\nstill\r\n"),
                             S("mn\r\n", "MN\r\n", probe=False)])
    env = ml.case_env(moving)
    env.update(k=moving, k2=still)
    conn = ml.MetaConn(cl.nodes[src].addr, declare=1)
    try:
        dd = ml.run_case(conn, fenced, env, 0)
    finally:
        conn.close()
    t.ok(dd is None, "join, fenced: a declared client at %s gets SERVER_ERROR TRYAGAIN for mg "
         "ms md ma me on a moving key (ms: data swallowed) and is served on one that does not "
         "move" % src, dd)
    # Plain clients during the fence: the nodes retry; served once it lifts.
    # One mg of a moving key, and a herd on a missing moving key.
    plain, herd_out = [], []

    def plain_mg():
        c = lg.Conn(cl.nodes[src].addr, 10.0)
        try:
            plain.append(one_line(c, ("mg %s v\r\n" % moving).encode()))
        except Exception as e:  # noqa: BLE001
            plain.append(("error %s" % e, None))
        finally:
            c.close()

    def herd_mg():
        herd_out.extend(ml.herd([cl.nodes[i].addr for i in ("a", "b", "c")],
                                ("mg %s N30 v\r\n" % herd_key).encode(), NHERD, timeout=15.0))
    ths = [threading.Thread(target=plain_mg), threading.Thread(target=herd_mg)]
    sent = time.monotonic()
    for th in ths:
        th.start()
    time.sleep(0.4)
    rc, out, err = cl.ctl("resume")
    lifted = time.monotonic() - sent
    for th in ths:
        th.join(20)
    # A relay retries TRYAGAIN for FWD_RETRY_TIMEOUTS (3) x the 1 s forward
    # timeout: a fence held longer (a slow sanitizer build) is answered
    # TRYAGAIN, as documented; then the same requests, sent again after the
    # lift, must be served (and the herd still has exactly one winner).
    budget = 3.0
    if lifted > budget and plain and plain[0][0].startswith(b"SERVER_ERROR TRYAGAIN"):
        plain = []
        plain_mg()
    if lifted > budget and herd_out and \
            all(rl.startswith(b"SERVER_ERROR TRYAGAIN") for _, rl, _ in herd_out):
        herd_out = []
        herd_mg()
    t.ok(rc == 0, "join: ringctl resume exits 0", (rc, lg.tail(out), lg.tail(err)))
    conv = cl.converged(2, ["a", "b", "c", "d"])
    t.ok(all(v == (2, 0) for v in conv.values()), "join: every node reports EPOCH 2 0", conv)
    t.ok(plain == [(b"VA 6", b"moving")], "join: a plain mg of a moving key sent during the "
         "fence is answered once it lifts", plain)
    k = classify(herd_out)
    t.ok(k["W"] == 1 and k["Z"] == NHERD - 1 and not k["err"],
         "join: a herd of %d plain mg N30 on a missing moving key, sent during the fence: "
         "exactly one W once it lifts (W %d, Z %d)" % (NHERD, k["W"], k["Z"]),
         "errors %r" % k["err"][:3])
    check_states(t, cl, states, ["a", "b", "c", "d"], "join: after, at d", owners_now(cl, keys))


# ---------------------------------------------------------------- (e) failover

def sees_down(cl, who, whom):
    row = fl.status_row(cl, who)
    return whom in [x.split(":")[0] for x in row.get("sees_down", "-").split(",")
                    if x.split(":")[1:] in ([], ["down"])]


def failover(t, cl, keys):
    live = ["a", "c", "d"]
    states = make_states(t, cl, keys, lambda o, _: o[0] == "b",
                         "failover: before, keys whose primary is b")
    cl.nodes["b"].stop(signal.SIGKILL)
    t.ok(lg.wait_for(lambda: all(sees_down(cl, i, "b") for i in live), 15, 0.1),
         "failover: a, c and d see b down after kill -9")
    rc, out, err = cl.ctl("remove", "--failed", "b")
    t.ok(rc == 0, "failover: ringctl remove --failed b exits 0", (rc, lg.tail(out), lg.tail(err)))
    conv = cl.converged(3, live)
    t.ok(all(v == (3, 0) for v in conv.values()), "failover: a, c, d report EPOCH 3 0", conv)
    check_states(t, cl, states, live, "failover: after", owners_now(cl, keys))
    # The recache after the failover: md I on the vivified key, then a herd.
    for key, *_ in states["viv"]:
        c = lg.Conn(cl.nodes["a"].addr, 5.0)
        try:
            r = one_line(c, ("md %s I\r\n" % key).encode())[0]
        finally:
            c.close()
        t.ok(r == b"HD", "failover: md I on a key vivified before the failover", r)
        k = herd_expect(t, cl, key, live, "failover: recache after md I", "N%d v" % TTL, 1, b"")
        t.ok(k["XW"] == 1, "failover: exactly one client wins the recache (X W %d)" % k["XW"])


# ---------------------------------------------------------------- leave

def leave(t, cl, keys):
    states = make_states(t, cl, keys, lambda o, _: o[0] == "d",
                         "leave: before, keys whose primary is d")
    rc, out, err = cl.ctl("leave", "d")
    t.ok(rc == 0, "leave: ringctl leave d exits 0", (rc, lg.tail(out), lg.tail(err)))
    conv = cl.converged(4, ["a", "c"])
    t.ok(all(v == (4, 0) for v in conv.values()), "leave: a and c report EPOCH 4 0", conv)
    check_states(t, cl, states, ["a", "c"], "leave: after", owners_now(cl, keys))


def scenario(t):
    cl, ok = lg.start_cluster(t, ["a", "b", "c"], replicas=2, mem=64)
    try:
        if not ok:
            return
        keys = Keys(cl.store_active())
        part(t, "routing", routing, cl, keys)
        part(t, "herds", herds, cl, keys)
        part(t, "replicas", replicas, cl, keys)
        part(t, "join", join, cl, keys)
        part(t, "failover", failover, cl, keys)
        part(t, "leave", leave, cl, keys)
    finally:
        lg.close_cluster(t, cl)


def main():
    lg.tap_main(scenario, 175, "the meta protocol in a cluster")


if __name__ == "__main__":
    main()
