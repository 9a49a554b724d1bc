/*
 * libringcache: the smart client of a ringcache cluster. It routes every key
 * straight to the node that owns it (the same ring/ code the nodes run) and
 * speaks the memcached text protocol to it: no proxy hop. This is the only
 * installed header; every exported symbol starts with ringcache_.
 *
 * Thread safety: one handle may be shared by any number of threads. All
 * calls on a handle are safe to make concurrently (each node has its own
 * mutex-protected pool of connections; each call routes with a
 * reference-counted snapshot of the ring, replaced atomically when a new
 * epoch is adopted). ringcache_free must not race with other calls on the
 * handle. Node indexes (ringcache_node_*, ringcache_locate, the multi-get
 * callback) are positions in the membership current when they are read;
 * an epoch change renumbers them. Strings returned by ringcache_node_id and
 * ringcache_node_addr stay valid until ringcache_free.
 *
 * Failure rules: a node that fails (connect error, timeout, I/O error or a
 * reply that is not the protocol) is marked down for the retry interval,
 * doubled on each consecutive failure up to retry_max_ms. While a node is
 * marked down no call waits for it:
 *   - reads (get, gets, multi-get) fail over down the key's preference list
 *     (when the membership has R > 1); a key whose every owner is down is
 *     reported as a miss, RINGCACHE_ENOTFOUND;
 *   - writes go to the first owner that is not marked down; a key whose
 *     every owner is down fails with RINGCACHE_EDOWN. A write that fails
 *     after it was sent is not retried elsewhere (it may have been applied)
 *     and reports RINGCACHE_EIO or RINGCACHE_ETIMEDOUT.
 * A call waits at most about connect_timeout_ms + op_timeout_ms for each
 * node it tries (one for writes, at most R for reads), and not at all for
 * a node already marked down.
 *
 * Epochs (docs/cluster.md): the handle routes with one membership epoch
 * at a time (ringcache_epoch). It learns newer ones
 *   - from `SERVER_ERROR MOVED <epoch> <addr>`: when the epoch is higher
 *     than the handle's, it fetches `config` from the node that answered
 *     (else from addr), adopts it and retries; at most 3 redirects per
 *     operation, then a read is a miss (RINGCACHE_ENOTFOUND, never a stale
 *     hit) and a write fails with RINGCACHE_EMOVED;
 *   - from `SERVER_ERROR TRYAGAIN <epoch>` (the key's range is fenced
 *     during a handoff): retried after 1 ms, doubling, while the next
 *     back-off ends within op_timeout_ms of the call's start (the last
 *     try may itself take up to one more op timeout if the node stalls);
 *     then a miss for reads, RINGCACHE_ETRYAGAIN for writes;
 *   - from a periodic poll: every poll interval (default 1000 ms, see
 *     ringcache_set_poll_interval) the first call that finds it due sends
 *     `epoch` to one node, on the calling thread (there is no background
 *     thread), and fetches `config` when that node is ahead. A poll of a
 *     node that hangs costs that one call up to one more timeout;
 *   - from ringcache_refresh.
 * Only strictly higher epochs are adopted. A new ring is swapped in
 * atomically; calls already running finish with the ring they started
 * with (a reference-counted snapshot). Once a node has reported a
 * non-zero epoch, every connection declares the handle's epoch
 * (`epoch <n>`, once per connection and again after each change) so that
 * nodes answer MOVED rather than forwarding; plain memcached servers
 * (which report no epoch) never see it.
 */
