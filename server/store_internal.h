/*
 * store_internal: the layout of the item store and the helpers shared by
 * server/store.c (items, table, LRU, eviction, keyed operations),
 * store_meta.c (the meta protocol's operations), store_range.c (sweep,
 * walk, count, purge) and store_track.c (dirty tracking, import). Nothing
 * outside server/store*.c includes this file;
 * the public API is server/store.h. do_ functions: the caller holds the
 * stripe lock.
 */
#ifndef SERVER_STORE_INTERNAL_H
#define SERVER_STORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "server/store.h"

/* The functions below that are not static: hidden, so that a call between
 * the files is a direct call and a call inside one may still be
 * inlined (-fPIC would otherwise treat them as interposable). */
#define STORE_INTERNAL __attribute__((visibility("hidden")))

/*
 * Why per-stripe sub-tables rather than one table with incremental resize:
 * every operation already holds the stripe lock of its key, so a sub-table
 * owned by that lock can grow (double and rehash) with no coordination with
 * other stripes and no migration state visible to readers. A stripe holds
 * 1/1024 of the items, so the pause of one rehash is small (about 1000 items
 * at 1M items, 1 ms at 100M) and touches only that stripe.
 */
#define STRIPE_BITS  10
#define STRIPES      (1u << STRIPE_BITS)
#define STRIPE_MASK  (STRIPES - 1)
#define INIT_BUCKETS 8u         /* per stripe; 8192 in all */
#define MAX_BUCKETS  (1u << 30) /* per stripe */

/* Eviction is S3-FIFO per stripe (store_evict.c): a new key enters its
 * stripe's small FIFO (about a tenth of the stripe's bytes), a key read
 * while there moves to the main FIFO when it reaches the small FIFO's tail,
 * and one never read leaves (its hash goes to the ghost table, so that if
 * it comes back soon it enters the main FIFO directly). The main FIFO
 * gives an item with reads a lap more per read (CLOCK, two bits of
 * frequency). A read only counts in the item's frequency bits, under the
 * stripe lock the read already holds: no list moves on the read path.
 * The item keeps the time it was stored or last read (atime, which mg's l
 * reports, as memcached's it->time), updated on its first fetch and then
 * at most once a minute (memcached: once per 60 s); eviction compares the
 * tails' atimes across stripes. */
#define BUMP_SECONDS 60

/* The allocator's settings (store.c, malloc_setup): values whose item
 * reaches the threshold get their own mapping; at most this many malloc
 * arenas. */
#define STORE_MMAP_THRESHOLD (128 * 1024)
#define STORE_MALLOC_ARENAS  2

/* The sweeper returns free heap pages to the system (malloc_trim) when
 * evictions have freed this share of the limit since it last did, at most
 * once per TRIM_SECONDS. */
#define TRIM_EVICTED_SHARE 8 /* a limit/8 */
#define TRIM_SECONDS       2

/* it->gen: flags (a flush is a CAS floor, struct store's floor). */
#define IF_FREQ    0x0003u /* reads counted, up to 3 */
#define IF_MAIN    0x0004u /* in the main FIFO (else the small one) */
#define IF_LINKED  0x4000u
#define IF_FETCHED 0x8000u
/* A compact store's copy from a thread's cache (store_seg.c): its size
 * class in IF_CLASS, where it goes back when released. */
#define IF_POOLED      0x2000u
#define IF_CLASS       0x0700u
#define IF_CLASS_SHIFT 8

#define TAIL_EMPTY UINT32_MAX /* stripe tail_atime: an empty queue */

/* The two FIFOs of a stripe. */
enum queue {
    Q_SMALL = 0,
    Q_MAIN = 1
};

/* A CAS is a hybrid logical clock: milliseconds since the CAS clock's
 * epoch (plus the store's clock shift) above STORE_CAS_LOGICAL_BITS, a
 * counter below (4M writes a millisecond before it borrows from the next
 * one). See store_cas_clock and cas_mint. */

