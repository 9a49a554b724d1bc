/*
 * ring: the ring of points of a membership (docs/PLACEMENT.md), built in one
 * batch into flat sorted arrays, with an index on the top bits of the
 * position so a lookup touches a few cache lines. Lookups and preference
 * lists are pure: no allocation, no locks, safe from any number of threads.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "ring/ring.h"
#include "ring/ring_internal.h"

/* Inline XXH3 so the build loop does not pay a library call per point. */
#define XXH_INLINE_ALL
#include <xxhash.h>

/* Ranges of the lookup index longer than this are binary-searched. */
#define RING_SCAN_MAX 16

/* ring_hash: see ring.h. */
uint64_t
ring_hash(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}

/* qsort_r comparator: node indexes (uint16_t) by id bytes. */
static int
cmp_by_id(const void *a, const void *b, void *arg)
{
    const struct ring_node *nodes = arg;

    return strcmp(nodes[*(const uint16_t *)a].id,
                  nodes[*(const uint16_t *)b].id);
}

/* qsort_r comparator: node indexes by zone, then index (deterministic). */
static int
cmp_by_zone(const void *a, const void *b, void *arg)
{
    const struct ring_node *nodes = arg;
    uint16_t x = *(const uint16_t *)a, y = *(const uint16_t *)b;
    int c = strcmp(nodes[x].zone, nodes[y].zone);

    if (c != 0) {
        return c;
    }
    return x < y ? -1 : x > y;
}

/*
 * Give each node a zone index: one per named zone, and one of its own for
 * every node without a zone (the contract counts it as a zone alone).
 * Returns the number of zones; tmp has n entries.
 */
static uint32_t
assign_zones(const struct ring_members *m, uint16_t *zone, uint16_t *tmp)
{
    uint32_t i, n = m->n_nodes, nz = 0;
    const char *prev = NULL;

    for (i = 0; i < n; i++) {
        tmp[i] = (uint16_t)i;
    }
    qsort_r(tmp, n, sizeof(*tmp), cmp_by_zone, m->nodes);
    for (i = 0; i < n; i++) {
        const char *z = m->nodes[tmp[i]].zone;

        if (z[0] == '\0' || prev == NULL || strcmp(z, prev) != 0) {
            nz++;
        }
        zone[tmp[i]] = (uint16_t)(nz - 1);
        prev = z[0] == '\0' ? NULL : z;
    }
    return nz;
}

/* Write v in decimal at p (no NUL); returns the number of digits. */
static size_t
put_decimal(char *p, uint32_t v)
{
    char tmp[10];
    size_t n = 0, i;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (i = 0; i < n; i++) {
        p[i] = tmp[n - 1 - i];
    }
    return n;
}

/* Number of index bits for n points: about 2-4 points per bucket, so the
 * index costs 1-2 bytes per point. */
static uint32_t
index_bits(uint64_t n)
{
    uint32_t lg = 0;

    while ((n >> (lg + 1)) != 0) {
        lg++;
    }
    if (lg < 2) {
        return 1;
    }
    return lg - 1 > 25 ? 25 : lg - 1;
}

/*
 * ring_build_hashed: see ring_internal.h. Points are generated in ring tie
 * order (nodes by id, then vnode index) and scattered stably into buckets
 * on the top idx_bits bits of their position, each bucket insertion-sorted
 * as points land: so equal positions stay in (id, vnode) order and the
 * result does not depend on the order of m->nodes. A bucket holds a few
 * points with XXH3; a hash that piles points into one bucket (the 8-bit
 * test hash) makes this quadratic in that bucket, which tests keep small. The caller owns the result.
 */