#ifndef CLIENT_RINGCACHE_H
#define CLIENT_RINGCACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: every call returns 0 (RINGCACHE_OK) or one of these. */
#define RINGCACHE_OK        0
#define RINGCACHE_ENOTFOUND (-1) /* miss, or NOT_FOUND from the node */
/* add on a present key; replace/append/prepend on a missing one */
#define RINGCACHE_ENOTSTORED (-2)
#define RINGCACHE_EEXISTS    (-3) /* cas: the item changed since it was read */
#define RINGCACHE_EINVAL     (-4) /* bad argument (NULL, bad options, ...) */
#define RINGCACHE_EKEY       (-5) /* key empty, over 250 bytes, or with a space or control char */
/* value above max_value_bytes, or refused as too large by the node */
#define RINGCACHE_ETOOBIG     (-6)
#define RINGCACHE_ENOMEM      (-7)  /* out of memory in this process */
#define RINGCACHE_EDOWN       (-8)  /* write: every owner of the key is marked down */
#define RINGCACHE_ETIMEDOUT   (-9)  /* the node did not answer within the timeout */
#define RINGCACHE_EIO         (-10) /* connection refused, reset or closed */
#define RINGCACHE_EPROTO      (-11) /* the node's reply is not the memcached protocol */
#define RINGCACHE_ECLIENT     (-12) /* CLIENT_ERROR or ERROR: the node rejected the request */
#define RINGCACHE_ESERVER     (-13) /* SERVER_ERROR: the node could not do it */
#define RINGCACHE_ENONNUMERIC (-14) /* incr/decr on a value that is not a decimal number */
#define RINGCACHE_EMEMBERS    (-15) /* bad membership file or seed list */
#define RINGCACHE_EMOVED      (-16) /* write: still redirected (MOVED) after 3 hops */
/* write: the key's range stayed fenced (TRYAGAIN) for the op timeout */
#define RINGCACHE_ETRYAGAIN (-17)
/* write: an owner of the key is down and not yet declared failed
 * (SERVER_ERROR UNAVAILABLE), or did not take the copy (replica
 * unavailable: it may have reached the primary only); retry after the
 * failover (ringctl watch) */
#define RINGCACHE_EUNAVAILABLE (-18)
/* the TLS handshake with the node failed: its certificate is not trusted
 * or does not name its address, it requires a client certificate, or it
 * does not speak TLS (see tls in struct ringcache_options) */
#define RINGCACHE_ETLS (-19)
/* the node (started with -Y) refused the login of auth_user and
 * auth_password, or does not take logins (see struct ringcache_options) */
#define RINGCACHE_EAUTH     (-20)
#define RINGCACHE_ERRNO_MIN (-20) /* the lowest code, for iterating */

#define RINGCACHE_KEY_MAX 250 /* bytes in a key */

/* A handle on a cluster. Opaque. */
struct ringcache;

/* Tunables; fill with ringcache_options_init, then change what you need. */
struct ringcache_options {
    int      connect_timeout_ms; /* TCP connect, default 200 */
    int      op_timeout_ms;      /* one request and its reply (a whole multi-get), default 1000 */
    int      retry_interval_ms;  /* a failed node is left alone this long, default 1000 */
    int      retry_max_ms;       /* cap of the doubling back-off, default 8000 */
    size_t   max_value_bytes;    /* largest value sent, default 1 MiB (1048576) */
    unsigned pool_size;          /* idle connections kept per node, default 4 */
    /* TLS to every node (nodes run with -Z; docs/security.md), default
     * off. A node's certificate is verified against tls_ca_file (NULL: the
     * system's CAs) and must name the host of the node's address (an IP
     * address or DNS name in its subjectAltName) unless tls_skip_name_check.
     * tls_cert_file and tls_key_file (PEM; both or neither) are the client
     * certificate, for nodes that require one (-o ssl_verify_mode=2). The
     * files are read when the handle is created; the strings are not kept. */
    int         tls;
    int         tls_skip_name_check;
    const char *tls_ca_file;
    const char *tls_cert_file;
    const char *tls_key_file;
    /* memcached's text-protocol login, for nodes started with -Y FILE
     * (docs/security.md), default none: both set, or both NULL. Every new
     * connection logs in before its first request; a refused login is
     * RINGCACHE_EAUTH and does not mark the node down. The user has no
     * space or control character, the password no CR or LF; both are
     * copied when the handle is created. */
    const char *auth_user;
    const char *auth_password;
};

/* A value read from the cluster. data is NUL-terminated (not counted in
 * len) and owned by the caller: release it with ringcache_value_clear. */
struct ringcache_value {
    char    *data;
    size_t   len;
    uint32_t flags;
    uint64_t cas; /* filled by gets, 0 otherwise */
};

/**
 * Fill *opt with the defaults listed in struct ringcache_options.
 */
void ringcache_options_init(struct ringcache_options *opt);

/**
 * Create a handle from a membership file (the *.members text format).
 * @param out   receives the handle on success; free it with ringcache_free
 * @param path  the membership file
 * @param opt   options, or NULL for the defaults
 * @param err   receives a one-line reason on failure (may be NULL)
 * @param errlen size of err
 * @return 0, RINGCACHE_EMEMBERS (unreadable or invalid file, see err),
 *         RINGCACHE_EINVAL or RINGCACHE_ENOMEM
 */
