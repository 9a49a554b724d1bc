/*
 * cluster: this node's view of the cluster (docs/cluster.md). The active and
 * pending memberships, their rings, this node's arcs in a transition
 * (importing, source per destination, losing, fenced), the route decision
 * for a keyed request, and persistence to the state directory
 * (server/statedir.h). Workers read an immutable view through one
 * atomically published pointer; everything else is owned by the cluster
 * thread (server/cport.c, server/transition.c).
 */
#ifndef SERVER_CLUSTER_H
#define SERVER_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring/ring.h"
#include "server/arcset.h"

#define CLUSTER_TOKEN_MAX   256   /* bytes of the admin and transition tokens */
#define CLUSTER_PORT_OFFSET 10000 /* cluster port = client port + this */
/* Whether every owner of a key holds its writes: the primary forwards each
 * write as a post-image to the other owners before it acknowledges
 * (server/replicate.c), so any owner may serve reads. A transition still
 * copies from the old primary to every new owner other than itself (see
 * compute_arcs in cluster.c). */
#define CLUSTER_REPLICATED 1

/* Phases as the node sees them (values of ringcache.Phase). */
enum cluster_phase {
    CLUSTER_PHASE_NONE = 0,
    CLUSTER_PHASE_PREPARED = 1,
    CLUSTER_PHASE_COPYING = 2,
    CLUSTER_PHASE_FENCED = 3,
};

/*
 * What failure detection (server/health.c) tells the workers, read lock-free
 * on every keyed request; owned by struct cluster, so it outlives every
 * view. All fields are atomics.
 */
#define CLUSTER_MASK_WORDS 4 /* node indexes 0..255 in the masks below */
/* The ticker this late: the process was paused (or frozen). Shorter than
 * the time a peer takes to see a node down (HEALTH_DOWN_MS), so a node
 * notices a stall before anybody could have been declared its successor. */
#define CLUSTER_STALL_MS 1000
struct cluster_live {
    uint64_t tick_ms;      /* the ticker's last beat (monotonic ms), 0 = no ticker */
    uint32_t suspect;      /* 1: this process stalled; TRYAGAIN until a heartbeat round */
    uint32_t isolated;     /* 1: no peer answered for HEALTH_SUSPECT_MS: TRYAGAIN */
    uint32_t recovering;   /* 1: restarted empty: owned keys TRYAGAIN */
    uint64_t behind_epoch; /* a peer runs this higher epoch: everything TRYAGAIN */
    uint64_t down[CLUSTER_MASK_WORDS];    /* active indexes seen down */
    uint64_t empty[CLUSTER_MASK_WORDS];   /* active indexes up but holding nothing current
                                           * (their Pong says so) */
    uint64_t skipped[CLUSTER_MASK_WORDS]; /* active indexes post-images were not sent to
                                           * because a Prepare declared them failed; kept
                                           * (an abort leaves them behind) until the epoch
                                           * changes: their Pong says saw_you_down */
};

/*
 * An immutable snapshot that workers read lock-free. A new one is published
 * on every change (commit, prepare, fence, abort); the old one is freed only
 * after every worker passed the barrier given to cluster_new, so no worker ever
 * touches a freed view. Workers must not keep a view across event
 * callbacks.
 */
struct cluster_view {
    uint64_t     epoch;         /* active; 0 = no membership (plain cache) */
    uint64_t     pending_epoch; /* 0 = none */
    struct ring *ring;          /* active ring, NULL at epoch 0; freed
                                 * with the last view that uses it */
    int32_t       self;         /* this node's index in the ring, -1 */
    int32_t       pending_self; /* its index in the pending membership, -1 */
    uint32_t      replicas;
    struct arcset fence;                      /* ranges answering TRYAGAIN (empty unless fenced) */
    struct arcset importing;                  /* ranges this node is being refilled with */
    uint64_t      failed[CLUSTER_MASK_WORDS]; /* active indexes the pending
                                               * transition declares failed */
    char                *config;              /* the whole `config` reply */
    size_t               config_len;
    struct cluster_live *live; /* the cluster's, NULL in unit tests */
    uint64_t             gen;  /* 1, 2, ...: one more for every view published */
};

