/*
 * diff: what changes between two rings. The positions of both rings cut the
 * circle into elementary arcs on which both preference lists are constant;
 * walking the two sorted position arrays together visits each arc once.
 * The handoff is planned from the arcs; ringctl plan prints the fractions.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "ring/ring.h"
#include "ring/ring_internal.h"

/*
 * map[i] = index in `to` of node i of `from` (by id), or UINT32_MAX when it
 * is not there. Both by_id arrays are sorted by id, so one merge does it.
 */
static void
map_nodes(const struct ring *from, const struct ring *to, uint32_t *map)
{
    uint32_t i = 0, j = 0, na = from->m->n_nodes, nb = to->m->n_nodes;

    for (i = 0; i < na; i++) {
        map[i] = UINT32_MAX;
    }
    i = 0;
    while (i < na && j < nb) {
        uint16_t x = from->by_id[i], y = to->by_id[j];
        int      c = strcmp(from->m->nodes[x].id, to->m->nodes[y].id);

        if (c == 0) {
            map[x] = y;
            i++;
            j++;
        } else if (c < 0) {
            i++;
        } else {
            j++;
        }
    }
}

/* Append an arc (lo, hi] or extend the last one when it ends at lo with
 * the same lists. Returns RING_OK or RING_ENOMEM. */
static int
add_arc(struct ring_diff *d, uint32_t *cap, uint64_t lo, uint64_t hi, const uint32_t *lo_nodes,
        uint32_t n_old, const uint32_t *hi_nodes, uint32_t n_new, bool changed)
{
    struct ring_arc *a;

    if (d->n_arcs > 0) {
        a = &d->arcs[d->n_arcs - 1];
        if (a->hi == lo && a->n_old == n_old && a->n_new == n_new && a->changed == changed &&
            memcmp(a->old_nodes, lo_nodes, n_old * sizeof(*lo_nodes)) == 0 &&
            memcmp(a->new_nodes, hi_nodes, n_new * sizeof(*hi_nodes)) == 0) {
            a->hi = hi;
            return RING_OK;
        }
    }
    if (d->n_arcs == *cap) {
        uint32_t         ncap = *cap == 0 ? 64 : *cap * 2;
        struct ring_arc *na = realloc(d->arcs, (size_t)ncap * sizeof(*na));

        if (na == NULL) {
            return RING_ENOMEM;
        }
        d->arcs = na;
        *cap = ncap;
    }
    a = &d->arcs[d->n_arcs++];
    memset(a, 0, sizeof(*a));
    a->lo = lo;
    a->hi = hi;
    a->n_old = n_old;
    a->n_new = n_new;
    a->changed = changed;
    memcpy(a->old_nodes, lo_nodes, n_old * sizeof(*lo_nodes));
    memcpy(a->new_nodes, hi_nodes, n_new * sizeof(*hi_nodes));
    return RING_OK;
}

/*
 * ring_diff: see ring.h. Lists are compared in order (the preference order
 * is part of the placement), old ids mapped to new indexes. Each ring uses
 * its own membership's replicas, capped at 8. The caller owns the result.
 */
static struct ring_diff *
diff(const struct ring *from, const struct ring *to, bool all)
{
    struct ring_diff *d;
    uint32_t         *map = NULL, cap = 0;
    uint32_t          ra = UINT32_MAX, rb = UINT32_MAX, ia = 0, ib = 0;
    uint32_t          na = from->n_points, nb = to->n_points, n_old = 0, n_new = 0;
    uint32_t          want_a, want_b, lold[RING_R_MAX], lnew[RING_R_MAX], k;
    uint64_t          prev, x;
    unsigned __int128 moved_primary = 0, moved_list = 0;
    const double      scale = 1.0 / 18446744073709551616.0;
    bool              first = true;

    d = calloc(1, sizeof(*d));
    map = malloc((size_t)from->m->n_nodes * sizeof(*map));
    if (d == NULL || map == NULL) {
        goto fail;
    }
    map_nodes(from, to, map);
    want_a = from->m->replicas < RING_R_MAX ? from->m->replicas : RING_R_MAX;
    want_b = to->m->replicas < RING_R_MAX ? to->m->replicas : RING_R_MAX;
    /* The first elementary arc wraps: it starts at the largest position. */
    prev = from->pos[na - 1] > to->pos[nb - 1] ? from->pos[na - 1] : to->pos[nb - 1];
    while (ia < na || ib < nb) {
        uint32_t          rank_a, rank_b;
        unsigned __int128 len;
        bool              same_primary, same_list;

        if (ib >= nb || (ia < na && from->pos[ia] <= to->pos[ib])) {
            x = from->pos[ia];
        } else {
            x = to->pos[ib];
        }
        /* Keys in (prev, x] go to the first point >= x in each ring. */
        rank_a = ia == na ? 0 : ia;
        rank_b = ib == nb ? 0 : ib;
        while (ia < na && from->pos[ia] == x) {
            ia++;
        }
        while (ib < nb && to->pos[ib] == x) {
            ib++;
        }
        len = (uint64_t)(x - prev);
        if (len == 0 && first) {
            /* Only one distinct position: this arc is the whole circle. */
            len = (unsigned __int128)1 << 64;
        }
        first = false;
        if (rank_a != ra) {
            ra = rank_a;
            n_old = ring_locate_rank(from, ra, want_a, lold);
        }
        if (rank_b != rb) {
            rb = rank_b;
            n_new = ring_locate_rank(to, rb, want_b, lnew);
        }
        same_primary = map[lold[0]] == lnew[0];
        same_list = n_old == n_new;
        for (k = 0; same_list && k < n_old; k++) {
            same_list = map[lold[k]] == lnew[k];
        }
        if (!same_primary) {
            moved_primary += len;
        }
        if (!same_list) {
            moved_list += len;
        }
        if ((!same_list || all) &&
            add_arc(d, &cap, prev, x, lold, n_old, lnew, n_new, !same_list) != RING_OK) {
            goto fail;
        }
        prev = x;
    }
    /* An arc that ends at the last position continues in the first one. */
    if (d->n_arcs > 1) {
        struct ring_arc *f = &d->arcs[0], *l = &d->arcs[d->n_arcs - 1];

        if (l->hi == f->lo && l->n_old == f->n_old && l->n_new == f->n_new &&
            l->changed == f->changed &&
            memcmp(l->old_nodes, f->old_nodes, sizeof(f->old_nodes)) == 0 &&
            memcmp(l->new_nodes, f->new_nodes, sizeof(f->new_nodes)) == 0) {
            f->lo = l->lo;
            d->n_arcs--;
        }
    }
    d->primary_moved = (double)moved_primary * scale;
    d->list_moved = (double)moved_list * scale;
    free(map);
    return d;
fail:
    free(map);
    ring_diff_free(d);
    return NULL;
}

/* See ring.h. */
struct ring_diff *
ring_diff(const struct ring *from, const struct ring *to)
{
    return diff(from, to, false);
}

/* See ring.h. */
struct ring_diff *
ring_diff_all(const struct ring *from, const struct ring *to)
{
    return diff(from, to, true);
}

/* ring_diff_free: see ring.h; NULL is fine. */
void
ring_diff_free(struct ring_diff *d)
{
    if (d == NULL) {
        return;
    }
    free(d->arcs);
    free(d);
}
