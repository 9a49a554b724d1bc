"""Network partitions between ringcache nodes, each in its own network
namespace (issue 11, finding 4). Root only.

A NetLab is one test's private set of namespaces:

    rc-<uniq>-cl      the client namespace: a bridge br0 (the hub) with the
                      address .1 of a private 10.x.y.0/24 chosen per run;
                      the test's clients, ringctl and `ringctl watch` run
                      here (the test process enters it: NetLab.enter())
    rc-<uniq>-<id>    one per node: loopback up, eth0 (a veth whose other
                      end v-<id> is a port of br0) with address .11, .12, ...

Partitions are nftables rules in the partitioned node's namespace (table
inet rc_partition): "peers" drops every packet between that node and the
other nodes' addresses (clients still reach it), "all" drops everything on
its eth0 (peers and clients). heal() deletes the table. Nothing outside
the namespaces made here is touched; close() stops the processes started
in them (by PID), then deletes the namespaces. It runs from try/finally,
atexit, SIGTERM and loadgen's kill_all (so also from its watchdog).

    lab = NetLab(["a", "b", "c"])        # raises Unavailable (skip) when
    lab.setup()                          # not root or `ip netns add` fails
    try:
        lab.enter()                      # this thread -> client namespace
        cl, ok = start_cluster(tap, lab, ["a", "b", "c"], replicas=2)
        lab.partition("a", "peers")      # or "all"
        lab.reachable("a", cl.nodes["b"].addr)   # False now
        lab.heal("a")
    finally:
        lab.close()                      # processes, namespaces; leaves the
                                         # client namespace first

Call enter() before starting any thread: threads (and child processes)
inherit the namespace of the thread that creates them. NetCluster is
loadgen's Cluster with each node started by `ip netns exec` in its
namespace, listening on its namespace's address (port 11211, cluster port
21211: the namespaces do not share ports). With TLS (start_cluster(...,
tls=lab_certs(lab, d), data_tls=True)) the node certificate names every
address of the lab, so every TLS peer keeps checking names."""
import atexit
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

SRCDIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLONE_NEWNET = 0x40000000
NODE_PORT = 11211
CMD_TIMEOUT = 15          # every ip / nft command is bounded
TABLE = "rc_partition"

_libc = ctypes.CDLL(None, use_errno=True)


class Unavailable(Exception):
    """Network namespaces cannot be made here (the reason is the text)."""


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "setns: %s" % os.strerror(e))


def _run(argv, input=None, check=True):
    r = subprocess.run(argv, input=input, capture_output=True, text=True,
                       timeout=CMD_TIMEOUT)
    if check and r.returncode != 0:
        raise RuntimeError("%s -> %d: %s" % (" ".join(argv), r.returncode,
                                             (r.stderr or r.stdout).strip()))
    return r


def install_deps():
    """ip and nft present, else tests/deps.sh rc_install_netns_deps (only
    what is missing). None when both are there, else why not."""
    if shutil.which("ip") and shutil.which("nft"):
        return None
    deps = os.path.join(SRCDIR, "tests", "deps.sh")
    if os.geteuid() == 0 and os.path.exists(deps):
        try:
            subprocess.run(["bash", "-c", '. "$1" && rc_install_netns_deps', "deps", deps],
                           stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr,
                           timeout=300)
        except (OSError, subprocess.TimeoutExpired) as e:
            return "installing iproute2/nftables failed: %s" % e
    missing = [p for p in ("ip", "nft") if not shutil.which(p)]
    return "missing %s (iproute2, nftables)" % ", ".join(missing) if missing else None


_LABS = []
_LABS_LOCK = threading.Lock()


def _close_all(*_):
    with _LABS_LOCK:
        labs = list(_LABS)
    for lab in labs:
        lab.close()


atexit.register(_close_all)
lg.on_kill_all(_close_all)


def _sigterm(signum, frame):
    _close_all()
    lg.kill_all()
    os._exit(128 + signum)