/* Is bit idx of a live mask set? */
static inline bool
cluster_mask_has(const uint64_t *mask, uint32_t idx)
{
    return idx < 64 * CLUSTER_MASK_WORDS &&
           (__atomic_load_n(&mask[idx / 64], __ATOMIC_RELAXED) >> (idx % 64) & 1) != 0;
}

/* Set bit idx of a live mask (indexes past the mask are not tracked). */
static inline void
cluster_mask_set(uint64_t *mask, uint32_t idx)
{
    if (idx < 64 * CLUSTER_MASK_WORDS) {
        __atomic_or_fetch(&mask[idx / 64], (uint64_t)1 << (idx % 64), __ATOMIC_RELAXED);
    }
}

/* Is node idx of the view declared failed by the pending transition (the
 * store's authority to act without it: `ringctl remove --failed`)? */
static inline bool
cluster_view_failed(const struct cluster_view *v, uint32_t idx)
{
    return idx < 64 * CLUSTER_MASK_WORDS && (v->failed[idx / 64] >> (idx % 64) & 1) != 0;
}

/* Is node idx seen down, or up but holding nothing current (recovering,
 * behind, no membership), by this node's heartbeats? Either way it holds
 * nothing that others must wait for. */
static inline bool
cluster_live_gone(const struct cluster_live *l, uint32_t idx)
{
    return cluster_mask_has(l->down, idx) || cluster_mask_has(l->empty, idx);
}

/* Does this node act without node idx: declared failed by the pending
 * transition, and seen down or holding nothing (its Pong says so)? A node
 * declared failed that answers again as a current member is waited for
 * (it turns recovering at our next Pong: saw_you_down), so two nodes never
 * act as the primary of one arc. */
static inline bool
cluster_view_gone(const struct cluster_view *v, uint32_t idx)
{
    return cluster_view_failed(v, idx) && (v->live == NULL || cluster_live_gone(v->live, idx));
}

/* Address of node idx of the view's membership ("" past the end). */
static inline const char *
cluster_view_addr(const struct cluster_view *v, uint32_t idx)
{
    const struct ring_members *m = ring_members(v->ring);

    return idx < m->n_nodes ? m->nodes[idx].addr : "";
}

/* Counters (atomics), exposed in `stats` and Status. */
struct cluster_counters {
    uint64_t moved, tryagain, forwarded, misrouted;
    uint64_t items_imported, bytes_imported; /* handoff, since the last PREPARE */
    /* As a handoff source, since the last PREPARE: what its streams found
     * to copy when they opened, and what they sent (re-sent dirty keys and
     * tombstones included). */
    uint64_t items_planned, bytes_planned, items_sent, bytes_sent;
    uint64_t replicated;                     /* post-images acknowledged by a replica */
    uint64_t replica_failures;               /* post-images a replica did not acknowledge */
    uint64_t replica_skipped; /* post-images not sent: the owner is declared failed */
    uint64_t unavailable;     /* writes refused: an owner seen down, not declared failed */
};

/* One outgoing transfer of a source: destination and the arcs it gains
 * whose old primary is this node. */
struct cluster_dest {
    uint32_t      new_idx; /* index in the pending membership */
    char          id[RING_ID_MAX + 1];
    char          addr[RING_ADDR_MAX + 1];
    struct arcset arcs;
};

/* Wait until every worker passed a grace period (server_barrier); 0 or -1
 * (a worker is stuck). */
typedef int (*cluster_barrier_fn)(void *arg);

/* The mutable state: owned by the cluster thread (and main before it);
 * its fields are private to the cluster's own files (server/
 * cluster_internal.h). Everything else uses the functions below. */
struct cluster;

/*
 * Create the cluster of a node: id, state directory, cluster name, token
 * (may be NULL: the cluster port then refuses every peer). Loads the state
 * directory; a malformed file is an error "file:line: reason" in err.
 * barrier (called with barrier_arg) is the workers' grace period that
 * cluster_publish waits for before it frees an old view; NULL in unit tests
 * (no workers, no health state). 0, or -1 with err set.
 */
int  cluster_new(cluster_barrier_fn barrier, void *barrier_arg, const char *id,
                 const char *state_dir, const char *name, const uint8_t *token, size_t token_len,
                 struct cluster **out, char *err, size_t errlen);
void cluster_free(struct cluster *cl);

