/*
 * store_meta: the item store's operations for the meta protocol (mg, md,
 * ma, me): flag-driven reads with vivify, win tokens and stale items;
 * deletes that leave a stale or empty item; arithmetic with vivify. See
 * store.h for the API, store_internal.h for the layout shared with
 * store.c, whose keyed-operation helpers these use.
 */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "server/store.h"
#include "server/store_internal.h"

/* Set or clear mflags bits of a linked item in place (stripe lock held):
 * readers load them with store_item_mflags. */
static inline void
do_mflags(struct store_item *it, uint8_t set, uint8_t clear)
{
    __atomic_store_n(&it->mflags, (uint8_t)((it->mflags | set) & ~clear), __ATOMIC_RELEASE);
}

struct store_item *
store_mget(struct store *s, const char *key, size_t nkey, uint64_t hash, const struct store_mget *q,
           struct store_mget_res *r, int *err)
{
    struct stripe     *st = stripe_of(s, hash);
    struct store_item *it, *stub = NULL;
    int64_t            now;

    if (s->seg != NULL) {
        return sg_mget(s, key, nkey, hash, q, r, err);
    }
    memset(r, 0, sizeof(*r));
    if (q->vivify) {
        /* Allocated before the lock (an allocation may evict, taking other
         * stripes' locks), dropped if the key is there after all. */
        stub =
            store_alloc_meta(s, key, nkey, hash, 0, q->viv_exptime, 0, q->has_ecas, q->ecas, err);
        if (stub == NULL) {
            return NULL;
        }
        if (q->binkey) {
            stub->mflags |= STORE_MF_BINKEY;
        }
        if (q->touch && q->touch_after_viv) {
            stub->exptime = time32(q->touch_exptime); /* N, then T */
        }
    }
    it = stripe_lock_find(s, st, key, nkey, hash, true, &now);
    if (it == NULL && stub != NULL) {
        stub->mflags |= STORE_MF_WON; /* this request's W */
        do_replace(s, st, NULL, stub, now);
        it = stub;
        stub = NULL;
        r->created = r->won = r->changed = true;
        r->atime_before = it->atime; /* linked now: l0 */
    } else if (it != NULL) {
        uint8_t mf = it->mflags;

        r->fetched_before = (it->gen & IF_FETCHED) != 0;
        r->atime_before = it->atime;
        r->exptime_before = it->exptime;
        if (q->touch && q->touch_first) {
            __atomic_store_n(&it->exptime, time32(q->touch_exptime), __ATOMIC_RELAXED);
        }
        if (q->recache && !(mf & STORE_MF_WON) && it->exptime != 0 &&
            (int64_t)it->exptime < q->recache_at) {
            r->won = true;
        }
        if (q->touch && !q->touch_first) {
            __atomic_store_n(&it->exptime, time32(q->touch_exptime), __ATOMIC_RELAXED);
        }
        r->changed = q->touch;
        r->token_sent = (mf & STORE_MF_WON) != 0;
        if (mf & STORE_MF_STALE) {
            r->stale = true;
            r->won = r->won || !(mf & STORE_MF_WON); /* the first reader of a stale item wins */
        }
        if (r->won) {
            do_mflags(it, STORE_MF_WON, 0);
            r->changed = true;
        }
    }
    if (it != NULL) {
        if (r->changed) {
            do_track(s, st, it);
        }
        if (q->bump) {
            do_bump(st, it, now);
        }
        if (!r->created) {
            item_ref(it); /* a vivified item is returned with the allocation's */
        }
    }
    pthread_mutex_unlock(&st->lock);
    if (stub != NULL) {
        store_release(s, stub);
    }
    return it;
}

int
store_mdel(struct store *s, const char *key, size_t nkey, uint64_t hash, const struct store_mdel *o,
           bool *removed, uint64_t *tomb_cas)
{
    struct stripe *st = stripe_of(s, hash);

    if (s->seg != NULL) {
        return sg_mdel(s, key, nkey, hash, o, removed, tomb_cas);
    }
    *removed = false;
    *tomb_cas = 0;
    for (;;) {
        struct store_item *old, *n;
        int64_t            now;
        uint64_t           ccas;
        size_t             nb;
        int                err = 0;

        old = stripe_lock_find(s, st, key, nkey, hash, false, &now);
        if (old == NULL) {
            pthread_mutex_unlock(&st->lock);
            return STORE_NOT_FOUND;
        }
        if (o->has_cas && store_item_cas(old) != o->cas) {
            pthread_mutex_unlock(&st->lock);
            return STORE_EXISTS;
        }
        if (!o->stale && !o->empty) {
            *tomb_cas = old->cas;
            *removed = true;
            do_unlink(s, st, old, NULL);
            pthread_mutex_unlock(&st->lock);
            return STORE_DELETED;
        }
        item_ref(old);
        pthread_mutex_unlock(&st->lock);

        /* x keeps the old client CAS (memcached), I takes a new one; E
         * wins over both. */
        ccas = o->has_ecas ? o->ecas : store_item_cas(old);
        nb = o->empty ? 0 : old->nbytes;
        n = store_alloc_meta(s, key, nkey, hash, o->empty ? o->flags : old->flags,
                             o->empty ? o->exptime : 0, nb, o->has_ecas || (o->empty && !o->stale),
                             ccas, &err);
        if (n == NULL) {
            store_release(s, old);
            return err;
        }
        if (!o->empty) {
            memcpy(store_item_value_mut(n), store_item_value(old), nb);
            n->exptime = o->touch ? time32(o->exptime) : old->exptime;
            n->mflags |= old->mflags & STORE_MF_STALE;
        }
        n->mflags |= old->mflags & STORE_MF_BINKEY;
        if (o->stale) {
            if (o->empty && o->touch) {
                n->exptime = time32(o->exptime);
            }
            n->mflags |= STORE_MF_STALE; /* and no token: the next reader wins */
        }
        if (relink_if_live(s, st, old, n, IF_FETCHED, false, NULL)) {
            return STORE_DELETED;
        }
    }
}

