/*
 * store_evict: the item store's eviction policy, S3-FIFO (Yang et al.,
 * SOSP'23) per lock stripe: a small FIFO that filters out keys read once,
 * a main FIFO with two bits of read frequency (CLOCK), and one ghost table
 * of recently evicted keys' hashes. Across stripes, eviction samples a few,
 * decides from them which FIFO to evict from, and takes the stripe whose
 * tail there is oldest. See docs/store.md for the measurements that chose
 * it; store_internal.h for the layout.
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "server/store.h"
#include "server/store_internal.h"

/* Eviction samples this many non-empty stripes: an approximate global
 * policy without a global list. */
#define EVICT_SAMPLE 16u

/* The small FIFOs' share of the sampled stripes' bytes above which
 * eviction takes from them, in tenths (S3-FIFO: 10%). */
#define SMALL_TENTHS 1u

/* Reads an item needs while in the small FIFO to move to the main one. */
#define PROMOTE_READS 1u

/* Ghost slots per byte of the memory limit: one per 256 bytes, about the
 * number of items the limit holds at 256-byte items (S3-FIFO keeps as many
 * ghosts as the main FIFO has items), 4 bytes each (1.6% of the limit). */
#define GHOST_BYTES_PER_SLOT 256u
#define GHOST_MIN_SLOTS      4096u
#define GHOST_MAX_SLOTS      (1u << 28)

/* Change a stripe's small_bytes (its lock held; the sampler reads it). */
static inline void
small_add(struct stripe *st, int64_t d)
{
    __atomic_store_n(&st->small_bytes, st->small_bytes + (uint64_t)d, __ATOMIC_RELAXED);
}

/* ---- the ghost table ---------------------------------------------------- */

/* A direct-mapped table of 32-bit fingerprints: a slot keeps the last key
 * evicted from a small FIFO that hashed there, so an entry lives until
 * about as many later evictions as there are slots. A false match (two
 * keys, one slot, same fingerprint) only admits a key to the main FIFO a
 * lap early. Slots are relaxed atomics, written under the evicting
 * stripe's lock; two stripes may race on a slot, and either write wins. */

static inline uint32_t
ghost_fp(uint64_t hash)
{
    return (uint32_t)(hash >> 32) | 1u; /* never 0, the empty slot */
}

static inline uint32_t *
ghost_slot(struct store *s, uint64_t hash)
{
    return &s->ghost[(uint32_t)(hash >> STRIPE_BITS) & s->ghost_mask];
}

static void
ghost_put(struct store *s, uint64_t hash)
{
    __atomic_store_n(ghost_slot(s, hash), ghost_fp(hash), __ATOMIC_RELAXED);
    if (!__atomic_load_n(&s->ghost_used, __ATOMIC_RELAXED)) {
        __atomic_store_n(&s->ghost_used, true, __ATOMIC_RELAXED);
    }
}

/* True when the hash was in the ghost table; takes it out. */
static bool
ghost_take(struct store *s, uint64_t hash)
{
    uint32_t *slot = ghost_slot(s, hash);

    /* Until the first eviction the table is empty: its pages stay
     * untouched (a store that never fills costs nothing for it). */
    if (!__atomic_load_n(&s->ghost_used, __ATOMIC_RELAXED) ||
        __atomic_load_n(slot, __ATOMIC_RELAXED) != ghost_fp(hash)) {
        return false;
    }
    __atomic_store_n(slot, 0, __ATOMIC_RELAXED);
    return true;
}

/* See store_internal.h. */
int
store_ghost_init(struct store *s)
{
    size_t   want = s->mem_limit / GHOST_BYTES_PER_SLOT;
    uint32_t n = GHOST_MIN_SLOTS;

    while (n < want && n < GHOST_MAX_SLOTS) {
        n <<= 1;
    }
    s->ghost = calloc(n, sizeof(*s->ghost));
    if (s->ghost == NULL) {
        return -1;
    }
    s->ghost_mask = n - 1;
    return 0;
}

/* See store_internal.h. */
void
store_ghost_free(struct store *s)
{
    free(s->ghost);
    s->ghost = NULL;
}

/* ---- the two FIFOs (caller holds the stripe lock) ----------------------- */