enum dead {
    LIVE = 0,
    DEAD_EXPIRED,
    DEAD_FLUSHED
};

/*
 * A key recorded by dirty tracking: a copy of the key (so a delete or an
 * eviction can still be sent as a tombstone), in a small per-stripe hash
 * set that dedups it and a FIFO queue that drains it. Both belong to the
 * stripe and its lock, so recording costs no other lock.
 */
struct dirty_key {
    struct dirty_key *h_next; /* set chain */
    struct dirty_key *q_next; /* drain queue */
    uint64_t          hash;
    uint8_t           nkey;
    char              key[];
};

struct stripe {
    pthread_mutex_t     lock;
    struct store_item **buckets;
    uint32_t            mask;                  /* buckets - 1 */
    uint32_t            count;                 /* linked items */
    struct store_item  *q_head[2], *q_tail[2]; /* enum queue; head = newest */
    uint32_t            tail_atime[2]; /* atomic: atime of each queue's tail, or TAIL_EMPTY */
    uint64_t            bytes;         /* atomic stores: charged bytes of linked items */
    uint64_t            small_bytes;   /* atomic stores: those in the small FIFO */
    uint64_t total_items, evictions, reclaimed, expired_unfetched, get_expired, get_flushed, purged;
    /* Dirty tracking; all empty while tracking is false, which is the only
     * thing a mutation reads when no session is active. */
    bool               tracking;
    uint32_t           d_mask, d_count;
    struct dirty_key **d_buckets;
    struct dirty_key  *d_head, *d_tail;
} __attribute__((aligned(64)));

struct store {
    struct stripe stripes[STRIPES];
    size_t        mem_limit;
    size_t        item_size_max;

    /* Written by every store and free: its own cache line. */
    uint64_t mem_used __attribute__((aligned(64)));
    /* Written by every mutation. */
    uint64_t cas_next __attribute__((aligned(64)));
    /* Read-mostly. */
    uint64_t      floor __attribute__((aligned(64))); /* items with a CAS below are flushed */
    int64_t       flush_when;                         /* pending delayed flush, 0 = none */
    uint64_t      flush_when_floor;                   /* its floor */
    int64_t       clock_shift;
    uint64_t      nbuckets_total;
    uint32_t     *ghost; /* atomic entries: hashes of keys evicted from a small FIFO */
    uint32_t      ghost_mask;
    bool          ghost_used; /* atomic: a hash was put in the ghost table */
    struct seg   *seg;        /* the compact engine (store_seg.c), or NULL: the chained table */
    uint32_t      seg_size;   /* its segments' size */
    uint64_t      evictions_base, reclaimed_base; /* atomic: its counters at "stats reset" */
    store_drop_fn drop_fn;                        /* atomic; see store_set_drop_hook */
    void         *drop_arg;                       /* written before drop_fn */
    /* Written by evictions only. */
    uint32_t evict_cursor __attribute__((aligned(64)));
    uint64_t evicted_bytes; /* atomic: charged bytes removed to make room */
    uint64_t trimmed_at;    /* evicted_bytes at the sweeper's last trim */

    pthread_mutex_t flush_lock; /* serializes floor raises */
    pthread_mutex_t sweep_lock; /* guards the sweep cursor */
    uint32_t        sweep_stripe, sweep_bucket;

    /* The handoff: cold except while a transition runs. Lock order:
     * copy_lock, flush_lock, track_lock, a stripe lock. */
    pthread_mutex_t copy_lock;  /* walks and drains: callback order */
    pthread_mutex_t track_lock; /* session start/stop; track_on */
    bool            track_on;   /* written under track_lock */
    bool            track_lost; /* atomic */
    store_hash_pred track_pred; /* set before any stripe tracks */
    void           *track_arg;
    uint64_t        track_pending;              /* atomic: keys in the dirty sets */
    uint32_t        drain_stripe;               /* under copy_lock */
    uint64_t        imported, import_evictions; /* atomic */

