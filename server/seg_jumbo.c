/*
 * seg_jumbo: the compact engine's large records (over a quarter segment, up
 * to the item maximum). Each is a mapping of its own, charged against the
 * limit as whole heap segments taken from the free pool, and queued and
 * evicted like a segment (server/seg.c's evict_one). See
 * docs/store-engine.md.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "server/seg_internal.h"

/* See seg_internal.h. */
int
seg_jumbo_init(struct seg *s)
{
    uint32_t i;

    s->jaddr = calloc(s->nsegs, sizeof(*s->jaddr));
    s->jumbo = calloc(s->nsegs, sizeof(*s->jumbo));
    if (s->jaddr == NULL || s->jumbo == NULL) {
        return -1;
    }
    /* A jumbo holds at least one heap segment: nsegs of them at most. */
    s->jfree = SEG_NONE;
    for (i = s->nsegs; i-- > 0;) {
        s->jumbo[i].next = s->jfree;
        s->jfree = i;
    }
    return 0;
}

/* See seg_internal.h. */
void
seg_jumbo_fini(struct seg *s)
{
    uint32_t i;

    for (i = 0; s->jaddr != NULL && i < s->nsegs; i++) {
        if (s->jaddr[i] != NULL) {
            munmap(s->jaddr[i], s->jumbo[i].len);
        }
    }
    free(s->jaddr);
    free(s->jumbo);
    s->jaddr = NULL;
    s->jumbo = NULL;
}

/* Give back held segments (a list linked by meta.next); heap_mu held. */
static void
release_held(struct seg *s, uint32_t held)
{
    while (held != SEG_NONE) {
        uint32_t next = s->meta[held].next;

        free_push(s, held);
        s->nheld--;
        held = next;
    }
    if (s->reserve == SEG_NONE) { /* an eviction used the reserve */
        s->reserve = free_pop(s, SQ_RESERVE);
    }
}

/* See seg_internal.h. */
uint32_t
seg_jumbo_new(struct seg *s, size_t sz)
{
    size_t   page = (size_t)sysconf(_SC_PAGESIZE), len = (sz + page - 1) / page * page;
    uint32_t cost = (uint32_t)((len + s->seg_size - 1) / s->seg_size), held = SEG_NONE, i, j;
    uint8_t *addr;

    if (cost + MIN_SEGS > s->nsegs) {
        return SEG_NONE;
    }
    addr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (addr == MAP_FAILED) {
        return SEG_NONE;
    }
    for (i = 0; i < cost; i++) {
        uint32_t id = take_segment(s, SQ_HELD);

        if (id == SEG_NONE) {
            pthread_mutex_lock(&s->heap_mu);
            release_held(s, held);
            pthread_mutex_unlock(&s->heap_mu);
            munmap(addr, len);
            return SEG_NONE;
        }
        /* Its pages go back to the system: the jumbo's replace them, so
         * RSS stays within the limit. */
        madvise(seg_rec_at(s, id, 0), s->seg_size, MADV_DONTNEED);
        pthread_mutex_lock(&s->heap_mu);
        s->meta[id].next = held;
        s->nheld++;
        pthread_mutex_unlock(&s->heap_mu);
        held = id;
    }
    pthread_mutex_lock(&s->heap_mu);
    j = s->jfree; /* never SEG_NONE: each jumbo holds a segment */
    s->jfree = s->jumbo[j].next;
    s->jumbo[j].len = len;
    s->jumbo[j].held = held;
    s->jaddr[j] = addr;
    s->njumbo++;
    s->meta[s->nsegs + j].queue = SQ_JUMBO;
    s->meta[s->nsegs + j].write_off = 0;
    s->meta[s->nsegs + j].create = (uint32_t)eng_now(s);
    pthread_mutex_unlock(&s->heap_mu);
    return s->nsegs + j;
}

/* Take a jumbo out of use and give its segments back (heap_mu held);
 * returns its mapping's length for the caller to unmap (after heap_mu). */
static uint8_t *
do_jumbo_release(struct seg *s, uint32_t id, size_t *len)
{
    uint32_t j = id - s->nsegs;
    uint8_t *addr = s->jaddr[j];

    release_held(s, s->jumbo[j].held);
    *len = s->jumbo[j].len;
    s->jaddr[j] = NULL;
    s->jumbo[j].len = 0;
    s->jumbo[j].held = SEG_NONE;
    s->jumbo[j].next = s->jfree;
    s->jfree = j;
    s->njumbo--;
    s->meta[id].queue = SQ_FREE;
    s->meta[id].write_off = 0;
    __atomic_store_n(&s->meta[id].live_bytes, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->meta[id].live_items, 0, __ATOMIC_RELAXED);
    return addr;
}

/* See seg_internal.h. */
void
seg_jumbo_free(struct seg *s, uint32_t id)
{
    uint8_t *addr;
    size_t   len;

    if (id == SEG_NONE) {
        return;
    }
    pthread_mutex_lock(&s->heap_mu);
    addr = do_jumbo_release(s, id, &len);
    pthread_mutex_unlock(&s->heap_mu);
    munmap(addr, len);
}

/* See seg_internal.h. */
void
seg_jumbo_unlinked(struct seg *s, uint32_t id)
{
    uint8_t *addr = NULL;
    size_t   len = 0;
    uint8_t  q;

    pthread_mutex_lock(&s->heap_mu);
    q = s->meta[id].queue;
    if (q == SQ_SMALL || q == SQ_MAIN) {
        q_remove(s, q == SQ_SMALL ? QI_SMALL : QI_MAIN, id);
        addr = do_jumbo_release(s, id, &len);
    }
    pthread_mutex_unlock(&s->heap_mu);
    if (addr != NULL) {
        munmap(addr, len);
    }
}

/* See seg_internal.h. */
void
seg_jumbo_queue(struct seg *s, uint32_t id, uint32_t sz, int q)
{
    pthread_mutex_lock(&s->heap_mu);
    s->meta[id].write_off = sz;
    q_push(s, q, id);
    pthread_mutex_unlock(&s->heap_mu);
}

/* See seg.h. Segments above the limit are withheld as a jumbo holds its
 * own: taken off the free list (evicting as needed) with their pages
 * given back. */
size_t
seg_set_limit(struct seg *s, size_t bytes)
{
    static pthread_mutex_t one = PTHREAD_MUTEX_INITIALIZER; /* one change at a time */
    size_t                 want = bytes / s->seg_size;
    uint32_t               keep, target;

    pthread_mutex_lock(&one);
    keep = MIN_SEGS + 4u;
    if (want < keep) {
        want = keep;
    }
    target = want >= s->nsegs ? 0 : s->nsegs - (uint32_t)want;
    while (s->nwithheld < target) {
        uint32_t id = take_segment(s, SQ_HELD);

        if (id == SEG_NONE) {
            break;
        }
        madvise(seg_rec_at(s, id, 0), s->seg_size, MADV_DONTNEED);
        pthread_mutex_lock(&s->heap_mu);
        s->meta[id].next = s->withheld;
        s->withheld = id;
        s->nwithheld++;
        pthread_mutex_unlock(&s->heap_mu);
    }
    pthread_mutex_lock(&s->heap_mu);
    while (s->nwithheld > target) {
        uint32_t id = s->withheld;

        s->withheld = s->meta[id].next;
        s->nwithheld--;
        free_push(s, id);
    }
    want = (size_t)(s->nsegs - s->nwithheld) * s->seg_size;
    pthread_mutex_unlock(&s->heap_mu);
    pthread_mutex_unlock(&one);
    return want;
}
