"""The ringcache Python package (client/python/) against a real 3-node R=2
ringcached cluster (loadgen.start_cluster): every pymemcache-compatible
call, misses, CAS conflicts, 1 MiB values, binary keys, the meta calls and
a herd on get_or_compute, locate against `ringctl locate` and the golden
vectors; a join and a leave under a running Python load with no miss of
an acknowledged key; a node killed with reads still served. Skipped (only)
when the module was not built (no python3-dev)."""
import json
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyext  # noqa: E402

if not pyext.not_built():
    pyext.setup()
import loadgen  # noqa: E402

VECTORS = os.path.join(os.environ.get("RC_SRCDIR", "."), "tests", "vectors", "ring-v1")


def client(cl, **kw):
    import ringcache
    return ringcache.Client(members_file=os.path.join(cl.store, "active.members"),
                            default_noreply=False, **kw)


class JsonSerde:
    def serialize(self, key, value):
        if isinstance(value, bytes):
            return value, 0
        return json.dumps(value).encode(), 2

    def deserialize(self, key, value, flags):
        return json.loads(value) if flags == 2 else value


def calls(t, c, cl):
    """Every pymemcache call, misses, CAS conflicts, errors."""
    import ringcache as rc
    ok = t.ok
    ok(c.get("p:none") is None and c.get(b"p:none", default=7) == 7, "get: miss, default")
    ok(c.set("p:a", b"1") is True and c.get("p:a") == b"1", "set/get, str key")
    ok(c.add("p:a", b"x") is False and c.add("p:b", b"2") is True, "add: present / absent")
    ok(c.replace("p:none", b"x") is False and c.replace("p:a", b"3") is True
       and c.get("p:a") == b"3", "replace: absent / present")
    ok(c.append("p:a", b"z") is True and c.prepend("p:a", b"y") is True
       and c.get("p:a") == b"y3z", "append, prepend")
    ok(c.append("p:none", b"z") is False and c.prepend("p:none", b"z") is False,
       "append/prepend on a miss")
    v, cas = c.gets("p:a")
    ok(v == b"y3z" and cas.isdigit(), "gets: value and cas", (v, cas))
    ok(c.cas("p:a", b"new", cas) is True, "cas with the current unique")
    ok(c.cas("p:a", b"again", cas) is False and c.get("p:a") == b"new",
       "cas conflict: False, value kept")
    ok(c.cas("p:none", b"x", cas) is None, "cas on a missing key: None")
    ok(c.gets("p:none") == (None, None), "gets miss")
    ok(c.set("p:f", b"v", flags=42) and c.mg("p:f").flags == 42, "flags stored")
    ok(c.set("p:n", b"10") and c.incr("p:n", 5) == 15 and c.decr("p:n", 20) == 0
       and c.incr("p:none", 1) is None and c.decr("p:none", 1) is None, "incr/decr, misses")
    try:
        c.set("p:s", b"abc")
        c.incr("p:s", 1)
        ok(False, "incr on a non-number raises MemcacheClientError")
    except rc.MemcacheClientError:
        ok(True, "incr on a non-number raises MemcacheClientError")
    ok(c.touch("p:a", 100) is True and c.touch("p:none", 1) is False, "touch hit / miss")
    ok(c.delete("p:b") is True and c.delete("p:b") is False and c.get("p:b") is None,
       "delete hit / miss")
    ok(c.set("p:e", b"v", expire=1) and wait_gone(c, "p:e"), "expire: gone after its ttl")
    ok(c.gat("p:a", 1) == b"new" and wait_gone(c, "p:a"), "gat: value, new ttl applied")
    ok(c.gat("p:none") is None and c.gats("p:none") == (None, None), "gat/gats miss")
    vals = {"m:%d" % i: b"v%d" % i for i in range(250)}
    ok(c.set_many(vals) == [] and c.set_multi({"m:x": b"x"}) == [], "set_many / set_multi")
    got = c.get_many(list(vals) + ["m:none"])
    ok(got == vals, "get_many: 250 keys over 3 nodes, misses left out", len(got))
    ok(c.get_multi(["m:1", b"m:2"]) == {"m:1": b"v1", b"m:2": b"v2"}, "get_multi, key types kept")
    gm = c.gets_many(["m:1", "m:none"])
    ok(list(gm) == ["m:1"] and gm["m:1"][0] == b"v1", "gets_many")
    ok(c.delete_many(["m:1", "m:2", "m:none"]) is True and c.get_many(["m:1", "m:2"]) == {},
       "delete_many / delete_multi")
    ok(c.set("p:nr", b"v", noreply=True) is True and c.add("p:nr", b"w", noreply=True) is True
       and c.get("p:nr") == b"v", "noreply: True, effect as without")
    big = os.urandom(1024 * 1024 - 1024)
    ok(c.set("p:big", big) and c.get("p:big") == big, "a 1 MiB value round trip")
    try:
        c.set("p:huge", b"x" * (2 * 1024 * 1024))
        ok(False, "a value over max_value_bytes raises MemcacheServerError")
    except rc.MemcacheServerError:
        ok(True, "a value over max_value_bytes raises MemcacheServerError")
    bkeys = [bytes([0x80 + i, 0xff, 0x41, i + 0x21]) for i in range(20)]
    for k in bkeys:
        c.set(k, k[::-1])
    ok(all(c.get(k) == k[::-1] for k in bkeys) and c.get_many(bkeys) == {k: k[::-1] for k in bkeys},
       "binary (non-ASCII bytes) keys: get, get_many")
    for bad, exc in ((b"key with space", rc.MemcacheIllegalInputError),
                     (b"\r\nflush_all", rc.MemcacheIllegalInputError),
                     (b"x" * 300, rc.MemcacheClientError), ("\u0fff", rc.MemcacheClientError)):
        try:
            c.set(bad, b"v")
            ok(False, "bad key %r raises %s" % (bad[:12], exc.__name__))
        except exc:
            ok(True, "bad key %r raises %s" % (bad[:12], exc.__name__))
    s = client(cl, serde=JsonSerde())
    s.set("j:1", {"a": [1, 2]})
    ok(s.get("j:1") == {"a": [1, 2]} and s.get_many(["j:1"]) == {"j:1": {"a": [1, 2]}},
       "serde: serialize/deserialize with flags")
    u = client(cl, allow_unicode_keys=True)
    ok(u.set("こんにちは", b"hi") and u.get("こんにちは") == b"hi", "allow_unicode_keys")
    ver = c.version()
    ok(isinstance(ver, bytes) and ver, "version", ver)
    st = c.stats()
    ok(len(st) == 3 and all("pid" in d for d in st.values()), "stats: every node", list(st))


