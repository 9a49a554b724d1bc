#!/usr/bin/env python3
"""`ringctl status --watch` (client/ctl_view.c) under a real terminal:
tmux, on a private socket, 120x40. A 3-node cluster: the view lists the
three nodes up; it redraws in place (its header stays on the screen once
while the clock in it moves); a node killed with -9 shows down within a
deadline; q ends it with exit 0 and the terminal as it was (the alternate
screen left: the shell's lines before and after are back, the cursor
shown). Ctrl-C ends a second one the same way. Not on a terminal it
prints whole reports one after another, without escape sequences, and
SIGTERM ends it with exit 0. A bad --interval is a usage error."""
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

IDS = ["a", "b", "c"]
HEADER = "ringctl status --watch: every"


class Tmux:
    """A tmux server of our own (-S SOCKET), so a user's is never touched."""

    def __init__(self, d):
        self.sock = os.path.join(d, "tmux.sock")

    def run(self, *args):
        return subprocess.run(["tmux", "-S", self.sock] + list(args), capture_output=True,
                              text=True, timeout=20)

    def screen(self, target):
        r = self.run("capture-pane", "-p", "-t", target)
        return r.stdout if r.returncode == 0 else ""

    def kill(self):
        self.run("kill-server")


def node_row(screen, nid):
    for line in screen.splitlines():
        p = line.split()
        if p and p[0] == nid:
            return p
    return None


def scenario(t, d):
    if shutil.which("tmux") is None:
        t.skip("status --watch under tmux", "tmux is not installed")
        return
    cl = lg.Cluster(replicas=1, mem=64)
    tm = Tmux(d)
    try:
        for nid in IDS:
            cl.add(nid)
        rc, out, err = cl.ctl("init", "--members", cl.write_members(IDS))
        if not t.ok(rc == 0 and all(v == (1, 0) for v in cl.converged(1, IDS).values()),
                    "ringctl init: three nodes at epoch 1", (rc, err[-300:])):
            return
        cmd = shlex.join(cl.ctl_cmd("--timeout", "500", "status", "--watch", "--interval",
                                    "0.2"))
        exit_file = os.path.join(d, "exit1")
        shell = ("echo BEFORE-WATCH; %s; echo \"exit=$?\" > %s; echo AFTER-WATCH; sleep 120"
                 % (cmd, shlex.quote(exit_file)))
        r = tm.run("new-session", "-d", "-s", "w1", "-x", "120", "-y", "40", "sh", "-c", shell)
        if not t.ok(r.returncode == 0, "tmux: a session on a private socket", r.stderr):
            return

        def all_up():
            s = tm.screen("w1")
            return all((node_row(s, n) or [None] * 3)[2:3] == ["up"] for n in IDS) and s
        s = lg.wait_for(all_up, 20.0, 0.1)
        t.ok(bool(s) and HEADER in s and "epoch:" in s,
             "the view shows the header, the store's epoch and the three nodes up", s)
        first = re.search(r"\d\d:\d\d:\d\d UTC", s or "")

        def redrawn():
            s2 = tm.screen("w1")
            m = re.search(r"\d\d:\d\d:\d\d UTC", s2)
            return m and first and m.group(0) != first.group(0) and s2
        s2 = lg.wait_for(redrawn, 10.0, 0.1)
        t.ok(bool(s2) and s2.count(HEADER) == 1 and "BEFORE-WATCH" not in s2,
             "redrawn in place: the clock moved, the header is on the screen once, "
             "the shell's line is hidden (alternate screen)", s2)
        lines = (s2 or "").splitlines()
        t.ok(all(len(line) <= 120 for line in lines),
             "no line is wider than the terminal (120)", max(map(len, lines or [""])))

        cl.nodes["c"].stop(signal.SIGKILL)
        s3 = lg.wait_for(lambda: (node_row(tm.screen("w1"), "c") or [None] * 3)[2] == "down"
                         and tm.screen("w1"), 20.0, 0.1)
        t.ok(bool(s3) and (node_row(s3, "a") or [None] * 3)[2] == "up",
             "c killed with -9: the view shows c down, a still up", s3 or tm.screen("w1"))

        tm.run("send-keys", "-t", "w1", "q")
        done = lg.wait_for(lambda: os.path.exists(exit_file) and open(exit_file).read().strip(),
                           10.0, 0.05)
        t.ok(done == "exit=0", "q ends the view with exit status 0", done)
        s4 = lg.wait_for(lambda: "AFTER-WATCH" in tm.screen("w1") and tm.screen("w1"), 10.0)
        cursor = tm.run("display-message", "-p", "-t", "w1", "#{cursor_flag}").stdout.strip()
        t.ok(bool(s4) and "BEFORE-WATCH" in s4 and HEADER not in s4 and cursor == "1",
             "the terminal is restored: the shell's lines are back, the view gone, the "
             "cursor shown", (s4, cursor))

        exit2 = os.path.join(d, "exit2")
        # The shell ignores SIGINT, so Ctrl-C reaches only the view (which
        # takes the signal over) and the shell lives to write the status.
        shell2 = "trap '' INT; %s; echo \"exit=$?\" > %s; sleep 120" % (cmd,
                                                                         shlex.quote(exit2))
        tm.run("new-session", "-d", "-s", "w2", "-x", "100", "-y", "30", "sh", "-c", shell2)
        seen = lg.wait_for(lambda: HEADER in tm.screen("w2"), 20.0, 0.1)
        tm.run("send-keys", "-t", "w2", "C-c")
        done2 = lg.wait_for(lambda: os.path.exists(exit2) and open(exit2).read().strip(),
                            10.0, 0.05)
        t.ok(seen and done2 == "exit=0", "Ctrl-C ends a view with exit status 0",
             (seen, done2))

        p = lg.track(subprocess.Popen(cl.ctl_cmd("--timeout", "500", "status", "--watch",
                                                 "--interval", "0.1"),
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
        got = []

        def frames():
            line = p.stdout.readline()
            got.append(line)
            return "".join(got).count(HEADER) >= 3
        ok = lg.wait_for(frames, 20.0, 0)
        p.send_signal(signal.SIGTERM)
        # read(), not communicate(): what readline already buffered stays.
        rest = p.stdout.read()
        p.wait(timeout=10)
        p.stderr.close()
        text = "".join(got) + rest
        t.ok(ok and p.returncode == 0 and "\x1b" not in text and text.count("epoch:") >= 3,
             "not on a terminal: whole reports one after another, no escapes; SIGTERM "
             "ends it with exit 0", (ok, p.returncode, text.count(HEADER),
                                     text.count("epoch:"), text[-600:]))
        rc, out, err = cl.ctl("status", "--watch", "--interval", "0")
        t.ok(rc == 2 and "--interval" in err, "--interval 0: a usage error, exit 2",
             (rc, err))
    finally:
        tm.kill()
        lg.close_cluster(t, cl)


def main():
    t = lg.Tap()
    lg.watchdog(170)
    d = tempfile.mkdtemp(prefix="rc-watch-")
    try:
        lg.run_tap(t, scenario, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    t.done()


if __name__ == "__main__":
    main()
