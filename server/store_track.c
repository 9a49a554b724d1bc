/*
 * store_track: the handoff's two sides in the item store. On the source,
 * dirty tracking: a session records every key of a range that changes,
 * in per-stripe sets that a drain empties. On the destination, import:
 * post-images linked with their CAS and remaining TTL. See store.h for the
 * API, store_internal.h for the layout it shares with store.c.
 */
#include "config.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/store.h"
#include "server/store_internal.h"

/* Keys a drain pops under one stripe lock hold. */
#define DRAIN_BATCH 64u
#define DIRTY_INIT  4u /* dirty-set buckets per stripe */

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
    uint32_t n = st->d_mask + 1;
    void   **nb;

    if (st->d_count <= n * 2) {
        return;
    }
    nb = store_chains_double((void **)st->d_buckets, n, offsetof(struct dirty_key, h_next),
                             offsetof(struct dirty_key, hash));
    if (nb == NULL) {
        return;
    }
    st->d_buckets = (struct dirty_key **)nb;
    st->d_mask = n * 2 - 1;
}

/* Record a changed key of a tracking stripe if the session's predicate
 * wants it and it is not recorded yet. Out of line and cold, so the
 * mutation paths that test st->tracking stay as small as without it. */
void __attribute__((noinline, cold))
do_track_key(struct store *s, struct stripe *st, const char *key, size_t nkey, uint64_t hash)
{
    struct dirty_key **pp, *d;

    if (!s->track_pred(hash, s->track_arg)) {
        return;
    }
    pp = &st->d_buckets[dirty_bucket(st, hash)];
    for (d = *pp; d != NULL; d = d->h_next) {
        if (d->hash == hash && d->nkey == nkey && memcmp(d->key, key, nkey) == 0) {
            return;
        }
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
    if (st->d_tail != NULL) {
        st->d_tail->q_next = d;
    } else {
        st->d_head = d;
    }
    st->d_tail = d;
    st->d_count++;
    __atomic_fetch_add(&s->track_pending, 1, __ATOMIC_RELAXED);
    do_dirty_grow(st);
}

/* Pop the oldest recorded key of a stripe (the caller frees it). */
static struct dirty_key *
do_dirty_pop(struct stripe *st)
{
    struct dirty_key *d = st->d_head, **pp;

    if (d == NULL) {
        return NULL;
    }
    st->d_head = d->q_next;
    if (st->d_head == NULL) {
        st->d_tail = NULL;
    }
    for (pp = &st->d_buckets[dirty_bucket(st, d->hash)]; *pp != d; pp = &(*pp)->h_next)
        ;
    *pp = d->h_next;
    st->d_count--;
    return d;
}

/* ---- dirty tracking sessions -------------------------------------------- */

/* Detach and free every stripe's dirty set. With lock, each stripe is
 * detached under its lock; without (store_free), nobody else runs. */
void
store_track_clear(struct store *s, bool lock)
{
    uint32_t i;

    for (i = 0; i < STRIPES; i++) {
        struct stripe    *st = &s->stripes[i];
        struct dirty_key *d, *next, **buckets;

        if (lock) {
            pthread_mutex_lock(&st->lock);
        }
        st->tracking = false;
        d = st->d_head;
        buckets = st->d_buckets;
        st->d_head = st->d_tail = NULL;
        st->d_buckets = NULL;
        st->d_count = 0;
        st->d_mask = 0;
        if (lock) {
            pthread_mutex_unlock(&st->lock);
        }
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
    uint32_t            i;
    int                 rc = 0;

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
            while (i > 0) {
                free(sets[--i]);
            }
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
        if (s->seg != NULL) {
            sg_track_barrier(s, i);
        }
    }
    free(sets);
out:
    pthread_mutex_unlock(&s->track_lock);
    return rc;
}

/* Look a key up for a drain without side effects (a dead item is left to
 * the sweep, so reading it does not record the key again). Borrowed. */
static struct store_item *
do_find_live(struct store *s, struct stripe *st, const char *key, size_t nkey, uint64_t hash,
             int64_t now)
{
    struct store_item *it;

    for (it = st->buckets[bucket_of(st, hash)]; it != NULL; it = it->h_next) {
        if (it->hash == hash && it->nkey == nkey && memcmp(it->data, key, nkey) == 0) {
            return item_dead(it, now, do_floor(s)) == LIVE ? it : NULL;
        }
    }
    return NULL;
}

size_t
store_track_drain(struct store *s, store_dirty_fn fn, void *arg, size_t max)
{
    struct dirty_key  *keys[DRAIN_BATCH];
    struct store_item *items[DRAIN_BATCH];
    size_t             done = 0, bytes = 0;
    uint32_t           idle = 0, n, i;

    pthread_mutex_lock(&s->copy_lock);
    /* On the compact engine the items are copies a caller may hold: at
     * most about 1 MiB of them a call, as store_walk. */
    while (done < max && idle < STRIPES && (s->seg == NULL || bytes < (1u << 20)) &&
           __atomic_load_n(&s->track_pending, __ATOMIC_RELAXED) > 0) {
        struct stripe *st = &s->stripes[s->drain_stripe];
        int64_t        now = clock_begin(s);
        bool           more;

        n = 0;
        pthread_mutex_lock(&st->lock);
        if (!st->tracking) {
            pthread_mutex_unlock(&st->lock);
            break;
        }
        while (n < DRAIN_BATCH && done + n < max && st->d_head != NULL) {
            struct dirty_key  *d = do_dirty_pop(st);
            struct store_item *it =
                s->seg != NULL ? NULL : do_find_live(s, st, d->key, d->nkey, d->hash, now);

            if (it != NULL) {
                item_ref(it);
            }
            keys[n] = d;
            items[n++] = it;
        }
        more = st->d_head != NULL;
        pthread_mutex_unlock(&st->lock);
        if (n > 0) {
            __atomic_fetch_sub(&s->track_pending, n, __ATOMIC_RELAXED);
        }
        for (i = 0; i < n; i++) {
            if (s->seg != NULL) { /* read now, after the pop (a change since records it again) */
                items[i] = sg_peek(s, keys[i]->key, keys[i]->nkey, keys[i]->hash);
                bytes += items[i] != NULL ? (size_t)items[i]->nkey + items[i]->nbytes : 0;
            }
            fn(keys[i]->key, keys[i]->nkey, keys[i]->hash, items[i], arg);
            if (items[i] != NULL) {
                store_release(s, items[i]);
            }
            free(keys[i]);
        }
        done += n;
        idle = n > 0 ? 0 : idle + 1;
        if (!more) {
            s->drain_stripe = (s->drain_stripe + 1) & STRIPE_MASK;
        }
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
        store_track_clear(s, true);
        s->track_on = false;
        s->track_pred = NULL;
        s->track_arg = NULL;
    }
    pthread_mutex_unlock(&s->track_lock);
    pthread_mutex_unlock(&s->copy_lock);
}

/* ---- import (destination side) ------------------------------------------ */

/* See store.h: the next minted CAS is larger than cas. */
void
store_cas_raise(struct store *s, uint64_t cas)
{
    uint64_t want = cas == UINT64_MAX ? cas : cas + 1;
    uint64_t cur = __atomic_load_n(&s->cas_next, __ATOMIC_RELAXED);

    while (cur < want && !__atomic_compare_exchange_n(&s->cas_next, &cur, want, true,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

struct store_item *
store_import_alloc(struct store *s, const char *key, size_t nkey, uint64_t hash, uint32_t flags,
                   int64_t ttl_remaining, size_t nbytes, int *err)
{
    return store_import_alloc_meta(s, key, nkey, hash, flags, ttl_remaining, nbytes, 0, 0, err);
}

struct store_item *
store_import_alloc_meta(struct store *s, const char *key, size_t nkey, uint64_t hash,
                        uint32_t flags, int64_t ttl_remaining, size_t nbytes, uint8_t mflags,
                        uint64_t ecas, int *err)
{
    uint64_t           evicted = 0;
    int64_t            exptime = 0;
    struct store_item *it;

    if (ttl_remaining < 0) {
        exptime = 1; /* long expired */
    } else if (ttl_remaining > 0) {
        exptime = store_now(s) +
                  (ttl_remaining > (int64_t)UINT32_MAX ? (int64_t)UINT32_MAX : ttl_remaining);
    }
    it = store_alloc_counted(s, key, nkey, hash, flags, exptime, nbytes,
                             (mflags & STORE_MF_ECAS) != 0, err, &evicted);
    if (it != NULL) {
        if (mflags & STORE_MF_ECAS) {
            memcpy(it->data + nkey + nbytes + 2, &ecas, sizeof(ecas));
        }
        it->mflags |= mflags & (STORE_MF_STALE | STORE_MF_WON | STORE_MF_BINKEY);
    }
    if (evicted > 0) {
        __atomic_fetch_add(&s->import_evictions, evicted, __ATOMIC_RELAXED);
    }
    return it;
}

/* Link it with cas (0: mint one) in place of old (the key's live item or
 * NULL), or, expired, remove old instead; the caller holds the stripe
 * lock and checked the flush floor. STORE_STORED, STORE_DELETED or
 * STORE_NOT_FOUND. */
static int
do_import(struct store *s, struct stripe *st, struct store_item *old, struct store_item *it,
          uint64_t cas, int64_t now)
{
    if (it->exptime != 0 && (int64_t)it->exptime <= now) {
        /* An expired post-image is a tombstone. */
        if (old != NULL) {
            do_unlink(s, st, old, NULL);
        }
        return old != NULL ? STORE_DELETED : STORE_NOT_FOUND;
    }
    it->cas = cas != 0 ? cas : cas_mint(s);
    it->gen = 0; /* IF_LINKED comes with do_link */
    it->atime = time32(now);
    if (old != NULL) {
        do_unlink(s, st, old, NULL);
    }
    do_link(s, st, it);
    __atomic_fetch_add(&s->imported, 1, __ATOMIC_RELAXED);
    return STORE_STORED;
}

/* Flushed: a write from before a flush_all that reached this node first (a
 * late replica image, a handoff record). Whatever the key holds is either
 * flushed too or newer. Stripe lock held. */
static inline bool
do_below_floor(struct store *s, uint64_t cas)
{
    return cas != 0 && cas < do_floor(s);
}

int
store_put_import(struct store *s, struct store_item *it, uint64_t cas)
{
    struct stripe *st = stripe_of(s, it->hash);
    int64_t        now;
    int            rc = STORE_NOT_STORED;

    if (s->seg != NULL) {
        return sg_put_import(s, it, cas);
    }
    if (it->gen & IF_LINKED) {
        return STORE_NOT_STORED; /* an item is stored once */
    }
    now = clock_begin(s);
    if (cas != 0) {
        store_cas_raise(s, cas);
    }
    pthread_mutex_lock(&st->lock);
    if (!do_below_floor(s, cas)) {
        rc = do_import(s, st, do_find(s, st, store_item_key(it), it->nkey, it->hash, now, false),
                       it, cas, now);
    }
    pthread_mutex_unlock(&st->lock);
    return rc;
}

int
store_put_import_newer(struct store *s, struct store_item *it, uint64_t cas, store_cover_fn covered,
                       void *arg)
{
    struct stripe     *st = stripe_of(s, it->hash);
    struct store_item *old;
    int64_t            now;
    int                rc = STORE_NOT_STORED;

    if (s->seg != NULL) {
        return sg_put_import_newer(s, it, cas, covered, arg);
    }
    if (it->gen & IF_LINKED) {
        return STORE_NOT_STORED;
    }
    store_cas_raise(s, cas); /* even for an image dropped below */
    old = stripe_lock_find(s, st, store_item_key(it), it->nkey, it->hash, false, &now);
    if (old != NULL && old->cas > cas) {
        rc = STORE_EXISTS;
    } else if (old == NULL && covered(it->hash, cas, now, arg)) {
        rc = STORE_NOT_STORED;
    } else if (!do_below_floor(s, cas)) {
        if (old != NULL && old->cas == cas) {
            /* The same write's state again (a token handed out, a touch):
             * a token once handed out for a CAS stays handed out, whatever
             * order the images come in. */
            it->mflags |= old->mflags & STORE_MF_WON;
        }
        rc = do_import(s, st, old, it, cas, now);
    }
    pthread_mutex_unlock(&st->lock);
    return rc;
}

int
store_delete_older(struct store *s, const char *key, size_t nkey, uint64_t hash, uint64_t cas,
                   store_drop_fn removed, void *arg)
{
    struct stripe     *st = stripe_of(s, hash);
    struct store_item *old;
    int64_t            now;
    int                rc = STORE_NOT_FOUND;

    if (s->seg != NULL) {
        return sg_delete_older(s, key, nkey, hash, cas, removed, arg);
    }
    store_cas_raise(s, cas);
    old = stripe_lock_find(s, st, key, nkey, hash, false, &now);
    if (old != NULL && old->cas > cas) {
        rc = STORE_EXISTS;
    } else {
        if (old != NULL) {
            do_unlink(s, st, old, NULL);
            rc = STORE_DELETED;
        }
        removed(hash, cas, now, arg);
    }
    pthread_mutex_unlock(&st->lock);
    return rc;
}

int
store_import(struct store *s, const char *key, size_t nkey, uint64_t hash, uint32_t flags,
             int64_t ttl_remaining, uint64_t cas, const char *value, size_t nbytes)
{
    struct store_item *it;
    int                err = 0, rc;

    if (ttl_remaining < 0) {
        return store_import_delete(s, key, nkey, hash);
    }
    it = store_import_alloc(s, key, nkey, hash, flags, ttl_remaining, nbytes, &err);
    if (it == NULL) {
        return err;
    }
    if (nbytes > 0) {
        memcpy(store_item_value_mut(it), value, nbytes); /* an empty value may have no pointer */
    }
    rc = store_put_import(s, it, cas);
    store_release(s, it);
    return rc;
}

uint64_t
store_import_evictions(struct store *s)
{
    return __atomic_load_n(&s->import_evictions, __ATOMIC_RELAXED);
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
    int64_t  now;

    if (e == 0) {
        return 0;
    }
    now = store_now(s);
    return (int64_t)e > now ? (int64_t)e - now : -1;
}
