/*
 * store_seg: store.h on the compact engine (server/seg.c), the store a
 * node runs unless started with -o store_engine=classic. Items live as
 * byte-packed records in segments; what a caller holds (struct
 * store_item) is a copy made under the key's stripe lock, which it
 * releases as any item. Keyed writes are one seg_update each: the build
 * below sees the key's live record under its lock and decides, as the
 * classic store decides under its stripe lock, so no operation retries.
 * Dirty tracking, the flush floor, the CAS clock and the drop hook are the
 * store's own (store_internal.h); store_seg_range.c has the handoff's
 * walks and the imports. docs/store-engine.md says why and what it costs.
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

/* ---- records and items -------------------------------------------------- */

static inline uint8_t
mflags_of(uint8_t bits)
{
    return (uint8_t)((bits & SEG_RB_STALE ? STORE_MF_STALE : 0) |
                     (bits & SEG_RB_WON ? STORE_MF_WON : 0) |
                     (bits & SEG_RB_ECAS ? STORE_MF_ECAS : 0) |
                     (bits & SEG_RB_BINKEY ? STORE_MF_BINKEY : 0));
}

static inline uint8_t
bits_of(uint8_t mflags)
{
    return (uint8_t)((mflags & STORE_MF_STALE ? SEG_RB_STALE : 0) |
                     (mflags & STORE_MF_WON ? SEG_RB_WON : 0) |
                     (mflags & STORE_MF_BINKEY ? SEG_RB_BINKEY : 0));
}

/* The CAS a client sees of a record. A record the engine decoded has
 * ecas 0 unless SEG_RB_ECAS; one a build makes has the has_ bits only
 * once encoded, so its ecas says. */
static inline uint64_t
rec_ccas(const struct seg_rec *r)
{
    return r->ecas != 0 ? r->ecas : r->cas;
}

/*
 * The copies a thread hands out come from a cache of its own, by size
 * class (256 bytes to 4 KiB; larger ones are malloc'd): a get takes one
 * and its reply gives it back, so a read costs no malloc and free (they
 * were a fifth of a get's instructions). A copy goes back to the cache of
 * the thread that releases it; a thread's cache is freed when it exits.
 */
#define COPY_CLASSES   5u
#define COPY_MIN_SHIFT 8u
#define COPY_CACHED    64u /* per class and thread */

struct copy_cache {
    struct store_item *head[COPY_CLASSES];
    uint32_t           n[COPY_CLASSES];
};

static __thread struct copy_cache *copy_cache;
static pthread_key_t               copy_key;
static pthread_once_t              copy_once = PTHREAD_ONCE_INIT;

static void
copy_cache_free(void *arg)
{
    struct copy_cache *cc = arg;
    uint32_t           c;

    for (c = 0; c < COPY_CLASSES; c++) {
        while (cc->head[c] != NULL) {
            struct store_item *it = cc->head[c];

            cc->head[c] = it->h_next;
            free(it);
        }
    }
    free(cc);
}

static void
copy_key_init(void)
{
    pthread_key_create(&copy_key, copy_cache_free);
}

static struct copy_cache *
copy_cache_get(void)
{
    if (__builtin_expect(copy_cache == NULL, 0)) {
        pthread_once(&copy_once, copy_key_init);
        copy_cache = calloc(1, sizeof(*copy_cache));
        if (copy_cache != NULL) {
            pthread_setspecific(copy_key, copy_cache);
        }
    }
    return copy_cache;
}

/* A block for a copy of size bytes, its class in *gen (0: malloc'd). */
static struct store_item *
copy_alloc(size_t size, uint16_t *gen)
{
    struct copy_cache *cc;
    uint32_t           c = 0;

    while (c < COPY_CLASSES && size > (size_t)1 << (COPY_MIN_SHIFT + c)) {
        c++;
    }
    *gen = 0;
    if (c == COPY_CLASSES || (cc = copy_cache_get()) == NULL) {
        return malloc(size);
    }
    *gen = (uint16_t)(IF_POOLED | c << IF_CLASS_SHIFT);
    if (cc->head[c] != NULL) {
        struct store_item *it = cc->head[c];

        cc->head[c] = it->h_next;
        cc->n[c]--;
        return it;
    }
    return malloc((size_t)1 << (COPY_MIN_SHIFT + c));
}

