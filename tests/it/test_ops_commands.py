#!/usr/bin/env python3
"""memcached's operator commands against a real ringcached, each reply
compared byte for byte with Debian's memcached where the two can agree
(issue 27): stats detail on|off|dump, lru_crawler metadump all|hash (and its
refusal under -X), stats cachedump, shutdown (refused without -A, stops the
node with it); memcdump and memcstat (libmemcached-tools) against a node,
with a dump larger than the client's output cap. TAP."""
import os
import re
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import Node, Tap, can_connect, free_port, recv_until, wait_until  # noqa: E402

MEMCACHED = "/usr/bin/memcached"
tap = Tap()
procs = []


class Memcached:
    """Debian's memcached on a free port (as nobody when run as root)."""

    def __init__(self, args=()):
        self.port = free_port()
        cmd = [MEMCACHED, "-l", "127.0.0.1", "-p", str(self.port), "-U", "0"] + list(args)
        if os.getuid() == 0:
            cmd += ["-u", "nobody"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(self.proc)
        wait_until(lambda: self.proc.poll() is not None or can_connect(self.port), 10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def talk(port, lines, ends):
    """Send each line (bytes, without CRLF) in turn and read its reply up to
    the terminator ends[i]; returns the replies."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    out = []
    for line, end in zip(lines, ends):
        s.sendall(line + b"\r\n")
        out.append(recv_until(s, end, timeout=10))
    s.close()
    return out


def both(mc_port, rc_port, lines, ends):
    return talk(mc_port, lines, ends), talk(rc_port, lines, ends)


have_mc = os.access(MEMCACHED, os.X_OK)
mc = Memcached() if have_mc else None
node = Node(args=["-t", "2"]).start()
try:
    # stats detail: the same script, the same bytes.
    script = [
        (b"stats detail on", b"\r\n"),
        (b"set user:1 0 0 1\r\nx", b"\r\n"),
        (b"set user:2 0 0 1\r\ny", b"\r\n"),
        (b"get user:1 user:3", b"END\r\n"),
        (b"get nodelim", b"END\r\n"),
        (b"delete user:2", b"\r\n"),
        (b"delete user:9", b"\r\n"),
        (b"stats detail dump", b"END\r\n"),
        (b"stats detail off", b"\r\n"),
        (b"get user:1", b"END\r\n"),
        (b"stats detail dump", b"END\r\n"),
        (b"stats detail", b"\r\n"),
        (b"stats detail sideways", b"\r\n"),
    ]
    lines, ends = [x[0] for x in script], [x[1] for x in script]
    got = talk(node.port, lines, ends)
    tap.eq(got[7], b"PREFIX user get 2 hit 1 set 2 del 2\r\nEND\r\n",
           "stats detail dump: per prefix get/hit/set/del (a key without ':' not counted)")
    tap.eq(got[10], got[7], "stats detail off: counting stops, the counters stay")
    if mc:
        want = talk(mc.port, lines, ends)
        tap.eq(got, want, "stats detail on|off|dump and its usage error: memcached's bytes")
        st = [talk(p, [b"stats settings"], [b"END\r\n"])[0] for p in (mc.port, node.port)]
        tap.ok(all(b"STAT detail_enabled no\r\n" in x for x in st),
               "stats settings: detail_enabled no after off, as memcached", st[1][-200:])
    else:
        tap.skip("stats detail: memcached's bytes", "memcached not installed")

    # stats conns: memcached's lines, one group per connection of every worker.
    conn_re = re.compile(rb"^STAT (\d+):(addr|listen_addr|state|secs_since_last_cmd) (\S+)$")

    def conns(port):
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
        held[0].sendall(b"set half 0 0 10\r\n")     # inside a data block
        mine = {("tcp:127.0.0.1:%d" % h.getsockname()[1]).encode() for h in held}
        time.sleep(0.2)                               # let the set's line be read
        out = talk(port, [b"stats conns"], [b"END\r\n"])[0]
        for h in held:
            h.close()
        lines = out.split(b"\r\n")[:-2]
        parsed = [conn_re.match(x) for x in lines]
        addrs = {m.group(3) for m in parsed if m and m.group(2) == b"addr"}
        states = {m.group(3) for m in parsed if m and m.group(2) == b"state"}
        return out, all(parsed), mine <= addrs, states
    out, fmt, seen, states = conns(node.port)
    tap.ok(out.endswith(b"END\r\n") and fmt and seen and b"conn_listening" in states
           and b"conn_parse_cmd" in states and b"conn_nread" in states,
           "stats conns: every line memcached's form; the 3 open connections listed (one in "
           "conn_nread), the listener, the asking one in conn_parse_cmd", out[:800])
    if mc:
        mout, mfmt, mseen, _ = conns(mc.port)
        tap.ok(mfmt and mseen, "memcached's own stats conns lines match the same pattern",
               mout[:400])

    # metadump: memcached's line format, every key, URI-encoded.
    keys = [b"plain", b"a%20b", b"sp:ace"]
    lines = [b"set %s 0 %d 3\r\nabc" % (k, 0 if i else 1000) for i, k in enumerate(keys)]
    lines += [b"get plain"]
    ends = [b"\r\n"] * 3 + [b"END\r\n"]
    talk(node.port, lines, ends)
    line_re = re.compile(rb"^key=(\S+) exp=(-1|\d+) la=\d+ cas=\d+ fetch=(yes|no) cls=\d+ "
                         rb"size=\d+$")
    for how in (b"all", b"hash"):
        out = talk(node.port, [b"lru_crawler metadump " + how], [b"END\r\n"])[0]
        body = out[:-5].split(b"\n")[:-1]
        parsed = {m.group(1): m for m in (line_re.match(x) for x in body) if m}
        ok = (out.endswith(b"\nEND\r\n") and len(parsed) == len(body)
              and set(parsed) >= {b"plain", b"a%2520b", b"sp%3Aace"}
              and parsed[b"plain"].group(3) == b"yes" and parsed[b"sp%3Aace"].group(3) == b"no"
              and parsed[b"a%2520b"].group(2) == b"-1" and parsed[b"plain"].group(2) != b"-1")
        tap.ok(ok, "lru_crawler metadump %s: one line per item in memcached's format, keys "
               "URI-encoded, fetch and exp right" % how.decode(), out[:600])
    if mc:
        talk(mc.port, lines, ends)
        out = talk(mc.port, [b"lru_crawler metadump all"], [b"END\r\n"])[0]
        body = out[:-5].split(b"\n")[:-1]
        tap.ok(body and all(line_re.match(x) for x in body),
               "memcached's own metadump lines match the same pattern", out[:400])
        cmds = [b"lru_crawler metadump", b"lru_crawler frobnicate", b"stats cachedump 1",
                b"stats cachedump x 0", b"stats cachedump 300 0", b"stats cachedump 2 0",
                b"shutdown", b"shutdown graceful"]
        w, g = both(mc.port, node.port, cmds, [b"\r\n"] * len(cmds))
        tap.eq(g, w, "bad lru_crawler/cachedump lines, an empty class, shutdown without -A: "
               "memcached's bytes")
    else:
        tap.skip("memcached's metadump and error bytes", "memcached not installed")
    out = talk(node.port, [b"stats cachedump 1 2"], [b"END\r\n"])[0]
    tap.ok(re.match(rb"^(ITEM \S+ \[3 b; \d+ s\]\r\n){2}END\r\n$", out),
           "stats cachedump 1 2: two ITEM lines in memcached's format", out)

    # memcdump and memcstat, with a dump over the output cap (1 MiB).
    n = 12000
    s = socket.create_connection(("127.0.0.1", node.port), timeout=10)
    s.sendall(b"".join(b"set dumpkey:%06d 0 0 1 noreply\r\nv\r\n" % i for i in range(n)))
    s.sendall(b"mn\r\n")
    recv_until(s, b"MN\r\n")
    s.close()
    if subprocess.run(["which", "memcdump"], capture_output=True).returncode != 0:
        tap.skip("memcdump lists every key", "libmemcached-tools not installed")
    else:
        r = subprocess.run(["memcdump", "--servers=127.0.0.1:%d" % node.port],
                           capture_output=True, timeout=60)
        got = set(r.stdout.split())
        want = {b"dumpkey:%06d" % i for i in range(n)} | {b"plain", b"a%20b", b"sp:ace", b"user:1"}
        tap.ok(r.returncode == 0 and got == want,
               "memcdump lists every key (%d) of the node" % len(want),
               (r.returncode, len(got), r.stderr[:300]))
        big = talk(node.port, [b"lru_crawler metadump all"], [b"END\r\n"])[0]
        tap.ok(big.count(b"\n") == len(want) + 1 and len(big) > (1 << 20),
               "metadump of %d items (%d bytes, over the 1 MiB output cap) complete"
               % (len(want), len(big)), big[-200:])
        r = subprocess.run(["memcstat", "--servers=127.0.0.1:%d" % node.port],
                           capture_output=True, timeout=30, text=True)
        tap.ok(r.returncode == 0 and "pid: %d" % node.pid in r.stdout,
               "memcstat reads the node's stats", r.stdout[:300] + r.stderr[:300])
    tap.ok(node.alive() and talk(node.port, [b"version"], [b"\r\n"])[0].startswith(b"VERSION"),
           "the node still serves (and shutdown without -A did nothing)")
    node.stop()

    # -X: metadump and cachedump refused, as memcached -X.
    x = Node(args=["-X"]).start()
    cmds = [b"lru_crawler metadump all", b"stats cachedump 1 0"]
    g = talk(x.port, cmds, [b"\r\n"] * 2)
    if mc:
        mx = Memcached(["-X"])
        w = talk(mx.port, cmds, [b"\r\n"] * 2)
        mx.stop()
        tap.eq(g, w, "-X: metadump and cachedump refused with memcached's bytes")
    else:
        tap.eq(g, [b"ERROR metadump not allowed\r\n",
                   b"CLIENT_ERROR stats cachedump not allowed\r\n"], "-X: refused")
    x.stop()

    # cache_memlimit: memcached's replies, and the limit holds from then on.
    script = [(b"cache_memlimit 4", b"\r\n"), (b"cache_memlimit abc", b"\r\n"),
              (b"cache_memlimit", b"\r\n"), (b"cache_memlimit 2000000000", b"\r\n"),
              (b"cache_memlimit 8 noreply", None), (b"cache_memlimit 8", b"\r\n")]
    lines = [x[0] for x in script if x[1] is not None]
    ends = [x[1] for x in script if x[1] is not None]
    m = Node(args=["-t", "2", "-m", "64"]).start()
    procs.append(m.proc)
    s = socket.create_connection(("127.0.0.1", m.port), timeout=10)
    s.sendall(b"cache_memlimit 8 noreply\r\nmn\r\n")
    nr = recv_until(s, b"MN\r\n")
    s.close()
    got = talk(m.port, lines, ends)
    if mc:
        want = talk(mc.port, lines, ends)
        tap.eq(got, want, "cache_memlimit: memcached's replies (too small, not a number, "
               "missing, bytes for megabytes, OK)")
    else:
        tap.ok(got[-1] == b"OK\r\n", "cache_memlimit 8: OK")
    tap.eq(nr, b"MN\r\n", "cache_memlimit 8 noreply: no reply")
    s = socket.create_connection(("127.0.0.1", m.port), timeout=30)
    val = b"v" * 4000
    for i in range(0, 6000, 200):
        s.sendall(b"".join(b"set cm-%d 0 0 4000 noreply\r\n%s\r\n" % (j, val)
                           for j in range(i, i + 200)))
    s.sendall(b"stats\r\n")
    st = recv_until(s, b"END\r\n")
    s.sendall(b"stats settings\r\n")
    ss = recv_until(s, b"END\r\n")
    s.close()
    stat, sset = [dict(ln.split(b" ")[1:3] for ln in blob.split(b"\r\n")
                       if ln.startswith(b"STAT ") and len(ln.split(b" ")) >= 3)
                  for blob in (st, ss)]
    tap.ok(int(stat.get(b"bytes", b"-1")) <= 8 << 20 and int(stat.get(b"evictions", b"0")) > 0
           and stat.get(b"limit_maxbytes") == b"8388608" and sset.get(b"maxbytes") == b"8388608",
           "after cache_memlimit 8 (started with -m 64): 24 MB of sets keep bytes under 8 MiB "
           "(%s, %s evictions); limit_maxbytes and maxbytes say 8 MiB"
           % (stat.get(b"bytes"), stat.get(b"evictions")), stat)
    m.stop()

    # -A: shutdown stops the node (exit 0); a bad mode is refused first.
    a = Node(args=["-A"]).start()
    s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    s.sendall(b"shutdown now\r\n")
    bad = recv_until(s, b"\r\n")
    t0 = time.monotonic()
    s.sendall(b"shutdown\r\n")
    rest = recv_until(s, b"never", timeout=10)
    code = a.proc.wait(10)
    tap.ok(bad == b"CLIENT_ERROR invalid shutdown mode\r\n" and rest == b"" and code == 0,
           "-A: 'shutdown now' refused; 'shutdown' closes the connection and the node exits 0 "
           "in %.2f s" % (time.monotonic() - t0), (bad, rest, code))
    a.proc = None
finally:
    node.stop()
    if mc:
        mc.stop()
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
tap.done()
