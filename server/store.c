/*
 * store: the node's item store. 1024 lock stripes, each a small hash table of
 * its own with its own LRU list, resized under its own lock; the hash the
 * caller passes picks the stripe (low bits) and the bucket (bits above).
 * Memory is one atomic byte counter against the limit; eviction samples the
 * LRU tails of several stripes and takes the oldest. See store.h for the API.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/store.h"

/*
 * Why per-stripe sub-tables rather than one table with incremental resize:
 * every operation already holds the stripe lock of its key, so a sub-table
 * owned by that lock can grow (double and rehash) with no coordination with
 * other stripes and no migration state visible to readers. A stripe holds
 * 1/1024 of the items, so the pause of one rehash is small (about 1000 items
 * at 1M items, 1 ms at 100M) and touches only that stripe.
 */
#define STRIPE_BITS      10
#define STRIPES          (1u << STRIPE_BITS)
#define STRIPE_MASK      (STRIPES - 1)
#define INIT_BUCKETS     8u             /* per stripe; 8192 in all */
#define MAX_BUCKETS      (1u << 30)     /* per stripe */

/* A get moves an item to its LRU head on its first fetch, then at most
 * once per minute (memcached: once per 60 s), so hot keys do not write to
 * their LRU neighbours on every read. The item keeps the minute of its last
 * bump in 8 bits; eviction compares those minutes (modulo 256, 4.2 hours)
 * across stripes, while within a stripe the list order is exact. */
#define BUMP_SECONDS     60

/* Eviction compares the LRU tails of this many non-empty stripes and
 * evicts the oldest: an approximate global LRU without a global list. */
#define EVICT_SAMPLE     16u

/* Bounded lock hold of the sweep, in buckets. */
#define SWEEP_SLICE      256u
#define SWEEP_TICK_MS    200
#define SWEEP_MIN        1024u
#define SWEEP_MAX        65536u

/* it->gen: the flush generation in the low 14 bits, then two flags. */
#define GEN_MASK         0x3fffu
#define IF_LINKED        0x4000u
#define IF_FETCHED       0x8000u

#define TAIL_EMPTY       UINT32_MAX
#define CAS_LOW_MASK     ((UINT64_C(1) << 48) - 1)
/* The flush generation is 14 bits; a full walk every 2^13 flushes removes
 * stale items before their generation number can come round again. */
#define GEN_WALK_MASK    0x1fffu

/* A walk or purge call reads at most this many buckets beyond
 * WALK_BUCKETS_PER_ITEM per requested item, so a range that matches little
 * still costs a bounded time per call. */
#define WALK_BUCKETS     4096u
#define WALK_BUCKETS_PER_ITEM 4u
/* Keys a drain pops under one stripe lock hold. */
#define DRAIN_BATCH      64u
#define DIRTY_INIT       4u             /* dirty-set buckets per stripe */

enum dead { LIVE = 0, DEAD_EXPIRED, DEAD_FLUSHED };

/* What evict_one did. */
enum evicted { EV_NONE = 0, EV_RECLAIMED, EV_EVICTED };

_Static_assert(offsetof(struct store_item, data) == 60, "item header is 60 bytes");
_Static_assert(STRIPES == STORE_STRIPES, "store.h names the stripe count");

/*
 * A key recorded by dirty tracking: a copy of the key (so a delete or an
 * eviction can still be sent as a tombstone), in a small per-stripe hash
 * set that dedups it and a FIFO queue that drains it. Both belong to the
 * stripe and its lock, so recording costs no other lock.
 */
struct dirty_key {
    struct dirty_key *h_next;        /* set chain */
    struct dirty_key *q_next;        /* drain queue */
    uint64_t hash;
    uint8_t nkey;
    char key[];
};

struct stripe {
    pthread_mutex_t lock;
    struct store_item **buckets;
    uint32_t mask;                    /* buckets - 1 */
    uint32_t count;                   /* linked items */
    struct store_item *lru_head, *lru_tail;
    uint32_t tail_bump;               /* atomic: lru_tail->bump or TAIL_EMPTY */
    uint64_t bytes;                   /* charged bytes of linked items */
    uint64_t total_items, evictions, reclaimed, expired_unfetched,
             get_expired, get_flushed, purged;
    /* Dirty tracking; all empty while tracking is false, which is the only
     * thing a mutation reads when no session is active. */
    bool tracking;
    uint32_t d_mask, d_count;
    struct dirty_key **d_buckets;
    struct dirty_key *d_head, *d_tail;
} __attribute__((aligned(64)));

struct store {
    struct stripe stripes[STRIPES];
    size_t mem_limit;
    size_t item_size_max;
    uint64_t seed_bits;               /* node_seed << 48 */

    /* Written by every store and free: its own cache line. */
    uint64_t mem_used __attribute__((aligned(64)));
    /* Written by every mutation. */
    uint64_t cas_next __attribute__((aligned(64)));
    /* Read-mostly. */
    uint32_t gen __attribute__((aligned(64)));  /* current flush generation */
    int64_t flush_when;               /* pending delayed flush, 0 = none */
    int64_t clock_shift;
    uint64_t nbuckets_total;
    /* Written by evictions only. */
    uint32_t evict_cursor __attribute__((aligned(64)));

    pthread_mutex_t flush_lock;       /* serializes generation bumps */
    pthread_mutex_t sweep_lock;       /* guards the sweep cursor */
    uint32_t sweep_stripe, sweep_bucket;

    /* The handoff: cold except while a transition runs. Lock order:
     * copy_lock, flush_lock, track_lock, a stripe lock. */
    pthread_mutex_t copy_lock;        /* walks and drains: callback order */
    pthread_mutex_t track_lock;       /* session start/stop; track_on */
    bool track_on;                    /* written under track_lock */
    bool track_lost;                  /* atomic */
    store_hash_pred track_pred;       /* set before any stripe tracks */
    void *track_arg;
    uint64_t track_pending;           /* atomic: keys in the dirty sets */
    uint32_t drain_stripe;            /* under copy_lock */
    uint64_t imported, import_evictions;   /* atomic */

    bool sweeper_on;
    bool sweeper_stop;
    pthread_t sweeper;
    pthread_mutex_t sweeper_mu;
    pthread_cond_t sweeper_cv;
};

/* ---- small helpers ---------------------------------------------------- */