def wait_gone(c, key, timeout=5.0):
    return loadgen.wait_for(lambda: c.get(key) is None, timeout, 0.1)


def meta(t, c):
    """mg/ms/md/ma with options; binary keys via meta; get_or_compute herd."""
    from ringcache import MetaResult as M
    ok = t.ok
    r = c.ms("mt:a", b"hello", ttl=100, flags=3)
    ok(r.status == M.STORED, "ms stored", r)
    r = c.mg("mt:a", want=("value", "flags", "cas", "ttl", "size"))
    ok(r.status == M.HIT and r.value == b"hello" and r.flags == 3 and 0 < r.ttl <= 100
       and r.size == 5 and r.cas > 0, "mg with value flags cas ttl size", r)
    ok(c.ms("mt:a", b"x", mode="add").status == M.NOT_STORED, "ms add on present: NOT_STORED")
    ok(c.ms("mt:a", b"!", mode="append").status == M.STORED
       and c.mg("mt:a").value == b"hello!", "ms append")
    ok(c.ms("mt:a", b"y", cas=r.cas).status == M.EXISTS, "ms with a stale cas: EXISTS")
    ok(c.mg("mt:none").status == M.MISS, "mg miss")
    ok(c.md("mt:a").status == M.DELETED and c.md("mt:a").status == M.NOT_FOUND, "md, md miss")
    r = c.ma("mt:n", vivify_ttl=100, initial=7)
    ok(r.code == 0 and r.number == 7, "ma vivify: created at initial", r)
    r = c.ma("mt:n", delta=5)
    ok(r.number == 12 and c.ma("mt:n", delta=20, mode="decr").number == 0, "ma incr / decr", r)
    bk = b"bin key\x00\r\n\x01"
    ok(c.ms(bk, b"bv").status == M.STORED and c.mg(bk).value == b"bv"
       and c.md(bk).status == M.DELETED, "meta with a binary key (space, NUL, CR LF)")
    calls_n = [0]
    start = threading.Event()
    out = []

    def compute(key):
        calls_n[0] += 1
        time.sleep(0.3)
        return b"computed:" + key

    def caller():
        start.wait()
        out.append(c.get_or_compute(b"mt:herd", compute, ttl=100))
    th = [threading.Thread(target=caller) for _ in range(12)]
    for x in th:
        x.start()
    t0 = time.monotonic()
    start.set()
    for x in th:
        x.join(20)
    ok(calls_n[0] == 1 and out == [b"computed:mt:herd"] * 12,
       "get_or_compute: 12 threads, one compute, every caller gets its value",
       (calls_n, out[:3], len(out)))
    ok(time.monotonic() - t0 < 5, "the herd finished (GIL released while waiting)")

    def boom(key):
        raise KeyError("no source")
    try:
        c.get_or_compute("mt:boom", boom)
        ok(False, "get_or_compute: fn's exception is raised")
    except KeyError:
        ok(c.get_or_compute("mt:boom", lambda k: b"second", ttl=10) == b"second",
           "get_or_compute: fn's exception is raised, the next caller wins")


