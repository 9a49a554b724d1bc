"""Live-load invariant harness for the cluster (issue 5): a load generator
that records every operation, a checker for what readers saw, a final sweep
of every key on its owners, movement figures from `ringctl locate`, and a
Cluster helper that runs ringcached nodes and the ringctl admin commands.

Writers own disjoint key sets and write per-key increasing sequence numbers
(value = "<key>:<seq>:" padded); some operations are deletes (a sequence
number too). Every write is recorded as ok / failed / indet(erminate) with
monotonic timestamps. Readers record what they saw; checks run afterwards
against the full history so a record appended late can never hide a
violation.

Client modes:
  epoch  declares `epoch <n>` on every connection, routes by the membership
         learnt from `config` (owners from `ringctl locate`), follows
         `SERVER_ERROR MOVED` (refreshing the view, at most 3 hops) and backs
         off on `SERVER_ERROR TRYAGAIN`;
  route  routes by a fixed membership given by the test and declares
         nothing (plain nodes without a membership: the self-test);
  any    a plain memcached client sending every request to a random node
         (the node forwards).
"""
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BUILDDIR = os.environ.get("RC_BUILDDIR", os.getcwd())
RINGCACHED = os.path.join(BUILDDIR, "server", "ringcached")
RINGCTL = os.path.join(BUILDDIR, "client", "ringctl")

MAX_HOPS = 3


# ---------------------------------------------------------------- TAP, watchdog

class Tap:
    """TAP with a trailing plan; skip() prints `ok N # SKIP reason`."""

    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, desc, diag=None):
        self.n += 1
        print("%s %d - %s" % ("ok" if cond else "not ok", self.n, desc), flush=True)
        if not cond:
            self.failed += 1
            if diag is not None:
                self.diag(diag)
        return bool(cond)

    def skip(self, desc, reason):
        self.n += 1
        print("ok %d - %s # SKIP %s" % (self.n, desc, reason), flush=True)

    def diag(self, msg):
        for line in str(msg).splitlines()[:60]:
            print("# " + line, flush=True)

    def done(self):
        print("1..%d" % self.n, flush=True)
        sys.exit(1 if self.failed else 0)


_PROCS = []           # every process started here (Popen), killed by PID on exit
_PROCS_LOCK = threading.Lock()


def track(proc):
    with _PROCS_LOCK:
        _PROCS.append(proc)
    return proc


_KILL_HOOKS = []      # called by kill_all() after the processes (netns.py: namespaces)


def on_kill_all(fn):
    """Run fn() at the end of every kill_all() (also the watchdog's)."""
    _KILL_HOOKS.append(fn)


def kill_all():
    """SIGKILL every still-running process this module started (by PID),
    then run the on_kill_all hooks."""
    with _PROCS_LOCK:
        procs = list(_PROCS)
    for p in procs:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    for fn in list(_KILL_HOOKS):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 (cleanup goes on)
            print("# kill_all hook: %s" % e, file=sys.stderr)


def watchdog(seconds):
    """Bound the whole test: after `seconds`, print a TAP bail-out, kill every
    process started here and exit non-zero."""
    def fire(*_):
        print("Bail out! watchdog: test exceeded %d s" % seconds, flush=True)
        kill_all()
        os._exit(1)
    signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)


def stop_proc(p, timeout=5.0):
    """SIGTERM the process p (a Popen) if it still runs; SIGKILL after
    timeout seconds. It is reaped either way."""
    if p is None or p.poll() is not None:
        return
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def debian_import(name):
    """Import module name from Debian's python3-* packages, also when this
    interpreter is not Debian's (a pyenv python3 first on PATH): retried
    with /usr/lib/python3/dist-packages on the path. None if absent."""
    import importlib
    for attempt in range(2):
        try:
            return importlib.import_module(name)
        except ImportError:
            if attempt == 0 and "/usr/lib/python3/dist-packages" not in sys.path:
                sys.path.append("/usr/lib/python3/dist-packages")
    return None


def wait_for(cond, timeout, step=0.02):
    """Poll cond() until true or the deadline; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)


# ---------------------------------------------------------------- ports

def _bindable(port):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port_pair(offset=10000):
    """A client port p with p + offset (the default cluster port) also free,
    both below the kernel's ephemeral range so outgoing connections of
    parallel tests do not take them first."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            eph = int(f.read().split()[0])
    except (OSError, ValueError):
        eph = 32768
    lo, hi = 20000, min(eph, 65536) - offset - 1
    if hi <= lo:
        lo, hi = 1025, 65535 - offset
    rng = random.Random(os.getpid() ^ int(time.time() * 1e6))
    for _ in range(500):
        p = rng.randrange(lo, hi)
        if _bindable(p) and _bindable(p + offset):
            return p
    raise RuntimeError("no free loopback port pair")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def can_connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.3).close()
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- text protocol

class ProtoError(Exception):
    """The peer sent something that is not a memcached reply."""


_CLIENT_TLS = None  # an ssl.SSLContext every new Conn speaks TLS with (use_client_tls)


def use_client_tls(ctx):
    """From now on every new Conn speaks TLS with the ssl.SSLContext ctx
    (the nodes run with -Z: Cluster(tls=..., data_tls=True)); None:
    plaintext again."""
    global _CLIENT_TLS
    _CLIENT_TLS = ctx