    bool            sweeper_on;
    bool            sweeper_stop;
    pthread_t       sweeper;
    pthread_mutex_t sweeper_mu;
    pthread_cond_t  sweeper_cv;
};

/* ---- store.c ------------------------------------------------------------ */

/* Find the live item of a key; a dead one is unlinked on the way (and
 * counted as get_expired/get_flushed when is_get). Borrowed pointer, valid
 * while the lock is held. */
STORE_INTERNAL struct store_item *do_find(struct store *s, struct stripe *st, const char *key,
                                          size_t nkey, uint64_t hash, int64_t now, bool is_get);

/* Link an item (caller's reference stays the caller's; the table takes
 * its own). */
STORE_INTERNAL void do_link(struct store *s, struct stripe *st, struct store_item *it);

/* Unlink an item and drop the table's reference; frees it when that was
 * the last one. prevp is its chain link if known, else NULL. */
STORE_INTERNAL void do_unlink(struct store *s, struct stripe *st, struct store_item *it,
                              struct store_item **prevp);

/* Count an access in the item's frequency bits and mark it accessed at
 * most once a minute (atime): a read (fetch) also marks it fetched and
 * stamps it on its first fetch whatever the time (memcached's
 * do_item_update). Use do_bump or do_lru_update below. */
STORE_INTERNAL void do_lru_move(struct stripe *st, struct store_item *it, int64_t now, bool fetch);

/* Stamp (CAS, generation, atime) and link a new item in place of old (NULL
 * if none). */
STORE_INTERNAL void do_replace(struct store *s, struct stripe *st, struct store_item *old,
                               struct store_item *it, int64_t now);

/* The second half of a read-copy-update: link n in place of old if old is
 * still the live item of its key, then drop the caller's references to
 * both. Takes the stripe lock. See store.c. */
STORE_INTERNAL bool relink_if_live(struct store *s, struct stripe *st, struct store_item *old,
                                   struct store_item *n, uint16_t inherit, bool take_exptime,
                                   uint64_t *cas_out);

/* A stored value as a u64 for incr/decr: 1..20 decimal digits that fit,
 * optionally followed by spaces. */
STORE_INTERNAL bool store_parse_u64(const char *p, size_t n, uint64_t *out);

/* Write v in decimal to buf (20 bytes at least), no NUL; returns the
 * length. */
STORE_INTERNAL size_t store_format_u64(char *buf, uint64_t v);

/* A new flush generation: every item stored before is dead. Caller holds
 * flush_lock. */
STORE_INTERNAL void store_raise_floor(struct store *s, uint64_t f);

/* store_alloc, counting the live items it evicted in *evicted. */
STORE_INTERNAL struct store_item *store_alloc_counted(struct store *s, const char *key, size_t nkey,
                                                      uint64_t hash, uint32_t flags,
                                                      int64_t exptime, size_t nbytes, bool ecas,
                                                      int *err, uint64_t *evicted);

/* Rehash a chained table of n buckets into 2n; the item table and the
 * dirty sets both grow with it (see store.c). */
STORE_INTERNAL void **store_chains_double(void **buckets, uint32_t n, size_t link_off,
                                          size_t hash_off);

/* ---- store_evict.c ------------------------------------------------------ */

/* Put a linked item in its queue: the main FIFO when it carries IF_MAIN
 * (inherited from the item it replaces) or its hash is in the ghost table,
 * else the small FIFO. Caller holds the stripe lock. */
STORE_INTERNAL void do_queue_add(struct store *s, struct stripe *st, struct store_item *it);

/* Take an item out of its queue (do_unlink). Caller holds the stripe lock. */
STORE_INTERNAL void do_queue_del(struct stripe *st, struct store_item *it);

/* What store_evict_one did. */
enum evicted {
    EV_NONE = 0,
    EV_RECLAIMED,
    EV_EVICTED,
    EV_MOVED /* only moved items between the FIFOs: sample again */
};

