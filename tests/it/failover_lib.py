"""Helpers of the node-failure tests (issue 6): is replication on, the
per-owner check that every key is back on R distinct nodes, the reply of
one raw request, and TAP lines that wait for replication.

Until writes are replicated (CLUSTER_REPLICATED in server/cluster.h) a
secondary holds nothing current, so a dead primary's keys are lost and a
secondary cannot be read: those checks print `# TODO replication` (run and
reported, not yet required) and become real checks once a secondary
serves reads."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402


def replicated(cl, members):
    """True when a secondary serves the value written at the primary (the
    node replicates writes), probed with one key."""
    m = lg.parse_members(members)
    if m["replicas"] < 2:
        return False
    key = "repl-probe"
    owners = lg.locate(members, [key], 2)[key]
    if len(owners) < 2:
        return False
    addr = {i: lg.parse_addr(a) for i, a in m["nodes"]}
    c = lg.Conn(addr[owners[0]])
    try:
        c.declare(m["epoch"])
        if c.store("set", key, b"v1") != b"STORED":
            return False
    finally:
        c.close()
    c = lg.Conn(addr[owners[1]])
    try:
        c.declare(m["epoch"])
        vals, _ = c.get_multi([key])
    finally:
        c.close()
    c = lg.Conn(addr[owners[0]])
    try:
        c.declare(m["epoch"])
        c.delete(key)   # the sweeps count items that are no harness key
    finally:
        c.close()
    return vals is not None and vals.get(key) == b"v1"


def todo_ok(t, cond, desc, todo, diag=None):
    """A TAP line that is a real check, or with `todo` set, a TODO one
    (reported either way; a TODO failure does not fail the run)."""
    if not todo:
        return t.ok(cond, desc, diag)
    t.n += 1
    print("%s %d - %s # TODO %s" % ("ok" if cond else "not ok", t.n, desc, todo))
    if not cond and diag is not None:
        for line in str(diag).splitlines()[:20]:
            print("# " + line)
    sys.stdout.flush()
    return cond


def raw(addr, line, timeout=3.0):
    """Send one request line (bytes, with CRLF) on a fresh connection; the
    first reply line (bytes), or an exception's text."""
    try:
        c = lg.Conn(addr, timeout)
    except OSError as e:
        return ("connect: %s" % e).encode()
    try:
        c.send(line)
        return c.readline()
    except (OSError, lg.ProtoError) as e:
        return ("error: %s" % e).encode()
    finally:
        c.close()


def copies(hist, members, batch=100, primary_only=False):
    """Read every acknowledged key on each of its owners per `members`
    (declared connections): {"missing": [(key, node)], "moved": n,
    "errors": [...], "checked": n}. A key deleted last must be absent; any
    other must hold its last acknowledged value or a later one, or be
    absent when a delete that failed (SERVER_ERROR: it may have taken
    effect at the primary) started after that acknowledgement."""
    m = lg.parse_members(members)
    owners = lg.locate(members, hist.keys)
    addr = {i: lg.parse_addr(a) for i, a in m["nodes"]}
    out = {"missing": [], "moved": 0, "errors": [], "checked": 0}
    for nid in addr:
        keys = [k for k in hist.keys
                if (owners[k][0] == nid if primary_only else nid in owners[k])]
        try:
            c = lg.Conn(addr[nid], 5.0)
            c.declare(m["epoch"])
        except (OSError, lg.ProtoError) as e:
            out["errors"].append("%s: %s" % (nid, e))
            continue
        try:
            for i in range(0, len(keys), batch):
                chunk = keys[i:i + batch]
                vals, err = c.get_multi(chunk)
                if vals is None:
                    if lg.parse_redirect(err):
                        out["moved"] += len(chunk)
                    else:
                        out["errors"].append("%s: %r" % (nid, err))
                    continue
                for k in chunk:
                    last = [o for o in hist.ops[k] if o[4] == "ok"]
                    if not last:
                        continue
                    out["checked"] += 1
                    seq = lg.parse_value(k, vals[k]) if k in vals else None
                    if last[-1][1] == "d":
                        continue    # a later unacked set may have landed
                    undone = any(o[1] == "d" and o[4] != "ok" and o[2] >= last[-1][3]
                                 for o in hist.ops[k])
                    if (seq is None and not undone) or (seq is not None and seq < last[-1][0]):
                        out["missing"].append((k, nid))
        except (OSError, lg.ProtoError) as e:
            out["errors"].append("%s: %s" % (nid, e))
        finally:
            c.close()
    return out


def status_row(cl, nid):
    """`ringctl status` row of node nid (dict by column), {} if absent."""
    return cl.status()["nodes"].get(nid, {})


class _NodeState:
    """One node's health as the client library keeps it (client/pool.c):
    marked down with a back-off (retry interval doubling up to a maximum),
    one probing caller once the back-off ran out, and a generation that
    moves on each marking so every thread drops its idle connections."""
    __slots__ = ("down", "until", "fails", "probing", "probe_at", "gen")

    def __init__(self):
        self.down = False
        self.until = 0.0
        self.fails = 0
        self.probing = False
        self.probe_at = 0.0
        self.gen = 0


