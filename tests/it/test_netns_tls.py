"""Every port over TLS in network namespaces (tests/it/netns.py; root
only): the cluster the nemesis --tls runs its partition faults on.

(A) Certificates for 127.0.0.1 only (lg.cluster_certs) do not do in the
    lab: `ringctl init` fails on every node's name, and so does a client
    (names are checked on every connection; nothing skips the check).
(B) netns.lab_certs (the node certificate names every address of the
    lab): NetCluster(tls=..., data_tls=True) starts and `ringctl init`
    runs over --cluster-tls; the client port refuses plaintext; a TLS
    client checking the name reaches every node at its own address; 60
    keys written through a (relayed to their owners over TLS, replica
    copies R=2 over TLS) are read at every owner with `epoch N`;
    `ringctl status` shows every node up (heartbeats over TLS).
(C) a cut off from everyone for 3 s, healed: every node is up again, no
    transition pending, and a write through b to keys a owns is read at a
    (the TLS sessions between the namespaces came back)."""
import os
import shutil
import socket
import ssl
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import netns  # noqa: E402
import tlscerts  # noqa: E402

IDS = ("a", "b", "c")
NKEYS = 60


def healthy(cl):
    """None when every node is up, at no pending epoch, phase NONE, not
    recovering and the store has no transition pending; else why."""
    if cl.store_pending():
        return "store pending"
    st = cl.status()
    for i in IDS:
        row = st["nodes"].get(i, {})
        if (row.get("state") != "up" or row.get("pending") != "0"
                or row.get("phase") != "NONE" or row.get("flags") != "-"):
            return "%s: %s" % (i, row)
    return None


def wait_healthy(cl, timeout):
    why = [None]

    def ok():
        why[0] = healthy(cl)
        return why[0] is None
    return None if lg.wait_for(ok, timeout, 0.2) else why[0]


def read_at_owners(cl, keys, want):
    """{key: [owner ids whose declared get did not return want[key]]},
    only keys with such owners; errors as ("error", text) entries."""
    members = cl.store_active()
    epoch = lg.parse_members(members)["epoch"]
    owners = lg.locate(members, keys)
    bad = {}
    for nid in IDS:
        mine = [k for k in keys if nid in owners[k]]
        if not mine:
            continue
        c = lg.Conn(cl.nodes[nid].addr, 5.0)
        try:
            c.declare(epoch)
            vals, err = c.get_multi(mine)
        finally:
            c.close()
        if vals is None:
            bad[("error", nid)] = err
            continue
        for k in mine:
            if vals.get(k) != want[k]:
                bad.setdefault(k, []).append(nid)
    return bad


def write_through(addr, keys, tag):
    """set each key through the node at addr: {key: value}, or raises."""
    want = {}
    c = lg.Conn(addr, 5.0)
    try:
        for k in keys:
            v = ("%s-%s" % (tag, k)).encode()
            r = c.store("set", k, v)
            if r != b"STORED":
                raise RuntimeError("set %s through %s:%d: %r" % ((k,) + addr + (r,)))
            want[k] = v
    finally:
        c.close()
    return want


def plaintext_refused(addr):
    """True if a plaintext `version` on the client port gets no VERSION."""
    try:
        s = socket.create_connection(addr, timeout=3.0)
    except OSError:
        return False
    try:
        s.sendall(b"version\r\n")
        try:
            return not s.recv(64).startswith(b"VERSION")
        except OSError:
            return True
    finally:
        s.close()


