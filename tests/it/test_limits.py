#!/usr/bin/env python3
"""The node's limits (docs/operations.md, "Limits"), each pushed past: the
abuse gets what the table says, another connection doing set/get with a
short deadline keeps being served the whole time, and the node's RSS
(VmRSS, sampled every 10 ms) stays under baseline + a bound given per case.

1. -c: 60 held connections, then three waves of 400 more sockets at once:
   each extra one gets "ERROR Too many open connections" and is closed; the held ones
   (idle for the whole case: no idle timeout by default) still answer.
2. -o idle_timeout=2: 150 silent connections, one with half a command
   line, one stopped inside a data block are closed after more than 2 s
   (not before), counted in idle_kicks; a client that is slow to read a
   large reply, and an active one, are not.
3. --max-output-bytes 256k: a client that pipelines gets of a 2000-byte
   value (290 bytes out per byte in) and one that pipelines gets of a
   512 KiB value, neither reading, are capped and then closed (their
   input fills, nothing can be written for 5 s); a third pipelines the
   2000-byte gets and reads slowly: capped, and served.
4. --max-keys-per-get: 1000 keys pass, 1001 are one CLIENT_ERROR and the
   connection goes on; 2000 such lines cost nothing; 100000 by default,
   0 = no limit.
5. Bad values of the new options stop the start, naming the option.

RSS bounds are per case (below). Under ASan+UBSan (rctest.sanitized()) the
nodes run with a 16 MiB quarantine (freed memory is held there before
reuse) and each bound is doubled plus 24 MiB for it and the allocator's
caches.
"""
import os
import resource
import select
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import (Tap, Node, RINGCACHED, request, recv_until, sanitized,  # noqa: E402
                    wait_until, rss_bound_kb as bound_kb, RssSampler as Rss)

SAN = sanitized()
SLOW = 4 if SAN else 1                  # deadline multiplier
PROBE_DEADLINE = 2.0 * SLOW             # one set+get of the prober, at most
VERSION = b"VERSION 1.6.21-ringcache-0.1.0\r\n"
TOO_MANY = b"ERROR Too many open connections\r\n"

if SAN:
    opts = os.environ.get("ASAN_OPTIONS", "")
    os.environ["ASAN_OPTIONS"] = (opts + ":" if opts else "") + "quarantine_size_mb=16"

tap = Tap()


class Prober(threading.Thread):
    """Another client: set/get of its own key on one connection (opened at
    once, so it holds a slot under -c), over and over until stop(), every
    round within PROBE_DEADLINE."""

    def __init__(self, node, pause=0.02):
        super().__init__(daemon=True)
        self.sock = node.connect(timeout=PROBE_DEADLINE)
        self.pause = pause
        self.rounds = 0
        self.errors = []
        self.worst = 0.0
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            v = b"%d" % self.rounds
            t0 = time.monotonic()
            try:
                r = request(self.sock, b"set probe 0 0 %d\r\n%s\r\nget probe\r\n" % (len(v), v),
                            b"END\r\n", timeout=PROBE_DEADLINE)
            except OSError as e:
                r = repr(e).encode()
            dt = time.monotonic() - t0
            self.worst = max(self.worst, dt)
            if r != b"STORED\r\nVALUE probe 0 %d\r\n%s\r\nEND\r\n" % (len(v), v):
                self.errors.append(r[:200])
                if len(self.errors) > 3:
                    return
            self.rounds += 1
            time.sleep(self.pause)

    def stop(self):
        self.halt.set()
        self.join(PROBE_DEADLINE + 5)
        self.sock.close()


def check_served(p, what):
    tap.ok(not p.errors and p.rounds > 0 and p.worst < PROBE_DEADLINE,
           "%s: another client served throughout (%d set+get, worst %.3f s, deadline %.1f s)"
           % (what, p.rounds, p.worst, PROBE_DEADLINE), p.errors)


