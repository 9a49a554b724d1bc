#!/usr/bin/env python3
"""Signals, systemd and logs as operators use them (issue 27): SIGHUP never
kills a node (Debian's memcached survives it too); sd_notify's READY=1 once
the node serves, RELOADING=1 then READY=1 around a SIGHUP, STOPPING=1 on
SIGTERM (a fake $NOTIFY_SOCKET stands for systemd); --log-format json and
logfmt on every line, startup warnings included; cluster events (epoch
commits, a peer down and up again) logged at the default level with the
node's id; ringctl watch's lines timestamped. TAP."""
import json
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
from rctest import (BUILDDIR, RINGCACHED, Tap, can_connect, free_port,  # noqa: E402
                    request, wait_until)

MEMCACHED = "/usr/bin/memcached"
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")
tap = Tap()
tmp = tempfile.mkdtemp(prefix="rc-ops-signals-")
procs = []


def start(cmd, env=None, log=None):
    """Start cmd with stderr to the file log; wait for its port (the -p
    argument). Returns the Popen."""
    port = int(cmd[cmd.index("-p") + 1])
    err = open(log, "wb") if log else subprocess.DEVNULL
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                         env=env)
    if log:
        err.close()
    procs.append(p)
    wait_until(lambda: p.poll() is not None or can_connect(port), 10)
    return p


def stop(p, sig=signal.SIGTERM):
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return p.returncode


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def serves(port):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        r = request(s, b"version\r\n", timeout=2)
        s.close()
        return r.startswith(b"VERSION ")
    except OSError:
        return False


def have_libsystemd():
    try:
        with open(os.path.join(BUILDDIR, "config.h")) as f:
            return "#define HAVE_LIBSYSTEMD 1" in f.read()
    except OSError:
        return False


def sighup_survives():
    """SIGHUP to a node with nothing to reload (no -Y, -Z): it stays up,
    serving, and says why it ignored it; memcached does the same."""
    port = free_port()
    log = os.path.join(tmp, "hup.log")
    p = start([RINGCACHED, "-l", "127.0.0.1", "-p", str(port)], log=log)
    for _ in range(3):
        p.send_signal(signal.SIGHUP)
    ok = wait_until(lambda: "SIGHUP: nothing to reload" in read(log), 5)
    tap.ok(ok and p.poll() is None and serves(port),
           "ringcached without -Y/-Z: 3 SIGHUPs, still up and serving, logged at the default "
           "level", (p.poll(), read(log)))
    tap.ok(STAMP.match(read(log)) and "ringcached: notice: SIGHUP: nothing to reload"
           in read(log), "the line is the logger's: time, level", read(log))
    tap.eq(stop(p), 0, "then SIGTERM: exit 0 (not 129)")
    if not os.access(MEMCACHED, os.X_OK):
        tap.skip("memcached survives SIGHUP too", "%s not installed" % MEMCACHED)
        return
    port = free_port()
    m = start([MEMCACHED, "-l", "127.0.0.1", "-p", str(port), "-U", "0"]
              + (["-u", "nobody"] if os.getuid() == 0 else []))
    up = serves(port)
    m.send_signal(signal.SIGHUP)
    time.sleep(0.2)  # nothing to wait for: memcached says nothing on SIGHUP
    tap.ok(up and m.poll() is None and serves(port), "Debian's memcached survives SIGHUP too",
           m.poll())
    stop(m)