class NetLab:
    def __init__(self, ids, tag=None):
        self.ids = list(ids)
        self.uniq = tag or "%04x%02x" % (os.getpid() & 0xffff, random.randrange(256))
        self.client_ns = "rc-%s-cl" % self.uniq
        self.ns = {i: "rc-%s-%s" % (self.uniq, i) for i in self.ids}
        self.net = None            # "10.x.y"
        self.made = []             # namespaces this lab created (only these are deleted)
        self.procs = []            # Popen started in the namespaces
        self.orig_fd = None        # the entering thread's namespace before enter()
        self.entered = False
        self.lock = threading.RLock()
        self.closed = False
        self.parted = {}           # id -> mode

    # ------------------------------------------------------------ build

    def _pick_net(self):
        used = _run(["ip", "-4", "-o", "addr", "show"], check=False).stdout
        used += _run(["ip", "-4", "route", "show", "table", "all"], check=False).stdout
        rng = random.Random(os.getpid() ^ int(time.time() * 1e6))
        for _ in range(200):
            net = "10.%d.%d" % (rng.randrange(160, 255), rng.randrange(256))
            if (net + ".") not in used:
                return net
        raise Unavailable("no free 10.x.y.0/24 for the lab")

    def addr(self, nid):
        """The node's IPv4 address (str)."""
        return "%s.%d" % (self.net, 11 + self.ids.index(nid))

    @property
    def client_addr(self):
        return "%s.1" % self.net

    def setup(self):
        """Make the namespaces, the bridge, the veths; Unavailable when this
        machine cannot (not root, no ip/nft, `ip netns add` refused)."""
        if os.geteuid() != 0:
            raise Unavailable("not root: network namespaces cannot be made")
        why = install_deps()
        if why:
            raise Unavailable(why)
        with _LABS_LOCK:
            _LABS.append(self)
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _sigterm)
        try:
            self.net = self._pick_net()
            r = _run(["ip", "netns", "add", self.client_ns], check=False)
            if r.returncode != 0:
                raise Unavailable("ip netns add failed: %s" % r.stderr.strip())
            self.made.append(self.client_ns)
            cl = ["ip", "-n", self.client_ns]
            _run(cl + ["link", "set", "lo", "up"])
            _run(cl + ["link", "add", "br0", "type", "bridge"])
            _run(cl + ["addr", "add", self.client_addr + "/24", "dev", "br0"])
            _run(cl + ["link", "set", "br0", "up"])
            for nid in self.ids:
                ns = self.ns[nid]
                _run(["ip", "netns", "add", ns])
                self.made.append(ns)
                _run(cl + ["link", "add", "v-" + nid, "type", "veth", "peer", "name", "eth0",
                           "netns", ns])
                _run(cl + ["link", "set", "v-" + nid, "master", "br0", "up"])
                n = ["ip", "-n", ns]
                _run(n + ["link", "set", "lo", "up"])
                _run(n + ["addr", "add", self.addr(nid) + "/24", "dev", "eth0"])
                _run(n + ["link", "set", "eth0", "up"])
            # nftables usable in a node namespace (the kernel has nf_tables)?
            r = _run(["ip", "netns", "exec", self.ns[self.ids[0]], "nft", "list", "ruleset"],
                     check=False)
            if r.returncode != 0:
                raise Unavailable("nft does not work in a namespace: %s" % r.stderr.strip())
        except Unavailable:
            self.close()
            raise
        except Exception as e:
            self.close()
            raise Unavailable("building the namespaces failed: %s" % e)
        return self

    # ------------------------------------------------------------ enter, exec

    def enter(self):
        """Move the calling thread into the client namespace (its later
        threads and children follow). Call before starting threads."""
        with self.lock:
            if self.entered:
                return
            if threading.active_count() > 1:
                raise RuntimeError("NetLab.enter() with %d threads running: call it first"
                                   % threading.active_count())
            self.orig_fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
            fd = os.open("/run/netns/" + self.client_ns, os.O_RDONLY)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            self.entered = True

    def leave(self):
        with self.lock:
            if self.entered and self.orig_fd is not None:
                _setns(self.orig_fd)
                os.close(self.orig_fd)
                self.orig_fd = None
                self.entered = False

    def exec_argv(self, nid, argv):
        """argv run inside node nid's namespace (`ip netns exec` execs the
        command: the PID is the command's)."""
        return ["ip", "netns", "exec", self.ns[nid]] + list(argv)

    def popen(self, nid, argv, **kw):
        p = lg.track(subprocess.Popen(self.exec_argv(nid, argv), **kw))
        with self.lock:
            self.procs.append(p)
        return p

    def reachable(self, nid, addr, timeout=1.0):
        """Can a TCP connection be opened from node nid's namespace to addr
        (host, port)? Done in a short-lived thread that enters the namespace
        (no process). nid None: from the client namespace."""
        out = [False]

        def run():
            try:
                fd = os.open("/run/netns/" + (self.ns[nid] if nid else self.client_ns),
                             os.O_RDONLY)
                try:
                    _setns(fd)
                finally:
                    os.close(fd)
                s = socket.create_connection(addr, timeout=timeout)
                s.close()
                out[0] = True
            except OSError:
                out[0] = False
        th = threading.Thread(target=run, daemon=True)
        th.start()
        th.join(timeout + 2.0)
        return out[0]

    # ------------------------------------------------------------ partitions

    def partition(self, nid, mode="peers"):
        """mode "peers": drop everything between nid and the other nodes'
        addresses (clients still reach it); "all": everything on its eth0."""
        if mode == "peers":
            peers = ", ".join(self.addr(i) for i in self.ids if i != nid)
            rules = ("  chain in { type filter hook input priority -10; policy accept; "
                     "ip saddr { %s } drop; }\n"
                     "  chain out { type filter hook output priority -10; policy accept; "
                     "ip daddr { %s } drop; }\n" % (peers, peers))
        elif mode == "all":
            rules = ("  chain in { type filter hook input priority -10; policy accept; "
                     "iifname \"eth0\" drop; }\n"
                     "  chain out { type filter hook output priority -10; policy accept; "
                     "oifname \"eth0\" drop; }\n")
        else:
            raise ValueError(mode)
        self.heal(nid)
        _run(self.exec_argv(nid, ["nft", "-f", "-"]),
             input="table inet %s {\n%s}\n" % (TABLE, rules))
        self.parted[nid] = mode

    def heal(self, nid):
        r = _run(self.exec_argv(nid, ["nft", "list", "tables"]), check=False)
        if TABLE in r.stdout:
            _run(self.exec_argv(nid, ["nft", "delete", "table", "inet", TABLE]))
        self.parted.pop(nid, None)

    def heal_all(self):
        for nid in list(self.parted):
            self.heal(nid)

    def rules(self, nid):
        return _run(self.exec_argv(nid, ["nft", "list", "ruleset"]), check=False).stdout

    # ------------------------------------------------------------ cleanup

    def close(self):
        """Stop the processes started here (by PID), then any other process
        still inside one of this lab's namespaces, leave the client
        namespace, delete the namespaces. Idempotent."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            for p in self.procs:
                if p.poll() is None:
                    try:
                        os.kill(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            for p in self.procs:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            try:
                self.leave()
            except OSError as e:
                print("# netns: leaving the client namespace: %s" % e, file=sys.stderr)
            me = os.getpid()
            for ns in self.made:
                try:
                    r = _run(["ip", "netns", "pids", ns], check=False)
                except (OSError, subprocess.TimeoutExpired):
                    continue
                for tok in r.stdout.split():
                    if tok.isdigit() and int(tok) != me:
                        try:
                            os.kill(int(tok), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
            left = []
            for ns in reversed(self.made):
                ok = False
                for _ in range(20):
                    try:
                        r = _run(["ip", "netns", "del", ns], check=False)
                    except (OSError, subprocess.TimeoutExpired):
                        break
                    if r.returncode == 0 or not os.path.exists("/run/netns/" + ns):
                        ok = True
                        break
                    time.sleep(0.1)
                if not ok:
                    left.append(ns)
            if left:
                print("# netns: could not delete %s" % left, file=sys.stderr)
            self.made = left
        with _LABS_LOCK:
            if self in _LABS:
                _LABS.remove(self)

    def __enter__(self):
        return self.setup()

    def __exit__(self, *exc):
        self.close()
        return False


# ---------------------------------------------------------------- the cluster

def _can_connect(addr, timeout=0.3):
    try:
        socket.create_connection(addr, timeout=timeout).close()
        return True
    except OSError:
        return False


class NetNodeProc(lg.NodeProc):
    """loadgen's NodeProc, started in its lab namespace on its address."""

    def __init__(self, cluster, nid):
        super().__init__(cluster, nid)
        self.port = NODE_PORT

    @property
    def addr(self):
        return (self.cluster.lab.addr(self.id), self.port)

    @property
    def addr_s(self):
        return "%s:%d" % self.addr

    def start(self, timeout=10.0):
        lab = self.cluster.lab
        cmd = [lg.RINGCACHED, "-l", lab.addr(self.id), "-p", str(self.port), "-t", "2",
               "-m", str(self.cluster.mem), "--id", self.id, "--state-dir", self.state_dir,
               "--token-file", self.cluster.token_file] + self.cluster.node_args
        cmd += os.environ.get("RC_NODE_ARGS", "").split()
        with open(self.log, "ab") as err:
            self.proc = lab.popen(self.id, cmd, stdin=subprocess.DEVNULL, stdout=err,
                                  stderr=err)
        ok = lg.wait_for(lambda: self.proc.poll() is not None or _can_connect(self.addr),
                         timeout, 0.05)
        if ok and self.proc.poll() is None:
            return self
        self.stop(signal.SIGKILL)
        raise RuntimeError("ringcached %s did not start in %s: %s\n%s"
                           % (self.id, lab.ns[self.id], " ".join(cmd), self.tail()))


