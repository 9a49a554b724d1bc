/*
 * store: the node's item store. A hash table keyed by XXH3_64bits of the key
 * (the same value the ring uses, kept in the item), striped locks, LRU
 * eviction under a byte limit, lazy expiry plus a sweep, CAS, flush_all.
 * Every function here is thread-safe: it takes the stripe lock of the key.
 * Items are reference counted and immutable once stored, so a reply can be
 * written from one while other threads replace or delete the key. The meta
 * protocol's state (a stale mark, a win token handed out, a client-chosen
 * CAS) lives in the item too: store_meta_* below.
 */
#ifndef SERVER_STORE_H
#define SERVER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "server/cas_clock.h"

#define STORE_KEY_MAX 250
#define STORE_STRIPES 1024 /* lock stripes (store_cursor.stripe < this) */

/* Results of store operations (>= 0) and errors (< 0). */
enum store_result {
    STORE_STORED = 0,
    STORE_NOT_STORED, /* add on a live key; replace/append/prepend on a missing one */
    STORE_EXISTS,     /* cas mismatch */
    STORE_NOT_FOUND,  /* cas/delete/touch/incr on a missing key */
    STORE_DELETED,
    STORE_TOUCHED,
    STORE_NON_NUMERIC = -1, /* incr/decr on a value that is not a decimal u64 */
    STORE_TOO_LARGE = -2,   /* item over item_size_max. A set that fails with it
                             * must also drop the old value under that key
                             * (memcached does): the protocol layer calls
                             * store_delete. append/prepend/add/replace/cas
                             * leave the old item as it was. */
    STORE_NO_MEMORY = -3,   /* nothing left to evict */
    STORE_BUSY = -4,        /* store_track_start: a session is already active */
};

/* How a store command combines with what is there. */
enum store_op {
    STORE_OP_SET,
    STORE_OP_ADD,
    STORE_OP_REPLACE,
    STORE_OP_APPEND,
    STORE_OP_PREPEND,
    STORE_OP_CAS,
};

struct store_config {
    size_t mem_limit;     /* bytes of items (header+key+value) before eviction; -m */
    size_t item_size_max; /* largest item, header+key+value; -I (default 1 MiB) */
    bool   sweeper;       /* start a background expiry sweep thread (chained table only) */
    bool   compact;       /* items in the compact engine (server/seg.h, store_seg.c),
                           * not the chained table of malloc'd items */
};

/* An item's meta state (mflags). */
#define STORE_MF_STALE  0x01u /* marked stale (md I, or ms I with an older CAS): mg says X */
#define STORE_MF_WON    0x02u /* a win token (W) was handed out for it: mg says Z */
#define STORE_MF_ECAS   0x04u /* the client set its CAS (E): 8 bytes after the "\r\n" */
#define STORE_MF_BINKEY 0x08u /* the key came base64-encoded (b): mg k returns it so */
/* On the wire only (rc_set's m token): the key token is base64, the key
 * holding bytes a text token cannot (a b key with spaces or controls). */
#define STORE_MF_KEY64 0x10u
/* What a post-image (replication, handoff) carries to the other owners. */
#define STORE_MF_REPLICATED (STORE_MF_STALE | STORE_MF_WON | STORE_MF_ECAS | STORE_MF_BINKEY)

/*
 * An item: one allocation holding this header (64 bytes), the key, the
 * value, "\r\n" and, with STORE_MF_ECAS, the client's CAS. The public
 * fields are readable by anyone holding a reference; nobody writes them
 * after store_put() accepted the item, except exptime, which touch/gat
 * update in place (an aligned 32-bit store: a reader sees the old or the
 * new value), and mflags' WON bit, set in place under the key's stripe
 * lock (read it with store_item_mflags). Times are unsigned 32-bit unix
 * seconds (good until 2106). Flushes use a flush generation (see
 * store_flush). cas is the store's own: it orders replicas and the handoff
 * (always minted here or by the key's primary); the CAS a client sees is
 * store_item_cas, which differs only for an item stored with E.
 */
