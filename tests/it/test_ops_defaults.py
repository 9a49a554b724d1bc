#!/usr/bin/env python3
"""Security defaults of a cluster node (issue 27): the placeholder token of
deploy/kubernetes/config.yaml, "changeme" and its kin, a token under 16
bytes and one byte repeated are refused at start (exit 1, one line naming
the file and why); a good token starts. A cluster port that listens beyond
loopback without --cluster-tls is warned about at start; on loopback, or
with --cluster-tls, it is not. TAP."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import (RINGCACHED, SRCDIR, Node, Tap, can_connect,  # noqa: E402
                    free_cluster_ports, wait_until)

tap = Tap()
tmp = tempfile.mkdtemp(prefix="rc-ops-defaults-")


def shipped_placeholder():
    with open(os.path.join(SRCDIR, "deploy", "kubernetes", "config.yaml")) as f:
        m = re.search(r'^\s*token:\s*"([^"]*)"', f.read(), re.M)
    return m.group(1) if m else None


def start(token, listen="127.0.0.1", refused=False):
    """Start a cluster node with token. refused: wait for it to exit (its
    client port listens before the token is read, so a connect proves
    nothing). Returns (exit status or None while it runs, stderr, Node or
    None)."""
    tf = os.path.join(tmp, "token")
    with open(tf, "w") as f:
        f.write(token + "\n")
    sd = tempfile.mkdtemp(dir=tmp)
    log = os.path.join(tmp, "node.log")
    port = free_cluster_ports()
    cmd = [RINGCACHED, "-p", str(port), "-l", listen, "--id", "a", "--state-dir", sd,
           "--token-file", tf]
    with open(log, "wb") as err:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=err)
    if refused:
        try:
            rc = p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = None
        with open(log) as f:
            return rc, f.read(), None
    n = Node(port=port)
    n.proc = p
    ok = wait_until(lambda: p.poll() is not None or
                    (can_connect(port) and can_connect(port + 10000)), 10)
    with open(log) as f:
        text = f.read()
    if not ok or p.poll() is not None:
        n.stop()
        return p.returncode, text, None
    return None, text, n


try:
    ph = shipped_placeholder()
    tap.ok(ph is not None, "deploy/kubernetes/config.yaml ships a placeholder token", ph)
    for tok in [ph, "changeme", "CHANGEME", "replace-me-now-with-something", "password",
                "short-token-15b", "a" * 40]:
        if tok is None:
            continue
        rc, err, n = start(tok, refused=True)
        lines = err.strip().splitlines()
        tap.ok(rc == 1 and len(lines) == 1 and "token is refused" in lines[0]
               and os.path.join(tmp, "token") + ":1:" in lines[0],
               "token %r: refused at start (exit 1), one line naming FILE:1 and why" % tok[:40], err)
    rc, err, n = start("0123456789abcdef")
    tap.ok(n is not None and "warning" not in err,
           "a 16-byte token starts; on 127.0.0.1 no warning about the cluster port", err)
    if n:
        n.stop()
    rc, err, n = start("0123456789abcdef0123", listen="0.0.0.0")
    tap.ok(n is not None and re.search(r"warning: the cluster port 0\.0\.0\.0:\d+ listens "
                                       r"beyond loopback without --cluster-tls", err),
           "-l 0.0.0.0 without --cluster-tls: a warning at start, and it serves", err)
    if n:
        n.stop()
finally:
    shutil.rmtree(tmp, ignore_errors=True)
tap.done()