def sd_notify():
    """A datagram socket as systemd's notify socket: READY=1 once the port
    serves; RELOADING=1 (with MONOTONIC_USEC) then READY=1 on SIGHUP;
    STOPPING=1 on SIGTERM."""
    if not have_libsystemd():
        tap.skip("sd_notify READY/RELOADING/STOPPING", "built without libsystemd")
        return
    path = os.path.join(tmp, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(10)
    env = dict(os.environ, NOTIFY_SOCKET=path)
    port = free_port()
    p = subprocess.Popen([RINGCACHED, "-l", "127.0.0.1", "-p", str(port)], env=env,
                         stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(p)

    def msg():
        try:
            return sock.recv(4096).decode()
        except socket.timeout:
            return ""
    first = msg()
    tap.ok(first.startswith("READY=1") and can_connect(port),
           "READY=1 comes when the client port already serves", first)
    p.send_signal(signal.SIGHUP)
    reload_msgs = [msg(), msg()]
    tap.ok(reload_msgs[0].startswith("RELOADING=1\nMONOTONIC_USEC=")
           and reload_msgs[1].startswith("READY=1"),
           "SIGHUP: RELOADING=1 (MONOTONIC_USEC), then READY=1", reload_msgs)
    p.send_signal(signal.SIGTERM)
    last = msg()
    tap.ok(last == "STOPPING=1" and p.wait(10) == 0, "SIGTERM: STOPPING=1, exit 0", last)
    sock.close()


def log_formats():
    """json: every line one JSON object with ts, level, msg; the startup
    warning of an ignored memcached option included. logfmt likewise."""
    for fmt in ("json", "logfmt"):
        port = free_port()
        log = os.path.join(tmp, "fmt-%s.log" % fmt)
        p = start([RINGCACHED, "-l", "127.0.0.1", "-p", str(port), "-v", "--log-format", fmt,
                   "-o", "slab_reassign"], log=log)
        p.send_signal(signal.SIGHUP)
        wait_until(lambda: "SIGHUP" in read(log), 5)
        stop(p)
        lines = read(log).splitlines()
        parsed = []
        for line in lines:
            if fmt == "json":
                try:
                    parsed.append(json.loads(line))
                except ValueError:
                    parsed.append(None)
            else:
                m = re.match(r'^ts=(\S+) level=(\w+) msg=("(?:[^"\\]|\\.)*"|\S+)$', line)
                parsed.append(m and {"ts": m.group(1), "level": m.group(2), "msg": m.group(3)})
        good = [d for d in parsed if d and set(d) == {"ts", "level", "msg"}
                and re.match(r"^\d{4}-.*Z$", d["ts"])]
        levels = [d["level"] for d in good]
        tap.ok(len(lines) >= 4 and len(good) == len(lines)
               and levels[0] == "warning" and "slab_reassign" in good[0]["msg"]
               and "info" in levels and "notice" in levels,
               "--log-format %s: every line (%d) is one record with ts, level, msg; the "
               "startup warning first" % (fmt, len(lines)), "\n".join(lines))
    port = free_port()
    out = subprocess.run([RINGCACHED, "-p", str(port), "--log-format", "yaml"],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
    tap.ok(out.returncode == 2 and out.stderr.startswith(
        "ringcached: --log-format yaml: must be text, logfmt or json"),
        "--log-format yaml: exit 2, names the choices", out.stderr[:200])


def cluster_events():
    """Without -v: a node logs the commit of its epoch, a peer going down and
    coming back, each line with its id; ringctl watch's lines carry the time."""
    why = lg.supports_cluster()
    if why:
        tap.skip("cluster events at the default level", why)
        return
    os.environ.pop("RC_NODE_ARGS", None)
    cl, ok = lg.start_cluster(tap, ["a", "b"], node_args=["--log-format", "text"])
    try:
        if not ok:
            return
        alog = cl.nodes["a"].log
        tap.ok(wait_until(lambda: re.search(r"Z ringcached\[a\]: notice: committed epoch 1$",
                                            read(alog), re.M), 5),
               "a logs 'committed epoch 1' at the default level, with its id", read(alog))
        cl.nodes["b"].stop(signal.SIGKILL)
        tap.ok(wait_until(lambda: "ringcached[a]: notice: peer b is down" in read(alog), 10),
               "a logs that peer b is down", read(alog)[-800:])
        cl.nodes["b"].start()
        tap.ok(wait_until(lambda: re.search(r"ringcached\[a\]: notice: peer b is (up|\w+ again)",
                                            read(alog)), 10),
               "a logs that peer b is back", read(alog)[-800:])
        blog = cl.nodes["b"].log
        tap.ok(all(STAMP.match(x) and "ringcached[b]: " in x
                   for x in read(blog).splitlines() if x),
               "every line of b's log has the time and b's id", read(blog)[-800:])
        rc, out, err = cl.ctl("watch", "--once")
        lines = [x for x in err.splitlines() if x]
        tap.ok(rc == 0 and lines and all(STAMP.match(x) and " ringctl: " in x for x in lines),
               "ringctl watch --once: every line on stderr starts with the UTC time",
               (rc, err[-600:]))
    finally:
        lg.close_cluster(tap, cl)


try:
    sighup_survives()
    sd_notify()
    log_formats()
    cluster_events()
finally:
    for pr in procs:
        stop(pr, signal.SIGKILL)
    lg.kill_all()
    subprocess.run(["rm", "-rf", tmp])
tap.done()