struct store_item {
    uint64_t hash; /* XXH3_64bits(key): table bucket, lock stripe, ring position */
    uint64_t cas;  /* unique, non-zero once stored */
    /* private to the store */
    struct store_item *h_next; /* hash chain */
    struct store_item *lru_prev, *lru_next;
    /* public again */
    uint32_t exptime; /* absolute unix time, 0 = never */
    uint32_t flags;   /* opaque client flags */
    uint32_t nbytes;  /* value length, without the trailing "\r\n" */
    /* private to the store */
    uint32_t refcount; /* atomic: one for the table while linked, one per holder */
    uint8_t  nkey;     /* public: key length, 1..250 */
    uint8_t  mflags;   /* public: STORE_MF_* */
    uint16_t gen;      /* flush generation when stored (14 bits), linked, fetched */
    uint32_t atime;    /* when stored or last moved to the LRU head (mg l) */
    char     data[];   /* key bytes, then value bytes, then "\r\n" [, client CAS] */
};

static inline const char *
store_item_key(const struct store_item *it)
{
    return it->data;
}

static inline uint8_t
store_item_mflags(const struct store_item *it)
{
    return __atomic_load_n(&it->mflags, __ATOMIC_ACQUIRE);
}

/* The CAS clients see: the one they set with E, else the store's. */
static inline uint64_t
store_item_cas(const struct store_item *it)
{
    uint64_t c;

    if (!(it->mflags & STORE_MF_ECAS)) {
        return it->cas;
    }
    memcpy(&c, it->data + it->nkey + it->nbytes + 2, sizeof(c));
    return c;
}

/* The value followed by "\r\n": nbytes + 2 readable bytes. */
static inline const char *
store_item_value(const struct store_item *it)
{
    return it->data + it->nkey;
}

struct store_stats {
    uint64_t curr_items, total_items, bytes, evictions, expired_unfetched, reclaimed, get_expired,
        get_flushed;
    uint64_t limit_maxbytes;
    uint64_t mem_used; /* bytes charged now: linked items plus unlinked
                        * ones still referenced or not yet stored */
    uint64_t hash_buckets;
    /* The handoff (see "Ranges" below). Not zeroed by store_reset_stats:
     * the handoff reads them, a client's "stats reset" must not hide an
     * import eviction. */
    uint64_t imported;         /* post-images linked by store_import/store_put_import */
    uint64_t import_evictions; /* live items evicted to make room for an import */
    uint64_t purged;           /* items removed by store_purge */
    uint64_t track_pending;    /* keys in the dirty set now (0 when not tracking) */
};

struct store;

/* Create a store; NULL on ENOMEM. */
struct store *store_new(const struct store_config *cfg);

/* Stop the sweeper and free every item; no other call may be running and
 * every reference from store_get/store_alloc must have been released. */
void store_free(struct store *s);

/* Current unix time in seconds, as the store sees it (tests may shift it
 * with store_clock_shift). */
int64_t store_now(const struct store *s);
void    store_clock_shift(struct store *s, int64_t seconds);

/* Protocol exptime (0 never, <= 30 days relative, above absolute unix time,
 * negative expired) to an absolute time: 0 = never, otherwise unix seconds
 * (a time <= now means already expired). */
int64_t store_exptime(const struct store *s, int64_t exptime);

/*
 * Allocate an unlinked item with refcount 1 for a value of nbytes, which
 * the caller fills through store_item_value() before store_put(). The
 * trailing "\r\n" is written by the allocator. Returns NULL and sets *err
 * to STORE_TOO_LARGE or STORE_NO_MEMORY. May evict to make room.
 */
struct store_item *store_alloc(struct store *s, const char *key, size_t nkey, uint64_t hash,
                               uint32_t flags, int64_t exptime, size_t nbytes, int *err);

/* Writable value of an item from store_alloc (not yet stored). */
static inline char *
store_item_value_mut(struct store_item *it)
{
    return it->data + it->nkey;
}

/*
 * Store an allocated item according to op (cas_in is checked for
 * STORE_OP_CAS). Append and prepend build a new item from both values.
 * On success the new CAS is written to *cas_out (may be NULL). Returns
 * STORE_STORED, STORE_NOT_STORED, STORE_EXISTS, STORE_NOT_FOUND, or a
 * negative error. The caller keeps its reference and must release it.
 */
