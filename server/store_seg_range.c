/*
 * store_seg_range: the handoff's primitives and the imports on the compact
 * engine (see store_seg.c and store.h's "Ranges"). A walk reads one
 * engine stripe at a time under its lock, copying the records its
 * predicate wants, and calls back after unlocking; dirty tracking is the
 * store's own (store_track.c), told by every write and by the engine's
 * drop hook.
 */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/seg.h"
#include "server/store.h"
#include "server/store_internal.h"

_Static_assert(STORE_PREFIX_BITS == SEG_PREFIX_BITS, "the engine keeps the store's prefix bits");

/* Stripes one walk or purge call reads at most: all of them when few
 * items match (a sparse store is walked in one call, as the chained
 * table's bucket budget allows), fewer once max_items are read. */
#define STEP_STRIPES STRIPES
/* A walk call also stops after the stripe that brings the bytes it handed
 * out to this: its items are copies, and a caller may hold them (the
 * handoff carries what its window cannot take yet), where the chained
 * table's items cost nothing more held. */
#define STEP_BYTES (1u << 20)

/* ---- walks -------------------------------------------------------------- */

struct pick {
    store_hash_pred     pred;
    void               *arg;
    struct store_item **items;
    size_t              n, cap;
    bool                keys_only; /* purge: only the key matters */
    bool                failed;    /* ENOMEM: the stripe is read again */
};

static int
pick_cb(void *arg, const struct seg_rec *r, uint64_t hash, unsigned freq)
{
    struct pick       *p = arg;
    struct store_item *it;

    (void)freq;
    if (p->pred != NULL && !p->pred(hash, p->arg)) {
        return 0;
    }
    if (p->n == p->cap) {
        size_t              cap = p->cap ? 2 * p->cap : 64;
        struct store_item **a = realloc(p->items, cap * sizeof(*a));

        if (a == NULL) {
            p->failed = true;
            return 1;
        }
        p->items = a;
        p->cap = cap;
    }
    if (p->keys_only) {
        struct seg_rec k = *r;

        k.nbytes = 0;
        k.bits &= (uint8_t)~SEG_RB_ECAS;
        it = sg_item_of(&k, hash);
    } else {
        it = sg_item_of(r, hash);
    }
    if (it == NULL) {
        p->failed = true;
        return 1;
    }
    p->items[p->n++] = it;
    return 0;
}

static void
pick_clear(struct store *s, struct pick *p)
{
    size_t i;

    for (i = 0; i < p->n; i++) {
        store_release(s, p->items[i]);
    }
    p->n = 0;
}

int
sg_walk(struct store *s, struct store_cursor *cur, store_hash_pred pred, void *arg,
        store_walk_fn fn, void *fn_arg, size_t max_items)
{
    struct pick p = { .pred = pred, .arg = arg };
    size_t      done = 0, bytes = 0, i;
    uint32_t    stripes = 0;

    pthread_mutex_lock(&s->copy_lock);
    while (cur->stripe < STRIPES && done < max_items && bytes < STEP_BYTES &&
           stripes < STEP_STRIPES) {
        clock_begin(s);
        seg_walk_prefixes(s->seg, cur->stripe, cur->prefixes, pick_cb, &p);
        if (p.failed) {
            pick_clear(s, &p);
            break; /* read this stripe again on the next call */
        }
        for (i = 0; i < p.n; i++) {
            bytes += (size_t)p.items[i]->nkey + p.items[i]->nbytes;
            fn(p.items[i], fn_arg);
        }
        done += p.n;
        pick_clear(s, &p);
        cur->stripe++;
        cur->bucket = 0;
        stripes++;
    }
    pthread_mutex_unlock(&s->copy_lock);
    free(p.items);
    return cur->stripe < STRIPES;
}

struct counting {
    store_hash_pred pred;
    void           *arg;
    uint64_t        read, items, bytes;
};

static int
count_cb(void *arg, const struct seg_rec *r, uint64_t hash, unsigned freq)
{
    struct counting *c = arg;

    (void)freq;
    c->read++;
    if (c->pred == NULL || c->pred(hash, c->arg)) {
        c->items++;
        c->bytes += seg_rec_size((uint8_t)(r->bits & SEG_RB_HAS), r->nkey, r->nbytes);
    }
    return 0;
}