int ringcache_new_members_file(struct ringcache **out, const char *path,
                               const struct ringcache_options *opt, char *err, size_t errlen);

/**
 * Create a handle from membership text already in memory.
 * @param name  used in error messages ("name:line: reason")
 * Other parameters and returns as ringcache_new_members_file.
 */
int ringcache_new_members_text(struct ringcache **out, const char *text, size_t len,
                               const char *name, const struct ringcache_options *opt, char *err,
                               size_t errlen);

/**
 * Create a handle from seed addresses ("host:port" or "[v6]:port"). The
 * seeds are asked for the membership (`config`) in order; the first that
 * returns one with a non-zero epoch gives the ring. When none has one
 * (plain nodes, epoch 0, or seeds that do not answer), the seeds are the
 * membership: each node's id is its address (brackets dropped), weight 1,
 * the default vnodes (320, docs/vnodes.md), R = 1, epoch 0; a membership published later is learned
 * by the poll. Creation waits at most connect + op timeout per seed asked. Returns as
 * ringcache_new_members_file.
 */
int ringcache_new_seeds(struct ringcache **out, const char *const *addrs, size_t n_addrs,
                        const struct ringcache_options *opt, char *err, size_t errlen);

/**
 * Create a handle from the active membership of a membership store, named
 * as ringctl --store and ringcached --store name it: "DIR" or "dir:DIR"
 * (which must exist), or "etcd://HOST:PORT[,HOST:PORT...]/PREFIX[?OPTIONS]"
 * ("etcds://" for TLS; OPTIONS in ringctl(1)). The store is read once,
 * here; later epochs reach the handle from its nodes (the poll, MOVED).
 * @return as ringcache_new_members_file (RINGCACHE_EMEMBERS also for a
 *         store that cannot be opened or has no active membership, see
 *         err), or RINGCACHE_EIO when the store did not answer
 */
int ringcache_new_store(struct ringcache **out, const char *spec,
                        const struct ringcache_options *opt, char *err, size_t errlen);

/**
 * The epoch of the membership the handle routes with now (0: seeds used
 * as the membership, no epoch known). Safe to call from any thread.
 */
uint64_t ringcache_epoch(struct ringcache *rc);

/**
 * Fetch `config` now from the handle's nodes (in order, skipping those
 * marked down; the first that answers decides) and adopt it when its epoch
 * is higher than the handle's.
 * @return 0 when a node answered (see ringcache_epoch for the outcome),
 *         RINGCACHE_EMEMBERS when its membership is invalid, or the error
 *         of the last node tried (RINGCACHE_EIO, RINGCACHE_ETIMEDOUT,
 *         RINGCACHE_ECLIENT for a node without the extension, ...)
 */
int ringcache_refresh(struct ringcache *rc);

/**
 * Set the periodic epoch poll interval in milliseconds (default 1000);
 * 0 turns the poll off (MOVED replies and ringcache_refresh still teach
 * the handle new epochs). Safe to call from any thread.
 * @return 0, or RINGCACHE_EINVAL for a negative interval
 */
int ringcache_set_poll_interval(struct ringcache *rc, int ms);

/**
 * Close every connection and free the handle. NULL is allowed. No other
 * call may be running on the handle.
 */
void ringcache_free(struct ringcache *rc);

/**
 * A static, human-readable message for an error code (never NULL).
 */
const char *ringcache_strerror(int code);

/**
 * Free the data of a value read by get, gets or mget and zero it.
 */
void ringcache_value_clear(struct ringcache_value *v);

/**
 * Read a key.
 * @param out  on success holds the value (caller clears it); untouched on error
 * @return 0, RINGCACHE_ENOTFOUND on a miss (including every owner down),
 *         RINGCACHE_EKEY, or an error of the last node tried
 *         (RINGCACHE_ECLIENT, RINGCACHE_ESERVER)
 */
int ringcache_get(struct ringcache *rc, const char *key, size_t key_len,
                  struct ringcache_value *out);

/**
 * Read a key with its CAS unique (out->cas), for a later ringcache_cas.
 * Returns as ringcache_get.
 */
int ringcache_gets(struct ringcache *rc, const char *key, size_t key_len,
                   struct ringcache_value *out);

