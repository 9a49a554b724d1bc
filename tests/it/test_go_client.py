"""The Go package (client/go/ringcache) against a real 3-node R=2
ringcached cluster: its own Go tests (client/go/ringcache/*_test.go, built
by make into client/go/ringcache.test) run here with the cluster in their
environment: every gomemcache call, misses, CAS conflicts, values up to
1 MiB, binary keys, GetMulti, 32 goroutines on one client, GetOrCompute's
herd, Locate against `ringctl locate` and the golden vectors; then a node
stalled and killed with every key still read; on a second cluster a join
and a leave under a running Go load with no miss of an acknowledged key;
TLS (-Z) and logins (-Y) through the options;
and a program of its own module built against `make install`'s library.
Skipped (only) when the Go package was not built (no go at configure)."""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import goext  # noqa: E402
import loadgen  # noqa: E402

BIN = os.path.join("client", "go", "ringcache.test")
VECTORS = os.path.join(os.environ.get("RC_SRCDIR", "."), "tests", "vectors", "ring-v1")


def go_env(cl, steps=False):
    return {"RC_GO_MEMBERS": os.path.join(cl.store, "active.members"),
            "RC_GO_SEEDS": ",".join(n.addr_s for n in cl.nodes.values()),
            "RC_GO_RINGCTL": loadgen.RINGCTL, "RC_GO_VECTORS": os.path.abspath(VECTORS),
            "RC_GO_STEPS": "1" if steps else "0"}


def scenario_calls(t):
    cl, ok = loadgen.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        goext.run(t, BIN, "^Test(Constructors|Calls|GetMulti|ValuesAndKeys|NodeCalls|Concurrent|"
                  "GetOrCompute|Locate|GoldenVectors)$", go_env(cl))

        def on_step(what):
            node = cl.nodes["c"]
            if what == "stop c":
                os.kill(node.pid, signal.SIGSTOP)
                return "ok"
            if what == "kill c":
                node.stop(signal.SIGKILL)
                return "ok"
            return "unknown step " + what
        goext.run(t, BIN, "^TestKill$", go_env(cl, steps=True), on_step)
    finally:
        loadgen.close_cluster(t, cl)


def scenario_join_leave(t):
    cl, ok = loadgen.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return

        def on_step(what):
            if what == "join":
                d = cl.add("d")
                rc, out, err = cl.ctl("join", "d", d.addr_s)
            elif what == "leave":
                rc, out, err = cl.ctl("leave", "b")
            else:
                return "unknown step " + what
            t.ok(rc == 0, "ringctl %s under the Go load" % what, (out[-300:], err[-300:]))
            return "ok" if rc == 0 else "ringctl %s failed (%d)" % (what, rc)
        goext.run(t, BIN, "^TestJoinLeave$", go_env(cl, steps=True), on_step)
    finally:
        loadgen.close_cluster(t, cl)


def scenario_secure(t):
    """TLS (-Z) and logins (-Y) from Go (TestSecure): a TLS cluster, and
    three plain -Y nodes given as seeds."""
    import shutil
    import ssl
    import tempfile
    import rctest
    import tlscerts
    why = tlscerts.available()
    if why:
        t.skip("TLS from Go", why)
        return
    d = tempfile.mkdtemp(prefix="rc-gotls-")
    certs = loadgen.cluster_certs(d)
    loadgen.use_client_tls(ssl.create_default_context(cafile=certs["ca"][1]))
    try:
        cl, ok = loadgen.start_cluster(t, ["a", "b", "c"], replicas=2, tls=certs, data_tls=True)
    finally:
        loadgen.use_client_tls(None)
    auth = os.path.join(d, "auth")
    with open(auth, "w") as f:
        f.write("gouser:s3cret\n")
    nodes = []
    try:
        if not ok:
            return
        for _ in range(3):
            n = rctest.Node(args=["-t", "2", "-m", "32", "-Y", auth])
            nodes.append(n)
            n.start()
            loadgen.track(n.proc)
        goext.run(t, BIN, "^TestSecure$", {
            "RC_GO_TLS_MEMBERS": os.path.join(cl.store, "active.members"),
            "RC_GO_TLS_CA": certs["ca"][1],
            "RC_GO_AUTH_SEEDS": ",".join("127.0.0.1:%d" % n.port for n in nodes),
            "RC_GO_AUTH_USER": "gouser", "RC_GO_AUTH_PASSWORD": "s3cret"})
    finally:
        for n in nodes:
            n.stop()
        loadgen.close_cluster(t, cl)
        shutil.rmtree(d, ignore_errors=True)


