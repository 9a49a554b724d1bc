"""The nemesis history and its checker (issue 11).

A History is a list of operations, each with the time it was invoked and
the time it completed (time.monotonic), the session (one connection of one
client thread) that ran it, the node it was sent to, the key, the kind
(set, delete, get, incr, final), the value and the outcome:

  ok       the node acknowledged it (a write) or answered it (a read)
  fail     it certainly did not take effect (TRYAGAIN, MOVED, no membership,
           not sent)
  unknown  it may or may not have taken effect (connection lost after the
           request was sent, "replica unavailable": applied at the primary,
           not acknowledged)

Register values are unique: every set and delete of a key carries a per-key
sequence number taken when it is invoked, and a set's value embeds it
("<key>:<seq>:" padded). A read's value names the write that produced it.

Classes the checker counts:

  lost         the final value of a key at one of its owners is older than
               an acknowledged write (a write invoked after the value's own
               write was acknowledged), or missing while an acknowledged set
               was not possibly followed by a delete; a counter missing at an
               owner, or a counter read/incr answered NOT_FOUND after it was
               created
  stale        a read that began after write W was acknowledged returned a
               value older than W, or a miss while no delete could have
               followed W
  ryw          a read sent after write W on the same connection (pipelined:
               before W's reply came), W acknowledged, returned a value
               older than W or a miss (and is not already stale)
  resurrected  a read or final value older than an acknowledged delete that
               follows its write, with no acknowledged set in between
  counter      a counter's final value at an owner outside [initial + acked
               increments, initial + acked + unknown increments]
  phantom      a value no write (invoked before the read ended) produced
  divergent    the final values of a register key at its owners differ,
               and no write of the key whose outcome is unknown (applied
               at some owners, perhaps) began after the oldest of them was
               written: the owners disagree on something acknowledged
  stuck        after the fault schedule and the recovery attempts (resume,
               abort, repair), the store or a node is still pending, fenced,
               recovering or down

"Older" is by real time, not only by sequence number: two writes of one key
that overlap in time (set and delete from two connections) may take effect
in either order, so a value is older than W only if W was invoked after the
value's write completed with an acknowledgement. Sequence numbers are taken
at invocation, so that also means W's number is higher."""
import bisect
import math
import threading

INF = math.inf


def reg_value(key, seq, size=40):
    head = ("%s:%d:" % (key, seq)).encode()
    return head + b"." * max(0, size - len(head))


def reg_seq(key, data):
    """The sequence number in a register value of key; -1 if it is not one
    (corrupt, another key's value)."""
    try:
        k, s, pad = data.split(b":", 2)
        if k.decode() != key or pad.strip(b".") != b"":
            return -1
        return int(s)
    except (ValueError, UnicodeDecodeError):
        return -1


class Op:
    __slots__ = ("id", "session", "node", "key", "kind", "value", "invoke", "complete",
                 "outcome", "why")

    def __init__(self, id, session, node, key, kind, value, invoke, complete, outcome,
                 why=None):
        self.id = id
        self.session = session
        self.node = node
        self.key = key
        self.kind = kind
        self.value = value
        self.invoke = invoke
        self.complete = complete
        self.outcome = outcome
        self.why = why

    def __repr__(self):
        return ("#%d %s@%s %s %s=%r [%.3f,%.3f] %s%s"
                % (self.id, self.session, self.node, self.kind, self.key, self.value,
                   self.invoke, self.complete, self.outcome,
                   " (%s)" % self.why if self.why else ""))


class History:
    """Thread-safe. seq(key) hands out a register key's next sequence
    number; add() records one operation (ids grow in the order records are
    added; on one session that is the order the commands were sent)."""

    def __init__(self):
        self.ops = []
        self.lock = threading.Lock()
        self.seqs = {}
        self.counters = {}      # key -> initial value (its creating set was acknowledged)
        self.counter_since = {}  # key -> when it was (re)set to its initial value
        self.final = []         # (key, node, value): seq / None (miss) / int (counter)
        self.recovery = None    # {"store_pending": bool, "nodes": {id: row}} after recovery
        self.faults = []        # (time, description)

    def seq(self, key):
        with self.lock:
            s = self.seqs.get(key, 0) + 1
            self.seqs[key] = s
            return s

    def add(self, session, node, key, kind, value, invoke, complete, outcome, why=None):
        assert outcome in ("ok", "fail", "unknown"), outcome
        with self.lock:
            op = Op(len(self.ops), session, node, key, kind, value, invoke, complete, outcome,
                    why)
            self.ops.append(op)
            return op

    def counter(self, key, initial=0, since=-INF):
        """key is a counter, at initial from time since on (a flush and a
        set again start it anew: increments begun before are not counted,
        except those of unknown outcome, which may still land)."""
        self.counters[key] = initial
        self.counter_since[key] = since

    def add_final(self, key, node, value):
        self.final.append((key, node, value))

    def fault(self, t, what):
        self.faults.append((t, what))


