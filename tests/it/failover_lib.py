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
    other must hold its last acknowledged value or a later one."""
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
                    if seq is None or seq < last[-1][0]:
                        out["missing"].append((k, nid))
        except (OSError, lg.ProtoError) as e:
            out["errors"].append("%s: %s" % (nid, e))
        finally:
            c.close()
    return out


def status_row(cl, nid):
    """`ringctl status` row of node nid (dict by column), {} if absent."""
    return cl.status()["nodes"].get(nid, {})


class FailoverClient(lg.Client):
    """loadgen's epoch client that fails over down the preference list: an
    address whose connection failed is skipped for a second (shared by
    every thread), so the next owner gets the request."""
    dead = {}

    def _target(self, key):
        epoch, addrs = self.view.route(key)
        now = lg.time.monotonic()
        for a in addrs:
            if FailoverClient.dead.get(a, 0) <= now:
                return epoch, a
        return epoch, addrs[0]

    def _drop(self, addr):
        super()._drop(addr)
        FailoverClient.dead[addr] = lg.time.monotonic() + 1.0


def unavailability(hist, phase, keys, t_from):
    """Seconds from t_from to the end of the last failed operation (write
    failed/indet or read error) on keys in phase; 0 when none failed."""
    worst = 0.0
    for k in keys:
        for o in hist.ops[k]:
            if o[8] == phase and o[4] != "ok" and o[3] >= t_from:
                worst = max(worst, o[3] - t_from)
    for rd in hist.reads:
        if rd[8] == phase and rd[0] in keys and rd[3] == "error" and rd[2] >= t_from:
            worst = max(worst, rd[2] - t_from)
    return worst
