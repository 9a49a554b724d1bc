"""Helpers for the meta protocol tests (tests/it/test_meta_proto.py, one
node; tests/it/test_meta_cluster.py, a cluster): a connection that feeds a
request whole, in 7-byte pieces or byte by byte and reads to an end marker,
expected replies written as literal text with captures and ranges, a meta
reply parser, a herd of connections that send one request at once, and
memcached processes to compare with.

Expected replies ("want" strings) are literal bytes except for:
    {name}          the value of a variable (the case's key, a capture)
    (?name)         capture a decimal number into variable `name`
    (?name:lo..hi)  capture a number that must lie in [lo, hi]
    (?:lo..hi)      a number in [lo, hi], not kept
    (?*)            any decimal number
Requests are templates too: {name} substitutes a variable, {name+N} and
{name-N} a numeric variable plus or minus N.
"""
import base64
import os
import re
import socket
import subprocess
import threading
import time

FEED_MODES = (("whole", 0), ("7-byte", 7), ("bytewise", 1))

# Every exchange ends with this classic command: its reply marks the end of
# what the server sent for the request (a server out of step swallows it
# and the read times out instead).
END_MARK = b"version\r\n"
_END_RE = re.compile(rb"(?:^|\r\n)VERSION [^\r\n]*\r\n\Z")
PROBE = b"mn\r\n"
PROBE_REPLY = "MN\r\n"

_PIECE_PAUSE = 0.0003   # between pieces, so the server sees the request in parts


# ---------------------------------------------------------------- templates

_SUB_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)([+-][0-9]+)?\}")
_WANT_RE = re.compile(r"(\{[A-Za-z_][A-Za-z0-9_]*\}|\(\?[^)]*\))")


def subst(template, env):
    """template (str or bytes) with {name} / {name+N} replaced from env;
    returns bytes (latin-1)."""
    if isinstance(template, bytes):
        template = template.decode("latin-1")

    def rep(m):
        v = env[m.group(1)]
        if m.group(2):
            v = int(v) + int(m.group(2))
        return v.decode("latin-1") if isinstance(v, bytes) else str(v)
    return _SUB_RE.sub(rep, template).encode("latin-1")


class Want:
    """A compiled expected reply: a regex and the range checks."""

    def __init__(self, text, env):
        self.text = text
        self.ranges = []      # (group name, lo, hi)
        parts = []
        n = 0
        for piece in _WANT_RE.split(text):
            if not piece:
                continue
            if piece.startswith("{") and _WANT_RE.fullmatch(piece):
                parts.append(re.escape(subst(piece, env)))
            elif piece.startswith("(?") and _WANT_RE.fullmatch(piece):
                spec = piece[2:-1]
                if spec == "*":
                    parts.append(rb"-?[0-9]+")
                    continue
                name, _, rng = spec.partition(":")
                n += 1
                grp = name if name else "_r%d" % n
                parts.append(b"(?P<" + grp.encode() + rb">-?[0-9]+)")
                if rng:
                    lo, _, hi = rng.partition("..")
                    self.ranges.append((grp, int(lo), int(hi)))
            else:
                parts.append(re.escape(piece.encode("latin-1")))
        self.re = re.compile(b"".join(parts), re.S)

    def match(self, got):
        """dict of captures if got matches, else None."""
        m = self.re.fullmatch(got)
        if m is None:
            return None
        for grp, lo, hi in self.ranges:
            if not lo <= int(m.group(grp)) <= hi:
                return None
        return {k: v.decode() for k, v in m.groupdict().items() if not k.startswith("_r")}


# ---------------------------------------------------------------- connection