/* TLS between nodes (server/peer_tls.h): set once, before the cluster's
 * threads start; the cluster owns t from then on. cluster_peer_tls is NULL
 * when the cluster speaks plain TCP. */
struct peer_tls;
void                   cluster_set_peer_tls(struct cluster *cl, struct peer_tls *t);
struct peer_tls       *cluster_peer_tls(const struct cluster *cl);

/* The node process starts serving with this state (cport_start, not unit
 * tests): a member of its active epoch comes back empty, so it is
 * recovering until a transition copies its ranges back. */
void cluster_started(struct cluster *cl);

/* The current view (acquire load); valid until the caller's event
 * callback returns. */
const struct cluster_view *cluster_view(const struct cluster *cl);

/* The counters a request bumps (any thread). */
enum cluster_counter {
    CLUSTER_CTR_MOVED = 0,
    CLUSTER_CTR_TRYAGAIN,
    CLUSTER_CTR_FORWARDED,
    CLUSTER_CTR_MISROUTED,       /* a write acknowledged by a node that no longer owns it */
    CLUSTER_CTR_REPLICATED,      /* a post-image a replica acknowledged */
    CLUSTER_CTR_REPLICA_FAILED,  /* one a replica did not acknowledge */
    CLUSTER_CTR_REPLICA_SKIPPED, /* one not sent: the owner is declared failed */
    CLUSTER_CTR_UNAVAILABLE,     /* a write refused: an owner seen down, not declared failed */
};
void cluster_count(struct cluster *cl, enum cluster_counter k);
void cluster_counters_get(const struct cluster *cl, struct cluster_counters *out);

/*
 * State transitions, run on the cluster thread. Each returns 0 or -1 with a
 * reason in err; none of them touches the store or the handoff (cport.c
 * does that around them). They persist before they publish.
 */

/*
 * A PREPARE request as the node takes it: filled at the edge from the
 * wire (server/admin.c), passed by pointer through transition_prepare to
 * cluster_prepare_failed. Everything is borrowed from the caller.
 */
struct cluster_prep {
    const struct ring_members *next;  /* the pending epoch's membership */
    const uint8_t             *token; /* the transition's token */
    size_t                     token_len;
    uint64_t                   from_epoch; /* the epoch the transition starts from */
    /* Nodes of the active epoch that hold nothing current: failed[] are
     * dead (`ringctl remove --failed`: none may be in next), stale[]
     * answer but are recovering or behind (the admin saw it in their
     * Status: they stay members). */
    const char *const *failed;
    uint32_t           n_failed;
    const char *const *stale;
    uint32_t           n_stale;
};

/* Accept a pending epoch (docs/cluster.md PREPARE rules); *again is set
 * when it is a repeat of the same transition (same token and epoch). */
int cluster_prepare(struct cluster *cl, const struct ring_members *next, const uint8_t *token,
                    size_t token_len, uint64_t from_epoch, bool *again, char *err, size_t errlen);
/* The same for the whole request p, with its failed and stale nodes.
 * Neither is ever a copy source or a holder: each changing arc is copied
 * from its first other holder, and a stale owner of next imports its arcs
 * like any new owner. */
int cluster_prepare_failed(struct cluster *cl, const struct cluster_prep *p, bool *again, char *err,
                           size_t errlen);
/* Check a token against the pending transition. */
bool cluster_token_ok(const struct cluster *cl, const uint8_t *token, size_t len);
/* Record a phase (persisted); FENCED publishes the fence. */
int cluster_set_phase(struct cluster *cl, enum cluster_phase ph, char *err, size_t errlen);
/*
 * Make `next` (or the pending membership when next is NULL) active:
 * persist, publish, clear pending. A node without an active membership
 * and without a pending one accepts any epoch (ringctl init). *again is set
 * when that epoch is already active.
 */
int cluster_commit(struct cluster *cl, const struct ring_members *next, const uint8_t *token,
                   size_t token_len, bool *again, char *err, size_t errlen);
/* Drop the pending transition (persisted), unfence. */
int cluster_abort(struct cluster *cl, const uint8_t *token, size_t token_len, char *err,
                  size_t errlen);

/* Is a key hash owned (in any position of R) in the active epoch? True
 * without a membership. */