/**
 * Store a value unconditionally.
 * @param flags opaque 32 bits stored with the value
 * @param ttl   0 = never expires; 1..2592000 seconds from now; above that
 *              an absolute Unix time; negative = expired at once
 * @return 0, RINGCACHE_EKEY, RINGCACHE_ETOOBIG, RINGCACHE_EDOWN,
 *         RINGCACHE_EIO, RINGCACHE_ETIMEDOUT, RINGCACHE_EPROTO,
 *         RINGCACHE_ECLIENT or RINGCACHE_ESERVER
 */
int ringcache_set(struct ringcache *rc, const char *key, size_t key_len, const void *value,
                  size_t value_len, uint32_t flags, int32_t ttl);

/**
 * Store only if the key is absent; RINGCACHE_ENOTSTORED when present.
 * Other returns as ringcache_set.
 */
int ringcache_add(struct ringcache *rc, const char *key, size_t key_len, const void *value,
                  size_t value_len, uint32_t flags, int32_t ttl);

/**
 * Store only if the key is present; RINGCACHE_ENOTSTORED when absent.
 * Other returns as ringcache_set.
 */
int ringcache_replace(struct ringcache *rc, const char *key, size_t key_len, const void *value,
                      size_t value_len, uint32_t flags, int32_t ttl);

/**
 * Append bytes to a present value (flags and ttl are ignored by the node
 * but sent); RINGCACHE_ENOTSTORED when absent.
 */
int ringcache_append(struct ringcache *rc, const char *key, size_t key_len, const void *value,
                     size_t value_len);

/**
 * Prepend bytes to a present value; RINGCACHE_ENOTSTORED when absent.
 */
int ringcache_prepend(struct ringcache *rc, const char *key, size_t key_len, const void *value,
                      size_t value_len);

/**
 * Store only if the item's CAS unique is still `cas` (from ringcache_gets).
 * @return 0, RINGCACHE_EEXISTS when it changed, RINGCACHE_ENOTFOUND when
 *         the key is gone; other returns as ringcache_set
 */
int ringcache_cas(struct ringcache *rc, const char *key, size_t key_len, const void *value,
                  size_t value_len, uint32_t flags, int32_t ttl, uint64_t cas);

/**
 * Delete a key. @return 0, RINGCACHE_ENOTFOUND, or a write error
 * (RINGCACHE_EDOWN, RINGCACHE_EIO, ...).
 */
int ringcache_delete(struct ringcache *rc, const char *key, size_t key_len);

/**
 * Add delta to a decimal value (wraps at 2^64).
 * @param result receives the new value (may be NULL)
 * @return 0, RINGCACHE_ENOTFOUND, RINGCACHE_ENONNUMERIC, or a write error
 */
int ringcache_incr(struct ringcache *rc, const char *key, size_t key_len, uint64_t delta,
                   uint64_t *result);

/**
 * Subtract delta from a decimal value (stops at 0). Returns as ringcache_incr.
 */
int ringcache_decr(struct ringcache *rc, const char *key, size_t key_len, uint64_t delta,
                   uint64_t *result);

/**
 * Give a present key a new ttl (same rules as ringcache_set).
 * @return 0, RINGCACHE_ENOTFOUND, or a write error
 */
int ringcache_touch(struct ringcache *rc, const char *key, size_t key_len, int32_t ttl);

/**
 * Called once per key of a multi-get, in no particular order.
 * @param index   position of the key in the request
 * @param node    index of the node that answered (see ringcache_node_id),
 *                or -1 when no owner could be reached
 * @param status  0 (hit: v is valid), RINGCACHE_ENOTFOUND (miss), or
 *                RINGCACHE_EAUTH when the key's owner refused the login
 *                (node -1: the key is not read from a replica)
 * @param v       the value on a hit; it belongs to the library and is only
 *                valid during the call (copy what you keep); NULL on a miss
 */
typedef void (*ringcache_mget_fn)(void *arg, size_t index, int node, int status,
                                  const struct ringcache_value *v);

/**
 * Read many keys in one round trip: keys are grouped by owner and each node
 * gets a single `get k1 k2 ...` (or `gets`), all nodes in parallel. Keys of
 * nodes that fail or are down fall over down their preference lists, then
 * count as misses; keys of a node that refuses the login (-Y) are
 * RINGCACHE_EAUTH.
 * @param keys, key_lens  n keys (key_lens may be NULL: keys are C strings)
 * @param with_cas  nonzero sends gets and fills v->cas
 * @return 0 when every key was reported to fn (hits and misses),
 *         RINGCACHE_EKEY (nothing sent) when a key is invalid,
 *         RINGCACHE_EINVAL or RINGCACHE_ENOMEM
 */
