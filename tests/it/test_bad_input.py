#!/usr/bin/env python3
"""Bad input and load against a real ringcached: each case checks the reply
(or the close) and that another connection is still served. TAP."""
import os
import random
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import (Tap, Node, request, recv_until, recv_exact_or_close,  # noqa: E402
                    sanitized, wait_until, rss_kb)

VERSION = b"VERSION 1.6.21-ringcache-0.1.0\r\n"
tap = Tap()


def served(node, what):
    """A fresh connection gets answered."""
    try:
        s = node.connect(timeout=5)
        r = request(s, b"set probe 0 0 2\r\nok\r\nget probe\r\n", b"END\r\n", timeout=5)
        s.close()
    except OSError as e:
        r = repr(e).encode()
    return tap.eq(r, b"STORED\r\nVALUE probe 0 2\r\nok\r\nEND\r\n",
                  "another connection served after %s" % what)


def closed_without_reply(s, what):
    data, closed = recv_exact_or_close(s, timeout=5)
    tap.ok(closed and data == b"", "%s: connection closed without a reply" % what,
           "closed=%r data=%r" % (closed, data[:200]))


node = Node(args=["-t", "2", "-m", "32", "-c", "20"])
try:
    node.start()

    # 1. a non-get line of 2048+ bytes without a newline
    s = node.connect()
    s.sendall(b"set " + b"x" * 3000)
    closed_without_reply(s, "3000-byte line")
    s.close()
    served(node, "an over-long line")

    # 2. an oversize value: swallowed, SERVER_ERROR, connection still in step
    s = node.connect()
    big = b"v" * (2 << 20)
    r = request(s, b"set a 0 0 %d\r\n" % len(big) + big + b"\r\nversion\r\n", VERSION)
    tap.eq(r, b"SERVER_ERROR object too large for cache\r\n" + VERSION,
           "2 MiB value: SERVER_ERROR, data swallowed")
    s.close()
    served(node, "an oversize value")

    # 3. binary garbage (seeded, so a failure reproduces)
    rnd = random.Random(3)
    s = node.connect()
    garbage = bytes(rnd.randrange(1, 256) for _ in range(1 << 16)).replace(b"\x80", b"\x81")
    try:
        s.sendall(b"version\r\n" + garbage)
        data, closed = recv_exact_or_close(s, timeout=3)
        tap.ok(data.startswith(VERSION), "garbage: answered what was valid first")
    except (ConnectionResetError, BrokenPipeError):
        tap.ok(True, "garbage: connection closed")
    s.close()
    tap.ok(node.alive(), "garbage: node still running")
    served(node, "binary garbage")

    # 4. the binary protocol's magic byte
    s = node.connect()
    s.sendall(b"\x80\x0a\x00\x00\x00\x00\x00\x00")
    closed_without_reply(s, "first byte 0x80")
    s.close()
    served(node, "0x80")

    # 5. an HTTP request
    s = node.connect()
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    closed_without_reply(s, "HTTP request")
    s.close()

    # 6. half a command, then silence: others unaffected, and it resumes
    half = node.connect()
    half.sendall(b"set h 0 0 10\r\nabc")
    half2 = node.connect()
    half2.sendall(b"get h")
    served(node, "half a command")
    half.sendall(b"defghij\r\n")
    tap.eq(recv_until(half, b"\r\n", timeout=5), b"STORED\r\n", "half command completes later")
    half2.sendall(b"\r\n")
    tap.eq(recv_until(half2, b"END\r\n", timeout=5),
           b"VALUE h 0 10\r\nabcdefghij\r\nEND\r\n", "half get line completes later")
    half.close()
    half2.close()

    # 7. more connections than -c 20: told so and closed
    conns = []
    extra = None
    for i in range(25):
        c = node.connect()
        conns.append(c)
        c.sendall(b"version\r\n")
        r = recv_until(c, b"\r\n", timeout=5)
        if r != VERSION:
            extra = r
            break
    tap.eq(extra, b"ERROR Too many open connections\r\n", "over -c: ERROR Too many open connections")
    data, closed = recv_exact_or_close(conns[-1], timeout=5)
    tap.ok(closed, "over -c: then closed")
    for c in conns:
        c.close()
    ok = wait_until(lambda: request(node.connect(), b"version\r\n", b"\r\n") == VERSION, 5)
    tap.ok(ok, "after closing them, new connections are served again")

    # 8. a client that sends gets for a big value and never reads: its
    # replies stop at the output cap, its input at 1 MiB, and after 5 s
    # without a byte written the node closes it
    s = node.connect()
    v = b"b" * (512 * 1024)
    tap.eq(request(s, b"set big 0 0 %d\r\n" % len(v) + v + b"\r\n", b"\r\n"), b"STORED\r\n",
           "set 512 KiB")
    flood = node.connect()
    flood.setblocking(False)
    sent = 0
    closed = False
    req = b"get big\r\n" * 1000
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not closed:
        try:
            sent += flood.send(req)
        except BlockingIOError:
            time.sleep(0.01)
        except (BrokenPipeError, ConnectionResetError):
            closed = True
    tap.ok(closed, "flood: the node closed a client that sends %d gets and never reads"
           % (sent // 9))
    rss = rss_kb(node.pid)
    if sanitized():
        tap.skip("flood: node RSS stays bounded", "sanitizer build")
    else:
        tap.ok(rss < 160 * 1024, "flood: node RSS %d KiB stays bounded" % rss)
    served(node, "a client that never reads")
    flood.close()
    s.close()

    # 9. a write flood larger than -m 32: RSS stays within -m + overhead
    s = node.connect()
    val = b"w" * 100000
    for j in range(20):          # 2000 x 100 KB = 200 MB through a 32 MiB store
        s.sendall(b"".join(b"set w%d 0 0 %d noreply\r\n" % (j * 100 + i, len(val)) + val
                           + b"\r\n" for i in range(100)))
    r = request(s, b"stats\r\n", b"END\r\n")
    stats = dict(l.split(b" ")[1:3] for l in r.split(b"\r\n") if l.startswith(b"STAT "))
    tap.ok(int(stats[b"evictions"]) > 0, "write flood evicts (%s)" % stats[b"evictions"].decode())
    tap.ok(int(stats[b"bytes"]) <= 32 << 20, "store bytes %s <= -m" % stats[b"bytes"].decode())
    rss = rss_kb(node.pid)
    # Documented overhead (docs/ringcached.1): buffers, threads, hash table.
    if sanitized():
        tap.skip("write flood: RSS within -m 32 MiB + 48 MiB", "sanitizer build")
    else:
        tap.ok(rss < (32 + 48) * 1024, "write flood: RSS %d KiB within -m 32 MiB + 48 MiB" % rss)
    s.close()
    served(node, "a write flood")
    tap.ok(node.alive(), "node survived everything")
finally:
    rc = node.stop()
tap.eq(rc, 0, "SIGTERM exits 0")
tap.done()