def check_rss(r, extra_mib, what):
    b = bound_kb(r.base, extra_mib)
    tap.ok(r.peak <= b, "%s: RSS baseline %d KiB, peak %d KiB, bound %d KiB"
           % (what, r.base, r.peak, b))


def stats(node, arg=b""):
    s = node.connect()
    r = request(s, b"stats%s\r\n" % (b" " + arg if arg else b""), b"END\r\n")
    s.close()
    out = {}
    for line in r.split(b"\r\n"):
        p = line.split(b" ")
        if len(p) == 3 and p[0] == b"STAT":
            out[p[1].decode()] = p[2].decode()
    return out


def closed(s):
    """True when the node closed s (EOF or reset; data before it dropped)."""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def wait_closed(socks, timeout):
    """Poll until every socket is closed by the node or the deadline:
    {index: time.monotonic() when it was seen closed}."""
    t0 = time.monotonic()
    seen = {}
    for s in socks:
        s.setblocking(False)
    while len(seen) < len(socks) and time.monotonic() - t0 < timeout:
        p = select.poll()
        fds = {}
        for i, s in enumerate(socks):
            if i not in seen:
                p.register(s.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
                fds[s.fileno()] = i
        for fd, _ in p.poll(50):
            i = fds[fd]
            if closed(socks[i]):
                seen[i] = time.monotonic()
    return seen


def flood_until_closed(s, req, timeout):
    """Send req over and over without ever reading, until the node closes
    s (send fails) or timeout; (closed, bytes sent)."""
    s.setblocking(False)
    sent = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            sent += s.send(req)
        except BlockingIOError:
            time.sleep(0.01)
        except OSError:
            return True, sent
    return False, sent


def connect_served(node):
    """A connection the node serves (version answered). A slot freed by a
    connection just closed (the stats one asking) is freed when its worker
    sees the close, so a connect right after may still be refused: retry
    within a deadline. None if it never is served."""
    found = []

    def one():
        s = node.connect()
        try:
            if request(s, b"version\r\n") == VERSION:
                found.append(s)
                return True
        except OSError:
            pass
        s.close()
        return False
    wait_until(one, 5 * SLOW)
    return found[0] if found else None


def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))


# ---- 1. -c -------------------------------------------------------------
def case_maxconns():
    held_n, extra_n, waves = 60, 400, 3
    raise_nofile(held_n + extra_n + 256)
    with Node(args=["-t", "2", "-c", str(held_n + 1)]) as node:
        # Node.start's probe connection must be gone before the slots fill
        # (only the stats connection asking is open then).
        wait_until(lambda: stats(node).get("curr_connections") == "1", 5 * SLOW)
        p = Prober(node)
        held = [connect_served(node) for _ in range(held_n)]
        ok = all(s is not None for s in held)
        tap.ok(ok, "-c %d: the prober and %d held connections are served" % (held_n + 1, held_n))
        r = Rss(node.pid)
        r.start()
        p.start()
        for wave in range(waves):
            extra = []
            for _ in range(extra_n):
                try:
                    extra.append(socket.create_connection(("127.0.0.1", node.port), timeout=10))
                except OSError:
                    pass
            replies = [recv_until(s, b"\r\n", timeout=5 * SLOW) for s in extra]
            gone = wait_closed(extra, 10 * SLOW)
            tap.ok(len(extra) == extra_n and all(x == TOO_MANY for x in replies),
                   "wave %d: %d sockets over -c, each told \"ERROR Too many open connections\""
                   % (wave + 1, len(extra)), [x for x in replies if x != TOO_MANY][:5])
            tap.eq(len(gone), len(extra), "wave %d: and each closed by the node" % (wave + 1))
            for s in extra:
                s.close()
        r.stop()
        p.stop()
        check_served(p, "-c")
        check_rss(r, 8, "-c")
        # The held connections were idle for the whole case: no idle
        # timeout by default, and nothing counts idle kicks.
        tap.ok(all(request(s, b"version\r\n") == VERSION for s in held),
               "the %d held connections, idle meanwhile, still answer" % held_n)
        for s in held[:10]:
            s.close()
        ok = wait_until(lambda: request(node.connect(), b"version\r\n") == VERSION, 5 * SLOW)
        tap.ok(ok, "after 10 held ones close, a new connection is served")
        s = node.connect()
        r2 = request(s, b"stats\r\n", b"END\r\n")
        tap.ok(b"STAT rejected_connections" in r2 and
               int(r2.split(b"STAT rejected_connections ")[1].split(b"\r\n")[0]) >= waves * extra_n and
               b"idle_kicks" not in r2,
               "stats: rejected_connections >= %d, no idle_kicks line without -o idle_timeout"
               % (waves * extra_n))
        s.close()
        for s in held[10:]:
            s.close()