int ringcache_mget_cb(struct ringcache *rc, const char *const *keys, const size_t *key_lens,
                      size_t n, int with_cas, ringcache_mget_fn fn, void *arg);

/**
 * Multi-get into arrays: for each i, status[i] is 0 (values[i] filled; the
 * caller clears it), RINGCACHE_ENOTFOUND or RINGCACHE_EAUTH (values[i]
 * zeroed). Returns as ringcache_mget_cb.
 */
int ringcache_mget(struct ringcache *rc, const char *const *keys, const size_t *key_lens, size_t n,
                   struct ringcache_value *values, int *status);

/**
 * Number of nodes of the membership the handle routes with.
 */
size_t ringcache_node_count(const struct ringcache *rc);

/**
 * Id of node i ("cache-a"), or NULL when i is out of range. Owned by the handle.
 */
const char *ringcache_node_id(const struct ringcache *rc, size_t i);

/**
 * Address of node i ("127.0.0.1:11311"), or NULL. Owned by the handle.
 */
const char *ringcache_node_addr(const struct ringcache *rc, size_t i);

/**
 * Nonzero when node i is currently marked down (a hint: it changes
 * whenever any thread talks to the node).
 */
int ringcache_node_is_down(struct ringcache *rc, size_t i);

/**
 * Why node i was last marked down: RINGCACHE_EIO, RINGCACHE_ETIMEDOUT,
 * RINGCACHE_EPROTO or RINGCACHE_ETLS (0: never). Kept after the node is
 * up again, so a read that missed because every owner failed can say why.
 */
int ringcache_node_error(struct ringcache *rc, size_t i);

/**
 * The owners of a key in preference order (primary first), as node
 * indexes written into out[]; returns how many (at most want and R), or
 * RINGCACHE_EKEY for an invalid key.
 */
int ringcache_locate(const struct ringcache *rc, const char *key, size_t key_len, size_t *out,
                     size_t want);

/**
 * Called once per `STAT name value` line of a node's stats.
 */
typedef void (*ringcache_stat_fn)(void *arg, const char *name, const char *value);

/**
 * Ask node i for its `stats` and hand every line to fn. A node marked down
 * is still asked (this is how an operator checks it).
 * @return 0, RINGCACHE_EINVAL (bad index), or an I/O or protocol error
 */
int ringcache_stats(struct ringcache *rc, size_t i, ringcache_stat_fn fn, void *arg);

/**
 * The same for one group, `stats <group>` (e.g. "settings", "hotkeys");
 * NULL or "" is plain `stats`. group is 1-32 letters.
 * @return as ringcache_stats; RINGCACHE_EINVAL for a bad group name
 */
int ringcache_stats_group(struct ringcache *rc, size_t i, const char *group, ringcache_stat_fn fn,
                          void *arg);

/*
 * Meta operations: memcached's meta protocol (mg, ms, md, ma, mn; see
 * memcached's doc/protocol.txt) through the same routing, fail-over,
 * epochs and timeouts as the calls above. One options struct drives every
 * call; fill it with ringcache_meta_opts_init, then set what you need, so
 * that options added later keep their defaults in old callers.
 *
 * Keys: any 1..250 bytes that make a text key (see RINGCACHE_EKEY) travel
 * as they are; a key with bytes a text key cannot carry (a space, a
 * control character, DEL, NUL) of at most RINGCACHE_META_BINARY_KEY_MAX
 * bytes is sent base64-encoded with the b flag, transparently. Keys are
 * routed by their bytes as given, so a binary key has one owner like any
 * other.
 *
 * Routing: mg without ttl, vivify_ttl or recache_below (or new_cas) is a
 * read (any owner, fail-over down the preference list, every owner down
 * is a miss); every other meta call changes the item and is routed and
 * failed over like a write (never re-sent after it may have reached a
 * node; every owner down is RINGCACHE_EDOWN). A node that does not speak
 * the meta protocol answers ERROR: RINGCACHE_ECLIENT. Before the first ms
 * to a node, the handle checks with `mn` that the node speaks it, so a
 * value is never read as a command by a node that does not. A ringcached
 * cluster serves every mg at the key's acting primary (W, Z and X are one
 * node's decision; docs/cluster.md): a secondary answers MOVED, and while
 * an owner of the key is down and not yet failed over, mg fails with
 * RINGCACHE_EUNAVAILABLE as writes do.
 */

