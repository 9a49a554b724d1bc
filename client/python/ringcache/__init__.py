"""ringcache: the smart client of a ringcache cluster for Python.

A drop-in for pymemcache's Client and HashClient over libringcache (the C
extension _ringcache): every key goes straight to its owner by the same
ring code the nodes run, with fail-over, epochs and one pipelined request
per node for multi-gets. See docs/python.md.
"""
import os
import threading

from . import _ringcache as _rc

__all__ = [
    "Client", "HashClient", "PooledClient", "MetaResult",
    "MemcacheError", "MemcacheClientError", "MemcacheUnknownCommandError",
    "MemcacheIllegalInputError", "MemcacheServerError", "MemcacheUnknownError",
    "MemcacheUnexpectedCloseError", "RingcacheError", "RingcacheConnectionError",
    "RingcacheTimeoutError", "RingcacheRetryError", "RingcacheAuthError",
    "RingcacheConfigError",
]


# ------------------------------------------------------------- exceptions
# The names and hierarchy of pymemcache.exceptions (3.5.2), so that code
# catching pymemcache's classes by name keeps working; pymemcache itself is
# never imported.

class MemcacheError(Exception):
    "Base exception class"


class MemcacheClientError(MemcacheError):
    """Raised when memcached fails to parse the arguments to a request, likely
    due to a malformed key and/or value, a bug in this library, or a version
    mismatch with memcached."""


class MemcacheUnknownCommandError(MemcacheClientError):
    """Raised when memcached fails to parse a request, likely due to a bug in
    this library or a version mismatch with memcached."""


class MemcacheIllegalInputError(MemcacheClientError):
    """Raised when a key or value is not legal for Memcache (see the class docs
    for Client for more details)."""


class MemcacheServerError(MemcacheError):
    """Raised when memcached reports a failure while processing a request,
    likely due to a bug or transient issue in memcached."""


class MemcacheUnknownError(MemcacheError):
    """Raised when this library receives a response from memcached that it
    cannot parse, likely due to a bug in this library or a version mismatch
    with memcached."""


class MemcacheUnexpectedCloseError(MemcacheServerError):
    "Raised when the connection with memcached closes unexpectedly."


class RingcacheError(MemcacheError):
    """A libringcache failure that is not a memcached reply; .code is the
    library's code (ringcache.h: RINGCACHE_E*)."""

    def __init__(self, code, message=None):
        super().__init__(message or _rc.strerror(code))
        self.code = code


class RingcacheConnectionError(RingcacheError, ConnectionError):
    "A node could not be reached (EIO, EDOWN: every owner down, ETLS)."


class RingcacheTimeoutError(RingcacheError, TimeoutError):
    "A node did not answer within the timeout (ETIMEDOUT)."


class RingcacheRetryError(RingcacheError):
    """The cluster is moving the key or failing over its owner (EMOVED,
    ETRYAGAIN, EUNAVAILABLE): retry shortly."""


class RingcacheAuthError(RingcacheError):
    "The node refused the login (EAUTH)."


class RingcacheConfigError(RingcacheError, ValueError):
    "A bad membership file, seed list or option (EMEMBERS)."


def _error(code, message=None):
    """The exception for a libringcache code."""
    msg = message or _rc.strerror(code)
    if code in (_rc.EKEY, _rc.EINVAL):
        return MemcacheIllegalInputError(msg)
    if code in (_rc.ECLIENT, _rc.ENONNUMERIC):
        return MemcacheClientError(msg)
    if code in (_rc.ESERVER, _rc.ETOOBIG):
        return MemcacheServerError(msg)
    if code == _rc.EPROTO:
        return MemcacheUnknownError(msg)
    if code == _rc.ENOMEM:
        return MemoryError(msg)
    cls = {_rc.EIO: RingcacheConnectionError, _rc.EDOWN: RingcacheConnectionError,
           _rc.ETLS: RingcacheConnectionError, _rc.ETIMEDOUT: RingcacheTimeoutError,
           _rc.EMOVED: RingcacheRetryError, _rc.ETRYAGAIN: RingcacheRetryError,
           _rc.EUNAVAILABLE: RingcacheRetryError, _rc.EAUTH: RingcacheAuthError,
           _rc.EMEMBERS: RingcacheConfigError}.get(code, RingcacheError)
    return cls(code, msg)


