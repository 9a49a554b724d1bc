#!/usr/bin/env python3
"""Loader for node_bench.sh: N sets of fixed-size values into a memcached-
protocol server, pipelined in batches, then prints
`items <curr_items> rss_kb <VmRSS of pid>`.

usage: node_load.py PORT PID [N] [VALUE_BYTES | mix]
(mix: values of 64-1024 bytes, 64 + (i * 7919) % 961 for item i.)
"""
import socket
import sys


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    port, pid = int(sys.argv[1]), int(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 1000000
    arg = sys.argv[4] if len(sys.argv) > 4 else "100"
    fixed = None if arg == "mix" else int(arg)
    big = b"v" * (fixed if fixed is not None else 1024)

    def size_of(i):
        return fixed if fixed is not None else 64 + (i * 7919) % 961
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    batch = 1000
    for start in range(0, n, batch):
        end = min(n, start + batch)
        req = b"".join(b"set key:%08d 0 0 %d\r\n%s\r\n" % (i, size_of(i), big[:size_of(i)])
                       for i in range(start, end))
        s.sendall(req)
        want = (end - start) * len(b"STORED\r\n")
        got = 0
        while got < want:
            d = s.recv(1 << 20)
            if not d:
                sys.exit("connection closed")
            if b"SERVER_ERROR" in d:
                sys.exit("server error: %r" % d[:200])
            got += len(d)
    s.sendall(b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        d = s.recv(65536)
        if not d:
            break
        buf += d
    items = 0
    for line in buf.split(b"\r\n"):
        f = line.split()
        if len(f) == 3 and f[1] == b"curr_items":
            items = int(f[2])
    print("items %d rss_kb %d" % (items, rss_kb(pid)))


if __name__ == "__main__":
    main()
