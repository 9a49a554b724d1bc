#!/usr/bin/env python3
"""The man pages against the programs (issue 27: docs that contradict the
code): every option ringcached(1) lists in OPTIONS and MEMCACHED OPTIONS is
in `ringcached --help` and known to the parser (never "unknown option"),
and every long option of --help is in the man page; every global option
ringctl(1) lists is in `ringctl --help` and known to its parser. Plus the
contradictions the issue named, each checked against the code: --help on
-F, -Z with --state-dir, the example memberships' vnodes against
RING_VNODES_DEFAULT, a function operations.md names exists, the
client-login claim, the README's deploy/ line. TAP."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import BUILDDIR, RINGCACHED, SRCDIR, Tap  # noqa: E402

RINGCTL = os.path.join(BUILDDIR, "client", "ringctl")
tap = Tap()


def read(*p):
    with open(os.path.join(SRCDIR, *p)) as f:
        return f.read()


def section(man, first, stop):
    """The text of man from `.SH first` up to the next .SH not in stop."""
    out, on = [], False
    for line in man.splitlines():
        if line.startswith(".SH "):
            name = line[4:].strip('"')
            on = name == first or (on and name in stop)
        if on:
            out.append(line)
    return "\n".join(out)


def options_in(text):
    """Options named in roff text: \\-x and \\-\\-long-name."""
    text = re.sub(r"\\f[BIRP]", " ", text.replace("\\-", "-"))
    longs = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))
    shorts = set(re.findall(r"(?<![\w-])(-[A-Za-z])(?![\w-])", text))
    return longs, shorts


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=20,
                          stdin=subprocess.DEVNULL)


help_text = run([RINGCACHED, "--help"]).stdout
man = read("docs", "ringcached.1")
longs, shorts = options_in(section(man, "OPTIONS", {"MEMCACHED OPTIONS"}))
# The one option the page names as not accepted ("Every option of memcached
# 1.6 but -i (its licence)").
shorts.discard("-i")
tap.ok(len(longs) > 20 and len(shorts) > 20, "ringcached(1) lists %d long and %d short options"
       % (len(longs), len(shorts)))
missing = sorted(o for o in longs | shorts
                 if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(o), help_text))
tap.ok(not missing, "every option of ringcached(1) is in ringcached --help", missing)
unknown = []
for o in sorted(longs | shorts):
    r = run([RINGCACHED, o, "1", "-V"] if o not in ("-h", "--help", "-V", "--version")
            else [RINGCACHED, o])
    if "unknown option" in r.stderr or "unrecognized" in r.stderr:
        unknown.append(o)
tap.ok(not unknown, "the parser knows every option of ringcached(1)", unknown)
help_longs = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text))
not_in_man = sorted(help_longs - options_in(man)[0])
tap.ok(not not_in_man, "every long option of --help is in ringcached(1)", not_in_man)

ctl_help = run([RINGCTL, "--help"])
ctl_text = ctl_help.stdout + ctl_help.stderr
clongs, cshorts = options_in(section(read("docs", "ringctl.1"), "OPTIONS", set()))
cmissing = sorted(o for o in clongs if o not in ctl_text)
tap.ok(clongs and not cmissing, "every global option of ringctl(1) (%d) is in ringctl --help"
       % len(clongs), cmissing)
cunknown = [o for o in sorted(clongs)
            if re.search(r"unknown option|unrecognized option|invalid option",
                         run([RINGCTL, o, "x", "--help"]).stderr)]
tap.ok(not cunknown, "ringctl's parser knows every global option of ringctl(1)", cunknown)

# The contradictions the issue named.
fline = [ln for ln in help_text.splitlines() if re.search(r"(?<![\w-])-F\b", ln)]
tap.ok(any("--disable-flush-all" in ln for ln in fline)
       and not any(ln.strip().startswith("refused") and "-F" in ln for ln in help_text.splitlines()),
       "--help: -F is documented as what it does, not as refused", fline)
tmp = subprocess.run(["mktemp", "-d"], capture_output=True, text=True).stdout.strip()
r = run([RINGCACHED, "-Z", "--id", "a", "--state-dir", tmp, "-o", "ssl_chain_cert=/nonexistent",
         "-V"])
tap.ok(r.returncode == 0, "-Z with --state-dir is accepted by the parser (not exit 2)",
       (r.returncode, r.stderr))
ops = read("docs", "operations.md")
tap.ok("with `--state-dir`: exit 2" not in ops and "or with `--state-dir`: exit 2" not in ops,
       "operations.md no longer says -Z with --state-dir exits 2")
m = re.search(r"#define RING_VNODES_DEFAULT (\d+)", read("ring", "ring.h"))
default = m.group(1)
shipped = {p: re.findall(r"vnodes (\d+)", read(*p.split("/")))
           for p in ("deploy/examples/three.members", "deploy/kubernetes/config.yaml",
                     "docs/operations.md")}
tap.ok(all(v and set(v) == {default} for v in shipped.values()),
       "shipped examples use the default vnodes %s" % default, shipped)
header = read("client", "ringcache.h")
metrics = read("server", "metrics.c")
named = {n for n in re.findall(r"`(ringcache_[a-z_]+)", ops) if n not in metrics}
absent = sorted(n for n in named if not re.search(r"\b%s\s*\(" % n, header)
                and not re.search(r"\b%s\b" % n, header))
tap.ok(not absent, "every ringcache_* function operations.md names is in ringcache.h", absent)
tap.ok("cannot log in" not in ops and re.search(r"auth_user", header),
       "operations.md does not say libringcache cannot log in (ringcache.h has auth_user)")
sec = read("docs", "security.md")
tap.ok("no TLS yet" not in sec and "libcrypto is not linked" not in sec,
       "security.md: no 'no TLS yet', no 'libcrypto is not linked'")
readme = [ln for ln in read("README.md").splitlines() if ln.startswith("| `deploy/`")]
tap.ok(readme and all(w in readme[0] for w in ("systemd", "Kubernetes", "Dockerfile")),
       "README's deploy/ line names what deploy/ holds", readme)
subprocess.run(["rm", "-rf", tmp])
tap.done()