class Conn:
    """One buffered memcached text-protocol connection (TLS after
    use_client_tls)."""

    def __init__(self, addr, timeout=3.0):
        host, port = addr
        self.addr = addr
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if _CLIENT_TLS is not None:
            try:
                sock = _CLIENT_TLS.wrap_socket(sock, server_hostname=host)
            except (OSError, ValueError):
                sock.close()
                raise
        self.sock = sock
        self.buf = bytearray()
        self.declared = None
        self.nread = 0      # bytes received so far (did a request get any answer)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _fill(self):
        d = self.sock.recv(262144)
        if not d:
            raise ConnectionError("connection closed by %s:%d" % self.addr)
        self.nread += len(d)
        self.buf += d

    def readline(self):
        start = 0
        while True:
            i = self.buf.find(b"\r\n", start)
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return line
            start = max(0, len(self.buf) - 1)
            self._fill()

    def readn(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        if self.buf[n:n + 2] != b"\r\n":
            raise ProtoError("data block not terminated by CRLF")
        data = bytes(self.buf[:n])
        del self.buf[:n + 2]
        return data

    def send(self, data):
        self.sock.sendall(data)

    def get_multi(self, keys):
        """Returns (values dict, None) or (None, error line)."""
        self.send(b"get " + b" ".join(k.encode() for k in keys) + b"\r\n")
        vals = {}
        while True:
            line = self.readline()
            if line == b"END":
                return vals, None
            if line.startswith(b"VALUE "):
                p = line.split()
                if len(p) < 4:
                    raise ProtoError("bad VALUE line %r" % line)
                vals[p[1].decode()] = self.readn(int(p[3]))
                continue
            return None, line

    def store(self, cmd, key, value, flags=0, ttl=0):
        self.send(b"%s %s %d %d %d\r\n%s\r\n" % (cmd.encode(), key.encode(), flags, ttl,
                                               len(value), value))
        return self.readline()

    def delete(self, key):
        self.send(b"delete " + key.encode() + b"\r\n")
        return self.readline()

    def simple(self, line):
        self.send(line.encode() + b"\r\n")
        return self.readline()

    def stats(self, arg=""):
        self.send(("stats %s" % arg).strip().encode() + b"\r\n")
        out = {}
        while True:
            line = self.readline()
            if line == b"END":
                return out
            p = line.decode(errors="replace").split(" ", 2)
            if len(p) == 3 and p[0] == "STAT":
                out[p[1]] = p[2]
            else:
                raise ProtoError("stats: %r" % line)

    def config(self):
        """(epoch, membership text) from `config`; ProtoError if unsupported."""
        self.send(b"config\r\n")
        line = self.readline()
        p = line.split()
        if len(p) != 3 or p[0] != b"CONFIG":
            raise ProtoError("config: %r" % line)
        body = self.readn(int(p[2]))
        end = self.readline()
        if end != b"END":
            raise ProtoError("config: no END: %r" % end)
        return int(p[1]), body.decode()

    def epoch(self):
        """(active, pending) from `epoch`."""
        line = self.simple("epoch")
        p = line.split()
        if len(p) != 3 or p[0] != b"EPOCH":
            raise ProtoError("epoch: %r" % line)
        return int(p[1]), int(p[2])

    def declare(self, n):
        r = self.simple("epoch %d" % n)
        if r != b"OK":
            raise ProtoError("epoch %d: %r" % (n, r))
        self.declared = n


def parse_addr(s):
    host, _, port = s.rpartition(":")
    return host.strip("[]"), int(port)


def node_stats(addr, timeout=2.0):
    c = Conn(addr, timeout)
    try:
        return c.stats()
    finally:
        c.close()


def node_epoch(addr, timeout=2.0):
    c = Conn(addr, timeout)
    try:
        return c.epoch()
    finally:
        c.close()


def node_config(addr, timeout=2.0):
    c = Conn(addr, timeout)
    try:
        return c.config()
    finally:
        c.close()


def parse_redirect(line):
    """('moved', epoch, addr) / ('tryagain', epoch, None) / None."""
    p = line.split()
    if len(p) >= 4 and p[0] == b"SERVER_ERROR" and p[1] == b"MOVED":
        return "moved", int(p[2]), p[3].decode()
    if len(p) >= 2 and p[0] == b"SERVER_ERROR" and p[1] == b"TRYAGAIN":
        return "tryagain", int(p[2]) if len(p) > 2 and p[2].isdigit() else 0, None
    return None


# ---------------------------------------------------------------- membership, placement

def parse_members(text):
    """The text form (PLACEMENT.md) -> dict(epoch, vnodes, replicas,
    nodes=[(id, addr)])."""
    m = {"epoch": 0, "vnodes": 160, "replicas": 1, "nodes": []}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        p = line.split()
        if p[0] in ("epoch", "vnodes", "replicas") and len(p) == 2:
            m[p[0]] = int(p[1])
        elif p[0] == "node" and len(p) >= 3:
            m["nodes"].append((p[1], p[2]))
    return m


def members_text(nodes, epoch=1, replicas=1, vnodes=160):
    """nodes: [(id, addr)] -> text form."""
    out = ["epoch %d" % epoch, "vnodes %d" % vnodes, "replicas %d" % replicas]
    out += ["node %s %s" % (i, a) for i, a in nodes]
    return "\n".join(out) + "\n"


def locate(text, keys, replicas=None):
    """Owner lists (primary first) of keys under a membership, computed by
    `ringctl locate` (the one ring implementation). -> {key: (id, ...)}"""
    fd, path = tempfile.mkstemp(suffix=".members")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        cmd = [RINGCTL, "locate", "--members", path]
        if replicas:
            cmd += ["--replicas", str(replicas)]
        r = subprocess.run(cmd, input="\n".join(keys) + "\n", capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("ringctl locate failed (%d): %s" % (r.returncode, r.stderr))
        out = {}
        for line in r.stdout.splitlines():
            k, _, owners = line.partition("\t")
            out[k] = tuple(owners.split(","))
        missing = [k for k in keys if k not in out]
        if missing:
            raise RuntimeError("ringctl locate gave no owner for %d keys" % len(missing))
        return out
    finally:
        os.unlink(path)


def movement(before, after, keys):
    """Movement figures between two membership texts for the key universe:
    primary changes, keys whose primary moved between two nodes present in
    both epochs (must be 0), owner-set changes that are not to a joiner /
    from a leaver, and the set of keys whose owner list is identical
    (the non-moving ranges)."""
    mb, ma = parse_members(before), parse_members(after)
    ob, oa = locate(before, keys), locate(after, keys)
    ids_b = {i for i, _ in mb["nodes"]}
    ids_a = {i for i, _ in ma["nodes"]}
    both = ids_b & ids_a
    joined, left = ids_a - ids_b, ids_b - ids_a
    primary_changed = 0
    survivor_moves = []
    set_changed = 0
    set_violations = []
    nonmoving = set()
    for k in keys:
        pb, pa = ob[k][0], oa[k][0]
        if pb != pa:
            primary_changed += 1
            if pb in both and pa in both:
                survivor_moves.append((k, pb, pa))
        sb, sa = set(ob[k]), set(oa[k])
        if sb != sa:
            set_changed += 1
            # A join only brings owners in; a leave only takes the leaver out.
            gained = sa - sb
            if joined and not gained <= joined:
                set_violations.append((k, ob[k], oa[k]))
            if left and not (sb - sa) <= left:
                set_violations.append((k, ob[k], oa[k]))
        if ob[k] == oa[k]:
            nonmoving.add(k)
    n_big = max(len(ids_b), len(ids_a))
    frac = primary_changed / float(len(keys))
    expected = 1.0 / n_big
    return {
        "before": ob, "after": oa, "nonmoving": nonmoving,
        "primary_changed": primary_changed, "primary_frac": frac, "expected_frac": expected,
        "frac_ok": abs(frac - expected) <= 0.2 * expected,
        "survivor_moves": survivor_moves, "set_changed": set_changed,
        "set_frac": set_changed / float(len(keys)),
        "expected_set_frac": min(1.0, max(mb["replicas"], ma["replicas"]) / float(n_big)),
        "set_violations": set_violations,
    }


# ---------------------------------------------------------------- values

def make_value(key, seq, size):
    head = ("%s:%d:" % (key, seq)).encode()
    return head + b"." * max(0, size - len(head))


def parse_value(key, data):
    """seq of a value written by this harness for key; None if it is not
    one (corrupt, or another key's value)."""
    try:
        k, s, pad = data.split(b":", 2)
        if k.decode() != key or pad.strip(b".") != b"":
            return None
        return int(s)
    except (ValueError, UnicodeDecodeError):
        return None


# ---------------------------------------------------------------- routing view and client

class View:
    """The client's idea of the membership: epoch, owners of every key of
    the universe (from `ringctl locate`), id <-> address. Shared by all
    client threads; refreshed from `config` when a higher epoch shows up."""

    def __init__(self, keys, seeds, members=None, async_refresh=False):
        self.keys = list(keys)
        self.seeds = list(seeds)
        self.lock = threading.Lock()          # guards the fields below
        self.refresh_lock = threading.Lock()  # one refresher at a time
        self.async_refresh = async_refresh
        self.refreshing = False
        self.epoch = 0
        self.text = None
        self.owners = {}
        self.addr_of = {}
        self.id_of = {}
        self.refreshes = 0
        if members is not None:
            self._install(members, locate(members, self.keys))

    def _install(self, text, owners):
        m = parse_members(text)
        addr_of = {i: parse_addr(a) for i, a in m["nodes"]}
        with self.lock:
            if m["epoch"] < self.epoch:
                return
            self.text = text
            self.owners = owners
            self.addr_of = addr_of
            # Never forget an address: a node followed through a MOVED hint
            # before the view learnt its epoch is still named.
            self.id_of.update({v: k for k, v in addr_of.items()})
            self.epoch = m["epoch"]
            self.refreshes += 1

    def refresh(self, min_epoch=0, hint=None):
        """Learn the membership from `config` on hint, then the known nodes
        and the seeds, adopting only a higher epoch (owners are computed
        outside the view's lock, so routing goes on meanwhile). True if the
        view's epoch is now >= min_epoch."""
        with self.refresh_lock:
            if min_epoch and self.epoch >= min_epoch:
                return True
            with self.lock:
                known = list(self.addr_of.values())
            cands = ([hint] if hint else []) + known + self.seeds
            seen = set()
            for a in cands:
                if a in seen:
                    continue
                seen.add(a)
                try:
                    e, text = node_config(a, timeout=1.0)
                except (OSError, ProtoError, ValueError):
                    continue
                if e > self.epoch:
                    self._install(text, locate(text, self.keys))
                if self.epoch >= max(min_epoch, 1):
                    return True
            return self.epoch >= max(min_epoch, 1)

    def refresh_later(self, min_epoch, hint=None):
        """refresh() in a background thread unless one runs already."""
        with self.lock:
            if self.refreshing or self.epoch >= min_epoch:
                return
            self.refreshing = True

        def run():
            try:
                self.refresh(min_epoch, hint)
            finally:
                with self.lock:
                    self.refreshing = False
        threading.Thread(target=run, daemon=True).start()

    def route(self, key):
        with self.lock:
            o = self.owners[key]
            return self.epoch, [self.addr_of[i] for i in o]

    def addrs(self):
        with self.lock:
            return dict(self.addr_of)

    def node_id(self, addr):
        return self.id_of.get(addr, "%s:%d" % addr)


class Result:
    __slots__ = ("status", "value", "node", "moved", "tryagain", "t0", "t1", "why")

    def __init__(self):
        self.status = None   # set/delete: ok failed indet; get: hit miss error
        self.value = None
        self.node = None
        self.moved = 0
        self.tryagain = 0
        self.t0 = self.t1 = 0.0
        self.why = None


class Client:
    """One thread's client: its own connections, the shared View."""

    def __init__(self, view, mode, timeout=2.0, tryagain_budget=1.5, rng=None):
        assert mode in ("epoch", "route", "any")
        self.view = view
        self.mode = mode
        self.timeout = timeout
        self.tryagain_budget = tryagain_budget
        self.conns = {}
        self.rng = rng or random.Random()

    def close(self):
        for c in self.conns.values():
            c.close()
        self.conns.clear()

    def _drop(self, addr):
        c = self.conns.pop(addr, None)
        if c:
            c.close()

    def _conn(self, addr, epoch):
        c = self.conns.get(addr)
        if c is None:
            c = Conn(addr, self.timeout)
            self.conns[addr] = c
        if self.mode == "epoch" and c.declared != epoch:
            c.declare(epoch)
        return c

    def _target(self, key):
        if self.mode == "any":
            return 0, self.rng.choice(self.view.seeds)
        epoch, addrs = self.view.route(key)
        return epoch, addrs[0]

    # Fail-over hooks of op(); this client has none (tests/it/failover_lib.py
    # FailoverClient overrides them the way libringcache behaves).
    def _op_begin(self, key):
        """A new operation on key starts."""

    def _answered(self, addr):
        """addr answered a request (any reply line)."""

    def _failed(self, addr, kind, key, sent, err):
        """The request to addr failed with err (connection or protocol
        error); sent: the request itself may have reached the node. The
        address to try next within the same operation, or None: drop the
        connection and record the failure (below)."""
        return None

    def op(self, kind, key, value=None):
        """kind: set / delete / get. Returns a Result."""
        r = Result()
        r.t0 = time.monotonic()
        self._op_begin(key)
        epoch, addr = self._target(key)
        hops = 0
        backoff = 0.002
        while True:
            sent = False
            try:
                c = self._conn(addr, epoch)
                sent = True
                if kind == "set":
                    line = c.store("set", key, value)
                elif kind == "delete":
                    line = c.delete(key)
                else:
                    vals, line = c.get_multi([key])
                self._answered(addr)
                if kind == "get":
                    if vals is not None:
                        r.node = self.view.node_id(addr)
                        if key in vals:
                            r.status, r.value = "hit", vals[key]
                        else:
                            r.status = "miss"
                        break
            except (OSError, ConnectionError, ProtoError) as e:
                nxt = self._failed(addr, kind, key, sent, e)
                if nxt is not None:
                    addr = nxt
                    continue
                self._drop(addr)
                r.why = "%s:%d: %s" % (addr[0], addr[1], e)
                if kind == "get":
                    r.status = "error"
                else:
                    r.status = "indet" if sent else "failed"
                if not sent and self.mode == "epoch" and hops < MAX_HOPS:
                    # A node that left or is down: learn the current epoch.
                    hops += 1
                    self.view.refresh(self.view.epoch + 1)
                    epoch, addr = self._target(key)
                    continue
                break
            red = parse_redirect(line)
            if red is None:
                r.node = self.view.node_id(addr)
                if kind == "set":
                    r.status = "ok" if line == b"STORED" else "failed"
                elif kind == "delete":
                    r.status = "ok" if line in (b"DELETED", b"NOT_FOUND") else "failed"
                else:
                    r.status = "error"
                if r.status != "ok" and kind != "get":
                    r.why = line.decode(errors="replace")
                elif kind == "get":
                    r.why = line.decode(errors="replace")
                break
            what, e, to = red
            if self.mode == "any":
                # A plain memcached client cannot follow a redirect: the
                # node should have forwarded.
                r.node = self.view.node_id(addr)
                r.status = "error" if kind == "get" else "failed"
                r.why = "plain client got " + line.decode(errors="replace")
                break
            if what == "moved":
                r.moved += 1
                hops += 1
                if hops > MAX_HOPS:
                    r.status = "error" if kind == "get" else "failed"
                    r.why = "MOVED: more than %d hops" % MAX_HOPS
                    break
                if e > self.view.epoch and self.view.async_refresh:
                    # Follow the hint now, learn the epoch in the background.
                    self.view.refresh_later(e, hint=parse_addr(to))
                    addr = parse_addr(to)
                    continue
                if e > self.view.epoch:
                    self.view.refresh(e, hint=parse_addr(to))
                if self.view.epoch >= e:
                    epoch, naddr = self._target(key)
                    # The node is behind our view: follow its hint.
                    addr = naddr if naddr != addr else parse_addr(to)
                else:
                    addr = parse_addr(to)
                continue
            r.tryagain += 1
            if time.monotonic() - r.t0 + backoff > self.tryagain_budget:
                r.status = "error" if kind == "get" else "failed"
                r.why = "TRYAGAIN for longer than %.1f s" % self.tryagain_budget
                break
            time.sleep(backoff)
            backoff = min(backoff * 2, 0.05)
            if e > self.view.epoch:
                self.view.refresh(e)
            epoch, addr = self._target(key)
        r.t1 = time.monotonic()
        return r


# ---------------------------------------------------------------- history and checks

class History:
    """Every write (set/delete) per key, in the order the owning writer
    issued them (writers own disjoint keys, one op at a time), and every
    read. Records are (seq, kind, t0, t1, status, node, moved, tryagain)."""

    def __init__(self, keys, size=100):
        self.keys = list(keys)
        self.size = size
        self.ops = {k: [] for k in self.keys}
        self.seq = {k: 0 for k in self.keys}
        self.reads = []
        self.lock = threading.Lock()

    def next_seq(self, key):
        self.seq[key] += 1
        return self.seq[key]

    def add_write(self, key, seq, kind, r, phase):
        self.ops[key].append((seq, kind, r.t0, r.t1, r.status, r.node, r.moved, r.tryagain, phase))

    def add_read(self, key, r, phase, mode=None):
        seq = None
        if r.status == "hit":
            seq = parse_value(key, r.value)
            if seq is None:
                seq = -1    # corrupt
        with self.lock:
            self.reads.append((key, r.t0, r.t1, r.status, seq, r.node, r.moved, r.tryagain, phase,
                               mode or "epoch", r.why))

    def acked_keys(self):
        return [k for k in self.keys if any(o[4] == "ok" for o in self.ops[k])]


def judge(ops, t_start, t_end, status, seq):
    """Classify one observation of a key (a read that ran from t_start to
    t_end and saw status/seq) against the key's write history.
    Returns None (consistent) or one of: stale, resurrected, lost (a miss of
    an acknowledged value), phantom (a value never written), corrupt."""
    last = None
    for o in ops:
        if o[4] == "ok" and o[3] < t_start:
            last = o
    if status == "hit":
        if seq == -1:
            return "corrupt"
        started = [o for o in ops if o[1] == "s" and o[0] == seq and o[2] < t_end]
        if not started:
            return "phantom"
        if last is None:
            return None
        if seq < last[0]:
            # An older value than the last acknowledged write. If an
            # acknowledged delete came after that value, the delete was
            # undone: a resurrection; else a stale (or lost) value.
            dels = [o for o in ops if o[1] == "d" and o[4] == "ok" and seq < o[0] <= last[0]
                    and o[3] < t_start]
            return "resurrected" if dels else "stale"
        return None
    if status == "miss":
        if last is None or last[1] == "d":
            return None
        later_del = [o for o in ops if o[1] == "d" and o[0] > last[0] and o[2] < t_end]
        return None if later_del else "lost"
    return None


def unacked_applied(ops, seq):
    for o in ops:
        if o[1] == "s" and o[0] == seq:
            return o[4] != "ok"
    return False


def check_reads(hist, reads=None):
    """Judge every recorded read; returns {class: [examples]} and counts."""
    out = {"stale": [], "resurrected": [], "lost": [], "phantom": [], "corrupt": []}
    unacked = 0
    for rd in (hist.reads if reads is None else reads):
        key, t0, t1, status, seq = rd[:5]
        v = judge(hist.ops[key], t0, t1, status, seq)
        if v:
            out[v].append(rd)
        elif status == "hit" and unacked_applied(hist.ops[key], seq):
            unacked += 1
    return out, unacked


# ---------------------------------------------------------------- the load

class Load:
    """Writer and reader threads over a History. run in the background
    between start() and stop(); phase tags the records."""

    def __init__(self, hist, view, mode, writers=3, readers=2, delete_frac=0.05,
                 rate=None, seed=None, progress=None, plain_readers=0):
        self.hist = hist
        self.view = view
        self.mode = mode
        self.writers = writers
        self.readers = readers
        self.plain_readers = plain_readers   # extra readers in "any" mode
        self.delete_frac = delete_frac
        self.rate = rate          # ops/s per thread cap, None = as fast as possible
        self.rng = random.Random(seed)
        self.stop_ev = threading.Event()
        self.threads = []
        self.phase = 0
        self.progress = progress  # callable(line) for the per-second line
        self.counts = {"W": 0, "Werr": 0, "R": 0, "Rerr": 0}
        self.max_lat = 0.0
        self.errors = []

    def fill(self, clients=4):
        """Write every key once (acknowledged or recorded as not), in
        parallel; returns how many were acknowledged."""
        keys = self.hist.keys
        parts = [keys[i::clients] for i in range(clients)]
        oks = [0] * clients

        def run(i):
            c = Client(self.view, self.mode)
            try:
                for k in parts[i]:
                    s = self.hist.next_seq(k)
                    r = c.op("set", k, make_value(k, s, self.hist.size))
                    self.hist.add_write(k, s, "s", r, self.phase)
                    oks[i] += r.status == "ok"
            finally:
                c.close()
        ts = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return sum(oks)

    def _writer(self, idx):
        keys = self.hist.keys[idx::self.writers]
        rng = random.Random(self.rng.random())
        c = Client(self.view, self.mode, rng=rng)
        try:
            while not self.stop_ev.is_set():
                k = rng.choice(keys)
                s = self.hist.next_seq(k)
                if rng.random() < self.delete_frac:
                    r = c.op("delete", k)
                    self.hist.add_write(k, s, "d", r, self.phase)
                else:
                    r = c.op("set", k, make_value(k, s, self.hist.size))
                    self.hist.add_write(k, s, "s", r, self.phase)
                self.counts["W"] += 1
                if r.status != "ok":
                    self.counts["Werr"] += 1
                    if len(self.errors) < 50:
                        self.errors.append(("write", k, r.status, r.why))
                self.max_lat = max(self.max_lat, r.t1 - r.t0)
                self._pace()
        finally:
            c.close()

    def _reader(self, idx, mode=None):
        keys = self.hist.keys
        rng = random.Random(self.rng.random())
        mode = mode or self.mode
        c = Client(self.view, mode, rng=rng)
        try:
            while not self.stop_ev.is_set():
                k = rng.choice(keys)
                r = c.op("get", k)
                self.hist.add_read(k, r, self.phase, mode)
                self.counts["R"] += 1
                if r.status == "error":
                    self.counts["Rerr"] += 1
                    if len(self.errors) < 50:
                        self.errors.append(("read", k, r.status, r.why))
                self.max_lat = max(self.max_lat, r.t1 - r.t0)
                self._pace()
        finally:
            c.close()

    def _pace(self):
        if self.rate:
            time.sleep(1.0 / self.rate)

    def _ticker(self):
        checked = 0
        totals = {"stale": 0, "resurrected": 0, "lost": 0, "phantom": 0, "corrupt": 0}
        while not self.stop_ev.wait(1.0):
            # Judge reads that finished more than a second ago (their
            # writers have long recorded what they did); the final check
            # re-judges everything.
            limit = time.monotonic() - 1.0
            with self.hist.lock:
                n = len(self.hist.reads)
                batch = [rd for rd in self.hist.reads[checked:n] if rd[2] < limit]
            checked += len(batch)
            v, un = check_reads(self.hist, batch)
            for k in totals:
                totals[k] += len(v[k])
            if self.progress:
                c = self.counts
                self.progress("R %d (err %d) | W %d (err %d) | lost %d | stale %d | "
                              "resurrected %d | unacked-applied %d | max-latency %.0f ms"
                              % (c["R"], c["Rerr"], c["W"], c["Werr"], totals["lost"],
                                 totals["stale"], totals["resurrected"], un,
                                 self.max_lat * 1000))

    def start(self, phase):
        self.phase = phase
        self.stop_ev.clear()
        self.threads = ([threading.Thread(target=self._writer, args=(i,), daemon=True)
                         for i in range(self.writers)]
                        + [threading.Thread(target=self._reader, args=(i,), daemon=True)
                           for i in range(self.readers)]
                        + [threading.Thread(target=self._reader, args=(i, "any"), daemon=True)
                           for i in range(self.plain_readers)]
                        + [threading.Thread(target=self._ticker, daemon=True)])
        for t in self.threads:
            t.start()

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout=30)
        self.threads = []


def phase_errors(hist, phase, keys):
    """Errors seen in `phase` on the given keys (the non-moving ranges):
    failed or indeterminate writes, read errors, TRYAGAIN or MOVED replies
    (of the epoch-declaring clients; plain_read_errors() covers the plain
    ones). -> dict of lists."""
    out = {"write_errors": [], "read_errors": [], "tryagain": [], "moved": []}
    for k in keys:
        for o in hist.ops[k]:
            if o[8] != phase:
                continue
            if o[4] != "ok":
                out["write_errors"].append((k,) + o)
            if o[7]:
                out["tryagain"].append((k,) + o)
            if o[6]:
                out["moved"].append((k,) + o)
    for rd in hist.reads:
        if rd[8] != phase or rd[0] not in keys or rd[9] == "any":
            continue
        if rd[3] == "error":
            out["read_errors"].append(rd)
        if rd[7]:
            out["tryagain"].append(rd)
        if rd[6]:
            out["moved"].append(rd)
    return out


def plain_read_errors(hist, phase):
    """(reads, errors) of the plain ("any" mode) readers in phase."""
    rs = [rd for rd in hist.reads if rd[8] == phase and rd[9] == "any"]
    return rs, [rd for rd in rs if rd[3] == "error"]


def misrouted_acks(hist, phase, owners_sets):
    """Writes acknowledged (in epoch mode) by a node that is the primary of
    the key in none of the given epochs' owner maps."""
    bad = []
    for k in hist.keys:
        prim = {o[k][0] for o in owners_sets}
        for o in hist.ops[k]:
            if o[8] == phase and o[4] == "ok" and o[5] is not None and o[5] not in prim:
                bad.append((k,) + o)
    return bad


# ---------------------------------------------------------------- the sweep

def sweep(hist, members, extra=(), declare=True, orphan_wait=10.0, batch=100,
          secondaries=True):
    """Read every key of the universe on each of its owners per `members`
    (text form) and judge it against the full history; count items held
    outside what each node owns from `stats curr_items` (a node holds only
    harness keys, so curr_items - owned keys found = orphans), polling for
    background cleanup up to orphan_wait seconds. extra = [(id, addr)] of
    running nodes not in the membership (a leaver, an aborted joiner): they
    must hold nothing. secondaries=False (nodes that serve reads at the
    primary only, see probe_routing): only primaries are read, and a node
    may also hold up to one item per key it is a secondary owner of (an
    upper bound: the orphan count is then a lower bound). Returns a dict of
    findings."""
    m = parse_members(members)
    owners = locate(members, hist.keys)
    addr_of = {i: parse_addr(a) for i, a in m["nodes"]}
    res = {"lost": [], "resurrected": [], "phantom": [], "corrupt": [],
           "unacked_applied": 0, "moved": [], "errors": [], "found": {}, "items": {},
           "orphans": {}, "evictions": {}, "misrouted": {}, "checked_keys": 0, "acked_keys": 0,
           "secondary_slack": {}}
    t_now = time.monotonic()
    per_node = {i: [k for k in hist.keys if (i in owners[k] if secondaries
                                              else i == owners[k][0])] for i in addr_of}
    for i in addr_of:
        res["secondary_slack"][i] = 0 if secondaries else sum(
            1 for k in hist.keys if i in owners[k][1:])

    def judge_one(nid, k, vals):
        ops = hist.ops[k]
        if k in vals:
            seq = parse_value(k, vals[k])
            st = "hit"
            if seq is None:
                seq = -1
        else:
            st, seq = "miss", None
        v = judge(ops, t_now, t_now, st, seq)
        if v == "stale":
            v = "lost"     # older than the last acknowledged write
        if v:
            res[v].append((k, nid, seq, ops[-3:]))
        elif st == "hit" and unacked_applied(ops, seq):
            res["unacked_applied"] += 1
        return st == "hit"

    for nid, keys in per_node.items():
        found = 0
        try:
            c = Conn(addr_of[nid], 5.0)
            if declare:
                c.declare(m["epoch"])
        except (OSError, ProtoError) as e:
            res["errors"].append("%s: %s" % (nid, e))
            continue
        try:
            for i in range(0, len(keys), batch):
                chunk = keys[i:i + batch]
                vals, err = c.get_multi(chunk)
                if vals is None and parse_redirect(err):
                    # Which keys? One by one.
                    vals = {}
                    for k in chunk:
                        v1, e1 = c.get_multi([k])
                        if v1 is None:
                            res["moved" if parse_redirect(e1) else "errors"].append(
                                "%s: get %s: %r" % (nid, k, e1))
                            chunk = [x for x in chunk if x != k]
                        else:
                            vals.update(v1)
                elif vals is None:
                    res["errors"].append("%s: get of %d keys: %r" % (nid, len(chunk), err))
                    continue
                for k in chunk:
                    found += judge_one(nid, k, vals)
        except (OSError, ConnectionError, ProtoError) as e:
            res["errors"].append("%s: %s" % (nid, e))
        finally:
            c.close()
        res["found"][nid] = found
    res["acked_keys"] = len(hist.acked_keys())
    res["checked_keys"] = len(hist.keys)
    everyone = [(i, addr_of[i]) for i in addr_of] + list(extra)

    def orphan_counts():
        out = {}
        for nid, addr in everyone:
            try:
                st = node_stats(addr)
            except (OSError, ProtoError):
                out[nid] = None
                continue
            items = int(st.get("curr_items", 0))
            res["items"][nid] = items
            res["evictions"][nid] = int(st.get("evictions", 0))
            if "misrouted" in st:
                res["misrouted"][nid] = int(st["misrouted"])
            out[nid] = max(0, items - res["found"].get(nid, 0)
                           - res["secondary_slack"].get(nid, 0))
        return out
    res["orphans"] = wait_for(lambda: (lambda o: o if all(v == 0 for v in o.values()) else None)(
        orphan_counts()), orphan_wait, 0.1) or orphan_counts()
    return res


def probe_routing(cl, text):
    """What the nodes of a membership do with reads they do not own as
    primary: {'forwards': a plain client's get at a non-owner is answered
    (forwarded), 'secondary_reads': a declared get at a secondary owner is
    served (None when R = 1)}."""
    m = parse_members(text)
    addr_of = {i: parse_addr(a) for i, a in m["nodes"]}
    keys = ["probe-%d" % i for i in range(64)]
    owners = locate(text, keys)
    out = {"forwards": None, "secondary_reads": None}
    for k in keys:
        non = [i for i in addr_of if i not in owners[k]]
        if non and out["forwards"] is None:
            c = Conn(addr_of[non[0]])
            try:
                vals, err = c.get_multi([k])
            finally:
                c.close()
            out["forwards"] = vals is not None
        if len(owners[k]) > 1 and out["secondary_reads"] is None:
            c = Conn(addr_of[owners[k][1]])
            try:
                c.declare(m["epoch"])
                vals, err = c.get_multi([k])
            finally:
                c.close()
            out["secondary_reads"] = vals is not None
    return out


def sweep_summary(res):
    return ("acked keys %d; on owners: lost %d, resurrected %d, phantom %d, corrupt %d, "
            "unacked-applied %d, MOVED %d, errors %d; items %s; found %s; orphans %s; evictions %s"
            % (res["acked_keys"], len(res["lost"]), len(res["resurrected"]),
               len(res["phantom"]), len(res["corrupt"]), res["unacked_applied"],
               len(res["moved"]), len(res["errors"]), res["items"], res["found"],
               res["orphans"], res["evictions"]))


def sweep_clean(res):
    """True if the sweep found no violation (evictions are judged apart)."""
    return (not res["lost"] and not res["resurrected"]
            and not res["phantom"] and not res["corrupt"] and not res["moved"]
            and not res["errors"] and all(v == 0 for v in res["orphans"].values()))


def evicted(res):
    """The reason a run is invalid (evictions), or None."""
    ev = {k: v for k, v in res["evictions"].items() if v}
    return ("evictions on %s: the run is invalid" % ev) if ev else None


# ---------------------------------------------------------------- cluster of real processes

class NodeProc:
    """One ringcached with a cluster identity."""

    def __init__(self, cluster, nid):
        self.cluster = cluster
        self.id = nid
        self.port = None
        self.proc = None
        self.state_dir = os.path.join(cluster.dir, "state-" + nid)
        self.log = os.path.join(cluster.dir, "node-%s.log" % nid)
        os.makedirs(self.state_dir, exist_ok=True)

    @property
    def addr(self):
        return ("127.0.0.1", self.port)

    @property
    def addr_s(self):
        return "127.0.0.1:%d" % self.port

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def start(self, timeout=10.0):
        for _ in range(5):
            port = self.port or free_port_pair()
            cmd = [RINGCACHED, "-l", "127.0.0.1", "-p", str(port), "-t", "2",
                   "-m", str(self.cluster.mem)]
            if not self.cluster.plain:
                cmd += ["--id", self.id, "--state-dir", self.state_dir,
                        "--token-file", self.cluster.token_file]
            cmd += self.cluster.node_args
            # RC_NODE_ARGS="-v": more for every node (a failed run's logs).
            cmd += os.environ.get("RC_NODE_ARGS", "").split()
            with open(self.log, "ab") as err:
                self.proc = track(subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                                   stdout=err, stderr=err))
            ok = wait_for(lambda: self.proc.poll() is not None or can_connect(port), timeout)
            if ok and self.proc.poll() is None:
                self.port = port
                return self
            self.proc.wait()
            if self.port:
                break
        raise RuntimeError("ringcached %s did not start: %s\n%s"
                           % (self.id, " ".join(cmd), self.tail()))

    def tail(self, n=20):
        try:
            with open(self.log, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        rc = self.proc.returncode
        self.proc = None
        return rc

    def restart(self, wipe_state=False):
        self.stop(signal.SIGKILL)
        if wipe_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            os.makedirs(self.state_dir, exist_ok=True)
        return self.start()


class Cluster:
    """Nodes, a token, a membership store directory and ringctl. plain:
    nodes without a cluster identity (plain caches; the self-test)."""

    def __init__(self, replicas=1, mem=256, vnodes=160, node_args=(), plain=False, etcd=None,
                 tls=None, data_tls=False):
        """etcd: an etcdlab.Etcd to keep the membership in (under a
        prefix of this cluster's own) instead of a store directory.
        tls: certificates (cluster_certs): the cluster port speaks mutual
        TLS (--cluster-tls) and ringctl shows the admin certificate;
        data_tls: the client ports too (-Z; see use_client_tls)."""
        self.plain = plain
        self.dir = tempfile.mkdtemp(prefix="rc-cluster-")
        self.replicas = replicas
        self.vnodes = vnodes
        self.mem = mem
        self.node_args = list(node_args)
        self.ctl_tls = []
        if tls is not None:
            self.node_args = ["--cluster-tls", "-o", "ssl_chain_cert=%s,ssl_key=%s,ssl_ca_cert=%s"
                              % (tls["node"][1], tls["node"][0], tls["ca"][1])] + \
                (["-Z"] if data_tls else []) + self.node_args
            self.ctl_tls = ["--cluster-tls", "--tls-ca", tls["ca"][1], "--tls-cert",
                            tls["admin"][1], "--tls-key", tls["admin"][0]] + \
                (["--tls"] if data_tls else [])
        self.token_file = os.path.join(self.dir, "token")
        with open(self.token_file, "w") as f:
            f.write("%032x\n" % random.getrandbits(128))
        os.chmod(self.token_file, 0o600)
        self.etcd = etcd
        if etcd is not None:
            self.etcd_prefix = "rc-" + os.path.basename(self.dir)
            self.store = etcd.spec(self.etcd_prefix)
        else:
            self.store = os.path.join(self.dir, "store")
            os.makedirs(self.store)
        self.nodes = {}
        self.ctl_procs = []

    def add(self, nid):
        n = NodeProc(self, nid).start()
        self.nodes[nid] = n
        return n

    def members(self, ids, epoch=1):
        return members_text([(i, self.nodes[i].addr_s) for i in ids], epoch,
                            self.replicas, self.vnodes)

    def write_members(self, ids, name="init.members"):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(self.members(ids))
        return path

    def ctl_cmd(self, *args):
        return [RINGCTL, "--store", self.store, "--token-file", self.token_file] + \
            self.ctl_tls + list(args)

    def ctl(self, *args, env=None, timeout=90):
        """Run ringctl to completion: (rc, stdout, stderr)."""
        e = dict(os.environ)
        e.update(env or {})
        p = track(subprocess.Popen(self.ctl_cmd(*args), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=e))
        self.ctl_procs.append(p)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            return -9, out, err + "\n(killed: ringctl ran longer than %d s)" % timeout
        return p.returncode, out, err

    def ctl_bg(self, *args, env=None):
        e = dict(os.environ)
        e.update(env or {})
        p = track(subprocess.Popen(self.ctl_cmd(*args), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=e))
        self.ctl_procs.append(p)
        return p

    def store_record(self, name):
        """A record's text in the store ('' if none or unreadable)."""
        if self.etcd is not None:
            return self.etcd.get(self.etcd_prefix + "/" + name)
        try:
            with open(os.path.join(self.store, name)) as f:
                return f.read()
        except OSError:
            return ""

    def store_active(self):
        """The store's active membership text ('' if none)."""
        if self.etcd is not None:
            return self.store_record("active.members")
        try:
            with open(os.path.join(self.store, "active.members")) as f:
                return f.read()
        except OSError:
            return ""

    def store_epoch(self):
        return parse_members(self.store_active())["epoch"] if self.store_active() else 0

    def store_pending(self):
        if self.etcd is not None:
            return self.store_record("pending.members") != ""
        return os.path.exists(os.path.join(self.store, "pending.members"))

    def status(self):
        """`ringctl status` parsed (parse_status), with rc and raw text."""
        rc, out, err = self.ctl("status", timeout=30)
        st = parse_status(out)
        st["rc"], st["raw"], st["err"] = rc, out, err
        return st

    def converged(self, epoch, ids, timeout=10.0):
        """Poll until every node in ids reports active epoch `epoch` and no
        pending; returns {id: (active, pending)} of the last poll."""
        last = {}

        def poll():
            for i in ids:
                try:
                    last[i] = node_epoch(self.nodes[i].addr)
                except (OSError, ProtoError) as e:
                    last[i] = str(e)
            return all(last[i] == (epoch, 0) for i in ids)
        wait_for(poll, timeout, 0.05)
        return last

    def close(self):
        """SIGKILL this cluster's nodes and any ringctl it started."""
        for n in self.nodes.values():
            n.stop(signal.SIGKILL)
        for p in self.ctl_procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()

    def cleanup_dir(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def parse_status(text):
    """`ringctl status` output -> {'epoch': int|None, 'phase': str|None,
    'nodes': {id: {column: value}}}. Accepts `key<TAB>value` / `key: value`
    header lines and one TSV table whose header row names a node-id column
    (id / node / node_id) and the NodeStatus fields."""
    st = {"epoch": None, "phase": None, "nodes": {}}
    header = None
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("\t") if "\t" in line else line.split()
        low = [c.strip().lower().rstrip(":") for c in cells]
        if header is None and low and low[0] in ("id", "node", "node_id", "nodeid"):
            header = low
            continue
        if header is not None and len(cells) >= 2:
            row = dict(zip(header, [c.strip() for c in cells]))
            st["nodes"][cells[0].strip()] = row
            continue
        if len(low) >= 2 and low[0] in ("epoch", "active", "active_epoch"):
            try:
                st["epoch"] = int(cells[1])
            except ValueError:
                pass
        elif len(low) >= 2 and low[0] == "phase":
            st["phase"] = cells[1].strip()
    return st


def status_counter(st, name):
    """{node: int} for a NodeStatus column (None values are skipped)."""
    out = {}
    for nid, row in st["nodes"].items():
        for k, v in row.items():
            if k.replace("-", "_") == name:
                try:
                    out[nid] = int(v)
                except ValueError:
                    pass
    return out


def supports_cluster():
    """None if this build has the cluster features the tests need, else
    the reason why not (which flag/command is missing)."""
    r = subprocess.run([RINGCACHED, "--help"], capture_output=True, text=True, timeout=10)
    for flag in ("--id", "--state-dir", "--token-file"):
        if flag not in r.stdout + r.stderr:
            return "ringcached has no %s option yet" % flag
    r = subprocess.run([RINGCTL, "--help"], capture_output=True, text=True, timeout=10)
    for cmd in ("init", "join", "leave", "abort", "resume", "status"):
        if not any(l.strip().startswith(cmd + " ") or l.strip() == cmd
                   for l in (r.stdout + r.stderr).splitlines()):
            return "ringctl has no `%s` command yet" % cmd
    # A node with a state directory and a token listens on its cluster port.
    cl = Cluster(mem=16)
    try:
        n = cl.add("probe")
        if not wait_for(lambda: can_connect(n.port + 10000), 5.0):
            return "ringcached does not listen on its cluster port yet"
    finally:
        cl.close()
        cl.cleanup_dir()
    return None


# ---------------------------------------------------------------- bulk fill

def fill_fast(hist, view, declare=True, batch=200, phase=0, keys=None):
    """Write keys (default: every key of hist) once, pipelined in batches
    to each key's primary per view; records every op (a batch's replies
    share its timestamps). Returns how many were acknowledged."""
    keys = hist.keys if keys is None else keys
    by_node = {}
    for k in keys:
        ep, addrs = view.route(k)
        by_node.setdefault(addrs[0], []).append(k)
    acked = [0]
    lock = threading.Lock()

    def run(addr, ks):
        c = Conn(addr, 10.0)
        try:
            if declare:
                c.declare(view.epoch)
            for i in range(0, len(ks), batch):
                chunk = ks[i:i + batch]
                seqs = [hist.next_seq(k) for k in chunk]
                t0 = time.monotonic()
                c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (
                    k.encode(), hist.size, make_value(k, s, hist.size))
                    for k, s in zip(chunk, seqs)))
                lines = [c.readline() for _ in chunk]
                t1 = time.monotonic()
                for k, s, line in zip(chunk, seqs, lines):
                    r = Result()
                    r.t0, r.t1, r.node = t0, t1, view.node_id(addr)
                    r.status = "ok" if line == b"STORED" else "failed"
                    hist.add_write(k, s, "s", r, phase)
                    if r.status == "ok":
                        with lock:
                            acked[0] += 1
        finally:
            c.close()
    ts = [threading.Thread(target=run, args=(a, ks)) for a, ks in by_node.items()]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    return acked[0]