void
sg_item_free(struct store_item *it)
{
    uint32_t           c = (it->gen & IF_CLASS) >> IF_CLASS_SHIFT;
    struct copy_cache *cc = copy_cache_get();

    if (cc == NULL || cc->n[c] >= COPY_CACHED) {
        free(it);
        return;
    }
    it->h_next = cc->head[c];
    cc->head[c] = it;
    cc->n[c]++;
}

/* Free a copy that was never handed out. */
static void
sg_item_free_any(struct store_item *it)
{
    if (it != NULL && (it->gen & IF_POOLED)) {
        sg_item_free(it);
    } else {
        free(it);
    }
}

/* A caller's copy of a record (refcount 1, never linked); NULL on ENOMEM. */
struct store_item *
sg_item_of(const struct seg_rec *r, uint64_t hash)
{
    size_t             tail = r->ecas != 0 ? sizeof(uint64_t) : 0;
    uint16_t           gen;
    struct store_item *it =
        copy_alloc(offsetof(struct store_item, data) + r->nkey + r->nbytes + 2 + tail, &gen);

    if (it == NULL) {
        return NULL;
    }
    it->hash = hash;
    it->cas = r->cas;
    it->h_next = it->lru_prev = it->lru_next = NULL;
    it->exptime = r->exptime;
    it->flags = r->flags;
    it->nbytes = r->nbytes;
    it->refcount = 1;
    it->nkey = r->nkey;
    it->mflags = (uint8_t)(mflags_of(r->bits) | (tail != 0 ? STORE_MF_ECAS : 0));
    it->gen = (uint16_t)(gen | (r->bits & SEG_RB_FETCHED ? IF_FETCHED : 0));
    it->atime = r->atime;
    if (r->value == r->key + r->nkey) { /* decoded from a segment: one copy */
        memcpy(it->data, r->key, (size_t)r->nkey + r->nbytes);
    } else {
        memcpy(it->data, r->key, r->nkey);
        if (r->nbytes > 0) {
            memcpy(it->data + r->nkey, r->value, r->nbytes);
        }
    }
    it->data[r->nkey + r->nbytes] = '\r';
    it->data[r->nkey + r->nbytes + 1] = '\n';
    if (tail != 0) {
        memcpy(it->data + r->nkey + r->nbytes + 2, &r->ecas, sizeof(r->ecas));
    }
    return it;
}

/* Fill nr (its key preset by the engine) from an item being stored. */
static void
rec_from_item(struct seg_rec *nr, const struct store_item *it)
{
    nr->nbytes = it->nbytes;
    nr->value = store_item_value(it);
    nr->flags = it->flags;
    nr->exptime = it->exptime;
    nr->ecas = it->mflags & STORE_MF_ECAS ? store_item_cas(it) : 0;
    nr->bits = bits_of(it->mflags);
}

/* Fill nr from a live record, all but the key (a rewrite of its state). */
static void
rec_from_rec(struct seg_rec *nr, const struct seg_rec *old)
{
    nr->bits = old->bits & SEG_RB_STATE;
    nr->nbytes = old->nbytes;
    nr->value = old->value;
    nr->cas = old->cas;
    nr->atime = old->atime;
    nr->exptime = old->exptime;
    nr->flags = old->flags;
    nr->ecas = old->ecas;
}

int
sg_store_rc(int seg_rc)
{
    switch (seg_rc) {
    case SEG_TOO_LARGE:
        return STORE_TOO_LARGE;
    case SEG_NO_MEMORY:
        return STORE_NO_MEMORY;
    default:
        return STORE_NO_MEMORY;
    }
}

/* ---- the store's side of the engine ------------------------------------- */

/* Record a changed key for a dirty-tracking session. The caller's write
 * to the engine is done: a session turned on before it (seg_stripe_barrier
 * after st->tracking) is seen here. */
void
sg_track(struct store *s, const char *key, size_t nkey, uint64_t hash)
{
    struct stripe *st = stripe_of(s, hash);

    if (__builtin_expect(!__atomic_load_n(&st->tracking, __ATOMIC_ACQUIRE), 1)) {
        return;
    }
    pthread_mutex_lock(&st->lock);
    if (st->tracking) {
        do_track_key(s, st, key, nkey, hash);
    }
    pthread_mutex_unlock(&st->lock);
}

