"""Helpers for the client integration tests: TAP output, free loopback
ports, nodes started and stopped by PID, raw memcached requests, and the
client_probe driver. Everything is bounded by deadlines; nothing sleeps
hoping something finished."""

import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rctest  # noqa: E402  (the node helper's process handling)

BUILDDIR = os.environ.get("RC_BUILDDIR", os.getcwd())
SRCDIR = os.environ.get("RC_SRCDIR", os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))))
RINGCACHED = os.path.join(BUILDDIR, "server", "ringcached")
RINGCTL = os.path.join(BUILDDIR, "client", "ringctl")
META_PROBE = os.path.join(BUILDDIR, "tests", "it", "meta_probe")
PROBE = os.path.join(BUILDDIR, "tests", "it", "client_probe")


class Tap:
    """Minimal TAP producer: plan up front, one line per check."""

    def __init__(self, plan):
        self.n = 0
        self.failed = 0
        print("1..%d" % plan, flush=True)

    def ok(self, cond, desc, detail=None):
        self.n += 1
        print("%s %d - %s" % ("ok" if cond else "not ok", self.n, desc), flush=True)
        if not cond:
            self.failed += 1
            if detail is not None:
                for line in str(detail).splitlines()[:30]:
                    print("# " + line, flush=True)
        return cond

    def diag(self, msg):
        print("# " + msg, flush=True)


def _bindable(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port(span=1):
    """A loopback TCP port (or `span` consecutive ones) nobody uses now,
    picked below the kernel's ephemeral range so that outgoing connections
    of parallel tests cannot take it before the node binds it."""
    lo = 20000
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            hi = min(int(f.read().split()[0]), 65536) - span
    except (OSError, ValueError):
        hi = 32768 - span
    rng = random.Random(os.getpid() ^ int(time.time() * 1e6))
    for _ in range(200):
        p = rng.randrange(lo, hi)
        if all(_bindable(p + i) for i in range(span)):
            return p
    raise RuntimeError("no free loopback port")


def wait_for(cond, timeout, step=0.02):
    """Poll cond() until it is true or the deadline passes; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)


def accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def mc_request(port, data, end=b"END\r\n", timeout=2.0):
    """Send raw bytes to a node and read until the reply ends with `end`
    (a plain memcached client, independent of libringcache)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        deadline = time.monotonic() + timeout
        while not buf.endswith(end):
            if time.monotonic() > deadline:
                raise TimeoutError("no complete reply to %r: %r" % (data[:40], buf[-80:]))
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf


def mc_stats(port):
    out = {}
    for line in mc_request(port, b"stats\r\n").decode().split("\r\n"):
        p = line.split(" ", 2)
        if len(p) == 3 and p[0] == "STAT":
            out[p[1]] = p[2]
    return out


def mc_get(port, key):
    """The value of key on this node, or None."""
    r = mc_request(port, b"get " + key.encode() + b"\r\n")
    if r == b"END\r\n":
        return None
    head, rest = r.split(b"\r\n", 1)
    n = int(head.split()[3])
    return rest[:n].decode()


_SIGKILL = signal.SIGKILL


class Node(rctest.Node):
    """One cache node process on 127.0.0.1 (tests/it/rctest.py starts and
    stops it by PID); it can be signalled and restarted on its port."""

    def __init__(self, port, binary=None):
        binary = binary or RINGCACHED
        args = ["-t", "2", "-m", "64"]
        if os.path.basename(binary) == "memcached":
            args += ["-U", "0"] + (["-u", "root"] if os.geteuid() == 0 else [])
        super().__init__(args=args, binary=binary, port=port)

    def start(self, timeout=5.0, tries=1):
        return super().start(timeout=timeout, tries=tries)

    def signal(self, sig):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self, sig=_SIGKILL, timeout=5.0):
        return super().stop(sig=sig, timeout=timeout)


def node_binary():
    """ringcached; memcached only when RC_IT_NODE=memcached asks for it."""
    if os.environ.get("RC_IT_NODE") == "memcached":
        return "/usr/bin/memcached"
    return RINGCACHED