# ---------------------------------------------------------------- scenarios

def cluster_certs(d, ips=()):
    """Throwaway certificates in directory d for Cluster(tls=...): a CA,
    one certificate every node shows on both ports (for 127.0.0.1 and
    every address in ips: a netns lab's, netns.lab_certs) and one for
    ringctl: {"ca", "node", "admin"}, each (key, crt)."""
    import tlscerts
    os.makedirs(d, exist_ok=True)
    ca = tlscerts.make_ca(d, "ca")
    san = ",".join("IP:" + a for a in ["127.0.0.1"] + [a for a in ips if a != "127.0.0.1"])
    return {"ca": ca, "node": tlscerts.make_cert(d, "node", ca, san),
            "admin": tlscerts.make_cert(d, "admin", ca, "DNS:admin")}


def bench_cluster(ids=("a", "b", "c"), replicas=2):
    """A benchmark's cluster (no TAP): nodes ids at epoch 1, R=replicas;
    (cluster, nodes). Exits with ringctl's error if init fails; the
    caller closes the cluster."""
    cl = Cluster(replicas=replicas)
    nodes = [cl.add(i) for i in ids]
    rc, out, err = cl.ctl("init", "--members", cl.write_members(list(ids)))
    if rc != 0:
        cl.close()
        cl.cleanup_dir()
        sys.exit("ringctl init failed: %s" % err)
    cl.converged(1, list(ids))
    return cl, nodes


