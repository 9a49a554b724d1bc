"""Shared helpers for ringcache integration tests (TAP output, real
processes on 127.0.0.1 free ports, stopped by PID).

Usage:
    from rctest import Tap, Node, start_nodes
    tap = Tap()
    with Node(args=["-t", "2"]) as n:
        s = n.connect()
        ...
    tap.done()
"""
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

BUILDDIR = os.environ.get("RC_BUILDDIR", os.getcwd())
SRCDIR = os.environ.get("RC_SRCDIR", os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))))
RINGCACHED = os.path.join(BUILDDIR, "server", "ringcached")


def sanitized():
    """True when the build under test uses ASan/UBSan (memory figures are
    meaningless there: shadow memory and quarantine)."""
    try:
        with open(os.path.join(BUILDDIR, "config.h")) as f:
            return "#define RC_SANITIZERS 1" in f.read()
    except OSError:
        return False


def rss_kb(pid):
    """VmRSS of pid in KiB (0 if /proc has none)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def rss_bound_kb(base_kb, extra_mib):
    """The RSS a case may reach: baseline + extra_mib (doubled + 24 MiB
    under the sanitizers, whose shadow and quarantine grow with use)."""
    if sanitized():
        return base_kb + (2 * extra_mib + 24) * 1024
    return base_kb + extra_mib * 1024


class RssSampler(threading.Thread):
    """Samples a process's VmRSS every 10 ms until stop(); peak in KiB.
    base: the baseline to report (default: the RSS now)."""

    def __init__(self, pid, base=None):
        super().__init__(daemon=True)
        self.pid = pid
        self.base = base if base is not None else rss_kb(pid)
        self.peak = rss_kb(pid)
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            try:
                self.peak = max(self.peak, rss_kb(self.pid))
            except OSError:
                return
            time.sleep(0.01)

    def stop(self):
        self.halt.set()
        self.join(5)
        try:
            self.peak = max(self.peak, rss_kb(self.pid))
        except OSError:
            pass
        return self.peak


class Tap:
    """Minimal TAP producer: the plan is printed at the end (tap-driver
    accepts a trailing plan), so tests need not count in advance."""

    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, desc, diag=None):
        self.n += 1
        if cond:
            print("ok %d - %s" % (self.n, desc))
        else:
            self.failed += 1
            print("not ok %d - %s" % (self.n, desc))
            if diag is not None:
                for line in str(diag).splitlines():
                    print("# " + line)
        sys.stdout.flush()
        return cond

    def eq(self, got, want, desc):
        return self.ok(got == want, desc, "got:  %r\nwant: %r" % (got, want))

    def skip(self, desc, why):
        self.n += 1
        print("ok %d - %s # SKIP %s" % (self.n, desc, why))
        sys.stdout.flush()

    def diag(self, msg):
        for line in str(msg).splitlines():
            print("# " + line)
        sys.stdout.flush()

    def done(self):
        print("1..%d" % self.n)
        sys.stdout.flush()
        sys.exit(1 if self.failed else 0)


def free_port():
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


CLUSTER_PORT_OFFSET = 10000     # a cluster-mode node's default cluster port = client port + this


def _port_bindable(port):
    """True when nothing holds `port` on 127.0.0.1 now. No SO_REUSEADDR, so
    a port a TIME_WAIT connection still names counts as taken (the
    conservative answer: the caller just picks another)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def ephemeral_low():
    """The first port of the kernel's ephemeral range (outgoing connections
    take their local port from it)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_cluster_ports(count=1, offset=CLUSTER_PORT_OFFSET, lo=20000, tries=1000):
    """A client port p such that p..p+count-1 and p+offset..p+offset+count-1
    are all free on 127.0.0.1 now and all lie below the kernel's ephemeral
    range, so an outgoing connection of a parallel test cannot take one of
    them between this probe and the node's bind (which a port from
    free_port() or from bind(0) is exposed to: those are ephemeral ports).
    For cluster-mode nodes (count=1) and deploy/local-cluster.sh
    --base-port (count = its node count). offset=0 asks for `count`
    consecutive free ports. The pick is random per process, so parallel
    tests rarely probe the same ports; callers still retry a lost race."""
    hi = ephemeral_low() - offset - count          # exclusive bound for p
    if hi - lo < 100:
        # An unusual ephemeral range: no room below it; probe the whole
        # unprivileged range (the race is back, the retries cover it).
        lo, hi = 1025, 65536 - offset - count
    rng = random.Random(os.getpid() ^ int(time.time() * 1e6))
    for _ in range(tries):
        p = rng.randrange(lo, hi)
        want = [p + i for i in range(count)]
        if offset:
            want += [p + offset + i for i in range(count)]
        if all(_port_bindable(q) for q in want):
            return p
    raise RuntimeError("no free loopback ports: %d at +0 and +%d" % (count, offset))


def wait_until(cond, timeout, interval=0.02):
    """Poll cond() until it returns a true value or timeout seconds pass;
    returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def can_connect(port, host="127.0.0.1"):
    try:
        s = socket.create_connection((host, port), timeout=0.5)
        s.close()
        return True
    except OSError:
        return False


