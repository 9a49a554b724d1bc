#!/usr/bin/env python3
"""ringcached driven by Debian's python3-pymemcache: every command, noreply,
a multi-get of 20,000 keys, 1 MiB values, concurrent clients. TAP."""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import Tap, Node, request, recv_until  # noqa: E402

try:
    from pymemcache.client.base import Client
    from pymemcache.exceptions import MemcacheServerError
except ImportError:
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        from pymemcache.client.base import Client
        from pymemcache.exceptions import MemcacheServerError
    except ImportError:
        print("1..0 # SKIP python3-pymemcache not installed")
        sys.exit(0)

tap = Tap()
node = Node(args=["-t", "4", "-m", "256"])
try:
    node.start()
    mc = Client(("127.0.0.1", node.port), timeout=20, connect_timeout=5,
                default_noreply=False)

    # storage commands
    tap.ok(mc.set("a", b"1", expire=100, flags=7), "set")
    tap.eq(mc.get("a"), b"1", "get")
    tap.eq(mc.add("a", b"2"), False, "add existing -> NOT_STORED")
    tap.eq(mc.add("b", b"2"), True, "add new")
    tap.eq(mc.replace("zz", b"x"), False, "replace missing -> NOT_STORED")
    tap.eq(mc.replace("b", b"3"), True, "replace existing")
    tap.eq(mc.append("b", b"4"), True, "append")
    tap.eq(mc.prepend("b", b"0"), True, "prepend")
    tap.eq(mc.get("b"), b"034", "append+prepend value")
    tap.eq(mc.append("nope", b"x"), False, "append missing -> NOT_STORED")
    val, cas = mc.gets("b")
    tap.ok(val == b"034" and cas is not None and int(cas) > 0, "gets returns value and cas")
    tap.eq(mc.cas("b", b"5", cas), True, "cas with the current unique")
    tap.eq(mc.cas("b", b"6", cas), False, "cas with a stale unique -> EXISTS")
    tap.eq(mc.cas("nope", b"6", cas), None, "cas on a missing key -> NOT_FOUND")
    _, cas2 = mc.gets("b")
    tap.ok(cas2 != cas, "cas changes after a store")
    tap.eq(mc.delete("b"), True, "delete")
    tap.eq(mc.delete("b"), False, "delete missing")
    tap.eq(mc.get("b"), None, "deleted key misses")

    # incr/decr
    mc.set("n", b"10")
    tap.eq(mc.incr("n", 5), 15, "incr")
    tap.eq(mc.decr("n", 20), 0, "decr stops at 0")
    mc.set("n", b"18446744073709551615")
    tap.eq(mc.incr("n", 2), 1, "incr wraps at 2^64")
    tap.eq(mc.incr("missing", 1), None, "incr missing")
    mc.set("s", b"abc")
    try:
        mc.incr("s", 1)
        tap.ok(False, "incr non-numeric raises")
    except Exception as e:  # pymemcache raises MemcacheClientError
        tap.ok("non-numeric" in str(e), "incr non-numeric -> CLIENT_ERROR", e)

    # touch, gat (raw: pymemcache 3.5 has no gat)
    tap.eq(mc.touch("a", 1000), True, "touch")
    tap.eq(mc.touch("nope", 10), False, "touch missing")
    s = node.connect()
    r = request(s, b"gat 1000 a nope\r\n", b"END\r\n")
    tap.eq(r, b"VALUE a 7 1\r\n1\r\nEND\r\n", "gat")
    r = request(s, b"gats 1000 a\r\n", b"END\r\n")
    tap.ok(r.startswith(b"VALUE a 7 1 ") and r.endswith(b"\r\n1\r\nEND\r\n"), "gats", r)
    s.close()

    # noreply (pymemcache's noreply=True sends "noreply")
    mc.set("nr", b"v", noreply=True)
    mc.add("nr", b"w", noreply=True)
    mc.append("nr", b"x", noreply=True)
    mc.incr("cnt", 1, noreply=True)
    mc.delete("gone", noreply=True)
    tap.eq(mc.get("nr"), b"vx", "noreply commands applied, replies suppressed")
    tap.eq(mc.version(), b"1.6.21-ringcache-0.1.0", "version after noreply (stream in step)")

    # flags round trip
    mc.set("f", b"x", flags=4294967295)
    s = node.connect()
    tap.eq(request(s, b"get f\r\n", b"END\r\n"), b"VALUE f 4294967295 1\r\nx\r\nEND\r\n",
           "flags echoed")
    s.close()

    # multi-get of 20,000 keys
    keys = ["key:%05d" % i for i in range(20000)]
    failed = mc.set_many({k: k.encode() * 3 for k in keys}, noreply=False)
    tap.eq(failed, [], "set_many 20000 keys")
    got = mc.get_many(keys + ["missing-%d" % i for i in range(100)])
    tap.eq(len(got), 20000, "get_many 20000 keys: all hits, misses omitted")
    tap.ok(all(got[k] == k.encode() * 3 for k in keys), "get_many values right")
    st = mc.stats()
    tap.ok(st[b"cmd_get"] >= 20100, "cmd_get counts keys (%d)" % st[b"cmd_get"])

    # 1 MiB values
    big = os.urandom(1024 * 1024 - 1024)
    tap.eq(mc.set("big", big), True, "set 1 MiB - 1 KiB")
    tap.eq(mc.get("big"), big, "get 1 MiB - 1 KiB intact")
    try:
        mc.set("big", os.urandom(1024 * 1024 + 1024))
        tap.ok(False, "1 MiB + 1 KiB refused")
    except MemcacheServerError as e:
        tap.ok("object too large for cache" in str(e), "1 MiB + 1 KiB -> SERVER_ERROR too large", e)
    tap.eq(mc.get("big"), None, "failed set dropped the old value")
    tap.eq(mc.version(), b"1.6.21-ringcache-0.1.0", "stream in step after a refused value")

    # concurrent clients
    errors = []

    def worker(tid):
        c = Client(("127.0.0.1", node.port), timeout=20, connect_timeout=5,
                   default_noreply=False)
        try:
            for i in range(300):
                k = "t%d:%d" % (tid, i)
                v = (("%d-%d-" % (tid, i)) * (1 + i % 50)).encode()
                if not c.set(k, v):
                    errors.append("set %s" % k)
                if c.get(k) != v:
                    errors.append("get %s" % k)
                c.incr("shared", 1)
            many = c.get_many(["t%d:%d" % (tid, i) for i in range(300)])
            if len(many) != 300:
                errors.append("get_many %d: %d" % (tid, len(many)))
        except Exception as e:
            errors.append(repr(e))
        finally:
            c.close()

    mc.set("shared", b"0")
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    tap.ok(not any(t.is_alive() for t in threads), "8 concurrent clients finished")
    tap.eq(errors[:5], [], "concurrent clients saw their own values")
    tap.eq(mc.get("shared"), b"2400", "concurrent incr: none lost")

    # many connections at once (well under -c 1024), each served
    socks = [node.connect() for _ in range(600)]
    for i, c in enumerate(socks):
        c.sendall(b"set c%d 0 0 1\r\nx\r\n" % i)
    answered = sum(recv_until(c, b"\r\n", timeout=10) == b"STORED\r\n" for c in socks)
    tap.eq(answered, 600, "600 simultaneous connections all served")
    st = mc.stats()
    tap.ok(st[b"curr_connections"] >= 601, "curr_connections counts them (%d)"
           % st[b"curr_connections"])
    for c in socks:
        c.close()

    # flush_all and stats
    tap.eq(mc.flush_all(), True, "flush_all")
    tap.eq(mc.get("a"), None, "flushed")
    st = mc.stats()
    for name in (b"curr_connections", b"total_connections", b"threads", b"limit_maxbytes",
                 b"bytes_read", b"bytes_written", b"uptime", b"pid"):
        tap.ok(name in st, "stats has %s" % name.decode())
    tap.eq(st[b"threads"], 4, "stats threads")
    tap.eq(st[b"limit_maxbytes"], 256 << 20, "stats limit_maxbytes")
    settings = mc.stats("settings")
    tap.eq(settings.get(b"item_size_max"), 1 << 20, "stats settings item_size_max")
    mc.close()
    tap.ok(node.alive(), "node still running")
finally:
    rc = node.stop()
tap.eq(rc, 0, "SIGTERM exits 0")
tap.done()