def start_cluster(t, ids, replicas=1, mem=256, node_args=(), etcd=None, tls=None,
                  data_tls=False):
    """Nodes ids started with cluster identities (and node_args, after
    the defaults) and `ringctl init` of them: returns (Cluster, ok) (the
    caller closes the cluster). TAP: init ok and every node at epoch 1.
    etcd: keep the membership there; tls, data_tls: see Cluster."""
    cl = Cluster(replicas=replicas, mem=mem, node_args=node_args, etcd=etcd, tls=tls,
                 data_tls=data_tls)
    for i in ids:
        cl.add(i)
    rc, out, err = cl.ctl("init", "--members", cl.write_members(ids))
    ok = t.ok(rc == 0 and cl.store_epoch() == 1, "ringctl init: exit 0, epoch 1 in the store",
              (rc, out[-500:], err[-500:]))
    conv = cl.converged(1, ids)
    ok = t.ok(all(v == (1, 0) for v in conv.values()), "every node reports EPOCH 1 0",
              conv) and ok
    return cl, ok


def filled_cluster(t, ids, prefix, nkeys, replicas=1):
    """start_cluster, then nkeys keys prefix-<i> written once through the
    first node by a client that learnt epoch 1: (cl, ok, hist, view). TAP
    lines for each step; ok is False (nothing filled) if one failed."""
    cl, ok = start_cluster(t, ids, replicas=replicas)
    keys = ["%s-%d" % (prefix, i) for i in range(nkeys)]
    view = View(keys, [cl.nodes[ids[0]].addr])
    hist = History(keys, size=50)
    ok = ok and t.ok(view.refresh(1), "the client learns epoch 1 from `config`")
    ok = ok and t.ok(fill_fast(hist, view) == nkeys, "fill: every key acknowledged")
    return cl, ok, hist, view