# ---- 2. -o idle_timeout ------------------------------------------------
def case_idle():
    timeout = 2
    n_idle = 150
    raise_nofile(n_idle + 256)
    with Node(args=["-t", "2", "-m", "64", "-o", "idle_timeout=%d" % timeout]) as node:
        st = stats(node, b"settings")
        tap.eq(st.get("idle_timeout"), str(timeout), "stats settings: idle_timeout %d" % timeout)
        tap.eq(stats(node).get("idle_kicks"), "0", "stats: idle_kicks 0")
        big = b"b" * (512 << 10)
        s = node.connect()
        tap.eq(request(s, b"set big 0 0 %d\r\n%s\r\n" % (len(big), big)), b"STORED\r\n",
               "set a 512 KiB value")
        s.close()
        p = Prober(node, pause=0.2)     # active: one request every 0.2 s
        r = Rss(node.pid)
        r.start()
        p.start()
        t0 = time.monotonic()                           # before every connect
        idle = [node.connect() for _ in range(n_idle)]
        half = node.connect()
        half.sendall(b"get fo")                         # half a command line
        block = node.connect()
        block.sendall(b"set k 0 0 10\r\nabc")           # stopped inside a data block
        # A slow reader: 32 x 512 KiB of replies owed, read only later.
        slow = node.connect()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        slow.sendall(b"get" + b" big" * 32 + b"\r\n")
        victims = idle + [half, block]
        t1 = time.monotonic()                           # after the last byte sent
        gone = wait_closed(victims, timeout + 4 * SLOW)
        tap.eq(len(gone), len(victims),
               "all %d idle ones (silent, half a line, inside a data block) closed" % len(victims))
        # Each one's last byte reached the node after t0 and before t1: it
        # may close it only more than `timeout` s later, and should within
        # about 2 s more (a once-a-second sweep on a 1 s clock).
        first, last = (min(gone.values()), max(gone.values())) if gone else (t0, t0)
        tap.ok(first - t0 > timeout,
               "none closed before %d s idle (the first %.2f s after the first connect)"
               % (timeout, first - t0))
        tap.ok(last - t1 <= timeout + 2 + 2 * (SLOW - 1),
               "the last closed %.2f s after the last byte sent (at most about %d s)"
               % (last - t1, timeout + 2))
        slow.settimeout(10 * SLOW)
        got = recv_until(slow, b"END\r\n", timeout=10 * SLOW, limit=64 << 20)
        tap.ok(got.endswith(b"END\r\n") and got.count(b"VALUE big 0 524288\r\n") == 32,
               "a client slow to read 16 MiB of replies is not idle: %d bytes, all of it"
               % len(got))
        tap.eq(request(slow, b"version\r\n"), VERSION, "and its connection goes on")
        r.stop()
        p.stop()
        check_served(p, "idle_timeout (the prober sends every 0.2 s: active, never kicked)")
        check_rss(r, 16, "idle_timeout")
        tap.eq(stats(node).get("idle_kicks"), str(len(victims)),
               "stats: idle_kicks %d" % len(victims))
        for s in victims + [slow]:
            s.close()


