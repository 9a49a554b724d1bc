"""ringctl watch --kubernetes against recorded pod events, on 127.0.0.1:
a fake Kubernetes API (the StatefulSet `ringcache` and its pods, changed by
the test as the control plane would) and real ringcached nodes, each on
its own loopback address (127.0.0.10 + i) and the same port, named
ringcache-i.ringcache as the headless Service names them (a hosts file
read through Debian's libnss-wrapper, preloaded into every process).
Under a recorded read/write load (R=2):
- scale-out 3 -> 5: spec.replicas 5, the new pods Pending (nothing
  happens), then running one after the other: the watch joins
  ringcache-4, then ringcache-3;
- scale-in 5 -> 3: spec.replicas 4, then 3; each pod beyond is marked for
  deletion and runs its preStop (`ringctl wait-left ID`), which returns
  once the watch had the member leave, and only then is its process
  stopped;
- each of the four changes checked as the cluster tests check a join or a
  leave: 0 lost, stale or resurrected values, the expected movement, no
  errors on ranges that did not move, every owner serving at the end;
- a pod below spec.replicas that is deleted and comes back (a rolling
  restart) is not made to leave.
Skipped when libnss-wrapper is not installed (tests/deps.sh installs it)."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NSS_WRAPPER = "/usr/lib/x86_64-linux-gnu/libnss_wrapper.so"
HERE = os.path.dirname(os.path.abspath(__file__))


def reexec_with_hosts():
    """Run this test again with the hosts file preloaded (names resolve in
    this process too: the load and the checks connect by name)."""
    if os.environ.get("NSS_WRAPPER_HOSTS") or not os.path.exists(NSS_WRAPPER):
        return
    import tempfile
    d = tempfile.mkdtemp(prefix="rc-k8s-hosts-")
    hosts = os.path.join(d, "hosts")
    with open(hosts, "w") as f:
        for i in range(6):
            f.write("127.0.0.%d ringcache-%d.ringcache\n" % (10 + i, i))
    pre = os.environ.get("LD_PRELOAD", "")  # a sanitizer's runtime stays first
    env = dict(os.environ, LD_PRELOAD=(pre + " " + NSS_WRAPPER).strip(), NSS_WRAPPER_HOSTS=hosts,
               NSS_WRAPPER_PASSWD="/etc/passwd", NSS_WRAPPER_GROUP="/etc/group",
               # RTLD_DEEPBIND, its default, is refused by a sanitizer's runtime.
               NSS_WRAPPER_DISABLE_DEEPBIND="1",
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


reexec_with_hosts()
sys.path.insert(0, HERE)
import loadgen as lg  # noqa: E402

NKEYS = 2000
NS = "cache"


class FakeAPI:
    """The two reads the watch makes, answered from self.sts / self.pods
    (changed by the test under self.lock)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.replicas = 3
        self.pods = {}  # name -> {"phase", "running", "deleting"}
        self.gets = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                with api.lock:
                    api.gets += 1
                    body = api.reply(self.path)
                code = 200 if body is not None else 404
                data = json.dumps(body if body is not None else {"kind": "Status"}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def reply(self, path):
        if path == "/apis/apps/v1/namespaces/%s/statefulsets/ringcache" % NS:
            return {"kind": "StatefulSet", "metadata": {"name": "ringcache"},
                    "spec": {"replicas": self.replicas, "serviceName": "ringcache",
                             "selector": {"matchLabels": {"app": "ringcache"}}}}
        if path == "/api/v1/namespaces/%s/pods?labelSelector=app%%3Dringcache" % NS:
            items = []
            for name, p in sorted(self.pods.items()):
                i = int(name.rsplit("-", 1)[1])
                meta = {"name": name}
                if p["deleting"]:
                    meta["deletionTimestamp"] = "2026-12-07T06:00:00Z"
                status = {"phase": p["phase"], "containerStatuses": [
                    {"name": "ringcached",
                     "state": {"running": {}} if p["running"] else {"waiting": {}}}]}
                if p["phase"] == "Running":
                    status["podIP"] = "127.0.0.%d" % (10 + i)
                items.append({"metadata": meta, "status": status})
            return {"kind": "PodList", "items": items}
        return None

    def set_pod(self, name, phase="Running", running=True, deleting=False):
        with self.lock:
            self.pods[name] = {"phase": phase, "running": running, "deleting": deleting}

    def drop_pod(self, name):
        with self.lock:
            self.pods.pop(name, None)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class PodNode(lg.NodeProc):
    """A node on its pod's address: 127.0.0.(10+i), the cluster's port,
    named ringcache-i.ringcache."""

    def __init__(self, cluster, i, port):
        super().__init__(cluster, "ringcache-%d" % i)
        self.ip = "127.0.0.%d" % (10 + i)
        self.name = "ringcache-%d.ringcache" % i
        self.port = port

    @property
    def addr(self):
        return (self.name, self.port)

    @property
    def addr_s(self):
        return "%s:%d" % (self.name, self.port)

    def start(self, timeout=10.0):
        cmd = [lg.RINGCACHED, "-l", self.ip, "-p", str(self.port), "-t", "2", "-m",
               str(self.cluster.mem), "--id", self.id, "--state-dir", self.state_dir,
               "--token-file", self.cluster.token_file]
        with open(self.log, "ab") as err:
            self.proc = lg.track(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err,
                                                  stderr=err))

        def up():
            try:
                import socket
                socket.create_connection((self.ip, self.port), timeout=0.3).close()
                return True
            except OSError:
                return self.proc.poll() is not None
        if not lg.wait_for(up, timeout) or self.proc.poll() is not None:
            raise RuntimeError("%s did not start:\n%s" % (self.id, self.tail()))
        return self


