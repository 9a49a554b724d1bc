"""A cgroup freezer for one process: frozen without any signal it could
see (findings 11), as a hung VM or a stalled host looks to its peers.
cgroup v2 (cgroup.freeze) where it is mounted at /sys/fs/cgroup, else the
v1 freezer hierarchy (/sys/fs/cgroup/freezer, freezer.state). Root only.

    why = freezer.unavailable()     # None, or why a test must skip
    with freezer.Frozen(pid, "name"):
        ...                         # pid is frozen here, thawed after
"""
import os

V2_ROOT = "/sys/fs/cgroup"
V1_ROOT = "/sys/fs/cgroup/freezer"


def _v2_cgroup_of(pid):
    with open("/proc/%s/cgroup" % pid) as f:
        for line in f:
            if line.startswith("0::"):
                return V2_ROOT + line.strip()[3:]
    return None


def _mode():
    if os.path.exists(os.path.join(V2_ROOT, "cgroup.controllers")):
        return "v2"
    if os.path.exists(os.path.join(V1_ROOT, "freezer.state")) or \
            os.path.exists(os.path.join(V1_ROOT, "cgroup.procs")):
        return "v1"
    return None


def unavailable():
    """None if a freezer cgroup can be made here, else why not."""
    mode = _mode()
    if mode is None:
        return "no cgroup v2 at %s and no v1 freezer at %s" % (V2_ROOT, V1_ROOT)
    base = _v2_cgroup_of("self") if mode == "v2" else V1_ROOT
    if base is None:
        return "this process is in no cgroup v2"
    probe = os.path.join(base, "rc-freezer-probe-%d" % os.getpid())
    try:
        os.mkdir(probe)
    except OSError as e:
        return "cannot create a cgroup under %s (%s)" % (base, e.strerror)
    try:
        ctl = "cgroup.freeze" if mode == "v2" else "freezer.state"
        if not os.path.exists(os.path.join(probe, ctl)):
            return "the cgroup has no %s" % ctl
        if not os.access(os.path.join(probe, "cgroup.procs"), os.W_OK):
            return "cgroup.procs not writable"
    finally:
        os.rmdir(probe)
    return None


class Frozen:
    """Freeze process pid (all its threads) in a cgroup of its own for
    the with-block; thaw it and put it back where it was on exit."""

    def __init__(self, pid, name):
        self.pid = pid
        self.mode = _mode()
        if self.mode is None:
            raise OSError("no cgroup freezer")
        if self.mode == "v2":
            self.orig = _v2_cgroup_of(pid)
            base = _v2_cgroup_of("self")
        else:
            self.orig = V1_ROOT
            base = V1_ROOT
        self.cg = os.path.join(base, "rc-freeze-%d-%s" % (os.getpid(), name))

    def _write(self, name, value):
        with open(os.path.join(self.cg, name), "w") as f:
            f.write(value)

    def __enter__(self):
        os.makedirs(self.cg, exist_ok=True)
        self._write("cgroup.procs", str(self.pid))
        if self.mode == "v2":
            self._write("cgroup.freeze", "1")
        else:
            self._write("freezer.state", "FROZEN")
        return self

    def __exit__(self, *exc):
        try:
            if self.mode == "v2":
                self._write("cgroup.freeze", "0")
            else:
                self._write("freezer.state", "THAWED")
            with open(os.path.join(self.orig, "cgroup.procs"), "w") as f:
                f.write(str(self.pid))
        except OSError:
            pass    # the process is gone: nothing to thaw
        try:
            os.rmdir(self.cg)
        except OSError:
            pass
        return False