bool cluster_owned_active(const struct cluster *cl, uint64_t hash);
/* Does this node hold the active epoch's copy of a key hash: it owns it in
 * the active epoch (a membership is needed) and no pending transition was
 * accepted fresh (recovering or behind, when that copy is not current). A
 * range it holds must never be purged before the store's commit: an abort
 * keeps epoch N as it was (transition.c, handoff_in.c). */
bool cluster_holds_active(const struct cluster *cl, uint64_t hash);

/* Publish a new view from the current state (cluster thread). Waits for a
 * worker barrier before freeing the old view. */
int cluster_publish(struct cluster *cl);

/* Handoff figures since the last PREPARE, in the counters (cluster
 * thread): imported as a destination, planned and sent as a source;
 * cluster_handoff_reset zeroes them all. */
void cluster_count_imported(struct cluster *cl, uint64_t items, uint64_t bytes);
void cluster_count_planned(struct cluster *cl, uint64_t items, uint64_t bytes);
void cluster_count_sent(struct cluster *cl, uint64_t items, uint64_t bytes);
void cluster_handoff_reset(struct cluster *cl);

/*
 * Accessors for the cluster port, the handoff and the heartbeats (cluster
 * thread, or main before it starts). Pointers stay valid until the next
 * state transition.
 */

/* This node's id, the cluster's name, and the cluster id every frame
 * carries (frame_cluster_id of the name). */
const char *cluster_node_id(const struct cluster *cl);
const char *cluster_name(const struct cluster *cl);
uint64_t    cluster_frame_id(const struct cluster *cl);
/* This process's random boot id (a restart changes it). */
uint64_t cluster_boot_id(const struct cluster *cl);
/* Whether the node has an admin token (--token-file); the token itself
 * (*len 0 without one). */
bool           cluster_has_token(const struct cluster *cl);
const uint8_t *cluster_token(const struct cluster *cl, size_t *len);

/* The active membership (NULL: none) and its epoch (0: none). */
const struct ring_members *cluster_active(const struct cluster *cl);
uint64_t                   cluster_active_epoch(const struct cluster *cl);
/* The pending transition's epoch (0: none), phase and token. */
uint64_t           cluster_pending_epoch(const struct cluster *cl);
enum cluster_phase cluster_pending_phase(const struct cluster *cl);
const uint8_t     *cluster_pending_token(const struct cluster *cl, size_t *len);
/* This node's arcs in the pending transition: what it imports, what it
 * sources (the union of the transfers), and one transfer per destination
 * (*n of them). All empty without one. */
const struct arcset       *cluster_importing(const struct cluster *cl);
const struct arcset       *cluster_sourcing(const struct cluster *cl);
const struct cluster_dest *cluster_dests(const struct cluster *cl, uint32_t *n);
/* How long the last fence waited for its drain (Status); the handoff sets it. */
uint64_t cluster_fence_held_ms(const struct cluster *cl);
void     cluster_set_fence_held_ms(struct cluster *cl, uint64_t ms);

/* What failure detection shares with the workers (atomics; any thread). */
struct cluster_live *cluster_live(struct cluster *cl);

/* What the metrics endpoint (server/metrics.c) shows of the cluster. */
struct cluster_snapshot {
    uint64_t           epoch, pending_epoch; /* of the current view */
    enum cluster_phase phase;                /* NONE without a pending epoch */
    bool               recovering, suspect, isolated;
    uint64_t           behind_epoch;
    uint32_t           n_nodes;      /* in the active membership */
    int32_t            self;         /* this node's index, -1 */
    int32_t            pending_self; /* its index in the pending membership, -1 */
};
/* Called once per node of the active membership, in order: self is this
 * node; down and empty as in struct cluster_live. Strings are valid for the
 * call only. */
typedef void (*cluster_snapshot_node_fn)(void *arg, const char *id, const char *addr, bool self,
                                         bool down, bool empty);
/* Copy the current view's figures and the live flags into out, calling
 * node_fn (may be NULL) per member. Any thread, workers included: it holds
 * a lock that cluster_publish waits for before it frees a view, so node_fn
 * must be quick and must not call back into the cluster. */
void cluster_snapshot(const struct cluster *cl, struct cluster_snapshot *out,
                      cluster_snapshot_node_fn node_fn, void *arg);

/* Phase names as written in the state directory's pending.phase. */
const char *cluster_phase_name(enum cluster_phase ph);

#endif /* SERVER_CLUSTER_H */
