#!/usr/bin/env python3
"""pymemcache's own integration suite (Debian's python3-pymemcache ships
it: pymemcache/test/test_integration.py), run with pytest against a
ringcached plaintext port and a ringcached -Z port, as pymemcache's
developers run it against memcached (--server/--port, --tls-server/
--tls-port). Every client class it has (Client, PooledClient, a one-server
HashClient) runs every case, test_tls over TLS. The suite's TLS fixture
reads a CA file Debian does not ship, so a conftest beside a copy of the
suite (in a scratch directory; nothing is kept) takes pymemcache's own
conftest whole, points that one fixture at a throwaway CA and makes
flush_all wait for its OK (see CONFTEST: the suite's noreply flush races
the next case across connections). The same
run against Debian's memcached -Z shows the suite itself passes there.

One TAP line per pytest case against ringcached; one line for the whole
suite against memcached."""
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tlscerts  # noqa: E402
from rctest import Tap, Node  # noqa: E402

PY = "/usr/bin/python3"  # Debian's, with python3-pytest and python3-pymemcache
MEMCACHED = shutil.which("memcached") or "/usr/bin/memcached"
CONFTEST = '''\
import os
import ssl

import pytest
from pymemcache.client import base
from pymemcache.test.conftest import *  # noqa: F401,F403 (its options and fixtures)

# Every case opens with flush_all, which pymemcache sends as noreply; test_misc
# does nothing else. Its flush is then on one connection while the next case
# sets on another, and nothing orders the two: a slow node (ASan) may run the
# flush after the set and the case reads None, with memcached as with us. An
# acknowledged flush_all keeps the suite's meaning and takes the race away.
_flush_all = base.Client.flush_all


def _acked_flush_all(self, delay=0, noreply=None):
    return _flush_all(self, delay=delay, noreply=False)


base.Client.flush_all = _acked_flush_all


@pytest.fixture(scope="session")
def tls_context():
    return ssl.create_default_context(cafile=os.environ["RC_SUITE_CA"])
'''


def suite_dir():
    """pymemcache's test directory, or None when pytest or the suite is missing."""
    r = subprocess.run([PY, "-c", "import pytest, pymemcache.test.test_integration as t; "
                        "print(t.__file__)"], capture_output=True, text=True, timeout=60)
    return os.path.dirname(r.stdout.strip()) if r.returncode == 0 else None


def run_suite(work, name, port, tls_port, ca):
    """pytest over the suite against these ports: ({case: (passed, why)}, output)."""
    d = os.path.join(work, name)
    os.makedirs(d)
    shutil.copy(os.path.join(SUITE, "test_integration.py"), d)
    with open(os.path.join(d, "conftest.py"), "w") as f:
        f.write(CONFTEST)
    xml = os.path.join(d, "result.xml")
    env = dict(os.environ, RC_SUITE_CA=ca, PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "integration",
                        "--rootdir", d, "--junitxml", xml, "--server", "127.0.0.1",
                        "--port", str(port), "--tls-server", "127.0.0.1",
                        "--tls-port", str(tls_port), os.path.join(d, "test_integration.py")],
                       cwd=d, env=env, capture_output=True, text=True, timeout=600)
    cases = {}
    if os.path.exists(xml):
        for tc in ET.parse(xml).getroot().iter("testcase"):
            bad = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
            if tc.find("skipped") is not None:
                continue
            cases[tc.get("name")] = (bad is None, "" if bad is None else bad.get("message", ""))
    return cases, r.stdout[-3000:] + r.stderr[-2000:]


def main():
    t = Tap()
    global SUITE
    SUITE = suite_dir()
    if SUITE is None:
        t.skip("pymemcache's integration suite", "python3-pytest or python3-pymemcache missing")
        t.done()
        return
    if tlscerts.available():
        t.skip("pymemcache's integration suite", tlscerts.available())
        t.done()
        return
    work = tempfile.mkdtemp(prefix="rc-pmsuite-")
    os.chmod(work, 0o755)  # memcached -u nobody reads the certificate there
    nodes = []
    try:
        ca = tlscerts.make_ca(work, "ca")
        srv = tlscerts.make_cert(work, "srv", ca, san="IP:127.0.0.1,DNS:localhost",
                                 usage="serverAuth")
        tls = ["-Z", "-o", "ssl_chain_cert=%s,ssl_key=%s" % (srv[1], srv[0])]

        plain, secure = Node(args=["-t", "2"]).start(), Node(args=["-t", "2"] + tls).start()
        nodes += [plain, secure]
        cases, out = run_suite(work, "ringcached", plain.port, secure.port, ca[1])
        t.ok(len(cases) >= 20 and any(c.startswith("test_tls") for c in cases),
             "ringcached: pytest ran pymemcache's integration suite (%d cases, test_tls "
             "among them)" % len(cases), out)
        for name in sorted(cases):
            ok, why = cases[name]
            t.ok(ok, "ringcached: pymemcache %s" % name, why)
        t.ok(plain.alive() and secure.alive(), "ringcached: both nodes still up after the suite")

        mc = [MEMCACHED, "-U", "0"] + (["-u", "nobody"] if os.getuid() == 0 else [])
        has_tls = os.access(MEMCACHED, os.X_OK) and b"--enable-ssl" in subprocess.run(
            [MEMCACHED, "-h"], capture_output=True, timeout=10).stdout
        if not has_tls:
            t.skip("memcached -Z: the same suite", "memcached missing or built without TLS")
        else:
            mplain = Node(args=mc[1:], binary=MEMCACHED, stderr=os.devnull).start()
            msecure = Node(args=mc[1:] + tls, binary=MEMCACHED, stderr=os.devnull).start()
            nodes += [mplain, msecure]
            mcases, mout = run_suite(work, "memcached", mplain.port, msecure.port, ca[1])
            failed = sorted(n for n, (ok, _) in mcases.items() if not ok)
            t.ok(set(mcases) == set(cases) and not failed,
                 "memcached -Z: the same %d cases pass (the suite is sound here)" % len(mcases),
                 (failed, mout[-1500:]))
    finally:
        for n in nodes:
            n.stop()
        shutil.rmtree(work, ignore_errors=True)
    t.done()


if __name__ == "__main__":
    main()