/* Leave a numeric option unsent (ttl, vivify_ttl, recache_below). */
#define RINGCACHE_META_UNSET INT32_MIN

/* The longest binary key: its base64 form is a 248-byte key. */
#define RINGCACHE_META_BINARY_KEY_MAX 186

/* What a meta reply should carry back (RINGCACHE_WANT_*, struct ringcache_meta_opts.want;
 * struct ringcache_meta_result.got says what it did carry). A call sends
 * only the ones its command knows: mg all of them, ms CAS, SIZE and KEY,
 * md KEY, ma VALUE (the new number), CAS, TTL and KEY. */
#define RINGCACHE_WANT_VALUE       (1u << 0) /* v: the value (mg) or the new number (ma) */
#define RINGCACHE_WANT_CAS         (1u << 1) /* c: the CAS unique */
#define RINGCACHE_WANT_FLAGS       (1u << 2) /* f: the client flags */
#define RINGCACHE_WANT_TTL         (1u << 3) /* t: seconds left, -1 for never */
#define RINGCACHE_WANT_SIZE        (1u << 4) /* s: the value's size */
#define RINGCACHE_WANT_HIT         (1u << 5) /* h: fetched before this call */
#define RINGCACHE_WANT_LAST_ACCESS (1u << 6) /* l: seconds since the last access */
#define RINGCACHE_WANT_KEY         (1u << 7) /* k: the key echoed */

/* ms modes (struct ringcache_meta_opts.mode). */
#define RINGCACHE_MS_SET     0 /* store (default) */
#define RINGCACHE_MS_ADD     1 /* only if absent: RINGCACHE_ENOTSTORED when present */
#define RINGCACHE_MS_REPLACE 2 /* only if present: RINGCACHE_ENOTSTORED when absent */
#define RINGCACHE_MS_APPEND  3 /* add bytes after a present value */
#define RINGCACHE_MS_PREPEND 4 /* add bytes before a present value */

/* ma modes (struct ringcache_meta_opts.mode). */
#define RINGCACHE_MA_INCR 0 /* add delta (wraps at 2^64; default) */
#define RINGCACHE_MA_DECR 1 /* subtract delta (stops at 0) */

/* Options of a meta call. Each field says which commands use it (the
 * meta flag in brackets); the others ignore it. */
struct ringcache_meta_opts {
    unsigned want; /* RINGCACHE_WANT_* to read back; default VALUE | FLAGS | CAS */
    /* [T] mg, ma: a hit's new ttl; ms: the stored item's ttl (unset: 0,
     * never expires); md with invalidate: the stale item's ttl. Same
     * rules as ringcache_set's ttl. Default RINGCACHE_META_UNSET. */
    int32_t ttl;
    /* [N] mg: a miss creates an empty item with this ttl and this caller
     * wins (result.won): the herd's one recache; ms append/prepend: a
     * miss stores the value as new; ma: a miss creates the number
     * `initial`. Default RINGCACHE_META_UNSET (off). */
    int32_t vivify_ttl;
    /* [R] mg: a hit with fewer seconds left than this wins the recache
     * (once, until the item is stored again). Default UNSET (off). */
    int32_t recache_below;
    /* [C] ms, md, ma: only if the item's CAS unique is this (else
     * RINGCACHE_EEXISTS, RINGCACHE_ENOTFOUND when absent); mg: the value
     * is left out of a hit whose CAS still is this. 0 (default): none. */
    uint64_t cas;
    uint64_t new_cas; /* [E] ms, md, ma, mg vivify: the CAS unique the item gets; 0: the node's */
    uint32_t flags;   /* [F] ms: the client flags stored; default 0 */
    unsigned mode;    /* [M] ms: RINGCACHE_MS_*; ma: RINGCACHE_MA_*; default 0 */
    int      invalidate; /* [I] md: mark stale (mg then says stale and hands out one win)
                          * instead of deleting; ms with cas: a CAS older than the item's
                          * still stores, marked stale. Default 0 */
    int      no_bump;    /* [u] mg: no LRU bump, hit and last access untouched. Default 0 */
    uint64_t delta;      /* [D] ma: default 1 */
    uint64_t initial;    /* [J] ma with vivify_ttl: the number created; default 0 */
    /* get_or_compute: how long a caller that did not win waits for the
     * winner's value, in ms (default 2000) */
    int wait_ms;
};

