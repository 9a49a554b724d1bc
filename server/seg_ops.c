/*
 * seg_ops: the compact engine's keyed operations after a write (get,
 * delete, touch, state bits), the handoff's walk and the stats. Each runs
 * under the key's stripe lock; seg.c has the segments, writes and
 * eviction, seg_index.c the index.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "server/seg.h"
#include "server/seg_internal.h"

/* atime moves at most once per this many seconds after the first fetch
 * (as the store and memcached). */
#define BUMP_SECONDS 60
#define FREQ_MAX     3u

/*
 * The prologue of a keyed operation: lock the key's stripe and find its
 * live record (decoded into r). A dead one is unlinked on the way (an
 * expired one reported to the drop hook). Returns with the lock held; the
 * slot, or NULL.
 */
static uint64_t *
lock_find_why(struct seg *s, struct seg_stripe *st, const char *key, size_t nkey, uint64_t hash,
              int64_t now, uint64_t floor, struct seg_rec *r, size_t *sz, int *why)
{
    uint64_t *slot;

    pthread_mutex_lock(&st->lock);
    slot = do_index_find(s, st, key, nkey, hash, r, sz);
    if (slot == NULL) {
        return NULL;
    }
    if (seg_rec_dead(r, now, floor)) {
        *why = r->cas < floor ? SEG_GONE_FLUSHED : SEG_GONE_EXPIRED;
        if (r->cas >= floor && s->cfg.drop != NULL) {
            s->cfg.drop(s->cfg.drop_arg, hash, r, true);
        }
        do_seg_unlink(s, st, slot, *sz);
        return NULL;
    }
    return slot;
}

static uint64_t *
lock_find(struct seg *s, struct seg_stripe *st, const char *key, size_t nkey, uint64_t hash,
          int64_t now, uint64_t floor, struct seg_rec *r, size_t *sz)
{
    int why;

    return lock_find_why(s, st, key, nkey, hash, now, floor, r, sz, &why);
}

/* See seg.h. cb sees the record as it was before this read counted. */
int
seg_get(struct seg *s, const char *key, size_t nkey, uint64_t hash, int64_t now, uint64_t floor,
        unsigned how, seg_item_fn cb, void *arg)
{
    struct seg_stripe *st = seg_stripe(s, hash);
    struct seg_rec     r;
    size_t             sz;
    int                why = SEG_MISS;
    uint64_t          *slot = lock_find_why(s, st, key, nkey, hash, now, floor, &r, &sz, &why);
    unsigned           f;

    if (slot == NULL) {
        pthread_mutex_unlock(&st->lock);
        return how & SEG_GET_WHY ? why : SEG_MISS;
    }
    f = slot_freq(*slot);
    if (cb != NULL) {
        cb(arg, &r, hash, f);
    }
    if (how & SEG_GET_FETCH) {
        uint8_t *rec = seg_rec_at(s, slot_seg(*slot), slot_off(*slot));

        if (f < FREQ_MAX) {
            *slot = slot_with_freq(*slot, f + 1);
        }
        if (!(r.bits & SEG_RB_FETCHED) || now - (int64_t)r.atime >= BUMP_SECONDS) {
            seg_rec_set_atime(rec, r.nbytes, (uint32_t)now);
            seg_rec_set_bits(rec, SEG_RB_FETCHED, 0);
        }
    }
    pthread_mutex_unlock(&st->lock);
    return SEG_OK;
}

/* See seg.h. */
int
seg_delete(struct seg *s, const char *key, size_t nkey, uint64_t hash, int64_t now, uint64_t floor,
           seg_check_fn check, void *arg)
{
    struct seg_stripe *st = seg_stripe(s, hash);
    struct seg_rec     r;
    size_t             sz;
    uint64_t          *slot = lock_find(s, st, key, nkey, hash, now, floor, &r, &sz);
    int                rc = SEG_OK;

    if (slot == NULL) {
        rc = SEG_MISS;
    } else if (check != NULL && !check(arg, &r)) {
        rc = SEG_REFUSED;
    } else {
        do_seg_unlink(s, st, slot, sz);
    }
    pthread_mutex_unlock(&st->lock);
    return rc;
}

/* seg_touch's build: a copy of the record with the new exptime (the
 * same CAS, value and state). */
static int
touch_build(void *arg, const struct seg_rec *old, struct seg_rec *nr)
{
    if (old == NULL) {
        return SEG_BUILD_KEEP;
    }
    *nr = *old;
    nr->exptime = *(const uint32_t *)arg;
    return SEG_BUILD_WRITE;
}

/* See seg.h. */
int
seg_touch(struct seg *s, const char *key, size_t nkey, uint64_t hash, int64_t now, uint64_t floor,
          uint32_t exptime)
{
    struct seg_stripe *st = seg_stripe(s, hash);
    struct seg_rec     r;
    size_t             sz;
    uint64_t          *slot = lock_find(s, st, key, nkey, hash, now, floor, &r, &sz);
    int                rc;

    if (slot == NULL || (r.bits & SEG_RB_EXPTIME) || exptime == 0) {
        if (slot != NULL && (r.bits & SEG_RB_EXPTIME)) {
            seg_rec_set_exptime(seg_rec_at(s, slot_seg(*slot), slot_off(*slot)), r.nbytes, exptime);
        }
        pthread_mutex_unlock(&st->lock);
        return slot != NULL ? SEG_OK : SEG_MISS;
    }
    pthread_mutex_unlock(&st->lock);
    /* No exptime field: write a copy that has one (a record never grows
     * in place). */
    rc = seg_update(s, key, nkey, hash, now, floor, touch_build, &exptime);
    return rc == SEG_REFUSED ? SEG_MISS : rc;
}