def locate_checks(t, c, cl):
    import ringcache
    keys = ["loc:%d" % i for i in range(300)] + ["foo", "bar"]
    want = loadgen.locate(cl.store_active(), keys)
    got = {k: tuple(c.locate(k)) for k in keys}
    bad = [k for k in keys if got[k] != want[k]]
    t.ok(not bad, "locate == ringctl locate on the cluster's membership (302 keys)",
         [(k, got[k], want[k]) for k in bad[:5]])
    texts = {}
    for name in os.listdir(VECTORS):
        if name.endswith(".members"):
            with open(os.path.join(VECTORS, name)) as f:
                texts[name[:-len(".members")]] = f.read()
    n, cut, bad, hs = 0, 0, [], {}
    with open(os.path.join(VECTORS, "locate.tsv")) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            m, r, key, pref = line.rstrip("\n").split("\t")
            # A membership says R = 1..8: a vector with a larger R is
            # compared on its first 8 owners.
            rr = min(int(r), 8)
            if (m, rr) not in hs:
                lines = [x for x in texts[m].splitlines() if not x.startswith("replicas")]
                hs[(m, rr)] = ringcache.Client(members_text="\n".join(
                    ["replicas %d" % rr] + lines) + "\n")
            want_l = pref.split(",")[:rr]
            cut += int(r) > rr
            n += 1
            got_l = hs[(m, rr)].locate(key.encode())
            if got_l != want_l:
                bad.append((m, r, key, got_l, want_l))
    for h in hs.values():
        h.close()
    t.ok(n > 0 and not bad, "locate matches the %d golden vectors of locate.tsv (%d with R > 8 "
         "on their first 8 owners)" % (n, cut), bad[:5])