def _raise(code, message=None):
    raise _error(code, message)


# ------------------------------------------------------------------ serde

class _LegacySerde:
    """pymemcache's default: serializer/deserializer functions, or none."""

    def __init__(self, serializer=None, deserializer=None):
        self._ser = serializer
        self._de = deserializer

    def serialize(self, key, value):
        if self._ser is None:
            return value, 0
        return self._ser(key, value)

    def deserialize(self, key, value, flags):
        if self._de is None:
            return value
        return self._de(key, value, flags)


# ------------------------------------------------------------------ meta

_MS_MODES = {"set": 0, "add": 1, "replace": 2, "append": 3, "prepend": 4}
_MA_MODES = {"incr": 0, "decr": 1}
_WANT = {"value": _rc.WANT_VALUE, "cas": _rc.WANT_CAS, "flags": _rc.WANT_FLAGS,
         "ttl": _rc.WANT_TTL, "size": _rc.WANT_SIZE, "hit": _rc.WANT_HIT,
         "last_access": _rc.WANT_LAST_ACCESS, "key": _rc.WANT_KEY}


def _want(want):
    """A RINGCACHE_WANT_* mask from an int or names ("value", "cas", ...)."""
    if want is None or isinstance(want, int):
        return want
    mask = 0
    for w in want:
        try:
            mask |= _WANT[w]
        except KeyError:
            raise MemcacheIllegalInputError("unknown want %r (one of %s)"
                                            % (w, ", ".join(sorted(_WANT))))
    return mask


class MetaResult:
    """The reply of a meta call (struct ringcache_meta_result): status is
    one of HIT, MISS, STORED, DELETED, NOT_STORED, EXISTS, NOT_FOUND (0:
    no node answered); value is the raw bytes (mg) or None; number is
    ma's new value; won / stale / token_sent are the recache flags."""

    HIT, MISS, STORED, DELETED = (_rc.META_HIT, _rc.META_MISS, _rc.META_STORED,
                                  _rc.META_DELETED)
    NOT_STORED, EXISTS, NOT_FOUND = (_rc.META_NOT_STORED, _rc.META_EXISTS,
                                     _rc.META_NOT_FOUND)
    __slots__ = ("code", "status", "got", "value", "number", "cas", "flags", "ttl", "size",
                 "hit_before", "last_access", "won", "stale", "token_sent", "key")

    def __init__(self, code, d):
        self.code = code
        self.key = None
        for k, v in d.items():
            setattr(self, k, v)

    @property
    def ok(self):
        "True when the command did what it was asked (a hit, stored, deleted)."
        return self.code == 0

    def __repr__(self):
        return "MetaResult(%s)" % ", ".join("%s=%r" % (k, getattr(self, k, None))
                                            for k in self.__slots__)


_META_SOFT = (0, _rc.ENOTFOUND, _rc.ENOTSTORED, _rc.EEXISTS)


# ------------------------------------------------------------------ client

def _addr(server):
    """'host:port' from (host, port), 'host:port' or '[v6]:port'."""
    if isinstance(server, (tuple, list)):
        host, port = server[0], int(server[1])
        return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)
    if isinstance(server, bytes):
        server = server.decode()
    if isinstance(server, str) and ":" in server:
        return server
    raise RingcacheConfigError(_rc.EMEMBERS, "bad server %r: want (host, port) or 'host:port'"
                               % (server,))


def _ms(seconds):
    return None if seconds is None else max(1, int(round(seconds * 1000)))