static void q_remove(struct stripe *st, enum queue q, struct store_item *it);
static void q_push(struct stripe *st, enum queue q, struct store_item *it);

/* Publish the atime of each FIFO's tail (or TAIL_EMPTY) for
 * store_evict_one's sampling. Small-FIFO tails that were read move to the
 * main FIFO first, as eviction would move them: so the candidate published
 * is one eviction would take, and a read key at the tail does not make a
 * stripe of old keys look young. */
static void
do_publish_tail(struct stripe *st)
{
    const struct store_item *t;

    while ((t = st->q_tail[Q_SMALL]) != NULL && (t->gen & IF_FREQ) >= PROMOTE_READS) {
        struct store_item *it = st->q_tail[Q_SMALL];

        q_remove(st, Q_SMALL, it);
        small_add(st, -(int64_t)item_charge(it));
        it->gen |= IF_MAIN;
        q_push(st, Q_MAIN, it);
    }
    t = st->q_tail[Q_SMALL];
    __atomic_store_n(&st->tail_atime[Q_SMALL], t != NULL ? t->atime : TAIL_EMPTY, __ATOMIC_RELAXED);
    t = st->q_tail[Q_MAIN];
    __atomic_store_n(&st->tail_atime[Q_MAIN], t != NULL ? t->atime : TAIL_EMPTY, __ATOMIC_RELAXED);
}

static void
q_remove(struct stripe *st, enum queue q, struct store_item *it)
{
    if (it->lru_prev != NULL) {
        it->lru_prev->lru_next = it->lru_next;
    } else {
        st->q_head[q] = it->lru_next;
    }
    if (it->lru_next != NULL) {
        it->lru_next->lru_prev = it->lru_prev;
    } else {
        st->q_tail[q] = it->lru_prev;
    }
    it->lru_prev = it->lru_next = NULL;
}

static void
q_push(struct stripe *st, enum queue q, struct store_item *it)
{
    it->lru_prev = NULL;
    it->lru_next = st->q_head[q];
    if (st->q_head[q] != NULL) {
        st->q_head[q]->lru_prev = it;
    } else {
        st->q_tail[q] = it;
    }
    st->q_head[q] = it;
}

static inline enum queue
queue_of(const struct store_item *it)
{
    return (it->gen & IF_MAIN) ? Q_MAIN : Q_SMALL;
}

/* See store_internal.h. */
void
do_queue_add(struct store *s, struct stripe *st, struct store_item *it)
{
    if (!(it->gen & IF_MAIN) && ghost_take(s, it->hash)) {
        it->gen |= IF_MAIN;
    }
    if (!(it->gen & IF_MAIN)) {
        small_add(st, (int64_t)item_charge(it));
    }
    q_push(st, queue_of(it), it);
    do_publish_tail(st);
}

/* See store_internal.h. */
void
do_queue_del(struct stripe *st, struct store_item *it)
{
    q_remove(st, queue_of(it), it);
    if (!(it->gen & IF_MAIN)) {
        small_add(st, -(int64_t)item_charge(it));
    }
    do_publish_tail(st);
}

/*
 * Evict or reclaim one item of a stripe (caller holds its lock) from FIFO
 * q (the other one if q is empty). A small tail read PROMOTE_READS times
 * moves to the main FIFO instead, keeping its reads (a lap more each
 * there); one read less leaves, its hash kept as a ghost. A main tail with
 * reads goes round again with one read less. When it moved an item, it
 * returns EV_MOVED instead of removing one: the candidate the caller chose
 * is gone, and the next one competes with the other stripes' again. A dead
 * tail (expired or flushed) is reclaimed instead; a tail held by a reader
 * is unlinked all the same (its bytes come back with the last reference).
 */
