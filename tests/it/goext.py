"""Runs the Go package's test binaries (built by make from client/go/:
client/go/ringcache.test, the package's own tests, and
client/go/peer/memcache.test, gomemcache's memcache_test.go against it)
for the Go tests: each Go test (and subtest) becomes one TAP line; the
binary's "RCSTEP <what>" lines are handed to a callback whose answer is
written to the binary's stdin (a join, a leave, a node to kill)."""
import os
import re
import subprocess

import loadgen

BUILDDIR = loadgen.BUILDDIR
GODIR = os.path.join(BUILDDIR, "client", "go")


def not_built(binary):
    """Why the Go binary cannot be run ('' when it can)."""
    if not os.path.exists(os.path.join(BUILDDIR, binary)):
        return ("%s was not built (configure found no go: apt-get install golang-go, "
                "then reconfigure)" % binary)
    return ""


def go_env():
    """The go command and flags the build used (client/go/go.env)."""
    out = {}
    try:
        with open(os.path.join(GODIR, "go.env")) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                out[k] = v
    except OSError:
        pass
    return out


def run(t, binary, run_re, env, on_step=None, timeout=240, label="go"):
    """Run the Go test binary's tests matching run_re with env added; one
    TAP line per `--- PASS/FAIL/SKIP`; returns {PASS: n, FAIL: n, SKIP: n}.
    A failed test's output is shown as TAP diagnostics."""
    e = dict(os.environ)
    e.update(env)
    p = loadgen.track(subprocess.Popen(
        [os.path.join(BUILDDIR, binary), "-test.v", "-test.count=1", "-test.timeout=%ds" % timeout,
         "-test.run", run_re], env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, bufsize=1))
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    block = []
    for line in p.stdout:
        line = line.rstrip("\n")
        if line.startswith("RCSTEP "):
            ans = on_step(line[len("RCSTEP "):]) if on_step else "no driver for this step"
            p.stdin.write(ans + "\n")
            p.stdin.flush()
            continue
        m = re.match(r"\s*--- (PASS|FAIL|SKIP): (\S+)", line)
        if m:
            counts[m.group(1)] += 1
            name = "%s %s" % (label, m.group(2))
            if m.group(1) == "SKIP":
                reason = [b.strip() for b in block if b.strip()][-1:] or ["skipped"]
                t.skip(name, reason[0])
            else:
                t.ok(m.group(1) == "PASS", name, "\n".join(block[-60:]))
                if m.group(1) == "PASS":  # the test's own t.Log lines (figures)
                    for b in [b for b in block if re.match(r"\s+\S+_test\.go:\d+: ", b)][:5]:
                        t.diag(b.strip())
            block = []
            continue
        if line.startswith("=== RUN") or line.startswith("=== CONT") or line.startswith("=== PAUSE"):
            continue
        block.append(line)
    rc = p.wait()
    t.ok(rc == 0 and counts["PASS"] > 0, "%s: the test binary passed (exit %d, %d passed, %d "
         "failed, %d skipped)" % (label, rc, counts["PASS"], counts["FAIL"], counts["SKIP"]),
         "\n".join(block[-60:]))
    return counts