def scenario_calls(t):
    cl, ok = loadgen.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        c = client(cl)
        t.ok(c.epoch() == 1 and len(c.nodes()) == 3, "members_file: epoch 1, 3 nodes")
        import ringcache
        seeds = ringcache.Client([n.addr for n in cl.nodes.values()], default_noreply=False)
        t.ok(seeds.epoch() == 1, "seeds (HashClient style): the cluster's membership learnt")
        calls(t, c, cl)
        meta(t, c)
        locate_checks(t, c, cl)
        c.close()
        t.ok(c.get("p:big") is not None, "close(): the next call reconnects")
    finally:
        loadgen.close_cluster(t, cl)


class PyLoad:
    """Writers set keys with increasing sequence numbers through the
    Python client and record what was acknowledged; readers check that a
    key whose write was acknowledged is never a miss and never older
    than its acknowledged value."""

    def __init__(self, c, nkeys=200):
        self.c = c
        self.keys = ["ld:%d" % i for i in range(nkeys)]
        self.acked = {}      # key -> last acknowledged seq
        self.tried = {}      # key -> last attempted seq
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.errors = []
        self.counts = {"W": 0, "R": 0, "Wfail": 0}
        self.threads = []

    def writer(self, part):
        keys = self.keys[part::2]
        seq = 0
        while not self.stop_ev.is_set():
            seq += 1
            for k in keys:
                with self.lock:
                    self.tried[k] = seq
                try:
                    if self.c.set(k, b"%d" % seq):
                        with self.lock:
                            self.acked[k] = seq
                        self.counts["W"] += 1
                except Exception:  # indeterminate: may or may not be applied
                    self.counts["Wfail"] += 1
                if self.stop_ev.is_set():
                    return

    def reader(self):
        rnd = random.Random(1)
        while not self.stop_ev.is_set():
            batch = rnd.sample(self.keys, 20)
            with self.lock:
                floor = {k: self.acked[k] for k in batch if k in self.acked}
            if not floor:
                continue
            got = self.c.get_many(list(floor))
            self.counts["R"] += 1
            with self.lock:
                for k, lo in floor.items():
                    v = got.get(k)
                    if v is None or not (lo <= int(v) <= self.tried[k]):
                        self.errors.append((k, lo, v, self.tried[k]))

    def start(self):
        self.threads = [threading.Thread(target=self.writer, args=(p,)) for p in (0, 1)] + \
            [threading.Thread(target=self.reader) for _ in range(2)]
        for x in self.threads:
            x.start()

    def stop(self):
        self.stop_ev.set()
        for x in self.threads:
            x.join(30)

    def ops(self):
        return self.counts["W"] + self.counts["R"]


def scenario_join_leave(t):
    cl, ok = loadgen.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        c = client(cl, timeout=2.0)
        load = PyLoad(c)
        load.start()
        try:
            n0 = load.ops()
            loadgen.wait_for(lambda: load.ops() > n0 + 500, 30)
            d = cl.add("d")
            rc, out, err = cl.ctl("join", "d", d.addr_s)
            t.ok(rc == 0, "ringctl join d under the Python load", (out[-300:], err[-300:]))
            n1 = load.ops()
            loadgen.wait_for(lambda: load.ops() > n1 + 500, 30)
            t.ok(loadgen.wait_for(lambda: c.epoch() == 2, 10), "the client adopted epoch 2",
                 c.epoch())
            rc, out, err = cl.ctl("leave", "b")
            t.ok(rc == 0, "ringctl leave b under the Python load", (out[-300:], err[-300:]))
            n2 = load.ops()
            loadgen.wait_for(lambda: load.ops() > n2 + 500, 30)
            t.ok(loadgen.wait_for(lambda: c.epoch() == 3, 10), "the client adopted epoch 3",
                 c.epoch())
        finally:
            load.stop()
        t.diag("load: %r" % load.counts)
        t.ok(load.counts["W"] > 1000 and load.counts["R"] > 100,
             "the load ran (writes, multi-get reads)", load.counts)
        t.ok(not load.errors, "no read missed or went behind an acknowledged write",
             load.errors[:10])
        got = c.get_many(list(load.acked))
        stale = [(k, s, got.get(k)) for k, s in load.acked.items()
                 if got.get(k) is None or not s <= int(got[k]) <= load.tried[k]]
        t.ok(not stale, "after the leave every acknowledged key reads its last value "
             "(%d keys)" % len(load.acked), stale[:10])
        t.ok([n for n, _a, _d, _e in c.nodes()] == ["a", "c", "d"],
             "the client routes with a, c, d", c.nodes())
    finally:
        loadgen.close_cluster(t, cl)


