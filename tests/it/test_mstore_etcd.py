"""The membership store's conformance suite (tests/check_mstore.c, case
"etcd") against a real etcd started here: plain, with etcd auth (user and
password file), and over TLS with client certificates. Then what an
operator sees when etcd is wrong: a bad password, a client without its
certificate, an etcd that is down: ringctl fails with a clear message,
at once, and does not hang."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import etcdlab  # noqa: E402

CHECK_MAIN = os.path.join(lg.BUILDDIR, "tests", "check_main")


def conformance(t, spec, what):
    """Run the etcd case of the mstore suite against spec."""
    env = dict(os.environ, RC_MSTORE_ETCD=spec, CK_RUN_SUITE="mstore", CK_RUN_CASE="etcd",
               CK_VERBOSITY="normal")
    env.pop("CK_TAP_LOG_FILE_NAME", None)
    r = subprocess.run([CHECK_MAIN], env=env, capture_output=True, text=True, timeout=240)
    m = re.search(r"Checks: (\d+), Failures: (\d+), Errors: (\d+)", r.stdout)
    n = int(m.group(1)) if m else 0
    t.ok(r.returncode == 0 and m and n >= 10 and m.group(2) == "0" and m.group(3) == "0",
         "%s: the store conformance suite passes against etcd (%d checks)" % (what, n),
         (r.returncode, r.stdout[-2000:], r.stderr[-2000:]))


TOKEN_FILE = None


def ctl(spec, *args, timeout=30):
    t0 = time.monotonic()
    r = subprocess.run([lg.RINGCTL, "--store", spec, "--token-file", TOKEN_FILE] + list(args),
                       capture_output=True,
                       text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout, r.stderr, time.monotonic() - t0


def scenario(t):
    global TOKEN_FILE
    work = tempfile.mkdtemp(prefix="rc-etcd-")
    TOKEN_FILE = os.path.join(work, "token")
    with open(TOKEN_FILE, "w") as f:
        f.write("test-token-%08d\n" % os.getpid())
    os.chmod(TOKEN_FILE, 0o600)
    etcds = []
    try:
        e = etcdlab.Etcd(work, name="plain").start()
        etcds.append(e)
        conformance(t, e.spec("rc-check"), "plain")
        rc, out, err, _ = ctl(e.spec("rc-empty"), "status")
        t.ok(rc == 0 and out.startswith("epoch\t0\npending\tnone"),
             "ringctl status on an empty etcd prefix: epoch 0, nothing pending", (rc, out, err))

        a = etcdlab.Etcd(work, auth=True, name="auth").start()
        etcds.append(a)
        conformance(t, a.spec("rc-check"), "auth (user root, password file)")
        bad = os.path.join(work, "bad-password")
        with open(bad, "w") as f:
            f.write("wrong\n")
        rc, out, err, secs = ctl("etcd://%s/rc?user=root&password-file=%s" % (a.endpoint, bad),
                                 "status")
        t.diag(err.strip())
        t.ok(rc != 0 and "authentication failed" in err.lower(),
             "a wrong etcd password: ringctl fails naming the authentication (%.1f s)" % secs,
             (rc, err))
        rc, out, err, secs = ctl("etcd://%s/rc" % a.endpoint, "status")
        t.diag(err.strip())
        t.ok(rc != 0 and "etcd" in err and secs < 10,
             "no credentials for an etcd with auth on: a clear error (%.1f s)" % secs, (rc, err))

        s = etcdlab.Etcd(work, tls=True, name="tls").start()
        etcds.append(s)
        conformance(t, s.spec("rc-check"), "TLS with a client certificate")
        rc, out, err, secs = ctl("etcds://%s/rc?cacert=%s" % (s.endpoint, s.certs["ca"]),
                                 "status")
        t.diag(err.strip())
        t.ok(rc != 0 and "etcd" in err and secs < 10,
             "TLS without the client certificate: refused with a clear error (%.1f s)" % secs,
             (rc, err))
        rc, out, err, secs = ctl("etcd://%s/rc" % s.endpoint, "status")
        t.diag(err.strip())
        t.ok(rc != 0 and "etcd" in err and secs < 10,
             "plain HTTP to a TLS etcd: a clear error (%.1f s)" % secs, (rc, err))

        e.stop()
        rc, out, err, secs = ctl(e.spec("rc-check"), "status")
        t.diag(err.strip())
        t.ok(rc != 0 and e.endpoint in err and secs < 10,
             "etcd down: ringctl status fails at once naming the endpoint (%.1f s)" % secs,
             (rc, err))
    finally:
        for x in etcds:
            x.stop()
        if t.failed == 0:
            shutil.rmtree(work, ignore_errors=True)
        else:
            t.diag("etcd data and logs kept in %s" % work)


def main():
    t = lg.Tap()
    lg.watchdog(280)
    why = etcdlab.available()
    if why:
        t.skip("store conformance against etcd", why)
    else:
        lg.run_tap(t, scenario)
    t.done()


if __name__ == "__main__":
    main()