int
store_marith(struct store *s, const char *key, size_t nkey, uint64_t hash,
             const struct store_marith *o, struct store_marith_res *res)
{
    struct stripe *st = stripe_of(s, hash);

    if (s->seg != NULL) {
        return sg_marith(s, key, nkey, hash, o, res);
    }
    memset(res, 0, sizeof(*res));

    for (;;) {
        struct store_item *old, *n;
        char               buf[20];
        uint64_t           v;
        size_t             len;
        int64_t            now;
        int                err = 0, rc;

        old = stripe_lock_find(s, st, key, nkey, hash, false, &now);
        if (old == NULL) {
            pthread_mutex_unlock(&st->lock);
            if (!o->vivify) {
                return STORE_NOT_FOUND;
            }
            len = store_format_u64(buf, o->initial);
            n = store_alloc_meta(s, key, nkey, hash, 0,
                                 o->touch && o->touch_after_viv ? o->exptime : o->viv_exptime, len,
                                 o->has_ecas, o->ecas, &err);
            if (n == NULL) {
                return err;
            }
            memcpy(store_item_value_mut(n), buf, len);
            rc = store_put(s, n, STORE_OP_ADD, 0, NULL);
            if (rc == STORE_STORED) {
                res->value = o->initial;
                res->cas = store_item_cas(n);
                res->exptime = n->exptime;
                res->created = true;
            }
            store_release(s, n);
            if (rc == STORE_STORED) {
                return STORE_STORED;
            }
            continue; /* created meanwhile: apply the delta to it */
        }
        res->exptime_before = old->exptime;
        if (o->cas_in != 0 && store_item_cas(old) != o->cas_in) {
            pthread_mutex_unlock(&st->lock);
            return STORE_EXISTS;
        }
        if (!store_parse_u64(store_item_value(old), old->nbytes, &v)) {
            pthread_mutex_unlock(&st->lock);
            return STORE_NON_NUMERIC;
        }
        v = o->incr ? v + o->delta : (v > o->delta ? v - o->delta : 0);
        len = store_format_u64(buf, v);
        if (len == old->nbytes && !o->has_ecas && !(old->mflags & STORE_MF_ECAS) &&
            __atomic_load_n(&old->refcount, __ATOMIC_ACQUIRE) == 1) {
            memcpy(store_item_value_mut(old), buf, len);
            old->cas = cas_mint(s);
            if (o->touch) {
                __atomic_store_n(&old->exptime, time32(o->exptime), __ATOMIC_RELAXED);
            }
            do_track(s, st, old);
            do_lru_update(st, old, now);
            res->value = v;
            res->cas = old->cas;
            res->exptime = old->exptime;
            pthread_mutex_unlock(&st->lock);
            return STORE_STORED;
        }
        item_ref(old);
        pthread_mutex_unlock(&st->lock);

        n = store_alloc_meta(s, key, nkey, hash, old->flags, 0, len, o->has_ecas, o->ecas, &err);
        if (n == NULL) {
            store_release(s, old);
            return err;
        }
        memcpy(store_item_value_mut(n), buf, len);
        n->exptime = o->touch ? time32(o->exptime) : old->exptime;
        n->mflags |= old->mflags & (STORE_MF_STALE | STORE_MF_WON | STORE_MF_BINKEY);
        res->exptime = n->exptime;
        {
            uint64_t icas = 0;

            /* Without T, n takes old's expiry as it is when linked (a touch
             * may have changed it meanwhile). */
            if (relink_if_live(s, st, old, n, IF_FETCHED, !o->touch, &icas)) {
                res->value = v;
                res->cas = o->has_ecas ? o->ecas : icas;
                return STORE_STORED;
            }
        }
    }
}

bool
store_mdebug(struct store *s, const char *key, size_t nkey, uint64_t hash, struct store_mdebug *out)
{
    struct stripe     *st = stripe_of(s, hash);
    int64_t            now;
    struct store_item *it;

    if (s->seg != NULL) {
        return sg_mdebug(s, key, nkey, hash, out);
    }
    it = stripe_lock_find(s, st, key, nkey, hash, false, &now);

    if (it != NULL) {
        out->exp = it->exptime == 0 ? -1 : (int64_t)it->exptime - now;
        out->la = (uint32_t)(now - (int64_t)it->atime);
        out->cas = store_item_cas(it);
        out->fetched = (it->gen & IF_FETCHED) != 0;
        out->size = (uint32_t)item_charge(it);
        out->mflags = it->mflags;
    }
    pthread_mutex_unlock(&st->lock);
    return it != NULL;
}
