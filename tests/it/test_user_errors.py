#!/usr/bin/env python3
"""Mistakes a new user makes, each answered with one clear line and the
documented exit status: a long-only ringcached option without its value,
ringctl --timeout with trailing junk, a read whose every owner is down,
a join at an address another member has, options after the operands of
remove/repair/locate, getopt's messages naming the subcommand. No cluster
needed: the store's membership names ports nobody listens on. TAP."""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import Tap, free_port  # noqa: E402

BUILDDIR = os.environ.get("RC_BUILDDIR", os.getcwd())
RINGCACHED = os.path.join(BUILDDIR, "server", "ringcached")
RINGCTL = os.path.join(BUILDDIR, "client", "ringctl")
tap = Tap()


def run(args, stdin=""):
    r = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout, r.stderr


def first_line(err):
    return err.splitlines()[0] if err else ""


for opt in ("--id", "--state-dir", "--cluster-port", "--forward-timeout", "--port"):
    rc, out, err = run([RINGCACHED, opt])
    tap.ok(rc == 2 and first_line(err) == "ringcached: option %s requires an argument" % opt,
           "ringcached %s without a value: exit 2, the option named" % opt, (rc, err[:200]))

rc, out, err = run([RINGCACHED, "-p"])
tap.ok(rc == 2 and first_line(err) == "ringcached: option -p requires an argument",
       "ringcached -p without a value names -p", (rc, err[:200]))

with tempfile.TemporaryDirectory() as tmp:
    # Ports nobody listens on: every node of this membership is dead.
    p1, p2 = free_port(), free_port()
    members = os.path.join(tmp, "dead.members")
    with open(members, "w") as f:
        f.write("epoch 1\nvnodes 16\nreplicas 2\n"
                "node a 127.0.0.1:%d\nnode b 127.0.0.1:%d\n" % (p1, p2))
    token = os.path.join(tmp, "token")
    with open(token, "w") as f:
        f.write("user-errors-admin-token\n")
    store = os.path.join(tmp, "store")

    rc, out, err = run([RINGCTL, "--timeout", "10x", "--members", members, "get", "k"])
    tap.ok(rc == 2 and "--timeout" in err and "10x" in err,
           "ringctl --timeout 10x: exit 2 naming the value", (rc, err))

    rc, out, err = run([RINGCTL, "--members", members, "--timeout", "300", "get", "k"])
    tap.ok(rc == 1 and out == "" and "every owner is down" in err and len(err.splitlines()) == 1,
           "get with every owner down: one line saying so, exit 1", (rc, out, err))
    rc, out, err = run([RINGCTL, "--members", members, "--timeout", "300", "mget"], "k\n")
    tap.ok(rc == 1 and out == "" and "every owner is down" in err,
           "mget with every owner down says so, exit 1", (rc, out, err))

    rc, out, err = run([RINGCTL, "locate", "k", "--replicas", "2", "--members", members])
    tap.ok(rc == 0 and out.startswith("k\t") and out.count(",") == 1,
           "locate takes its options after the keys", (rc, out, err))
    rc, out, err = run([RINGCTL, "locate", "--bogus", "--members", members])
    tap.ok(rc == 2 and err.startswith("ringctl locate: "),
           "an unknown subcommand option is reported as 'ringctl locate: ...'", (rc, err))

    adm = [RINGCTL, "--store", store, "--token-file", token, "--timeout", "300"]
    # init stores epoch 1 even though no node takes it (exit 1).
    rc, out, err = run(adm + ["init", "--members", members])
    tap.ok(rc == 1 and os.path.exists(os.path.join(store, "active.members")),
           "init with dead nodes: the store has epoch 1, exit 1", (rc, out, err))

    rc, out, err = run(adm + ["join", "c", "127.0.0.1:%d" % p1])
    tap.ok(rc == 2 and "already the address of a" in err
           and not os.path.exists(os.path.join(store, "pending.members")),
           "join at a member's address: refused before the store, exit 2", (rc, err))
    rc, out, err = run(adm + ["join", "a", "127.0.0.1:1"])
    tap.ok(rc == 2 and "already a member" in err, "join of an existing id: exit 2", (rc, err))
    rc, out, err = run(adm + ["leave", "zz"])
    tap.ok(rc == 2 and "not a member" in err, "leave of an unknown id: exit 2", (rc, err))

    # Options after the ID: parsed as options, not as an operand (repair
    # used to take "--force" as ADDR).
    rc, out, err = run(adm + ["remove", "--failed", "zz", "--force"])
    tap.ok(rc == 2 and "zz is not a member" in err and "usage" not in err,
           "remove --failed ID --force: --force parsed after the ID", (rc, err))
    rc, out, err = run(adm + ["repair", "zz", "--force"])
    tap.ok(rc == 2 and "zz is not a member" in err and "give its ADDR" in err,
           "repair ID --force: --force is not taken as ADDR", (rc, err))

tap.done()