int store_put(struct store *s, struct store_item *it, enum store_op op, uint64_t cas_in,
              uint64_t *cas_out);

/*
 * Look a key up. Returns a new reference (release with store_release) or
 * NULL on a miss (expired and flushed items are misses, and are unlinked).
 * With touch, sets the exptime (already converted by store_exptime) first.
 */
struct store_item *store_get(struct store *s, const char *key, size_t nkey, uint64_t hash);
struct store_item *store_get_touch(struct store *s, const char *key, size_t nkey, uint64_t hash,
                                   int64_t exptime);

/* store_get without the LRU bump and the fetched mark (not a client's
 * read: replication reading a key's state, me). */
struct store_item *store_peek(struct store *s, const char *key, size_t nkey, uint64_t hash);

/* Drop a reference; frees the item when it was unlinked and this was the
 * last reference. Any thread. */
void store_release(struct store *s, struct store_item *it);

/* STORE_DELETED or STORE_NOT_FOUND. */
int store_delete(struct store *s, const char *key, size_t nkey, uint64_t hash);
/* The same; *cas (when not NULL) gets the CAS of the item it deleted, for
 * the tombstone a replicated delete sends. */
int store_delete_cas(struct store *s, const char *key, size_t nkey, uint64_t hash, uint64_t *cas);

/* A CAS newer than any this store has minted or imported: the tombstone a
 * primary sends for a delete that found nothing (a replica may still hold
 * what an earlier, unacknowledged delete removed here). Every CAS is a
 * hybrid logical clock: max(previous + 1, store_cas_clock(now)), so one
 * minted after a restart, or on a node that just joined, is above what any
 * node minted earlier, up to clock skew. */
uint64_t store_cas_mint(struct store *s);

/* Make every CAS minted from now on newer than cas (a replica applying a
 * tombstone: were it to become the primary, its writes must outrank it). */
void store_cas_raise(struct store *s, uint64_t cas);

/* STORE_TOUCHED or STORE_NOT_FOUND; exptime already converted. */
int store_touch(struct store *s, const char *key, size_t nkey, uint64_t hash, int64_t exptime);

/*
 * incr (incr = true) or decr by delta. incr wraps modulo 2^64, decr stops
 * at 0. Keeps flags and exptime, mints a new CAS. Returns STORE_STORED with
 * the new value in *value, STORE_NOT_FOUND, STORE_NON_NUMERIC or
 * STORE_NO_MEMORY.
 */
int store_arith(struct store *s, const char *key, size_t nkey, uint64_t hash, bool incr,
                uint64_t delta, uint64_t *value, uint64_t *cas_out);

/*
 * flush_all: every item stored before `when` (absolute unix time, from
 * store_exptime; <= now means now) is invalid from `when` on; items stored
 * from `when` on survive. A later call replaces a pending one. Implemented
 * as a CAS floor (memcached's oldest_cas): an immediate flush raises the
 * floor to a fresh CAS at once (so an item stored in the same second after
 * the flush survives), a delayed one to store_cas_clock(`when`) (the CAS
 * clock, store_cas_mint) when the first operation at or after `when`
 * sees it due. Memory is reclaimed lazily and by the sweep.
 */
void store_flush(struct store *s, int64_t when);

/* The floor of store_flush_floor, from `when` on (store seconds). A
 * later delayed one replaces a pending one; when < 0 raises the floor at
 * once and cancels a pending one (flush_all without a delay, as
 * memcached), when 0 only raises it (store_flush_floor). */
void store_flush_at(struct store *s, uint64_t floor, int64_t when);

/* The floor, and the pending delayed one and its moment (0, 0: none): what
 * a handoff carries to a destination and a cluster flush_all N sends. */
void store_flush_state(struct store *s, uint64_t *floor, uint64_t *when_floor, int64_t *when);

/*
 * A cluster flush (server/flush.c): every item with a CAS below floor is
 * dead, and every CAS minted from now on is at least floor; so are
 * imports and replica images below it (store_put_import drops them). The
 * floor only rises; 0 does nothing; a pending delayed flush stays.
 */
void store_flush_floor(struct store *s, uint64_t floor);