def scenario(t):
    why = tlscerts.available()
    if why:
        t.skip("TLS in the namespaces", why)
        return
    try:
        lab = netns.NetLab(list(IDS)).setup()
    except netns.Unavailable as e:
        t.skip("TLS in the namespaces", str(e))
        return
    d = tempfile.mkdtemp(prefix="rc-netns-tls-")
    cl = None
    try:
        lab.enter()
        # (A) the loopback certificates: the name check refuses them.
        local = lg.cluster_certs(os.path.join(d, "local"))
        cl = netns.NetCluster(lab, replicas=2, mem=64, tls=local, data_tls=True)
        for i in IDS:
            cl.add(i)
        rc, out, err = cl.ctl("init", "--members", cl.write_members(list(IDS)), timeout=30)
        t.ok(rc != 0 and out.count("IP address mismatch") == len(IDS),
             "certificates for 127.0.0.1 only: ringctl init in %s.0/24 fails (exit %d), "
             "every node's certificate an IP address mismatch" % (lab.net, rc),
             (out[-300:], err[-300:]))
        ctx = ssl.create_default_context(cafile=local["ca"][1])
        try:
            with socket.create_connection(cl.nodes["a"].addr, timeout=5.0) as s:
                ctx.wrap_socket(s, server_hostname=lab.addr("a")).close()
            refused = "accepted"
        except ssl.SSLCertVerificationError as e:
            refused = str(e)
        t.ok("IP address mismatch" in refused,
             "and a client checking the name refuses a's client port", refused)
        cl.close()
        cl.cleanup_dir()
        cl = None

        # (B) lab_certs: every address of the lab named.
        certs = netns.lab_certs(lab, os.path.join(d, "lab"))
        lg.use_client_tls(ssl.create_default_context(cafile=certs["ca"][1]))
        cl, ok = netns.start_cluster(t, lab, list(IDS), replicas=2, mem=64, tls=certs,
                                     data_tls=True)
        if not ok:
            return
        addr = {i: cl.nodes[i].addr for i in IDS}
        t.ok(all(plaintext_refused(addr[i]) for i in IDS),
             "-Z: every node's client port refuses plaintext")
        names = {}
        for i in IDS:
            c = lg.Conn(addr[i], 5.0)
            try:
                names[i] = [v for k, v in c.sock.getpeercert()["subjectAltName"]
                            if k == "IP Address"]
                names[i].append(c.simple("version").decode())
            finally:
                c.close()
        t.ok(all(addr[i][0] in names[i] and names[i][-1].startswith("VERSION")
                 for i in IDS),
             "a TLS client checking the name reaches every node at its own address",
             names)
        keys = ["nt-%d" % i for i in range(NKEYS)]
        want = write_through(addr["a"], keys, "one")
        bad = read_at_owners(cl, keys, want)
        t.ok(not bad, "%d keys written through a are on every owner (relays and replica "
             "copies over TLS)" % NKEYS, bad)
        why = wait_healthy(cl, 15.0)
        t.ok(why is None, "ringctl status over --cluster-tls: every node up", why)

        # (C) a partition from everyone, healed.
        lab.partition("a", "all")
        t.ok(not lab.reachable(None, addr["a"], 0.5), "a cut off from everyone")
        time.sleep(3.0)     # the fault's length: the peers' heartbeats to a fail
        lab.heal("a")
        t0 = time.monotonic()
        why = wait_healthy(cl, 30.0)
        t.ok(why is None, "healed: every node up again, nothing pending (%.1f s)"
             % (time.monotonic() - t0), why)
        members = cl.store_active()
        mine = [k for k, o in lg.locate(members, keys).items() if "a" in o]
        # b may still be reconnecting to a: retry the writes (bounded).
        res = {}

        def written():
            try:
                res["want"] = write_through(addr["b"], mine, "two")
                return True
            except (OSError, ConnectionError, lg.ProtoError, RuntimeError) as e:
                res["err"] = str(e)
                return False
        t.ok(lg.wait_for(written, 15.0, 0.2), "after the heal, writes through b to the %d "
             "keys a owns are acknowledged" % len(mine), res.get("err"))
        if "want" in res:
            bad = read_at_owners(cl, mine, res["want"])
            t.ok(not bad, "and every owner (a too) serves them", bad)
    finally:
        lg.use_client_tls(None)
        if cl is not None:
            cl.close()
            cl.cleanup_dir()
        lab.close()
        shutil.rmtree(d, ignore_errors=True)


def main():
    lg.tap_main(scenario, 150)


if __name__ == "__main__":
    main()