/* Remove one item to make room: see store_evict.c. Caller holds no stripe
 * lock. */
STORE_INTERNAL enum evicted store_evict_one(struct store *s, int64_t now);

/* Allocate and free the ghost table (sized from mem_limit). */
STORE_INTERNAL int  store_ghost_init(struct store *s);
STORE_INTERNAL void store_ghost_free(struct store *s);

/* ---- store_range.c ------------------------------------------------------ */

/* The background sweeper thread (store_new starts it). */
STORE_INTERNAL void *store_sweeper_main(void *arg);

/* ---- store_track.c ------------------------------------------------------ */

/* Record a changed key of a tracking stripe (do_track calls it). */
STORE_INTERNAL void do_track_key(struct store *s, struct stripe *st, const char *key, size_t nkey,
                                 uint64_t hash) __attribute__((cold));

/* Detach and free every stripe's dirty set. With lock, each stripe is
 * detached under its lock; without (store_free), nobody else runs. */
STORE_INTERNAL void store_track_clear(struct store *s, bool lock);

/* ---- store_seg.c, store_seg_range.c: store.h on the compact engine ------
 * Each public function of the store that reads or writes items calls its
 * sg_ counterpart first when s->seg is set. */
struct seg_rec;
STORE_INTERNAL int sg_open(struct store *s, const struct store_config *cfg);
/* The store's result for an engine error (SEG_TOO_LARGE, SEG_NO_MEMORY). */
STORE_INTERNAL int sg_store_rc(int seg_rc);
/* Where the engine's drop hook counts evictions for the import this
 * thread is storing (NULL: none): store_import_evictions. */
STORE_INTERNAL extern __thread uint64_t *sg_import_evicted;
STORE_INTERNAL void sg_track(struct store *s, const char *key, size_t nkey, uint64_t hash);
STORE_INTERNAL struct store_item *sg_item_of(const struct seg_rec *r, uint64_t hash);
/* Give back a copy from sg_item_of (IF_POOLED) to this thread's cache. */
STORE_INTERNAL void sg_item_free(struct store_item *it);
STORE_INTERNAL void sg_set_mem_limit(struct store *s, size_t bytes);
STORE_INTERNAL void sg_get_stats(struct store *s, struct store_stats *out);
STORE_INTERNAL void sg_reset_stats(struct store *s);
STORE_INTERNAL int sg_put(struct store *s, struct store_item *it, enum store_op op, uint64_t cas_in,
                          const struct store_mset *o, uint64_t *cas_out, uint32_t *nbytes_out);
STORE_INTERNAL struct store_item *sg_get(struct store *s, const char *key, size_t nkey,
                                         uint64_t hash, bool fetch, bool touch, int64_t exptime);
STORE_INTERNAL int sg_delete_cas(struct store *s, const char *key, size_t nkey, uint64_t hash,
                                 uint64_t *cas);
STORE_INTERNAL int sg_touch(struct store *s, const char *key, size_t nkey, uint64_t hash,
                            int64_t exptime);
STORE_INTERNAL struct store_item *sg_mget(struct store *s, const char *key, size_t nkey,
                                          uint64_t hash, const struct store_mget *q,
                                          struct store_mget_res *r, int *err);
STORE_INTERNAL int  sg_mdel(struct store *s, const char *key, size_t nkey, uint64_t hash,
                            const struct store_mdel *o, bool *removed, uint64_t *tomb_cas);
STORE_INTERNAL int  sg_marith(struct store *s, const char *key, size_t nkey, uint64_t hash,
                              const struct store_marith *o, struct store_marith_res *res);
STORE_INTERNAL bool sg_mdebug(struct store *s, const char *key, size_t nkey, uint64_t hash,
                              struct store_mdebug *out);