struct ring *
ring_build_hashed(const struct ring_members *m, ring_hash_fn hash)
{
    struct ring *r = NULL;
    uint64_t total = 0, *gpos = NULL;
    uint16_t *tmp = NULL;
    uint32_t i, g, nb, shift;
    char buf[RING_ID_MAX + 12];

    if (m == NULL || hash == NULL ||
        ring_members_validate(m, NULL, 0) != RING_OK) {
        return NULL;
    }
    for (i = 0; i < m->n_nodes; i++) {
        total += (uint64_t)m->nodes[i].weight * m->vnodes;
    }
    if (total > RING_POINTS_MAX) {
        return NULL;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return NULL;
    }
    r->hash = hash;
    r->n_points = (uint32_t)total;
    r->idx_bits = index_bits(total);
    nb = 1u << r->idx_bits;
    shift = 64 - r->idx_bits;
    r->m = ring_members_dup(m);
    r->pos = calloc(total, sizeof(*r->pos));
    r->node = malloc(total * sizeof(*r->node));
    r->idx = calloc((size_t)nb + 1, sizeof(*r->idx));
    r->zone = malloc((size_t)m->n_nodes * sizeof(*r->zone));
    r->by_id = malloc((size_t)m->n_nodes * sizeof(*r->by_id));
    tmp = malloc((size_t)m->n_nodes * sizeof(*tmp));
    gpos = malloc(total * sizeof(*gpos));
    if (r->m == NULL || r->pos == NULL || r->node == NULL || r->idx == NULL ||
        r->zone == NULL || r->by_id == NULL || tmp == NULL || gpos == NULL) {
        goto fail;
    }
    for (i = 0; i < m->n_nodes; i++) {
        r->by_id[i] = (uint16_t)i;
    }
    qsort_r(r->by_id, m->n_nodes, sizeof(*r->by_id), cmp_by_id, r->m->nodes);
    r->n_zones = assign_zones(r->m, r->zone, tmp);

    /* Hash every point, in tie order, and count the buckets. */
    g = 0;
    for (i = 0; i < m->n_nodes; i++) {
        uint16_t nd = r->by_id[i];
        const struct ring_node *n = &m->nodes[nd];
        size_t idlen = strlen(n->id);
        uint32_t v, nv = n->weight * m->vnodes;

        memcpy(buf, n->id, idlen);
        buf[idlen] = '#';
        for (v = 0; v < nv; v++) {
            size_t len = idlen + 1 + put_decimal(buf + idlen + 1, v);
            /* The production hash inlined: no indirect call per point. */
            uint64_t h = hash == ring_hash ? XXH3_64bits(buf, len)
                                           : hash(buf, len);

            gpos[g] = h;
            r->idx[h >> shift]++;
            g++;
        }
    }
    /* idx[b] = start of bucket b, then the next free slot of it. */
    for (i = 0, g = 0; i < nb; i++) {
        uint32_t c = r->idx[i];

        r->idx[i] = g;
        g += c;
    }
    /* Scatter in generation order (node by node, so the owner is known), insertion-sorting each point into its
     * bucket as it lands: buckets hold 2-4 points, so this touches the
     * line just written. Moving only past strictly greater positions keeps
     * ties in generation order. Slots below the bucket hold smaller
     * positions or zeros (pos is zero-filled), so the walk stops there. */
    g = 0;
    for (i = 0; i < m->n_nodes; i++) {
        uint16_t nd = r->by_id[i];
        uint32_t end = g + m->nodes[nd].weight * m->vnodes;

        for (; g < end; g++) {
            uint64_t p = gpos[g];
            uint32_t j = r->idx[p >> shift]++;

            /* The destination of a later point, fetched ahead. */
            if (g + 16 < r->n_points) {
                __builtin_prefetch(&r->pos[r->idx[gpos[g + 16] >> shift]], 1);
            }
            while (j > 0 && r->pos[j - 1] > p) {
                r->pos[j] = r->pos[j - 1];
                r->node[j] = r->node[j - 1];
                j--;
            }
            r->pos[j] = p;
            r->node[j] = nd;
        }
    }
    /* Now idx[b] = end of bucket b = start of bucket b + 1. */
    memmove(r->idx + 1, r->idx, (size_t)nb * sizeof(*r->idx));
    r->idx[0] = 0;
    free(gpos);
    free(tmp);
    return r;
fail:
    free(gpos);
    free(tmp);
    ring_free(r);
    return NULL;
}

/* ring_build: see ring.h. Points hashed with XXH3_64bits, seed 0. */
struct ring *
ring_build(const struct ring_members *m)
{
    return ring_build_hashed(m, ring_hash);
}