CLASSES = ("lost", "stale", "resurrected", "counter", "phantom", "stuck", "divergent",
           "ryw")


def _empty():
    return {c: [] for c in CLASSES}


class _KeyIndex:
    """One register key's writes, indexed so that each observation is
    judged in O(log n): the newest (highest sequence number) acknowledged
    write completed before a time, and whether some delete that was not
    certainly refused began before a time and may have taken effect after
    a given set."""

    def __init__(self, writes):
        self.writes = writes                        # seq -> op
        acked = sorted((w for w in writes.values() if w.outcome == "ok"),
                       key=lambda w: w.complete)
        self.ack_t = [w.complete for w in acked]
        self.ack_best = []                          # prefix max by seq
        best = None
        for w in acked:
            if best is None or w.value > best.value:
                best = w
            self.ack_best.append(best)
        dels = sorted((w for w in writes.values() if w.kind == "delete"
                       and w.outcome != "fail"), key=lambda w: w.invoke)
        self.del_t = [d.invoke for d in dels]
        self.del_late = []                          # prefix max of "may act until"
        m = -INF
        for d in dels:
            m = max(m, d.complete if d.outcome == "ok" else INF)
            self.del_late.append(m)

    def newest_before(self, t):
        i = bisect.bisect_left(self.ack_t, t)
        return self.ack_best[i - 1] if i else None

    def delete_after(self, w, t_end):
        """A delete begun before t_end that may have taken effect after w
        began (it had not completed before w was invoked)."""
        i = bisect.bisect_left(self.del_t, t_end)
        return bool(i) and self.del_late[i - 1] >= w.invoke


def _judge(ix, r_invoke, r_complete, value, session_last=None):
    """A register observation: value (seq or None) seen by a read that ran
    from r_invoke to r_complete; session_last: the last acknowledged write
    of the key sent earlier on the read's own connection.
    -> None, or (class, the write it contradicts)."""
    w = ix.newest_before(r_invoke)
    if session_last is not None and (w is None or session_last.value > w.value):
        w = session_last
    if value is not None:
        s = ix.writes.get(value)
        if s is None or s.kind != "set" or s.invoke > r_complete:
            return "phantom", s
        if w is None or w.value <= s.value:
            return None
        s_done = s.complete if s.outcome == "ok" else INF
        if w.invoke > s_done or (w is session_last and s.outcome == "ok"
                                 and s.session == w.session):
            return ("resurrected" if w.kind == "delete" else "stale"), w
        return None
    if w is None or w.kind == "delete":
        return None
    if ix.delete_after(w, r_complete):
        return None
    return "stale", w