class FailoverClient(lg.Client):
    """loadgen's epoch client that fails over down the preference list the
    way libringcache does (client/ringcache.c owners_once and node_request,
    client/pool.c), so the unavailability the test measures is what a real
    smart client sees, not an artefact of this harness:
    - a node is skipped while marked down; once its back-off (RETRY s,
      doubling up to RETRY_MAX s) ran out, one caller probes it, the others
      keep skipping it; any reply from it clears the mark;
    - a connection or protocol error marks the node down, drops every
      thread's idle connection to it, and the same operation goes on at
      once to the next owner that is not marked down: a read always, a
      write only if the request itself was not sent (never applied twice);
    - a reused connection that fails before any byte of a reply came back
      (the node closed it while idle: an error, not a timeout) is retried
      once on a fresh one first.
    The health is shared by every client of one View (as by the threads of
    one library handle)."""
    RETRY = 1.0
    RETRY_MAX = 8.0
    _lock = lg.threading.Lock()     # guards every _NodeState

    def _nodes(self):
        with FailoverClient._lock:
            st = getattr(self.view, "failover_nodes", None)
            if st is None:
                st = self.view.failover_nodes = {}
            return st

    def _state(self, addr):
        nodes = self._nodes()
        with FailoverClient._lock:
            n = nodes.get(addr)
            if n is None:
                n = nodes[addr] = _NodeState()
            return n

    def _usable(self, addr, now):
        """pool_node_usable: not down, or down with the back-off run out and
        nobody probing (the caller becomes the prober). A probe whose
        caller never reported back (it followed a redirect elsewhere) is
        given up after an operation timeout."""
        n = self._state(addr)
        with FailoverClient._lock:
            if not n.down:
                return True
            stuck = n.probing and now - n.probe_at > self.timeout + self.RETRY
            if (not n.probing or stuck) and now >= n.until:
                n.probing = True
                n.probe_at = now
                return True
            return False

    def _mark_failed(self, addr):
        """pool_node_failed: one outage is one step of back-off, however
        many requests fail together."""
        n = self._state(addr)
        with FailoverClient._lock:
            n.gen += 1
            if n.down and not n.probing:
                return
            n.fails += 1
            n.down = True
            n.probing = False
            n.until = lg.time.monotonic() + min(self.RETRY * 2 ** min(n.fails - 1, 16),
                                                self.RETRY_MAX)

    def _answered(self, addr):
        """pool_node_ok."""
        n = self._state(addr)
        if n.down:
            with FailoverClient._lock:
                n.down = False
                n.probing = False
                n.fails = 0

    def _op_begin(self, key):
        self.tried = set()          # owners that failed in this operation
        self.stale_retried = set()  # owners whose reused connection was retried

    def _next_owner(self, key):
        """The first owner of key (current view) not failed in this
        operation and not marked down, or None."""
        _, addrs = self.view.route(key)
        now = lg.time.monotonic()
        for a in addrs:
            if a not in self.tried and self._usable(a, now):
                return a
        return None

    def _target(self, key):
        if self.mode == "any":
            return super()._target(key)
        epoch, addrs = self.view.route(key)
        a = self._next_owner(key)
        # Every owner marked down: try the first anyway (the library gives
        # up at once; here that costs one refused connect and is recorded).
        return epoch, a if a is not None else addrs[0]

    def _conn(self, addr, epoch):
        gen = self._state(addr).gen
        c = self.conns.get(addr)
        if c is not None and c.gen != gen:
            # The node was marked down since: its idle connections are gone.
            self.conns.pop(addr).close()
            c = None
        if c is None:
            c = lg.Conn(addr, self.timeout)
            c.gen = gen
            c.uses = 0
            self.conns[addr] = c
        c.uses += 1
        self.nread0 = c.nread
        if self.mode == "epoch" and c.declared != epoch:
            c.declare(epoch)
        return c

    def _failed(self, addr, kind, key, sent, err):
        c = self.conns.get(addr)
        # A timeout is not a connection closed while idle: the request may
        # still be on its way (in a partition, TCP delivers it after the
        # heal) and run after later writes; like the library
        # (client/node_io.c: EIO, not ETIMEDOUT), it is not sent again.
        if (c is not None and c.uses > 1 and c.nread == self.nread0
                and addr not in self.stale_retried
                and not isinstance(err, (lg.ProtoError, TimeoutError))):
            # Closed while idle: the request never ran; once more, fresh.
            self.stale_retried.add(addr)
            self.conns.pop(addr).close()
            return addr
        self._drop(addr)
        self._mark_failed(addr)
        self.tried.add(addr)
        if kind != "get" and sent:
            return None
        return self._next_owner(key)


def failed_ops(hist, phase, keys, t_from, reads_only=False):
    """The failed operations (write failed/indet, read error; reads only
    with reads_only) on keys in phase that ended at or after t_from,
    latest first, as (end - t_from, start - t_from, kind, key, status,
    node, why)."""
    out = []
    for k in ([] if reads_only else keys):
        for o in hist.ops[k]:
            if o[8] == phase and o[4] != "ok" and o[3] >= t_from:
                out.append((o[3] - t_from, o[2] - t_from, o[1], k, o[4], o[5], None))
    for rd in hist.reads:
        if rd[8] == phase and rd[0] in keys and rd[3] == "error" and rd[2] >= t_from:
            out.append((rd[2] - t_from, rd[1] - t_from, "g", rd[0], rd[3], rd[5], rd[10]))
    out.sort(reverse=True)
    return out


def unavailability(hist, phase, keys, t_from, reads_only=False):
    """Seconds from t_from to the end of the last failed operation (write
    failed/indet or read error; reads only with reads_only) on keys in
    phase; 0 when none failed."""
    f = failed_ops(hist, phase, keys, t_from, reads_only)
    return f[0][0] if f else 0.0