/* The CAS counter: every CAS minted or imported so far is below it. */
uint64_t store_cas_next(struct store *s);

/* The CAS clock lead_ms milliseconds from now by this store's clock
 * (store_cas_clock of its wall time plus lead_ms), not a CAS: what a
 * flush proposes as its floor (server/flush.c). */
uint64_t store_cas_clock_ahead(struct store *s, int64_t lead_ms);

/* The flush floor (0: never flushed). */
uint64_t store_floor(struct store *s);

/* Expire a bounded slice of the table (the sweeper calls this); returns the
 * number of items reclaimed. */
size_t store_sweep(struct store *s, size_t max_buckets);

/* Sum the per-stripe counters (takes each stripe lock briefly). */
void store_get_stats(struct store *s, struct store_stats *out);

/* stats reset: zero total_items, evictions, reclaimed, expired_unfetched,
 * get_expired and get_flushed (curr_items and bytes are gauges and stay). */
void store_reset_stats(struct store *s);

/* Bytes an item of this key and value length is charged against
 * mem_limit and item_size_max: header + key + value + 2, plus what glibc
 * malloc adds (8-byte chunk header, 16-byte rounding; page rounding above
 * its 128 KiB mmap threshold). The header is offsetof(struct store_item,
 * data) = 64 bytes. The bucket arrays are not charged. */
size_t store_item_size(size_t nkey, size_t nbytes);

/*
 * Drop hook: told of every item the store removes by itself, an eviction
 * (the memory limit) or the reclaim of an expired one, with its hash and
 * CAS and the store's clock; not of deletes, replacements, flushes or
 * purges. The replication layer keeps these as replica tombstones
 * (server/replicate.c), so a late post-image older than what was dropped
 * does not bring the key back. Called with the item's stripe lock held
 * (and maybe other locks of the caller): fn must be quick, must take only
 * leaf locks and must not call the store. Set it once, before the store is
 * busy or while it is (the pointer is published atomically); NULL stops it.
 */
typedef void (*store_drop_fn)(uint64_t hash, uint64_t cas, int64_t now, void *arg);
void store_set_drop_hook(struct store *s, store_drop_fn fn, void *arg);

/*
 * Change the memory limit while serving (memcached's cache_memlimit). A
 * lower limit is reached as stores need room: each evicts until its item
 * fits under the new limit. The ghost table keeps the size the first limit
 * gave it.
 */
void store_set_mem_limit(struct store *s, size_t bytes);

/* ---- The meta protocol's operations (server/proto_meta.c) --------------
 *
 * Each runs under the key's stripe lock like the classic ones and follows
 * memcached 1.6.45 (doc/protocol.txt, "Meta Commands"). Times are absolute
 * (store_exptime). `ecas`, when has_ecas, is the CAS the client chose (E);
 * otherwise the store mints one.
 */

/* Allocate like store_alloc, with room for a client CAS when ecas: the
 * item carries STORE_MF_ECAS and store_item_cas returns ecas. */
struct store_item *store_alloc_meta(struct store *s, const char *key, size_t nkey, uint64_t hash,
                                    uint32_t flags, int64_t exptime, size_t nbytes, bool has_ecas,
                                    uint64_t ecas, int *err);

/* mg: what the request asks of the item. */
struct store_mget {
    bool     bump;            /* move it to the LRU head and mark it fetched (not u) */
    bool     touch;           /* T: set exptime to touch_exptime */
    bool     touch_first;     /* T came before R on the line (R then sees the new TTL) */
    bool     touch_after_viv; /* T came after N (a vivified item takes T's TTL) */
    bool     vivify;          /* N: on a miss create an empty item living until viv_exptime */
    bool     recache;         /* R: win if the item expires before recache_at */
    bool     has_ecas;        /* E: the vivified item's CAS */
    bool     binkey;          /* b: mark a vivified item's key as binary */
    int64_t  touch_exptime;   /* absolute, 0 never */
    int64_t  viv_exptime;
    int64_t  recache_at;
    uint64_t ecas;
};

