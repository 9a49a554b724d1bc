#!/usr/bin/env python3
"""deploy/kubernetes/Dockerfile against this build, offline (issue 27: the
image could neither be built nor run): its build stage installs every
Debian package configure.ac requires (RC_DEP's third argument, and
libsystemd-dev), and its runtime stage installs, for every library the
built binaries link (ldd of ringcached, ringctl and libringcache), the
package that holds it (dpkg -S): each library a binary names itself
(NEEDED) by a package the stage lists, the rest by one of those packages'
dependencies (apt-cache depends --recurse) or the base image's essential
set. With a working docker or podman the image is not built here (minutes,
network): that is CI's job. TAP."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import BUILDDIR, SRCDIR, Tap  # noqa: E402

tap = Tap()
DOCKERFILE = os.path.join(SRCDIR, "deploy", "kubernetes", "Dockerfile")
BINARIES = [os.path.join(BUILDDIR, "server", "ringcached"),
            os.path.join(BUILDDIR, "client", "ringctl"),
            os.path.join(BUILDDIR, "client", ".libs", "libringcache.so")]
OURS = ("libringcache",)


def stages(text):
    """[(FROM line, [packages apt-get installs])] per stage."""
    text = text.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        if line.startswith("FROM "):
            out.append((line, []))
        elif line.startswith("RUN ") and out and "apt-get install" in line:
            seg = line.split("apt-get install", 1)[1].split("&&")[0]
            out[-1][1].extend(w for w in seg.split() if not w.startswith("-"))
    return out


def package_of(path):
    """The Debian package that holds a library path (usrmerge: either
    spelling), or None."""
    real = os.path.realpath(path)
    for p in (path, "/usr" + path, real, "/usr" + real):
        r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout.split(":")[0].strip()
    return None


def ldd(binary):
    r = subprocess.run(["ldd", binary], capture_output=True, text=True)
    return [m.group(1) for m in re.finditer(r"=> (/\S+)", r.stdout)]


def needed(binary):
    r = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", r.stdout)


def depends_closure(pkgs):
    r = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                        "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"]
                       + list(pkgs), capture_output=True, text=True, timeout=120)
    return {ln.strip() for ln in r.stdout.splitlines() if ln and not ln.startswith(" ")}


with open(DOCKERFILE) as f:
    st = stages(f.read())
tap.ok(len(st) == 2 and st[1][0].startswith("FROM debian:12"),
       "two stages, the runtime one on Debian 12", [s[0] for s in st])
build, runtime = set(st[0][1]), set(st[-1][1])

with open(os.path.join(SRCDIR, "configure.ac")) as f:
    conf = f.read()
want = set(re.findall(r"RC_DEP\(\[\w+\], \[[^\]]*\], \[([\w.+-]+)\]\)", conf)) - {"check"}
want.add("libsystemd-dev")
tap.ok(want and want <= build, "the build stage installs every package configure.ac requires "
       "(libssl-dev, libsystemd-dev included)", sorted(want - build))

missing = [b for b in BINARIES if not os.path.exists(b)]
if missing:
    tap.skip("the runtime stage has every linked library", "not built: %s" % missing)
    tap.done()
# A sanitizer build (tests/run.sh's second pass) links the sanitizers'
# runtimes, which the image's build (no --enable-sanitizers) never does.
SANITIZER_RUNTIME = re.compile(r"^lib(a|ub|l|t|hwa)san[0-9]+$")
direct, libs = {}, {}
sanitized = False
for b in BINARIES:
    for lib in ldd(b):
        pkg = package_of(lib)
        if pkg is not None and SANITIZER_RUNTIME.match(pkg):
            sanitized = True
            continue
        libs[lib] = pkg
    names = needed(b)
    for lib, pkg in libs.items():
        if os.path.basename(lib) in names:
            direct[lib] = pkg
unknown = sorted(lib for lib, pkg in libs.items()
                 if pkg is None and not any(o in lib for o in OURS))
tap.ok(not unknown, "every library ldd lists maps to a Debian package (dpkg -S)", unknown)
essential = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Essential}\\n"],
                           capture_output=True, text=True).stdout
base = depends_closure(ln.split()[0] for ln in essential.splitlines() if ln.endswith(" yes"))
not_listed = sorted({pkg for lib, pkg in direct.items() if pkg and pkg not in runtime
                     and pkg not in base})
tap.ok(not not_listed, "every package a binary links directly (%s) is in the runtime stage's "
       "list or the base image" % ", ".join(sorted({p for p in direct.values() if p})),
       not_listed)
closure = depends_closure(runtime) | base
uncovered = sorted({pkg for pkg in libs.values() if pkg and pkg not in closure})
if sanitized:
    # The sanitizers' runtimes reach libraries of their own (libstdc++):
    # the closure is checked on the plain build, as the image builds.
    tap.skip("every package ldd reaches is installed by the runtime stage",
             "a sanitizer build: the plain build's run checks it")
else:
    tap.ok(not uncovered, "every package ldd reaches (%d) is installed by the runtime stage's "
           "packages or the base image" % len({p for p in libs.values() if p}), uncovered)
tap.ok("libevent-openssl-2.1-7" in runtime and "libssl3" in runtime,
       "in particular libevent-openssl-2.1-7 and libssl3 (what the image lacked)")
tap.done()