static inline uint32_t
load32(const uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static inline void
store32(uint32_t *p, uint32_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}

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

/* Clamp an absolute time to the 32-bit field: 0 stays "never", anything
 * before 1970 becomes 1 (long expired). */
static uint32_t
time32(int64_t t)
{
    if (t == 0)
        return 0;
    if (t < 0)
        return 1;
    if (t > (int64_t)UINT32_MAX - 1)
        return UINT32_MAX - 1;
    return (uint32_t)t;
}

/*
 * Bytes an item is charged: what glibc malloc actually takes for it. A
 * small chunk is the request plus an 8-byte size word, rounded up to 16,
 * at least 32; above the mmap threshold (128 KiB by default) it is the
 * request plus 16 rounded up to a 4 KiB page.
 */
size_t
store_item_size(size_t nkey, size_t nbytes)
{
    size_t raw = offsetof(struct store_item, data) + nkey + nbytes + 2;

    if (raw >= 128 * 1024)
        return (raw + 16 + 4095) & ~(size_t)4095;
    raw = (raw + 8 + 15) & ~(size_t)15;
    return raw < 32 ? 32 : raw;
}

static inline size_t
item_charge(const struct store_item *it)
{
    return store_item_size(it->nkey, it->nbytes);
}

/* Free an item nobody references any more and give its bytes back. */
static void
item_free(struct store *s, struct store_item *it)
{
    __atomic_fetch_sub(&s->mem_used, item_charge(it), __ATOMIC_RELAXED);
    free(it);
}

static inline void
item_ref(struct store_item *it)
{
    __atomic_fetch_add(&it->refcount, 1, __ATOMIC_RELAXED);
}

void
store_item_ref(struct store_item *it)
{
    item_ref(it);
}

/* A new CAS: node seed in the high 16 bits, a counter below, never 0. */
static uint64_t
cas_mint(struct store *s)
{
    uint64_t n;

    do
        n = __atomic_fetch_add(&s->cas_next, 1, __ATOMIC_RELAXED) & CAS_LOW_MASK;
    while (n == 0);
    return s->seed_bits | n;
}

int64_t
store_now(const struct store *s)
{
    return (int64_t)time(NULL) + __atomic_load_n(&s->clock_shift, __ATOMIC_RELAXED);
}

void
store_clock_shift(struct store *s, int64_t seconds)
{
    __atomic_fetch_add(&s->clock_shift, seconds, __ATOMIC_RELAXED);
}

int64_t
store_exptime(const struct store *s, int64_t exptime)
{
    int64_t now;

    if (exptime == 0)
        return 0;
    now = store_now(s);
    if (exptime < 0)
        return now > 1 ? now - 1 : 1;
    if (exptime <= 2592000)
        return now + exptime;
    return exptime;
}

/* ---- dirty tracking (do_: caller holds the stripe lock) ---------------- */

static inline uint32_t
dirty_bucket(const struct stripe *st, uint64_t hash)
{
    return (uint32_t)(hash >> STRIPE_BITS) & st->d_mask;
}

/* Double the stripe's dirty set when it holds twice as many keys as
 * buckets; on ENOMEM it keeps its size. */
static void
do_dirty_grow(struct stripe *st)
{
    uint32_t n = st->d_mask + 1, i;
    struct dirty_key **nb;

    if (st->d_count <= n * 2 || n >= MAX_BUCKETS)
        return;
    nb = calloc((size_t)n * 2, sizeof(*nb));
    if (nb == NULL)
        return;
    st->d_mask = n * 2 - 1;
    for (i = 0; i < n; i++) {
        struct dirty_key *d = st->d_buckets[i], *next;

        for (; d != NULL; d = next) {
            uint32_t b = dirty_bucket(st, d->hash);

            next = d->h_next;
            d->h_next = nb[b];
            nb[b] = d;
        }
    }
    free(st->d_buckets);
    st->d_buckets = nb;
}

/* Record a changed key of a tracking stripe if the session's predicate
 * wants it and it is not recorded yet. Out of line and cold, so the
 * mutation paths that test st->tracking stay as small as without it. */
static void __attribute__((noinline, cold))
do_track_key(struct store *s, struct stripe *st, const char *key, size_t nkey,
             uint64_t hash)
{
    struct dirty_key **pp, *d;

    if (!s->track_pred(hash, s->track_arg))
        return;
    pp = &st->d_buckets[dirty_bucket(st, hash)];
    for (d = *pp; d != NULL; d = d->h_next) {
        if (d->hash == hash && d->nkey == nkey && memcmp(d->key, key, nkey) == 0)
            return;
    }
    d = malloc(offsetof(struct dirty_key, key) + nkey);
    if (d == NULL) {
        /* A change we cannot record would let the copy diverge: fail the
         * session loudly instead. */
        __atomic_store_n(&s->track_lost, true, __ATOMIC_RELAXED);
        return;
    }
    d->hash = hash;
    d->nkey = (uint8_t)nkey;
    memcpy(d->key, key, nkey);
    d->h_next = *pp;
    *pp = d;
    d->q_next = NULL;
    if (st->d_tail != NULL)
        st->d_tail->q_next = d;
    else
        st->d_head = d;
    st->d_tail = d;
    st->d_count++;
    __atomic_fetch_add(&s->track_pending, 1, __ATOMIC_RELAXED);
    do_dirty_grow(st);
}

/* The hook every mutation calls with the item it changes: a plain load of
 * a field of the stripe it already holds locked when no session runs. */
static inline void
do_track(struct store *s, struct stripe *st, const struct store_item *it)
{
    if (__builtin_expect(st->tracking, 0))
        do_track_key(s, st, it->data, it->nkey, it->hash);
}

/* Pop the oldest recorded key of a stripe (the caller frees it). */
static struct dirty_key *
do_dirty_pop(struct stripe *st)
{
    struct dirty_key *d = st->d_head, **pp;

    if (d == NULL)
        return NULL;
    st->d_head = d->q_next;
    if (st->d_head == NULL)
        st->d_tail = NULL;
    for (pp = &st->d_buckets[dirty_bucket(st, d->hash)]; *pp != d; pp = &(*pp)->h_next)
        ;
    *pp = d->h_next;
    st->d_count--;
    return d;
}

/* ---- LRU and hash chains (do_: caller holds the stripe lock) ----------- */

static inline void
do_publish_tail(struct stripe *st)
{
    store32(&st->tail_bump, st->lru_tail != NULL ? st->lru_tail->bump : TAIL_EMPTY);
}

static void
do_lru_remove(struct stripe *st, struct store_item *it)
{
    if (it->lru_prev != NULL)
        it->lru_prev->lru_next = it->lru_next;
    else
        st->lru_head = it->lru_next;
    if (it->lru_next != NULL)
        it->lru_next->lru_prev = it->lru_prev;
    else
        st->lru_tail = it->lru_prev;
    it->lru_prev = it->lru_next = NULL;
}

static void
do_lru_push(struct stripe *st, struct store_item *it)
{
    it->lru_prev = NULL;
    it->lru_next = st->lru_head;
    if (st->lru_head != NULL)
        st->lru_head->lru_prev = it;
    else
        st->lru_tail = it;
    st->lru_head = it;
}

/* Double the stripe's bucket array when the load factor passes 2. Why 2
 * and not memcached's 1.5: buckets cost 8 bytes each, so the table costs
 * 4-8 bytes per item at 2 against 5.3-10.7 at 1.5 (measured at 1M items:
 * 197.5 against 201.4 bytes of RSS per 100-byte item, store_bench), for
 * chains that stay short (a hit looks at 1.5-2 items on average) and whose
 * items carry their full hash, so a miss in a chain costs no key compare.
 * On ENOMEM the table keeps its size: longer chains, still correct. */
static void
do_maybe_grow(struct store *s, struct stripe *st)
{
    uint32_t n = st->mask + 1, i;
    struct store_item **nb;

    if ((uint64_t)st->count <= (uint64_t)n * 2 || n >= MAX_BUCKETS)
        return;
    nb = calloc((size_t)n * 2, sizeof(*nb));
    if (nb == NULL)
        return;
    st->mask = n * 2 - 1;
    for (i = 0; i < n; i++) {
        struct store_item *it = st->buckets[i], *next;

        for (; it != NULL; it = next) {
            uint32_t b = bucket_of(st, it->hash);

            next = it->h_next;
            it->h_next = nb[b];
            nb[b] = it;
        }
    }
    free(st->buckets);
    st->buckets = nb;
    __atomic_fetch_add(&s->nbuckets_total, n, __ATOMIC_RELAXED);
}

/* Link an item (caller's reference stays the caller's; the table takes
 * its own). */
static void
do_link(struct store *s, struct stripe *st, struct store_item *it)
{
    uint32_t b = bucket_of(st, it->hash);

    do_track(s, st, it);
    item_ref(it);
    it->gen |= IF_LINKED;
    it->h_next = st->buckets[b];
    st->buckets[b] = it;
    do_lru_push(st, it);
    if (st->lru_tail == it)
        do_publish_tail(st);
    st->count++;
    st->bytes += item_charge(it);
    st->total_items++;
    do_maybe_grow(s, st);
}

/* Unlink an item and drop the table's reference; frees it when that was
 * the last one. prevp is its chain link if known, else NULL. */
static void
do_unlink(struct store *s, struct stripe *st, struct store_item *it,
          struct store_item **prevp)
{
    bool was_tail = st->lru_tail == it;

    do_track(s, st, it);
    if (prevp == NULL) {
        prevp = &st->buckets[bucket_of(st, it->hash)];
        while (*prevp != it)
            prevp = &(*prevp)->h_next;
    }
    *prevp = it->h_next;
    it->h_next = NULL;
    do_lru_remove(st, it);
    if (was_tail)
        do_publish_tail(st);
    it->gen &= (uint16_t)~IF_LINKED;
    st->count--;
    st->bytes -= item_charge(it);
    store_release(s, it);
}

static inline enum dead
item_dead(const struct store_item *it, int64_t now, uint32_t gen)
{
    if ((it->gen & GEN_MASK) != gen)
        return DEAD_FLUSHED;
    if (it->exptime != 0 && (int64_t)it->exptime <= now)
        return DEAD_EXPIRED;
    return LIVE;
}

/* Unlink a dead item, counting it as reclaimed. */
static void
do_reclaim(struct store *s, struct stripe *st, struct store_item *it,
           enum dead why, struct store_item **prevp)
{
    st->reclaimed++;
    if (why == DEAD_EXPIRED && !(it->gen & IF_FETCHED))
        st->expired_unfetched++;
    do_unlink(s, st, it, prevp);
}

/* Current flush generation; read under the stripe lock, which orders it
 * after every generation an item of this stripe was stored with. */
static inline uint32_t
do_gen(struct store *s)
{
    return __atomic_load_n(&s->gen, __ATOMIC_ACQUIRE);
}

/*
 * Find the live item of a key. A dead one (expired or flushed) is unlinked
 * on the way and counted (get_expired/get_flushed when is_get). Returns a
 * borrowed pointer, valid while the lock is held.
 */
static struct store_item *
do_find(struct store *s, struct stripe *st, const char *key, size_t nkey,
        uint64_t hash, int64_t now, bool is_get)
{
    struct store_item **pp = &st->buckets[bucket_of(st, hash)], *it;
    enum dead why;

    for (; (it = *pp) != NULL; pp = &it->h_next) {
        if (it->hash == hash && it->nkey == nkey && memcmp(it->data, key, nkey) == 0)
            break;
    }
    if (it == NULL)
        return NULL;
    why = item_dead(it, now, do_gen(s));
    if (why == LIVE)
        return it;
    if (is_get) {
        if (why == DEAD_EXPIRED)
            st->get_expired++;
        else
            st->get_flushed++;
    }
    do_reclaim(s, st, it, why, pp);
    return NULL;
}

static inline uint8_t
minute8(int64_t now)
{
    return (uint8_t)(now / BUMP_SECONDS);
}

/* Move a fetched item to the LRU head: always on its first fetch, then
 * at most once a minute. */
static void
do_bump(struct stripe *st, struct store_item *it, int64_t now)
{
    uint8_t m = minute8(now);

    if ((it->gen & IF_FETCHED) && it->bump == m)
        return;
    it->gen |= IF_FETCHED;
    it->bump = m;
    if (st->lru_head != it) {
        do_lru_remove(st, it);
        do_lru_push(st, it);
    }
    do_publish_tail(st);
}

/* ---- flush generations -------------------------------------------------- */

/* Unlink every item of a generation other than gen. Takes each stripe
 * lock in turn; the caller holds flush_lock and no stripe lock. */
static void
walk_remove_stale(struct store *s, uint32_t gen)
{
    uint32_t i, b;

    for (i = 0; i < STRIPES; i++) {
        struct stripe *st = &s->stripes[i];

        pthread_mutex_lock(&st->lock);
        for (b = 0; b <= st->mask; b++) {
            struct store_item **pp = &st->buckets[b], *it;

            while ((it = *pp) != NULL) {
                if ((it->gen & GEN_MASK) != gen)
                    do_reclaim(s, st, it, DEAD_FLUSHED, pp);
                else
                    pp = &it->h_next;
            }
        }
        pthread_mutex_unlock(&st->lock);
    }
}

/* A new flush generation: every item stored before is dead. Caller holds
 * flush_lock. */
static void
bump_gen(struct store *s)
{
    uint32_t g = (__atomic_load_n(&s->gen, __ATOMIC_RELAXED) + 1) & GEN_MASK;

    bool tracking;

    __atomic_store_n(&s->gen, g, __ATOMIC_RELEASE);
    /* With a dirty-tracking session, every flushed item of its range must
     * be recorded now (a destination may hold a copy): reclaim them all.
     * track_lock orders this against store_track_start, so either the
     * session sees the new generation (its walk skips flushed items) or we
     * see the session. */
    pthread_mutex_lock(&s->track_lock);
    tracking = s->track_on;
    pthread_mutex_unlock(&s->track_lock);
    if ((g & GEN_WALK_MASK) == 0 || tracking)
        walk_remove_stale(s, g);
}

/*
 * Turn a delayed flush whose moment has come into a generation bump. Every
 * operation calls this before taking a stripe lock and before minting a
 * CAS, so an item stored at or after the moment gets the new generation
 * and survives, and one stored before it does not.
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
            bump_gen(s);
        }
        pthread_mutex_unlock(&s->flush_lock);
    }
    return now;
}

void
store_flush(struct store *s, int64_t when)
{
    int64_t now = store_now(s);

    pthread_mutex_lock(&s->flush_lock);
    if (when <= now) {
        __atomic_store_n(&s->flush_when, 0, __ATOMIC_RELAXED);
        bump_gen(s);
    } else {
        __atomic_store_n(&s->flush_when, when, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&s->flush_lock);
}

/* ---- memory and eviction ------------------------------------------------ */

/*
 * Evict one item: the LRU tail of the oldest-looking among EVICT_SAMPLE
 * non-empty stripes. The caller holds no stripe lock, so blocking on the
 * chosen one cannot deadlock. A tail that is being sent (refcount > 1) is
 * unlinked too; its bytes come back when the last reader releases it.
 * Returns false when every stripe is empty.
 */
static enum evicted
evict_one(struct store *s, int64_t now)
{
    uint32_t start, i, found = 0, best_age = 0;
    uint8_t m = minute8(now);
    struct stripe *best = NULL;
    struct store_item *it;
    enum dead why;
    enum evicted rc = EV_RECLAIMED;

    start = __atomic_fetch_add(&s->evict_cursor, EVICT_SAMPLE, __ATOMIC_RELAXED);
    for (i = 0; i < STRIPES && found < EVICT_SAMPLE; i++) {
        struct stripe *st = &s->stripes[(start + i) & STRIPE_MASK];
        uint32_t a = load32(&st->tail_bump), age;

        if (a == TAIL_EMPTY)
            continue;
        found++;
        age = (uint8_t)(m - (uint8_t)a);
        if (best == NULL || age > best_age) {
            best = st;
            best_age = age;
        }
    }
    if (best == NULL)
        return EV_NONE;
    pthread_mutex_lock(&best->lock);
    it = best->lru_tail;
    if (it != NULL) {
        why = item_dead(it, now, do_gen(s));
        if (why != LIVE) {
            do_reclaim(s, best, it, why, NULL);
        } else {
            best->evictions++;
            do_unlink(s, best, it, NULL);
            rc = EV_EVICTED;
        }
    }
    pthread_mutex_unlock(&best->lock);
    return rc;
}

/* Reserve size bytes against the limit, evicting as needed; counts the
 * live items evicted in *evicted. */
static int
mem_reserve(struct store *s, size_t size, int64_t now, uint64_t *evicted)
{
    unsigned empty = 0;
    enum evicted ev;
    uint64_t cur = __atomic_load_n(&s->mem_used, __ATOMIC_RELAXED);

    for (;;) {
        if (cur + size <= s->mem_limit) {
            if (__atomic_compare_exchange_n(&s->mem_used, &cur, cur + size, true,
                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED))
                return 0;
            continue;
        }
        /* Every stripe empty: what is left is held by readers or being
         * built by other threads; give it a few tries, then give up. */
        ev = evict_one(s, now);
        if (ev == EV_EVICTED)
            (*evicted)++;
        if (ev == EV_NONE && ++empty > 3)
            return STORE_NO_MEMORY;
        cur = __atomic_load_n(&s->mem_used, __ATOMIC_RELAXED);
    }
}

/* store_alloc, counting the live items it evicted in *evicted. */
static struct store_item *
alloc_common(struct store *s, const char *key, size_t nkey, uint64_t hash,
             uint32_t flags, int64_t exptime, size_t nbytes, int *err,
             uint64_t *evicted)
{
    struct store_item *it;
    size_t size;
    int rc;

    if (nkey == 0 || nkey > STORE_KEY_MAX || nbytes > UINT32_MAX - 2 ||
        (size = store_item_size(nkey, nbytes)) > s->item_size_max) {
        *err = STORE_TOO_LARGE;
        return NULL;
    }
    if (size > s->mem_limit) {
        *err = STORE_NO_MEMORY;
        return NULL;
    }
    rc = mem_reserve(s, size, store_now(s), evicted);
    if (rc < 0) {
        *err = rc;
        return NULL;
    }
    it = malloc(offsetof(struct store_item, data) + nkey + nbytes + 2);
    if (it == NULL) {
        __atomic_fetch_sub(&s->mem_used, size, __ATOMIC_RELAXED);
        *err = STORE_NO_MEMORY;
        return NULL;
    }
    it->hash = hash;
    it->cas = 0;
    it->h_next = it->lru_prev = it->lru_next = NULL;
    it->exptime = time32(exptime);
    it->flags = flags;
    it->nbytes = (uint32_t)nbytes;
    it->refcount = 1;
    it->nkey = (uint8_t)nkey;
    it->bump = 0;
    it->gen = 0;
    memcpy(it->data, key, nkey);
    it->data[nkey + nbytes] = '\r';
    it->data[nkey + nbytes + 1] = '\n';
    return it;
}

struct store_item *
store_alloc(struct store *s, const char *key, size_t nkey, uint64_t hash,
            uint32_t flags, int64_t exptime, size_t nbytes, int *err)
{
    uint64_t evicted = 0;

    return alloc_common(s, key, nkey, hash, flags, exptime, nbytes, err, &evicted);
}

void
store_release(struct store *s, struct store_item *it)
{
    if (__atomic_sub_fetch(&it->refcount, 1, __ATOMIC_ACQ_REL) == 0)
        item_free(s, it);
}

/* Stamp and link a new item in place of old (NULL if none). */
static void
do_replace(struct store *s, struct stripe *st, struct store_item *old,
           struct store_item *it, int64_t now)
{
    it->cas = cas_mint(s);
    it->gen = (uint16_t)(do_gen(s) | (it->gen & IF_FETCHED));
    it->bump = minute8(now);
    if (old != NULL)
        do_unlink(s, st, old, NULL);
    do_link(s, st, it);
}

/*
 * append/prepend: build a new item from the live one and it, outside the
 * lock, then link it only if the live item is still the one we read
 * (we hold a reference to it, so its address cannot be reused); else retry.
 */
static int
put_concat(struct store *s, struct store_item *it, bool append, uint64_t *cas_out)
{
    struct stripe *st = stripe_of(s, it->hash);
    const char *key = store_item_key(it);

    for (;;) {
        struct store_item *old, *n, *cur;
        int64_t now = clock_begin(s);
        int err;
        size_t nb;

        pthread_mutex_lock(&st->lock);
        old = do_find(s, st, key, it->nkey, it->hash, now, false);
        if (old == NULL) {
            pthread_mutex_unlock(&st->lock);
            return STORE_NOT_STORED;
        }
        item_ref(old);
        pthread_mutex_unlock(&st->lock);

        nb = (size_t)old->nbytes + it->nbytes;
        n = store_alloc(s, key, it->nkey, it->hash, old->flags, 0, nb, &err);
        if (n == NULL) {
            store_release(s, old);
            return err;
        }
        if (append) {
            memcpy(store_item_value_mut(n), store_item_value(old), old->nbytes);
            memcpy(store_item_value_mut(n) + old->nbytes, store_item_value(it), it->nbytes);
        } else {
            memcpy(store_item_value_mut(n), store_item_value(it), it->nbytes);
            memcpy(store_item_value_mut(n) + it->nbytes, store_item_value(old), old->nbytes);
        }

        now = clock_begin(s);
        pthread_mutex_lock(&st->lock);
        cur = do_find(s, st, key, it->nkey, it->hash, now, false);
        if (cur == old) {
            n->exptime = old->exptime;   /* a touch may have come meanwhile */
            do_replace(s, st, old, n, now);
            if (cas_out != NULL)
                *cas_out = n->cas;
        }
        pthread_mutex_unlock(&st->lock);
        store_release(s, old);
        store_release(s, n);
        if (cur == old)
            return STORE_STORED;
    }
}

int
store_put(struct store *s, struct store_item *it, enum store_op op,
          uint64_t cas_in, uint64_t *cas_out)
{
    struct stripe *st = stripe_of(s, it->hash);
    struct store_item *old;
    int64_t now;
    int rc = STORE_STORED;

    if (it->gen & IF_LINKED)
        return STORE_NOT_STORED;   /* an item is stored once */
    if (op == STORE_OP_APPEND || op == STORE_OP_PREPEND)
        return put_concat(s, it, op == STORE_OP_APPEND, cas_out);

    now = clock_begin(s);
    pthread_mutex_lock(&st->lock);
    old = do_find(s, st, store_item_key(it), it->nkey, it->hash, now, false);
    switch (op) {
    case STORE_OP_ADD:
        if (old != NULL)
            rc = STORE_NOT_STORED;
        break;
    case STORE_OP_REPLACE:
        if (old == NULL)
            rc = STORE_NOT_STORED;
        break;
    case STORE_OP_CAS:
        if (old == NULL)
            rc = STORE_NOT_FOUND;
        else if (old->cas != cas_in)
            rc = STORE_EXISTS;
        break;
    default:
        break;
    }
    if (rc == STORE_STORED) {
        do_replace(s, st, old, it, now);
        if (cas_out != NULL)
            *cas_out = it->cas;
    }
    pthread_mutex_unlock(&st->lock);
    return rc;
}

/* ---- lookups ------------------------------------------------------------ */

static struct store_item *
get_common(struct store *s, const char *key, size_t nkey, uint64_t hash,
           bool touch, int64_t exptime)
{
    struct stripe *st = stripe_of(s, hash);
    struct store_item *it;
    int64_t now = clock_begin(s);

    pthread_mutex_lock(&st->lock);
    it = do_find(s, st, key, nkey, hash, now, true);
    if (it != NULL) {
        if (touch) {
            __atomic_store_n(&it->exptime, time32(exptime), __ATOMIC_RELAXED);
            do_track(s, st, it);
        }
        do_bump(st, it, now);
        item_ref(it);
    }
    pthread_mutex_unlock(&st->lock);
    return it;
}

struct store_item *
store_get(struct store *s, const char *key, size_t nkey, uint64_t hash)
{
    return get_common(s, key, nkey, hash, false, 0);
}

struct store_item *
store_get_touch(struct store *s, const char *key, size_t nkey, uint64_t hash,
                int64_t exptime)
{
    return get_common(s, key, nkey, hash, true, exptime);
}

int
store_delete(struct store *s, const char *key, size_t nkey, uint64_t hash)
{
    struct stripe *st = stripe_of(s, hash);
    struct store_item *it;
    int64_t now = clock_begin(s);

    pthread_mutex_lock(&st->lock);
    it = do_find(s, st, key, nkey, hash, now, false);
    if (it != NULL)
        do_unlink(s, st, it, NULL);
    pthread_mutex_unlock(&st->lock);
    return it != NULL ? STORE_DELETED : STORE_NOT_FOUND;
}

int
store_touch(struct store *s, const char *key, size_t nkey, uint64_t hash,
            int64_t exptime)
{
    struct stripe *st = stripe_of(s, hash);
    struct store_item *it;
    int64_t now = clock_begin(s);

    pthread_mutex_lock(&st->lock);
    it = do_find(s, st, key, nkey, hash, now, false);
    if (it != NULL) {
        __atomic_store_n(&it->exptime, time32(exptime), __ATOMIC_RELAXED);
        do_track(s, st, it);
        do_bump(st, it, now);
    }
    pthread_mutex_unlock(&st->lock);
    return it != NULL ? STORE_TOUCHED : STORE_NOT_FOUND;
}

/* ---- incr/decr ---------------------------------------------------------- */

/* A stored value as a u64: 1..20 decimal digits that fit, optionally
 * followed by spaces (memcached pads decremented values that way). */
static bool
parse_u64(const char *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;

    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
        unsigned d = (unsigned)(p[i] - '0');

        if (i >= 20 || v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (i == 0)
        return false;
    for (; i < n; i++) {
        if (p[i] != ' ')
            return false;
    }
    *out = v;
    return true;
}

static size_t
format_u64(char *buf, uint64_t v)
{
    char tmp[20];
    size_t n = 0, i;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    return n;
}

/*
 * incr/decr. When only the table holds the item and the new number has the
 * same length, it is rewritten in place (nobody can be reading it: a reader
 * would hold a reference). Otherwise a new item is built outside the lock
 * and linked only if the item we read is still the live one.
 */
int
store_arith(struct store *s, const char *key, size_t nkey, uint64_t hash,
            bool incr, uint64_t delta, uint64_t *value, uint64_t *cas_out)
{
    struct stripe *st = stripe_of(s, hash);

    for (;;) {
        struct store_item *old, *n, *cur;
        char buf[20];
        uint64_t v;
        size_t len;
        int64_t now = clock_begin(s);
        int err;

        pthread_mutex_lock(&st->lock);
        old = do_find(s, st, key, nkey, hash, now, false);
        if (old == NULL) {
            pthread_mutex_unlock(&st->lock);
            return STORE_NOT_FOUND;
        }
        if (!parse_u64(store_item_value(old), old->nbytes, &v)) {
            pthread_mutex_unlock(&st->lock);
            return STORE_NON_NUMERIC;
        }
        if (incr)
            v += delta;                 /* wraps modulo 2^64 */
        else
            v = v > delta ? v - delta : 0;
        len = format_u64(buf, v);
        if (len == old->nbytes &&
            __atomic_load_n(&old->refcount, __ATOMIC_ACQUIRE) == 1) {
            memcpy(store_item_value_mut(old), buf, len);
            old->cas = cas_mint(s);
            do_track(s, st, old);
            do_bump(st, old, now);
            *value = v;
            if (cas_out != NULL)
                *cas_out = old->cas;
            pthread_mutex_unlock(&st->lock);
            return STORE_STORED;
        }
        item_ref(old);
        pthread_mutex_unlock(&st->lock);

        n = store_alloc(s, key, nkey, hash, old->flags, 0, len, &err);
        if (n == NULL) {
            store_release(s, old);
            return err;
        }
        memcpy(store_item_value_mut(n), buf, len);

        now = clock_begin(s);
        pthread_mutex_lock(&st->lock);
        cur = do_find(s, st, key, nkey, hash, now, false);
        if (cur == old) {
            n->exptime = old->exptime;
            n->gen |= old->gen & IF_FETCHED;
            do_replace(s, st, old, n, now);
            *value = v;
            if (cas_out != NULL)
                *cas_out = n->cas;
        }
        pthread_mutex_unlock(&st->lock);
        store_release(s, old);
        store_release(s, n);
        if (cur == old)
            return STORE_STORED;
    }
}

/* ---- sweep -------------------------------------------------------------- */

size_t
store_sweep(struct store *s, size_t max_buckets)
{
    size_t reclaimed = 0;
    int64_t now = clock_begin(s);

    pthread_mutex_lock(&s->sweep_lock);
    while (max_buckets > 0) {
        struct stripe *st = &s->stripes[s->sweep_stripe];
        uint32_t slice = SWEEP_SLICE, gen;

        pthread_mutex_lock(&st->lock);
        gen = do_gen(s);
        if (s->sweep_bucket > st->mask)
            s->sweep_bucket = 0;
        while (max_buckets > 0 && slice > 0 && s->sweep_bucket <= st->mask) {
            struct store_item **pp = &st->buckets[s->sweep_bucket], *it;

            while ((it = *pp) != NULL) {
                enum dead why = item_dead(it, now, gen);

                if (why != LIVE) {
                    do_reclaim(s, st, it, why, pp);
                    reclaimed++;
                } else {
                    pp = &it->h_next;
                }
            }
            s->sweep_bucket++;
            max_buckets--;
            slice--;
        }
        if (s->sweep_bucket > st->mask) {
            s->sweep_bucket = 0;
            s->sweep_stripe = (s->sweep_stripe + 1) & STRIPE_MASK;
        }
        pthread_mutex_unlock(&st->lock);
    }
    pthread_mutex_unlock(&s->sweep_lock);
    return reclaimed;
}

/* The background sweeper: a slice of the table every SWEEP_TICK_MS, a
 * full pass about every 10 s (bounded per tick), until store_free. */
static void *
sweeper_main(void *arg)
{
    struct store *s = arg;
    struct timespec ts;

    pthread_mutex_lock(&s->sweeper_mu);
    while (!s->sweeper_stop) {
        uint64_t total = __atomic_load_n(&s->nbuckets_total, __ATOMIC_RELAXED);
        size_t slice = (size_t)(total / 50);

        if (slice < SWEEP_MIN)
            slice = SWEEP_MIN;
        if (slice > SWEEP_MAX)
            slice = SWEEP_MAX;
        pthread_mutex_unlock(&s->sweeper_mu);
        store_sweep(s, slice);
        pthread_mutex_lock(&s->sweeper_mu);
        if (s->sweeper_stop)
            break;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += SWEEP_TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->sweeper_cv, &s->sweeper_mu, &ts);
    }
    pthread_mutex_unlock(&s->sweeper_mu);
    return NULL;
}

/* ---- ranges: walk, count, purge ---------------------------------------- */

/* Reverse the bits of a 32-bit word. */
static inline uint32_t
rev32(uint32_t v)
{
    v = ((v >> 1) & 0x55555555u) | ((v & 0x55555555u) << 1);
    v = ((v >> 2) & 0x33333333u) | ((v & 0x33333333u) << 2);
    v = ((v >> 4) & 0x0f0f0f0fu) | ((v & 0x0f0f0f0fu) << 4);
    v = ((v >> 8) & 0x00ff00ffu) | ((v & 0x00ff00ffu) << 8);
    return (v >> 16) | (v << 16);
}

/* The bucket after v under mask, in reverse-binary order (increment the
 * reversed masked bits); 0 when the stripe is done. */
static inline uint32_t
cursor_next(uint32_t v, uint32_t mask)
{
    v |= ~mask;
    return rev32(rev32(v) + 1);
}

/* A growable array of item references collected under a stripe lock. */
struct refs {
    struct store_item **v;
    size_t n, cap;
};

static bool
refs_reserve(struct refs *r, size_t more)
{
    size_t cap = r->cap != 0 ? r->cap : 64;
    struct store_item **nv;

    if (r->n + more <= r->cap)
        return true;
    while (cap < r->n + more)
        cap *= 2;
    nv = realloc(r->v, cap * sizeof(*nv));
    if (nv == NULL)
        return false;
    r->v = nv;
    r->cap = cap;
    return true;
}

/* Bucket visits a walk or purge call may spend: enough to find max_items
 * in a sparse table, bounded so that a call stays short. */
static size_t
walk_budget(size_t max_items)
{
    return WALK_BUCKETS + (max_items < SIZE_MAX / WALK_BUCKETS_PER_ITEM ?
                           max_items * WALK_BUCKETS_PER_ITEM : SIZE_MAX / 2);
}

/* Where the next call resumes: the next stripe from its start, or bucket
 * v of this one. */
static void
cursor_save(struct store_cursor *cur, uint32_t v, bool stripe_done)
{
    if (stripe_done) {
        cur->stripe++;
        cur->bucket = 0;
    } else {
        cur->bucket = v;
    }
}

/* A live item the predicate (NULL: every item) selects; caller holds the
 * stripe lock. */
static inline bool
do_selected(const struct store_item *it, store_hash_pred pred, void *arg, int64_t now,
            uint32_t gen)
{
    return item_dead(it, now, gen) == LIVE && (pred == NULL || pred(it->hash, arg));
}

/* Matching live items of one bucket. */
static size_t
do_bucket_matches(struct stripe *st, uint32_t b, store_hash_pred pred, void *arg,
                  int64_t now, uint32_t gen)
{
    struct store_item *it;
    size_t n = 0;

    for (it = st->buckets[b]; it != NULL; it = it->h_next) {
        if (do_selected(it, pred, arg, now, gen))
            n++;
    }
    return n;
}

int
store_walk(struct store *s, struct store_cursor *cur, store_hash_pred pred,
           void *arg, store_walk_fn fn, void *fn_arg, size_t max_items)
{
    struct refs r = { NULL, 0, 0 };
    size_t visited = 0, budget, i;
    int rc = 0;

    if (max_items == 0)
        max_items = 1;
    budget = walk_budget(max_items);
    pthread_mutex_lock(&s->copy_lock);
    while (cur->stripe < STRIPES && visited < max_items && budget > 0) {
        struct stripe *st = &s->stripes[cur->stripe];
        int64_t now = clock_begin(s);
        uint32_t v = cur->bucket, gen;
        bool stripe_done = false, full = false;

        r.n = 0;
        pthread_mutex_lock(&st->lock);
        gen = do_gen(s);
        while (budget > 0 && visited + r.n < max_items) {
            uint32_t b = v & st->mask;
            size_t m = do_bucket_matches(st, b, pred, arg, now, gen);
            struct store_item *it;

            /* Whole buckets only: a bucket read in part could not be
             * resumed once another change reorders its chain. */
            if (m > 0 && visited + r.n > 0 && visited + r.n + m > max_items) {
                full = true;
                break;
            }
            if (m > 0 && !refs_reserve(&r, m)) {
                rc = STORE_NO_MEMORY;
                break;
            }
            for (it = st->buckets[b]; m > 0 && it != NULL; it = it->h_next) {
                if (do_selected(it, pred, arg, now, gen)) {
                    item_ref(it);
                    r.v[r.n++] = it;
                }
            }
            budget--;
            v = cursor_next(v, st->mask);
            if (v == 0) {
                stripe_done = true;
                break;
            }
        }
        pthread_mutex_unlock(&st->lock);
        cursor_save(cur, v, stripe_done);
        for (i = 0; i < r.n; i++) {
            fn(r.v[i], fn_arg);
            store_release(s, r.v[i]);
        }
        visited += r.n;
        if (rc < 0 || full)
            break;
    }
    pthread_mutex_unlock(&s->copy_lock);
    free(r.v);
    if (rc < 0)
        return rc;
    return cur->stripe < STRIPES ? 1 : 0;
}

void
store_count(struct store *s, store_hash_pred pred, void *arg,
            uint64_t *items, uint64_t *bytes)
{
    uint64_t n = 0, nb = 0;
    uint32_t i, b;

    for (i = 0; i < STRIPES; i++) {
        struct stripe *st = &s->stripes[i];
        int64_t now = clock_begin(s);
        uint32_t gen;

        pthread_mutex_lock(&st->lock);
        gen = do_gen(s);
        for (b = 0; b <= st->mask; b++) {
            struct store_item *it;

            for (it = st->buckets[b]; it != NULL; it = it->h_next) {
                if (do_selected(it, pred, arg, now, gen)) {
                    n++;
                    nb += item_charge(it);
                }
            }
        }
        pthread_mutex_unlock(&st->lock);
    }
    *items = n;
    *bytes = nb;
}

int
store_purge(struct store *s, store_hash_pred pred, void *arg, size_t max_items,
            struct store_cursor *cur)
{
    size_t purged = 0, budget;

    if (max_items == 0)
        max_items = 1;
    budget = walk_budget(max_items);
    while (cur->stripe < STRIPES && purged < max_items && budget > 0) {
        struct stripe *st = &s->stripes[cur->stripe];
        uint32_t v = cur->bucket;
        bool stripe_done = false;

        clock_begin(s);
        pthread_mutex_lock(&st->lock);
        while (budget > 0 && purged < max_items) {
            struct store_item **pp = &st->buckets[v & st->mask], *it;

            /* Unlinking is final, so stopping inside a bucket is fine:
             * the next call reads it again and finds only the rest. */
            while ((it = *pp) != NULL && purged < max_items) {
                if (pred == NULL || pred(it->hash, arg)) {
                    st->purged++;
                    do_unlink(s, st, it, pp);
                    purged++;
                } else {
                    pp = &it->h_next;
                }
            }
            if (it != NULL)
                break;
            budget--;
            v = cursor_next(v, st->mask);
            if (v == 0) {
                stripe_done = true;
                break;
            }
        }
        pthread_mutex_unlock(&st->lock);
        cursor_save(cur, v, stripe_done);
    }
    return cur->stripe < STRIPES ? 1 : 0;
}

/* ---- dirty tracking sessions -------------------------------------------- */

/* Detach and free every stripe's dirty set. With lock, each stripe is
 * detached under its lock; without (store_free), nobody else runs. */
static void
track_clear(struct store *s, bool lock)
{
    uint32_t i;

    for (i = 0; i < STRIPES; i++) {
        struct stripe *st = &s->stripes[i];
        struct dirty_key *d, *next, **buckets;

        if (lock)
            pthread_mutex_lock(&st->lock);
        st->tracking = false;
        d = st->d_head;
        buckets = st->d_buckets;
        st->d_head = st->d_tail = NULL;
        st->d_buckets = NULL;
        st->d_count = 0;
        st->d_mask = 0;
        if (lock)
            pthread_mutex_unlock(&st->lock);
        for (; d != NULL; d = next) {
            next = d->q_next;
            free(d);
        }
        free(buckets);
    }
    __atomic_store_n(&s->track_pending, 0, __ATOMIC_RELAXED);
}

int
store_track_start(struct store *s, store_hash_pred pred, void *arg)
{
    struct dirty_key ***sets;
    uint32_t i;
    int rc = 0;

    pthread_mutex_lock(&s->track_lock);
    if (s->track_on) {
        rc = STORE_BUSY;
        goto out;
    }
    /* Allocate everything first, so a failure leaves no stripe tracking. */
    sets = calloc(STRIPES, sizeof(*sets));
    if (sets == NULL) {
        rc = STORE_NO_MEMORY;
        goto out;
    }
    for (i = 0; i < STRIPES; i++) {
        sets[i] = calloc(DIRTY_INIT, sizeof(**sets));
        if (sets[i] == NULL) {
            while (i > 0)
                free(sets[--i]);
            free(sets);
            rc = STORE_NO_MEMORY;
            goto out;
        }
    }
    s->track_pred = pred;
    s->track_arg = arg;
    __atomic_store_n(&s->track_lost, false, __ATOMIC_RELAXED);
    __atomic_store_n(&s->track_pending, 0, __ATOMIC_RELAXED);
    s->drain_stripe = 0;
    s->track_on = true;
    /* Turning each stripe on under its lock is the barrier: a mutation
     * that locks the stripe after this sees tracking (and the predicate
     * written above), and one that locked it before has finished. */
    for (i = 0; i < STRIPES; i++) {
        struct stripe *st = &s->stripes[i];

        pthread_mutex_lock(&st->lock);
        st->d_buckets = sets[i];
        st->d_mask = DIRTY_INIT - 1;
        st->d_count = 0;
        st->d_head = st->d_tail = NULL;
        st->tracking = true;
        pthread_mutex_unlock(&st->lock);
    }
    free(sets);
out:
    pthread_mutex_unlock(&s->track_lock);
    return rc;
}

/* Look a key up for a drain without side effects (a dead item is left to
 * the sweep, so reading it does not record the key again). Borrowed. */
static struct store_item *
do_find_live(struct store *s, struct stripe *st, const char *key, size_t nkey,
             uint64_t hash, int64_t now)
{
    struct store_item *it;

    for (it = st->buckets[bucket_of(st, hash)]; it != NULL; it = it->h_next) {
        if (it->hash == hash && it->nkey == nkey && memcmp(it->data, key, nkey) == 0)
            return item_dead(it, now, do_gen(s)) == LIVE ? it : NULL;
    }
    return NULL;
}

size_t
store_track_drain(struct store *s, store_dirty_fn fn, void *arg, size_t max)
{
    struct dirty_key *keys[DRAIN_BATCH];
    struct store_item *items[DRAIN_BATCH];
    size_t done = 0;
    uint32_t idle = 0, n, i;

    pthread_mutex_lock(&s->copy_lock);
    while (done < max && idle < STRIPES &&
           __atomic_load_n(&s->track_pending, __ATOMIC_RELAXED) > 0) {
        struct stripe *st = &s->stripes[s->drain_stripe];
        int64_t now = clock_begin(s);
        bool more;

        n = 0;
        pthread_mutex_lock(&st->lock);
        if (!st->tracking) {
            pthread_mutex_unlock(&st->lock);
            break;
        }
        while (n < DRAIN_BATCH && done + n < max && st->d_head != NULL) {
            struct dirty_key *d = do_dirty_pop(st);
            struct store_item *it = do_find_live(s, st, d->key, d->nkey, d->hash, now);

            if (it != NULL)
                item_ref(it);
            keys[n] = d;
            items[n++] = it;
        }
        more = st->d_head != NULL;
        pthread_mutex_unlock(&st->lock);
        if (n > 0)
            __atomic_fetch_sub(&s->track_pending, n, __ATOMIC_RELAXED);
        for (i = 0; i < n; i++) {
            fn(keys[i]->key, keys[i]->nkey, keys[i]->hash, items[i], arg);
            if (items[i] != NULL)
                store_release(s, items[i]);
            free(keys[i]);
        }
        done += n;
        idle = n > 0 ? 0 : idle + 1;
        if (!more)
            s->drain_stripe = (s->drain_stripe + 1) & STRIPE_MASK;
    }
    pthread_mutex_unlock(&s->copy_lock);
    return done;
}

size_t
store_track_pending(struct store *s)
{
    return (size_t)__atomic_load_n(&s->track_pending, __ATOMIC_RELAXED);
}

bool
store_track_lost(struct store *s)
{
    return __atomic_load_n(&s->track_lost, __ATOMIC_RELAXED);
}

void
store_track_stop(struct store *s)
{
    pthread_mutex_lock(&s->copy_lock);
    pthread_mutex_lock(&s->track_lock);
    if (s->track_on) {
        track_clear(s, true);
        s->track_on = false;
        s->track_pred = NULL;
        s->track_arg = NULL;
    }
    pthread_mutex_unlock(&s->track_lock);
    pthread_mutex_unlock(&s->copy_lock);
}

/* ---- import (destination side) ------------------------------------------ */

/* Raise the CAS counter so the next minted CAS has a larger counter part
 * than this imported one. */
static void
cas_raise(struct store *s, uint64_t cas)
{
    uint64_t want = (cas & CAS_LOW_MASK) + 1;
    uint64_t cur = __atomic_load_n(&s->cas_next, __ATOMIC_RELAXED);

    while (cur < want &&
           !__atomic_compare_exchange_n(&s->cas_next, &cur, want, true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

struct store_item *
store_import_alloc(struct store *s, const char *key, size_t nkey, uint64_t hash,
                   uint32_t flags, int64_t ttl_remaining, size_t nbytes, int *err)
{
    uint64_t evicted = 0;
    int64_t exptime = 0;
    struct store_item *it;

    if (ttl_remaining < 0)
        exptime = 1;                    /* long expired */
    else if (ttl_remaining > 0)
        exptime = store_now(s) + (ttl_remaining > (int64_t)UINT32_MAX ?
                                  (int64_t)UINT32_MAX : ttl_remaining);
    it = alloc_common(s, key, nkey, hash, flags, exptime, nbytes, err, &evicted);
    if (evicted > 0)
        __atomic_fetch_add(&s->import_evictions, evicted, __ATOMIC_RELAXED);
    return it;
}

int
store_put_import(struct store *s, struct store_item *it, uint64_t cas)
{
    struct stripe *st = stripe_of(s, it->hash);
    struct store_item *old;
    int64_t now;
    int rc;

    if (it->gen & IF_LINKED)
        return STORE_NOT_STORED;   /* an item is stored once */
    now = clock_begin(s);
    if (cas != 0)
        cas_raise(s, cas);
    pthread_mutex_lock(&st->lock);
    old = do_find(s, st, store_item_key(it), it->nkey, it->hash, now, false);
    if (it->exptime != 0 && (int64_t)it->exptime <= now) {
        /* An expired post-image is a tombstone. */
        if (old != NULL)
            do_unlink(s, st, old, NULL);
        rc = old != NULL ? STORE_DELETED : STORE_NOT_FOUND;
    } else {
        it->cas = cas != 0 ? cas : cas_mint(s);
        it->gen = (uint16_t)do_gen(s);
        it->bump = minute8(now);
        if (old != NULL)
            do_unlink(s, st, old, NULL);
        do_link(s, st, it);
        rc = STORE_STORED;
    }
    pthread_mutex_unlock(&st->lock);
    if (rc == STORE_STORED)
        __atomic_fetch_add(&s->imported, 1, __ATOMIC_RELAXED);
    return rc;
}

int
store_import(struct store *s, const char *key, size_t nkey, uint64_t hash,
             uint32_t flags, int64_t ttl_remaining, uint64_t cas,
             const char *value, size_t nbytes)
{
    struct store_item *it;
    int err = 0, rc;

    if (ttl_remaining < 0)
        return store_import_delete(s, key, nkey, hash);
    it = store_import_alloc(s, key, nkey, hash, flags, ttl_remaining, nbytes, &err);
    if (it == NULL)
        return err;
    memcpy(store_item_value_mut(it), value, nbytes);
    rc = store_put_import(s, it, cas);
    store_release(s, it);
    return rc;
}

int
store_import_delete(struct store *s, const char *key, size_t nkey, uint64_t hash)
{
    return store_delete(s, key, nkey, hash);
}

int64_t
store_item_ttl_remaining(const struct store *s, const struct store_item *it)
{
    uint32_t e = __atomic_load_n(&it->exptime, __ATOMIC_RELAXED);
    int64_t now;

    if (e == 0)
        return 0;
    now = store_now(s);
    return (int64_t)e > now ? (int64_t)e - now : -1;
}

/* ---- stats -------------------------------------------------------------- */

void
store_get_stats(struct store *s, struct store_stats *out)
{
    uint32_t i;

    memset(out, 0, sizeof(*out));
    for (i = 0; i < STRIPES; i++) {
        struct stripe *st = &s->stripes[i];

        pthread_mutex_lock(&st->lock);
        out->curr_items += st->count;
        out->total_items += st->total_items;
        out->bytes += st->bytes;
        out->evictions += st->evictions;
        out->reclaimed += st->reclaimed;
        out->expired_unfetched += st->expired_unfetched;
        out->get_expired += st->get_expired;
        out->get_flushed += st->get_flushed;
        out->hash_buckets += (uint64_t)st->mask + 1;
        out->purged += st->purged;
        pthread_mutex_unlock(&st->lock);
    }
    out->imported = __atomic_load_n(&s->imported, __ATOMIC_RELAXED);
    out->import_evictions = __atomic_load_n(&s->import_evictions, __ATOMIC_RELAXED);
    out->track_pending = __atomic_load_n(&s->track_pending, __ATOMIC_RELAXED);
    out->limit_maxbytes = s->mem_limit;
    out->mem_used = __atomic_load_n(&s->mem_used, __ATOMIC_RELAXED);
}

void
store_reset_stats(struct store *s)
{
    uint32_t i;

    for (i = 0; i < STRIPES; i++) {
        struct stripe *st = &s->stripes[i];

        pthread_mutex_lock(&st->lock);
        st->total_items = st->evictions = st->reclaimed = 0;
        st->expired_unfetched = st->get_expired = st->get_flushed = 0;
        pthread_mutex_unlock(&st->lock);
    }
}

/* ---- life cycle --------------------------------------------------------- */

struct store *
store_new(const struct store_config *cfg)
{
    struct store *s = NULL;
    pthread_condattr_t ca;
    uint32_t i, inited = 0;

    if (posix_memalign((void **)&s, 64, sizeof(*s)) != 0)
        return NULL;
    memset(s, 0, sizeof(*s));
    s->mem_limit = cfg->mem_limit;
    s->item_size_max = cfg->item_size_max;
    s->seed_bits = (uint64_t)cfg->node_seed << 48;
    s->cas_next = 1;
    for (i = 0; i < STRIPES; i++) {
        struct stripe *st = &s->stripes[i];

        st->buckets = calloc(INIT_BUCKETS, sizeof(*st->buckets));
        if (st->buckets == NULL)
            goto fail;
        pthread_mutex_init(&st->lock, NULL);
        st->mask = INIT_BUCKETS - 1;
        st->tail_bump = TAIL_EMPTY;
        inited++;
    }
    s->nbuckets_total = (uint64_t)STRIPES * INIT_BUCKETS;
    pthread_mutex_init(&s->flush_lock, NULL);
    pthread_mutex_init(&s->sweep_lock, NULL);
    pthread_mutex_init(&s->copy_lock, NULL);
    pthread_mutex_init(&s->track_lock, NULL);
    pthread_mutex_init(&s->sweeper_mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->sweeper_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (cfg->sweeper) {
        if (pthread_create(&s->sweeper, NULL, sweeper_main, s) != 0) {
            store_free(s);
            return NULL;
        }
        s->sweeper_on = true;
    }
    return s;

fail:
    for (i = 0; i < inited; i++) {
        pthread_mutex_destroy(&s->stripes[i].lock);
        free(s->stripes[i].buckets);
    }
    free(s);
    return NULL;
}

void
store_free(struct store *s)
{
    uint32_t i, b;

    if (s == NULL)
        return;
    if (s->sweeper_on) {
        pthread_mutex_lock(&s->sweeper_mu);
        s->sweeper_stop = true;
        pthread_cond_signal(&s->sweeper_cv);
        pthread_mutex_unlock(&s->sweeper_mu);
        pthread_join(s->sweeper, NULL);
    }
    track_clear(s, false);
    for (i = 0; i < STRIPES; i++) {
        struct stripe *st = &s->stripes[i];

        for (b = 0; b <= st->mask; b++) {
            while (st->buckets[b] != NULL)
                do_unlink(s, st, st->buckets[b], &st->buckets[b]);
        }
        free(st->buckets);
        pthread_mutex_destroy(&st->lock);
    }
    pthread_mutex_destroy(&s->flush_lock);
    pthread_mutex_destroy(&s->sweep_lock);
    pthread_mutex_destroy(&s->copy_lock);
    pthread_mutex_destroy(&s->track_lock);
    pthread_mutex_destroy(&s->sweeper_mu);
    pthread_cond_destroy(&s->sweeper_cv);
    free(s);
}