/* mg: what happened, and the state before the command (h, l). */
struct store_mget_res {
    bool     created;        /* vivified (N) */
    bool     won;            /* this request gets W */
    bool     token_sent;     /* Z: a token had been handed out before */
    bool     stale;          /* X */
    bool     fetched_before; /* h */
    bool     changed;        /* the item changed (created, touched, token): replicate it */
    uint32_t atime_before;   /* l: now - this */
    uint32_t exptime_before; /* the expiry before T or N (0 for a vivified item) */
};

/* mg on key: the item (a reference, NULL on a miss without N) and r.
 * NULL with *err set when N could not allocate its item. */
struct store_item *store_mget(struct store *s, const char *key, size_t nkey, uint64_t hash,
                              const struct store_mget *q, struct store_mget_res *r, int *err);

/* ms: store it (from store_alloc_meta, filled) as op; cas_in (0: none)
 * compares against the client CAS; allow_stale (I with a CAS): an older
 * cas_in stores it marked stale, keeping the old TTL and win token;
 * vivify (append/prepend with N): a miss stores it as is, living until
 * viv_exptime. On success *cas_out gets the client CAS and *nbytes_out
 * the stored value's size (after append). Results as store_put. */
struct store_mset {
    bool    allow_stale;
    bool    vivify;
    int64_t viv_exptime;
};
int store_mset(struct store *s, struct store_item *it, enum store_op op, uint64_t cas_in,
               const struct store_mset *o, uint64_t *cas_out, uint32_t *nbytes_out);

/* md: what the request asks. */
struct store_mdel {
    bool     has_cas; /* C: only if the client CAS equals cas */
    uint64_t cas;
    bool     stale;    /* I: mark stale, clear the token, new CAS, instead of deleting */
    bool     touch;    /* T with I: new exptime */
    int64_t  exptime;  /* T */
    bool     empty;    /* x: replace the value by an empty one (flags, exptime as given) */
    uint32_t flags;    /* x: the empty item's flags (F) */
    bool     has_ecas; /* E */
    uint64_t ecas;
};
/* md: STORE_DELETED (HD), STORE_NOT_FOUND (NF), STORE_EXISTS (EX),
 * STORE_NOT_STORED (NS: x could not replace it) or STORE_NO_MEMORY.
 * *removed: the key is gone (a tombstone with *tomb_cas follows), else it
 * holds a new state (a post-image follows). */
int store_mdel(struct store *s, const char *key, size_t nkey, uint64_t hash,
               const struct store_mdel *o, bool *removed, uint64_t *tomb_cas);

/* ma: incr or decr by delta if the client CAS equals cas_in (when not 0);
 * on a miss with vivify, create it holding `initial` (flags 0) living until
 * viv_exptime; on success with touch the exptime becomes exptime. The new
 * value in *value and client CAS in *cas_out; *exptime_out for t.
 * STORE_STORED, STORE_NOT_FOUND, STORE_EXISTS, STORE_NON_NUMERIC,
 * STORE_NOT_STORED or STORE_NO_MEMORY. */
struct store_marith {
    bool     incr;
    uint64_t delta;
    uint64_t cas_in;
    bool     vivify;
    uint64_t initial;
    int64_t  viv_exptime;
    bool     touch;
    bool     touch_after_viv; /* T came after N: a created item takes T's TTL */
    int64_t  exptime;
    bool     has_ecas;
    uint64_t ecas;
};
struct store_marith_res {
    uint64_t value;
    uint64_t cas;            /* the client CAS after */
    uint32_t exptime_before; /* before T or N (0 for a created item) */
    uint32_t exptime;        /* after */
    bool     created;
};
int store_marith(struct store *s, const char *key, size_t nkey, uint64_t hash,
                 const struct store_marith *o, struct store_marith_res *res);

/* me: a snapshot of the item's meta data without bumping it. */
struct store_mdebug {
    int64_t  exp; /* seconds left, -1 never */
    uint32_t la;  /* seconds since last access */
    uint64_t cas; /* client CAS */
    bool     fetched;
    uint32_t size; /* bytes charged */
    uint8_t  mflags;
};
bool store_mdebug(struct store *s, const char *key, size_t nkey, uint64_t hash,
                  struct store_mdebug *out);

