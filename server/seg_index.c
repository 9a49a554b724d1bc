/*
 * seg_index: the compact engine's index. 1024 stripes, each a mutex and an
 * open-addressing array of 8-byte slots (seg_internal.h's layout): linear
 * probing from a multiply-shift home, backward-shift deletion, growth by
 * 1.5x. No hash is stored: growth and deletion hash the key again from its
 * record.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "server/seg_internal.h"

/* A stripe starts with INIT_SLOTS plus up to INIT_SPREAD more, by its
 * number: the stripes grow at different item counts instead of all at once,
 * so at any count their loads spread over the growth cycle (average about
 * 0.7) rather than all sitting just after a growth (0.57). */
#define INIT_SLOTS  8u
#define INIT_SPREAD 4u
/* Grow when a stripe's load would pass LOAD_NUM/LOAD_DEN. Growing by 1.5x
 * (not 2x) keeps the average load near 0.7 instead of 0.6. */
#define LOAD_NUM 85u
#define LOAD_DEN 100u

/* A hash's home slot among n: multiply-shift of the 32 bits above the
 * stripe bits, so n need not be a power of two. */
static inline uint32_t
home(uint64_t hash, uint32_t n)
{
    return (uint32_t)(((uint64_t)(uint32_t)(hash >> SEG_STRIPE_BITS) * n) >> 32);
}

/*
 * A slot array of n zeroed slots. One of a page or more is a mapping of
 * its own, n a whole number of pages (slots_round), so a grown stripe's
 * old array goes back to the system when freed, where malloc would keep
 * it (8 bytes an item at 1M items: the arrays' last growth), and no page
 * is partly used (a partial last page cost 2 bytes an item at 1M items).
 * Smaller ones come from calloc.
 */
static uint64_t *
slots_alloc(uint32_t n)
{
    size_t len = (size_t)n * sizeof(uint64_t);
    void  *p;

    if (len < (size_t)sysconf(_SC_PAGESIZE)) {
        return calloc(n, sizeof(uint64_t));
    }
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p != MAP_FAILED ? p : NULL;
}

static void
slots_free(uint64_t *p, uint32_t n)
{
    size_t len = (size_t)n * sizeof(uint64_t);

    if (len < (size_t)sysconf(_SC_PAGESIZE)) {
        free(p);
    } else if (p != NULL) {
        munmap(p, len);
    }
}

/* n slots, or more to fill the last page when the array is a mapping. */
static uint32_t
slots_round(uint32_t n)
{
    uint32_t per_page = (uint32_t)sysconf(_SC_PAGESIZE) / sizeof(uint64_t);

    return n < per_page ? n : (n + per_page - 1) / per_page * per_page;
}

/* See seg_internal.h. */
uint64_t
seg_slot_hash(const struct seg *s, uint64_t slot)
{
    size_t      nkey;
    const char *key = seg_rec_key(seg_rec_at(s, slot_seg(slot), slot_off(slot)), &nkey);

    return XXH3_64bits(key, nkey);
}

/* See seg_internal.h. */
int
seg_index_init(struct seg *s)
{
    uint32_t i;

    for (i = 0; i < SEG_STRIPES; i++) {
        struct seg_stripe *st = &s->stripes[i];

        st->nslots = INIT_SLOTS + i * INIT_SPREAD / SEG_STRIPES;
        st->slots = slots_alloc(st->nslots);
        if (st->slots == NULL) {
            return -1;
        }
        st->count = 0;
        pthread_mutex_init(&st->lock, NULL);
    }
    return 0;
}

/* See seg_internal.h. */
void
seg_index_free(struct seg *s)
{
    uint32_t i;

    for (i = 0; i < SEG_STRIPES; i++) {
        if (s->stripes[i].slots != NULL) {
            pthread_mutex_destroy(&s->stripes[i].lock);
        }
        slots_free(s->stripes[i].slots, s->stripes[i].nslots);
        s->stripes[i].slots = NULL;
    }
}

