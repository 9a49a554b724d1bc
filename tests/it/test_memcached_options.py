#!/usr/bin/env python3
"""ringcached started the way memcached is: the option lines of Debian's
/etc/memcached.conf with -d and -P (the pid file names the daemon, which
serves pymemcache, and is gone after SIGTERM to that pid), a unix socket
(-s, -a) with pymemcache on it, the slab options (one warning each, and
the node starts), the refused ones (-U 1, -B binary, -e, an unknown -o:
one line, exit 2), -u nobody as root (/proc/PID/status). TAP."""
import ctypes
import os
import pwd
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import Tap, Node, RINGCACHED, free_port, request, wait_until  # noqa: E402

try:
    from pymemcache.client.base import Client
except ImportError:
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        from pymemcache.client.base import Client
    except ImportError:
        print("1..0 # SKIP python3-pymemcache not installed")
        sys.exit(0)

DEBIAN_CONF = "/etc/memcached.conf"
# The option lines Debian's memcached 1.6 package ships in that file, for
# machines without the package.
DEBIAN_LINES = ["-d", "logfile /var/log/memcached.log", "-m 64", "-p 11211", "-u memcache",
                "-l 127.0.0.1", "-P /var/run/memcached/memcached.pid"]
ROOT = os.geteuid() == 0
PR_SET_CHILD_SUBREAPER = 36

tap = Tap()
# A daemon's parent exits; as the subreaper this test gets the daemon as its
# child, so it can reap it and read its exit status.
libc = ctypes.CDLL(None, use_errno=True)
SUBREAPER = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
started = []        # pids of daemons to kill if the test dies midway


def conf_args(lines):
    """Arguments from memcached.conf lines, as Debian's start-memcached and
    systemd-memcached-wrapper read them: '#' comments dropped, -d and -h
    lines skipped (the caller decides about -d), directives such as
    logfile skipped, each remaining line split into words by the shell."""
    args = []
    for line in lines:
        line = re.sub(r"(?<!\\)#[^#]*", "", line).strip()
        if not line or re.match(r"^-[dh]", line) or not line.startswith("-"):
            continue
        args += shlex.split(line)
    return args


def replace_opt(args, opt, value):
    """args with opt's value replaced (appended when absent)."""
    out, i, seen = [], 0, False
    while i < len(args):
        if args[i] == opt and i + 1 < len(args):
            out += [opt, value]
            seen = True
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out if seen else out + [opt, value]


def opt_value(args, opt):
    for i, a in enumerate(args[:-1]):
        if a == opt:
            return args[i + 1]
    return None


def run(args, cwd=None, timeout=30):
    r = subprocess.run([RINGCACHED] + args, stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=timeout, cwd=cwd)
    return r.returncode, r.stdout, r.stderr


