/*
 * route: where keys go. A key's owners come from ring/ (ring_hash +
 * ring_locate) and nothing else; a multi-get is planned by grouping its
 * keys on the first usable owner of each, one group per node.
 */
#ifndef CLIENT_ROUTE_H
#define CLIENT_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring/ring.h"

/* One key of a multi-get and its place in its preference list. */
struct route_key {
    const char *key;
    size_t      len;
    uint32_t    owners[RING_R_MAX];
    uint32_t    n_owners;
    uint32_t    next;    /* the owner to try next */
    bool        done;    /* already answered; skipped by planning */
    bool        refused; /* an owner refused the login: reported as EAUTH */
};

/* Owners of a key, primary first, into owners[] (RING_R_MAX entries);
 * returns how many (min(replicas, nodes, RING_R_MAX)). */
uint32_t route_owners(const struct ring *r, uint32_t replicas, const char *key, size_t len,
                      uint32_t *owners);

/* Is this node worth a request now? Asked at most once per node per plan. */
typedef bool (*route_usable_fn)(void *arg, uint32_t node);

/* A multi-get round: keys grouped by node. */
struct route_plan {
    uint32_t  n_groups;
    uint32_t *node;      /* [n_groups]: node of each group, first-use order */
    size_t   *start;     /* [n_groups + 1]: group g is idx[start[g]..start[g+1]) */
    size_t   *idx;       /* key indexes, request order within a group */
    size_t    n_orphans; /* pending keys left with no usable owner */
};

/* Plan a round over the keys not yet done: each goes to its first usable
 * owner at or after keys[i].next (next is advanced past unusable ones; it
 * equals n_owners for an orphan). 0 or RINGCACHE_ENOMEM; free the plan
 * with route_plan_free. */
int route_plan_build(struct route_plan *p, size_t n_nodes, struct route_key *keys, size_t n,
                     route_usable_fn usable, void *arg);

void route_plan_free(struct route_plan *p);

#endif