int
sg_count_step(struct store *s, uint32_t *stripe, store_hash_pred pred, void *arg,
              const uint64_t *prefixes, size_t max_items, uint64_t *items, uint64_t *bytes)
{
    struct counting c = { .pred = pred, .arg = arg };

    clock_begin(s);
    while (*stripe < STRIPES && c.read < max_items) {
        seg_walk_prefixes(s->seg, *stripe, prefixes, count_cb, &c);
        (*stripe)++;
    }
    *items += c.items;
    *bytes += c.bytes;
    return *stripe < STRIPES;
}

int
sg_purge(struct store *s, store_hash_pred pred, void *arg, size_t max_items,
         struct store_cursor *cur)
{
    struct pick p = { .pred = pred, .arg = arg, .keys_only = true };
    size_t      done = 0, i;
    uint32_t    stripes = 0;

    while (cur->stripe < STRIPES && done < max_items && stripes < STEP_STRIPES) {
        int64_t now = clock_begin(s);

        /* live or dead */
        seg_walk_below(s->seg, cur->stripe, UINT64_MAX, cur->prefixes, pick_cb, &p);
        if (p.failed) {
            pick_clear(s, &p);
            break;
        }
        for (i = 0; i < p.n; i++) {
            struct store_item *it = p.items[i];

            /* A dead record is unlinked by the lookup (SEG_MISS). */
            if (seg_delete(s->seg, it->data, it->nkey, it->hash, now, do_floor(s), NULL, NULL) !=
                SEG_BAD_ARGUMENT) {
                __atomic_fetch_add(&stripe_of(s, it->hash)->purged, 1, __ATOMIC_RELAXED);
                sg_track(s, it->data, it->nkey, it->hash);
            }
        }
        done += p.n;
        pick_clear(s, &p);
        cur->stripe++;
        cur->bucket = 0;
        stripes++;
    }
    free(p.items);
    return cur->stripe < STRIPES;
}

/* ---- dirty tracking ----------------------------------------------------- */

/* A session turned on in the store's stripe st: every engine write to the
 * stripe that started before it has finished, every later one's sg_track
 * sees it. */
void
sg_track_barrier(struct store *s, uint32_t stripe)
{
    seg_stripe_barrier(s->seg, stripe);
}

static int
flushed_cb(void *arg, const struct seg_rec *r, uint64_t hash, unsigned freq)
{
    (void)freq;
    sg_track(arg, r->key, r->nkey, hash);
    return 0;
}

/* A flush during a session: record every key the floor just made dead
 * (the drain then sends their tombstones). */
void
sg_track_flushed(struct store *s, uint64_t floor)
{
    uint32_t i;

    for (i = 0; i < STRIPES; i++) {
        seg_walk_below(s->seg, i, floor, NULL, flushed_cb, s);
    }
}

/* A drain's read: the key's live record, or NULL. */
struct store_item *
sg_peek(struct store *s, const char *key, size_t nkey, uint64_t hash)
{
    return sg_get(s, key, nkey, hash, false, false, 0);
}

/* ---- imports ------------------------------------------------------------ */

struct import_ctx {
    struct store            *s;
    const struct store_item *it;
    uint64_t                 cas;
    int64_t                  now;
    bool                     newer; /* store_put_import_newer */
    store_cover_fn           covered;
    void                    *arg;
    int                      rc;
};