class Client:
    """A client of a ringcache cluster (or of plain memcached servers),
    pymemcache-compatible. Give the membership one of four ways:

      Client(("host", port)) or Client([("h1", p1), ("h2", p2)]):  seeds,
          as pymemcache's Client and HashClient take them; a ringcache
          node hands over the cluster's membership, plain memcached
          servers are hashed by libringcache's ring;
      Client(members_file="cluster.members");
      Client(members_text="..."): the same text, in memory;
      Client(store="etcd://10.0.0.5:2379/rc" or store="DIR"): the active
          membership of the membership store ringctl --store names
          (etcd, etcds:// for TLS, or a directory), read once; later
          epochs come from the nodes.

    One Client may be shared by any number of threads: libringcache's
    handle is thread-safe and every call releases the GIL while it waits.
    """

    def __init__(self, servers=None, serde=None, serializer=None, deserializer=None,
                 connect_timeout=None, timeout=None, no_delay=False, ignore_exc=False,
                 socket_module=None, key_prefix=b"", default_noreply=True,
                 allow_unicode_keys=False, encoding="ascii", tls_context=None, *,
                 members_file=None, members_text=None, store=None, tls=False,
                 tls_ca_file=None, tls_cert_file=None, tls_key_file=None,
                 tls_skip_name_check=False, username=None, password=None, pool_size=None,
                 max_value_bytes=None, retry_interval=None, retry_max=None,
                 poll_interval=None, **_pymemcache_only):
        self.serde = serde or _LegacySerde(serializer, deserializer)
        self.ignore_exc = ignore_exc
        if isinstance(key_prefix, str):
            key_prefix = key_prefix.encode("ascii")
        self.key_prefix = key_prefix
        self.default_noreply = default_noreply
        self.allow_unicode_keys = allow_unicode_keys
        self.encoding = encoding
        self._key_encoding = "utf8" if allow_unicode_keys else "ascii"
        self._tls_context = tls_context
        if tls_context is not None:
            tls = True
        kw = {}
        if store is not None:
            if members_file is not None or servers is not None or members_text is not None:
                raise RingcacheConfigError(_rc.EMEMBERS, "give one of servers, members_file, store")
            kw["store"] = os.fspath(store)
        elif members_file is not None:
            kw["members_file"] = os.fspath(members_file)
        elif members_text is not None:
            kw["members_text"] = members_text.encode() if isinstance(members_text, str) \
                else members_text
        elif servers is not None:
            if isinstance(servers, (tuple, str, bytes)) and not (
                    isinstance(servers, tuple) and servers and isinstance(servers[0], (tuple, list))):
                servers = [servers]
            kw["seeds"] = [_addr(s) for s in servers]
        else:
            raise RingcacheConfigError(_rc.EMEMBERS, "give servers, members_file or store")
        for name, v in (("connect_timeout_ms", _ms(connect_timeout)), ("op_timeout_ms", _ms(timeout)),
                        ("retry_interval_ms", _ms(retry_interval)), ("retry_max_ms", _ms(retry_max)),
                        ("poll_interval_ms", None if poll_interval is None
                         else int(poll_interval * 1000)),
                        ("max_value_bytes", max_value_bytes), ("pool_size", pool_size)):
            if v is not None:
                kw[name] = v
        if tls:
            kw.update(tls=1, tls_skip_name_check=int(bool(tls_skip_name_check)),
                      tls_ca_file=tls_ca_file, tls_cert_file=tls_cert_file,
                      tls_key_file=tls_key_file)
        if username is not None or password is not None:
            kw.update(auth_user=username, auth_password=password)
        self._kw = kw
        self._lock = threading.Lock()
        self._h = self._open()

    def _open(self):
        try:
            return _rc.Handle(**self._kw)
        except _rc.Error as e:
            _raise(*e.args)

    @property
    def _handle(self):
        h = self._h
        if h is None:
            with self._lock:
                if self._h is None:
                    self._h = self._open()
                h = self._h
        return h

    def close(self):
        """Close every connection. The client reconnects on its next call,
        as pymemcache's does."""
        with self._lock:
            h, self._h = self._h, None
        if h is not None:
            h.close()

    quit = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- keys and values

    def check_key(self, key):
        """The key as sent: bytes, with key_prefix (pymemcache's check_key)."""
        if type(key) is not bytes:
            if isinstance(key, str):
                try:
                    key = key.encode(self._key_encoding)
                except (UnicodeEncodeError, UnicodeDecodeError):
                    raise MemcacheIllegalInputError("Non-ASCII key: %r" % (key,))
            elif isinstance(key, (bytearray, memoryview, bytes)):
                key = bytes(key)
            else:
                raise MemcacheIllegalInputError("key must be str or bytes, got %r" % (key,))
        return self.key_prefix + key if self.key_prefix else key

    def _value(self, key, value, flags):
        data, sflags = self.serde.serialize(key, value)
        if flags is not None:
            sflags = flags
        if not isinstance(data, bytes):
            try:
                data = str(data).encode(self.encoding)
            except UnicodeEncodeError as e:
                raise MemcacheIllegalInputError("Data values must be binary-safe: %s" % e)
        return data, sflags

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except _rc.Error as e:
            _raise(*e.args)

    # ---- storage commands

    def _store(self, op, key, value, expire, noreply, flags, cas=0):
        k = self.check_key(key)
        data, fl = self._value(key, value, flags)
        code = self._handle.store(op, k, data, fl, int(expire), cas)
        if noreply is None:
            noreply = self.default_noreply
        if code == 0:
            return True
        if code in (_rc.ENOTSTORED, _rc.EEXISTS, _rc.ENOTFOUND):
            if noreply:
                return True
            return None if code == _rc.ENOTFOUND else False
        _raise(code)

    def set(self, key, value, expire=0, noreply=None, flags=None):
        "Store value; True (always True with noreply)."
        return self._store(0, key, value, expire, noreply, flags)

    def add(self, key, value, expire=0, noreply=None, flags=None):
        "Store only if absent: True, or False when present (noreply: True)."
        return self._store(1, key, value, expire, noreply, flags)

    def replace(self, key, value, expire=0, noreply=None, flags=None):
        "Store only if present: True, or False when absent (noreply: True)."
        return self._store(2, key, value, expire, noreply, flags)

    def append(self, key, value, expire=0, noreply=None, flags=None):
        "Append to a present value: True, or False when absent (noreply: True)."
        return self._store(3, key, value, expire, noreply, flags)

    def prepend(self, key, value, expire=0, noreply=None, flags=None):
        "Prepend to a present value: True, or False when absent (noreply: True)."
        return self._store(4, key, value, expire, noreply, flags)

    def cas(self, key, value, cas, expire=0, noreply=False, flags=None):
        """Store if the CAS unique is still cas (from gets): True, False when
        it changed, None when the key is gone (noreply: True)."""
        if isinstance(cas, (bytes, str)):
            if not cas.isdigit():
                raise MemcacheIllegalInputError("cas must only contain digits: %r" % (cas,))
            cas = int(cas)
        elif not isinstance(cas, int):
            raise MemcacheIllegalInputError("cas must be integer, string, or bytes: %r" % (cas,))
        return self._store(5, key, value, expire, noreply, flags, cas)

    def set_many(self, values, expire=0, noreply=None, flags=None):
        "Store every (key, value) of the dict; returns the keys not stored."
        failed = []
        for key, value in values.items():
            if not self._store(0, key, value, expire, False, flags):
                failed.append(key)
        return failed

    set_multi = set_many

    # ---- reads

    def _read_error(self, e):
        if self.ignore_exc and isinstance(e, MemcacheError):
            return
        raise e

    def get(self, key, default=None):
        "The value of key, or default on a miss."
        k = self.check_key(key)
        try:
            r = self._handle.get(k)
        except _rc.Error as e:
            self._read_error(_error(*e.args))
            return default
        if r is None:
            return default
        return self.serde.deserialize(key, r[0], r[1])

    def gets(self, key, default=None, cas_default=None):
        "(value, cas) of key (cas as bytes, as pymemcache), or (default, cas_default)."
        k = self.check_key(key)
        try:
            r = self._handle.get(k, True)
        except _rc.Error as e:
            self._read_error(_error(*e.args))
            return default, cas_default
        if r is None:
            return default, cas_default
        return self.serde.deserialize(key, r[0], r[1]), str(r[2]).encode()

    def _many(self, keys, with_cas):
        keys = list(keys)
        if not keys:
            return {}
        ks = [self.check_key(k) for k in keys]
        try:
            got = self._handle.get_many(ks, with_cas)
        except _rc.Error as e:
            self._read_error(_error(*e.args))
            return {}
        out = {}
        de = self.serde.deserialize
        for key, r in zip(keys, got):
            if r is None:
                continue
            if type(r) is int:
                self._read_error(_error(r))
                continue
            v = de(key, r[0], r[1])
            out[key] = (v, str(r[2]).encode()) if with_cas else v
        return out

    def get_many(self, keys):
        """{key: value} of the keys found: one pipelined request per node,
        all nodes in parallel."""
        return self._many(keys, False)

    get_multi = get_many

    def gets_many(self, keys):
        "{key: (value, cas)} of the keys found."
        return self._many(keys, True)

    def gat(self, key, expire=0, default=None):
        "Get and touch: the value (its ttl now expire), or default."
        r = self.mg(key, want=("value", "flags"), ttl=int(expire))
        if r.status != MetaResult.HIT:
            return default
        return self.serde.deserialize(key, r.value, r.flags)

    def gats(self, key, expire=0, default=None, cas_default=None):
        "Get and touch with the CAS unique: (value, cas) or (default, cas_default)."
        r = self.mg(key, want=("value", "flags", "cas"), ttl=int(expire))
        if r.status != MetaResult.HIT:
            return default, cas_default
        return self.serde.deserialize(key, r.value, r.flags), str(r.cas).encode()

    # ---- other commands

    def delete(self, key, noreply=None):
        "Delete key: True, or False when absent (noreply: True)."
        code = self._handle.delete(self.check_key(key))
        if noreply is None:
            noreply = self.default_noreply
        if code == 0:
            return True
        if code == _rc.ENOTFOUND:
            return bool(noreply)
        _raise(code)

    def delete_many(self, keys, noreply=None):
        "Delete every key; True (as pymemcache)."
        for key in keys:
            self.delete(key, noreply)
        return True

    delete_multi = delete_many

    def _arith(self, key, value, noreply, decr):
        if not isinstance(value, int) or isinstance(value, bool):
            raise MemcacheIllegalInputError("value must be integer, got bad value: %r" % (value,))
        code, n = self._handle.incr(self.check_key(key), value, decr)
        if code == 0:
            return None if noreply else n
        if code == _rc.ENOTFOUND:
            return None
        _raise(code)

    def incr(self, key, value, noreply=False):
        "Add value: the new number, or None when the key is absent (or noreply)."
        return self._arith(key, value, noreply, False)

    def decr(self, key, value, noreply=False):
        "Subtract value (stops at 0): the new number, or None."
        return self._arith(key, value, noreply, True)

    def touch(self, key, expire=0, noreply=None):
        "New ttl for key: True, or False when absent (noreply: True)."
        code = self._handle.touch(self.check_key(key), int(expire))
        if noreply is None:
            noreply = self.default_noreply
        if code == 0:
            return True
        if code == _rc.ENOTFOUND:
            return bool(noreply)
        _raise(code)

    # ---- meta commands (memcached's meta protocol; binary keys allowed)

    def _meta(self, cmd, key, value, opts):
        k = key if type(key) is bytes else self.check_key(key)
        opts = {n: v for n, v in opts.items() if v is not None}
        if "want" in opts:
            opts["want"] = _want(opts["want"])
        code, d = self._call(self._handle.meta, cmd, k, value, opts)
        if code not in _META_SOFT:
            _raise(code)
        return MetaResult(code, d)

    def mg(self, key, want=None, ttl=None, vivify_ttl=None, recache_below=None, cas=None,
           new_cas=None, no_bump=False):
        """Meta get: a MetaResult (status HIT or MISS; value raw bytes).
        want: names ("value", "cas", "flags", "ttl", "size", "hit",
        "last_access", "key") or a WANT_* mask; default value, flags, cas."""
        return self._meta(0, key, None, dict(want=want, ttl=ttl, vivify_ttl=vivify_ttl,
                                             recache_below=recache_below, cas=cas,
                                             new_cas=new_cas, no_bump=int(no_bump)))

    def ms(self, key, value, mode="set", ttl=None, flags=None, cas=None, new_cas=None,
           invalidate=False, vivify_ttl=None, want=None):
        """Meta set of raw bytes: mode set/add/replace/append/prepend; a
        MetaResult (STORED, NOT_STORED, EXISTS or NOT_FOUND)."""
        if isinstance(value, str):
            value = value.encode(self.encoding)
        return self._meta(1, key, value, dict(mode=_MS_MODES[mode], ttl=ttl, flags=flags, cas=cas,
                                              new_cas=new_cas, invalidate=int(invalidate),
                                              vivify_ttl=vivify_ttl, want=want))

    def md(self, key, cas=None, invalidate=False, ttl=None, new_cas=None, want=None):
        "Meta delete (invalidate: mark stale instead): a MetaResult."
        return self._meta(2, key, None, dict(cas=cas, invalidate=int(invalidate), ttl=ttl,
                                             new_cas=new_cas, want=want))

    def ma(self, key, delta=1, mode="incr", vivify_ttl=None, initial=None, ttl=None, cas=None,
           new_cas=None, want=None):
        "Meta arithmetic: a MetaResult whose number is the new value."
        return self._meta(3, key, None, dict(delta=delta, mode=_MA_MODES[mode],
                                             vivify_ttl=vivify_ttl, initial=initial, ttl=ttl,
                                             cas=cas, new_cas=new_cas, want=want))

    def get_or_compute(self, key, fn, ttl=0, vivify_ttl=None, recache_below=None, wait_ms=None):
        """The value of key; when it is missing or stale, exactly one caller
        in the cluster runs fn(key) and stores its value with ttl, the
        others wait for it (herd protection: memcached's mg vivify, in
        libringcache). fn's value goes through serde; an exception it
        raises is raised here (and its stub dropped)."""
        k = self.check_key(key)

        def compute(_k):
            return self._value(key, fn(key), None)

        code, d = self._call(self._handle.get_or_compute, k, compute,
                             {n: v for n, v in dict(ttl=int(ttl), vivify_ttl=vivify_ttl,
                                                    recache_below=recache_below,
                                                    wait_ms=wait_ms).items() if v is not None})
        if code != 0:
            _raise(code)
        return self.serde.deserialize(key, d["value"] or b"", d["flags"])

    # ---- placement and nodes

    def locate(self, key):
        """The key's preference list, primary first: a list of node ids (as
        `ringctl locate` prints them)."""
        return [nid for nid, _addr_ in self._call(self._handle.locate, self.check_key(key))]

    def locate_addrs(self, key):
        "The key's preference list as (id, 'host:port') pairs."
        return self._call(self._handle.locate, self.check_key(key))

    def nodes(self):
        "[(id, 'host:port', marked_down, last_error_code)] of the membership."
        return self._handle.nodes()

    def epoch(self):
        "The membership epoch the client routes with (0: seeds, no epoch)."
        return self._handle.epoch()

    def refresh(self):
        "Fetch the membership now; adopt it when newer."
        code = self._handle.refresh()
        if code != 0:
            _raise(code)

    def stats(self, *args):
        """{node address: {name: value}} of every node (`stats [group]`);
        values are str (pymemcache's Client converts some to numbers)."""
        group = args[0].decode() if args and isinstance(args[0], bytes) else \
            (args[0] if args else None)
        out = {}
        for i, (nid, addr, _down, _err) in enumerate(self._handle.nodes()):
            text = self._call(self._handle.stats, i, group)
            out[addr] = dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)
        return out

    def version(self):
        "The version string of the first node that answers."
        last = None
        for i in range(len(self._handle.nodes())):
            try:
                return self._call(self._handle.stats, i, None).split("version\t", 1)[1] \
                    .split("\n", 1)[0].encode()
            except (MemcacheError, IndexError) as e:
                last = e
        raise last or RingcacheError(_rc.EDOWN)

    def _node_command(self, addr, line):
        """Send one command line to the node at addr over a connection of
        its own (TLS and login as the client's) and return the reply line:
        for the commands libringcache has no call for."""
        import socket
        import ssl
        kw = self._kw
        host, port = addr.rsplit(":", 1)
        host = host.strip("[]")
        timeout = kw.get("op_timeout_ms", 1000) / 1000.0 + 1
        s = socket.create_connection((host, int(port)), timeout)
        try:
            if kw.get("tls"):
                ctx = self._tls_context or ssl.create_default_context(cafile=kw.get("tls_ca_file"))
                if kw.get("tls_cert_file"):
                    ctx.load_cert_chain(kw["tls_cert_file"], kw.get("tls_key_file"))
                if kw.get("tls_skip_name_check"):
                    ctx.check_hostname = False
                s = ctx.wrap_socket(s, server_hostname=host)
            f = s.makefile("rb")
            if kw.get("auth_user") is not None:
                cred = ("%s %s" % (kw["auth_user"], kw["auth_password"])).encode()
                s.sendall(b"set _ 0 0 %d\r\n%s\r\n" % (len(cred), cred))
                reply = f.readline().strip()
                if reply != b"STORED":
                    raise RingcacheAuthError(_rc.EAUTH, "login at %s: %r" % (addr, reply))
            s.sendall(line)
            return f.readline().strip()
        finally:
            s.close()

    def flush_all(self, delay=0, noreply=None):
        """Empty every node: memcached's flush_all, sent to each node over a
        connection of its own (libringcache has no flush call). True."""
        for _nid, addr, _down, _err in self._handle.nodes():
            reply = self._node_command(addr, b"flush_all %d\r\n" % int(delay))
            if reply != b"OK":
                raise MemcacheServerError("flush_all at %s: %r" % (addr, reply))
        return True