/* Take one more reference to an item someone already holds (a walk or
 * drain callback that keeps the item past its return). Release it with
 * store_release. */
void store_item_ref(struct store_item *it);

/* ---- Ranges: the primitives of the handoff ------------------------------
 *
 * The handoff copies arcs of the ring between nodes. An arc set is given
 * as a predicate on the item's hash (its ring position, kept in the item,
 * so nothing is rehashed). Predicates are called with a stripe lock held:
 * they must be fast, must not block and must not call the store.
 *
 * The source of a copy does, in this order: store_track_start (every later
 * change to a key in the range is recorded), store_walk until it returns 0
 * (each live item once, as a post-image), store_track_drain until
 * store_track_pending is 0 with writes to the range fenced, then
 * store_track_stop. Each record the callbacks see is sent to the
 * destination in callback order on one FIFO stream; the destination applies
 * them with store_import / store_import_delete. Why it converges: a key not
 * changed since tracking started is sent by the walk with its current
 * state; a changed one is re-sent later by the drain with its state at
 * drain time (a post-image or a tombstone), after any older record of it.
 * store_walk and store_track_drain take one store-wide copy lock for their
 * whole call, callbacks included, so the callback order is the order in
 * which states were read; callbacks must not call back into walk, drain or
 * track_start/stop.
 */

typedef bool (*store_hash_pred)(uint64_t hash, void *arg);

/*
 * A prefix map narrows a walk, a count or a purge before the predicate:
 * 2^STORE_PREFIX_BITS bits, bit p (word p / 64, bit p % 64) set when a
 * hash whose top STORE_PREFIX_BITS bits are p may satisfy the predicate.
 * It must cover every hash the predicate accepts (arcset_prefixes builds
 * one for ranges of the ring); NULL covers all. The compact engine keeps
 * those bits in its index and passes over an item outside the map without
 * reading it, so a walk of a quarter of the ring reads a quarter of the
 * records. Both engines select only items inside the map.
 */
#define STORE_PREFIX_BITS  16
#define STORE_PREFIX_WORDS ((1u << STORE_PREFIX_BITS) / 64)

/* Whether the prefix map pm (NULL: all) covers hash. */
static inline bool
store_prefix_has(const uint64_t *pm, uint64_t hash)
{
    uint32_t p = (uint32_t)(hash >> (64 - STORE_PREFIX_BITS));

    return pm == NULL || (pm[p / 64] >> (p % 64) & 1) != 0;
}

/* Walk callback: a live item whose hash satisfies the predicate. The item
 * is borrowed: the store releases it after the callback returns (take
 * store_item_ref to keep it). Called with no stripe lock held. */
typedef void (*store_walk_fn)(struct store_item *it, void *arg);

/*
 * Drain callback: a key that changed. it is its current state: a borrowed
 * live item (the post-image, released by the store after the callback) or
 * NULL (a tombstone: the key is gone, deleted, expired, evicted, flushed or
 * purged). key is valid during the callback only. No stripe lock held.
 */
typedef void (*store_dirty_fn)(const char *key, size_t nkey, uint64_t hash, struct store_item *it,
                               void *arg);

/*
 * Position of an incremental walk or purge. Zero it (or store_cursor_init)
 * before the first call; it holds no memory and no reference. Within a
 * stripe it is a reverse-binary bucket cursor (the scheme of Redis's
 * dictScan): stripe tables only grow, and a doubling splits bucket b into
 * b and b + n, which the reversed increment visits next, so an item
 * present during the whole walk is visited even across resizes. An item
 * can be visited twice only if the walk restarts; a whole bucket is always
 * read under one lock hold.
 */
struct store_cursor {
    uint32_t        stripe;   /* next stripe, STORE_STRIPES when done */
    uint32_t        bucket;   /* reverse-binary cursor in that stripe */
    const uint64_t *prefixes; /* the walk's or purge's prefix map (NULL: none) */
};

static inline void
store_cursor_init(struct store_cursor *cur)
{
    cur->stripe = 0;
    cur->bucket = 0;
    cur->prefixes = NULL;
}