static enum evicted
do_evict_stripe(struct store *s, struct stripe *st, int64_t now, enum queue q)
{
    struct store_item *it = st->q_tail[q];
    enum dead          why;
    uint16_t           f;

    if (it == NULL) {
        q = q == Q_SMALL ? Q_MAIN : Q_SMALL;
        if ((it = st->q_tail[q]) == NULL) {
            return EV_NONE;
        }
    }
    why = item_dead(it, now, do_floor(s));
    if (why != LIVE) {
        __atomic_fetch_add(&s->evicted_bytes, item_charge(it), __ATOMIC_RELAXED);
        do_reclaim(s, st, it, why, NULL);
        return EV_RECLAIMED;
    }
    f = it->gen & IF_FREQ;
    if (q == Q_SMALL && f >= PROMOTE_READS) {
        q_remove(st, Q_SMALL, it);
        small_add(st, -(int64_t)item_charge(it));
        it->gen |= IF_MAIN;
        q_push(st, Q_MAIN, it);
        do_publish_tail(st);
        return EV_MOVED;
    }
    if (q == Q_MAIN && f > 0) {
        it->gen--;
        q_remove(st, Q_MAIN, it);
        q_push(st, Q_MAIN, it);
        do_publish_tail(st);
        return EV_MOVED;
    }
    if (q == Q_SMALL) {
        ghost_put(s, it->hash);
    }
    st->evictions++;
    __atomic_fetch_add(&s->evicted_bytes, item_charge(it), __ATOMIC_RELAXED);
    do_report_drop(s, it);
    do_unlink(s, st, it, NULL);
    return EV_EVICTED;
}

/*
 * See store_internal.h. Samples EVICT_SAMPLE non-empty stripes: their small
 * FIFOs' share of their bytes says which FIFO to evict from (the small one
 * while over SMALL_TENTHS, as S3-FIFO over the whole cache), and the
 * stripe with the oldest tail in that FIFO gives the item (on a tie, the
 * one with more bytes). The caller holds no stripe lock, so blocking on
 * the chosen one cannot deadlock. EV_NONE when every stripe is empty (what
 * is left is held by readers or being built).
 */
enum evicted
store_evict_one(struct store *s, int64_t now)
{
    struct stripe *pick[EVICT_SAMPLE];
    uint32_t       start, i, found = 0, best_age = 0;
    uint32_t       m = time32(now);
    uint64_t       sb = 0, b = 0, best_bytes = 0;
    struct stripe *best = NULL;
    enum queue     q;
    enum evicted   rc;

    start = __atomic_fetch_add(&s->evict_cursor, EVICT_SAMPLE, __ATOMIC_RELAXED);
    for (i = 0; i < STRIPES && found < EVICT_SAMPLE; i++) {
        struct stripe *st = &s->stripes[(start + i) & STRIPE_MASK];

        if (__atomic_load_n(&st->tail_atime[Q_SMALL], __ATOMIC_RELAXED) == TAIL_EMPTY &&
            __atomic_load_n(&st->tail_atime[Q_MAIN], __ATOMIC_RELAXED) == TAIL_EMPTY) {
            continue;
        }
        pick[found++] = st;
        sb += __atomic_load_n(&st->small_bytes, __ATOMIC_RELAXED);
        b += __atomic_load_n(&st->bytes, __ATOMIC_RELAXED);
    }
    if (found == 0) {
        return EV_NONE;
    }
    q = sb * 10 > b * SMALL_TENTHS ? Q_SMALL : Q_MAIN;
    for (i = 0; i < found; i++) {
        struct stripe *st = pick[i];
        uint32_t       a = __atomic_load_n(&st->tail_atime[q], __ATOMIC_RELAXED), age;
        uint64_t       qb;

        if (a == TAIL_EMPTY) {
            continue;
        }
        age = m - a; /* seconds since the tail was stored or read (mod 2^32) */
        qb = __atomic_load_n(&st->bytes, __ATOMIC_RELAXED);
        if (best == NULL || age > best_age || (age == best_age && qb > best_bytes)) {
            best = st;
            best_age = age;
            best_bytes = qb;
        }
    }
    if (best == NULL) {
        best = pick[0]; /* no stripe of the sample has q: the other one */
    }
    pthread_mutex_lock(&best->lock);
    rc = do_evict_stripe(s, best, now, q);
    pthread_mutex_unlock(&best->lock);
    /* The stripe emptied since the sample: mem_reserve looks again (it
     * gets EV_NONE only when the sample finds every stripe empty). */
    return rc == EV_NONE ? EV_RECLAIMED : rc;
}
