#!/usr/bin/env python3
"""The client library's -Y login (ringcache_options.auth_user and
auth_password, docs/security.md "Clients"): every new connection logs in
with memcached's text-protocol login before its first request.

Against three ringcached -Y nodes and Debian's memcached -Y: the right
user and password set, get, multi-get and share a handle across threads;
a wrong password is RINGCACHE_EAUTH on every call, the nodes are never
marked down for it (no EDOWN after it, ringcache_node_error says EAUTH);
no login against a -Y node fails fast, with the node's CLIENT_ERROR; a
login sent to a node without -Y is refused and stores nothing (the
password never becomes a value); a login inside TLS (-Z with -Y); ringctl
--auth-user/--auth-password-file, and its errors. TAP."""
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rctest  # noqa: E402
from client_lib import (META_PROBE, Probe, Scene, many_codes, members_file, node_errors,  # noqa: E402
                        parse_many, ringctl, write_file)
from rctest import Tap  # noqa: E402
from tlscerts import available as tls_available, make_ca, make_cert  # noqa: E402

MEMCACHED = "/usr/bin/memcached"
OP_TIMEOUT, RETRY, RETRY_MAX = 2000, 200, 400
N = 100
AUTHFILE = "foo:bar\nops:s3cret with spaces:and colons\n"



def probe(path, user=None, password=None, binary=None, **tls):
    """A client_probe (or binary, meta_probe) logging in as user."""
    env = {}
    if user is not None:
        env["RC_PROBE_AUTH_USER"] = user
        env["RC_PROBE_AUTH_PASSWORD"] = password
    if tls:
        env["RC_PROBE_TLS"] = "1"
        for k, v in tls.items():
            env["RC_PROBE_TLS_" + k.upper()] = v
    return Probe(path, OP_TIMEOUT, RETRY, RETRY_MAX, poll=None if binary else 0, env=env,
                 binary=binary)




def curr_items(node):
    """curr_items of a node without -Y, over a plain socket."""
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as s:
        s.sendall(b"stats\r\n")
        text = rctest.recv_until(s, b"END\r\n").decode()
    for line in text.splitlines():
        if line.startswith("STAT curr_items "):
            return int(line.split()[2])
    return None