/* What the node answered (struct ringcache_meta_result.status). */
#define RINGCACHE_META_HIT        1 /* mg: VA or HD */
#define RINGCACHE_META_MISS       2 /* mg: EN */
#define RINGCACHE_META_STORED     3 /* ms, ma: HD or VA */
#define RINGCACHE_META_DELETED    4 /* md: HD (deleted, or marked stale with invalidate) */
#define RINGCACHE_META_NOT_STORED 5 /* NS */
#define RINGCACHE_META_EXISTS     6 /* EX: the CAS did not match */
#define RINGCACHE_META_NOT_FOUND  7 /* NF */

/* The reply of a meta call. Fields the reply did not carry are 0 (got
 * says which it did). value is NUL-terminated (not counted in value_len)
 * and malloc'd: release it with ringcache_meta_result_clear. In a
 * ringcache_mg_multi callback value belongs to the library. */
struct ringcache_meta_result {
    int      status; /* RINGCACHE_META_*; 0 when no node answered */
    unsigned got;    /* RINGCACHE_WANT_* the reply carried */
    char    *value;  /* VALUE: the data (mg), NULL when none */
    size_t   value_len;
    uint64_t number; /* ma with VALUE: the new number */
    uint64_t cas;
    uint32_t flags;
    int64_t  ttl; /* seconds left, -1: never expires */
    uint64_t size;
    int      hit_before;
    uint64_t last_access;
    int      won;                        /* W: this caller won the recache: compute and store */
    int      stale;                      /* X: the item was invalidated (md invalidate) */
    int      token_sent;                 /* Z: another caller already won the recache */
    char     key[RINGCACHE_KEY_MAX + 1]; /* KEY: the key echoed (decoded), NUL-terminated */
    size_t   key_len;
};

/**
 * Fill *o with the defaults listed in struct ringcache_meta_opts.
 */
void ringcache_meta_opts_init(struct ringcache_meta_opts *o);

/**
 * Free the value of a meta result and zero it. NULL is allowed.
 */
void ringcache_meta_result_clear(struct ringcache_meta_result *r);

/**
 * Meta get (mg) of one key.
 * @param opts  want, ttl, vivify_ttl, recache_below, cas, new_cas,
 *              no_bump (NULL: the defaults)
 * @param out   the reply (the caller clears it); filled on a miss too
 * @return 0 on a hit, RINGCACHE_ENOTFOUND on a miss (or every owner
 *         down for a read), RINGCACHE_EKEY, RINGCACHE_EINVAL, or the
 *         errors of ringcache_get (a write's when routed as one)
 */
int ringcache_mg(struct ringcache *rc, const char *key, size_t key_len,
                 const struct ringcache_meta_opts *opts, struct ringcache_meta_result *out);

/**
 * Meta set (ms): store value with opts->mode, ttl, flags, cas, new_cas,
 * invalidate and vivify_ttl (append/prepend).
 * @param out  the reply (may be NULL)
 * @return 0 (stored), RINGCACHE_ENOTSTORED (NS), RINGCACHE_EEXISTS (EX:
 *         stale cas), RINGCACHE_ENOTFOUND (NF: cas on a missing key),
 *         RINGCACHE_EINVAL (bad mode), or the errors of ringcache_set
 */
int ringcache_ms(struct ringcache *rc, const char *key, size_t key_len, const void *value,
                 size_t value_len, const struct ringcache_meta_opts *opts,
                 struct ringcache_meta_result *out);

/**
 * Meta delete (md): delete the key, or with opts->invalidate mark it
 * stale (its CAS bumped, ttl set when given) so that readers see the
 * old value as stale and one of them wins the recache.
 * @return 0, RINGCACHE_ENOTFOUND, RINGCACHE_EEXISTS (cas given and not
 *         matching), or a write error
 */
int ringcache_md(struct ringcache *rc, const char *key, size_t key_len,
                 const struct ringcache_meta_opts *opts, struct ringcache_meta_result *out);