def case_idle_timing():
    """The exact bound: one silent connection, closed after more than the
    timeout and within it + 2 s of sweep granularity (+ slack)."""
    with Node(args=["-t", "1", "-o", "idle_timeout=1"]) as node:
        s = node.connect()
        s.sendall(b"version\r\n")
        tap.eq(recv_until(s, b"\r\n"), VERSION, "idle_timeout=1: answered")
        t0 = time.monotonic()
        gone = wait_closed([s], 6 * SLOW)
        dt = gone[0] - t0 if 0 in gone else None
        tap.ok(dt is not None and 1.0 <= dt <= 3.0 + 2 * (SLOW - 1),
               "idle_timeout=1: closed %.2f s after its last reply (more than 1 s, at most "
               "about 3)" % (dt if dt is not None else -1))
        s.close()


# ---- 3. --max-output-bytes ---------------------------------------------
def case_output():
    with Node(args=["-t", "2", "-m", "256", "--max-output-bytes", "256k"]) as node:
        st = stats(node, b"settings")
        tap.eq(st.get("max_output_bytes"), str(256 << 10), "stats settings: max_output_bytes")
        s = node.connect()
        small = b"s" * 2000
        big = b"b" * (512 << 10)
        tap.eq(request(s, b"set small 0 0 %d\r\n%s\r\nset big 0 0 %d\r\n%s\r\n"
                       % (len(small), small, len(big), big), b"STORED\r\nSTORED\r\n"),
               b"STORED\r\nSTORED\r\n", "set a 2000-byte and a 512 KiB value")
        s.close()
        p = Prober(node)
        r = Rss(node.pid)
        r.start()
        p.start()
        res = {}

        def abuse(name, req):
            c = node.connect()
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
            res[name] = flood_until_closed(c, req * 512, 30 * SLOW)
            c.close()
        def slow_reader(secs):
            # Reads 16 KiB every 5 ms while it pipelines gets as fast as
            # it can: each read lets the node write, and without the cap
            # every write would let it execute all the gets buffered (up
            # to 1 MiB of them: 290 MiB of replies).
            c = node.connect()
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
            c.setblocking(False)
            req = b"get small\r\n" * 512
            sent = got = 0
            err = None
            t0 = time.monotonic()
            while time.monotonic() - t0 < secs and err is None:
                try:
                    sent += c.send(req)
                except BlockingIOError:
                    pass
                except OSError as e:
                    err = e
                try:
                    d = c.recv(16384)
                    if not d:
                        err = "EOF"
                    got += len(d)
                except BlockingIOError:
                    pass
                except OSError as e:
                    err = e
                time.sleep(0.005)
            res["slow"] = (err, sent, got)
            c.close()
        th = [threading.Thread(target=abuse, args=("small", b"get small\r\n")),
              threading.Thread(target=abuse, args=("big", b"get big\r\n")),
              threading.Thread(target=slow_reader, args=(4.0,))]
        for t in th:
            t.start()
        for t in th:
            t.join(40 * SLOW)
        r.stop()
        p.stop()
        for name, what in (("small", "2000-byte"), ("big", "512 KiB")):
            cl, sent = res.get(name, (False, 0))
            tap.ok(cl, "gets of a %s value, never read: closed by the node after %d bytes of "
                   "requests (%d gets)" % (what, sent, sent // (len(name) + 6)))
        err, sent, got = res.get("slow", ("no result", 0, 0))
        tap.ok(err is None and got > 0, "a slow reader of the 2000-byte gets: capped, not closed "
               "(sent %d bytes of gets, read %d bytes of replies in 4 s)" % (sent, got), err)
        check_served(p, "--max-output-bytes")
        # Capped: per client 256 KiB of replies + 1 MiB of unparsed input +
        # a read buffer. Uncapped (--max-output-bytes 1024m), the slow
        # reader alone took the node from 9 MiB to over 850 MiB.
        check_rss(r, 16, "--max-output-bytes (two clients that never read, one slow reader)")
        tap.ok(node.alive(), "the node survived both")


# ---- 4. --max-keys-per-get ---------------------------------------------
def keys_line(cmd, n, key=b"k"):
    return cmd + (b" " + key) * n + b"\r\n"


def case_keys():
    with Node(args=["-t", "2", "--max-keys-per-get", "1000"]) as node:
        s = node.connect()
        tap.eq(request(s, b"set k 0 0 1\r\nv\r\n"), b"STORED\r\n", "set k")
        r = request(s, keys_line(b"get", 1000), b"END\r\n")
        tap.ok(r.endswith(b"END\r\n") and r.count(b"VALUE k 0 1\r\n") == 1000,
               "1000 keys (the limit): served")
        for cmd in (b"get", b"gets", b"gat 0"):
            r = request(s, keys_line(cmd, 1001) + b"version\r\n", VERSION)
            tap.eq(r, b"CLIENT_ERROR too many keys\r\n" + VERSION,
                   "%s with 1001 keys: CLIENT_ERROR too many keys alone, and the connection "
                   "goes on" % cmd.decode())
        tap.eq(stats(node, b"settings").get("max_keys_per_get"), "1000",
               "stats settings: max_keys_per_get 1000")
        p = Prober(node)
        rs = Rss(node.pid)
        rs.start()
        p.start()
        lines = keys_line(b"get", 1001) * 2000          # 4 MB of refused gets
        s.sendall(lines + b"version\r\n")
        got = recv_until(s, VERSION, timeout=30 * SLOW)
        rs.stop()
        p.stop()
        tap.eq((got.count(b"CLIENT_ERROR too many keys\r\n"), got.endswith(VERSION)), (2000, True),
               "2000 such lines pipelined: 2000 CLIENT_ERRORs, then the next reply")
        check_served(p, "--max-keys-per-get")
        check_rss(rs, 8, "--max-keys-per-get")
        s.close()
    with Node(args=["-t", "1"]) as node:
        s = node.connect()
        r = request(s, keys_line(b"get", 100000), b"END\r\n", timeout=30)
        tap.eq(r, b"END\r\n", "default: 100000 keys served")
        r = request(s, keys_line(b"get", 100001), b"\r\n", timeout=30)
        tap.eq(r, b"CLIENT_ERROR too many keys\r\n", "default: 100001 keys refused")
        s.close()
    with Node(args=["-t", "1", "--max-keys-per-get", "0"]) as node:
        s = node.connect()
        r = request(s, keys_line(b"get", 300000), b"END\r\n", timeout=30)
        tap.eq(r, b"END\r\n", "--max-keys-per-get 0: 300000 keys served (no limit)")
        s.close()


# ---- 5. bad values -----------------------------------------------------
def case_bad_values():
    for args, want in ((["--max-output-bytes", "1k"], "--max-output-bytes"),
                       (["--max-output-bytes", "x"], "--max-output-bytes"),
                       (["--max-keys-per-get", "-1"], "--max-keys-per-get"),
                       (["--max-frame-bytes", "16m"], "--max-frame-bytes"),
                       (["--handoff-window", "0"], "--handoff-window"),
                       (["-o", "idle_timeout=-1"], "idle_timeout"),
                       (["-o", "idle_timeout"], "idle_timeout")):
        pr = subprocess.run([RINGCACHED, "-p", "0"] + args, stdin=subprocess.DEVNULL,
                            capture_output=True, timeout=10)
        err = pr.stderr.decode(errors="replace")
        tap.ok(pr.returncode == 2 and want in err.splitlines()[0],
               "%s: exit 2, the first line names it" % " ".join(args), (pr.returncode, err[:300]))


case_maxconns()
case_idle()
case_idle_timing()
case_output()
case_keys()
case_bad_values()
tap.done()
