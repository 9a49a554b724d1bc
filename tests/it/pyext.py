"""Finds the ringcache Python package staged by the build
(client/python/pkg/) for the Python tests, and makes them run under the
python3 it was built for (Debian's /usr/bin/python3, not a pyenv one first
on PATH): re-executes the test with it when needed. In a sanitizer build
the module carries ASan, so that python runs with libasan preloaded."""
import os
import subprocess
import sys

BUILDDIR = os.environ.get("RC_BUILDDIR", os.getcwd())
PKG = os.path.join(BUILDDIR, "client", "python", "pkg")


def _read(name):
    try:
        with open(os.path.join(PKG, name)) as f:
            return f.read().strip()
    except OSError:
        return ""


def not_built():
    """Why the module cannot be tested ('' when it can)."""
    if not os.path.exists(os.path.join(PKG, "ringcache", "_ringcache.so")):
        return ("the ringcache Python module was not built (configure found no python3-dev "
                "for /usr/bin/python3: apt-get install python3-dev, then reconfigure)")
    return ""


def _preload():
    libs = []
    for lib in ("libasan.so", "libubsan.so"):
        p = subprocess.run(["gcc", "-print-file-name=" + lib], capture_output=True,
                           text=True).stdout.strip()
        if p and os.path.isabs(p):
            libs.append(os.path.realpath(p))
    return " ".join(libs)


def setup():
    """Re-exec under the module's python if this is another one; then put
    the staged package first on sys.path. Call before importing ringcache
    (only when not_built() is '')."""
    want = _read("PYTHON") or sys.executable
    san = _read("SANITIZERS") == "yes"
    if not os.environ.get("RC_PYEXT_REEXEC") and (
            os.path.realpath(want) != os.path.realpath(sys.executable) or san):
        env = dict(os.environ, RC_PYEXT_REEXEC="1")
        if san:
            env["LD_PRELOAD"] = _preload()
            # Last, so that it wins over the suite's detect_leaks=1: the
            # interpreter's own allocations at exit are not ours to report
            # (nor make's, run by the install check).
            env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
        sys.stdout.flush()
        os.execve(want, [want] + sys.argv, env)
    if PKG not in sys.path:
        sys.path.insert(0, PKG)