/* See store_internal.h. */
__thread uint64_t *sg_import_evicted;

/* The engine's drop hook: an eviction or an expired record's reclaim,
 * under the key's stripe lock. Told to the store's drop hook (replica
 * tombstones) and to a tracking session. */
static void
sg_dropped(void *arg, uint64_t hash, const struct seg_rec *r, bool expired)
{
    struct store *s = arg;
    store_drop_fn fn = __atomic_load_n(&s->drop_fn, __ATOMIC_ACQUIRE);

    if (fn != NULL) {
        fn(hash, r->cas, store_now(s), __atomic_load_n(&s->drop_arg, __ATOMIC_RELAXED));
    }
    if (expired && !(r->bits & SEG_RB_FETCHED)) {
        __atomic_fetch_add(&stripe_of(s, hash)->expired_unfetched, 1, __ATOMIC_RELAXED);
    }
    if (!expired) {
        if (sg_import_evicted != NULL) {
            (*sg_import_evicted)++;
        }
        /* The sweeper's malloc_trim follows evictions: the values staged
         * on the heap for the writes that caused them. */
        __atomic_fetch_add(&s->evicted_bytes,
                           seg_rec_size((uint8_t)(r->bits & SEG_RB_HAS), r->nkey, r->nbytes),
                           __ATOMIC_RELAXED);
    }
    sg_track(s, r->key, r->nkey, hash);
}

static int64_t
sg_now(void *arg)
{
    return store_now(arg);
}

static uint64_t
sg_floor(void *arg)
{
    return do_floor(arg);
}

/* Segments of 1 MiB unless the limit is small: at least 64 of them, so
 * one per writer thread and the evictor's spare leave room to cache. */
int
sg_open(struct store *s, const struct store_config *cfg)
{
    struct seg_config sc = { 0 };
    size_t            seg_size = SEG_SIZE_DEFAULT;

    while (seg_size > SEG_SIZE_MIN && cfg->mem_limit / seg_size < 64) {
        seg_size /= 2;
    }
    sc.mem_limit =
        cfg->mem_limit < 64 * (size_t)SEG_SIZE_MIN ? 64 * (size_t)SEG_SIZE_MIN : cfg->mem_limit;
    sc.seg_size = (uint32_t)seg_size;
    sc.item_max = cfg->item_size_max > UINT32_MAX ? UINT32_MAX : (uint32_t)cfg->item_size_max;
    sc.now = sg_now;
    sc.floor = sg_floor;
    sc.clock_arg = s;
    sc.drop = sg_dropped;
    sc.drop_arg = s;
    s->seg_size = (uint32_t)seg_size;
    s->seg = seg_new(&sc);
    return s->seg != NULL ? 0 : -1;
}

void
sg_set_mem_limit(struct store *s, size_t bytes)
{
    __atomic_store_n(&s->mem_limit, seg_set_limit(s->seg, bytes), __ATOMIC_RELAXED);
}

void
sg_get_stats(struct store *s, struct store_stats *out)
{
    struct seg_stats g;

    seg_stats(s->seg, &g);
    out->curr_items = g.items;
    out->bytes = g.live_bytes;
    out->evictions = g.evictions - __atomic_load_n(&s->evictions_base, __ATOMIC_RELAXED);
    out->reclaimed = g.reclaimed - __atomic_load_n(&s->reclaimed_base, __ATOMIC_RELAXED);
    out->limit_maxbytes = (g.segs_total - g.segs_withheld) * (uint64_t)s->seg_size;
    out->mem_used = (g.segs_total - g.segs_free - g.segs_withheld) * (uint64_t)s->seg_size;
    out->hash_buckets = g.index_slots;
}

/* stats reset: the engine's counters only grow; remember where they were. */
void
sg_reset_stats(struct store *s)
{
    struct seg_stats g;

    seg_stats(s->seg, &g);
    __atomic_store_n(&s->evictions_base, g.evictions, __ATOMIC_RELAXED);
    __atomic_store_n(&s->reclaimed_base, g.reclaimed, __ATOMIC_RELAXED);
}

