/*
 * cluster_internal: the definition of struct cluster, for the files that
 * make up the node's cluster state (cluster.c, statedir.c, transition.c)
 * and its unit tests. The same pattern as ring/ring_internal.h: the rest
 * of the node sees only server/cluster.h.
 */
#ifndef SERVER_CLUSTER_INTERNAL_H
#define SERVER_CLUSTER_INTERNAL_H

#include "server/cluster.h"

/*
 * The mutable state: owned by the cluster thread (and main before it).
 * Written only by the cluster's own files (cluster.c, statedir.c,
 * transition.c; the unit tests read it): everything else goes through
 * server/cluster.h.
 */
struct cluster {
    cluster_barrier_fn barrier; /* NULL in unit tests */
    void              *barrier_arg;
    char               id[RING_ID_MAX + 1];
    char               state_dir[1024];
    char               name[128];
    uint64_t           cluster_id; /* frame_cluster_id(name) */
    uint8_t            token[CLUSTER_TOKEN_MAX];
    size_t             token_len;
    bool               has_token;
    uint64_t           boot_id;
    struct peer_tls   *tls; /* NULL: plain TCP between nodes */

    struct ring_members *active;      /* NULL = no membership */
    struct ring         *active_ring; /* shared with the current view */
    int32_t              self_old;    /* index in active, -1 */

    /* The pending transition (pending == NULL: none). */
    struct ring_members *pending;
    struct ring         *pending_ring;
    int32_t              self_new; /* index in pending, -1 */
    uint8_t              ptoken[CLUSTER_TOKEN_MAX];
    size_t               ptoken_len;
    enum cluster_phase   phase;
    struct arcset        importing;  /* this node gains these */
    struct arcset        sourcing;   /* union of dests[].arcs */
    struct arcset        losing;     /* this node stops owning these */
    struct arcset        fence_arcs; /* sourcing + losing */
    struct cluster_dest *dests;
    uint32_t             n_dests;
    uint64_t             fence_held_ms;

    bool restored;                   /* the pending transition was loaded from the state
                                      * directory at start: what it imported before is gone */
    bool fresh;                      /* the pending transition was accepted while
                                      * recovering or behind: import everything */
    char (*failed)[RING_ID_MAX + 1]; /* not holders in the pending: the declared
                                      * failed ids first, then the stale ones */
    uint32_t      n_failed;
    uint32_t      n_dead; /* failed[0..n_dead) are declared failed */
    struct arcset kept;   /* ranges handed to a new owner that restarted since
                           * the copy, kept here (server/transition.c): this
                           * node is their holder in the next transition */
    struct cluster_live live;
    bool                served; /* the state dir says we served as a member */

    struct cluster_view    *view; /* published (atomic pointer) */
    struct cluster_counters ctr;
};

#endif /* SERVER_CLUSTER_INTERNAL_H */