def scenario_kill(t):
    import ringcache as rc
    cl, ok = loadgen.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        c = client(cl, timeout=1.0, connect_timeout=0.2)
        vals = {"kill:%d" % i: b"v%d" % i for i in range(300)}
        t.ok(c.set_many(vals) == [], "300 keys written (R=2)")
        # A stalled owner: the call waits for its timeout with the GIL
        # released, so this thread keeps running Python meanwhile.
        key_c = next(k for k in vals if c.locate(k)[0] == "c")
        os.kill(cl.nodes["c"].pid, signal.SIGSTOP)
        done, spins = [], [0]
        th = threading.Thread(target=lambda: done.append(c.get(key_c)))
        t0 = time.monotonic()
        th.start()
        while th.is_alive() and time.monotonic() - t0 < 10:
            spins[0] += 1
        th.join(10)
        waited = time.monotonic() - t0
        t.ok(waited >= 0.5 and spins[0] > 200000 and done == [vals[key_c]],
             "a get waiting on a stalled node releases the GIL (other thread ran %d loops in "
             "%.2f s; the read failed over)" % (spins[0], waited), (done, spins, waited))
        cl.nodes["c"].stop(signal.SIGKILL)
        t0 = time.monotonic()
        got = c.get_many(list(vals))
        t.ok(got == vals, "node c killed: get_many still reads every key from a replica",
             (len(got), [k for k in vals if k not in got][:5]))
        single = all(c.get(k) == v for k, v in vals.items())
        t.ok(single, "node c killed: every single get served")
        t.ok(time.monotonic() - t0 < 15, "reads did not wait on the dead node each time",
             time.monotonic() - t0)
        t.ok(any(d for _n, _a, d, _e in c.nodes()), "the client marks c down", c.nodes())
        # A write to a key of the dead primary before any failover: refused
        # as retryable (EUNAVAILABLE), not applied. (A replica that has not
        # seen c down yet redirects it to c, and then redirects this
        # connection's reads of the key too until its next write: a miss.)
        try:
            c.set(key_c, b"after")
            why = "acknowledged"
        except rc.RingcacheRetryError as x:
            why = x.code
        after = c.get(key_c)
        t.ok(why == rc._rc.EUNAVAILABLE and after in (vals[key_c], None),
             "set on a key of the dead primary: RingcacheRetryError EUNAVAILABLE; the key "
             "reads its old value or a miss, never the refused one", (why, after))
    finally:
        loadgen.close_cluster(t, cl)