/* ---- writes ------------------------------------------------------------- */

struct put_ctx {
    struct store            *s;
    struct store_item       *it;
    enum store_op            op;
    uint64_t                 cas_in;
    const struct store_mset *o; /* NULL: store_put */
    int64_t                  now;
    int                      rc;
    char                    *buf; /* append/prepend's value */
    size_t                   cap;
    struct seg_rec           out; /* what the last build wrote */
};

/* append/prepend: the old value and the item's, into c->buf. */
static int
concat_build(struct put_ctx *c, const struct seg_rec *old, struct seg_rec *nr)
{
    struct store_item *it = c->it;
    size_t             nb = (size_t)old->nbytes + it->nbytes;
    size_t             tail = it->mflags & STORE_MF_ECAS ? sizeof(uint64_t) : 0;

    if (c->o != NULL && c->cas_in != 0 && rec_ccas(old) != c->cas_in) {
        c->rc = STORE_EXISTS;
        return SEG_BUILD_KEEP;
    }
    if (nb > UINT32_MAX - 2 - tail || store_item_size(it->nkey, nb + tail) > c->s->item_size_max) {
        c->rc = STORE_TOO_LARGE;
        return SEG_BUILD_KEEP;
    }
    if (nb > c->cap) {
        char *b = realloc(c->buf, nb);

        if (b == NULL) {
            c->rc = STORE_NO_MEMORY;
            return SEG_BUILD_KEEP;
        }
        c->buf = b;
        c->cap = nb;
    }
    if (nb == 0) {
        /* both empty: nothing to copy, and no buffer (memcpy to NULL is undefined) */
    } else if (c->op == STORE_OP_APPEND) {
        memcpy(c->buf, old->value, old->nbytes);
        memcpy(c->buf + old->nbytes, store_item_value(it), it->nbytes);
    } else {
        memcpy(c->buf, store_item_value(it), it->nbytes);
        memcpy(c->buf + it->nbytes, old->value, old->nbytes);
    }
    /* The old flags and expiry, the item's client CAS and key form. */
    nr->nbytes = (uint32_t)nb;
    nr->value = nb > 0 ? c->buf : "";
    nr->flags = old->flags;
    nr->exptime = old->exptime;
    nr->ecas = tail != 0 ? store_item_cas(it) : 0;
    nr->bits = it->mflags & STORE_MF_BINKEY ? SEG_RB_BINKEY : 0;
    return SEG_BUILD_WRITE;
}

static int
put_build(void *arg, const struct seg_rec *old, struct seg_rec *nr)
{
    struct put_ctx *c = arg;
    int             b = SEG_BUILD_WRITE;

    c->rc = STORE_STORED;
    rec_from_item(nr, c->it);
    switch (c->op) {
    case STORE_OP_ADD:
        if (old != NULL) {
            c->rc = STORE_NOT_STORED;
        }
        break;
    case STORE_OP_REPLACE:
        if (old == NULL) {
            c->rc = STORE_NOT_STORED;
        }
        break;
    case STORE_OP_CAS:
        if (old == NULL) {
            c->rc = STORE_NOT_FOUND;
        } else if (rec_ccas(old) == c->cas_in) {
            break;
        } else if (c->o != NULL && c->o->allow_stale && c->cas_in < rec_ccas(old)) {
            /* ms I with an older CAS: stored stale, with the old TTL and
             * win token (memcached's CAS_STALE). */
            nr->exptime = old->exptime;
            nr->bits |= SEG_RB_STALE | (old->bits & SEG_RB_WON);
        } else {
            c->rc = STORE_EXISTS;
        }
        break;
    case STORE_OP_APPEND:
    case STORE_OP_PREPEND:
        if (old != NULL) {
            b = concat_build(c, old, nr);
        } else if (c->o != NULL && c->o->vivify) {
            nr->exptime = time32(c->o->viv_exptime); /* stored as it is */
        } else {
            c->rc = STORE_NOT_STORED;
        }
        break;
    default:
        break;
    }
    if (c->rc != STORE_STORED) {
        return SEG_BUILD_KEEP;
    }
    nr->cas = cas_mint(c->s);
    nr->atime = time32(c->now);
    c->out = *nr;
    return b;
}