def run_tap(t, fn, *args):
    """Run a scenario; an exception is a failed TAP line with its traceback
    (never a silent pass)."""
    try:
        fn(t, *args)
    except Exception:
        import traceback
        t.ok(False, "the scenario ran to its end", traceback.format_exc())
    finally:
        kill_all()


def close_cluster(t, cl):
    """End of a scenario: stop cl's processes; keep its directory (logs,
    state) when a check failed, and say where."""
    cl.close()
    if t.failed == 0:
        cl.cleanup_dir()
    else:
        t.diag("logs kept in %s" % cl.dir)


def read_keys(addr, keys, epoch=1, batch=100):
    """{key: value} of keys at addr as a declared client (so an owner serves
    its own copy), in batches of gets; ProtoError on an error reply."""
    c = Conn(addr, 10.0)
    got = {}
    try:
        c.declare(epoch)
        for j in range(0, len(keys), batch):
            vals, err = c.get_multi(keys[j:j + batch])
            if vals is None:
                raise ProtoError("get at %s:%d: %r" % (addr[0], addr[1], err))
            got.update(vals)
    finally:
        c.close()
    return got


def tap_main(fn, seconds=170, skip_why=None):
    """A test file's main: TAP, a watchdog, and the scenario fn run by
    run_tap, or each of a list of them in turn (an item may be a tuple
    (fn, *args))."""
    t = Tap()
    watchdog(seconds)
    runs = fn if isinstance(fn, (list, tuple)) else [fn]
    why = supports_cluster()
    if why:
        t.skip(skip_why or getattr(runs[0], "__name__", "scenario"), why)
    else:
        for r in runs:
            f, args = (r[0], r[1:]) if isinstance(r, tuple) else (r, ())
            run_tap(t, f, *args)
    t.done()


