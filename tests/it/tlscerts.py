"""Throwaway certificates for the TLS tests, made with the openssl CLI
(Debian's openssl): a CA, and certificates it signs with the
subjectAltName and key usage a test needs. Keys are RSA 2048, valid two
days, unencrypted, and readable by all (a node may run as another user).

    ca = make_ca(d, "ca")                                   # (key, crt)
    node = make_cert(d, "node", ca, san="IP:127.0.0.1")     # (key, crt)
    cli = make_cert(d, "cli", ca, usage="clientAuth", serial="3003")
"""
import os
import shutil
import subprocess


def available():
    """'' when the openssl command is installed, else why not."""
    return "" if shutil.which("openssl") else "the openssl command is not installed"


def openssl(*args, cwd=None):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=60)


def make_ca(d, name, cn=None):
    """A self-signed CA in d: (key, crt) paths."""
    key, crt = os.path.join(d, name + ".key"), os.path.join(d, name + ".crt")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", key,
            "-out", crt, "-subj", "/CN=%s" % (cn or name))
    return key, crt


def make_cert(d, name, ca, san=None, usage=None, serial=None):
    """A certificate for CN=name signed by ca ((key, crt) of make_ca):
    (key, crt) paths. san: its subjectAltName ("IP:127.0.0.1,DNS:x");
    usage: its extendedKeyUsage ("serverAuth", "clientAuth"); serial: a
    fixed serial number (else openssl's random one)."""
    key, csr, crt = (os.path.join(d, name + s) for s in (".key", ".csr", ".crt"))
    ext = os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        if san:
            f.write("subjectAltName=%s\n" % san)
        if usage:
            f.write("extendedKeyUsage=%s\n" % usage)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj",
            "/CN=%s" % name)
    openssl("x509", "-req", "-in", csr, "-CA", ca[1], "-CAkey", ca[0],
            *(["-set_serial", serial] if serial else ["-CAcreateserial"]),
            "-days", "2", "-extfile", ext, "-out", crt)
    for p in (key, crt):
        os.chmod(p, 0o644)
    return key, crt