/*
 * Visit live (unexpired, unflushed) items whose hash satisfies pred (NULL:
 * all), calling fn(it, fn_arg) for each outside every stripe lock. Incremental:
 * one call reads at most about max_items items (whole buckets: it stops at
 * the bucket that reaches max_items; a single bucket longer than that is
 * still read whole) and a bounded number of buckets, one stripe lock at a
 * time, taking a reference to each item under the lock and calling fn after
 * unlocking. On the compact engine, whose items are copies, a call also
 * stops after the stripe that brings the keys and values it handed out to
 * 1 MiB (a caller that holds them holds that much). cur->prefixes, when
 * set, narrows the walk to its prefix map. Returns 1 while there is more,
 * 0 when the walk is complete. Every item present and unchanged from the
 * first call to the last is visited at least once; items added, changed or
 * removed meanwhile may or may not be (dirty tracking covers them). Takes
 * the copy lock.
 */
int store_walk(struct store *s, struct store_cursor *cur, store_hash_pred pred, void *arg,
               store_walk_fn fn, void *fn_arg, size_t max_items);

/* Count the live items whose hash satisfies pred (NULL: all) and their
 * charged bytes (as the bytes stat: store_item_size); prefixes: the
 * predicate's prefix map or NULL. Takes each stripe lock in turn; a
 * consistent total only on a quiet store. */
void store_count(struct store *s, store_hash_pred pred, void *arg, const uint64_t *prefixes,
                 uint64_t *items, uint64_t *bytes);

/*
 * store_count in slices, for a caller that must not hold its thread for a
 * whole count: counts whole stripes from *stripe on (start at 0), adding
 * to *items and *bytes, and stops after the stripe that brings the items
 * read (matching or not) to max_items. Returns 1 while stripes remain
 * (call again with the same *stripe), 0 when the count is complete. Items
 * added or removed between calls may or may not be counted.
 */
int store_count_step(struct store *s, uint32_t *stripe, store_hash_pred pred, void *arg,
                     const uint64_t *prefixes, size_t max_items, uint64_t *items, uint64_t *bytes);

/*
 * Start dirty tracking: from the return of this call on, every change to a
 * key whose hash satisfies pred records the key (once, however often it
 * changes, until drained): set/add/replace/cas/append/prepend, incr/decr,
 * touch/gat, delete, import, purge, and removals by eviction, expiry
 * (when the store reclaims the item) and flush_all (a flush during tracking
 * reclaims every flushed item at once so each one is recorded). pred and
 * arg must stay valid until store_track_stop. One session at a time:
 * STORE_BUSY for a second, STORE_NO_MEMORY, else 0. The dirty set is
 * memory outside mem_limit (about 48 bytes + key per distinct key); when a
 * key cannot be recorded for lack of memory the session is marked lost
 * (store_track_lost) and the copy must be restarted.
 */
int store_track_start(struct store *s, store_hash_pred pred, void *arg);

/*
 * Pop up to max recorded keys (FIFO within a stripe) and call fn for each
 * with the key's current state, read under its stripe lock at pop time; a
 * change after the pop records the key again. Returns the number of keys
 * delivered (0 when the set is empty or no session is active); on the
 * compact engine a call stops once about 1 MiB of values was delivered
 * (as store_walk). Takes the copy lock.
 */
size_t store_track_drain(struct store *s, store_dirty_fn fn, void *arg, size_t max);

/* Keys recorded and not drained yet (0 without a session). */
size_t store_track_pending(struct store *s);

/* True when the session failed to record a key (ENOMEM). */
bool store_track_lost(struct store *s);

/* End the session and drop the recorded keys. No-op without a session. */
void store_track_stop(struct store *s);

/*
 * Destination side: store a post-image as is, with the source's cas (cas 0
 * gets a new local one) and exptime = now + ttl_remaining (0 = never;
 * ttl_remaining < 0, an already expired post-image, acts as a tombstone:
 * the key is deleted). Replaces whatever the key holds. Returns
 * STORE_STORED, STORE_DELETED / STORE_NOT_FOUND for an expired post-image,
 * or STORE_TOO_LARGE / STORE_NO_MEMORY.
 *
 * CAS: the store's counter (a hybrid logical clock, see store_cas_mint) is
 * raised above every imported cas before the item is linked. So a later
 * local CAS is greater than every imported one and never equals one.
 *
 * Memory: an import may evict like any store; every live item evicted to
 * make room for an import is counted in the import_evictions stat, which
 * the handoff must treat as a failed (lossy) transfer.
 */
