#!/usr/bin/env python3
"""memcached's `watch` on a real ringcached (issue 27): a scripted run of
classic and meta commands on another connection shows up, in order, on
`watch fetchers mutations deletions` as memcached's lines (item_get with
found/not_found, item_store with each command's status and ttl, deleted);
`watch` alone streams fetchers only; an unknown stream is ERROR; the
watcher's own input is ignored; a watcher that goes away is dropped and the
node serves on. Each line has memcached's field names in memcached's order,
checked against Debian's memcached's own watch output for the same gets and
sets. TAP."""
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

SCRIPT = [
    (b"set foo 5 0 3\r\nbar", b"\r\n"),
    (b"get foo nope", b"END\r\n"),
    (b"set n 0 100 1\r\n1", b"\r\n"),
    (b"add n 0 0 1\r\n3", b"\r\n"),
    (b"cas n 0 0 1 999\r\n3", b"\r\n"),
    (b"replace none 0 0 1\r\n3", b"\r\n"),
    (b"mg n v", b"\r\n1\r\n"),
    (b"ms m 2\r\nhi", b"\r\n"),
    (b"md m", b"\r\n"),
    (b"delete foo", b"\r\n"),
    (b"delete foo", b"\r\n"),
]
# (type, key, status-or-cmd) in order: what the script must show.
WANT = [
    ("item_store", "foo", "stored", "set", "0"),
    ("item_get", "foo", "found"),
    ("item_get", "nope", "not_found"),
    ("item_store", "n", "stored", "set", "100"),
    ("item_store", "n", "not_stored", "add", "0"),
    ("item_store", "n", "exists", "cas", "0"),
    ("item_store", "none", "not_stored", "replace", "0"),
    ("item_get", "n", "found"),
    ("item_store", "m", "stored", "set", "0"),
    ("deleted", "m", "md"),
    ("deleted", "foo", "delete"),
]


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def summary(line):
    f = fields(line)
    if f.get("type") == "item_store":
        return (f["type"], f["key"], f["status"], f["cmd"], f["ttl"])
    if f.get("type") == "item_get":
        return (f["type"], f["key"], f["status"])
    if f.get("type") == "deleted":
        return (f["type"], f["key"], f["cmd"])
    return (f.get("type"), line)


def run(port, watch_cmd, script, want=0):
    """Start a watcher, run script on another connection, return (the
    watcher, its reply to `watch`, its lines): read until `want` lines came
    (10 s at most), then until a second passes without one (any extra line
    shows)."""
    w = socket.create_connection(("127.0.0.1", port), timeout=10)
    w.sendall(watch_cmd + b"\r\n")
    first = recv_until(w, b"\r\n", timeout=10)
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    for line, end in script:
        c.sendall(line + b"\r\n")
        recv_until(c, end, timeout=10)
    c.close()
    buf = b""
    deadline = time.monotonic() + 10
    while buf.count(b"\n") < want and time.monotonic() < deadline:
        w.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            got = w.recv(65536)
        except socket.timeout:
            break
        if not got:
            break
        buf += got
    w.settimeout(1.0)
    try:
        while True:
            got = w.recv(65536)
            if not got:
                break
            buf += got
    except socket.timeout:
        pass
    return w, first, buf.decode(errors="replace").splitlines()


node = Node(args=["-t", "2"]).start()
mc = None
try:
    w, first, lines = run(node.port, b"watch fetchers mutations deletions", SCRIPT, len(WANT))
    got = [summary(x) for x in lines]
    tap.ok(first == b"OK\r\n" and got == WANT,
           "watch fetchers mutations deletions: OK, then every get, store and delete of the "
           "script (classic and meta) in order", (first, lines))
    tap.ok(all(re.match(r"ts=\d+\.\d+ gid=\d+ type=", x) for x in lines)
           and len({fields(x)["gid"] for x in lines}) == len(lines),
           "each line starts ts=SEC.USEC gid=N type=..., gids distinct", lines[:3])
    # The watcher's own input is ignored; it keeps streaming.
    w.sendall(b"get foo\r\nversion\r\n")
    c = socket.create_connection(("127.0.0.1", node.port), timeout=10)
    c.sendall(b"get n\r\n")
    recv_until(c, b"END\r\n")
    line = recv_until(w, b"\n", timeout=5)
    tap.ok(line.startswith(b"ts=") and b"type=item_get key=n status=found" in line,
           "a watcher's own commands are ignored; its stream goes on", line)
    w.close()
    c.sendall(b"get n\r\nversion\r\n")
    r = recv_until(c, b"VERSION", timeout=5)
    tap.ok(r.startswith(b"VALUE n ") and b"END\r\nVERSION" in r,
           "the watcher gone, the node serves on", r)
    c.close()

    _w, first, lines = run(node.port, b"watch", SCRIPT[:3], 2)
    tap.ok(first == b"OK\r\n" and [summary(x)[0] for x in lines] == ["item_get", "item_get"],
           "watch alone: fetchers only", lines)
    _w.close()
    s = socket.create_connection(("127.0.0.1", node.port), timeout=10)
    s.sendall(b"watch fetchers bogus\r\nversion\r\n")
    r = recv_until(s, b"VERSION", timeout=5)
    tap.ok(r.startswith(b"ERROR\r\nVERSION"),
           "an unknown stream: ERROR, and the connection is not a watcher", r)
    s.close()

    if os.access(MEMCACHED, os.X_OK):
        port = free_port()
        cmd = [MEMCACHED, "-l", "127.0.0.1", "-p", str(port), "-U", "0"]
        if os.getuid() == 0:
            cmd += ["-u", "nobody"]
        mc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: mc.poll() is not None or can_connect(port), 10)
        script = SCRIPT[:4]
        _w, _f, mlines = run(port, b"watch fetchers mutations", script)
        _w.close()
        _w, _f, rlines = run(node.port, b"watch fetchers mutations", script)
        _w.close()

        def shapes(lines):
            return {fields(x)["type"]: [kv.split("=", 1)[0] for kv in x.split()]
                    for x in lines if "type=" in x}
        ms, rs = shapes(mlines), shapes(rlines)
        tap.ok(ms and all(rs.get(k) == v for k, v in ms.items()),
               "the same field names in the same order as memcached's item_get and "
               "item_store lines", (ms, rs))
    else:
        tap.skip("field order against memcached", "memcached is not installed")
finally:
    node.stop()
    if mc is not None and mc.poll() is None:
        mc.send_signal(signal.SIGKILL)
        mc.wait()
tap.done()
