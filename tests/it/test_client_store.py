"""Clients made from a membership store (ringcache_new_store): a 3-node
R=2 cluster whose membership lives in a real etcd with TLS and client
certificates (the options in the URL, as ringctl --store takes them). ringctl's data
commands with --store alone (or RINGCTL_STORE), the Python package's Client(store=...) and
the Go package's NewFromStore route by the store's active membership
(locate equal to ringctl locate); a join published after the Python client
was made reaches it through the nodes; a directory store works the same;
a store that is missing, empty or unreachable is refused with a reason
naming it, and a missing directory is not created. Skipped when etcd is
not installed; the Python and Go parts when their package was not built."""
import os
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import etcdlab  # noqa: E402
import goext  # noqa: E402
import pyext  # noqa: E402

if not pyext.not_built():
    pyext.setup()
import loadgen  # noqa: E402

GO_BIN = os.path.join("client", "go", "ringcache.test")


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def ringctl_checks(t, cl):
    rc, out, err = cl.ctl("set", "st:ctl", "v1")
    t.ok(rc == 0, "ringctl --store etcds://... set (no --members, no --seeds)", (out, err))
    rc, out, err = cl.ctl("get", "st:ctl")
    t.ok(rc == 0 and "v1" in out, "ringctl --store etcds://... get reads it", (out, err))
    missing = os.path.join(cl.dir, "no-such-store")
    r = subprocess.run([loadgen.RINGCTL, "--store", missing, "get", "st:ctl"],
                       capture_output=True, text=True, timeout=30)
    t.ok(r.returncode != 0 and missing in r.stderr and not os.path.exists(missing),
         "ringctl --store MISSING-DIR get: refused naming it, the directory not created",
         (r.returncode, r.stdout, r.stderr))
    # RINGCTL_STORE / RINGCTL_TOKEN_FILE stand for the options; an option
    # given wins.
    env = dict(os.environ, RINGCTL_STORE=cl.store, RINGCTL_TOKEN_FILE=cl.token_file)
    r = subprocess.run([loadgen.RINGCTL, "status"], capture_output=True, text=True, timeout=60,
                       env=env)
    g = subprocess.run([loadgen.RINGCTL, "get", "st:ctl"], capture_output=True, text=True,
                       timeout=30, env=env)
    t.ok(r.returncode == 0 and "epoch" in r.stdout and g.returncode == 0 and "v1" in g.stdout,
         "RINGCTL_STORE and RINGCTL_TOKEN_FILE: ringctl status and get with no options",
         (r.returncode, r.stdout[-500:], r.stderr[-500:], g.stdout, g.stderr))
    env["RINGCTL_STORE"] = missing
    r = subprocess.run([loadgen.RINGCTL, "--store", cl.store, "get", "st:ctl"],
                       capture_output=True, text=True, timeout=30, env=env)
    t.ok(r.returncode == 0 and "v1" in r.stdout and not os.path.exists(missing),
         "--store given wins over RINGCTL_STORE", (r.returncode, r.stdout, r.stderr))


def python_checks(t, cl, e):
    import ringcache
    c = ringcache.Client(store=cl.store, default_noreply=False, timeout=2.0)
    try:
        t.ok(c.set("st:py", b"1") is True and c.get("st:py") == b"1",
             "Client(store=etcds://...?cacert=...&cert=...): set and get")
        keys = ["st:%d" % i for i in range(200)] + ["foo"]
        want = loadgen.locate(cl.store_active(), keys)
        bad = [k for k in keys if tuple(c.locate(k)) != want[k]]
        t.ok(not bad, "locate == ringctl locate on the store's membership (201 keys)", bad[:5])
        t.ok(c.epoch() == 1, "the client routes with the store's epoch 1", c.epoch())
        d = cl.add("d")
        rc, out, err = cl.ctl("join", "d", d.addr_s)
        t.ok(rc == 0, "ringctl join d over the etcd store", (out[-300:], err[-300:]))
        t.ok(loadgen.wait_for(lambda: c.get("st:py") == b"1" and c.epoch() == 2, 10),
             "the client made from the store adopts epoch 2 from the nodes; st:py still reads",
             c.epoch())
        t.ok([n for n, _a, _dn, _e in c.nodes()] == ["a", "b", "c", "d"],
             "it routes with a, b, c, d", c.nodes())
    finally:
        c.close()

    # A directory store holding the same active membership (a record of
    # the directory store opens with its "# rev N" line).
    sdir = tempfile.mkdtemp(prefix="rc-pystore-dir-")
    with open(os.path.join(sdir, "active.members"), "w") as f:
        f.write("# rev 7\n" + cl.store_active())
    c = ringcache.Client(store=sdir, default_noreply=False, timeout=2.0)
    t.ok(c.get("st:py") == b"1" and c.epoch() == 2, "Client(store=DIR) reads it too", c.epoch())
    c.close()

    def refused(spec, exc, text):
        try:
            ringcache.Client(store=spec, timeout=1.0)
        except exc as x:
            return text in str(x), str(x)
        except Exception as x:  # noqa: BLE001  (the wrong kind fails the check)
            return False, repr(x)
        return False, "no error"
    missing = os.path.join(sdir, "missing")
    good, why = refused(missing, ringcache.RingcacheConfigError, missing)
    t.ok(good and not os.path.exists(missing),
         "store=MISSING-DIR: RingcacheConfigError naming it, nothing created", why)
    good, why = refused(e.spec("rc-nothing-here"), ringcache.RingcacheConfigError,
                        "no active membership")
    t.ok(good, "store= an etcd prefix with no membership: RingcacheConfigError", why)
    good, why = refused("etcd://127.0.0.1:%d/x" % closed_port(), ringcache.RingcacheError, "")
    t.ok(good, "store= an etcd that does not answer: RingcacheError", why)


def go_checks(t, cl, e):
    want = loadgen.locate(cl.store_active(), ["foo"])["foo"]
    goext.run(t, GO_BIN, "^TestStore$",
              {"RC_GO_STORE": cl.store, "RC_GO_STORE_EMPTY": e.spec("rc-nothing-here"),
               "RC_GO_STORE_FOO": ",".join(want)})


def scenario_store(t):
    work = tempfile.mkdtemp(prefix="rc-clstore-")
    e = etcdlab.Etcd(work, tls=True, name="clstore").start()
    cl, ok = loadgen.start_cluster(t, ["a", "b", "c"], replicas=2, etcd=e)
    try:
        if not ok:
            return
        ringctl_checks(t, cl)
        why = goext.not_built(GO_BIN)
        if why:
            t.skip("Go NewFromStore", why)
        else:
            go_checks(t, cl, e)
        why = pyext.not_built()
        if why:
            t.skip("Python Client(store=...)", why)
        else:
            python_checks(t, cl, e)
    finally:
        loadgen.close_cluster(t, cl)
        e.stop()


def main():
    why = etcdlab.available()
    if why:
        t = loadgen.Tap()
        t.skip("clients from a membership store", why)
        t.done()
    loadgen.tap_main([scenario_store], seconds=240)


if __name__ == "__main__":
    main()