int store_import(struct store *s, const char *key, size_t nkey, uint64_t hash, uint32_t flags,
                 int64_t ttl_remaining, uint64_t cas, const char *value, size_t nbytes);

/*
 * The two halves of store_import, for values that arrive in chunks:
 * store_import_alloc is store_alloc with a remaining TTL (< 0 gives an
 * already expired item) that counts its evictions in import_evictions; the
 * caller fills store_item_value_mut(it), then store_put_import links it
 * with that cas exactly as store_import does (an expired item deletes the
 * key instead of being linked; one with a cas below the flush floor is
 * dropped: STORE_NOT_STORED). The caller keeps its reference and
 * releases it.
 */
struct store_item *store_import_alloc(struct store *s, const char *key, size_t nkey, uint64_t hash,
                                      uint32_t flags, int64_t ttl_remaining, size_t nbytes,
                                      int *err);
int                store_put_import(struct store *s, struct store_item *it, uint64_t cas);
/*
 * A replica's post-image in one lookup under one stripe lock: link it as
 * store_put_import does unless the key holds an item with a higher CAS
 * (STORE_EXISTS) or, when the key is absent, covered(it->hash, cas, now,
 * arg) says a removal at a CAS >= cas stands (STORE_NOT_STORED). covered
 * runs under the stripe lock: it must be quick, take only leaf locks and
 * not call the store (as a drop hook). An image of the CAS the key holds
 * keeps the held item's win token (STORE_MF_WON). The CAS counter passes
 * cas even when the image is dropped. The caller keeps its reference.
 */
typedef bool (*store_cover_fn)(uint64_t hash, uint64_t cas, int64_t now, void *arg);
int store_put_import_newer(struct store *s, struct store_item *it, uint64_t cas,
                           store_cover_fn covered, void *arg);

/*
 * A replica's tombstone in one lookup under one stripe lock: unless the
 * key holds an item with a higher CAS (STORE_EXISTS), delete it
 * (STORE_DELETED, or STORE_NOT_FOUND when absent) and call removed(hash,
 * cas, now, arg) under that lock (as a drop hook), so no image of the key
 * can be linked between the delete and what removed records. The CAS
 * counter passes cas.
 */
int store_delete_older(struct store *s, const char *key, size_t nkey, uint64_t hash, uint64_t cas,
                       store_drop_fn removed, void *arg);

/* store_import_alloc with the post-image's meta state (STORE_MF_REPLICATED
 * bits; ecas is the client CAS when STORE_MF_ECAS is among them). */
struct store_item *store_import_alloc_meta(struct store *s, const char *key, size_t nkey,
                                           uint64_t hash, uint32_t flags, int64_t ttl_remaining,
                                           size_t nbytes, uint8_t mflags, uint64_t ecas, int *err);

/* import_evictions of store_get_stats alone: one atomic load, where
 * store_get_stats takes every stripe lock (a handoff batch reads it before
 * and after its records). */
uint64_t store_import_evictions(struct store *s);

/* A tombstone from the source: delete the key. STORE_DELETED or
 * STORE_NOT_FOUND. */
int store_import_delete(struct store *s, const char *key, size_t nkey, uint64_t hash);

/*
 * Remove every item (live or dead) whose hash satisfies pred (NULL: all), at most
 * max_items per call and a bounded number of buckets, one stripe lock at a
 * time; cur as for store_walk. Counts them in the purged stat. Returns 1
 * while there is more, 0 when done. Items stored into the range during the
 * purge may survive: purge a range nobody writes to.
 */
int store_purge(struct store *s, store_hash_pred pred, void *arg, size_t max_items,
                struct store_cursor *cur);

/* An item's remaining lifetime for export: 0 = never expires, > 0 seconds
 * left, -1 = already expired or flushed (do not send it as a post-image). */
int64_t store_item_ttl_remaining(const struct store *s, const struct store_item *it);

#endif /* SERVER_STORE_H */