def check(h):
    """-> {class: [examples]} (each example a short tuple)."""
    out = _empty()
    writes = {}                 # key -> {seq: write op}
    reads, incrs = [], {}
    last_in_session = {}        # (session, key) -> last acknowledged write so far
    for op in h.ops:
        if op.kind in ("set", "delete") and op.key not in h.counters:
            writes.setdefault(op.key, {})[op.value] = op
            if op.outcome == "ok" and op.session is not None:
                last_in_session[(op.session, op.key)] = op
        elif op.kind == "get" and op.outcome == "ok":
            reads.append((op, last_in_session.get((op.session, op.key))))
        elif op.kind == "incr":
            incrs.setdefault(op.key, []).append(op)
    index = {k: _KeyIndex(w) for k, w in writes.items()}
    empty = _KeyIndex({})
    for r, sl in reads:
        if r.key in h.counters:
            if r.value is None:
                out["lost"].append(("counter read miss", r))
            continue
        ix = index.get(r.key, empty)
        v = _judge(ix, r.invoke, r.complete, r.value)
        if v:
            out[v[0]].append((r, v[1]))
        elif sl is not None:
            # Not older than anything acknowledged before the read began,
            # but older than a write sent before it on its own connection.
            v = _judge(ix, r.invoke, r.complete, r.value, sl)
            if v:
                out["ryw"].append((r, v[1]))
    for k, ops in incrs.items():
        for op in ops:
            if op.outcome == "ok" and op.value is None:
                out["lost"].append(("incr NOT_FOUND", op))
    judged = set()              # keys with a final value reported above
    for key, node, value in h.final:
        if key in h.counters:
            ops = incrs.get(key, [])
            since = h.counter_since.get(key, -INF)
            acked = sum(1 for o in ops if o.outcome == "ok" and o.value is not None
                        and o.invoke >= since)
            unk = sum(1 for o in ops if o.outcome == "unknown")
            lo = h.counters[key] + acked
            if value is None:
                out["lost"].append(("counter missing", key, node))
            elif not lo <= value <= lo + unk:
                out["counter"].append((key, node, value, "expected [%d, %d]" % (lo, lo + unk)))
            continue
        v = _judge(index.get(key, empty), INF, INF, value)
        if v:
            cls = {"stale": "lost"}.get(v[0], v[0])
            out[cls].append(("final", key, node, value, v[1]))
            judged.add(key)
    out["divergent"].extend(_divergent(h, writes, judged))
    rec = h.recovery
    if rec is not None:
        if rec.get("error"):
            out["stuck"].append(("status", rec["error"]))
        if rec.get("store_pending"):
            out["stuck"].append(("store", "pending transition"))
        for nid, row in sorted(rec.get("nodes", {}).items()):
            bad = []
            if row.get("state", "up") != "up":
                bad.append("state " + row.get("state"))
            if row.get("pending", "0") not in ("0", "-"):
                bad.append("pending " + row.get("pending"))
            if row.get("phase", "NONE") not in ("NONE", "-"):
                bad.append("phase " + row.get("phase"))
            if "recovering" in row.get("flags", "") or "nostate" in row.get("flags", ""):
                bad.append("flags " + row.get("flags"))
            if bad:
                out["stuck"].append((nid, ", ".join(bad)))
    return out


def _divergent(h, writes, judged):
    """Register keys whose owners hold different final values that no
    write of unknown outcome explains (not those already judged lost,
    stale or resurrected at an owner)."""
    held = {}
    for key, node, value in h.final:
        if key not in h.counters and key not in judged:
            held.setdefault(key, {})[node] = value
    out = []
    for key, by_node in sorted(held.items()):
        vals = set(by_node.values())
        if len(vals) < 2:
            continue
        ws = writes.get(key, {})
        # The oldest state held: a miss could follow any write.
        seqs = [v for v in vals if v is not None]
        since = -INF if None in vals or not seqs else min(
            (ws[v].invoke for v in seqs if v in ws), default=-INF)
        if any(w.outcome == "unknown" and w.invoke >= since for w in ws.values()):
            continue
        out.append(("owners differ", key, tuple(sorted(by_node.items()))))
    return out


def summary(h, res):
    return ("operations %d faults %d lost %d stale %d resurrected %d stuck %d divergent %d "
            "(counter %d phantom %d ryw %d)"
            % (len(h.ops), len(h.faults), len(res["lost"]), len(res["stale"]),
               len(res["resurrected"]), len(res["stuck"]), len(res["divergent"]),
               len(res["counter"]), len(res["phantom"]), len(res["ryw"])))


def violations(res, exclude=()):
    return sum(len(v) for c, v in res.items() if c not in exclude)


def excerpt(h, res, per_class=3, around=3):
    """Lines for a report: a few examples of each class, the last fault
    begun before each, and the key's operations around it."""
    lines = []
    for cls, exs in res.items():
        for ex in exs[:per_class]:
            lines.append("%s: %r" % (cls, ex))
            op = next((x for x in ex if isinstance(x, Op)), None)
            if op is None:
                continue
            before = [f for f in h.faults if f[0] <= op.invoke]
            if before:
                lines.append("    %.2f s after the fault: %s" % (op.invoke - before[-1][0],
                                                               before[-1][1]))
            ops = [o for o in h.ops if o.key == op.key]
            i = next((j for j, o in enumerate(ops) if o.id == op.id), len(ops))
            for o in ops[max(0, i - around * 2):i + around]:
                lines.append("    %r" % o)
    return lines
