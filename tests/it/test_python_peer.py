"""pymemcache's own integration tests (tests/it/pymemcache_upstream/: pymemcache
3.5.2's test_integration.py, imports adapted to ringcache) run with pytest
against ringcache.Client, PooledClient and HashClient on a 3-node R=2
ringcached cluster (and its TLS test on a second, -Z, cluster). TAP: pytest's verdict, then one line per pymemcache
test with its outcome; skips are listed with their reasons. Skipped only
when the module was not built or pytest is missing."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyext  # noqa: E402

if not pyext.not_built():
    pyext.setup()
import loadgen  # noqa: E402

SUITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pymemcache_upstream")


def scenario(t):
    import shutil
    import ssl
    import tempfile
    d = tempfile.mkdtemp(prefix="rc-pypeer-")
    certs = loadgen.cluster_certs(d)
    cl, ok = loadgen.start_cluster(t, ["a", "b", "c"], replicas=2)
    loadgen.use_client_tls(ssl.create_default_context(cafile=certs["ca"][1]))
    try:
        tcl, tok = loadgen.start_cluster(t, ["a", "b", "c"], replicas=2, tls=certs,
                                         data_tls=True)
    finally:
        loadgen.use_client_tls(None)
    try:
        if not (ok and tok):
            return
        # ringcache.Client(tls_context=ctx) verifies with the system's CAs:
        # here, the test CA.
        env = dict(os.environ, PYTHONPATH=pyext.PKG, PYTHONDONTWRITEBYTECODE="1",
                   SSL_CERT_FILE=certs["ca"][1])
        p = loadgen.track(subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q",
             "--server", "127.0.0.1", "--port", str(cl.nodes["a"].port),
             "--tls-server", "127.0.0.1", "--tls-port", str(tcl.nodes["a"].port),
             "--tls-ca", certs["ca"][1], os.path.join(SUITE, "test_integration.py")],
            cwd=SUITE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        out, _ = p.communicate(timeout=240)
        counts = {"PASSED": 0, "FAILED": 0, "SKIPPED": 0, "ERROR": 0}
        for line in out.splitlines():
            m = re.match(r"(PASSED|FAILED|ERROR) (\S+)", line)
            if m:
                counts[m.group(1)] += 1
                t.ok(m.group(1) == "PASSED", "pymemcache %s" % m.group(2).split("::")[-1])
            m = re.match(r"SKIPPED \[(\d+)\] (.*)", line)
            if m:
                counts["SKIPPED"] += int(m.group(1))
                t.skip("pymemcache (%s skipped)" % m.group(1), m.group(2))
        t.diag("pymemcache 3.5.2 test_integration.py: %d passed, %d failed, %d errors, "
               "%d skipped" % (counts["PASSED"], counts["FAILED"], counts["ERROR"],
                               counts["SKIPPED"]))
        t.ok(p.returncode == 0 and counts["PASSED"] > 0,
             "pytest: pymemcache's integration suite passes on ringcache (exit %d)"
             % p.returncode, out[-3000:] if p.returncode else None)
    finally:
        loadgen.close_cluster(t, cl)
        loadgen.close_cluster(t, tcl)
        shutil.rmtree(d, ignore_errors=True)


def main():
    why = pyext.not_built()
    if not why and loadgen.debian_import("pytest") is None:
        why = "pytest is not installed (apt-get install python3-pytest)"
    if why:
        t = loadgen.Tap()
        t.skip("pymemcache's suite on ringcache", why)
        t.done()
    loadgen.tap_main(scenario, seconds=280)


if __name__ == "__main__":
    main()