/* See seg.h. */
int
seg_set_state(struct seg *s, const char *key, size_t nkey, uint64_t hash, int64_t now,
              uint64_t floor, uint8_t set, uint8_t clear)
{
    struct seg_stripe *st = seg_stripe(s, hash);
    struct seg_rec     r;
    size_t             sz;
    uint64_t          *slot = lock_find(s, st, key, nkey, hash, now, floor, &r, &sz);

    if (slot != NULL) {
        seg_rec_set_bits(seg_rec_at(s, slot_seg(*slot), slot_off(*slot)),
                         (uint8_t)(set & SEG_RB_STATE), (uint8_t)(clear & SEG_RB_STATE));
    }
    pthread_mutex_unlock(&st->lock);
    return slot != NULL ? SEG_OK : SEG_MISS;
}

/* Whether a used slot's tag is in the prefix map (NULL: all are). */
static inline bool
prefix_in(const uint64_t *pm, uint64_t v)
{
    uint32_t t = slot_tag(v);

    return pm == NULL || (pm[t / 64] >> (t % 64) & 1) != 0;
}

/* How many slots ahead a walk prefetches the record: each record is a
 * cache miss of its own (slots are in hash order, records in write order),
 * and a walk that waits for one at a time is bound by memory latency. */
#define WALK_PREFETCH 8

/* Hand the records of one stripe to cb under its lock: the live ones
 * (live, at now and floor) or those with a CAS below `below`, dead or not.
 * Dead records are skipped, not unlinked: an unlink shifts slots back over
 * the walk's position. The record WALK_PREFETCH slots ahead is prefetched
 * while this one is read (store_bench's store_walk_ns_per_item). A slot
 * whose tag is not in pm (when given) is passed over unread. */
static long
walk_stripe(struct seg *s, uint32_t stripe, bool live, int64_t now, uint64_t below,
            const uint64_t *pm, seg_item_fn cb, void *arg)
{
    struct seg_stripe *st = &s->stripes[stripe & SEG_STRIPE_MASK];
    long               n = 0;
    uint32_t           i;

    pthread_mutex_lock(&st->lock);
    for (i = 0; i < st->nslots; i++) {
        uint64_t       v = st->slots[i];
        uint64_t       w = i + WALK_PREFETCH < st->nslots ? st->slots[i + WALK_PREFETCH] : 0;
        struct seg_rec r;

        if ((w & SLOT_USED) && prefix_in(pm, w)) {
            __builtin_prefetch(seg_rec_at(s, slot_seg(w), slot_off(w)));
        }
        if (!(v & SLOT_USED) || !prefix_in(pm, v)) {
            continue;
        }
        seg_rec_decode(seg_rec_at(s, slot_seg(v), slot_off(v)), &r);
        if (live ? seg_rec_dead(&r, now, below) : r.cas >= below) {
            continue;
        }
        n++;
        if (cb(arg, &r, XXH3_64bits(r.key, r.nkey), slot_freq(v)) != 0) {
            break;
        }
    }
    pthread_mutex_unlock(&st->lock);
    return n;
}

/* See seg.h. */
long
seg_walk(struct seg *s, uint32_t stripe, seg_item_fn cb, void *arg)
{
    return walk_stripe(s, stripe, true, eng_now(s), eng_floor(s), NULL, cb, arg);
}

/* See seg.h. */
long
seg_walk_prefixes(struct seg *s, uint32_t stripe, const uint64_t *prefixes, seg_item_fn cb,
                  void *arg)
{
    return walk_stripe(s, stripe, true, eng_now(s), eng_floor(s), prefixes, cb, arg);
}

/* See seg.h. */
long
seg_walk_below(struct seg *s, uint32_t stripe, uint64_t below, const uint64_t *prefixes,
               seg_item_fn cb, void *arg)
{
    return walk_stripe(s, stripe, false, 0, below, prefixes, cb, arg);
}

/* See seg.h. */
void
seg_stripe_barrier(struct seg *s, uint32_t stripe)
{
    struct seg_stripe *st = &s->stripes[stripe & SEG_STRIPE_MASK];

    pthread_mutex_lock(&st->lock);
    pthread_mutex_unlock(&st->lock);
}

/* See seg.h. */
void
seg_stats(struct seg *s, struct seg_stats *out)
{
    uint32_t i;

    memset(out, 0, sizeof(*out));
    for (i = 0; i < SEG_STRIPES; i++) {
        struct seg_stripe *st = &s->stripes[i];

        pthread_mutex_lock(&st->lock);
        out->items += st->count;
        out->index_slots += st->nslots;
        pthread_mutex_unlock(&st->lock);
    }
    out->index_bytes = out->index_slots * sizeof(uint64_t);
    pthread_mutex_lock(&s->heap_mu);
    for (i = 0; i < 2 * s->nsegs; i++) { /* the heap's segments, then the jumbos */
        uint8_t qn = s->meta[i].queue;

        out->live_bytes += __atomic_load_n(&s->meta[i].live_bytes, __ATOMIC_RELAXED);
        out->segs_open += qn == SQ_OPEN || qn == SQ_MAINOPEN;
    }
    out->segs_total = s->nsegs;
    out->segs_free = s->nfree;
    out->segs_small = s->q_count[QI_SMALL];
    out->segs_main = s->q_count[QI_MAIN];
    out->jumbos = s->njumbo;
    out->segs_held = s->nheld;
    out->segs_withheld = s->nwithheld;
    pthread_mutex_unlock(&s->heap_mu);
    out->evictions = __atomic_load_n(&s->evictions, __ATOMIC_RELAXED);
    out->reclaimed = __atomic_load_n(&s->reclaimed, __ATOMIC_RELAXED);
    out->moved = __atomic_load_n(&s->moved, __ATOMIC_RELAXED);
}
