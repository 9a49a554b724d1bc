/*
 * store: the node's item store. 1024 lock stripes, each a small hash table of
 * its own with its own eviction queues, resized under its own lock; the hash
 * the caller passes picks the stripe (low bits) and the bucket (bits above).
 * Memory is one atomic byte counter against the limit. This file holds the
 * items, the table, the memory limit and the keyed operations; store_evict.c
 * the eviction policy, store_meta.c the meta protocol's operations,
 * store_range.c the sweep and the range walks, store_track.c dirty tracking
 * and import; store_internal.h what they share. See store.h for the API.
 */
#include "config.h"

#include <errno.h>
#include <malloc.h>
#include <stddef.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/seg.h"
#include "server/store.h"
#include "server/store_internal.h"

_Static_assert(offsetof(struct store_item, data) == 64, "item header is 64 bytes");
_Static_assert(STRIPES == STORE_STRIPES, "store.h names the stripe count");

/* ---- small helpers ---------------------------------------------------- */

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

    if (raw >= STORE_MMAP_THRESHOLD) {
        return (raw + 16 + 4095) & ~(size_t)4095;
    }
    raw = (raw + 8 + 15) & ~(size_t)15;
    return raw < 32 ? 32 : raw;
}

/* Free an item nobody references any more and give its bytes back. */
static void
item_free(struct store *s, struct store_item *it)
{
    if (it->gen & IF_POOLED) {
        sg_item_free(it);
        return;
    }
    if (s->seg == NULL) {
        __atomic_fetch_sub(&s->mem_used, item_charge(it), __ATOMIC_RELAXED);
    }
    free(it);
}