class Cluster:
    """Three nodes cache-a, cache-b, cache-c and their membership file."""

    IDS = ["cache-a", "cache-b", "cache-c"]

    def __init__(self, replicas=1, binary=None):
        self.dir = tempfile.mkdtemp(prefix="rc-client-it-")
        self.binary = binary or node_binary()
        self.nodes = []
        for _ in self.IDS:
            self.nodes.append(Node(free_port(), self.binary).start())
        self.by_id = dict(zip(self.IDS, self.nodes))
        self.members = os.path.join(self.dir, "cluster.members")
        with open(self.members, "w") as f:
            f.write("epoch 1\nvnodes 160\nreplicas %d\n" % replicas)
            for nid, n in zip(self.IDS, self.nodes):
                f.write("node %s 127.0.0.1:%d\n" % (nid, n.port))

    def stop(self):
        for n in self.nodes:
            n.stop()
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)


class Probe:
    """A running client_probe: send a command, get its reply lines."""

    def __init__(self, members, op_timeout=None, retry=None, retry_max=None, poll=None,
                 env=None, binary=None):
        """members: a membership file, or "seeds:H:P,H:P". poll: the
        epoch poll interval in ms (0 = off; None = the library default).
        env: added to the probe's environment (RC_PROBE_TLS*: TLS,
        RC_PROBE_AUTH_*: login). binary: another probe with the same
        command loop (META_PROBE: no poll argument)."""
        args = [binary or PROBE, members]
        if op_timeout is not None:
            args += [str(op_timeout), str(retry), str(retry_max)]
            if poll is not None:
                args.append(str(poll))
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1,
                                     env=dict(os.environ, **(env or {})))

    def cmd(self, line, timeout=60):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        out = []
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError("probe: no answer to %r" % line)
            l = self.proc.stdout.readline()
            if l == "":
                raise RuntimeError("probe exited during %r" % line)
            l = l.rstrip("\n")
            if l == ".":
                return out
            out.append(l)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (subprocess.TimeoutExpired, BrokenPipeError):
                self.proc.kill()
                self.proc.wait()


def run(args, stdin=None, timeout=20, env=None):
    """Run a command; (exit code, stdout, stderr)."""
    p = subprocess.run(args, input=stdin, capture_output=True, text=True,
                       timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


class Scene:
    """A scratch directory (0755: a node run with -u reads its files there)
    and the nodes and probes a test starts in it, all stopped and removed
    on the way out of the with block."""

    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        os.chmod(self.dir, 0o755)
        self.nodes, self.probes = [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.probes:
            p.close()
        for n in self.nodes:
            n.stop()
        self._tmp.cleanup()
        return False


def ringctl(*args, stdin=None):
    """Run the built ringctl: (exit code, stdout, stderr)."""
    return run([RINGCTL] + list(args), stdin=stdin, timeout=60)


def write_file(d, name, text):
    """Write d/NAME with text; its path."""
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def parse_many(lines):
    """client_probe "many" output -> ({key: (owner, code, ms)}, max_ms)."""
    res, max_ms = {}, None
    for l in lines:
        p = l.split()
        if p[0] == "max_ms":
            max_ms = float(p[1])
        else:
            res[p[0]] = (p[1], p[2], float(p[3]))
    return res, max_ms


def members_file(d, name, nodes, replicas=1):
    """A membership file d/NAME.members at epoch 1: nodes n0, n1, ... at
    the nodes' loopback ports."""
    path = os.path.join(d, name + ".members")
    with open(path, "w") as f:
        f.write("epoch 1\nvnodes 160\nreplicas %d\n" % replicas)
        for i, n in enumerate(nodes):
            f.write("node n%d 127.0.0.1:%d\n" % (i, n.port))
    return path


def many_codes(lines):
    """The distinct result codes of a probe's `many` reply, and how many keys."""
    res, _ = parse_many(lines)
    return sorted(set(c for _, c, _ in res.values())), len(res)


def node_errors(p):
    """The probe's `errors`: node id -> the code it was last marked down for."""
    return dict(l.split() for l in p.cmd("errors"))