/* ring_free: see ring.h; NULL is fine. */
void
ring_free(struct ring *r)
{
    if (r == NULL) {
        return;
    }
    ring_members_free(r->m);
    free(r->pos);
    free(r->node);
    free(r->idx);
    free(r->zone);
    free(r->by_id);
    free(r);
}

/* ring_members: see ring.h. */
const struct ring_members *
ring_members(const struct ring *r)
{
    return r->m;
}

/* ring_n_points: see ring.h. */
uint32_t
ring_n_points(const struct ring *r)
{
    return r->n_points;
}

/* ring_point_rank: see ring.h. The index narrows the search to one bucket
 * (a few points); the first point >= hash there, else the next bucket's
 * first point, is the owner; past the last point it wraps to rank 0. */
uint32_t
ring_point_rank(const struct ring *r, uint64_t hash)
{
    uint64_t b = hash >> (64 - r->idx_bits);
    uint32_t lo = r->idx[b], hi = r->idx[b + 1];

    if (hi - lo > RING_SCAN_MAX) {
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;

            if (r->pos[mid] < hash) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
    } else {
        while (lo < hi && r->pos[lo] < hash) {
            lo++;
        }
    }
    return lo == r->n_points ? 0 : lo;
}

/* ring_primary: see ring.h. */
uint32_t
ring_primary(const struct ring *r, uint64_t hash)
{
    return r->node[ring_point_rank(r, hash)];
}

/*
 * Preference list for want > 16 (rare: R is usually 1-3): bitmaps of
 * chosen nodes and used zones on the stack (16 KiB at most) instead of
 * scanning out[].
 */
static uint32_t
locate_bitmap(const struct ring *r, uint32_t start, uint32_t want,
              uint32_t *out)
{
    uint64_t chosen[(RING_NODES_MAX + 64) / 64];
    uint64_t used[(RING_NODES_MAX + 64) / 64];
    uint32_t words = (r->m->n_nodes + 63) / 64;
    uint32_t np = r->n_points, cnt = 0, s, p;

    memset(chosen, 0, words * sizeof(chosen[0]));
    memset(used, 0, words * sizeof(used[0]));
    for (s = 0, p = start; s < np; s++, p = (p + 1 == np) ? 0 : p + 1) {
        uint32_t nd = r->node[p], z = r->zone[nd];

        if (used[z / 64] & (1ull << (z % 64))) {
            continue;
        }
        used[z / 64] |= 1ull << (z % 64);
        chosen[nd / 64] |= 1ull << (nd % 64);
        out[cnt++] = nd;
        if (cnt == want) {
            return cnt;
        }
        if (cnt == r->n_zones) {
            break;
        }
    }
    for (s = 0, p = start; s < np; s++, p = (p + 1 == np) ? 0 : p + 1) {
        uint32_t nd = r->node[p];

        if (chosen[nd / 64] & (1ull << (nd % 64))) {
            continue;
        }
        chosen[nd / 64] |= 1ull << (nd % 64);
        out[cnt++] = nd;
        if (cnt == want) {
            break;
        }
    }
    return cnt;
}

/*
 * ring_locate_rank: see ring_internal.h. Pass 1 takes nodes whose zone is
 * not used yet (a chosen node's zone is used, so this also skips chosen
 * nodes) and ends once every zone is used; pass 2 fills with any node not
 * chosen. Every node has at least one point, so want <= n_nodes is always
 * reached within one turn.
 */
