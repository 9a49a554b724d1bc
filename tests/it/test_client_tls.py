"""libringcache and ringctl over TLS (ringcache_options' tls fields, ringctl
--tls*), against real TLS nodes: Debian's memcached 1.6 started with -Z
(the reference for the data port's TLS). A throwaway CA and certificates
are made with the openssl CLI.

Checked: every operation, a 1 MB value, a parallel multi-get and many
threads on one handle over TLS; a node killed and restarted on its port
(the pooled TLS connections are dead: the handle reconnects and handshakes
again); and each way the handshake can fail, told apart from a dead node
(ringcache_node_error is RINGCACHE_ETLS): an untrusted CA, a certificate
that names another host (accepted with tls_skip_name_check), a node that
speaks no TLS, a node that requires a client certificate (refused without
one, served with one); bad files at handle creation name the file."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import rctest  # noqa: E402
from client_lib import (Probe, Scene, many_codes, members_file, node_errors, ringctl,  # noqa: E402
                        wait_for)
from rctest import Tap  # noqa: E402
from tlscerts import make_ca, make_cert  # noqa: E402

MEMCACHED = "/usr/bin/memcached"
OP_TIMEOUT, RETRY, RETRY_MAX = 2000, 200, 400
N = 200


def tls_node(cert, extra=None, port=None):
    """A memcached -Z on loopback serving cert."""
    args = ["-U", "0", "-Z", "-o",
            "ssl_chain_cert=%s,ssl_key=%s%s" % (cert[1], cert[0], extra or "")]
    if os.geteuid() == 0:
        args += ["-u", "root"]
    return rctest.Node(args=args, binary=MEMCACHED, port=port, stderr=os.devnull).start()


def plain_node():
    args = ["-U", "0"] + (["-u", "root"] if os.geteuid() == 0 else [])
    return rctest.Node(args=args, binary=MEMCACHED, stderr=os.devnull).start()



def probe(path, **tls):
    env = {"RC_PROBE_TLS": "1"}
    for k, v in tls.items():
        env["RC_PROBE_TLS_" + k.upper()] = v
    return Probe(path, OP_TIMEOUT, RETRY, RETRY_MAX, poll=0, env=env)




def main():
    t = Tap()
    with Scene() as sc:
        d, nodes, probes = sc.dir, sc.nodes, sc.probes
        ca = make_ca(d, "ca")
        other_ca = make_ca(d, "other-ca")
        srv = make_cert(d, "node", ca, "IP:127.0.0.1,DNS:localhost")
        wrong_name = make_cert(d, "elsewhere", ca, "DNS:elsewhere.example")
        client = make_cert(d, "client", ca, "DNS:client")

        cluster = [tls_node(srv) for _ in range(3)]
        nodes += cluster
        good = members_file(d, "tls", cluster)

        # (1) Every operation over TLS, through one long-lived handle.
        p = probe(good, ca=ca[1])
        probes.append(p)
        t.eq(many_codes(p.cmd("many set k %d" % N)), (["OK"], N), "TLS: %d sets, each OK" % N)
        t.eq(many_codes(p.cmd("many get k %d" % N)), (["OK"], N), "TLS: %d gets, each a hit" % N)
        got = p.cmd("mget k %d" % N)
        rows = [l.split() for l in got[:-1]]
        t.ok(len(rows) == N and all(r[2] == "OK" for r in rows) and
             got[-1].startswith("result OK"),
             "TLS: a multi-get of %d keys over three nodes (in parallel), every key a hit" % N,
             got[-1:] + [r for r in rows if r[2] != "OK"][:5])
        ops = dict(l.split(" ", 1) for l in p.cmd("ops opkey"))
        t.eq(ops.get("get_big"), "OK 1", "TLS: a 1 MB value written and read back whole")
        t.eq(ops.get("set_too_big"), "ETOOBIG", "TLS: a value over the limit is refused")
        t.eq(ops.get("delete"), "OK", "TLS: delete")
        th = p.cmd("threads 4 100", timeout=120)
        t.ok(th and th[0].startswith("errors 0 "), "TLS: 4 threads share the handle, no error", th)

        # (2) A node killed and restarted on its port: the handle's pooled
        # TLS connections to it are dead; it reconnects and handshakes anew.
        victim = cluster[1]
        port = victim.port
        victim.stop(sig=9)
        back = tls_node(srv, port=port)
        nodes[nodes.index(victim)] = back
        cluster[1] = back
        ok = wait_for(lambda: many_codes(p.cmd("many set r %d" % N)) == (["OK"], N), 20)
        t.ok(ok, "after a node's restart every set succeeds again over new TLS connections")
        t.eq(many_codes(p.cmd("many get r %d" % N)), (["OK"], N),
             "and reads them back from the restarted node")

        # (3) An untrusted CA: no request goes through, and the node is
        # down for a TLS reason, not an I/O one.
        bad = probe(good, ca=other_ca[1])
        probes.append(bad)
        t.eq(many_codes(bad.cmd("many get k 20")), (["ENOTFOUND"], 20),
             "untrusted CA: reads miss (the library's read contract)")
        t.eq(many_codes(bad.cmd("many set z 20")), (["EDOWN"], 20), "untrusted CA: writes EDOWN")
        errs = node_errors(bad)
        t.ok(set(errs.values()) == {"ETLS"}, "untrusted CA: every node down for ETLS", errs)

        # (4) A certificate naming another host: refused, unless the name
        # check is skipped (the chain is still verified).
        misnamed = tls_node(wrong_name)
        nodes.append(misnamed)
        mn = members_file(d, "misnamed", [misnamed])
        q = probe(mn, ca=ca[1])
        probes.append(q)
        t.eq(many_codes(q.cmd("many set m 5")), (["EDOWN"], 5), "a certificate for another name: refused")
        t.eq(node_errors(q), {"n0": "ETLS"}, "for ETLS")
        q = probe(mn, ca=ca[1], skip_name="1")
        probes.append(q)
        t.eq(many_codes(q.cmd("many set m 5")), (["OK"], 5), "tls_skip_name_check: served")
        q = probe(mn, ca=other_ca[1], skip_name="1")
        probes.append(q)
        t.eq(many_codes(q.cmd("many set m 5")), (["EDOWN"], 5),
             "tls_skip_name_check still verifies the chain: an untrusted CA is refused")

        # (5) A node without TLS: the handshake fails (ETLS), and a plain
        # client cannot talk to a TLS node.
        plain = plain_node()
        nodes.append(plain)
        pm = members_file(d, "plain", [plain])
        q = probe(pm, ca=ca[1])
        probes.append(q)
        t.eq(many_codes(q.cmd("many set p 5")), (["EDOWN"], 5), "TLS to a node without TLS: refused")
        t.eq(node_errors(q), {"n0": "ETLS"}, "for ETLS")
        q = Probe(good, OP_TIMEOUT, RETRY, RETRY_MAX, poll=0)
        probes.append(q)
        c, n = many_codes(q.cmd("many set p 5"))
        t.ok(n == 5 and "OK" not in c, "plain text to TLS nodes: nothing is stored", c)

        # (6) A node that requires a client certificate (ssl_verify_mode=2).
        strict = tls_node(srv, ",ssl_verify_mode=2,ssl_ca_cert=%s" % ca[1])
        nodes.append(strict)
        sm = members_file(d, "strict", [strict])
        q = probe(sm, ca=ca[1])
        probes.append(q)
        t.ok(many_codes(q.cmd("many set s 5"))[0] != ["OK"],
             "client certificate required, none given: refused")
        # Under TLS 1.3 the node judges the client's certificate after the
        # client's handshake is done: its alert arrives on the first read,
        # or the request written meanwhile meets the node's reset, and the
        # alert that came before it is read then (client/pool.c).
        errs = [node_errors(q)]
        for _ in range(20):
            q = probe(sm, ca=ca[1])
            probes.append(q)
            q.cmd("many set s 1")
            errs.append(node_errors(q))
            q.close()
        t.ok(all(e == {"n0": "ETLS"} for e in errs),
             "for ETLS, 21 clients out of 21, whether the node's alert or its reset came first",
             [e for e in errs if e != {"n0": "ETLS"}][:3])
        q = probe(sm, ca=ca[1], cert=client[1], key=client[0])
        probes.append(q)
        t.eq(many_codes(q.cmd("many set s 20")), (["OK"], 20), "with a client certificate: served")
        t.eq(many_codes(q.cmd("many get s 20")), (["OK"], 20), "and read back")

        # (7) ringctl over TLS, and its errors.
        rc, out, err = ringctl("--members", good, "--tls-ca", ca[1], "set", "tk", "hello")
        t.ok(rc == 0, "ringctl --tls-ca set", err)
        rc, out, err = ringctl("--members", good, "--tls-ca", ca[1], "get", "tk")
        t.ok((rc, out) == (0, "tk\thello\n"), "ringctl --tls-ca get reads it back", (rc, out, err))
        rc, out, err = ringctl("--members", good, "--tls-ca", other_ca[1], "get", "tk")
        t.ok(rc == 1 and "TLS handshake" in err, "ringctl with an untrusted CA says TLS failed",
             (rc, err))
        missing = os.path.join(d, "no-such-ca.crt")
        rc, out, err = ringctl("--members", good, "--tls-ca", missing, "get", "tk")
        t.ok(rc != 0 and missing in err, "ringctl --tls-ca with a missing file names it",
             (rc, err))
        rc, out, err = ringctl("--members", sm, "--tls-ca", ca[1], "--tls-cert", client[1],
                               "get", "s1")
        t.ok(rc != 0 and "tls_key_file" in err, "--tls-cert without --tls-key: refused, said so",
             (rc, err))
    t.done()


if __name__ == "__main__":
    main()