def scenario_install(t):
    """`make install DESTDIR=...`, then a program of its own module using
    the package (replace directive to the source) builds with cgo against
    the installed ringcache.h and libringcache.so only, and locates."""
    import shutil
    import subprocess
    import tempfile
    dest = tempfile.mkdtemp(prefix="rc-goinst-")
    try:
        r = subprocess.run(["make", "-C", loadgen.BUILDDIR, "-s", "install", "DESTDIR=" + dest],
                           capture_output=True, text=True, timeout=200)
        t.ok(r.returncode == 0, "make install DESTDIR=...", (r.stdout + r.stderr)[-1500:])
        inc = [d for d, _s, f in os.walk(dest) if "ringcache.h" in f]
        lib = [d for d, _s, f in os.walk(dest) if "libringcache.so" in f]
        if not t.ok(len(inc) == 1 and len(lib) == 1, "ringcache.h and libringcache.so installed",
                    (inc, lib)):
            return
        cfg = goext.go_env()
        app = os.path.join(dest, "app")
        os.makedirs(app)
        src = os.path.abspath(os.path.join(os.environ.get("RC_SRCDIR", "."), "client", "go",
                                           "ringcache"))
        with open(os.path.join(app, "go.mod"), "w") as f:
            f.write("module app\n\ngo 1.19\n\nrequire ringcache.dev/ringcache v0.0.0\n\n"
                    "replace ringcache.dev/ringcache => %s\n" % src)
        with open(os.path.join(app, "main.go"), "w") as f:
            f.write('package main\n\nimport (\n\t"fmt"\n\t"os"\n\t"strings"\n\n'
                    '\t"ringcache.dev/ringcache"\n)\n\nfunc main() {\n'
                    '\tc, err := ringcache.NewFromMembersFile(os.Args[1], nil)\n'
                    '\tif err != nil {\n\t\tpanic(err)\n\t}\n'
                    '\towners, err := c.Locate("foo")\n'
                    '\tfmt.Println(strings.Join(owners, ","), err)\n}\n')
        env = dict(os.environ, GOENV="off", GOFLAGS="-mod=mod", GOPROXY="off",
                   GOTOOLCHAIN="local", GOCACHE=os.path.join(goext.GODIR, "cache"),
                   GOPATH=os.path.join(dest, "gopath"), CGO_ENABLED="1",
                   CGO_CFLAGS="-I%s %s" % (inc[0], cfg.get("SAN", "")),
                   CGO_LDFLAGS="-L%s -Wl,-rpath,%s %s" % (lib[0], lib[0], cfg.get("SAN", "")))
        cmd = [cfg.get("GO", "go"), "run"] + cfg.get("FLAGS", "").split() + \
            [".", os.path.abspath(os.path.join(VECTORS, "three.members"))]
        r = subprocess.run(cmd, cwd=app, env=env, capture_output=True, text=True, timeout=240)
        t.ok(r.returncode == 0 and r.stdout.strip() == "cache-c,cache-b <nil>",
             "a program of its own module builds against the installed library and locates",
             (r.stdout + r.stderr)[-1500:])
    finally:
        subprocess.run(["chmod", "-R", "u+w", dest], capture_output=True)
        shutil.rmtree(dest, ignore_errors=True)


def main():
    why = goext.not_built(BIN)
    if why:
        t = loadgen.Tap()
        t.skip("ringcache Go package", why)
        t.done()
    loadgen.tap_main([scenario_install, scenario_calls, scenario_secure, scenario_join_leave],
                     seconds=600)


if __name__ == "__main__":
    main()