/* See seg_internal.h. */
uint64_t *
do_index_find(struct seg *s, struct seg_stripe *st, const char *key, size_t nkey, uint64_t hash,
              struct seg_rec *r, size_t *sz)
{
    uint32_t n = st->nslots, i = home(hash, n);

    for (;;) {
        uint64_t v = st->slots[i];

        if (!(v & SLOT_USED)) {
            return NULL;
        }
        if (slot_tag_matches(v, hash)) {
            *sz = seg_rec_decode(seg_rec_at(s, slot_seg(v), slot_off(v)), r);
            if (r->nkey == nkey && memcmp(r->key, key, nkey) == 0) {
                return &st->slots[i];
            }
        }
        if (++i == n) {
            i = 0;
        }
    }
}

/* See seg_internal.h. */
uint64_t *
do_index_find_at(struct seg_stripe *st, uint64_t hash, uint32_t segid, uint32_t off)
{
    uint32_t n = st->nslots, i = home(hash, n);

    for (;;) {
        uint64_t v = st->slots[i];

        if (!(v & SLOT_USED)) {
            return NULL;
        }
        if (slot_seg(v) == segid && slot_off(v) == off && slot_tag_matches(v, hash)) {
            return &st->slots[i];
        }
        if (++i == n) {
            i = 0;
        }
    }
}

/* Put a slot in the first empty place from its home (there is one: the
 * load stays under 0.85). */
static void
place(uint64_t *slots, uint32_t n, uint64_t hash, uint64_t v)
{
    uint32_t i = home(hash, n);

    while (slots[i] & SLOT_USED) {
        if (++i == n) {
            i = 0;
        }
    }
    slots[i] = v;
}

/* Rehash a stripe into 1.5x the slots (at least enough for want). Each
 * key is hashed again from its record. Holds the stripe lock throughout:
 * a stripe is 1/1024 of the keys. */
static int
do_grow(struct seg *s, struct seg_stripe *st, uint32_t want)
{
    uint32_t  n = st->nslots, nn = n + n / 2, i;
    uint64_t *ns;

    while ((uint64_t)want * LOAD_DEN > (uint64_t)nn * LOAD_NUM) {
        nn += nn / 2;
    }
    nn = slots_round(nn);
    ns = slots_alloc(nn);
    if (ns == NULL) {
        return -1;
    }
    for (i = 0; i < n; i++) {
        uint64_t v = st->slots[i];

        if (v & SLOT_USED) {
            place(ns, nn, seg_slot_hash(s, v), v);
        }
    }
    slots_free(st->slots, n);
    st->slots = ns;
    st->nslots = nn;
    return 0;
}

/* See seg_internal.h. */
int
do_index_add(struct seg *s, struct seg_stripe *st, uint64_t hash, uint64_t slot)
{
    uint32_t want = st->count + 1;

    if ((uint64_t)want * LOAD_DEN > (uint64_t)st->nslots * LOAD_NUM && do_grow(s, st, want) < 0) {
        return -1;
    }
    place(st->slots, st->nslots, hash, slot);
    __atomic_store_n(&st->count, want, __ATOMIC_RELAXED);
    return 0;
}

/* See seg_internal.h. Backward shift: each slot after the hole that may
 * live at the hole (its home is not between the hole and it) moves back,
 * so a probe never meets a hole before its key. */
void
do_index_remove(struct seg *s, struct seg_stripe *st, uint64_t *slot)
{
    uint32_t n = st->nslots, i = (uint32_t)(slot - st->slots), j = i;

    for (;;) {
        uint64_t v;
        uint32_t k;

        if (++j == n) {
            j = 0;
        }
        v = st->slots[j];
        if (!(v & SLOT_USED)) {
            break;
        }
        k = home(seg_slot_hash(s, v), n);
        /* Distance from its home to the hole below the distance to where
         * it is: the hole is on its probe path. */
        if ((i + n - k) % n < (j + n - k) % n) {
            st->slots[i] = v;
            i = j;
        }
    }
    st->slots[i] = 0;
    __atomic_store_n(&st->count, st->count - 1, __ATOMIC_RELAXED);
}
