#!/usr/bin/env python3
"""ElastiCache's auto-discovery (`config get cluster`, spoken by AWS's
cluster clients) against real nodes (issue 27): the reply's framing as
ElastiCache sends it (CONFIG cluster 0 <bytes>, the version line, the
members as host|ip|port, a blank line, END), the version is the epoch and
follows a join, every member is listed; a plain node names itself at
version 0; other `config get` keys answer ERROR. TAP."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
from rctest import Node, Tap  # noqa: E402

tap = Tap()


def discover(port):
    """(version, [(host, ip, port)]) from a node, or the raw reply."""
    c = lg.Conn(("127.0.0.1", port))
    try:
        c.send(b"config get cluster\r\n")
        head = c.readline()
        m = re.match(rb"^CONFIG cluster 0 (\d+)$", head)
        if not m:
            return head
        body = c.readn(int(m.group(1)))   # the block and its CRLF
        tail = c.readline()
    finally:
        c.close()
    lines = body.split(b"\n")
    if tail != b"END" or len(lines) != 3 or lines[2] != b"":
        return body + tail
    members = [tuple(x.split(b"|")) for x in lines[1].split(b" ")]
    return int(lines[0]), [(h.decode(), i.decode(), int(p)) for h, i, p in members]


def raw(port, line):
    c = lg.Conn(("127.0.0.1", port))
    try:
        c.send(line + b"\r\n")
        return c.readline()
    finally:
        c.close()


with Node() as n:
    got = discover(n.port)
    tap.eq(got, (0, [("127.0.0.1", "127.0.0.1", n.port)]),
           "a plain node: version 0, itself as host|ip|port")
    tap.eq(raw(n.port, b"config get nothing"), b"ERROR", "config get <other key>: ERROR")

why = lg.supports_cluster()
if why:
    tap.skip("config get cluster in a cluster", why)
    tap.done()
cl, ok = lg.start_cluster(tap, ["a", "b"])
try:
    if ok:
        want = sorted(("127.0.0.1", "127.0.0.1", cl.nodes[i].port) for i in ("a", "b"))
        got = [discover(cl.nodes[i].port) for i in ("a", "b")]
        tap.ok(all(isinstance(g, tuple) and g[0] == 1 and sorted(g[1]) == want for g in got),
               "epoch 1: every node answers version 1 and both members", got)
        d = cl.add("c")
        rc, out, err = cl.ctl("join", "c", d.addr_s)
        tap.ok(rc == 0, "ringctl join c", (rc, err[-400:]))
        cl.converged(2, ["a", "b", "c"])
        want = sorted(("127.0.0.1", "127.0.0.1", cl.nodes[i].port) for i in ("a", "b", "c"))
        got = [discover(cl.nodes[i].port) for i in ("a", "b", "c")]
        tap.ok(all(isinstance(g, tuple) and g[0] == 2 and sorted(g[1]) == want for g in got),
               "after the join: version 2 (the epoch) and the three members, on every node", got)
finally:
    lg.close_cluster(tap, cl)
    lg.kill_all()
tap.done()