def scenario_install(t):
    """`make install DESTDIR=...`: the package lands in a site directory of
    the module's python and imports from there, with no libtool .la."""
    import shutil
    import subprocess
    import tempfile
    dest = tempfile.mkdtemp(prefix="rc-pyinst-")
    try:
        r = subprocess.run(["make", "-C", loadgen.BUILDDIR, "-s", "install", "DESTDIR=" + dest],
                           capture_output=True, text=True, timeout=200)
        t.ok(r.returncode == 0, "make install DESTDIR=...", (r.stdout + r.stderr)[-1500:])
        site = [d for d, _s, files in os.walk(dest)
                if d.endswith("/ringcache") and "_ringcache.so" in files]
        t.ok(len(site) == 1 and os.path.basename(os.path.dirname(site[0])) in
             ("dist-packages", "site-packages") and
             not os.path.exists(os.path.join(site[0], "_ringcache.la")),
             "installed under a python site directory: ringcache/{__init__.py,_ringcache.so}",
             site)
        if site:
            code = ("import ringcache; print(ringcache.__file__); "
                    "print(','.join(ringcache.Client(members_file=%r).locate('foo')))"
                    % os.path.join(VECTORS, "three.members"))
            env = dict(os.environ, PYTHONPATH=os.path.dirname(site[0]))
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=env, timeout=60, cwd=dest)
            t.ok(r.returncode == 0 and r.stdout.startswith(site[0]) and
                 r.stdout.split("\n")[1] == "cache-c,cache-b",
                 "the installed package imports and locates", r.stdout + r.stderr)
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def scenario_secure(t):
    """TLS (-Z) and logins (-Y) from Python: libringcache's options, on a
    TLS cluster and on three plain -Y nodes given as seeds."""
    import shutil
    import ssl
    import tempfile
    import ringcache
    import rctest
    import tlscerts
    why = tlscerts.available()
    if why:
        t.skip("TLS from Python", why)
        return
    d = tempfile.mkdtemp(prefix="rc-pytls-")
    certs = loadgen.cluster_certs(d)
    ctx = ssl.create_default_context(cafile=certs["ca"][1])
    loadgen.use_client_tls(ctx)
    try:
        cl, ok = loadgen.start_cluster(t, ["a", "b", "c"], replicas=2, tls=certs, data_tls=True)
    finally:
        loadgen.use_client_tls(None)
    try:
        if ok:
            c = client(cl, tls=True, tls_ca_file=certs["ca"][1])
            vals = {"tls:%d" % i: b"v%d" % i for i in range(100)}
            t.ok(c.set_many(vals) == [] and c.get_many(list(vals)) == vals
                 and c.get_or_compute("tls:goc", lambda k: b"c", ttl=10) == b"c",
                 "TLS cluster: set_many, get_many, get_or_compute")
            t.ok(c.flush_all() and c.get_many(list(vals)) == {}, "TLS cluster: flush_all")
            plain = client(cl, timeout=0.5, connect_timeout=0.2)
            try:
                plain.set("tls:x", b"v")
                t.ok(False, "no TLS against -Z nodes raises a MemcacheError")
            except ringcache.MemcacheError as e:
                t.ok(True, "no TLS against -Z nodes raises a MemcacheError (%s)"
                     % type(e).__name__)
    finally:
        loadgen.close_cluster(t, cl)
    auth = os.path.join(d, "auth")
    with open(auth, "w") as f:
        f.write("py:s3cret\n")
    nodes = []
    try:
        for _ in range(3):
            n = rctest.Node(args=["-t", "2", "-m", "32", "-Y", auth])
            nodes.append(n)
            n.start()
            loadgen.track(n.proc)
        seeds = [("127.0.0.1", n.port) for n in nodes]
        c = ringcache.Client(seeds, username="py", password="s3cret", default_noreply=False)
        vals = {"auth:%d" % i: b"v%d" % i for i in range(100)}
        t.ok(len(c.nodes()) == 3 and c.set_many(vals) == [] and c.get_many(list(vals)) == vals,
             "login (-Y) on 3 plain seed nodes: set_many, get_many")
        t.ok(c.flush_all() and c.get_many(list(vals)) == {}, "login (-Y): flush_all")
        bad = ringcache.Client(seeds, username="py", password="nope", default_noreply=False)
        try:
            bad.set("auth:x", b"v")
            t.ok(False, "a wrong password raises RingcacheAuthError")
        except ringcache.RingcacheAuthError:
            t.ok(True, "a wrong password raises RingcacheAuthError")
    finally:
        for n in nodes:
            n.stop()
        shutil.rmtree(d, ignore_errors=True)


def main():
    why = pyext.not_built()
    if why:
        t = loadgen.Tap()
        t.skip("ringcache Python client", why)
        t.done()
    loadgen.tap_main([scenario_install, scenario_calls, scenario_secure, scenario_join_leave,
                      scenario_kill], seconds=300)


if __name__ == "__main__":
    main()