def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def proc_status(pid):
    """/proc/PID/status as a dict (empty once the process is gone)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:
        return {}


def running(pid):
    st = proc_status(pid)
    return bool(st) and not st.get("State", "").startswith("Z")


def wait_exit(pid, timeout=20):
    """Wait for pid to end; its exit status when this test could reap it
    (negative: the signal), else 0 once it is gone; None on timeout."""
    box = {}

    def gone():
        if SUBREAPER:
            try:
                p, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                p, status = 0, None
            if p == pid:
                box["rc"] = os.waitstatus_to_exitcode(status)
                return True
        if not running(pid):
            box.setdefault("rc", 0)
            return True
        return False

    return box["rc"] if wait_until(gone, timeout, 0.05) else None


def kill_leftovers():
    for pid in started:
        if running(pid):
            os.kill(pid, signal.SIGKILL)
            wait_exit(pid, 5)


def unix_connectable(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(1)
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def tcp_listening(port):
    s = socket.socket()
    try:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0
    finally:
        s.close()


def start_daemon(args, pid_file, cwd=None):
    """ringcached args (with -d): (rc, stderr, pid from the pid file). A
    port lost to another test between the pick and the bind is retried
    with another one."""
    for _ in range(5):
        if opt_value(args, "-p") is not None:
            args = replace_opt(args, "-p", str(free_port()))
        rc, out, err = run(args, cwd=cwd)
        if rc != 0 and "Address already in use" in err:
            continue
        break
    pid = read_pid(pid_file) if rc == 0 else None
    if pid is not None:
        started.append(pid)
    return rc, err, pid, args


def serves(mc):
    return mc.set("opt:k", b"v1") and mc.get("opt:k") == b"v1" and mc.delete("opt:k")


try:
    # (1) Debian's memcached.conf, as its wrapper reads it, with -d.
    if os.path.exists(DEBIAN_CONF):
        with open(DEBIAN_CONF) as f:
            lines = f.read().splitlines()
        src = DEBIAN_CONF
    else:
        lines, src = DEBIAN_LINES, "Debian's shipped lines (no %s here)" % DEBIAN_CONF
    base = conf_args(lines)
    tap.diag("from %s: %s" % (src, " ".join(base)))
    tap.ok(opt_value(base, "-P") is not None and opt_value(base, "-u") is not None,
           "the conf names a pid file and a user", base)
    user = opt_value(base, "-u")
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        tap.diag("no user %s here: nobody instead" % user)
        user, pw = "nobody", pwd.getpwnam("nobody")
        base = replace_opt(base, "-u", user)
    with tempfile.TemporaryDirectory() as tmp:
        if ROOT:
            # memcached writes its pid file as -u's user (Debian's
            # /run/memcached is memcache's); the daemon removes it as that user.
            os.chown(tmp, pw.pw_uid, pw.pw_gid)
        pid_file = os.path.join(tmp, "memcached.pid")
        args = replace_opt(base, "-P", pid_file) + ["-d"]
        rc, err, pid, args = start_daemon(args, pid_file)
        port = int(opt_value(args, "-p"))
        tap.ok(rc == 0 and err == "", "ringcached %s: the parent exits 0, silent" %
               " ".join(args), (rc, err))
        tap.ok(pid is not None and running(pid), "the pid file names a running process",
               (pid, pid_file))
        if pid is not None and running(pid):
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv0 = f.read().split(b"\0")[0]
            tap.ok(argv0.endswith(b"ringcached"), "that process is ringcached", argv0)
            st = proc_status(pid)
            if ROOT:
                tap.eq(st.get("Uid", "").split(), [str(pw.pw_uid)] * 4,
                       "it runs as -u %s" % user)
            else:
                tap.skip("it runs as -u %s" % user, "not root: -u is ignored, as memcached")
            tap.eq(os.readlink("/proc/%d/cwd" % pid), "/", "the daemon works from /")
            tap.ok(os.getsid(pid) == pid, "the daemon leads its own session")
            mc = Client(("127.0.0.1", port), timeout=10, connect_timeout=5)
            tap.ok(serves(mc), "pymemcache set/get/delete on the daemon's port")
            mc.close()

            # A second daemon on the same port: the error, from the parent.
            rc2, _, err2 = run(replace_opt(args, "-P", pid_file + "2"))
            tap.ok(rc2 == 1 and "Address already in use" in err2 and
                   not os.path.exists(pid_file + "2"),
                   "-d on a port in use: the parent exits 1 with the bind error", (rc2, err2))

            os.kill(pid, signal.SIGTERM)
            code = wait_exit(pid)
            tap.ok(code == 0, "SIGTERM to the pid file's pid: it exits 0", code)
            tap.ok(not os.path.exists(pid_file), "the pid file is gone")
        else:
            for _ in range(7):
                tap.ok(False, "the daemon did not start", err)

    # -d with relative paths: the pid file and the unix socket still work
    # and are removed, though the daemon left for /.
    with tempfile.TemporaryDirectory() as tmp:
        extra = ["-u", "root"] if ROOT else []     # memcached accepts -u root
        rc, err, pid, _ = start_daemon(["-d", "-P", "rel.pid", "-s", "rel.sock"] + extra,
                                       os.path.join(tmp, "rel.pid"), cwd=tmp)
        sock = os.path.join(tmp, "rel.sock")
        tap.ok(rc == 0 and pid is not None and unix_connectable(sock),
               "-d -P rel.pid -s rel.sock: pid file and socket in the start directory",
               (rc, err))
        if pid is not None:
            mc = Client(sock, timeout=10, connect_timeout=5)
            tap.ok(serves(mc), "pymemcache over the daemon's relative unix socket")
            mc.close()
            os.kill(pid, signal.SIGTERM)
            code = wait_exit(pid)
            tap.ok(code == 0 and not os.path.exists(os.path.join(tmp, "rel.pid")) and
                   not os.path.exists(sock), "after SIGTERM: exit 0, pid file and socket gone",
                   (code, os.listdir(tmp)))

    # (2) -s and -a: a unix socket instead of the TCP port.
    with tempfile.TemporaryDirectory() as tmp:
        for mask in ("0700", "0660"):
            path = os.path.join(tmp, "mc-%s.sock" % mask)
            port = free_port()
            proc = subprocess.Popen([RINGCACHED, "-s", path, "-a", mask, "-p", str(port)],
                                    stdin=subprocess.DEVNULL)
            up = wait_until(lambda: proc.poll() is not None or unix_connectable(path), 10)
            tap.ok(up and proc.poll() is None, "-s %s -a %s: listening" % (path, mask))
            if proc.poll() is None:
                mode = os.stat(path).st_mode
                tap.ok(stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == int(mask, 8),
                       "the socket's mode is %s" % mask, oct(mode))
                tap.ok(not tcp_listening(port), "-s disables the TCP port (-p %d)" % port)
                mc = Client(path, timeout=10, connect_timeout=5)
                tap.ok(serves(mc), "pymemcache over the unix socket: set, get, delete")
                mc.set_many({"u%d" % i: b"x" * i for i in range(1, 200)})
                got = mc.get_many(["u%d" % i for i in range(1, 200)])
                tap.ok(len(got) == 199 and got["u150"] == b"x" * 150,
                       "pymemcache multi-get of 199 keys over the unix socket")
                tap.eq(mc.incr("u1n", 1), None, "incr on a missing key")
                mc.set("u1n", b"41")
                tap.eq(mc.incr("u1n", 1), 42, "incr over the unix socket")
                tap.ok(int(mc.stats()[b"curr_connections"]) >= 1, "stats over the unix socket")
                mc.close()
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            tap.ok(rc == 0 and not os.path.exists(path),
                   "SIGTERM: exit 0, the socket file removed", rc)

        # A socket file left by a killed node is replaced; a live one is not.
        path = os.path.join(tmp, "stale.sock")
        first = subprocess.Popen([RINGCACHED, "-s", path], stdin=subprocess.DEVNULL)
        wait_until(lambda: first.poll() is not None or unix_connectable(path), 10)
        rc, _, err = run(["-s", path])
        tap.ok(rc == 1 and "another server is listening" in err,
               "-s on a socket another node serves: exit 1, said so", (rc, err))
        first.kill()
        first.wait()
        tap.ok(os.path.exists(path), "after SIGKILL the socket file is left")
        second = subprocess.Popen([RINGCACHED, "-s", path], stdin=subprocess.DEVNULL)
        up = wait_until(lambda: second.poll() is not None or unix_connectable(path), 10)
        tap.ok(up and second.poll() is None, "a new node replaces the leftover socket file")
        second.send_signal(signal.SIGTERM)
        tap.eq(second.wait(20), 0, "and stops cleanly")

        # SIGTERM the moment the socket file appears, before the node's loop
        # takes signals: it must wait for the loop and exit cleanly, never
        # die of the default action in a thread started before the block
        # (once killed 5 runs in 200, so try many).
        path = os.path.join(tmp, "early.sock")
        codes = []
        for _ in range(60):
            proc = subprocess.Popen([RINGCACHED, "-s", path], stdin=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            wait_until(lambda: proc.poll() is not None or os.path.exists(path), 10,
                       interval=0.0005)
            proc.send_signal(signal.SIGTERM)
            try:
                codes.append(proc.wait(20))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait())
        tap.ok(codes == [0] * len(codes) and not os.path.exists(path),
               "SIGTERM as soon as the socket file exists: exit 0 and the file removed, "
               "60 of 60", sorted(set(codes)))

    # (3) Slab allocator tuning: one warning line each, and the node serves.
    with tempfile.TemporaryDirectory() as tmp:
        slab = [["-f", "1.25"], ["-n", "48"], ["-L"], ["-o", "slab_reassign"],
                ["-o", "slab_automove=1"], ["-o", "slab_chunk_max=512"], ["-o", "lru_crawler"],
                ["-o", "lru_maintainer"], ["-o", "hash_algorithm=murmur3"],
                ["-o", "hashpower=16"], ["-o", "no_modern"], ["-o", "temporary_ttl=60"]]
        for opt in slab:
            log = os.path.join(tmp, "err.log")
            node = Node(args=opt, stderr=log)
            try:
                node.start()
                s = node.connect()
                ok = request(s, b"version\r\n").startswith(b"VERSION ")
                s.close()
            except RuntimeError:
                ok = False
            finally:
                rc = node.stop()
            with open(log) as f:
                err = [line for line in f.read().splitlines() if line]
            name = opt[-1].split("=")[0]
            tap.ok(ok and rc == 0 and len(err) == 1 and "warning" in err[0] and name in err[0]
                   and "slab" in err[0],
                   "%s: one warning line, starts and serves" % " ".join(opt), (ok, rc, err))

        # What maps is accepted in silence.
        log = os.path.join(tmp, "err.log")
        node = Node(args=["-U", "0", "-B", "ascii", "-o", "modern,maxconns_fast", "-b", "64",
                          "-X", "-W", "--listen-backlog=32"], stderr=log)
        try:
            node.start()
            mc = Client(("127.0.0.1", node.port), timeout=10, connect_timeout=5)
            ok = serves(mc)
            mc.close()
        except RuntimeError:
            ok = False
        finally:
            rc = node.stop()
        with open(log) as f:
            err = f.read()
        tap.ok(ok and rc == 0 and err == "",
               "-U 0 -B ascii -o modern,maxconns_fast -b 64 -X -W: no warning, serves",
               (ok, rc, err))

    # -F: flush_all is refused with memcached's error, the data stays.
    node = Node(args=["-F"])
    try:
        node.start()
        mc = Client(("127.0.0.1", node.port), timeout=10, connect_timeout=5)
        mc.set("kept", b"1")
        sock = socket.create_connection(("127.0.0.1", node.port), timeout=10)
        sock.sendall(b"flush_all\r\nflush_all 0 noreply\r\nversion\r\n")
        got = b""
        while b"VERSION" not in got:
            chunk = sock.recv(4096)
            if not chunk:
                break
            got += chunk
        sock.close()
        kept = mc.get("kept")
        mc.close()
    finally:
        node.stop()
    tap.ok(got.startswith(b"CLIENT_ERROR flush_all not allowed\r\nVERSION") and kept == b"1",
           "-F: flush_all answers CLIENT_ERROR flush_all not allowed (nothing for noreply) "
           "and nothing is flushed", (got[:200], kept))

    # (4) What ringcached cannot do stops the start: one line, exit 2.
    with tempfile.TemporaryDirectory() as tmp:
        refused = [
            (["-U", "1"], "UDP is not supported"),
            (["-U", "11211"], "UDP is not supported"),
            (["-B", "binary"], "binary protocol is not supported"),
            (["-B", "auto"], "binary protocol is not supported"),
            (["-e", os.path.join(tmp, "memory_file")], "not supported"),
            (["-o", "bogus_option"], 'illegal suboption "bogus_option"'),
            (["-o", "modern,bogus=1"], 'illegal suboption "bogus"'),
            (["-o", "ext_path=/tmp/x:64m"], "extstore"),
            (["-M"], "not supported"),
            (["-Z"], "-Z needs -o ssl_chain_cert"),
            (["-Z", "-o", "ssl_verify_mode=4"], "must be 0 (none), 1 (request)"),
            (["-Z", "-o", "ssl_min_version=tlsv9"], "must be tlsv1.0"),
            (["-Z", "-s", os.path.join(tmp, "t.sock")], "-Z cannot be used with -s"),
            (["--cluster-tls"], "--cluster-tls needs --state-dir"),
            (["--cluster-tls", "--id", "a", "--state-dir", tmp],
             "--cluster-tls needs -o ssl_chain_cert=<file> (this node's certificate) and "
             "ssl_ca_cert=<file>"),
            (["-s", os.path.join(tmp, "c.sock"), "--id", "a", "--state-dir", tmp],
             "-s cannot be used with --state-dir"),
        ]
        for opt, want in refused:
            rc, out, err = run(opt + ["-p", str(free_port())], timeout=10)
            lines = err.splitlines()
            tap.ok(rc == 2 and len(lines) == 1 and want in lines[0] and out == "",
                   "%s: exit 2, one line: %s" % (" ".join(opt), want), (rc, err[:300]))
        rc, out, err = run(["-B", "json"], timeout=10)
        tap.ok(rc == 2 and err.splitlines()[0].endswith("should be one of auto, binary, or ascii"),
               "-B json: memcached's list of protocols, exit 2", (rc, err[:200]))
        rc, out, err = run(["-o", "hashpower"], timeout=10)
        tap.ok(rc == 2 and "missing hashpower argument" in err, "-o hashpower without a value",
               (rc, err[:200]))

        if ROOT:
            pid_file = os.path.join(tmp, "root.pid")
            rc, err, pid, _ = start_daemon(["-d", "-p", "0", "-P", pid_file], pid_file)
            tap.ok(rc == 2 and "can't run as root without the -u switch" in err and pid is None,
                   "root, -d without -u: memcached's refusal, exit 2", (rc, err))
            rc, out, err = run(["-u", "no-such-user-rc", "-p", "0"], timeout=10)
            tap.ok(rc == 1 and "can't find the user no-such-user-rc" in err,
                   "-u with an unknown user: exit 1, said so", (rc, err))
        else:
            tap.skip("root, -d without -u: refused", "not root")
            tap.skip("-u with an unknown user", "not root")

    # (5) -u nobody as root: the node runs as nobody.
    if ROOT:
        nobody = pwd.getpwnam("nobody")
        node = Node(args=["-u", "nobody"])
        try:
            node.start()
            # The port accepts (into its backlog) a moment before the drop,
            # which comes once the state and pid file are written.
            deadline = time.monotonic() + 10
            while (proc_status(node.pid).get("Uid", "0").split() or ["0"])[0] == "0" and \
                    time.monotonic() < deadline:
                time.sleep(0.02)
            st = proc_status(node.pid)
            tap.eq(st.get("Uid", "").split(), [str(nobody.pw_uid)] * 4, "-u nobody: Uid")
            tap.eq(st.get("Gid", "").split(), [str(nobody.pw_gid)] * 4, "-u nobody: Gid")
            tap.ok("0" not in st.get("Groups", "").split(), "no root group left",
                   st.get("Groups"))
            mc = Client(("127.0.0.1", node.port), timeout=10, connect_timeout=5)
            tap.ok(serves(mc), "and serves pymemcache")
            mc.close()
        finally:
            tap.eq(node.stop(), 0, "SIGTERM: exit 0")

        with tempfile.TemporaryDirectory() as tmp:
            os.chmod(tmp, 0o755)
            sock = os.path.join(tmp, "nobody.sock")
            proc = subprocess.Popen([RINGCACHED, "-u", "nobody", "-s", sock],
                                    stdin=subprocess.DEVNULL)
            wait_until(lambda: proc.poll() is not None or unix_connectable(sock), 10)
            st = os.stat(sock) if os.path.exists(sock) else None
            tap.ok(st is not None and st.st_uid == nobody.pw_uid and
                   stat.S_IMODE(st.st_mode) == 0o700,
                   "-u nobody -s: the socket is nobody's, mode 0700 (as memcached makes it)",
                   st)
            proc.send_signal(signal.SIGTERM)
            tap.eq(proc.wait(20), 0, "stops cleanly")

            # A state directory the user cannot write: refused at start.
            sd = os.path.join(tmp, "state")
            os.mkdir(sd, 0o700)
            rc, out, err = run(["-u", "nobody", "-p", str(free_port()), "--id", "a",
                                "--state-dir", sd, "--cluster-port", str(free_port())],
                               timeout=20)
            tap.ok(rc == 1 and "not writable by user nobody" in err,
                   "-u nobody with a root-only --state-dir: exit 1, said so", (rc, err[-300:]))
    else:
        tap.skip("-u nobody runs as nobody", "not root")
finally:
    kill_leftovers()

tap.done()
