/*
 * seg: the compact item engine's segments, writes and eviction (reads and
 * the other keyed operations are server/seg_ops.c, the index
 * server/seg_index.c, the record codec server/seg_item.h).
 * Lock order: evict_mu, a stripe lock, main_mu, heap_mu. See
 * docs/store-engine.md for the design and the byte budget.
 */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <xxhash.h>

#include "server/seg.h"
#include "server/seg_internal.h"

/* Eviction takes SMALL's oldest segment while SMALL holds more than this
 * percentage of the segments. S3-FIFO's items use 10%; here a new record
 * also waits in its writer's open segment before it is sealed into SMALL,
 * and 2% gave the best hit ratio measured at every skew and limit
 * (docs/store-engine.md, "Eviction"). */
#define SMALL_PERCENT 2u

/* ---- the segment heap (heap_mu held) ------------------------------------ */

/* See seg_internal.h. */
void
q_push(struct seg *s, int q, uint32_t id)
{
    struct seg_meta *m = &s->meta[id];

    m->queue = q == QI_SMALL ? SQ_SMALL : SQ_MAIN;
    m->next = SEG_NONE;
    m->prev = s->q_tail[q];
    if (s->q_tail[q] != SEG_NONE) {
        s->meta[s->q_tail[q]].next = id;
    } else {
        s->q_head[q] = id;
    }
    s->q_tail[q] = id;
    s->q_count[q]++;
}

/* See seg_internal.h. */
void
q_remove(struct seg *s, int q, uint32_t id)
{
    struct seg_meta *m = &s->meta[id];

    if (m->prev != SEG_NONE) {
        s->meta[m->prev].next = m->next;
    } else {
        s->q_head[q] = m->next;
    }
    if (m->next != SEG_NONE) {
        s->meta[m->next].prev = m->prev;
    } else {
        s->q_tail[q] = m->prev;
    }
    s->q_count[q]--;
    m->queue = SQ_EVICTING;
}

/* Take the oldest segment of a queue, or SEG_NONE. */
static uint32_t
q_pop(struct seg *s, int q)
{
    uint32_t id = s->q_head[q];

    if (id != SEG_NONE) {
        q_remove(s, q, id);
    }
    return id;
}

/* See seg_internal.h. */
void
free_push(struct seg *s, uint32_t id)
{
    struct seg_meta *m = &s->meta[id];

    m->queue = SQ_FREE;
    m->write_off = 0;
    __atomic_store_n(&m->live_bytes, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&m->live_items, 0, __ATOMIC_RELAXED);
    m->next = s->free_head;
    s->free_head = id;
    s->nfree++;
}

/* See seg_internal.h. */
uint32_t
free_pop(struct seg *s, enum seg_queue as)
{
    uint32_t id = s->free_head;

    if (id != SEG_NONE) {
        s->free_head = s->meta[id].next;
        s->nfree--;
        s->meta[id].queue = (uint8_t)as;
        s->meta[id].write_off = 0;
        s->meta[id].create = (uint32_t)eng_now(s);
    }
    return id;
}

/* Seal a full (or abandoned) open segment onto queue q; an empty one goes
 * back to the free list. Takes heap_mu. */
static void
seal(struct seg *s, uint32_t id, uint32_t off, int q)
{
    pthread_mutex_lock(&s->heap_mu);
    s->meta[id].write_off = off;
    if (off == 0) {
        free_push(s, id);
    } else {
        q_push(s, q, id);
    }
    pthread_mutex_unlock(&s->heap_mu);
}

/* ---- live accounting (the key's stripe lock held) ----------------------- */

/* See seg_internal.h. */
void
live_add(struct seg *s, uint32_t id, size_t sz, int sign)
{
    struct seg_meta *m = &s->meta[id];

    __atomic_fetch_add(&m->live_bytes, (uint32_t)((int64_t)sign * (int64_t)sz), __ATOMIC_RELAXED);
    __atomic_fetch_add(&m->live_items, (uint32_t)sign, __ATOMIC_RELAXED);
    if (sign < 0 && id >= s->nsegs) { /* a jumbo's one record */
        seg_jumbo_unlinked(s, id);
    }
}

/* See seg_internal.h. */
void
do_seg_unlink(struct seg *s, struct seg_stripe *st, uint64_t *slot, size_t sz)
{
    live_add(s, slot_seg(*slot), sz, -1);
    do_index_remove(s, st, slot);
}

/* ---- the main open segment ---------------------------------------------- */