/* store_put and store_mset on the engine (put_common's). */
int
sg_put(struct store *s, struct store_item *it, enum store_op op, uint64_t cas_in,
       const struct store_mset *o, uint64_t *cas_out, uint32_t *nbytes_out)
{
    struct put_ctx c = { .s = s, .it = it, .op = op, .cas_in = cas_in, .o = o };
    int            rc;

    if (it->gen & IF_LINKED) {
        return STORE_NOT_STORED; /* an item is stored once */
    }
    c.now = clock_begin(s);
    rc = seg_update(s->seg, store_item_key(it), it->nkey, it->hash, c.now, do_floor(s), put_build,
                    &c);
    free(c.buf);
    if (rc == SEG_REFUSED) {
        return c.rc;
    }
    if (rc != SEG_OK) {
        return sg_store_rc(rc);
    }
    __atomic_fetch_add(&stripe_of(s, it->hash)->total_items, 1, __ATOMIC_RELAXED);
    sg_track(s, store_item_key(it), it->nkey, it->hash);
    if (op != STORE_OP_APPEND && op != STORE_OP_PREPEND) {
        /* The item is now what the key holds: its post-image. */
        it->cas = c.out.cas;
        it->exptime = c.out.exptime;
        it->mflags = (uint8_t)((it->mflags & STORE_MF_ECAS) |
                               (mflags_of(c.out.bits) & (uint8_t)~STORE_MF_ECAS));
        it->atime = c.out.atime;
    }
    it->gen |= IF_LINKED;
    if (cas_out != NULL) {
        *cas_out = o != NULL ? rec_ccas(&c.out) : c.out.cas;
    }
    if (nbytes_out != NULL) {
        *nbytes_out = c.out.nbytes;
    }
    return STORE_STORED;
}

/* ---- reads -------------------------------------------------------------- */

/* memcached's get_expired and get_flushed: reads that found one. */
static void
count_gone(struct store *s, uint64_t hash, int rc)
{
    if (rc == SEG_GONE_EXPIRED) {
        __atomic_fetch_add(&stripe_of(s, hash)->get_expired, 1, __ATOMIC_RELAXED);
    } else if (rc == SEG_GONE_FLUSHED) {
        __atomic_fetch_add(&stripe_of(s, hash)->get_flushed, 1, __ATOMIC_RELAXED);
    }
}

static int
copy_cb(void *arg, const struct seg_rec *r, uint64_t hash, unsigned freq)
{
    (void)freq;
    *(struct store_item **)arg = sg_item_of(r, hash);
    return 0;
}

/* store_get (fetch), store_peek (not) and store_get_touch (touch). */
struct store_item *
sg_get(struct store *s, const char *key, size_t nkey, uint64_t hash, bool fetch, bool touch,
       int64_t exptime)
{
    struct store_item *it = NULL;
    int64_t            now = clock_begin(s);
    uint64_t           floor = do_floor(s);
    int rc = seg_get(s->seg, key, nkey, hash, now, floor, fetch ? SEG_GET_FETCH | SEG_GET_WHY : 0,
                     copy_cb, &it);

    if (rc != SEG_OK) {
        count_gone(s, hash, rc);
        return NULL;
    }
    if (touch && it != NULL) {
        /* gat: the item as it was read, with its new expiry (an expired
         * one, for a negative one: this read still sees it). */
        seg_touch(s->seg, key, nkey, hash, now, floor, time32(exptime));
        it->exptime = time32(exptime);
        sg_track(s, key, nkey, hash);
    }
    if (it != NULL && fetch) {
        it->gen |= IF_FETCHED;
    }
    return it;
}

static bool
del_check(void *arg, const struct seg_rec *old)
{
    *(uint64_t *)arg = old->cas;
    return true;
}

int
sg_delete_cas(struct store *s, const char *key, size_t nkey, uint64_t hash, uint64_t *cas)
{
    uint64_t c = 0;
    int64_t  now = clock_begin(s);
    int      rc = seg_delete(s->seg, key, nkey, hash, now, do_floor(s), del_check, &c);

    if (rc != SEG_OK) {
        return STORE_NOT_FOUND;
    }
    if (cas != NULL) {
        *cas = c;
    }
    sg_track(s, key, nkey, hash);
    return STORE_DELETED;
}

