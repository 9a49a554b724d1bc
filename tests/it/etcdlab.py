"""A real etcd (Debian's etcd-server) for the tests: one member on
127.0.0.1 free ports, its data in a directory of the test's own, stopped by
PID. Optionally TLS (a CA, server and client certificates made with
openssl, client certificates required) and etcd auth (user root with a
password in a file).

    e = Etcd(workdir, tls=False, auth=False).start()
    e.spec("rc")            # "etcd://127.0.0.1:PORT/rc[?options]" for --store
    e.get("rc/active.members")  # a key's value through etcdctl ('' if none)
    e.stop(); e.start()     # an outage, then the same data back
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402  (lg.track: the watchdog kills etcd too)
import tlscerts  # noqa: E402

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
ETCDCTL = shutil.which("etcdctl") or "/usr/bin/etcdctl"


def available():
    """'' when etcd and etcdctl are installed, else why not."""
    for b in (ETCD, ETCDCTL):
        if not os.access(b, os.X_OK):
            return "%s not installed (Debian packages etcd-server, etcd-client)" % b
    return ""


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def make_certs(d):
    """A CA, a server certificate for 127.0.0.1 and a client certificate
    in directory d: {'ca', 'server_cert', 'server_key', 'client_cert',
    'client_key'} paths."""
    os.makedirs(d, exist_ok=True)
    ca = tlscerts.make_ca(d, "ca", "ringcache test CA")
    server = tlscerts.make_cert(d, "server", ca, san="IP:127.0.0.1",
                                usage="serverAuth,clientAuth")
    client = tlscerts.make_cert(d, "client", ca, usage="clientAuth")
    return {"ca": ca[1], "server_cert": server[1], "server_key": server[0],
            "client_cert": client[1], "client_key": client[0]}


class Etcd:
    def __init__(self, workdir, tls=False, auth=False, name="e1", host=None, popen=None):
        """host: listen there on etcd's own ports 2379/2380 (a network
        namespace's address; popen(argv, **kw) starts it in there), else
        on 127.0.0.1 free ports."""
        self.dir = os.path.join(workdir, "etcd-" + name)
        os.makedirs(self.dir, exist_ok=True)
        self.name = name
        self.tls = tls
        self.auth = auth
        self.host = host or "127.0.0.1"
        self.port = 2379 if host else _free_port()
        self.peer_port = 2380 if host else _free_port()
        self.popen = popen or (lambda argv, **kw: lg.track(subprocess.Popen(argv, **kw)))
        self.proc = None
        self.certs = make_certs(os.path.join(self.dir, "certs")) if tls else None
        self.password_file = os.path.join(self.dir, "password")
        self.password = "pw-%d" % os.getpid()
        with open(self.password_file, "w") as f:
            f.write(self.password + "\n")
        os.chmod(self.password_file, 0o600)
        self.log = os.path.join(self.dir, "etcd.log")
        self._auth_on = False

    @property
    def endpoint(self):
        return "%s:%d" % (self.host, self.port)

    def _url(self):
        return "%s://%s:%d" % ("https" if self.tls else "http", self.host, self.port)

    def _peer_url(self):
        return "http://%s:%d" % (self.host, self.peer_port)

    def start(self, timeout=30):
        cmd = [ETCD, "--name", self.name, "--data-dir", os.path.join(self.dir, "data"),
               "--listen-client-urls", self._url(), "--advertise-client-urls", self._url(),
               "--listen-peer-urls", self._peer_url(),
               "--initial-advertise-peer-urls", self._peer_url(),
               "--initial-cluster", "%s=%s" % (self.name, self._peer_url())]
        if self.tls:
            cmd += ["--cert-file", self.certs["server_cert"], "--key-file",
                    self.certs["server_key"], "--trusted-ca-file", self.certs["ca"],
                    "--client-cert-auth"]
        with open(self.log, "ab") as log:
            self.proc = self.popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("etcd exited (%s); see %s" % (self.proc.returncode, self.log))
            if self._ctl("endpoint", "health", timeout=3).returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("etcd did not become healthy in %d s; see %s" % (timeout, self.log))
        if self.auth and not self._auth_on:
            for args in (("user", "add", "root:" + self.password), ("auth", "enable")):
                r = self._ctl(*args)
                if r.returncode != 0:
                    raise RuntimeError("etcdctl %s: %s" % (" ".join(args[:2]), r.stderr))
            self._auth_on = True
        return self

    def _ctl(self, *args, timeout=10):
        cmd = [ETCDCTL, "--endpoints", self._url(), "--dial-timeout", "2s"]
        if self.tls:
            cmd += ["--cacert", self.certs["ca"], "--cert", self.certs["client_cert"],
                    "--key", self.certs["client_key"]]
        if self._auth_on:
            cmd += ["--user", "root:" + self.password]
        env = dict(os.environ, ETCDCTL_API="3")
        try:
            return subprocess.run(cmd + list(args), env=env, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as ex:
            return subprocess.CompletedProcess(cmd, 124, "", "timed out: %s" % ex)

    def get(self, key):
        """The value of key (no leading '/': the prefix is '/'+key's
        first part as spec() makes it), '' when absent."""
        r = self._ctl("get", "--print-value-only", "/" + key)
        return r.stdout if r.returncode == 0 else ""

    def spec(self, prefix, extra=""):
        """The --store value for key prefix /prefix."""
        opts = []
        if self.tls:
            opts += ["cacert=" + self.certs["ca"], "cert=" + self.certs["client_cert"],
                     "key=" + self.certs["client_key"]]
        if self.auth:
            opts += ["user=root", "password-file=" + self.password_file]
        if extra:
            opts.append(extra)
        return "%s://%s/%s%s" % ("etcds" if self.tls else "etcd", self.endpoint, prefix,
                                 "?" + "&".join(opts) if opts else "")

    def stop(self):
        """SIGTERM, then SIGKILL after 10 s; the data directory stays."""
        lg.stop_proc(self.proc, 10)

    def pause(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)