STORE_INTERNAL int  sg_walk(struct store *s, struct store_cursor *cur, store_hash_pred pred,
                            void *arg, store_walk_fn fn, void *fn_arg, size_t max_items);
STORE_INTERNAL int sg_count_step(struct store *s, uint32_t *stripe, store_hash_pred pred, void *arg,
                                 const uint64_t *prefixes, size_t max_items, uint64_t *items,
                                 uint64_t *bytes);
STORE_INTERNAL int sg_purge(struct store *s, store_hash_pred pred, void *arg, size_t max_items,
                            struct store_cursor *cur);
STORE_INTERNAL void               sg_track_barrier(struct store *s, uint32_t stripe);
STORE_INTERNAL void               sg_track_flushed(struct store *s, uint64_t floor);
STORE_INTERNAL struct store_item *sg_peek(struct store *s, const char *key, size_t nkey,
                                          uint64_t hash);
STORE_INTERNAL int sg_put_import(struct store *s, struct store_item *it, uint64_t cas);
STORE_INTERNAL int sg_put_import_newer(struct store *s, struct store_item *it, uint64_t cas,
                                       store_cover_fn covered, void *arg);
STORE_INTERNAL int sg_delete_older(struct store *s, const char *key, size_t nkey, uint64_t hash,
                                   uint64_t cas, store_drop_fn removed, void *arg);

/* ---- small helpers ------------------------------------------------------ */

static inline struct stripe *
stripe_of(struct store *s, uint64_t hash)
{
    return &s->stripes[hash & STRIPE_MASK];
}

static inline uint32_t
bucket_of(const struct stripe *st, uint64_t hash)
{
    return (uint32_t)(hash >> STRIPE_BITS) & st->mask;
}

static inline size_t
item_charge(const struct store_item *it)
{
    return store_item_size(it->nkey,
                           it->nbytes + (it->mflags & STORE_MF_ECAS ? sizeof(uint64_t) : 0));
}

static inline void
item_ref(struct store_item *it)
{
    __atomic_fetch_add(&it->refcount, 1, __ATOMIC_RELAXED);
}

/* The clock part of the next CAS: store_cas_clock(now). A coarse
 * clock read (the vDSO, no system call): a mint needs only to pass what
 * this node minted before a restart and what other nodes minted a while
 * ago, not sub-millisecond order. */
static inline uint64_t
cas_wall(const struct store *s)
{
    struct timespec ts;
    int64_t         ms;

    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    ms = ((int64_t)ts.tv_sec + __atomic_load_n(&s->clock_shift, __ATOMIC_RELAXED)) * 1000 +
         ts.tv_nsec / 1000000;
    return store_cas_clock(ms);
}

/*
 * A new CAS, never 0: max(previous + 1, cas_wall). So CAS order follows
 * time across restarts and nodes (up to clock skew), and a node never
 * mints below what it imported or applied (store_cas_raise). The usual
 * path is one fetch_add; only a counter behind the clock moves it up.
 */