int
sg_touch(struct store *s, const char *key, size_t nkey, uint64_t hash, int64_t exptime)
{
    int64_t now = clock_begin(s);

    if (seg_touch(s->seg, key, nkey, hash, now, do_floor(s), time32(exptime)) != SEG_OK) {
        return STORE_NOT_FOUND;
    }
    sg_track(s, key, nkey, hash);
    return STORE_TOUCHED;
}

/* ---- the meta protocol -------------------------------------------------- */

struct mget_ctx {
    struct store            *s;
    const struct store_mget *q;
    struct store_mget_res   *r;
    int64_t                  now;
    uint64_t                 hash;
    struct store_item       *it;
    bool                     slow; /* the fast path found a state to change */
};

/* mg without T, R or N: a read, unless the item is stale with no token
 * handed out (the first reader wins: a change). */
static int
mget_read_cb(void *arg, const struct seg_rec *old, uint64_t hash, unsigned freq)
{
    struct mget_ctx       *c = arg;
    struct store_mget_res *r = c->r;

    (void)freq;
    if ((old->bits & SEG_RB_STALE) && !(old->bits & SEG_RB_WON)) {
        c->slow = true;
        return 0;
    }
    r->fetched_before = (old->bits & SEG_RB_FETCHED) != 0;
    r->atime_before = old->atime;
    r->exptime_before = old->exptime;
    r->token_sent = (old->bits & SEG_RB_WON) != 0;
    r->stale = (old->bits & SEG_RB_STALE) != 0;
    c->it = sg_item_of(old, hash);
    return 0;
}

static int
mget_build(void *arg, const struct seg_rec *old, struct seg_rec *nr)
{
    struct mget_ctx         *c = arg;
    const struct store_mget *q = c->q;
    struct store_mget_res   *r = c->r;
    uint32_t                 exp;
    bool                     won = false;

    if (c->it != NULL) {
        sg_item_free_any(c->it); /* an earlier call's */
        c->it = NULL;
    }
    memset(r, 0, sizeof(*r));
    if (old == NULL) {
        if (!q->vivify) {
            return SEG_BUILD_KEEP;
        }
        nr->bits = SEG_RB_WON | (q->binkey ? SEG_RB_BINKEY : 0); /* this request's W */
        nr->nbytes = 0;
        nr->value = "";
        nr->exptime = time32(q->touch && q->touch_after_viv ? q->touch_exptime : q->viv_exptime);
        nr->ecas = q->has_ecas ? q->ecas : 0;
        nr->cas = cas_mint(c->s);
        nr->atime = time32(c->now);
        r->created = r->won = r->changed = true;
        r->atime_before = nr->atime; /* linked now: l0 */
        c->it = sg_item_of(nr, c->hash);
        return SEG_BUILD_WRITE;
    }
    r->fetched_before = (old->bits & SEG_RB_FETCHED) != 0;
    r->atime_before = old->atime;
    r->exptime_before = old->exptime;
    exp = old->exptime;
    if (q->touch && q->touch_first) {
        exp = time32(q->touch_exptime);
    }
    if (q->recache && !(old->bits & SEG_RB_WON) && exp != 0 && (int64_t)exp < q->recache_at) {
        won = true;
    }
    if (q->touch && !q->touch_first) {
        exp = time32(q->touch_exptime);
    }
    r->changed = q->touch;
    r->token_sent = (old->bits & SEG_RB_WON) != 0;
    if (old->bits & SEG_RB_STALE) {
        r->stale = true;
        won = won || !(old->bits & SEG_RB_WON); /* the first reader of a stale item wins */
    }
    r->won = won;
    r->changed = r->changed || won;
    rec_from_rec(nr, old);
    nr->exptime = exp;
    if (won) {
        nr->bits |= SEG_RB_WON;
    }
    c->it = sg_item_of(r->changed ? nr : old, c->hash);
    return r->changed ? SEG_BUILD_WRITE : SEG_BUILD_KEEP;
}

struct store_item *
sg_mget(struct store *s, const char *key, size_t nkey, uint64_t hash, const struct store_mget *q,
        struct store_mget_res *r, int *err)
{
    struct mget_ctx c = { .s = s, .q = q, .r = r, .hash = hash };
    uint64_t        floor;
    int             rc;

