/*
 * arcset: sets of ring arcs as sorted, disjoint ranges of key hashes. The
 * transition's importing, sourcing, losing and fence sets, the views'
 * fence, and the handoff streams' predicates (server/store.h) are arcsets.
 */
#include "config.h"
#include "server/arcset.h"

#include <stdlib.h>
#include <string.h>

/* Append one inclusive range. */
static int
arcset_push(struct arcset *a, uint64_t start, uint64_t end)
{
    if (a->n == a->cap) {
        uint32_t          ncap = a->cap == 0 ? 16 : a->cap * 2;
        struct arc_range *nr = realloc(a->r, (size_t)ncap * sizeof(*nr));

        if (nr == NULL) {
            return -1;
        }
        a->r = nr;
        a->cap = ncap;
    }
    a->r[a->n].start = start;
    a->r[a->n].end = end;
    a->n++;
    return 0;
}

/* (lo, hi] clockwise: [lo+1, hi], split in two when it wraps past 2^64-1. */
int
arcset_add_arc(struct arcset *a, uint64_t lo, uint64_t hi)
{
    if (lo == hi) {
        return arcset_push(a, 0, UINT64_MAX);
    }
    if (lo < hi) {
        return arcset_push(a, lo + 1, hi);
    }
    if (lo != UINT64_MAX && arcset_push(a, lo + 1, UINT64_MAX) < 0) {
        return -1;
    }
    return arcset_push(a, 0, hi);
}

static int
range_cmp(const void *x, const void *y)
{
    const struct arc_range *a = x, *b = y;

    return a->start < b->start ? -1 : a->start > b->start;
}

/* Sort by start and merge overlapping or touching ranges. */
void
arcset_finish(struct arcset *a)
{
    uint32_t i, o = 0;

    if (a->n == 0) {
        return;
    }
    qsort(a->r, a->n, sizeof(*a->r), range_cmp);
    for (i = 1; i < a->n; i++) {
        struct arc_range *last = &a->r[o];

        if (last->end == UINT64_MAX || a->r[i].start <= last->end + 1) {
            if (a->r[i].end > last->end) {
                last->end = a->r[i].end;
            }
        } else {
            a->r[++o] = a->r[i];
        }
    }
    a->n = o + 1;
}

/* Binary search for the last range starting at or before h. */
bool
arcset_has(const struct arcset *a, uint64_t h)
{
    uint32_t lo = 0, hi = a->n;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;

        if (a->r[mid].start <= h) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo > 0 && h <= a->r[lo - 1].end;
}

/* For store_walk, store_count, store_purge and dirty tracking. */
bool
arcset_pred(uint64_t hash, void *arg)
{
    return arcset_has(arg, hash);
}

/* See arcset.h. Ranges are disjoint and inclusive: each sets the bits of
 * the prefixes from its start's to its end's. */
void
arcset_prefixes(const struct arcset *a, unsigned bits, uint64_t *map)
{
    uint32_t i;

    memset(map, 0, ((size_t)1 << bits) / 8);
    for (i = 0; i < a->n; i++) {
        uint64_t p = a->r[i].start >> (64 - bits), last = a->r[i].end >> (64 - bits);

        for (; p <= last; p++) {
            map[p / 64] |= (uint64_t)1 << (p % 64);
        }
    }
}

/* See arcset.h. */
uint64_t *
arcset_prefixes_new(const struct arcset *a, unsigned bits)
{
    uint64_t *map = malloc(((size_t)1 << bits) / 8);

    if (map != NULL) {
        arcset_prefixes(a, bits, map);
    }
    return map;
}

/* See arcset.h. A finished set's touching ranges are merged, so a prefix
 * the set covers whole lies inside one range. */
void
arcset_prefixes_outside(const struct arcset *a, unsigned bits, uint64_t *map)
{
    unsigned shift = 64 - bits;
    uint64_t low = ((uint64_t)1 << shift) - 1;
    uint32_t i;

    memset(map, 0xff, ((size_t)1 << bits) / 8);
    for (i = 0; i < a->n; i++) {
        /* The prefixes whose every hash is in [start, end]. */
        uint64_t first = (a->r[i].start >> shift) + ((a->r[i].start & low) != 0);
        uint64_t end = a->r[i].end >> shift;
        uint64_t p;

        if ((a->r[i].end & low) != low) {
            if (end == 0) {
                continue;
            }
            end--;
        }
        for (p = first; p <= end && p < ((uint64_t)1 << bits); p++) {
            map[p / 64] &= ~((uint64_t)1 << (p % 64));
        }
    }
}

/* Free the ranges; the set is empty and reusable after. */
void
arcset_clear(struct arcset *a)
{
    free(a->r);
    a->r = NULL;
    a->n = a->cap = 0;
}

/* Covered fraction of 2^64. */
double
arcset_share(const struct arcset *a)
{
    long double sum = 0;
    uint32_t    i;

    for (i = 0; i < a->n; i++) {
        sum += (long double)(a->r[i].end - a->r[i].start) + 1.0L;
    }
    return (double)(sum / 18446744073709551616.0L);
}

/* Deep copy of a finished set; see arcset.h. */
int
arcset_copy(struct arcset *dst, const struct arcset *src)
{
    memset(dst, 0, sizeof(*dst));
    if (src->n == 0) {
        return 0;
    }
    dst->r = malloc((size_t)src->n * sizeof(*dst->r));
    if (dst->r == NULL) {
        return -1;
    }
    memcpy(dst->r, src->r, (size_t)src->n * sizeof(*dst->r));
    dst->n = dst->cap = src->n;
    return 0;
}

/* Append every range of src (unsorted until arcset_finish). */
int
arcset_append(struct arcset *dst, const struct arcset *src)
{
    uint32_t i;

    for (i = 0; i < src->n; i++) {
        if (arcset_push(dst, src->r[i].start, src->r[i].end) < 0) {
            return -1;
        }
    }
    return 0;
}

/* What arcset_owned collects into: the set, and ENOMEM on the way. */
struct owned_ctx {
    struct arcset *a;
    int            rc;
};

static void
owned_add(uint64_t lo, uint64_t hi, void *arg)
{
    struct owned_ctx *ctx = arg;

    if (ctx->rc == 0 && arcset_add_arc(ctx->a, lo, hi) < 0) {
        ctx->rc = -1;
    }
}

/* Arcs of r whose preference list holds self (ring_owned_arcs walks the
 * ring; placement stays in ring/). */
int
arcset_owned(struct arcset *a, const struct ring *r, uint32_t self)
{
    struct owned_ctx ctx = { a, 0 };

    ring_owned_arcs(r, self, list_len(ring_members(r)->replicas), owned_add, &ctx);
    arcset_finish(a);
    return ctx.rc;
}
