#!/usr/bin/env python3
"""-Y / --auth-file (docs/security.md, "Client authentication"): a node
started with memcached's authfile answers nothing but a login (a `set`
whose data is `user password`) until one succeeds, with memcached's exact
replies. A table of exchanges, one request at a time on a fresh
connection, runs against ringcached and against Debian's memcached 1.6.18
(/usr/bin/memcached -Y, or $RC_MEMCACHED) to show the same bytes; the
cases where memcached 1.6.18 answers otherwise (it differs from 1.6.45
there too, or has a bug) run on ringcached only and say why. Then:
pipelined lines, the login counters, the failed-login limit, pymemcache
(whose set is the login), a second connection's own login, bad files at
start (file:line, exit 1), SIGHUP re-reading the file (a user added, a
user removed while a logged-in connection stays, a bad or unreadable file
kept out with FILE:LINE in the log, all without -Z), and a two-node
cluster with -Y whose peers forward and replicate (the rc_peer proof is
their login). TAP."""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import meta_lib as ml  # noqa: E402
from rctest import (RINGCACHED, Node, Tap, recv_exact_or_close, recv_until,  # noqa: E402
                    request)

try:
    from pymemcache.client.base import Client
    from pymemcache.exceptions import MemcacheClientError
except ImportError:
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        from pymemcache.client.base import Client
        from pymemcache.exceptions import MemcacheClientError
    except ImportError:
        Client = None

# memcached's t/authfile.
AUTHFILE = "foo:bar\nbaaaz:quux\n"
UNAUTH = b"CLIENT_ERROR unauthenticated\r\n"
FAILURE = b"CLIENT_ERROR authentication failure\r\n"
LOGIN = b"set foo 0 0 7\r\nfoo bar\r\n"
FAILURES_MAX = 5   # PROTO_AUTH_FAILURES_MAX

# (description, [(request, reply terminator)], expected replies). Every
# reply is read up to its terminator; "<EOF>" means the server hung up.
CASES = [
    ("get before a login", [(b"get foo\r\n", b"\r\n")], [UNAUTH]),
    ("stats before a login", [(b"stats\r\n", b"\r\n")], [UNAUTH]),
    ("version before a login", [(b"version\r\n", b"\r\n")], [UNAUTH]),
    ("a meta get before a login", [(b"mg foo v\r\n", b"\r\n")], [UNAUTH]),
    ("a meta set line before a login", [(b"ms foo 2 T0\r\n", b"\r\n")], [UNAUTH]),
    # memcached 1.6.45 hangs up on a line under 6 bytes; 1.6.18 and we answer.
    ("mn (a short line) before a login", [(b"mn\r\n", b"\r\n")], [UNAUTH]),
    ("quit before a login is refused too", [(b"quit\r\n", b"\r\n")], [UNAUTH]),
    ("an unknown command before a login", [(b"hello\r\n", b"\r\n")], [UNAUTH]),
    ("set with too few tokens", [(b"set a 0 5\r\n", b"\r\n")], [UNAUTH]),
    ("set with a negative length", [(b"set foo 0 0 -1\r\n", b"\r\n")], [UNAUTH]),
    ("a login with no space in its data",
     [(b"set foo 0 0 2\r\nhi\r\n", b"\r\n")], [b"CLIENT_ERROR bad authentication token format\r\n"]),
    ("a login with a wrong password", [(b"set foo 0 0 7\r\nfoo bab\r\n", b"\r\n")], [FAILURE]),
    ("a login of an unknown user", [(b"set foo 0 0 7\r\nbar foo\r\n", b"\r\n")], [FAILURE]),
    ("a login with another user's password",
     [(b"set foo 0 0 8\r\nfoo quux\r\n", b"\r\n")], [FAILURE]),
    ("a login whose block does not end in \\r\\n",
     [(b"set foo 0 0 7\r\nfoo barXX", b"\r\n")], [b"CLIENT_ERROR bad command line termination\r\n"]),
    ("a good login: STORED, then the commands work",
     [(LOGIN, b"\r\n"), (b"set toast 0 0 2\r\nhi\r\n", b"\r\n"), (b"get toast\r\n", b"END\r\n"),
      (b"mn\r\n", b"\r\n"), (b"ms mtoast 2 T0\r\nho\r\n", b"\r\n"), (b"mg mtoast v\r\n", b"\r\n"),
      (b"delete toast\r\n", b"\r\n")],
     [b"STORED\r\n", b"STORED\r\n", b"VALUE toast 0 2\r\nhi\r\nEND\r\n", b"MN\r\n", b"HD\r\n",
      b"VA 2\r\nho\r\n", b"DELETED\r\n"]),
    ("a failed login, then a good one on the same connection",
     [(b"set foo 0 0 7\r\nfoo bab\r\n", b"\r\n"), (LOGIN, b"\r\n"), (b"get nothing\r\n", b"END\r\n")],
     [FAILURE, b"STORED\r\n", b"END\r\n"]),
    ("the second user of the file, any key, flags and exptime",
     [(b"set anything 12 300 10\r\nbaaaz quux\r\n", b"\r\n"), (b"get nothing\r\n", b"END\r\n")],
     [b"STORED\r\n", b"END\r\n"]),
    ("a login with noreply is still answered",
     [(b"set foo 0 0 7 noreply\r\nfoo bar\r\n", b"\r\n"), (b"mn\r\n", b"\r\n")],
     [b"STORED\r\n", b"MN\r\n"]),
    ("2100 bytes without a line end: the server hangs up", [(b"x" * 2100, b"\r\n")], [b"<EOF>"]),
]

