"""Self-test of the nemesis checker (issue 11): each violation class is
planted once in a synthetic history and the checker must report exactly
that one violation; a clean history, with the legal behaviours that look
suspicious (overlapping writes in either order, an unknown write that was
applied, a pipelined get after its set, a counter with an unknown
increment), must report none. TAP."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker as ck  # noqa: E402

CLASSES = ck.CLASSES


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, desc, diag=None):
        self.n += 1
        print("%s %d - %s" % ("ok" if cond else "not ok", self.n, desc), flush=True)
        if not cond:
            self.failed += 1
            for line in str(diag).splitlines()[:40]:
                print("# " + line)
        return cond


def clean_history():
    """Legal only."""
    h = ck.History()
    k = "r1"

    def w(sess, kind, inv, comp, out, key=k):
        s = h.seq(key)
        h.add(sess, "a", key, kind, s, inv, comp, out)
        return s

    w("A", "set", 0, 1, "ok")                                   # 1
    h.add("B", "b", k, "get", 1, 2, 3, "ok")
    w("A", "set", 4, 5, "ok")                                   # 2
    h.add("B", "b", k, "get", 1, 4.5, 4.6, "ok")                # overlaps set 2: either value
    h.add("B", "b", k, "get", 2, 6, 7, "ok")
    w("A", "delete", 8, 9, "ok")                                # 3
    h.add("B", "b", k, "get", None, 10, 11, "ok")
    w("A", "set", 12, 13, "unknown")                            # 4, applied after all
    h.add("B", "b", k, "get", 4, 14, 15, "ok")
    w("A", "set", 16, 17, "fail")                               # 5, TRYAGAIN: not applied
    h.add("B", "b", k, "get", 4, 18, 19, "ok")
    # Set and delete of one key from two connections, overlapping: either
    # may take effect last, so a read after both may see the value or not.
    w("S1", "set", 20, 22, "ok")                                # 6
    w("S2", "delete", 21, 23, "ok")                             # 7
    h.add("B", "b", k, "get", 6, 24, 25, "ok")
    h.add("B", "b", k, "get", None, 26, 27, "ok")
    # Pipelined set + get on one connection: the get was sent before the
    # set's reply came, and must see it.
    s = w("P", "set", 30, 31, "ok")                             # 8
    h.add("P", "a", k, "get", s, 30, 31, "ok")
    h.add("B", "b", k, "get", None, 29, 30.5, "ok")              # began before set 8
    h.add("B", "b", k, "get", 8, 32, 33, "ok")
    h.add_final(k, "a", 8)
    h.add_final(k, "b", 8)
    # A key only ever deleted.
    w("A", "delete", 40, 41, "ok", key="r2")
    h.add_final("r2", "a", None)
    # Owners that differ because of a write of unknown outcome (replica
    # unavailable: applied at the primary only).
    w("A", "set", 42, 43, "ok", key="r3")
    w("A", "set", 44, 45, "unknown", key="r3")
    h.add_final("r3", "a", 2)
    h.add_final("r3", "b", 1)
    # A counter: 3 acknowledged increments, 1 unknown.
    h.counter("c1", 0)
    for i, out in enumerate(("ok", "ok", "unknown", "ok")):
        h.add("C", "a", "c1", "incr", i + 1 if out == "ok" else None, 50 + i, 50.5 + i, out)
    h.add_final("c1", "a", 3)
    h.add_final("c1", "b", 4)
    h.recovery = {"store_pending": False,
                  "nodes": {"a": {"state": "up", "pending": "0", "phase": "NONE", "flags": "-"},
                            "b": {"state": "up", "pending": "0", "phase": "NONE",
                                  "flags": "-"}}}
    return h


def base():
    h = ck.History()
    h.recovery = {"store_pending": False, "nodes": {}}
    return h


def planted():
    """(class, description, history) with exactly one violation each."""
    out = []

    h = base()
    h.add("A", "a", "k", "set", h.seq("k"), 0, 1, "ok")
    h.add("A", "a", "k", "set", h.seq("k"), 2, 3, "ok")
    h.add_final("k", "a", 2)
    h.add_final("k", "b", 1)      # owner b kept the older value
    out.append(("lost", "an owner's final value older than the last acknowledged set", h))

    h = base()
    h.add("A", "a", "k", "set", h.seq("k"), 0, 1, "ok")
    h.add("A", "a", "k", "set", h.seq("k"), 2, 3, "ok")
    h.add("B", "b", "k", "get", 1, 4, 5, "ok")   # began after set 2 was acknowledged
    h.add_final("k", "a", 2)
    out.append(("stale", "a read begun after set 2 was acknowledged returns set 1", h))

    h = base()
    s = h.seq("k")
    h.add("P", "b", "k", "set", s, 0, 1, "ok")
    h.add("P", "b", "k", "get", None, 0, 1, "ok")   # pipelined behind its own set: a miss
    h.add_final("k", "a", s)
    out.append(("ryw", "a pipelined get after its own acknowledged set misses", h))

    h = base()
    h.add("A", "a", "k", "set", h.seq("k"), 0, 1, "ok")
    h.add("A", "a", "k", "delete", h.seq("k"), 2, 3, "ok")
    h.add("B", "b", "k", "get", 1, 4, 5, "ok")
    h.add_final("k", "a", None)
    out.append(("resurrected", "a read after an acknowledged delete returns the deleted value",
                h))

    h = base()
    h.add("A", "a", "k", "set", h.seq("k"), 0, 1, "ok")
    h.add("A", "a", "k", "delete", h.seq("k"), 2, 3, "ok")
    h.add_final("k", "a", None)
    h.add_final("k", "b", 1)
    out.append(("resurrected", "an owner's final state holds a value after its acknowledged "
                "delete", h))

    h = base()
    h.counter("c", 10)
    for i in range(3):
        h.add("C", "a", "c", "incr", 11 + i, i, i + 0.5, "ok")
    h.add("C", "a", "c", "incr", None, 5, 5.5, "unknown")
    h.add_final("c", "a", 15)      # at most 14
    out.append(("counter", "a counter above acked + unknown increments", h))

    h = base()
    h.counter("c", 0)
    for i in range(3):
        h.add("C", "a", "c", "incr", 1 + i, i, i + 0.5, "ok")
    h.add_final("c", "a", 2)       # at least 3
    out.append(("counter", "a counter below its acknowledged increments", h))

    h = base()
    h.add("A", "a", "k", "set", h.seq("k"), 0, 1, "ok")
    h.add("A", "a", "k", "set", h.seq("k"), 2, 5, "ok")
    h.add(None, "b", "k", "delete", h.seq("k"), 3, 4, "ok")     # a flush, overlapping
    h.add_final("k", "a", 2)      # either order is legal at one owner,
    h.add_final("k", "b", None)   # but both owners must take the same
    out.append(("divergent", "owners took an acknowledged set and flush in two orders", h))

    h = base()
    h.add("A", "a", "k", "set", h.seq("k"), 0, 1, "ok")
    h.add("B", "b", "k", "get", 7, 2, 3, "ok")    # seq 7 never written
    h.add_final("k", "a", 1)
    out.append(("phantom", "a read returns a value no write produced", h))

    h = base()
    h.recovery = {"store_pending": False,
                  "nodes": {"a": {"state": "up", "pending": "4", "phase": "FENCED",
                                  "flags": "-"},
                            "b": {"state": "up", "pending": "0", "phase": "NONE",
                                  "flags": "-"}}}
    out.append(("stuck", "a node still pending and fenced after recovery", h))
    return out


def main():
    t = Tap()
    h = clean_history()
    res = ck.check(h)
    t.ok(ck.violations(res) == 0, "a clean history reports no violation: " + ck.summary(h, res),
         "\n".join(ck.excerpt(h, res)))
    seen = set()
    for cls, desc, h in planted():
        res = ck.check(h)
        counts = {c: len(res[c]) for c in CLASSES}
        want = {c: (1 if c == cls else 0) for c in CLASSES}
        t.ok(counts == want, "planted %s (%s): reported exactly it %s" % (cls, desc, counts),
             "\n".join(ck.excerpt(h, res)))
        seen.add(cls)
    t.ok(seen == set(CLASSES), "every class was planted once", sorted(set(CLASSES) - seen))
    print("1..%d" % t.n)
    sys.exit(1 if t.failed else 0)


if __name__ == "__main__":
    main()