static inline uint64_t
cas_mint(struct store *s)
{
    uint64_t wall = cas_wall(s);
    uint64_t n = __atomic_fetch_add(&s->cas_next, 1, __ATOMIC_RELAXED);

    while (n < wall) {
        uint64_t cur = n + 1;

        /* Jump to the clock unless another mint moved the counter since:
         * then take a fresh number and look again. */
        if (__atomic_compare_exchange_n(&s->cas_next, &cur, wall + 1, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
            return wall;
        }
        n = __atomic_fetch_add(&s->cas_next, 1, __ATOMIC_RELAXED);
    }
    return n;
}

/* Clamp an absolute time to the 32-bit field: 0 stays "never", anything
 * before 1970 becomes 1 (long expired). */
static inline uint32_t
time32(int64_t t)
{
    if (t == 0) {
        return 0;
    }
    if (t < 0) {
        return 1;
    }
    if (t > (int64_t)UINT32_MAX - 1) {
        return UINT32_MAX - 1;
    }
    return (uint32_t)t;
}

static inline enum dead
item_dead(const struct store_item *it, int64_t now, uint64_t floor)
{
    if (it->cas < floor) {
        return DEAD_FLUSHED;
    }
    if (it->exptime != 0 && (int64_t)it->exptime <= now) {
        return DEAD_EXPIRED;
    }
    return LIVE;
}

/* Tell the drop hook (store_set_drop_hook) that the store removed it by
 * itself. Caller holds its stripe lock. */
static inline void
do_report_drop(struct store *s, const struct store_item *it)
{
    store_drop_fn fn = __atomic_load_n(&s->drop_fn, __ATOMIC_ACQUIRE);

    if (fn != NULL) {
        fn(it->hash, it->cas, store_now(s), __atomic_load_n(&s->drop_arg, __ATOMIC_RELAXED));
    }
}

/* Unlink a dead item, counting it as reclaimed. An expired one is reported
 * to the drop hook; a flushed one is not (a flush removes everything at
 * once and travels to every node itself). */
static inline void
do_reclaim(struct store *s, struct stripe *st, struct store_item *it, enum dead why,
           struct store_item **prevp)
{
    st->reclaimed++;
    if (why == DEAD_EXPIRED) {
        if (!(it->gen & IF_FETCHED)) {
            st->expired_unfetched++;
        }
        do_report_drop(s, it);
    }
    do_unlink(s, st, it, prevp);
}

/* The flush floor: an item with a CAS below it is dead. */
static inline uint64_t
do_floor(struct store *s)
{
    return __atomic_load_n(&s->floor, __ATOMIC_ACQUIRE);
}

/*
 * Turn a delayed flush whose moment has come into a floor raise. Every
 * operation calls this before taking a stripe lock and before minting a
 * CAS, so an item stored at or after the moment gets a CAS above the new
 * floor and survives, and one stored before it does not.
 */
static inline int64_t
clock_begin(struct store *s)
{
    int64_t now = store_now(s);
    int64_t w = __atomic_load_n(&s->flush_when, __ATOMIC_ACQUIRE);

    if (w != 0 && now >= w) {
        pthread_mutex_lock(&s->flush_lock);
        w = __atomic_load_n(&s->flush_when, __ATOMIC_RELAXED);
        if (w != 0 && now >= w) {
            __atomic_store_n(&s->flush_when, 0, __ATOMIC_RELAXED);
            store_raise_floor(s, s->flush_when_floor);
        }
        pthread_mutex_unlock(&s->flush_lock);
    }
    return now;
}

/*
 * The prologue of every keyed operation (memcached's item_get around
 * do_item_get): settle a delayed flush that is due, lock the key's stripe
 * st and find the key's live item (see do_find; borrowed). Returns with
 * st->lock held: the caller unlocks. *now gets the operation's time.
 */
static inline struct store_item *
stripe_lock_find(struct store *s, struct stripe *st, const char *key, size_t nkey, uint64_t hash,
                 bool is_get, int64_t *now)
{
    int64_t t = clock_begin(s);

    *now = t;
    pthread_mutex_lock(&st->lock);
    return do_find(s, st, key, nkey, hash, t, is_get);
}

/* The hook every mutation calls with the item it changes: a plain load of
 * a field of the stripe it already holds locked when no session runs. */
static inline void
do_track(struct store *s, struct stripe *st, const struct store_item *it)
{
    if (__builtin_expect(st->tracking, 0)) {
        do_track_key(s, st, it->data, it->nkey, it->hash);
    }
}

/* A read: see do_lru_move. */
static inline void
do_bump(struct stripe *st, struct store_item *it, int64_t now)
{
    do_lru_move(st, it, now, true);
}

/* Not a read: see do_lru_move. */
static inline void
do_lru_update(struct stripe *st, struct store_item *it, int64_t now)
{
    do_lru_move(st, it, now, false);
}

#endif /* SERVER_STORE_INTERNAL_H */