def main():
    t = Tap()
    with Scene() as sc:
        d, nodes, probes = sc.dir, sc.nodes, sc.probes
        authfile = write_file(d, "auth", AUTHFILE)
        cluster = [rctest.Node(args=["-t", "2", "-m", "32", "-Y", authfile]).start()
                   for _ in range(3)]
        nodes += cluster
        path = members_file(d, "auth", cluster)

        # (1) The right credentials: every operation goes through.
        p = probe(path, "foo", "bar")
        probes.append(p)
        t.eq(many_codes(p.cmd("many set k %d" % N)), (["OK"], N), "login foo: %d sets, each OK" % N)
        t.eq(many_codes(p.cmd("many get k %d" % N)), (["OK"], N), "and %d gets, each a hit" % N)
        got = p.cmd("mget k %d" % N)
        rows = [l.split() for l in got[:-1]]
        t.ok(len(rows) == N and all(r[2] == "OK" for r in rows),
             "a multi-get over three -Y nodes (new connections, each logged in)", got[-1:])
        th = p.cmd("threads 4 100", timeout=120)
        t.ok(th and th[0].startswith("errors 0 "), "4 threads share the handle, no error", th)
        q = probe(path, "ops", "s3cret with spaces:and colons")
        probes.append(q)
        t.eq(many_codes(q.cmd("many get k 20")), (["OK"], 20),
             "a password with spaces and ':' logs in (everything after the user's space)")

        # (2) A wrong password: EAUTH, and the nodes are not marked down.
        bad = probe(path, "foo", "wrong")
        probes.append(bad)
        t.eq(many_codes(bad.cmd("many set z 20")), (["EAUTH"], 20), "wrong password: sets EAUTH")
        t.eq(many_codes(bad.cmd("many get k 20")), (["EAUTH"], 20),
             "and gets EAUTH again (not EDOWN, not a miss: no node was marked down)")
        got = bad.cmd("mget k 20")
        t.ok(len(got) == 21 and all(l.split()[1:] == ["-", "EAUTH"] for l in got[:-1]),
             "and a multi-get reports each key as EAUTH from no node (not as a miss)", got)
        mp = probe(path, "foo", "wrong", binary=META_PROBE)
        probes.append(mp)
        got = mp.cmd("mgm k 20 v")
        t.ok(len(got) == 21 and all(l.split()[1:3] == ["-", "EAUTH"] for l in got[:-1]),
             "and so does a meta multi-get (ringcache_mg_multi)", got)
        errs = node_errors(bad)
        t.ok(set(errs.values()) == {"EAUTH"}, "ringcache_node_error says EAUTH", errs)
        t.eq(many_codes(p.cmd("many get k 20")), (["OK"], 20),
             "the nodes kept serving the logged-in client")
        t.eq(many_codes(probe(path, "nobody", "bar").cmd("many get k 5")), (["EAUTH"], 5),
             "an unknown user: EAUTH")

        # (3) No login against a -Y node: the node's refusal, at once.
        none = probe(path)
        probes.append(none)
        c, n = many_codes(none.cmd("many set y 5"))
        t.ok(n == 5 and "OK" not in c and "ETIMEDOUT" not in c,
             "no credentials against -Y nodes: refused by the node, no hang", c)

        # (4) Debian's memcached -Y takes the same login.
        if os.path.exists(MEMCACHED):
            args = ["-U", "0", "-Y", authfile] + (["-u", "root"] if os.geteuid() == 0 else [])
            mc = rctest.Node(args=args, binary=MEMCACHED, stderr=os.devnull).start()
            nodes.append(mc)
            mpath = members_file(d, "memcached", [mc])
            m = probe(mpath, "foo", "bar")
            probes.append(m)
            t.eq(many_codes(m.cmd("many set m 20")), (["OK"], 20), "memcached -Y: login, 20 sets")
            t.eq(many_codes(m.cmd("many get m 20")), (["OK"], 20), "memcached -Y: read back")
            t.eq(many_codes(probe(mpath, "foo", "nope").cmd("many get m 5")), (["EAUTH"], 5),
                 "memcached -Y, a wrong password: EAUTH")
        else:
            for desc in ("memcached -Y: login, 20 sets", "memcached -Y: read back",
                         "memcached -Y, a wrong password: EAUTH"):
                t.skip(desc, "no %s" % MEMCACHED)

        # (5) A node without -Y refuses the login and stores nothing.
        plain = rctest.Node(args=["-t", "2", "-m", "32"]).start()
        nodes.append(plain)
        ppath = members_file(d, "plain", [plain])
        pp = probe(ppath, "foo", "bar")
        probes.append(pp)
        t.eq(many_codes(pp.cmd("many get x 5")), (["EAUTH"], 5),
             "a login to a node without -Y: EAUTH")
        t.eq(curr_items(plain), 0, "and the node stored nothing (the password is no value)")

        # (6) A login inside TLS: -Z and -Y on one node.
        why = tls_available()
        if not why:
            ca = make_ca(d, "ca")
            srv = make_cert(d, "node", ca, "IP:127.0.0.1")
            tn = rctest.Node(args=["-t", "2", "-m", "32", "-Y", authfile, "-Z", "-o",
                                   "ssl_chain_cert=%s,ssl_key=%s" % (srv[1], srv[0])]).start()
            nodes.append(tn)
            tpath = members_file(d, "tls", [tn])
            tp = probe(tpath, "foo", "bar", ca=ca[1])
            probes.append(tp)
            t.eq(many_codes(tp.cmd("many set s 20")), (["OK"], 20), "-Z -Y: login over TLS, 20 sets")
            t.eq(many_codes(probe(tpath, "foo", "x", ca=ca[1]).cmd("many get s 5")), (["EAUTH"], 5),
                 "-Z -Y: a wrong password over TLS is EAUTH, not ETLS")
        else:
            t.skip("-Z -Y: login over TLS, 20 sets", why)
            t.skip("-Z -Y: a wrong password over TLS is EAUTH, not ETLS", why)

        # (7) ringctl.
        pw = write_file(d, "pw", "bar\n")
        wrong = write_file(d, "wrong", "nope\n")
        auth = ["--members", path, "--auth-user", "foo", "--auth-password-file", pw]
        rc, out, err = ringctl(*auth, "set", "ck", "hello")
        t.ok(rc == 0, "ringctl --auth-user --auth-password-file set", err)
        rc, out, err = ringctl(*auth, "get", "ck")
        t.ok((rc, out) == (0, "ck\thello\n"), "ringctl get reads it back", (rc, out, err))
        rc, out, err = ringctl("--members", path, "--auth-user", "foo",
                               "--auth-password-file", wrong, "get", "ck")
        t.ok(rc == 1 and "refused the login (authentication failure" in err,
             "ringctl, a wrong password: exit 1, 'authentication failure'",
             (rc, err))
        missing = os.path.join(d, "no-such-file")
        rc, out, err = ringctl("--members", path, "--auth-user", "foo",
                               "--auth-password-file", missing, "get", "ck")
        t.ok(rc != 0 and missing in err, "ringctl, a missing password file: named", (rc, err))
        rc, out, err = ringctl("--members", path, "--auth-user", "foo", "get", "ck")
        t.ok(rc == 2 and "--auth-password-file" in err,
             "ringctl --auth-user without a password file: usage error", (rc, err))

        # (8) No failover on a refusal: with replicas 2, n0 knows foo with
        # another password and n1 knows foo:bar. Were a refused login an
        # outage, n0's keys would be written to and read from n1.
        descs = ("replicas 2: the keys n0 primaries are EAUTH, n1's OK",
                 "replicas 2: neither node marked down",
                 "replicas 2: n1 holds only its own keys (no refused write failed over to it)",
                 "replicas 2: a get refused by n0 is EAUTH, not read from n1",
                 "replicas 2: a multi-get reports n0's keys as EAUTH from no node, not read from n1")
        if os.path.exists(MEMCACHED):
            no_failover(t, d, nodes, probes, descs)
        else:
            for desc in descs:
                t.skip(desc, "no %s" % MEMCACHED)
    return t.done()