/**
 * Meta arithmetic (ma): incr or decr (opts->mode) by opts->delta; with
 * vivify_ttl a missing key is created as opts->initial (and not changed
 * by this call). out->number is the new value when VALUE is wanted (the
 * default).
 * @return 0, RINGCACHE_ENOTFOUND, RINGCACHE_ENOTSTORED (not created),
 *         RINGCACHE_EEXISTS, RINGCACHE_ENONNUMERIC, or a write error
 */
int ringcache_ma(struct ringcache *rc, const char *key, size_t key_len,
                 const struct ringcache_meta_opts *opts, struct ringcache_meta_result *out);

/**
 * Called once per key of ringcache_mg_multi, in no particular order.
 * @param index   position of the key in the request
 * @param node    index of the node that answered, or -1 when none could
 * @param status  0 (hit), RINGCACHE_ENOTFOUND (miss, or no owner
 *                reachable), RINGCACHE_EAUTH (the owner refused the
 *                login), or the code of the node's error reply for
 *                this key (RINGCACHE_ECLIENT, RINGCACHE_ESERVER, ...)
 * @param r       the reply (status set even when no node answered: 0);
 *                its value belongs to the library and is only valid
 *                during the call
 */
typedef void (*ringcache_mg_fn)(void *arg, size_t index, int node, int status,
                                const struct ringcache_meta_result *r);

/**
 * Meta get of many keys: keys are grouped by owner (as ringcache_mget
 * does) and each node gets one pipeline `mg k1 ... O<i>` per key and a
 * final `mn`, all nodes in parallel; replies are matched to keys by
 * their opaque. Keys of nodes that fail, are down, or redirect (MOVED,
 * TRYAGAIN) are handled as ringcache_mget_cb's. opts apply to every key
 * (a vivifying multi-get is routed like a read: a key whose node fails
 * is asked of its next owner).
 * @return 0 when every key was reported to fn, RINGCACHE_EKEY (nothing
 *         sent) when a key is invalid, RINGCACHE_EINVAL or RINGCACHE_ENOMEM
 */
int ringcache_mg_multi(struct ringcache *rc, const char *const *keys, const size_t *key_lens,
                       size_t n, const struct ringcache_meta_opts *opts, ringcache_mg_fn fn,
                       void *arg);

/**
 * Computes a missing or stale value for ringcache_get_or_compute: fill
 * out->data (malloc'd; the library takes it over), out->len and
 * out->flags. Return 0, or a negative code that the call then returns.
 * Called with no lock held, on the calling thread.
 */
typedef int (*ringcache_compute_fn)(void *arg, const char *key, size_t key_len,
                                    struct ringcache_value *out);

/**
 * Herd-safe "get or compute": mg with vivify (opts->vivify_ttl, default
 * 30 s when unset) and opts->recache_below. Exactly one caller at a time
 * wins a missing, stale or (with recache_below) expiring key: it runs
 * compute and stores the value (ms with the stub's CAS, opts->ttl and
 * the computed flags), and gets it in out with out->won set. A caller
 * that did not win gets the present value (out->stale set when it is the
 * stale one); when there is none yet (the winner's empty stub) it asks
 * again with a back-off from 1 ms up to 50 ms for opts->wait_ms. A
 * winner whose compute fails deletes its stub, so the next caller wins.
 * A computed empty value looks like the stub to the others: store at
 * least one byte. With every owner down, compute runs and its value is
 * returned unstored (out->status 0). RINGCACHE_EUNAVAILABLE,
 * RINGCACHE_ETRYAGAIN and RINGCACHE_EMOVED (an owner being failed over, a
 * fenced range, an owner moving) are asked again the same way, within
 * wait_ms: compute does not run while the cluster cannot say who wins.
 * @param out  the value (the caller clears it)
 * @return 0, RINGCACHE_ETIMEDOUT (no value within wait_ms),
 *         RINGCACHE_EUNAVAILABLE, RINGCACHE_ETRYAGAIN or RINGCACHE_EMOVED
 *         (still so after wait_ms), compute's code, or the errors of
 *         ringcache_mg and ringcache_ms
 */
int ringcache_get_or_compute(struct ringcache *rc, const char *key, size_t key_len,
                             const struct ringcache_meta_opts *opts, ringcache_compute_fn compute,
                             void *arg, struct ringcache_meta_result *out);

#ifdef __cplusplus
}
#endif

#endif /* CLIENT_RINGCACHE_H */