# Where memcached 1.6.18 answers otherwise: ringcached only, with why.
OWN_CASES = [
    ("a login line with a leading space is not a login (1.6.45; 1.6.18 logs in)",
     [(b" " + LOGIN, UNAUTH * 2), (b"get foo\r\n", b"\r\n")], [UNAUTH * 2, UNAUTH]),
    ("a login's password is all after the first space (1.6.45; 1.6.18 takes one token)",
     [(b"set foo 0 0 11\r\nfoo bar baz\r\n", b"\r\n")], [FAILURE]),
    ("a login of over 16384 bytes: auth token too long (1.6.45; 1.6.18 reads it)",
     [(b"set foo 0 0 16385\r\n", b"\r\n")], [b"CLIENT_ERROR auth token too long\r\n"]),
    ("the binary protocol's magic byte: hung up (ringcached never speaks it)",
     [(b"\x80\x0a" + b"\x00" * 22, b"\r\n")], [b"<EOF>"]),
]


def talk(addr, steps, timeout=5.0):
    """Run steps on a fresh connection; the replies ("<EOF>" once closed)."""
    s = socket.create_connection(addr, timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    try:
        for req, term in steps:
            s.sendall(req)
            got = recv_until(s, term, timeout)
            if not got.endswith(term):
                rest, closed = recv_exact_or_close(s, 0.5)
                got += rest
                if closed:
                    got += b"<EOF>"
            out.append(got)
            if got.endswith(b"<EOF>"):
                break
        if len(out) < len(steps):
            out += [b""] * (len(steps) - len(out))
    finally:
        s.close()
    return out


def run_table(t, label, addr, cases):
    for desc, steps, want in cases:
        t.eq(b"".join(talk(addr, steps)), b"".join(want), "%s: %s" % (label, desc))


def stats_of(sock, arg=b""):
    sock.sendall(b"stats" + (b" " + arg if arg else b"") + b"\r\n")
    text = recv_until(sock, b"END\r\n").decode()
    return dict(m.groups() for m in re.finditer(r"STAT (\S+) (.*)\r\n", text))


def login(addr, data=b"foo bar"):
    s = socket.create_connection(addr, timeout=5)
    s.sendall(b"set x 0 0 %d\r\n%s\r\n" % (len(data), data))
    return s, recv_until(s, b"\r\n")


def check_counters(t, label, addr, path):
    """auth_cmds counts every checked login, auth_errors the failed ones;
    stats settings names the file (memcached's auth_enabled_ascii)."""
    s, r = login(addr)
    before = stats_of(s)
    talk(addr, [(b"set foo 0 0 7\r\nfoo bab\r\n", b"\r\n")])
    talk(addr, [(LOGIN, b"\r\n")])
    talk(addr, [(b"get foo\r\n", b"\r\n")])      # not a login: not counted
    after = stats_of(s)
    d = {k: int(after[k]) - int(before[k]) for k in ("auth_cmds", "auth_errors")}
    t.eq(d, {"auth_cmds": 2, "auth_errors": 1},
         "%s: a failed and a good login: auth_cmds +2, auth_errors +1" % label)
    t.eq(stats_of(s, b"settings").get("auth_enabled_ascii"), path,
         "%s: stats settings: auth_enabled_ascii is the file" % label)
    s.close()


def own_checks(t, node, path):
    addr = ("127.0.0.1", node.port)

    # Pipelined: every line is answered (memcached 1.6.18 keeps only the
    # last reply of what one read brings before the login).
    s = socket.create_connection(addr, timeout=5)
    s.sendall(b"get a\r\nhello\r\nset foo 0 0 7\r\nfoo bab\r\n" + LOGIN + b"get a\r\n")
    got = recv_until(s, b"END\r\n")
    s.close()
    t.eq(got, UNAUTH * 2 + FAILURE + b"STORED\r\nEND\r\n",
         "pipelined before the login: each line gets its reply, in order")

    # The login in pieces: byte by byte.
    s = socket.create_connection(addr, timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(len(LOGIN)):
        s.sendall(LOGIN[i:i + 1])
    got = recv_until(s, b"\r\n")
    s.sendall(b"mn\r\n")
    got += recv_until(s, b"MN\r\n")
    s.close()
    t.eq(got, b"STORED\r\nMN\r\n", "a login sent byte by byte")

    # The failed-login limit: FAILURES_MAX replies, then the close.
    s, _ = login(addr)
    kicks = int(stats_of(s).get("auth_kicks", -1))
    g = socket.create_connection(addr, timeout=5)
    g.sendall(b"set foo 0 0 7\r\nfoo bab\r\n" * (FAILURES_MAX + 1))
    got, closed = recv_exact_or_close(g, 10)
    g.close()
    t.ok(got == FAILURE * FAILURES_MAX and closed,
         "%d failed logins: %d failure replies, then the connection is closed"
         % (FAILURES_MAX, FAILURES_MAX), (got, closed))
    t.eq(int(stats_of(s).get("auth_kicks", -1)) - kicks, 1, "counted in auth_kicks")
    s.close()

    # pymemcache: its set is the login (STORED -> True); a second client
    # still has to log in.
    if Client is None:
        t.skip("pymemcache", "python3-pymemcache not installed")
        return
    mc = Client(addr, timeout=5, connect_timeout=5, default_noreply=False)
    try:
        mc.get("k")
        t.ok(False, "pymemcache before a login: refused")
    except MemcacheClientError as e:
        t.ok("unauthenticated" in str(e), "pymemcache get before a login: CLIENT_ERROR "
             "unauthenticated", e)
    try:
        mc.set("login", b"foo bab")
        t.ok(False, "pymemcache login with a wrong password: refused")
    except MemcacheClientError as e:
        t.ok("authentication failure" in str(e), "pymemcache login with a wrong password: "
             "CLIENT_ERROR authentication failure", e)
    t.ok(mc.set("login", b"foo bar") is True, "pymemcache set('login', 'foo bar') logs in")
    t.ok(mc.set("k", b"v", expire=0) is True and mc.get("k") == b"v"
         and mc.incr("n", 1) is None and mc.add("n", b"5") and mc.incr("n", 2) == 7
         and mc.delete("k") and mc.get("k") is None,
         "pymemcache after its login: set, get, add, incr, delete")
    mc2 = Client(addr, timeout=5, connect_timeout=5, default_noreply=False)
    try:
        mc2.get("n")
        t.ok(False, "a second pymemcache client still needs its own login")
    except MemcacheClientError:
        t.ok(True, "a second pymemcache client still needs its own login")
    t.ok(mc2.set("any", b"baaaz quux") and mc2.get("n") == b"7",
         "the second client logs in as the file's other user and reads the first's key")
    mc.close()
    mc2.close()


def bad_files(t, tmp):
    """Every bad file stops the start: exit 1, one line naming file:line."""
    cases = [
        ("missing", None, "missing: No such file or directory"),
        ("empty", "", "empty: no user:password line (the file is empty)"),
        ("nocolon", "foo:bar\nfoobar\n", "nocolon:2: no ':'"),
        ("blank", "foo:bar\n\nbaaaz:quux\n", "blank:2: an empty line"),
        ("nouser", ":bar\n", "nouser:1: an empty user name"),
        ("nopass", "foo:bar\nbaz:\n", "nopass:2: an empty password"),
        ("long", "foo:bar\nu:" + "p" * 260 + "\n", "long:2: a line over 255 bytes"),
        ("nine", "".join("u%d:p\n" % i for i in range(9)), "nine:9: more than 8 users"),
    ]
    for name, text, want in cases:
        path = os.path.join(tmp, name)
        if text is not None:
            with open(path, "w") as f:
                f.write(text)
        r = subprocess.run([RINGCACHED, "-l", "127.0.0.1", "-p", "0", "-Y", path],
                           capture_output=True, text=True, timeout=20)
        lines = r.stderr.splitlines()
        t.ok(r.returncode == 1 and len(lines) == 1 and (os.path.join(tmp, want) in lines[0]),
             "-Y %s: exit 1, one line: %s" % (name, want), (r.returncode, r.stderr[:300]))
    unreadable = os.path.join(tmp, "unreadable")
    with open(unreadable, "w") as f:
        f.write(AUTHFILE)
    os.chmod(unreadable, 0)
    if os.geteuid() == 0:
        t.skip("-Y unreadable: exit 1", "root reads any file")
    else:
        r = subprocess.run([RINGCACHED, "-p", "0", "-Y", unreadable], capture_output=True,
                           text=True, timeout=20)
        t.ok(r.returncode == 1 and "Permission denied" in r.stderr, "-Y unreadable: exit 1",
             (r.returncode, r.stderr))
    good = os.path.join(tmp, "good")
    with open(good, "w") as f:
        f.write(AUTHFILE)
    r = subprocess.run([RINGCACHED, "-Y", good, "--state-dir", tmp, "--id", "a"],
                       capture_output=True, text=True, timeout=20)
    t.ok(r.returncode == 2 and "-Y with --state-dir needs --token-file" in r.stderr,
         "-Y with --state-dir but no --token-file: refused, exit 2", (r.returncode, r.stderr))


def login_reply(addr, data):
    """The reply to one login on a fresh connection (b"" if refused)."""
    try:
        s, r = login(addr, data)
        s.close()
        return r
    except OSError:
        return b""


def log_has(path, text):
    with open(path, errors="replace") as f:
        return text in f.read()


def stopped_clean(t, node, log, what):
    """Stop node: exit 0 and no sanitizer report in its log (under ASan
    a leaked or twice-freed table of users shows here)."""
    alive = node.alive()
    rc = node.stop()
    with open(log, errors="replace") as f:
        text = f.read()
    t.ok(alive and rc == 0 and "Sanitizer" not in text and "runtime error" not in text,
         "%s: exits 0 on SIGTERM, no sanitizer report" % what, (alive, rc, text[-2000:]))


def sighup_reload(t, tmp):
    """SIGHUP re-reads the -Y file (no -Z: today's SIGHUP only reloads
    certificates, and without a handler it would end the node). Each
    check polls with a deadline: the reload runs on the node's own time."""
    path = os.path.join(tmp, "reload-auth")
    log = os.path.join(tmp, "reload.log")
    with open(path, "w") as f:
        f.write(AUTHFILE)
    node = Node(args=["-t", "2", "-m", "32", "-v", "-Y", path], stderr=log).start()
    lg.track(node.proc)
    addr = ("127.0.0.1", node.port)
    try:
        t.eq(login_reply(addr, b"newu newpw"), FAILURE, "SIGHUP: newu is not a user yet")

        # A user added: it can log in once the node has re-read the file.
        with open(path, "w") as f:
            f.write(AUTHFILE + "newu:newpw\n")
        os.kill(node.pid, signal.SIGHUP)
        t.ok(lg.wait_for(lambda: login_reply(addr, b"newu newpw") == b"STORED\r\n", 10),
             "SIGHUP after adding newu:newpw: newu logs in on a new connection",
             (node.alive(), login_reply(addr, b"newu newpw")))
        if not t.ok(node.alive(), "SIGHUP to a node with -Y and no -Z: it keeps running",
                    node.proc.returncode):
            return
        t.ok(lg.wait_for(lambda: log_has(log, "SIGHUP: -Y %s reloaded, 3 users" % path), 10),
             "SIGHUP: one INFO line with the number of users (3)")

        # A user removed: refused on a new connection, while a connection
        # that logged in as that user before the reload keeps working.
        old, r = login(addr, b"baaaz quux")
        t.eq(r, b"STORED\r\n", "SIGHUP: a connection logs in as baaaz before its removal")
        with open(path, "w") as f:
            f.write("foo:bar\nnewu:newpw\n")
        os.kill(node.pid, signal.SIGHUP)
        t.ok(lg.wait_for(lambda: login_reply(addr, b"baaaz quux") == FAILURE, 10),
             "SIGHUP after removing baaaz: a new login as baaaz fails",
             login_reply(addr, b"baaaz quux"))
        old.sendall(b"set kept 0 0 2\r\nok\r\nget kept\r\n")
        t.eq(recv_until(old, b"END\r\n"), b"STORED\r\nVALUE kept 0 2\r\nok\r\nEND\r\n",
             "... while baaaz's connection from before still sets and gets")
        old.close()

        # A bad file: the log names FILE:LINE, the users in use stay.
        with open(path, "w") as f:
            f.write("foo:bar\nbroken\nbaaaz:quux\n")
        os.kill(node.pid, signal.SIGHUP)
        want = "SIGHUP: -Y %s:2: no ':' (each line is user:password), keeping the old users" % path
        t.ok(lg.wait_for(lambda: log_has(log, want), 10),
             "SIGHUP with a line without ':': one ERR line naming FILE:2", want)
        t.ok(login_reply(addr, b"newu newpw") == b"STORED\r\n"
             and login_reply(addr, b"foo bar") == b"STORED\r\n"
             and login_reply(addr, b"baaaz quux") == FAILURE,
             "... and the old users still log in (foo, newu; not baaaz of the bad file)")
        s, _ = login(addr)
        t.ok(node.alive() and request(s, b"version\r\n").startswith(b"VERSION "),
             "... and the node keeps serving")
        s.close()

        # Unreadable: the node reads the file again as its own user.
        if os.geteuid() != 0:
            with open(path, "w") as f:
                f.write("other:pw\n")
            os.chmod(path, 0)
            os.kill(node.pid, signal.SIGHUP)
            want = "SIGHUP: -Y %s: Permission denied, keeping the old users" % path
            t.ok(lg.wait_for(lambda: log_has(log, want), 10)
                 and login_reply(addr, b"foo bar") == b"STORED\r\n",
                 "SIGHUP with an unreadable file: logged, the old users kept", want)
            os.chmod(path, 0o644)
    finally:
        stopped_clean(t, node, log, "the node whose -Y file was re-read")

    if os.geteuid() == 0:
        sighup_after_u(t, tmp)


def sighup_after_u(t, tmp):
    """As root: -u nobody drops privileges after the first read, so a
    SIGHUP reads the root-only file as nobody: Permission denied, logged,
    and the users of the start kept."""
    path = os.path.join(tmp, "root-only-auth")
    log = os.path.join(tmp, "reload-u.log")
    with open(path, "w") as f:
        f.write(AUTHFILE)
    os.chmod(path, 0o600)
    node = Node(args=["-t", "1", "-m", "16", "-u", "nobody", "-Y", path], stderr=log).start()
    lg.track(node.proc)
    addr = ("127.0.0.1", node.port)
    try:
        with open(path, "w") as f:
            f.write(AUTHFILE + "newu:newpw\n")
        os.kill(node.pid, signal.SIGHUP)
        want = "SIGHUP: -Y %s: Permission denied, keeping the old users" % path
        t.ok(lg.wait_for(lambda: log_has(log, want), 10), "-u nobody, a root-only -Y file: "
             "SIGHUP logs that it cannot read it", (want, node.alive()))
        t.ok(login_reply(addr, b"foo bar") == b"STORED\r\n"
             and login_reply(addr, b"newu newpw") == FAILURE and node.alive(),
             "... and keeps the users of the start (foo logs in, newu not)")
    finally:
        stopped_clean(t, node, log, "the -u nobody node")


def cluster(t, tmp):
    """Two nodes, R=2, both with -Y: a client logged in at a gets every key
    (forwarded to b when b is the primary) and its writes are replicated:
    the peers log in to each other with the rc_peer proof."""
    why = lg.supports_cluster()
    if why:
        t.skip("cluster with -Y", why)
        return
    path = os.path.join(tmp, "cluster-auth")
    with open(path, "w") as f:
        f.write(AUTHFILE)
    cl = lg.Cluster(replicas=2, mem=32, node_args=["-Y", path])
    try:
        for i in ("a", "b"):
            cl.add(i)
        rc, out, err = cl.ctl("init", "--members", cl.write_members(["a", "b"]))
        if not t.ok(rc == 0, "cluster with -Y: ringctl init of a b", (rc, out, err)):
            return

        def epoch_of(n):
            try:
                s, r = login(n.addr)
                s.sendall(b"epoch\r\n")
                e = recv_until(s, b"\r\n")
                s.close()
                return e
            except OSError as e:
                return str(e)
        t.ok(lg.wait_for(lambda: all(epoch_of(n) == b"EPOCH 1 0\r\n"
                                     for n in cl.nodes.values()), 20),
             "cluster with -Y: both nodes at epoch 1 (read after a login)",
             {i: epoch_of(n) for i, n in cl.nodes.items()})
        keys = ["ck-%d" % i for i in range(40)]
        own = lg.locate(cl.store_active(), keys)
        remote = [k for k in keys if own[k][0] == "b"]
        s, r = login(cl.nodes["a"].addr)
        t.eq(r, b"STORED\r\n", "cluster with -Y: a client logs in at a")
        for k in keys:
            s.sendall(b"set %s 0 0 2\r\nv1\r\n" % k.encode())
        got = recv_until(s, b"STORED\r\n" * len(keys), timeout=20)
        t.eq(got, b"STORED\r\n" * len(keys),
             "cluster with -Y: %d sets through a (%d primaried by b: forwarded), all STORED"
             % (len(keys), len(remote)))
        s.sendall(b"get " + " ".join(keys).encode() + b"\r\n")
        got = recv_until(s, b"END\r\n", timeout=20)
        t.eq(got.count(b"VALUE "), len(keys), "cluster with -Y: a multi-get through a finds "
             "every key")
        s.close()
        b, r = login(cl.nodes["b"].addr)
        st = stats_of(b)
        t.ok(st.get("curr_items") == str(len(keys)) and int(st.get("replicated", 0)) > 0,
             "cluster with -Y: b holds every key (R=2: the writes were replicated to it)", st)
        b.close()
    finally:
        cl.close()
        cl.cleanup_dir()


def main():
    t = Tap()
    lg.watchdog(280)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "authfile")
        with open(path, "w") as f:
            f.write(AUTHFILE)
        os.chmod(path, 0o644)
        node = Node(args=["-t", "2", "-m", "32", "-Y", path]).start()
        lg.track(node.proc)
        try:
            addr = ("127.0.0.1", node.port)
            run_table(t, "ringcached", addr, CASES)
            run_table(t, "ringcached", addr, OWN_CASES)
            check_counters(t, "ringcached", addr, path)
            own_checks(t, node, path)
        finally:
            node.stop()

        binary = os.environ.get("RC_MEMCACHED", "/usr/bin/memcached")
        ver = ml.memcached_version(binary)
        if ver is None:
            t.skip("memcached differential", "no memcached at %s" % binary)
        else:
            mc = ml.Memcached(binary, args=["-Y", path]).start()
            lg.track(mc.proc)
            try:
                run_table(t, "memcached " + ver, mc.addr, CASES)
                check_counters(t, "memcached " + ver, mc.addr, path)
            finally:
                mc.stop()

        bad_files(t, tmp)
        sighup_reload(t, tmp)
        cluster(t, tmp)
    lg.kill_all()
    t.done()


if __name__ == "__main__":
    main()