static int
import_build(void *arg, const struct seg_rec *old, struct seg_rec *nr)
{
    struct import_ctx       *c = arg;
    const struct store_item *it = c->it;

    if (c->newer) {
        if (old != NULL && old->cas > c->cas) {
            c->rc = STORE_EXISTS;
            return SEG_BUILD_KEEP;
        }
        if (old == NULL && c->covered(it->hash, c->cas, c->now, c->arg)) {
            c->rc = STORE_NOT_STORED;
            return SEG_BUILD_KEEP;
        }
    }
    if (c->cas != 0 && c->cas < do_floor(c->s)) {
        c->rc = STORE_NOT_STORED; /* from before a flush that reached us first */
        return SEG_BUILD_KEEP;
    }
    if (it->exptime != 0 && (int64_t)it->exptime <= c->now) {
        /* An expired post-image is a tombstone. */
        c->rc = old != NULL ? STORE_DELETED : STORE_NOT_FOUND;
        return old != NULL ? SEG_BUILD_DELETE : SEG_BUILD_KEEP;
    }
    nr->nbytes = it->nbytes;
    nr->value = store_item_value(it);
    nr->flags = it->flags;
    nr->exptime = it->exptime;
    nr->ecas = it->mflags & STORE_MF_ECAS ? store_item_cas(it) : 0;
    nr->bits = (uint8_t)((it->mflags & STORE_MF_STALE ? SEG_RB_STALE : 0) |
                         (it->mflags & STORE_MF_WON ? SEG_RB_WON : 0) |
                         (it->mflags & STORE_MF_BINKEY ? SEG_RB_BINKEY : 0));
    if (c->newer && old != NULL && old->cas == c->cas) {
        /* The same write's state again: a token once handed out for a CAS
         * stays handed out, whatever order the images come in. */
        nr->bits |= old->bits & SEG_RB_WON;
    }
    nr->cas = c->cas != 0 ? c->cas : cas_mint(c->s);
    nr->atime = time32(c->now);
    c->rc = STORE_STORED;
    return SEG_BUILD_WRITE;
}

static int
import_common(struct store *s, struct store_item *it, struct import_ctx *c)
{
    uint64_t evicted = 0;
    int      rc;

    if (it->gen & IF_LINKED) {
        return STORE_NOT_STORED; /* an item is stored once */
    }
    c->s = s;
    c->it = it;
    c->now = clock_begin(s);
    if (c->cas != 0) {
        store_cas_raise(s, c->cas);
    }
    sg_import_evicted = &evicted;
    rc = seg_update(s->seg, store_item_key(it), it->nkey, it->hash, c->now, do_floor(s),
                    import_build, c);
    sg_import_evicted = NULL;
    if (evicted > 0) {
        __atomic_fetch_add(&s->import_evictions, evicted, __ATOMIC_RELAXED);
    }
    if (rc == SEG_OK || rc == SEG_MISS) {
        if (c->rc == STORE_STORED) {
            it->gen |= IF_LINKED;
            __atomic_fetch_add(&s->imported, 1, __ATOMIC_RELAXED);
        }
        sg_track(s, store_item_key(it), it->nkey, it->hash);
        return c->rc;
    }
    return rc == SEG_REFUSED ? c->rc : sg_store_rc(rc);
}

int
sg_put_import(struct store *s, struct store_item *it, uint64_t cas)
{
    struct import_ctx c = { .cas = cas };

    return import_common(s, it, &c);
}

int
sg_put_import_newer(struct store *s, struct store_item *it, uint64_t cas, store_cover_fn covered,
                    void *arg)
{
    struct import_ctx c = { .cas = cas, .newer = true, .covered = covered, .arg = arg };

    store_cas_raise(s, cas); /* even for an image dropped below */
    return import_common(s, it, &c);
}

struct older_ctx {
    uint64_t      cas;
    uint64_t      hash;
    int64_t       now;
    store_drop_fn removed;
    void         *arg;
    int           rc;
};

static int
older_build(void *arg, const struct seg_rec *old, struct seg_rec *nr)
{
    struct older_ctx *c = arg;

    (void)nr;
    if (old != NULL && old->cas > c->cas) {
        c->rc = STORE_EXISTS;
        return SEG_BUILD_KEEP;
    }
    c->removed(c->hash, c->cas, c->now, c->arg);
    c->rc = old != NULL ? STORE_DELETED : STORE_NOT_FOUND;
    return old != NULL ? SEG_BUILD_DELETE : SEG_BUILD_KEEP;
}

int
sg_delete_older(struct store *s, const char *key, size_t nkey, uint64_t hash, uint64_t cas,
                store_drop_fn removed, void *arg)
{
    struct older_ctx c = { .cas = cas, .hash = hash, .removed = removed, .arg = arg };
    int              rc;

    store_cas_raise(s, cas);
    c.now = clock_begin(s);
    rc = seg_update(s->seg, key, nkey, hash, c.now, do_floor(s), older_build, &c);
    if (c.rc == STORE_DELETED && rc == SEG_OK) {
        sg_track(s, key, nkey, hash);
    }
    return c.rc;
}