    memset(r, 0, sizeof(*r));
    c.now = clock_begin(s);
    floor = do_floor(s);
    if (!q->vivify && !q->touch && !q->recache) {
        rc = seg_get(s->seg, key, nkey, hash, c.now, floor,
                     SEG_GET_WHY | (q->bump ? SEG_GET_FETCH : 0), mget_read_cb, &c);
        count_gone(s, hash, rc);
        if (rc != SEG_OK || !c.slow) {
            if (c.it != NULL && q->bump) {
                c.it->gen |= IF_FETCHED;
            }
            return c.it;
        }
    }
    rc = seg_update(s->seg, key, nkey, hash, c.now, floor, mget_build, &c);
    if (rc != SEG_OK && rc != SEG_REFUSED) {
        sg_item_free_any(c.it);
        memset(r, 0, sizeof(*r));
        *err = rc == SEG_MISS ? STORE_NO_MEMORY : sg_store_rc(rc);
        return NULL;
    }
    if (c.it == NULL) {
        return NULL;
    }
    if (r->changed) {
        sg_track(s, key, nkey, hash);
    }
    if (q->bump) {
        seg_get(s->seg, key, nkey, hash, c.now, floor, SEG_GET_FETCH, NULL, NULL);
        c.it->gen |= IF_FETCHED;
    }
    return c.it;
}

struct mdel_ctx {
    struct store            *s;
    const struct store_mdel *o;
    int64_t                  now;
    int                      rc;
    bool                     removed;
    uint64_t                 tomb_cas;
};

static int
mdel_build(void *arg, const struct seg_rec *old, struct seg_rec *nr)
{
    struct mdel_ctx         *c = arg;
    const struct store_mdel *o = c->o;
    uint64_t                 ccas;

    c->removed = false;
    c->tomb_cas = 0;
    if (old == NULL) {
        c->rc = STORE_NOT_FOUND;
        return SEG_BUILD_KEEP;
    }
    if (o->has_cas && rec_ccas(old) != o->cas) {
        c->rc = STORE_EXISTS;
        return SEG_BUILD_KEEP;
    }
    c->rc = STORE_DELETED;
    if (!o->stale && !o->empty) {
        c->tomb_cas = old->cas;
        c->removed = true;
        return SEG_BUILD_DELETE;
    }
    /* x keeps the old client CAS (memcached), I takes a new one; E wins
     * over both. */
    ccas = o->has_ecas ? o->ecas : rec_ccas(old);
    nr->bits = old->bits & (SEG_RB_BINKEY | SEG_RB_FETCHED);
    nr->ecas = o->has_ecas || (o->empty && !o->stale) ? ccas : 0;
    if (o->empty) {
        nr->nbytes = 0;
        nr->value = "";
        nr->flags = o->flags;
        nr->exptime = time32(o->exptime);
    } else {
        nr->nbytes = old->nbytes;
        nr->value = old->value;
        nr->flags = old->flags;
        nr->exptime = o->touch ? time32(o->exptime) : old->exptime;
        nr->bits |= old->bits & SEG_RB_STALE;
    }
    if (o->stale) {
        nr->bits |= SEG_RB_STALE; /* and no token: the next reader wins */
    }
    nr->cas = cas_mint(c->s);
    nr->atime = time32(c->now);
    return SEG_BUILD_WRITE;
}

int
sg_mdel(struct store *s, const char *key, size_t nkey, uint64_t hash, const struct store_mdel *o,
        bool *removed, uint64_t *tomb_cas)
{
    struct mdel_ctx c = { .s = s, .o = o };
    int             rc;

    c.now = clock_begin(s);
    rc = seg_update(s->seg, key, nkey, hash, c.now, do_floor(s), mdel_build, &c);
    *removed = false;
    *tomb_cas = 0;
    if (rc == SEG_REFUSED || (rc == SEG_MISS && c.rc != STORE_DELETED)) {
        return c.rc;
    }
    if (rc != SEG_OK && rc != SEG_MISS) {
        return sg_store_rc(rc);
    }
    *removed = c.removed;
    *tomb_cas = c.tomb_cas;
    sg_track(s, key, nkey, hash);
    return STORE_DELETED;
}