class HashClient(Client):
    """pymemcache's HashClient, with its signature: HashClient(servers,
    ...). The ring is libringcache's (the nodes' own), not pymemcache's
    rendezvous hash (hasher is ignored); fail-over follows libringcache's
    rules (retry_interval, retry_max), not retry_attempts/dead_timeout."""

    def __init__(self, servers, hasher=None, serde=None, serializer=None, deserializer=None,
                 connect_timeout=None, timeout=None, no_delay=False, socket_module=None,
                 key_prefix=b"", max_pool_size=None, pool_idle_timeout=0, lock_generator=None,
                 retry_attempts=2, retry_timeout=1, dead_timeout=60, use_pooling=False,
                 ignore_exc=False, allow_unicode_keys=False, default_noreply=True,
                 encoding="ascii", tls_context=None, **kw):
        if max_pool_size is not None:
            kw.setdefault("pool_size", max_pool_size)
        super().__init__(list(servers), serde=serde, serializer=serializer,
                         deserializer=deserializer, connect_timeout=connect_timeout,
                         timeout=timeout, ignore_exc=ignore_exc, key_prefix=key_prefix,
                         default_noreply=default_noreply, allow_unicode_keys=allow_unicode_keys,
                         encoding=encoding, tls_context=tls_context, **kw)


class PooledClient(Client):
    """pymemcache's PooledClient, with its signature: max_pool_size is
    libringcache's pool_size (idle connections kept per node). A Client is
    already safe to share between threads."""

    def __init__(self, server, serde=None, serializer=None, deserializer=None,
                 connect_timeout=None, timeout=None, no_delay=False, ignore_exc=False,
                 socket_module=None, key_prefix=b"", max_pool_size=None, pool_idle_timeout=0,
                 lock_generator=None, default_noreply=True, allow_unicode_keys=False,
                 encoding="ascii", tls_context=None, **kw):
        if max_pool_size is not None:
            kw.setdefault("pool_size", max_pool_size)
        super().__init__(server, serde=serde, serializer=serializer, deserializer=deserializer,
                         connect_timeout=connect_timeout, timeout=timeout, ignore_exc=ignore_exc,
                         key_prefix=key_prefix, default_noreply=default_noreply,
                         allow_unicode_keys=allow_unicode_keys, encoding=encoding,
                         tls_context=tls_context, **kw)