def run_load_around(load, phase, fn, before_ops=400, after_ops=400, timeout=30.0):
    """Start the load, let it do before_ops operations, call fn(), let it
    do after_ops more, stop it. Returns fn's result."""
    def done(n):
        return load.counts["W"] + load.counts["R"] >= n
    load.start(phase)
    try:
        n0 = load.counts["W"] + load.counts["R"]
        wait_for(lambda: done(n0 + before_ops), timeout, 0.02)
        out = fn()
        n1 = load.counts["W"] + load.counts["R"]
        wait_for(lambda: done(n1 + after_ops), timeout, 0.02)
    finally:
        load.stop()
    return out


def check_transition(t, cl, hist, phase, before, after, label, extra=(), attempted=None,
                     secondaries=True, reshape=False):
    """After a transition (or an abort: after == before, attempted = the
    membership that was tried): the reads of the phase, the owner sweep at
    `after`, movement and the non-moving ranges (of the attempted change),
    misrouted acks and the nodes' own counters. TAP lines, prefixed with
    label. reshape: a change that keeps the node set (reweight, R,
    vnodes), where keys move between nodes of both epochs by design: the
    join/leave movement bounds are not checked. Returns the sweep result."""
    viol, unacked = check_reads(hist, [r for r in hist.reads if r[8] == phase])
    nreads = sum(1 for r in hist.reads if r[8] == phase)
    t.ok(not viol["stale"] and not viol["lost"],
         "%s: 0 stale reads (of %d; stale values %d, misses of acked values %d)"
         % (label, nreads, len(viol["stale"]), len(viol["lost"])),
         [r[:6] for r in (viol["stale"] + viol["lost"])[:10]])
    t.ok(not viol["resurrected"], "%s: 0 resurrected deletes seen by readers" % label,
         viol["resurrected"][:10])
    t.ok(not viol["phantom"] and not viol["corrupt"], "%s: 0 phantom or corrupt values" % label,
         (viol["phantom"] + viol["corrupt"])[:10])
    res = sweep(hist, after, extra=extra, secondaries=secondaries)
    t.diag("%s: %s" % (label, sweep_summary(res)))
    if not secondaries:
        t.diag("%s: the nodes serve reads at the primary only: secondaries not read, "
               "orphan counts allow one item per secondary key %s"
               % (label, res["secondary_slack"]))
    t.diag("%s: unacked writes seen applied by readers: %d" % (label, unacked))
    inval = evicted(res)
    if inval:
        for what in ("0 lost acked writes", "0 resurrected deletes", "no orphans"):
            t.skip("%s: %s" % (label, what), inval)
    else:
        t.ok(not res["lost"], "%s: 0 lost acked writes on the owners (%d acked keys)"
             % (label, res["acked_keys"]), [r[:3] for r in res["lost"][:10]])
        t.ok(not res["resurrected"], "%s: 0 resurrected deletes on the owners" % label,
             [r[:3] for r in res["resurrected"][:10]])
        t.ok(all(v == 0 for v in res["orphans"].values()),
             "%s: no orphans on any node (curr_items minus owned keys found)" % label,
             res["orphans"])
    t.ok(not res["moved"] and not res["errors"] and not res["phantom"] and not res["corrupt"],
         "%s: every owner serves its keys at the final epoch" % label,
         (res["moved"] + res["errors"])[:5])
    target = attempted or after
    mv = movement(before, target, hist.keys) if before != target else None
    if mv is not None and before != after and reshape:
        t.ok(mv["set_frac"] > 0 or mv["primary_frac"] > 0,
             "%s: owners changed for some keys (owner set %.3f, primary %.3f)"
             % (label, mv["set_frac"], mv["primary_frac"]))
    elif mv is not None and before != after:
        t.ok(not mv["survivor_moves"], "%s: 0 keys moved between nodes present in both epochs"
             % label, mv["survivor_moves"][:5])
        t.ok(mv["frac_ok"] and not mv["set_violations"],
             "%s: primary changed for %.3f of keys (1/(N+1) = %.3f +-20%%), owner sets %.3f"
             % (label, mv["primary_frac"], mv["expected_frac"], mv["set_frac"]),
             mv["set_violations"][:5])
    nonmoving = mv["nonmoving"] if mv is not None else set(hist.keys)
    ne = phase_errors(hist, phase, nonmoving)
    t.ok(not any(ne.values()),
         "%s: no errors on ranges that did not move (%d keys): write %d, read %d, "
         "TRYAGAIN %d, MOVED %d" % (label, len(nonmoving), len(ne["write_errors"]),
                                     len(ne["read_errors"]), len(ne["tryagain"]),
                                     len(ne["moved"])),
         [x[:8] for v in ne.values() for x in v[:3]])
    plain, perr = plain_read_errors(hist, phase)
    if plain:
        t.ok(not perr, "%s: plain memcached readers (no epoch, any node): %d reads, %d errors "
             "(the node forwards)" % (label, len(plain), len(perr)),
             [(r[0], r[5], r[10]) for r in perr[:5]])
    owner_maps = [locate(before, hist.keys)] + ([locate(after, hist.keys)] if after != before
                                                else [])
    mis = misrouted_acks(hist, phase, owner_maps)
    t.ok(not mis, "%s: 0 writes acknowledged by a node that is the primary in neither epoch"
         % label, mis[:5])
    moving = set(hist.keys) - nonmoving
    lat = sorted(o[3] - o[2] for k in moving for o in hist.ops[k] if o[8] == phase)
    if lat:
        me = phase_errors(hist, phase, moving)
        t.diag("%s: moving keys: %d writes, p99 %.1f ms, max %.1f ms; errors: write %d, "
               "read %d; TRYAGAIN %d, MOVED %d (absorbed by the client)" % (
                   label, len(lat), lat[int(len(lat) * 0.99)] * 1000, lat[-1] * 1000,
                   len(me["write_errors"]), len(me["read_errors"]), len(me["tryagain"]),
                   len(me["moved"])))
    t.ok(res["misrouted"] and all(v == 0 for v in res["misrouted"].values()),
         "%s: stats misrouted 0 on every node %s" % (label, res["misrouted"]))
    st = cl.status()
    mr = status_counter(st, "misrouted")
    orph = status_counter(st, "orphans")
    t.ok(st["rc"] == 0 and mr and all(v == 0 for v in mr.values())
         and orph and all(v == 0 for v in orph.values()),
         "%s: ringctl status: misrouted %s, orphans %s" % (label, mr, orph),
         (st["rc"], st["raw"][-800:], st["err"][-300:]))
    return res


def tail(s, n=600):
    return s[-n:] if s else ""