struct marith_ctx {
    struct store              *s;
    const struct store_marith *o;
    struct store_marith_res   *res;
    int64_t                    now;
    int                        rc;
    char                       buf[20];
};

static int
marith_build(void *arg, const struct seg_rec *old, struct seg_rec *nr)
{
    struct marith_ctx         *c = arg;
    const struct store_marith *o = c->o;
    struct store_marith_res   *res = c->res;
    uint64_t                   v;

    memset(res, 0, sizeof(*res));
    c->rc = STORE_STORED;
    if (old == NULL) {
        if (!o->vivify) {
            c->rc = STORE_NOT_FOUND;
            return SEG_BUILD_KEEP;
        }
        v = o->initial;
        nr->exptime = time32(o->touch && o->touch_after_viv ? o->exptime : o->viv_exptime);
        res->created = true;
    } else {
        res->exptime_before = old->exptime;
        if (o->cas_in != 0 && rec_ccas(old) != o->cas_in) {
            c->rc = STORE_EXISTS;
            return SEG_BUILD_KEEP;
        }
        if (!store_parse_u64(old->value, old->nbytes, &v)) {
            c->rc = STORE_NON_NUMERIC;
            return SEG_BUILD_KEEP;
        }
        v = o->incr ? v + o->delta : (v > o->delta ? v - o->delta : 0);
        nr->flags = old->flags;
        nr->exptime = o->touch ? time32(o->exptime) : old->exptime;
        nr->bits = old->bits & (SEG_RB_STALE | SEG_RB_WON | SEG_RB_BINKEY | SEG_RB_FETCHED);
    }
    nr->nbytes = (uint32_t)store_format_u64(c->buf, v);
    nr->value = c->buf;
    nr->ecas = o->has_ecas ? o->ecas : 0;
    nr->cas = cas_mint(c->s);
    nr->atime = time32(c->now);
    res->value = v;
    res->cas = o->has_ecas ? o->ecas : nr->cas;
    res->exptime = nr->exptime;
    return SEG_BUILD_WRITE;
}

int
sg_marith(struct store *s, const char *key, size_t nkey, uint64_t hash,
          const struct store_marith *o, struct store_marith_res *res)
{
    struct marith_ctx c = { .s = s, .o = o, .res = res };
    int               rc;

    c.now = clock_begin(s);
    rc = seg_update(s->seg, key, nkey, hash, c.now, do_floor(s), marith_build, &c);
    if (rc == SEG_REFUSED) {
        memset(res, 0, sizeof(*res));
        return c.rc;
    }
    if (rc != SEG_OK) {
        memset(res, 0, sizeof(*res));
        return sg_store_rc(rc);
    }
    sg_track(s, key, nkey, hash);
    return STORE_STORED;
}

struct mdebug_ctx {
    struct store_mdebug *out;
    int64_t              now;
};

static int
mdebug_cb(void *arg, const struct seg_rec *r, uint64_t hash, unsigned freq)
{
    struct mdebug_ctx   *c = arg;
    struct store_mdebug *out = c->out;

    (void)hash;
    (void)freq;
    out->exp = r->exptime == 0 ? -1 : (int64_t)r->exptime - c->now;
    /* 0, not a wrap, for an atime ahead of the clock (it can be as far
     * ahead as a peer's clock was when it minted the CAS: seg_item.h). */
    out->la = c->now > (int64_t)r->atime ? (uint32_t)(c->now - (int64_t)r->atime) : 0;
    out->cas = rec_ccas(r);
    out->fetched = (r->bits & SEG_RB_FETCHED) != 0;
    out->size = (uint32_t)seg_rec_size((uint8_t)(r->bits & SEG_RB_HAS), r->nkey, r->nbytes);
    out->mflags = mflags_of(r->bits);
    return 0;
}

bool
sg_mdebug(struct store *s, const char *key, size_t nkey, uint64_t hash, struct store_mdebug *out)
{
    struct mdebug_ctx c = { .out = out };

    c.now = clock_begin(s);
    return seg_get(s->seg, key, nkey, hash, c.now, do_floor(s), 0, mdebug_cb, &c) == SEG_OK;
}
