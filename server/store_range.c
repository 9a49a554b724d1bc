/*
 * store_range: the operations of the item store that visit many items
 * instead of one key: the expiry sweep (and its background thread) and the
 * handoff's range primitives, walk, count and purge. Each holds one stripe
 * lock at a time, for a bounded number of buckets. See store.h for the API,
 * store_internal.h for the layout it shares with store.c.
 */
#include "config.h"

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "server/store.h"
#include "server/store_internal.h"

/* Bounded lock hold of the sweep, in buckets. */
#define SWEEP_SLICE   256u
#define SWEEP_TICK_MS 200
#define SWEEP_MIN     1024u
#define SWEEP_MAX     65536u

/* A walk or purge call reads at most this many buckets beyond
 * WALK_BUCKETS_PER_ITEM per requested item, so a range that matches little
 * still costs a bounded time per call. */
#define WALK_BUCKETS          4096u
#define WALK_BUCKETS_PER_ITEM 4u

/* ---- sweep -------------------------------------------------------------- */

size_t
store_sweep(struct store *s, size_t max_buckets)
{
    size_t  reclaimed = 0;
    int64_t now = clock_begin(s);

    if (s->seg != NULL) {
        return 0; /* the compact engine reclaims a segment's dead records as it evicts it */
    }
    pthread_mutex_lock(&s->sweep_lock);
    while (max_buckets > 0) {
        struct stripe *st = &s->stripes[s->sweep_stripe];
        uint32_t       slice = SWEEP_SLICE;
        uint64_t       floor;

        pthread_mutex_lock(&st->lock);
        floor = do_floor(s);
        if (s->sweep_bucket > st->mask) {
            s->sweep_bucket = 0;
        }
        while (max_buckets > 0 && slice > 0 && s->sweep_bucket <= st->mask) {
            struct store_item **pp = &st->buckets[s->sweep_bucket], *it;

            while ((it = *pp) != NULL) {
                enum dead why = item_dead(it, now, floor);

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
/*
 * Give free heap pages back to the system once evictions have freed a
 * share of the limit (TRIM_EVICTED_SHARE) and TRIM_SECONDS have passed:
 * under churn at the limit, items freed in an order other than the one
 * they were allocated in leave free pages between live items, which
 * malloc keeps; malloc_trim releases every whole free page (measured:
 * 94 to 81 MB RSS after an 8 KB flood at -m 64). It holds the arena lock
 * for a walk of the free chunks, so it runs here, off the workers.
 */
static void
sweeper_trim(struct store *s)
{
    static __thread int64_t last;
    uint64_t                ev = __atomic_load_n(&s->evicted_bytes, __ATOMIC_RELAXED);
    int64_t                 now = store_now(s);

    if (ev - s->trimmed_at <
            __atomic_load_n(&s->mem_limit, __ATOMIC_RELAXED) / TRIM_EVICTED_SHARE ||
        now - last < TRIM_SECONDS) {
        return;
    }
    s->trimmed_at = ev;
    last = now;
    malloc_trim(0);
}

void *
store_sweeper_main(void *arg)
{
    struct store   *s = arg;
    struct timespec ts;

    pthread_mutex_lock(&s->sweeper_mu);
    while (!s->sweeper_stop) {
        uint64_t total = __atomic_load_n(&s->nbuckets_total, __ATOMIC_RELAXED);
        size_t   slice = (size_t)(total / 50);

        if (slice < SWEEP_MIN) {
            slice = SWEEP_MIN;
        }
        if (slice > SWEEP_MAX) {
            slice = SWEEP_MAX;
        }
        pthread_mutex_unlock(&s->sweeper_mu);
        store_sweep(s, slice);
        sweeper_trim(s);
        pthread_mutex_lock(&s->sweeper_mu);
        if (s->sweeper_stop) {
            break;
        }
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

/* Spend one bucket of a walk's or purge's budget and move v on to the
 * next bucket; true when that was the stripe's last. */
static inline bool
cursor_step(uint32_t *v, uint32_t mask, size_t *budget)
{
    (*budget)--;
    *v = cursor_next(*v, mask);
    return *v == 0;
}

/* A growable array of item references collected under a stripe lock. */
struct refs {
    struct store_item **v;
    size_t              n, cap;
};

static bool
refs_reserve(struct refs *r, size_t more)
{
    size_t              cap = r->cap != 0 ? r->cap : 64;
    struct store_item **nv;

    if (r->n + more <= r->cap) {
        return true;
    }
    while (cap < r->n + more) {
        cap *= 2;
    }
    nv = realloc(r->v, cap * sizeof(*nv));
    if (nv == NULL) {
        return false;
    }
    r->v = nv;
    r->cap = cap;
    return true;
}

/* Bucket visits a walk or purge call may spend: enough to find max_items
 * in a sparse table, bounded so that a call stays short. */
static size_t
walk_budget(size_t max_items)
{
    return WALK_BUCKETS + (max_items < SIZE_MAX / WALK_BUCKETS_PER_ITEM
                               ? max_items * WALK_BUCKETS_PER_ITEM
                               : SIZE_MAX / 2);
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

/* A live item inside the prefix map pm that the predicate (NULL: every
 * item) selects; caller holds the stripe lock. */
static inline bool
do_selected(const struct store_item *it, const uint64_t *pm, store_hash_pred pred, void *arg,
            int64_t now, uint64_t floor)
{
    return item_dead(it, now, floor) == LIVE && store_prefix_has(pm, it->hash) &&
           (pred == NULL || pred(it->hash, arg));
}

/* Matching live items of one bucket. */
static size_t
do_bucket_matches(struct stripe *st, uint32_t b, const uint64_t *pm, store_hash_pred pred,
                  void *arg, int64_t now, uint64_t floor)
{
    struct store_item *it;
    size_t             n = 0;

    for (it = st->buckets[b]; it != NULL; it = it->h_next) {
        if (do_selected(it, pm, pred, arg, now, floor)) {
            n++;
        }
    }
    return n;
}

int
store_walk(struct store *s, struct store_cursor *cur, store_hash_pred pred, void *arg,
           store_walk_fn fn, void *fn_arg, size_t max_items)
{
    struct refs r = { NULL, 0, 0 };
    size_t      visited = 0, budget, i;
    int         rc = 0;

    if (max_items == 0) {
        max_items = 1;
    }
    if (s->seg != NULL) {
        return sg_walk(s, cur, pred, arg, fn, fn_arg, max_items);
    }
    budget = walk_budget(max_items);
    pthread_mutex_lock(&s->copy_lock);
    while (cur->stripe < STRIPES && visited < max_items && budget > 0) {
        struct stripe *st = &s->stripes[cur->stripe];
        int64_t        now = clock_begin(s);
        uint32_t       v = cur->bucket;
        uint64_t       floor;
        bool           stripe_done = false, full = false;

        r.n = 0;
        pthread_mutex_lock(&st->lock);
        floor = do_floor(s);
        while (budget > 0 && visited + r.n < max_items) {
            uint32_t           b = v & st->mask;
            size_t             m = do_bucket_matches(st, b, cur->prefixes, pred, arg, now, floor);
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
                if (do_selected(it, cur->prefixes, pred, arg, now, floor)) {
                    item_ref(it);
                    r.v[r.n++] = it;
                }
            }
            stripe_done = cursor_step(&v, st->mask, &budget);
            if (stripe_done) {
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
        if (rc < 0 || full) {
            break;
        }
    }
    pthread_mutex_unlock(&s->copy_lock);
    free(r.v);
    if (rc < 0) {
        return rc;
    }
    return cur->stripe < STRIPES ? 1 : 0;
}

int
store_count_step(struct store *s, uint32_t *stripe, store_hash_pred pred, void *arg,
                 const uint64_t *prefixes, size_t max_items, uint64_t *items, uint64_t *bytes)
{
    size_t   read = 0;
    uint32_t b;

    if (s->seg != NULL) {
        return sg_count_step(s, stripe, pred, arg, prefixes, max_items, items, bytes);
    }
    while (*stripe < STRIPES && read < max_items) {
        struct stripe *st = &s->stripes[*stripe];
        int64_t        now = clock_begin(s);
        uint64_t       floor;

        pthread_mutex_lock(&st->lock);
        floor = do_floor(s);
        for (b = 0; b <= st->mask; b++) {
            struct store_item *it;

            for (it = st->buckets[b]; it != NULL; it = it->h_next) {
                read++;
                if (do_selected(it, prefixes, pred, arg, now, floor)) {
                    (*items)++;
                    *bytes += item_charge(it);
                }
            }
        }
        pthread_mutex_unlock(&st->lock);
        (*stripe)++;
    }
    return *stripe < STRIPES ? 1 : 0;
}

void
store_count(struct store *s, store_hash_pred pred, void *arg, const uint64_t *prefixes,
            uint64_t *items, uint64_t *bytes)
{
    uint32_t stripe = 0;

    *items = 0;
    *bytes = 0;
    while (store_count_step(s, &stripe, pred, arg, prefixes, SIZE_MAX, items, bytes) != 0) {
        continue;
    }
}

int
store_purge(struct store *s, store_hash_pred pred, void *arg, size_t max_items,
            struct store_cursor *cur)
{
    size_t purged = 0, budget;

    if (max_items == 0) {
        max_items = 1;
    }
    if (s->seg != NULL) {
        return sg_purge(s, pred, arg, max_items, cur);
    }
    budget = walk_budget(max_items);
    while (cur->stripe < STRIPES && purged < max_items && budget > 0) {
        struct stripe *st = &s->stripes[cur->stripe];
        uint32_t       v = cur->bucket;
        bool           stripe_done = false;

        clock_begin(s);
        pthread_mutex_lock(&st->lock);
        while (budget > 0 && purged < max_items) {
            struct store_item **pp = &st->buckets[v & st->mask], *it;

            /* Unlinking is final, so stopping inside a bucket is fine:
             * the next call reads it again and finds only the rest. */
            while ((it = *pp) != NULL && purged < max_items) {
                if (store_prefix_has(cur->prefixes, it->hash) &&
                    (pred == NULL || pred(it->hash, arg))) {
                    st->purged++;
                    do_unlink(s, st, it, pp);
                    purged++;
                } else {
                    pp = &it->h_next;
                }
            }
            if (it != NULL) {
                break;
            }
            stripe_done = cursor_step(&v, st->mask, &budget);
            if (stripe_done) {
                break;
            }
        }
        pthread_mutex_unlock(&st->lock);
        cursor_save(cur, v, stripe_done);
    }
    return cur->stripe < STRIPES ? 1 : 0;
}
