/*
 * arcset: sets of ring arcs (docs/cluster.md), kept as sorted, disjoint,
 * inclusive ranges of key hashes, and the preference-list helpers the
 * cluster and route code share. No I/O, no locks; a set is owned by
 * whoever embeds it.
 */
#ifndef SERVER_ARCSET_H
#define SERVER_ARCSET_H

#include <stdbool.h>
#include <stdint.h>

#include "ring/ring.h"

/* Sorted, disjoint, inclusive ranges of key hashes. */
struct arc_range {
    uint64_t start, end;
};
struct arcset {
    uint32_t          n, cap;
    struct arc_range *r;
};

/* Add the ring arc (lo, hi] (lo == hi: the whole circle); keep unsorted
 * until arcset_finish. 0 or -1 (ENOMEM). */
int arcset_add_arc(struct arcset *a, uint64_t lo, uint64_t hi);
/* Sort and merge what was added. */
void arcset_finish(struct arcset *a);
/* Is h in the set? Binary search over the range starts. */
bool arcset_has(const struct arcset *a, uint64_t h);
/* Free the ranges; the set is empty and reusable after. */
void arcset_clear(struct arcset *a);
/* Deep copy of a finished set into dst (overwritten, not freed first).
 * 0 or -1 (ENOMEM, dst left empty). */
int arcset_copy(struct arcset *dst, const struct arcset *src);
/* Append every range of src to dst (unsorted until arcset_finish).
 * 0 or -1 (ENOMEM). */
int arcset_append(struct arcset *dst, const struct arcset *src);
/* arcset_has as a store predicate (server/store.h): arg is the arcset. */
bool arcset_pred(uint64_t hash, void *arg);
/* The set's prefix map (server/store.h: bit p set when a range holds a
 * hash whose top `bits` bits are p) into map, 2^bits bits, overwritten. */
void arcset_prefixes(const struct arcset *a, unsigned bits, uint64_t *map);
/* arcset_prefixes into a new map (free it); NULL on ENOMEM. */
uint64_t *arcset_prefixes_new(const struct arcset *a, unsigned bits);
/* The prefix map of the set's complement: every prefix but those wholly
 * inside one of its ranges. */
void arcset_prefixes_outside(const struct arcset *a, unsigned bits, uint64_t *map);
/* Fraction of the keyspace covered, for logs and tests. */
double arcset_share(const struct arcset *a);

/* The arcs of ring r whose preference list (R of the ring) contains node
 * index self; 0 or -1 (ENOMEM). */
int arcset_owned(struct arcset *a, const struct ring *r, uint32_t self);

/* How many owners of a preference list to look at for R replicas. */
static inline uint32_t
list_len(uint32_t replicas)
{
    return replicas < RING_R_MAX ? replicas : RING_R_MAX;
}

/* Is node idx (an index, or -1 for none) in list[0..n)? */
static inline bool
list_has(const uint32_t *list, uint32_t n, int32_t idx)
{
    uint32_t k;

    for (k = 0; k < n; k++) {
        if ((int32_t)list[k] == idx) {
            return true;
        }
    }
    return false;
}

#endif /* SERVER_ARCSET_H */