class MetaConn:
    """A client connection that sends a request in pieces and reads the
    whole reply up to the end marker. declare: an epoch to declare
    (`epoch N`) on every (re)connection, so the node answers MOVED rather
    than relaying."""

    def __init__(self, addr, timeout=3.0, declare=None):
        self.addr = addr
        self.timeout = timeout
        self.declare = declare
        self.sock = None

    def open(self):
        if self.sock is None:
            self.sock = socket.create_connection(self.addr, timeout=self.timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.declare is not None:
                self.sock.sendall(b"epoch %d\r\n" % self.declare)
                got = b""
                while not got.endswith(b"\r\n"):
                    d = self.sock.recv(64)
                    if not d:
                        break
                    got += d
                if got != b"OK\r\n":
                    self.close()
                    raise OSError("epoch %d at %s:%d: %r" % (self.declare, self.addr[0],
                                                             self.addr[1], got))
        return self

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    def send(self, data, piece=0):
        """data whole (piece 0) or in pieces of `piece` bytes."""
        self.open()
        if not piece or piece >= len(data):
            self.sock.sendall(data)
            return
        for i in range(0, len(data), piece):
            self.sock.sendall(data[i:i + piece])
            time.sleep(_PIECE_PAUSE)

    def exchange(self, data, piece=0, timeout=None):
        """Send data then END_MARK; returns (reply before the marker's
        VERSION line, status) where status is 'ok', 'timeout' or 'closed'
        (then the reply is everything read)."""
        try:
            self.send(data + END_MARK, piece)
        except OSError:
            self.close()
            return b"", "closed"
        deadline = time.monotonic() + (timeout or self.timeout)
        buf = b""
        while True:
            m = _END_RE.search(buf)
            if m:
                return buf[:m.start() + (2 if m.group().startswith(b"\r\n") else 0)], "ok"
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                return buf, "timeout"
            self.sock.settimeout(left)
            try:
                d = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            except OSError:
                d = b""
            if not d:
                self.close()
                return buf, "closed"
            buf += d


# ---------------------------------------------------------------- cases

class Step:
    """One exchange of a case: `send` (a template), the expected reply
    `want` (see the module doc) and whether the probe (mn -> MN) follows.
    sleep: seconds to wait before sending (time-dependent replies)."""

    def __init__(self, send, want, probe=True, sleep=0.0):
        self.send = send
        self.want = want
        self.probe = probe
        self.sleep = sleep


def S(send, want, probe=True, sleep=0.0):
    return Step(send, want, probe, sleep)


def setup(send, want):
    """A set-up step in the classic protocol (no probe)."""
    return Step(send, want, probe=False)


class Case:
    """A named list of steps. old: None if memcached 1.6.18 answers as
    1.6.45 does, else why it does not (the case is not run against it).
    modes: the feed modes to run (FEED_MODES names)."""

    def __init__(self, name, steps, old=None, modes=None, timeout=3.0):
        self.name = name
        self.steps = steps
        self.old = old
        self.modes = modes or [m for m, _ in FEED_MODES]
        self.timeout = timeout


def case_env(prefix):
    """The variables every case gets: k (a fresh key), k2, bk/bk2 (base64
    of fresh binary keys) and long (a key of 251 bytes)."""
    k = prefix
    bin1 = b"\x00\xfe" + prefix.encode()
    bin2 = b"\x01\xfd" + prefix.encode()
    return {"k": k, "k2": k + "-2", "k3": k + "-3",
            "bk": base64.b64encode(bin1).decode(), "bk2": base64.b64encode(bin2).decode(),
            "long": "L" * 251, "k250": (k + "-" + "x" * 250)[:250]}


def run_case(conn, case, env, piece, transcript=None):
    """Run case's steps on conn fed in pieces of `piece` bytes (0: whole).
    Returns None if every step got its reply, else a diagnostic.
    transcript: a list that gets each step's reply."""
    for i, st in enumerate(case.steps):
        if st.sleep:
            time.sleep(st.sleep)
        data = subst(st.send, env)
        if st.probe:
            data += PROBE
        want_text = st.want + (PROBE_REPLY if st.probe else "")
        want = Want(want_text, env)
        got, status = conn.exchange(data, piece, case.timeout)
        if transcript is not None:
            transcript.append(got)
        caps = want.match(got) if status == "ok" else None
        if caps is None:
            conn.close()     # out of step: the next case starts afresh
            return ("step %d of %d (%s)\nsent: %r\ngot:  %r%s\nwant: %r"
                    % (i + 1, len(case.steps), st.send[:60], data[:300], got[:400],
                       "" if status == "ok" else " (%s)" % status, want_text[:400]))
        env.update(caps)
    return None


def run_table(t, label, addr, cases, only_agreeing=False, prefix="mp"):
    """Run every case in each of its feed modes on one connection (reopened
    after a failure) to addr, one TAP line per case. only_agreeing: run
    just the cases where memcached 1.6.18 agrees (the others are skipped
    with their reason)."""
    conn = MetaConn(addr)
    passed = 0
    try:
        for ci, case in enumerate(cases):
            if only_agreeing and case.old:
                t.skip("%s: %s" % (label, case.name), "1.6.18 differs: " + case.old)
                continue
            diags = []
            for mode, piece in FEED_MODES:
                if mode not in case.modes:
                    continue
                env = case_env("%s%d-%d-%s" % (prefix, os.getpid() % 1000, ci, mode[0]))
                try:
                    d = run_case(conn, case, env, piece)
                except OSError as e:
                    conn.close()
                    d = "connection error: %s" % e
                if d:
                    diags.append("[%s] %s" % (mode, d))
            ok = t.ok(not diags, "%s: %s (%s)" % (label, case.name, ", ".join(case.modes)),
                      "\n".join(diags))
            passed += 1 if ok else 0
    finally:
        conn.close()
    return passed


# ---------------------------------------------------------------- meta replies

def parse_meta(line):
    """'VA 2 c5 t30 W' -> ('VA', {'size': '2', 'c': '5', 't': '30', 'W': ''},
    [flag tokens in order]). Errors and other lines: (line, {}, [])."""
    if isinstance(line, bytes):
        line = line.decode("latin-1")
    p = line.split(" ")
    code = p[0]
    if code not in ("VA", "HD", "EN", "NS", "EX", "NF", "MN", "ME"):
        return line, {}, []
    fl = {}
    rest = p[1:]
    if code == "VA" and rest:
        fl["size"] = rest[0]
        rest = rest[1:]
    for tok in rest:
        if tok:
            fl[tok[0]] = tok[1:]
    return code, fl, rest


def read_reply(c):
    """One meta reply from a loadgen.Conn-like object (readline, readn):
    (line bytes, data bytes or None)."""
    line = c.readline()
    if line.startswith(b"VA "):
        return line, c.readn(int(line.split()[1]))
    return line, None


def herd(addrs, line, n=50, after_win=None, timeout=10.0, conn_cls=None):
    """n connections spread round-robin over addrs send `line` (bytes, with
    CRLF) at the same moment. after_win(conn, reply) is called on the
    connection that got a W, right after its reply (e.g. to store the new
    value). Returns a list of (addr, line, data) in connection order;
    a connection that failed gives (addr, b'<error ...>', None)."""
    if conn_cls is None:
        import loadgen
        conn_cls = loadgen.Conn
    conns = []
    try:
        for i in range(n):
            conns.append(conn_cls(addrs[i % len(addrs)], timeout))
        out = [None] * n
        barrier = threading.Barrier(n)
        lock = threading.Lock()
        nsent = [0]
        all_sent = threading.Event()

        def run(i):
            c = conns[i]
            try:
                barrier.wait(timeout)
                c.send(line)
                with lock:
                    nsent[0] += 1
                    if nsent[0] == n:
                        all_sent.set()
                rl, data = read_reply(c)
                out[i] = (c.addr, rl, data)
                if after_win is not None and "W" in parse_meta(rl)[1]:
                    # Let the others' requests reach the server first, so
                    # most of them meet the token (Z), not the new value.
                    all_sent.wait(timeout)
                    time.sleep(0.05)
                    after_win(c, (rl, data))
            except Exception as e:  # noqa: BLE001 (reported as the reply)
                out[i] = (c.addr, ("<error %s>" % e).encode(), None)
        ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for th in ts:
            th.start()
        for th in ts:
            th.join(timeout + 5)
        return [o if o is not None else (None, b"<no reply>", None) for o in out]
    finally:
        for c in conns:
            c.close()


def won(replies):
    """The replies that carry W."""
    return [r for r in replies if "W" in parse_meta(r[1])[1]]


# ---------------------------------------------------------------- memcached

class Memcached:
    """A memcached process on a free 127.0.0.1 port, stopped by PID."""

    def __init__(self, binary, args=()):
        self.binary = binary
        self.args = list(args)
        self.proc = None
        self.port = None

    @property
    def addr(self):
        return ("127.0.0.1", self.port)

    def start(self, timeout=10.0):
        for _ in range(5):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            s.close()
            cmd = [self.binary, "-l", "127.0.0.1", "-p", str(port), "-U", "0",
                   "-t", "2", "-m", "64"] + self.args
            if os.geteuid() == 0:
                cmd += ["-u", "root"]
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.3).close()
                    self.port = port
                    return self
                except OSError:
                    time.sleep(0.02)
            self.stop()
        raise RuntimeError("memcached did not start: %s" % self.binary)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def memcached_version(binary):
    """'1.6.18' for a runnable memcached binary, else None."""
    if not binary or not os.access(binary, os.X_OK):
        return None
    try:
        r = subprocess.run([binary, "-V"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"memcached (\S+)", r.stdout + r.stderr)
    return m.group(1) if m else None
