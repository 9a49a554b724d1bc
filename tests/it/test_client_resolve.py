"""libringcache and member names that move or do not resolve: a handle on
a membership naming nodes by host name (resolved through a hosts file of
the test's own, by Debian's libnss-wrapper preloaded into client_probe).
- One member's name does not resolve when the handle is made: the handle
  is made anyway, the other members serve their keys, that member's keys
  fail (R=1) without a wait; once its name resolves and it runs, its keys
  are served (before: the whole handle failed, "Name or service not
  known").
- A member killed and started again on another address (127.0.0.2, then
  127.0.0.3; the hosts file updated, as a rescheduled pod's DNS record):
  the running handle finds it there (before: it kept the first address
  for the handle's life).
Skipped when libnss-wrapper is not installed (tests/deps.sh installs it)."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from client_lib import PROBE, RINGCACHED, Probe, Tap, free_port, node_binary  # noqa: E402

NSS_WRAPPER = "/usr/lib/x86_64-linux-gnu/libnss_wrapper.so"
KEYS = 60


def accepts(host, port):
    try:
        socket.create_connection((host, port), timeout=0.5).close()
        return True
    except OSError:
        return False


def wait_for(cond, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


class HostNode:
    """A plain ringcached on host:port (any 127/8 address)."""

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.proc = subprocess.Popen([RINGCACHED, "-l", host, "-p", str(port), "-t", "1",
                                      "-m", "16"], stdin=subprocess.DEVNULL)
        if not wait_for(lambda: self.proc.poll() is not None or accepts(host, port), 10):
            raise RuntimeError("ringcached did not start on %s:%d" % (host, port))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


def rows(out):
    """'many' output -> {key: (owner, code)}."""
    r = {}
    for line in out:
        f = line.split()
        if len(f) == 4:
            r[f[0]] = (f[1], f[2])
    return r


def by_owner(res, owner):
    return {k: code for k, (o, code) in res.items() if o == owner}


def main():
    if os.path.basename(node_binary()) == "memcached" or not os.path.exists(PROBE):
        print("1..0 # SKIP needs ringcached and client_probe")
        return 0
    if not os.path.exists(NSS_WRAPPER):
        print("1..0 # SKIP libnss-wrapper is not installed (Debian: libnss-wrapper)")
        return 0
    t = Tap(7)
    d = tempfile.mkdtemp(prefix="rc-resolve-")
    hosts = os.path.join(d, "hosts")
    members = os.path.join(d, "cluster.members")
    pa, pm, pg = free_port(), free_port(), free_port()
    nodes, probe = [], None

    def write_hosts(text):
        with open(hosts + ".tmp", "w") as f:
            f.write(text)
        os.replace(hosts + ".tmp", hosts)

    try:
        write_hosts("127.0.0.1 rc-node-a\n127.0.0.2 rc-node-moving\n")
        with open(members, "w") as f:
            f.write("epoch 1\nvnodes 160\nreplicas 1\nnode a rc-node-a:%d\nnode m rc-node-moving:%d\n"
                    "node g rc-node-gone:%d\n" % (pa, pm, pg))
        nodes.append(HostNode("127.0.0.1", pa))
        moving = HostNode("127.0.0.2", pm)
        nodes.append(moving)
        pre = os.environ.get("LD_PRELOAD", "")  # a sanitizer's runtime stays first
        env = {"LD_PRELOAD": (pre + " " + NSS_WRAPPER).strip(), "NSS_WRAPPER_HOSTS": hosts,
               "NSS_WRAPPER_PASSWD": "/etc/passwd", "NSS_WRAPPER_GROUP": "/etc/group",
               # RTLD_DEEPBIND, its default, is refused by a sanitizer's runtime.
               "NSS_WRAPPER_DISABLE_DEEPBIND": "1",
               # An ASan build: the wrapper is preloaded ahead of its runtime.
               "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}
        probe = Probe(members, op_timeout=500, retry=100, retry_max=200, poll=0, env=env)
        res = rows(probe.cmd("many set r- %d" % KEYS))
        a, m, g = by_owner(res, "a"), by_owner(res, "m"), by_owner(res, "g")
        t.ok(len(res) == KEYS and a and m and g,
             "a handle on a membership with an unresolvable member is made; keys spread over "
             "a, m and g", sorted(set(o for o, _ in res.values())))
        t.ok(all(c == "OK" for c in a.values()) and all(c == "OK" for c in m.values()),
             "the members that resolve serve their keys", res)
        t.ok(all(c != "OK" for c in g.values()),
             "the unresolvable member's keys fail (R=1), the call does not hang", g)

        # g's name starts to resolve and g runs: its keys are served.
        write_hosts("127.0.0.1 rc-node-a\n127.0.0.2 rc-node-moving\n127.0.0.4 rc-node-gone\n")
        nodes.append(HostNode("127.0.0.4", pg))
        got = {}

        def g_served():
            got.update(rows(probe.cmd("many set r- %d" % KEYS)))
            return all(c == "OK" for c in by_owner(got, "g").values())
        t.ok(wait_for(g_served, 15, 0.2), "once its name resolves, the member is found and "
             "serves its keys", by_owner(got, "g"))

        # m moves: killed, started on 127.0.0.3, the hosts file updated.
        moving.stop()
        nodes.remove(moving)
        write_hosts("127.0.0.1 rc-node-a\n127.0.0.3 rc-node-moving\n127.0.0.4 rc-node-gone\n")
        nodes.append(HostNode("127.0.0.3", pm))
        first = rows(probe.cmd("many get r- %d" % KEYS))
        t.ok(all(c != "OK" for c in by_owner(first, "m").values()),
             "m's keys miss on its new, empty process (the handle connected to it or failed)",
             by_owner(first, "m"))
        moved = {}

        def m_served():
            moved.update(rows(probe.cmd("many set r- %d" % KEYS)))
            return all(c == "OK" for c in by_owner(moved, "m").values())
        t.ok(wait_for(m_served, 15, 0.2), "the running handle finds m at its new address "
             "(127.0.0.3) and writes its keys", by_owner(moved, "m"))
        back = rows(probe.cmd("many get r- %d" % KEYS))
        t.ok(len(back) == KEYS and all(code == "OK" for _o, code in back.values()),
             "every key reads back from a, m (moved) and g", back)
    finally:
        if probe is not None:
            probe.close()
        for n in nodes:
            n.stop()
        subprocess.run(["rm", "-rf", d])
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
