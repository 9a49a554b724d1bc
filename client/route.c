/*
 * route: key placement for the client through ring/ only, and the
 * grouping of a multi-get by node (see route.h).
 */
#include <stdlib.h>
#include <string.h>

#include "client/ringcache.h"
#include "client/route.h"

uint32_t
route_owners(const struct ring *r, uint32_t replicas, const char *key, size_t len, uint32_t *owners)
{
    if (replicas > RING_R_MAX) {
        replicas = RING_R_MAX;
    }
    return ring_locate(r, ring_hash(key, len), replicas, owners);
}

int
route_plan_build(struct route_plan *p, size_t n_nodes, struct route_key *keys, size_t n,
                 route_usable_fn usable, void *arg)
{
    int32_t  *slot = NULL;  /* node -> group, -1 not asked, -2 unusable */
    uint32_t *group = NULL; /* key -> group, UINT32_MAX none */
    size_t   *fill = NULL, i;
    int       ret = RINGCACHE_ENOMEM;

    memset(p, 0, sizeof(*p));
    slot = malloc(n_nodes * sizeof(*slot));
    group = malloc((n > 0 ? n : 1) * sizeof(*group));
    p->node = malloc(n_nodes * sizeof(*p->node));
    p->start = calloc(n_nodes + 1, sizeof(*p->start));
    p->idx = malloc((n > 0 ? n : 1) * sizeof(*p->idx));
    fill = calloc(n_nodes + 1, sizeof(*fill));
    if (slot == NULL || group == NULL || p->node == NULL || p->start == NULL || p->idx == NULL ||
        fill == NULL) {
        goto out;
    }
    for (i = 0; i < n_nodes; i++) {
        slot[i] = -1;
    }
    for (i = 0; i < n; i++) {
        struct route_key *k = &keys[i];

        group[i] = UINT32_MAX;
        if (k->done) {
            continue;
        }
        while (k->next < k->n_owners) {
            uint32_t node = k->owners[k->next];

            if (slot[node] == -1) {
                if (usable(arg, node)) {
                    p->node[p->n_groups] = node;
                    slot[node] = (int32_t)p->n_groups++;
                } else {
                    slot[node] = -2;
                }
            }
            if (slot[node] >= 0) {
                break;
            }
            k->next++;
        }
        if (k->next == k->n_owners) {
            p->n_orphans++;
            continue;
        }
        group[i] = (uint32_t)slot[k->owners[k->next]];
        p->start[group[i] + 1]++;
    }
    /* Counting sort by group keeps request order inside each group. */
    for (i = 0; i < p->n_groups; i++) {
        p->start[i + 1] += p->start[i];
        fill[i] = p->start[i];
    }
    for (i = 0; i < n; i++) {
        if (group[i] != UINT32_MAX) {
            p->idx[fill[group[i]]++] = i;
        }
    }
    ret = 0;
out:
    free(slot);
    free(group);
    free(fill);
    if (ret != 0) {
        route_plan_free(p);
    }
    return ret;
}

void
route_plan_free(struct route_plan *p)
{
    free(p->node);
    free(p->start);
    free(p->idx);
    memset(p, 0, sizeof(*p));
}