void
store_item_ref(struct store_item *it)
{
    item_ref(it);
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

/* See store.h. The arg is written first so a reader that sees fn sees it;
 * replacing one hook by another while items are dropped may pair the new
 * fn with the old arg once: set it once. */
void
store_set_drop_hook(struct store *s, store_drop_fn fn, void *arg)
{
    __atomic_store_n(&s->drop_arg, arg, __ATOMIC_RELAXED);
    __atomic_store_n(&s->drop_fn, fn, __ATOMIC_RELEASE);
}

/* See store.h. */
void
store_set_mem_limit(struct store *s, size_t bytes)
{
    if (s->seg != NULL) {
        sg_set_mem_limit(s, bytes);
        return;
    }
    __atomic_store_n(&s->mem_limit, bytes, __ATOMIC_RELAXED);
}

int64_t
store_exptime(const struct store *s, int64_t exptime)
{
    int64_t now;

    if (exptime == 0) {
        return 0;
    }
    now = store_now(s);
    if (exptime < 0) {
        return now > 1 ? now - 1 : 1;
    }
    if (exptime <= 2592000) {
        return now + exptime;
    }
    return exptime;
}

/* ---- LRU and hash chains (do_: caller holds the stripe lock) ----------- */

/*
 * Rehash a stripe's chained table of n buckets into a new array of 2n: the
 * item table here and the dirty sets (store_track.c) both grow with it.
 * Each node links through the pointer at link_off and carries its full hash
 * at hash_off, which picks its bucket as bucket_of does, so no key is read.
 * Returns the new array and frees the old one; NULL at MAX_BUCKETS or on
 * ENOMEM, the old one untouched: the table keeps its size, with longer
 * chains, still correct. The nodes are reached through void *, which GCC
 * and Clang let alias every pointer type. Caller holds the stripe lock.
 */
void **
store_chains_double(void **buckets, uint32_t n, size_t link_off, size_t hash_off)
{
    void   **nb;
    uint32_t i;

    if (n >= MAX_BUCKETS) {
        return NULL;
    }
    nb = calloc((size_t)n * 2, sizeof(*nb));
    if (nb == NULL) {
        return NULL;
    }
    for (i = 0; i < n; i++) {
        void *p = buckets[i], *next;

        for (; p != NULL; p = next) {
            void   **link = (void **)((char *)p + link_off);
            uint64_t hash = *(const uint64_t *)((const char *)p + hash_off);
            uint32_t b = (uint32_t)(hash >> STRIPE_BITS) & (n * 2 - 1);

            next = *link;
            *link = nb[b];
            nb[b] = p;
        }
    }
    free(buckets);
    return nb;
}

/* Double the stripe's bucket array when the load factor passes 2. Why 2
 * and not memcached's 1.5: buckets cost 8 bytes each, so the table costs
 * 4-8 bytes per item at 2 against 5.3-10.7 at 1.5 (measured at 1M items:
 * 197.5 against 201.4 bytes of RSS per 100-byte item, store_bench), for
 * chains that stay short (a hit looks at 1.5-2 items on average) and whose
 * items carry their full hash, so a miss in a chain costs no key compare. */
static void
do_maybe_grow(struct store *s, struct stripe *st)
{
    uint32_t n = st->mask + 1;
    void   **nb;

    if ((uint64_t)st->count <= (uint64_t)n * 2) {
        return;
    }
    nb = store_chains_double((void **)st->buckets, n, offsetof(struct store_item, h_next),
                             offsetof(struct store_item, hash));
    if (nb == NULL) {
        return;
    }
    st->buckets = (struct store_item **)nb;
    st->mask = n * 2 - 1;
    __atomic_fetch_add(&s->nbuckets_total, n, __ATOMIC_RELAXED);
}

/* Link an item (caller's reference stays the caller's; the table takes
 * its own). */
void
do_link(struct store *s, struct stripe *st, struct store_item *it)
{
    uint32_t b = bucket_of(st, it->hash);

    do_track(s, st, it);
    item_ref(it);
    it->gen |= IF_LINKED;
    it->h_next = st->buckets[b];
    st->buckets[b] = it;
    st->count++;
    __atomic_store_n(&st->bytes, st->bytes + item_charge(it), __ATOMIC_RELAXED);
    do_queue_add(s, st, it);
    st->total_items++;
    do_maybe_grow(s, st);
}

/* Unlink an item and drop the table's reference; frees it when that was
 * the last one. prevp is its chain link if known, else NULL. */
void
do_unlink(struct store *s, struct stripe *st, struct store_item *it, struct store_item **prevp)
{
    do_track(s, st, it);
    if (prevp == NULL) {
        prevp = &st->buckets[bucket_of(st, it->hash)];
        while (*prevp != it) {
            prevp = &(*prevp)->h_next;
        }
    }
    *prevp = it->h_next;
    it->h_next = NULL;
    do_queue_del(st, it);
    it->gen &= (uint16_t)~IF_LINKED;
    st->count--;
    __atomic_store_n(&st->bytes, st->bytes - item_charge(it), __ATOMIC_RELAXED);
    store_release(s, it);
}

/*
 * Find the live item of a key. A dead one (expired or flushed) is unlinked
 * on the way and counted (get_expired/get_flushed when is_get). Returns a
 * borrowed pointer, valid while the lock is held.
 */
struct store_item *
do_find(struct store *s, struct stripe *st, const char *key, size_t nkey, uint64_t hash,
        int64_t now, bool is_get)
{
    struct store_item **pp = &st->buckets[bucket_of(st, hash)], *it;
    enum dead           why;

    for (; (it = *pp) != NULL; pp = &it->h_next) {
        if (it->hash == hash && it->nkey == nkey && memcmp(it->data, key, nkey) == 0) {
            break;
        }
    }
    if (it == NULL) {
        return NULL;
    }
    why = item_dead(it, now, do_floor(s));
    if (why == LIVE) {
        return it;
    }
    if (is_get) {
        if (why == DEAD_EXPIRED) {
            st->get_expired++;
        } else {
            st->get_flushed++;
        }
    }
    do_reclaim(s, st, it, why, pp);
    return NULL;
}

/* Count an access (up to 3: the eviction policy's frequency bits) and
 * stamp atime at most once a minute: a read (fetch) also marks the item
 * fetched and stamps it on its first fetch whatever the time; an add that
 * finds the key, incr/decr and ma count without the mark (memcached's
 * do_item_update). Touches the item only. */
void
do_lru_move(struct stripe *st, struct store_item *it, int64_t now, bool fetch)
{
    (void)st;
    if ((it->gen & IF_FREQ) != IF_FREQ) {
        it->gen++;
    }
    if ((!fetch || (it->gen & IF_FETCHED)) && now - (int64_t)it->atime < BUMP_SECONDS) {
        return;
    }
    if (fetch) {
        it->gen |= IF_FETCHED;
    }
    it->atime = time32(now);
}

/* ---- the flush floor ---------------------------------------------------- */

/* Unlink every item with a CAS below floor. Takes each stripe lock in
 * turn; the caller holds flush_lock and no stripe lock. */
static void
walk_remove_stale(struct store *s, uint64_t floor)
{
    uint32_t i, b;

    for (i = 0; i < STRIPES; i++) {
        struct stripe *st = &s->stripes[i];

        pthread_mutex_lock(&st->lock);
        for (b = 0; b <= st->mask; b++) {
            struct store_item **pp = &st->buckets[b], *it;

            while ((it = *pp) != NULL) {
                if (it->cas < floor) {
                    do_reclaim(s, st, it, DEAD_FLUSHED, pp);
                } else {
                    pp = &it->h_next;
                }
            }
        }
        pthread_mutex_unlock(&st->lock);
    }
}

/* Raise the floor to f: every item with a CAS below f is dead, and every
 * CAS minted from now on is at least f. Caller holds flush_lock. */
void
store_raise_floor(struct store *s, uint64_t f)
{
    bool tracking;

    if (f == 0) {
        return;
    }
    /* The counter first: a write that mints after the floor is published
     * must be above it (one minting meanwhile is concurrent with the
     * flush and may fall either side). */
    store_cas_raise(s, f - 1);
    if (f <= __atomic_load_n(&s->floor, __ATOMIC_RELAXED)) {
        return;
    }
    __atomic_store_n(&s->floor, f, __ATOMIC_RELEASE);
    /* With a dirty-tracking session, every flushed item of its range must
     * be recorded now (a destination may hold a copy): reclaim them all.
     * track_lock orders this against store_track_start, so either the
     * session sees the new floor (its walk skips flushed items) or we see
     * the session. Otherwise dead items go lazily (reads, the sweeper,
     * eviction), as expired ones do. */
    pthread_mutex_lock(&s->track_lock);
    tracking = s->track_on;
    pthread_mutex_unlock(&s->track_lock);
    if (tracking && s->seg != NULL) {
        sg_track_flushed(s, f);
    } else if (tracking) {
        walk_remove_stale(s, f);
    }
}

/* A floor at when (store seconds): every CAS minted before it is below
 * (up to clock skew), every one minted after it is not (cas_mint). */
static uint64_t
floor_at(int64_t when)
{
    return when > 0 ? store_cas_clock(when * 1000) : 0;
}

/* See store.h. */
void
store_flush_at(struct store *s, uint64_t floor, int64_t when)
{
    pthread_mutex_lock(&s->flush_lock);
    if (when <= store_now(s)) {
        if (when != 0) {
            __atomic_store_n(&s->flush_when, 0, __ATOMIC_RELAXED);
        }
        store_raise_floor(s, floor);
    } else {
        s->flush_when_floor = floor;
        __atomic_store_n(&s->flush_when, when, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&s->flush_lock);
}

void
store_flush(struct store *s, int64_t when)
{
    if (when <= store_now(s)) {
        store_flush_at(s, cas_mint(s), -1);
    } else {
        store_flush_at(s, floor_at(when), when);
    }
}

/* See store.h. */
void
store_flush_state(struct store *s, uint64_t *floor, uint64_t *when_floor, int64_t *when)
{
    pthread_mutex_lock(&s->flush_lock);
    *floor = __atomic_load_n(&s->floor, __ATOMIC_RELAXED);
    *when = __atomic_load_n(&s->flush_when, __ATOMIC_RELAXED);
    *when_floor = *when != 0 ? s->flush_when_floor : 0;
    pthread_mutex_unlock(&s->flush_lock);
}

/* See store.h. */
void
store_flush_floor(struct store *s, uint64_t floor)
{
    store_flush_at(s, floor, 0);
}

/* See store.h. */
uint64_t
store_cas_next(struct store *s)
{
    return __atomic_load_n(&s->cas_next, __ATOMIC_ACQUIRE);
}

/* See store.h. */
uint64_t
store_cas_clock_ahead(struct store *s, int64_t lead_ms)
{
    return cas_wall(s) + ((uint64_t)lead_ms << STORE_CAS_LOGICAL_BITS);
}

/* See store.h. */
uint64_t
store_floor(struct store *s)
{
    return __atomic_load_n(&s->floor, __ATOMIC_ACQUIRE);
}

/* ---- memory and eviction ------------------------------------------------ */

/* Reserve size bytes against the limit, evicting as needed; counts the
 * live items evicted in *evicted. */
static int
mem_reserve(struct store *s, size_t size, int64_t now, uint64_t *evicted)
{
    unsigned     empty = 0;
    enum evicted ev;
    uint64_t     cur = __atomic_load_n(&s->mem_used, __ATOMIC_RELAXED);

    for (;;) {
        if (cur + size <= __atomic_load_n(&s->mem_limit, __ATOMIC_RELAXED)) {
            if (__atomic_compare_exchange_n(&s->mem_used, &cur, cur + size, true, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED)) {
                return 0;
            }
            continue;
        }
        /* Every stripe empty: what is left is held by readers or being
         * built by other threads; give it a few tries, then give up. */
        ev = store_evict_one(s, now);
        if (ev == EV_EVICTED) {
            (*evicted)++;
        }
        if (ev == EV_NONE && ++empty > 3) {
            return STORE_NO_MEMORY;
        }
        cur = __atomic_load_n(&s->mem_used, __ATOMIC_RELAXED);
    }
}

/* store_alloc, counting the live items it evicted in *evicted. */
struct store_item *
store_alloc_counted(struct store *s, const char *key, size_t nkey, uint64_t hash, uint32_t flags,
                    int64_t exptime, size_t nbytes, bool ecas, int *err, uint64_t *evicted)
{
    struct store_item *it;
    size_t             size, tail = ecas ? sizeof(uint64_t) : 0;
    int                rc;

    if (nkey == 0 || nkey > STORE_KEY_MAX || nbytes > UINT32_MAX - 2 - tail ||
        (size = store_item_size(nkey, nbytes + tail)) > s->item_size_max) {
        *err = STORE_TOO_LARGE;
        return NULL;
    }
    if (size > __atomic_load_n(&s->mem_limit, __ATOMIC_RELAXED)) {
        *err = STORE_NO_MEMORY;
        return NULL;
    }
    /* The compact engine's records take their room when stored. */
    rc = s->seg != NULL ? 0 : mem_reserve(s, size, store_now(s), evicted);
    if (rc < 0) {
        *err = rc;
        return NULL;
    }
    it = malloc(offsetof(struct store_item, data) + nkey + nbytes + 2 + tail);
    if (it == NULL) {
        if (s->seg == NULL) {
            __atomic_fetch_sub(&s->mem_used, size, __ATOMIC_RELAXED);
        }
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
    it->mflags = ecas ? STORE_MF_ECAS : 0;
    it->gen = 0;
    it->atime = 0;
    memcpy(it->data, key, nkey);
    it->data[nkey + nbytes] = '\r';
    it->data[nkey + nbytes + 1] = '\n';
    return it;
}

struct store_item *
store_alloc(struct store *s, const char *key, size_t nkey, uint64_t hash, uint32_t flags,
            int64_t exptime, size_t nbytes, int *err)
{
    uint64_t evicted = 0;

    return store_alloc_counted(s, key, nkey, hash, flags, exptime, nbytes, false, err, &evicted);
}

struct store_item *
store_alloc_meta(struct store *s, const char *key, size_t nkey, uint64_t hash, uint32_t flags,
                 int64_t exptime, size_t nbytes, bool has_ecas, uint64_t ecas, int *err)
{
    uint64_t           evicted = 0;
    struct store_item *it =
        store_alloc_counted(s, key, nkey, hash, flags, exptime, nbytes, has_ecas, err, &evicted);

    if (it != NULL && has_ecas) {
        memcpy(it->data + nkey + nbytes + 2, &ecas, sizeof(ecas));
    }
    return it;
}

void
store_release(struct store *s, struct store_item *it)
{
    if (__atomic_sub_fetch(&it->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
        item_free(s, it);
    }
}

/* Stamp and link a new item in place of old (NULL if none). */
void
do_replace(struct store *s, struct stripe *st, struct store_item *old, struct store_item *it,
           int64_t now)
{
    it->cas = cas_mint(s);
    it->gen &= IF_FETCHED; /* IF_LINKED comes with do_link */
    it->atime = time32(now);
    if (old != NULL) {
        /* The key keeps its standing in the eviction policy. */
        it->gen |= old->gen & (IF_MAIN | IF_FREQ);
        do_unlink(s, st, old, NULL);
    }
    do_link(s, st, it);
}

/*
 * The second half of a read-copy-update: link n in place of old if old is
 * still the live item of its key (with take_exptime n takes old's expiry,
 * which a touch may have changed meanwhile; n takes old's gen bits in
 * inherit), then drop our references to both. True when n was linked
 * (*cas_out, when not NULL, gets its CAS); else the caller reads again.
 */
bool
relink_if_live(struct store *s, struct stripe *st, struct store_item *old, struct store_item *n,
               uint16_t inherit, bool take_exptime, uint64_t *cas_out)
{
    struct store_item *cur;
    int64_t            now;

    cur = stripe_lock_find(s, st, store_item_key(old), old->nkey, old->hash, false, &now);
    if (cur == old) {
        if (take_exptime) {
            n->exptime = old->exptime;
        }
        n->gen |= old->gen & inherit;
        do_replace(s, st, old, n, now);
        if (cas_out != NULL) {
            *cas_out = n->cas;
        }
    }
    pthread_mutex_unlock(&st->lock);
    store_release(s, old);
    store_release(s, n);
    return cur == old;
}

/*
 * append/prepend: build a new item from the live one and it, outside the
 * lock, then link it only if the live item is still the one we read
 * (we hold a reference to it, so its address cannot be reused); else retry.
 * cas_in (not 0) must equal the live item's client CAS (else EXISTS); a
 * miss stores it as it is when o->vivify (ms MA/MP with N), else NOT_STORED.
 * The new item keeps the old flags and expiry and takes it's client CAS
 * (E), if any.
 */
static int
put_concat(struct store *s, struct store_item *it, bool append, uint64_t cas_in,
           const struct store_mset *o, uint64_t *cas_out, uint32_t *nbytes_out)
{
    struct stripe *st = stripe_of(s, it->hash);
    const char    *key = store_item_key(it);
    bool           ecas = (it->mflags & STORE_MF_ECAS) != 0;

    for (;;) {
        struct store_item *old, *n;
        int64_t            now;
        uint64_t           icas = 0;
        int                err;
        size_t             nb;

        old = stripe_lock_find(s, st, key, it->nkey, it->hash, false, &now);
        if (old == NULL) {
            int rc = STORE_NOT_STORED;

            if (o != NULL && o->vivify) {
                it->exptime = time32(o->viv_exptime);
                do_replace(s, st, NULL, it, now);
                if (cas_out != NULL) {
                    *cas_out = store_item_cas(it);
                }
                if (nbytes_out != NULL) {
                    *nbytes_out = it->nbytes;
                }
                rc = STORE_STORED;
            }
            pthread_mutex_unlock(&st->lock);
            return rc;
        }
        if (cas_in != 0 && store_item_cas(old) != cas_in) {
            pthread_mutex_unlock(&st->lock);
            return STORE_EXISTS;
        }
        item_ref(old);
        pthread_mutex_unlock(&st->lock);

        nb = (size_t)old->nbytes + it->nbytes;
        n = store_alloc_meta(s, key, it->nkey, it->hash, old->flags, 0, nb, ecas,
                             ecas ? store_item_cas(it) : 0, &err);
        if (n == NULL) {
            store_release(s, old);
            return err;
        }
        n->mflags |= it->mflags & STORE_MF_BINKEY;
        if (append) {
            memcpy(store_item_value_mut(n), store_item_value(old), old->nbytes);
            memcpy(store_item_value_mut(n) + old->nbytes, store_item_value(it), it->nbytes);
        } else {
            memcpy(store_item_value_mut(n), store_item_value(it), it->nbytes);
            memcpy(store_item_value_mut(n) + it->nbytes, store_item_value(old), old->nbytes);
        }
        if (nbytes_out != NULL) {
            *nbytes_out = n->nbytes;
        }
        if (relink_if_live(s, st, old, n, 0, true, &icas)) {
            if (cas_out != NULL) {
                *cas_out = ecas ? store_item_cas(it) : icas; /* n is not ours any more */
            }
            return STORE_STORED;
        }
    }
}

/* store_put and store_mset (o not NULL): see store.h. cas_out gets the
 * store's CAS for store_put, the client CAS for store_mset. */
static int
put_common(struct store *s, struct store_item *it, enum store_op op, uint64_t cas_in,
           const struct store_mset *o, uint64_t *cas_out, uint32_t *nbytes_out)
{
    struct stripe     *st = stripe_of(s, it->hash);
    struct store_item *old;
    int64_t            now;
    int                rc = STORE_STORED;

    if (s->seg != NULL) {
        return sg_put(s, it, op, cas_in, o, cas_out, nbytes_out);
    }
    if (it->gen & IF_LINKED) {
        return STORE_NOT_STORED; /* an item is stored once */
    }
    if (op == STORE_OP_APPEND || op == STORE_OP_PREPEND) {
        return put_concat(s, it, op == STORE_OP_APPEND, o != NULL ? cas_in : 0, o, cas_out,
                          nbytes_out);
    }

    old = stripe_lock_find(s, st, store_item_key(it), it->nkey, it->hash, false, &now);
    switch (op) {
    case STORE_OP_ADD:
        if (old != NULL) {
            do_lru_update(st, old, now); /* memcached: an add that finds the key moves it */
            rc = STORE_NOT_STORED;
        }
        break;
    case STORE_OP_REPLACE:
        if (old == NULL) {
            rc = STORE_NOT_STORED;
        }
        break;
    case STORE_OP_CAS:
        if (old == NULL) {
            rc = STORE_NOT_FOUND;
        } else if (store_item_cas(old) == cas_in) {
            break;
        } else if (o != NULL && o->allow_stale && cas_in < store_item_cas(old)) {
            /* ms I with an older CAS: stored, but stale, with the old TTL
             * and the old win token (memcached's CAS_STALE). */
            it->exptime = old->exptime;
            it->mflags |= STORE_MF_STALE | (old->mflags & STORE_MF_WON);
        } else {
            rc = STORE_EXISTS;
        }
        break;
    default:
        break;
    }
    if (rc == STORE_STORED) {
        do_replace(s, st, old, it, now);
        if (cas_out != NULL) {
            *cas_out = o != NULL ? store_item_cas(it) : it->cas;
        }
        if (nbytes_out != NULL) {
            *nbytes_out = it->nbytes;
        }
    }
    pthread_mutex_unlock(&st->lock);
    return rc;
}

int
store_put(struct store *s, struct store_item *it, enum store_op op, uint64_t cas_in,
          uint64_t *cas_out)
{
    return put_common(s, it, op, cas_in, NULL, cas_out, NULL);
}

int
store_mset(struct store *s, struct store_item *it, enum store_op op, uint64_t cas_in,
           const struct store_mset *o, uint64_t *cas_out, uint32_t *nbytes_out)
{
    static const struct store_mset none = { 0 };

    return put_common(s, it, op, cas_in, o != NULL ? o : &none, cas_out, nbytes_out);
}

/* ---- lookups ------------------------------------------------------------ */

static struct store_item *
get_common(struct store *s, const char *key, size_t nkey, uint64_t hash, bool touch,
           int64_t exptime)
{
    struct stripe     *st = stripe_of(s, hash);
    int64_t            now;
    struct store_item *it;

    if (s->seg != NULL) {
        return sg_get(s, key, nkey, hash, true, touch, exptime);
    }
    it = stripe_lock_find(s, st, key, nkey, hash, true, &now);
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
store_peek(struct store *s, const char *key, size_t nkey, uint64_t hash)
{
    struct stripe     *st = stripe_of(s, hash);
    int64_t            now;
    struct store_item *it;

    if (s->seg != NULL) {
        return sg_peek(s, key, nkey, hash);
    }
    it = stripe_lock_find(s, st, key, nkey, hash, false, &now);
    if (it != NULL) {
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
store_get_touch(struct store *s, const char *key, size_t nkey, uint64_t hash, int64_t exptime)
{
    return get_common(s, key, nkey, hash, true, exptime);
}

int
store_delete(struct store *s, const char *key, size_t nkey, uint64_t hash)
{
    return store_delete_cas(s, key, nkey, hash, NULL);
}

int
store_delete_cas(struct store *s, const char *key, size_t nkey, uint64_t hash, uint64_t *cas)
{
    struct stripe     *st = stripe_of(s, hash);
    int64_t            now;
    struct store_item *it;

    if (s->seg != NULL) {
        return sg_delete_cas(s, key, nkey, hash, cas);
    }
    it = stripe_lock_find(s, st, key, nkey, hash, false, &now);
    if (it != NULL) {
        if (cas != NULL) {
            *cas = it->cas;
        }
        do_unlink(s, st, it, NULL);
    }
    pthread_mutex_unlock(&st->lock);
    return it != NULL ? STORE_DELETED : STORE_NOT_FOUND;
}

uint64_t
store_cas_mint(struct store *s)
{
    return cas_mint(s);
}

int
store_touch(struct store *s, const char *key, size_t nkey, uint64_t hash, int64_t exptime)
{
    struct stripe     *st = stripe_of(s, hash);
    int64_t            now;
    struct store_item *it;

    if (s->seg != NULL) {
        return sg_touch(s, key, nkey, hash, exptime);
    }
    it = stripe_lock_find(s, st, key, nkey, hash, false, &now);
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
 * followed by spaces (memcached pads decremented values that way). Also
 * used by store_meta.c. */
bool
store_parse_u64(const char *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t   i = 0;

    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
        unsigned d = (unsigned)(p[i] - '0');

        if (i >= 20 || v > (UINT64_MAX - d) / 10) {
            return false;
        }
        v = v * 10 + d;
    }
    if (i == 0) {
        return false;
    }
    for (; i < n; i++) {
        if (p[i] != ' ') {
            return false;
        }
    }
    *out = v;
    return true;
}

size_t
store_format_u64(char *buf, uint64_t v)
{
    char   tmp[20];
    size_t n = 0, i;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (i = 0; i < n; i++) {
        buf[i] = tmp[n - 1 - i];
    }
    return n;
}

/* incr/decr: the meta arithmetic (store_marith) with none of its options,
 * as memcached's text and meta commands share do_add_delta. */
int
store_arith(struct store *s, const char *key, size_t nkey, uint64_t hash, bool incr, uint64_t delta,
            uint64_t *value, uint64_t *cas_out)
{
    const struct store_marith o = { .incr = incr, .delta = delta };
    struct store_marith_res   res;
    int                       rc = store_marith(s, key, nkey, hash, &o, &res);

    if (rc == STORE_STORED) {
        *value = res.value;
        if (cas_out != NULL) {
            *cas_out = res.cas;
        }
    }
    return rc;
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
    out->limit_maxbytes = __atomic_load_n(&s->mem_limit, __ATOMIC_RELAXED);
    out->mem_used = __atomic_load_n(&s->mem_used, __ATOMIC_RELAXED);
    if (s->seg != NULL) {
        sg_get_stats(s, out);
    }
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
    if (s->seg != NULL) {
        sg_reset_stats(s);
    }
}

/* ---- life cycle --------------------------------------------------------- */

/*
 * The process's allocator, set once, before the first store starts its
 * threads (the node creates its store before its workers). Why (measured
 * with tests/bench/rss_bench.sh, docs/store.md): with one malloc arena per
 * thread, floods that shift sizes left each arena holding free memory the
 * others could not use (RSS 156 MB at -m 64); a fixed mmap threshold keeps
 * values above it out of the heap (glibc otherwise raises the threshold
 * after the first large free and large values fragment the heap), and is
 * the threshold store_item_size's charge assumes.
 */
static void
malloc_setup(void)
{
    mallopt(M_MMAP_THRESHOLD, STORE_MMAP_THRESHOLD);
    mallopt(M_ARENA_MAX, STORE_MALLOC_ARENAS);
}

struct store *
store_new(const struct store_config *cfg)
{
    struct store      *s = NULL;
    pthread_condattr_t ca;
    uint32_t           i, inited = 0;

    static pthread_once_t malloc_once = PTHREAD_ONCE_INIT;

    pthread_once(&malloc_once, malloc_setup);
    if (posix_memalign((void **)&s, 64, sizeof(*s)) != 0) {
        return NULL;
    }
    memset(s, 0, sizeof(*s));
    s->mem_limit = cfg->mem_limit;
    s->item_size_max = cfg->item_size_max;
    s->cas_next = 1;
    for (i = 0; i < STRIPES; i++) {
        struct stripe *st = &s->stripes[i];

        st->buckets = calloc(INIT_BUCKETS, sizeof(*st->buckets));
        if (st->buckets == NULL) {
            goto fail;
        }
        pthread_mutex_init(&st->lock, NULL);
        st->mask = INIT_BUCKETS - 1;
        st->tail_atime[Q_SMALL] = st->tail_atime[Q_MAIN] = TAIL_EMPTY;
        inited++;
    }
    if (cfg->compact ? sg_open(s, cfg) != 0 : store_ghost_init(s) != 0) {
        goto fail;
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
    if (cfg->sweeper) { /* compact: no sweep (the engine reclaims as it evicts), the trim */
        if (pthread_create(&s->sweeper, NULL, store_sweeper_main, s) != 0) {
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

    if (s == NULL) {
        return;
    }
    if (s->sweeper_on) {
        pthread_mutex_lock(&s->sweeper_mu);
        s->sweeper_stop = true;
        pthread_cond_signal(&s->sweeper_cv);
        pthread_mutex_unlock(&s->sweeper_mu);
        pthread_join(s->sweeper, NULL);
    }
    store_track_clear(s, false);
    for (i = 0; i < STRIPES; i++) {
        struct stripe *st = &s->stripes[i];

        for (b = 0; b <= st->mask; b++) {
            while (st->buckets[b] != NULL) {
                do_unlink(s, st, st->buckets[b], &st->buckets[b]);
            }
        }
        free(st->buckets);
        pthread_mutex_destroy(&st->lock);
    }
    store_ghost_free(s);
    seg_free(s->seg);
    pthread_mutex_destroy(&s->flush_lock);
    pthread_mutex_destroy(&s->sweep_lock);
    pthread_mutex_destroy(&s->copy_lock);
    pthread_mutex_destroy(&s->track_lock);
    pthread_mutex_destroy(&s->sweeper_mu);
    pthread_cond_destroy(&s->sweeper_cv);
    free(s);
}
