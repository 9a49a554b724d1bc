/*
 * ring_internal: the layout of a built ring, shared by ring.c, diff.c and
 * ring_testing.c only. Nothing outside ring/ includes this file; the public
 * API is ring/ring.h.
 */
#ifndef RING_RING_INTERNAL_H
#define RING_RING_INTERNAL_H

#include "ring/ring.h"

/*
 * Points live in two parallel arrays sorted in ring order: pos[] (8 bytes)
 * and node[] (2 bytes, RING_NODES_MAX fits). The vnode index is not kept;
 * ring_point() recomputes it. idx[] is the lookup index: idx[b] is the rank
 * of the first point whose top idx_bits bits are >= b, with
 * idx[1 << idx_bits] == n_points; the build's bucket sort produces it.
 * pos[], idx[] and node[] share one allocation (`block`), which is either
 * malloc'ed or, for large rings, its own huge-page mapping (ring.c).
 */
struct ring {
    struct ring_members *m;    /* own copy of the membership */
    ring_hash_fn         hash; /* point hash the ring was built with */
    uint32_t             n_points;
    uint32_t             idx_bits;   /* 1..25 */
    uint32_t             n_zones;    /* distinct zones; unzoned nodes count 1 each */
    uint64_t            *pos;        /* n_points positions, ascending */
    uint16_t            *node;       /* n_points owner node indexes */
    uint32_t            *idx;        /* (1 << idx_bits) + 1 entries */
    uint16_t            *zone;       /* n_nodes zone indexes */
    uint16_t            *by_id;      /* n_nodes node indexes sorted by id */
    void                *block;      /* pos, idx and node live here */
    size_t               block_len;  /* bytes mapped; 0 when malloc'ed */
    size_t               block_size; /* bytes the arrays use */
};

/* ring_members_validate without the duplicate-id check (ring_build checks
 * duplicates on the id order it sorts anyway). RING_OK or RING_EINVAL with
 * a reason in err (err may be NULL). */
int ring_members_check_fields(const struct ring_members *m, char *err, size_t errlen);

/* Build with any point hash (ring_build passes XXH3). NULL on ENOMEM or an
 * invalid membership. */
struct ring *ring_build_hashed(const struct ring_members *m, ring_hash_fn hash);

/* Preference list walking clockwise from the point at rank `start`; same
 * contract as ring_locate. */
uint32_t ring_locate_rank(const struct ring *r, uint32_t start, uint32_t want, uint32_t *out);

#endif /* RING_RING_INTERNAL_H */