class Node:
    """One ringcached process. args are extra flags (-p and -l are added
    unless given). Use as a context manager, or start()/stop()."""

    def __init__(self, args=None, binary=None, port=None, stderr=None):
        self.args = list(args or [])
        self.binary = binary or RINGCACHED
        self.port = port
        self.proc = None
        self.stderr_path = stderr

    def start(self, timeout=10.0, tries=5):
        # A cluster-mode node (--id) binds client port + CLUSTER_PORT_OFFSET
        # too unless told otherwise: pick a client port whose pair is free
        # and in range (a port from free_port() can be over 55535).
        clustered = "--id" in self.args and "--cluster-port" not in self.args
        for _ in range(tries):
            port = self.port or (free_cluster_ports() if clustered else free_port())
            cmd = [self.binary]
            if "-l" not in self.args:
                cmd += ["-l", "127.0.0.1"]
            cmd += ["-p", str(port)] + self.args
            err = open(self.stderr_path, "wb") if self.stderr_path else None
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=err)
            if err:
                err.close()
            ok = wait_until(lambda: self.proc.poll() is not None or can_connect(port),
                            timeout)
            if self.proc.poll() is None and ok:
                self.port = port
                return self
            # Lost a race for the port (or failed to start): try another.
            self.stop()
            if self.port:
                break
        raise RuntimeError("ringcached did not start: %s" % " ".join(cmd))

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def connect(self, timeout=10.0):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Signal the process, wait up to timeout, then SIGKILL. Returns the
        exit status (negative: killed by that signal), None if not started."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        self.proc = None
        return rc

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def start_nodes(n, args=None):
    """Start n nodes with the same extra args; stops the started ones if one
    fails. Returns the list."""
    nodes = []
    try:
        for _ in range(n):
            nodes.append(Node(args=args).start())
    except Exception:
        for nd in nodes:
            nd.stop()
        raise
    return nodes


def stop_nodes(nodes):
    return [nd.stop() for nd in nodes]


def recv_until(sock, terminator, timeout=10.0, limit=64 << 20):
    """Read until the buffer ends with terminator (bytes); returns what was
    read (possibly short if the peer closed or the deadline passed)."""
    deadline = time.monotonic() + timeout
    buf = bytearray()
    while not buf.endswith(terminator) and len(buf) < limit:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            d = sock.recv(1 << 20)
        except socket.timeout:
            break
        if not d:
            break
        buf += d
    return bytes(buf)


def recv_exact_or_close(sock, timeout=5.0):
    """Read until the peer closes (or the deadline); returns (data, closed)."""
    deadline = time.monotonic() + timeout
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return buf, False
        sock.settimeout(left)
        try:
            d = sock.recv(65536)
        except socket.timeout:
            return buf, False
        except ConnectionResetError:
            return buf, True
        if not d:
            return buf, True
        buf += d


def request(sock, data, terminator=b"\r\n", timeout=10.0):
    """Send data and read a reply ending with terminator."""
    sock.sendall(data)
    return recv_until(sock, terminator, timeout)
