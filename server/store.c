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

enum dead { LIVE = 0, DEAD_EXPIRED, DEAD_FLUSHED };

_Static_assert(offsetof(struct store_item, data) == 60, "item header is 60 bytes");

struct stripe {
    pthread_mutex_t lock;
    struct store_item **buckets;
    uint32_t mask;                    /* buckets - 1 */
    uint32_t count;                   /* linked items */
    struct store_item *lru_head, *lru_tail;
    uint32_t tail_bump;               /* atomic: lru_tail->bump or TAIL_EMPTY */
    uint64_t bytes;                   /* charged bytes of linked items */
    uint64_t total_items, evictions, reclaimed, expired_unfetched,
             get_expired, get_flushed;
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

/* Double the stripe's bucket array when the load factor passes 1.5. On
 * ENOMEM the table keeps its size: longer chains, still correct. */
static void
do_maybe_grow(struct store *s, struct stripe *st)
{
    uint32_t n = st->mask + 1, i;
    struct store_item **nb;

    if ((uint64_t)st->count * 2 <= (uint64_t)n * 3 || n >= MAX_BUCKETS)
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

    __atomic_store_n(&s->gen, g, __ATOMIC_RELEASE);
    if ((g & GEN_WALK_MASK) == 0)
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
static bool
evict_one(struct store *s, int64_t now)
{
    uint32_t start, i, found = 0, best_age = 0;
    uint8_t m = minute8(now);
    struct stripe *best = NULL;
    struct store_item *it;
    enum dead why;

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
        return false;
    pthread_mutex_lock(&best->lock);
    it = best->lru_tail;
    if (it != NULL) {
        why = item_dead(it, now, do_gen(s));
        if (why != LIVE) {
            do_reclaim(s, best, it, why, NULL);
        } else {
            best->evictions++;
            do_unlink(s, best, it, NULL);
        }
    }
    pthread_mutex_unlock(&best->lock);
    return true;
}

/* Reserve size bytes against the limit, evicting as needed. */
static int
mem_reserve(struct store *s, size_t size, int64_t now)
{
    unsigned empty = 0;
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
        if (!evict_one(s, now) && ++empty > 3)
            return STORE_NO_MEMORY;
        cur = __atomic_load_n(&s->mem_used, __ATOMIC_RELAXED);
    }
}

struct store_item *
store_alloc(struct store *s, const char *key, size_t nkey, uint64_t hash,
            uint32_t flags, int64_t exptime, size_t nbytes, int *err)
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
    rc = mem_reserve(s, size, store_now(s));
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
        if (touch)
            it->exptime = time32(exptime);
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
        it->exptime = time32(exptime);
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
        pthread_mutex_unlock(&st->lock);
    }
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
    pthread_mutex_destroy(&s->sweeper_mu);
    pthread_cond_destroy(&s->sweeper_cv);
    free(s);
}