/* Copy sz bytes of a record into the main open segment. A full one is
 * sealed onto MAIN and replaced by spare (SEG_NONE: by the evictor's
 * reserve when evictor, else fail). A writer (not evictor) gets the
 * segment's pending count raised: it must drop it once it linked. Returns
 * 0, or -1 when there is no room. *used_spare says whether spare was taken. */
static int
main_append(struct seg *s, const struct seg_rec *r, const uint8_t *src, size_t sz, bool evictor,
            uint32_t spare, bool *used_spare, uint32_t *segid, uint32_t *off)
{
    uint8_t *dst;

    pthread_mutex_lock(&s->main_mu);
    if (s->main_seg == SEG_NONE || s->main_off + sz > s->seg_size) {
        uint32_t next = spare;

        if (next == SEG_NONE && evictor) {
            pthread_mutex_lock(&s->heap_mu);
            next = free_pop(s, SQ_MAINOPEN);
            if (next == SEG_NONE && s->reserve != SEG_NONE) {
                next = s->reserve;
                s->reserve = SEG_NONE;
                s->meta[next].queue = SQ_MAINOPEN;
            }
            pthread_mutex_unlock(&s->heap_mu);
        }
        if (next == SEG_NONE) {
            pthread_mutex_unlock(&s->main_mu);
            return -1;
        }
        if (s->main_seg != SEG_NONE) {
            seal(s, s->main_seg, s->main_off, QI_MAIN);
        }
        s->main_seg = next;
        s->main_off = 0;
        *used_spare = next == spare;
    }
    dst = seg_rec_at(s, s->main_seg, s->main_off);
    if (src != NULL) {
        memcpy(dst, src, sz);
    } else {
        seg_rec_encode(dst, r);
    }
    *segid = s->main_seg;
    *off = s->main_off;
    s->main_off += (uint32_t)sz;
    if (!evictor) {
        __atomic_fetch_add(&s->meta[*segid].pending, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&s->main_mu);
    return 0;
}

/* ---- eviction ----------------------------------------------------------- */

/*
 * Empty one sealed segment: S3-FIFO's step over whole segments. For each
 * record whose slot still points at it (under the key's stripe lock): a
 * dead one is reclaimed; one read since it was written moves to the main
 * open segment with a read less (from SMALL: with none, as S3-FIFO's
 * promotion); the rest are evicted, a ghost left for those from SMALL.
 * The emptied segment refills the reserve or goes to the free list. A
 * jumbo's record read since it was queued keeps its jumbo, requeued onto
 * MAIN with a read less; else the jumbo is unmapped and the segments it
 * was charged as go back to the free list.
 * Returns 1 when it emptied a segment, 0 when there was none to empty.
 */
static int
evict_one(struct seg *s)
{
    uint32_t victim, off, end;
    int      q;
    int64_t  now;
    uint64_t floor;
    bool     requeue = false;

    pthread_mutex_lock(&s->evict_mu);
    pthread_mutex_lock(&s->heap_mu);
    if (s->nfree > 0) { /* another thread freed one meanwhile */
        pthread_mutex_unlock(&s->heap_mu);
        pthread_mutex_unlock(&s->evict_mu);
        return 1;
    }
    q = s->q_count[QI_SMALL] * 100u > s->nsegs * SMALL_PERCENT ? QI_SMALL : QI_MAIN;
    if (s->q_count[q] == 0) {
        q = 1 - q;
    }
    victim = q_pop(s, q);
    pthread_mutex_unlock(&s->heap_mu);
    if (victim == SEG_NONE) {
        pthread_mutex_unlock(&s->evict_mu);
        return 0;
    }
    /* A writer that appended to it as the main open segment links soon. */
    while (__atomic_load_n(&s->meta[victim].pending, __ATOMIC_ACQUIRE) != 0) {
        sched_yield();
    }
    now = eng_now(s);
    floor = eng_floor(s);
    end = s->meta[victim].write_off;
    for (off = 0; off < end;) {
        uint8_t           *rec = seg_rec_at(s, victim, off);
        struct seg_rec     r;
        size_t             sz = seg_rec_decode(rec, &r);
        uint64_t           hash = XXH3_64bits(r.key, r.nkey);
        struct seg_stripe *st = seg_stripe(s, hash);
        uint64_t          *slot;

        pthread_mutex_lock(&st->lock);
        slot = do_index_find_at(st, hash, victim, off);
        if (slot != NULL) {
            unsigned f = slot_freq(*slot), nf = q == QI_SMALL ? 0 : f - 1;
            uint32_t nseg, noff;
            bool     spare_used = false;

            seg_rec_decode(rec, &r); /* state bits as of now */
            if (seg_rec_dead(&r, now, floor)) {
                if (r.cas >= floor && s->cfg.drop != NULL) {
                    s->cfg.drop(s->cfg.drop_arg, hash, &r, true);
                }
                __atomic_fetch_add(&s->reclaimed, 1, __ATOMIC_RELAXED);
                do_seg_unlink(s, st, slot, sz);
            } else if (f > 0 && victim >= s->nsegs) {
                /* A jumbo's one record: requeued onto MAIN, not copied. */
                *slot = slot_with_freq(*slot, nf);
                requeue = true;
                __atomic_fetch_add(&s->moved, 1, __ATOMIC_RELAXED);
            } else if (f > 0 && main_append(s, NULL, rec, sz, true, SEG_NONE, &spare_used, &nseg,
                                            &noff) == 0) {
                live_add(s, victim, sz, -1);
                *slot = slot_make(hash, nseg, noff, nf);
                live_add(s, nseg, sz, 1);
                __atomic_fetch_add(&s->moved, 1, __ATOMIC_RELAXED);
            } else {
                if (q == QI_SMALL) {
                    ghost_put(&s->ghost, hash);
                }
                if (s->cfg.drop != NULL) {
                    s->cfg.drop(s->cfg.drop_arg, hash, &r, false);
                }
                __atomic_fetch_add(&s->evictions, 1, __ATOMIC_RELAXED);
                do_seg_unlink(s, st, slot, sz);
            }
        }
        pthread_mutex_unlock(&st->lock);
        off += (uint32_t)sz;
    }
    if (victim >= s->nsegs) {
        if (requeue) { /* unless a write unlinked the record meanwhile */
            pthread_mutex_lock(&s->heap_mu);
            requeue = __atomic_load_n(&s->meta[victim].live_items, __ATOMIC_RELAXED) != 0;
            if (requeue) {
                q_push(s, QI_MAIN, victim);
            }
            pthread_mutex_unlock(&s->heap_mu);
        }
        if (!requeue) {
            seg_jumbo_free(s, victim);
        }
        pthread_mutex_unlock(&s->evict_mu);
        return 1;
    }
    pthread_mutex_lock(&s->heap_mu);
    if (s->reserve == SEG_NONE) {
        free_push(s, victim); /* reset its counters */
        s->reserve = free_pop(s, SQ_RESERVE);
    } else {
        free_push(s, victim);
    }
    pthread_mutex_unlock(&s->heap_mu);
    pthread_mutex_unlock(&s->evict_mu);
    return 1;
}

/* See seg_internal.h. */
uint32_t
take_segment(struct seg *s, enum seg_queue as)
{
    for (;;) {
        uint32_t id;

        pthread_mutex_lock(&s->heap_mu);
        id = free_pop(s, as);
        pthread_mutex_unlock(&s->heap_mu);
        if (id != SEG_NONE || evict_one(s) == 0) {
            return id;
        }
    }
}

/* ---- the threads' open segments ----------------------------------------- */

static void
writer_unlist(struct seg *s, struct seg_writer *w)
{
    struct seg_writer **pp;

    pthread_mutex_lock(&s->heap_mu);
    for (pp = &s->writers; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    pthread_mutex_unlock(&s->heap_mu);
}

/* Thread exit: seal its open segment. */
static void
writer_dtor(void *p)
{
    struct seg_writer *w = p;

    if (w->segid != SEG_NONE) {
        seal(w->s, w->segid, w->off, QI_SMALL);
    }
    writer_unlist(w->s, w);
    free(w);
}

static struct seg_writer *
writer_get(struct seg *s)
{
    struct seg_writer *w = pthread_getspecific(s->tls);

    if (w == NULL) {
        w = calloc(1, sizeof(*w));
        if (w == NULL) {
            return NULL;
        }
        w->s = s;
        w->segid = SEG_NONE;
        if (pthread_setspecific(s->tls, w) != 0) {
            free(w);
            return NULL;
        }
        pthread_mutex_lock(&s->heap_mu);
        w->next = s->writers;
        s->writers = w;
        pthread_mutex_unlock(&s->heap_mu);
    }
    return w;
}

/* See seg_internal.h. */
int
do_seg_append(struct seg *s, const struct seg_rec *r, size_t sz, bool to_main, uint32_t *spare,
              uint32_t *segid, uint32_t *off)
{
    struct seg_writer *w;
    bool               used = false;

    if (to_main) {
        if (main_append(s, r, NULL, sz, false, *spare, &used, segid, off) < 0) {
            return 1;
        }
        if (used) {
            *spare = SEG_NONE;
        }
        return 0;
    }
    w = writer_get(s);
    if (w == NULL) {
        return SEG_NO_MEMORY;
    }
    if (w->segid == SEG_NONE || w->off + sz > s->seg_size) {
        return 1;
    }
    seg_rec_encode(seg_rec_at(s, w->segid, w->off), r);
    *segid = w->segid;
    *off = w->off;
    w->off += (uint32_t)sz;
    return 0;
}

/* See seg_internal.h. */
int
seg_make_room(struct seg *s, bool to_main, uint32_t *spare)
{
    struct seg_writer *w;

    if (to_main) {
        if (*spare == SEG_NONE) {
            *spare = take_segment(s, SQ_MAINOPEN);
        }
        return *spare != SEG_NONE ? 0 : SEG_NO_MEMORY;
    }
    w = writer_get(s);
    if (w == NULL) {
        return SEG_NO_MEMORY;
    }
    if (w->segid != SEG_NONE) {
        seal(s, w->segid, w->off, QI_SMALL);
        w->segid = SEG_NONE;
    }
    w->segid = take_segment(s, SQ_OPEN);
    w->off = 0;
    return w->segid != SEG_NONE ? 0 : SEG_NO_MEMORY;
}

/* See seg_internal.h. */
void
seg_spare_free(struct seg *s, uint32_t spare)
{
    if (spare != SEG_NONE) {
        pthread_mutex_lock(&s->heap_mu);
        free_push(s, spare);
        pthread_mutex_unlock(&s->heap_mu);
    }
}

/* ---- the API ------------------------------------------------------------ */

/* See seg.h. */
struct seg *
seg_new(const struct seg_config *cfg)
{
    struct seg *s;
    uint32_t    i, seg_size = cfg->seg_size != 0 ? cfg->seg_size : SEG_SIZE_DEFAULT;
    size_t      nsegs = cfg->mem_limit / seg_size;

    if (seg_size < SEG_SIZE_MIN || seg_size > SEG_SIZE_DEFAULT || nsegs < MIN_SEGS ||
        nsegs >= SEG_MAX_SEGS / 2) {
        return NULL;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return NULL;
    }
    s->cfg = *cfg;
    s->seg_size = seg_size;
    s->nsegs = (uint32_t)nsegs;
    s->item_max = cfg->item_max != 0 ? cfg->item_max : SEG_ITEM_MAX_DEFAULT;
    s->map_len = nsegs * seg_size;
    s->base = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s->base == MAP_FAILED) {
        free(s);
        return NULL;
    }
    s->meta = calloc(2 * nsegs, sizeof(*s->meta));
    if (ghost_init(&s->ghost, cfg->mem_limit) < 0 || s->meta == NULL || seg_jumbo_init(s) < 0 ||
        seg_index_init(s) < 0 || pthread_key_create(&s->tls, writer_dtor) != 0) {
        seg_index_free(s);
        seg_jumbo_fini(s);
        ghost_free(&s->ghost);
        free(s->meta);
        munmap(s->base, s->map_len);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->heap_mu, NULL);
    pthread_mutex_init(&s->main_mu, NULL);
    pthread_mutex_init(&s->evict_mu, NULL);
    s->free_head = SEG_NONE;
    for (i = 0; i < 2; i++) {
        s->q_head[i] = s->q_tail[i] = SEG_NONE;
    }
    for (i = s->nsegs; i-- > 0;) {
        free_push(s, i);
    }
    s->reserve = free_pop(s, SQ_RESERVE);
    s->main_seg = SEG_NONE;
    return s;
}

/* See seg.h. */
void
seg_free(struct seg *s)
{
    if (s == NULL) {
        return;
    }
    pthread_key_delete(s->tls);
    while (s->writers != NULL) {
        struct seg_writer *w = s->writers;

        s->writers = w->next;
        free(w);
    }
    seg_index_free(s);
    seg_jumbo_fini(s);
    pthread_mutex_destroy(&s->heap_mu);
    pthread_mutex_destroy(&s->main_mu);
    pthread_mutex_destroy(&s->evict_mu);
    munmap(s->base, s->map_len);
    ghost_free(&s->ghost);
    free(s->meta);
    free(s);
}

/* See seg.h. */
void
seg_thread_done(struct seg *s)
{
    struct seg_writer *w = pthread_getspecific(s->tls);

    if (w != NULL && w->segid != SEG_NONE) {
        seal(s, w->segid, w->off, QI_SMALL);
        w->segid = SEG_NONE;
    }
}