def member_ids(cl):
    return sorted(i for i, _ in lg.parse_members(cl.store_active())["nodes"])


def scenario(t, api, port):
    cl = lg.Cluster(replicas=2)
    watch = None
    try:
        for i in range(3):
            cl.nodes["ringcache-%d" % i] = PodNode(cl, i, port).start()
            api.set_pod("ringcache-%d" % i)
        ids = ["ringcache-0", "ringcache-1", "ringcache-2"]
        rc, out, err = cl.ctl("init", "--members", cl.write_members(ids))
        if not t.ok(rc == 0 and cl.store_epoch() == 1, "ringctl init of three pods by name",
                    (rc, out[-500:], err[-500:])):
            return
        watch = cl.ctl_bg("watch", "--interval", "0.2", "--kubernetes", "ringcache",
                          "--k8s-namespace", NS, "--k8s-api", api.url, "--k8s-port", str(port))
        keys = ["k8s-%d" % i for i in range(NKEYS)]
        view = lg.View(keys, [cl.nodes["ringcache-0"].addr])
        hist = lg.History(keys, size=200)
        t.ok(view.refresh(1), "the client learns epoch 1 (nodes by name)", view.text)
        t.ok(lg.fill_fast(hist, view) == NKEYS, "fill: every key acknowledged")
        load = lg.Load(hist, view, "epoch", writers=3, readers=2, seed=11, progress=t.diag)
        gets0 = api.gets
        t.ok(lg.wait_for(lambda: api.gets >= gets0 + 4, 20, 0.05) and cl.store_epoch() == 1,
             "the watch reads the API and, with the ring matching the StatefulSet, changes "
             "nothing", api.gets)

        # ---- scale-out 3 -> 5: spec.replicas 5, the pods Pending, then
        # running one after the other (ringcache-4 first).
        with api.lock:
            api.replicas = 5
        for i in (3, 4):
            api.set_pod("ringcache-%d" % i, phase="Pending", running=False)
        g0 = api.gets  # two more rounds of the watch see them Pending
        t.ok(lg.wait_for(lambda: api.gets >= g0 + 4, 20, 0.05) and cl.store_epoch() == 1,
             "Pending pods are not joined", cl.store_active())
        epoch, phase = 1, 1
        for i in (4, 3):
            name = "ringcache-%d" % i
            before = cl.store_active()

            def runs(i=i, name=name, want=epoch + 1):
                cl.nodes[name] = PodNode(cl, i, port).start()
                api.set_pod(name)
                return lg.wait_for(lambda: cl.store_epoch() == want and not cl.store_pending(),
                                   90, 0.1)
            done = lg.run_load_around(load, phase, runs, timeout=120)
            epoch += 1
            t.ok(done and name in member_ids(cl),
                 "scale-out: %s runs, the watch joins it (epoch %d)" % (name, epoch),
                 cl.store_active())
            lg.check_transition(t, cl, hist, phase, before, cl.store_active(),
                                "scale-out, join %s" % name)
            phase += 1

        # ---- scale-in 5 -> 3: spec.replicas 4, then 3; each pod beyond is
        # marked for deletion and runs its preStop (ringctl wait-left); its
        # process stops only when that returns.
        for i in (4, 3):
            name = "ringcache-%d" % i
            before = cl.store_active()

            def scale_in(i=i, name=name, want=epoch + 1):
                with api.lock:
                    api.replicas = i
                api.set_pod(name, deleting=True)
                p = lg.track(subprocess.Popen(
                    cl.ctl_cmd("wait-left", name, "--grace", "30", "--timeout", "120"),
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True))
                try:
                    _o, e = p.communicate(timeout=150)
                except subprocess.TimeoutExpired:
                    p.kill()
                    _o, e = p.communicate()
                still = name in member_ids(cl)
                cl.nodes[name].stop()
                api.drop_pod(name)
                done = lg.wait_for(lambda: cl.store_epoch() == want and not cl.store_pending(),
                                   30, 0.1)
                return p.returncode, e, still, done
            rc, err, still, done = lg.run_load_around(load, phase, scale_in, timeout=180)
            epoch += 1
            t.ok(rc == 0 and "not a member" in err and not still,
                 "scale-in: %s's preStop (ringctl wait-left) returned 0 once it had left, "
                 "before its process stopped" % name, (rc, err))
            t.ok(done and name not in member_ids(cl),
                 "scale-in: the watch had %s leave (epoch %d)" % (name, epoch),
                 cl.store_active())
            lg.check_transition(t, cl, hist, phase, before, cl.store_active(),
                                "scale-in, leave %s" % name)
            phase += 1
        t.ok(member_ids(cl) == ids and cl.store_epoch() == 5, "back to three members",
             cl.store_active())

        # ---- a rolling restart's deleted pod below replicas: no leave
        api.set_pod("ringcache-1", deleting=True)
        r = subprocess.run(cl.ctl_cmd("wait-left", "ringcache-1", "--grace", "2"),
                           capture_output=True, text=True, timeout=60)
        t.ok(r.returncode == 0 and "not a scale-in" in r.stderr and cl.store_epoch() == 5
             and "ringcache-1" in member_ids(cl),
             "a pod below spec.replicas being deleted: wait-left returns after its grace, "
             "no change", (r.returncode, r.stderr, cl.store_active()))
        api.set_pod("ringcache-1")

        watch.send_signal(signal.SIGTERM)
        try:
            out, err = watch.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            watch.kill()
            out, err = watch.communicate()
        acts = [l.split("\t")[2:] for l in out.splitlines() if "\twatch\t" in l]
        t.ok(acts == [["ringcache-4", "join", "done"], ["ringcache-3", "join", "done"],
                      ["ringcache-4", "leave", "done"], ["ringcache-3", "leave", "done"]]
             and watch.returncode == 0,
             "the watch printed its four actions in order and stopped on SIGTERM",
             (acts, lg.tail(err)))
        watch = None
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
            watch.wait()
        lg.close_cluster(t, cl)


def main():
    if not os.environ.get("NSS_WRAPPER_HOSTS"):
        t = lg.Tap()
        t.skip("watch --kubernetes", "libnss-wrapper is not installed (Debian: libnss-wrapper)")
        t.done()
        return
    why = lg.supports_cluster()
    api = FakeAPI()
    try:
        t = lg.Tap()
        if why:
            t.skip("watch --kubernetes", why)
        else:
            lg.watchdog(400)
            lg.run_tap(t, scenario, api, lg.free_port_pair())
        t.done()
    finally:
        api.close()


if __name__ == "__main__":
    main()
