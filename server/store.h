/*
 * store: the node's item store. A hash table keyed by XXH3_64bits of the key
 * (the same value the ring uses, kept in the item), striped locks, LRU
 * eviction under a byte limit, lazy expiry plus a sweep, CAS, flush_all.
 * Every function here is thread-safe: it takes the stripe lock of the key.
 * Items are reference counted and immutable once stored, so a reply can be
 * written from one while other threads replace or delete the key.
 */
#ifndef SERVER_STORE_H
#define SERVER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STORE_KEY_MAX 250

/* Results of store operations (>= 0) and errors (< 0). */
enum store_result {
    STORE_STORED = 0,
    STORE_NOT_STORED,       /* add on a live key; replace/append/prepend on a missing one */
    STORE_EXISTS,           /* cas mismatch */
    STORE_NOT_FOUND,        /* cas/delete/touch/incr on a missing key */
    STORE_DELETED,
    STORE_TOUCHED,
    STORE_NON_NUMERIC = -1, /* incr/decr on a value that is not a decimal u64 */
    STORE_TOO_LARGE = -2,   /* item over item_size_max. A set that fails with it
                             * must also drop the old value under that key
                             * (memcached does): the protocol layer calls
                             * store_delete. append/prepend/add/replace/cas
                             * leave the old item as it was. */
    STORE_NO_MEMORY = -3,   /* nothing left to evict */
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
    size_t   mem_limit;      /* bytes of items (header+key+value) before eviction; -m */
    size_t   item_size_max;  /* largest item, header+key+value; -I (default 1 MiB) */
    uint16_t node_seed;      /* high 16 bits of every CAS this node mints */
    bool     sweeper;        /* start a background expiry sweep thread */
};

/*
 * An item: one allocation holding this header (60 bytes: the key starts at
 * offsetof(data), inside what would be tail padding), the key, the value
 * and "\r\n". The public fields are readable by anyone holding a
 * reference; nobody writes them after store_put() accepted the item, except
 * exptime, which touch/gat update in place (an aligned 32-bit store: a
 * reader sees the old or the new value). Times are unsigned 32-bit unix
 * seconds (good until 2106). There is no per-item store time: flush_all
 * uses a flush generation (see store_flush).
 */
struct store_item {
    uint64_t hash;       /* XXH3_64bits(key): table bucket, lock stripe, ring position */
    uint64_t cas;        /* unique, non-zero once stored */
    /* private to the store */
    struct store_item *h_next;           /* hash chain */
    struct store_item *lru_prev, *lru_next;
    /* public again */
    uint32_t exptime;    /* absolute unix time, 0 = never */
    uint32_t flags;      /* opaque client flags */
    uint32_t nbytes;     /* value length, without the trailing "\r\n" */
    /* private to the store */
    uint32_t refcount;   /* atomic: one for the table while linked, one per holder */
    uint8_t  nkey;       /* public: key length, 1..250 */
    uint8_t  bump;       /* minute (unix time / 60, mod 256) of the last LRU bump */
    uint16_t gen;        /* flush generation when stored (14 bits), linked, fetched */
    char     data[];     /* key bytes, then value bytes, then "\r\n" */
};

static inline const char *
store_item_key(const struct store_item *it)
{
    return it->data;
}

/* The value followed by "\r\n": nbytes + 2 readable bytes. */
static inline const char *
store_item_value(const struct store_item *it)
{
    return it->data + it->nkey;
}

struct store_stats {
    uint64_t curr_items, total_items, bytes, evictions, expired_unfetched,
             reclaimed, get_expired, get_flushed;
    uint64_t limit_maxbytes;
    uint64_t mem_used;   /* bytes charged now: linked items plus unlinked
                          * ones still referenced or not yet stored */
    uint64_t hash_buckets;
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
void store_clock_shift(struct store *s, int64_t seconds);

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
struct store_item *store_alloc(struct store *s, const char *key, size_t nkey,
                               uint64_t hash, uint32_t flags, int64_t exptime,
                               size_t nbytes, int *err);

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
int store_put(struct store *s, struct store_item *it, enum store_op op,
              uint64_t cas_in, uint64_t *cas_out);

/*
 * Look a key up. Returns a new reference (release with store_release) or
 * NULL on a miss (expired and flushed items are misses, and are unlinked).
 * With touch, sets the exptime (already converted by store_exptime) first.
 */
struct store_item *store_get(struct store *s, const char *key, size_t nkey,
                             uint64_t hash);
struct store_item *store_get_touch(struct store *s, const char *key, size_t nkey,
                                   uint64_t hash, int64_t exptime);

/* Drop a reference; frees the item when it was unlinked and this was the
 * last reference. Any thread. */
void store_release(struct store *s, struct store_item *it);

/* STORE_DELETED or STORE_NOT_FOUND. */
int store_delete(struct store *s, const char *key, size_t nkey, uint64_t hash);

/* STORE_TOUCHED or STORE_NOT_FOUND; exptime already converted. */
int store_touch(struct store *s, const char *key, size_t nkey, uint64_t hash,
                int64_t exptime);

/*
 * incr (incr = true) or decr by delta. incr wraps modulo 2^64, decr stops
 * at 0. Keeps flags and exptime, mints a new CAS. Returns STORE_STORED with
 * the new value in *value, STORE_NOT_FOUND, STORE_NON_NUMERIC or
 * STORE_NO_MEMORY.
 */
int store_arith(struct store *s, const char *key, size_t nkey, uint64_t hash,
                bool incr, uint64_t delta, uint64_t *value, uint64_t *cas_out);

/*
 * flush_all: every item stored before `when` (absolute unix time, from
 * store_exptime; <= now means now) is invalid from `when` on; items stored
 * from `when` on survive. A later call replaces a pending one. Implemented
 * as a flush generation stamped into each item: an immediate flush starts
 * a new generation at once (so an item stored in the same second after the
 * flush survives), a delayed one when the first operation at or after
 * `when` sees it due. Memory is reclaimed lazily and by the sweep.
 */
void store_flush(struct store *s, int64_t when);

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
 * data) = 60 bytes. The bucket arrays are not charged. */
size_t store_item_size(size_t nkey, size_t nbytes);

#endif /* SERVER_STORE_H */