def no_failover(t, d, nodes, probes, descs):
    """Section (8) of main: two memcached -Y nodes with different users."""
    pair = []
    for name, users in (("n0", "foo:other\n"), ("n1", "foo:bar\n")):
        path = write_file(d, name + ".auth", users)
        args = ["-U", "0", "-Y", path] + (["-u", "root"] if os.geteuid() == 0 else [])
        pair.append(rctest.Node(args=args, binary=MEMCACHED, stderr=os.devnull).start())
    nodes += pair
    both = members_file(d, "both", pair, replicas=2)
    p = probe(both, "foo", "bar")
    only_n1 = probe(members_file(d, "only-n1", pair[1:]), "foo", "bar")
    probes += [p, only_n1]
    res, _ = parse_many(p.cmd("many set f %d" % N))
    on0 = sorted(k for k, (o, _, _) in res.items() if o == "n0")
    on1 = sorted(k for k, (o, _, _) in res.items() if o == "n1")
    t.ok(on0 and on1 and all(res[k][1] == "EAUTH" for k in on0) and
         all(res[k][1] == "OK" for k in on1), descs[0], res)
    t.eq(dict(l.split() for l in p.cmd("down")), {"n0": "0", "n1": "0"}, descs[1])
    held, _ = parse_many(only_n1.cmd("many get f %d" % N))
    t.eq(sorted(k for k, (_, c, _) in held.items() if c == "OK"), on1, descs[2])
    # Now n1 holds every key: a read of n0's keys that went on to n1
    # would be a hit.
    only_n1.cmd("many set f %d" % N)
    res, _ = parse_many(p.cmd("many get f %d" % N))
    t.ok(all(res[k][1] == "EAUTH" for k in on0), descs[3], res)
    got = p.cmd("mget f %d" % N)
    rows = dict((r[0], r[1:]) for r in (l.split() for l in got[:-1]))
    t.ok(len(rows) == N and all(rows[k] == ["-", "EAUTH"] for k in on0) and
         all(rows[k][1] == "OK" for k in on1), descs[4], got)


if __name__ == "__main__":
    sys.exit(main())