class NetCluster(lg.Cluster):
    """loadgen's Cluster whose nodes run in lab's namespaces (the caller
    has entered the client namespace, where ringctl runs). tls, data_tls
    as in lg.Cluster (its node and ringctl options, unchanged), with
    certificates that name the lab's addresses (lab_certs)."""

    def __init__(self, lab, **kw):
        super().__init__(**kw)
        self.lab = lab

    def add(self, nid):
        n = NetNodeProc(self, nid).start()
        self.nodes[nid] = n
        return n


def lab_certs(lab, d):
    """lg.cluster_certs for a lab (after setup): the node certificate
    names every node's address, the client namespace's and 127.0.0.1, so
    peers, clients and ringctl check the name they dial."""
    return lg.cluster_certs(d, [lab.addr(i) for i in lab.ids] + [lab.client_addr])


def start_cluster(t, lab, ids, replicas=2, mem=64, node_args=(), etcd=None, node_store=False,
                  tls=None, data_tls=False):
    """lg.start_cluster in the lab: (NetCluster, ok) with TAP lines.
    etcd: an etcdlab.Etcd (maybe in a namespace of the lab) to keep the
    membership in; node_store: the nodes watch it too (--store), and with
    etcd keep their liveness leases there; tls (lab_certs), data_tls: see
    lg.Cluster (clients: lg.use_client_tls)."""
    cl = NetCluster(lab, replicas=replicas, mem=mem, node_args=node_args, etcd=etcd, tls=tls,
                    data_tls=data_tls)
    if node_store:
        cl.node_args += ["--store", cl.store]
    for i in ids:
        cl.add(i)
    rc, out, err = cl.ctl("init", "--members", cl.write_members(ids))
    ok = t.ok(rc == 0 and cl.store_epoch() == 1,
              "ringctl init in the namespaces (%s.0/24): exit 0, epoch 1" % lab.net,
              (rc, out[-500:], err[-500:]))
    conv = cl.converged(1, ids)
    ok = t.ok(all(v == (1, 0) for v in conv.values()), "every node reports EPOCH 1 0",
              conv) and ok
    return cl, ok
