#!/usr/bin/env python3
"""SIGTERM while replies are in flight: the node stops accepting, the
client still receives every byte it was owed (including a multi-get paused
on a full output queue), then EOF, and the node exits 0. TAP."""
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import Tap, Node, request, wait_until, can_connect  # noqa: E402

tap = Tap()
node = Node(args=["-t", "2"])
try:
    node.start()
    s = node.connect()
    v = b"z" * (256 * 1024)
    tap.eq(request(s, b"set v 0 0 %d\r\n" % len(v) + v + b"\r\n", b"\r\n"), b"STORED\r\n",
           "set 256 KiB")
    nkeys = 64   # 16 MiB of replies: well past the output cap
    s.sendall(b"get" + b" v" * nkeys + b"\r\n")
    # Wait (polling stats on another connection) until the node has written
    # what the socket buffers take and is holding the rest.

    def written():
        c = node.connect()
        r = request(c, b"stats\r\n", b"END\r\n")
        c.close()
        for line in r.split(b"\r\n"):
            if line.startswith(b"STAT bytes_written "):
                return int(line.split()[2]) > 64 * 1024
        return False

    tap.ok(wait_until(written, 5), "node is writing the multi-get")
    node.proc.send_signal(15)
    tap.ok(wait_until(lambda: not can_connect(node.port), 5), "stops accepting after SIGTERM")
    want = nkeys * (len(b"VALUE v 0 %d\r\n" % len(v)) + len(v) + 2) + 5
    got = bytearray()
    s.settimeout(10)
    while True:
        try:
            d = s.recv(1 << 20)
        except socket.timeout:
            break
        if not d:
            break
        got += d
    tap.eq(len(got), want, "every byte of the in-flight multi-get arrived")
    tap.ok(bytes(got[-5:]) == b"END\r\n", "reply ends with END")
    s.close()
    try:
        rc = node.proc.wait(10)
    except Exception:
        rc = None
    tap.eq(rc, 0, "exit status 0")
finally:
    node.stop()
tap.done()