uint32_t
ring_locate_rank(const struct ring *r, uint32_t start, uint32_t want,
                 uint32_t *out)
{
    uint16_t zused[16];
    uint32_t np = r->n_points, cnt = 0, s, p, j;

    if (want > r->m->n_nodes) {
        want = r->m->n_nodes;
    }
    if (want == 0) {
        return 0;
    }
    if (want > 16) {
        return locate_bitmap(r, start, want, out);
    }
    for (s = 0, p = start; s < np; s++, p = (p + 1 == np) ? 0 : p + 1) {
        uint32_t nd = r->node[p];
        uint16_t z = r->zone[nd];

        for (j = 0; j < cnt; j++) {
            if (zused[j] == z) {
                break;
            }
        }
        if (j < cnt) {
            continue;
        }
        zused[cnt] = z;
        out[cnt++] = nd;
        if (cnt == want) {
            return cnt;
        }
        if (cnt == r->n_zones) {
            break;
        }
    }
    for (s = 0, p = start; s < np; s++, p = (p + 1 == np) ? 0 : p + 1) {
        uint32_t nd = r->node[p];

        for (j = 0; j < cnt; j++) {
            if (out[j] == nd) {
                break;
            }
        }
        if (j < cnt) {
            continue;
        }
        out[cnt++] = nd;
        if (cnt == want) {
            break;
        }
    }
    return cnt;
}

/* ring_locate: see ring.h. */
uint32_t
ring_locate(const struct ring *r, uint64_t hash, uint32_t want, uint32_t *out)
{
    return ring_locate_rank(r, ring_point_rank(r, hash), want, out);
}

/*
 * ring_point: see ring.h. The vnode index is not stored (it would cost 4
 * bytes a point): it is recovered by re-hashing the owner's points, which
 * costs weight*vnodes hashes. For tests and tools, not the data path.
 */
void
ring_point(const struct ring *r, uint32_t rank, uint64_t *pos, uint32_t *node,
           uint32_t *vnode)
{
    const struct ring_node *n;
    uint32_t k = 0, j, v, nv;
    uint64_t p;
    char buf[RING_ID_MAX + 12];
    size_t idlen;

    if (rank >= r->n_points) {
        rank = r->n_points - 1;
    }
    p = r->pos[rank];
    if (pos != NULL) {
        *pos = p;
    }
    if (node != NULL) {
        *node = r->node[rank];
    }
    if (vnode == NULL) {
        return;
    }
    /* Earlier points of the same node at the same position have the
     * smaller vnode indexes: ours is the k-th match. */
    for (j = rank; j > 0 && r->pos[j - 1] == p; j--) {
        if (r->node[j - 1] == r->node[rank]) {
            k++;
        }
    }
    n = &r->m->nodes[r->node[rank]];
    idlen = strlen(n->id);
    memcpy(buf, n->id, idlen);
    buf[idlen] = '#';
    nv = n->weight * r->m->vnodes;
    *vnode = 0;
    for (v = 0; v < nv; v++) {
        size_t len = idlen + 1 + put_decimal(buf + idlen + 1, v);

        if (r->hash(buf, len) == p && k-- == 0) {
            *vnode = v;
            return;
        }
    }
}

/*
 * ring_shares: see ring.h. The point at rank i owns the arc
 * (pos[i-1], pos[i]], rank 0 the wrap arc (pos[n-1], 2^64) + [0, pos[0]];
 * differences are exact in uint64 (mod 2^64). When every point sits at
 * one position, rank 0 owns the whole circle.
 */
void
ring_shares(const struct ring *r, double *share)
{
    const double scale = 1.0 / 18446744073709551616.0;
    uint32_t i, np = r->n_points;
    uint64_t prev;

    memset(share, 0, (size_t)r->m->n_nodes * sizeof(*share));
    if (r->pos[0] == r->pos[np - 1]) {
        share[r->node[0]] = 1.0;
        return;
    }
    prev = r->pos[np - 1];
    for (i = 0; i < np; i++) {
        share[r->node[i]] += (double)(r->pos[i] - prev);
        prev = r->pos[i];
    }
    for (i = 0; i < r->m->n_nodes; i++) {
        share[i] *= scale;
    }
}

/* ring_bytes: see ring.h. Everything the ring keeps, membership copy
 * included. */
size_t
ring_bytes(const struct ring *r)
{
    return sizeof(*r) + sizeof(*r->m) +
           (size_t)r->m->cap_nodes * sizeof(struct ring_node) +
           (size_t)r->n_points * (sizeof(*r->pos) + sizeof(*r->node)) +
           (((size_t)1 << r->idx_bits) + 1) * sizeof(*r->idx) +
           (size_t)r->m->n_nodes * (sizeof(*r->zone) + sizeof(*r->by_id));
}
