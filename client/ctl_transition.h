/*
 * ctl_transition: a transition of the cluster from epoch N to N+1 as
 * ringctl drives it (docs/cluster.md). The membership store is the source
 * of truth and its transactions are the only place an epoch is minted; the
 * nodes of N ∪ N+1 are driven over their cluster port (cport_client)
 * through PREPARE, COPY, FENCE, COMMIT and CLEANUP, or ABORT.
 *
 * A join, from the top: change_run records the new membership and the
 * transition record in the store, builds the node set, and run_from runs
 * phase_prepare, phase_copy, phase_fence and phase_commit (which ends with
 * the cleanup); a failure aborts (do_abort). `ringctl resume` re-enters
 * run_from at the phase the record holds.
 *
 * struct admin is everything one admin command works with. ctl_nodes.c
 * loads it (the store's state, the admin token) and holds its node set and
 * the calls to the nodes; ctl_transition.c holds the phases.
 */
#ifndef CLIENT_CTL_TRANSITION_H
#define CLIENT_CTL_TRANSITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/cport_client.h"
#include "client/ctl.h"
#include "client/ctl_pending.h"
#include "ring/ring.h"

struct mstore;

/* The store's membership records; the transition record's are in
 * ctl_pending.h. */
#define REC_ACTIVE  "active.members"
#define REC_PENDING "pending.members"
#define REC_ABORTED "aborted.members"

#define LONG_TIMEOUT_MS 10000 /* prepare, fence, commit, abort replies */
/* No cap unless the operator gives one (--rate, ringctl rate): each
 * source's adaptive throttle (server/throttle.h) sets the copy's pace
 * from its own clients' latency, so an idle cluster copies at full speed. */
#define DEFAULT_RATE_MIB 0
#define FAILED_MAX       8                  /* failed nodes one transition may drop */
#define OP_REMOVE_FAILED "remove --failed " /* the op line of remove --failed ID */

/* One node of N ∪ N+1 during a transition (or a status round). */
struct tnode {
    char                id[RING_ID_MAX + 1];
    char                addr[RING_ADDR_MAX + 1];
    char                caddr[RING_ADDR_MAX + 16];
    bool                in_old, in_new, is_source, is_dest;
    int                 rank; /* commit order: destinations first, sources last */
    struct cport_conn  *conn;
    struct cport_status st;
    bool                have_st;
    uint64_t            hello_boot; /* boot id seen at connect */
    int64_t             down_since; /* ms, 0 = reachable */
    char                err[512];
};

/* Everything one admin command works with. */
struct admin {
    struct ctl_globals  *g;
    struct mstore       *store;
    uint8_t              atoken[CPORT_TOKEN_MAX]; /* the admin token (--token-file) */
    size_t               atoken_len;
    struct ring_members *old, *new; /* epoch N (store active), N+1 */
    uint64_t             active_rev, pm_rev, rec_rev;
    struct trec          rec; /* the transition record */
    bool                 have_rec;
    struct tnode        *nodes;
    uint32_t             n_nodes;
    int64_t              t_start;
    uint64_t             fence_ms;
    uint64_t             copy_ms; /* the copy phase of this run (0: not run) */
    uint64_t             moved_items, moved_bytes;
    bool                 exit_after_ok; /* join/leave honour RINGCTL_EXIT_AFTER */
    /* remove --failed: nodes of N that are dead, never contacted; each
     * moving arc is copied from its first surviving owner. */
    char        failed[FAILED_MAX][RING_ID_MAX + 1];
    const char *failed_ptr[FAILED_MAX];
    uint32_t    n_failed;
    /* Nodes of N that answer Status as recovering or behind at PREPARE:
     * they hold nothing current, so no arc is copied from them. */
    const char **stale_ptr; /* into nodes[].id; malloc'd */
    uint32_t     n_stale;
    const char  *abort_why; /* the reason fail_abort gives; NULL: ringctl abort */
};

/*
 * The admin and its node set (ctl_nodes.c). Functions returning int return
 * an exit status (EX_OK, or another after printing why).
 */

/* Open --store, and read --token-file when with_token. */
int admin_open(struct admin *a, bool with_token);

/* Read the admin token: the first line of --token-file. */
int admin_read_token(struct admin *a);

/* admin_open, then load the store's active and pending memberships and the
 * transition record: the start of every admin command. */
int admin_load(struct admin *a, bool with_token);

/* Load the store's state again (after losing a race to another admin). */
int admin_load_state(struct admin *a);

/* Read and parse a membership record: *out (NULL when absent) and *rev. */
int admin_load_members(struct admin *a, const char *name, struct ring_members **out, uint64_t *rev);

/* Read n records at one store revision (mstore_get_many): EX_OK, or
 * EX_USAGE after printing why. */
int admin_read_records(struct admin *a, const char *const *names, size_t n,
                       struct mstore_record *recs);

/* Parse a membership record already read (rec->rev == 0: absent, *out
 * NULL): EX_OK, or EX_USAGE after printing a file:line error. */
int admin_members_of_record(const struct mstore_record *rec, struct ring_members **out,
                            uint64_t *rev);

/* The exit status of a store transaction that creates a new state's
 * records (init, plan), rc its MSTORE_ code: EX_OK; EX_PENDING when
 * another admin won the race (the caller has said how); else EX_USAGE for
 * a malformed record or EX_FAILED, after printing "store: <err>". */
int admin_txn_status(int rc, const char *err);

/* Free everything an admin command holds: node connections, both
 * memberships, the record and the store handle. */
void admin_free(struct admin *a);

/* Declare node id failed in this transition: it is never contacted. */
void admin_add_failed(struct admin *a, const char *id);

/* Build a->nodes = old ∪ new (without the failed nodes) with their roles
 * from the diff, ordered for commit: destinations first, then the others,
 * sources last. */
int nodes_build(struct admin *a);

/* True when new holder j of arc is not among its old holders (by id): it
 * gains the arc, and someone must send it. */
bool arc_gained(const struct ring_members *old, const struct ring_members *new,
                const struct ring_arc *arc, uint32_t j);

/* Send one request to a node, (re)connecting first if needed. The reply's
 * status is kept in t->st; t->err says what went wrong. A CPORT_ code. */
int node_call(struct admin *a, struct tnode *t, const struct cport_request *req, int timeout_ms);

/* Send req to every node (in commit order); returns how many failed,
 * printing each failure as "WHAT: ID (ADDR): reason". */
uint32_t nodes_broadcast(struct admin *a, const struct cport_request *req, int timeout_ms,
                         const char *what);

/* Send req at once to the nodes [lo, hi) whose skip[] entry is false (skip
 * may be NULL), one thread each; rc[i] gets node i's CPORT_ code. */
void nodes_call_parallel(struct admin *a, const struct cport_request *req, int timeout_ms,
                         uint32_t lo, uint32_t hi, const bool *skip, int *rc);

/*
 * The transition (ctl_transition.c)
 */

/* The options of one change (join, leave, remove --failed). */
struct change_opts {
    bool     join;
    bool     remove_failed; /* leave of a dead node: not contacted */
    bool     force;         /* remove --failed: R = 1, or the node answers */
    bool     sole_ok;       /* remove --failed at R = 1: its keys may go (the watch's default) */
    char     id[RING_ID_MAX + 1], addr[RING_ADDR_MAX + 1], zone[RING_ZONE_MAX + 1];
    uint32_t weight;
    double   rate_mib;
    /* When set, may the change go ahead? Called with the store's state
     * loaded and nothing pending, before anything is recorded (remove
     * --failed: probe_failed). EX_OK, or an exit status after printing why. */
    int (*admit)(struct admin *a, const struct change_opts *o);
    /* When set, a->new is made by reshape (a reweight, or a change of R or
     * vnodes: ctl_reshape.c) instead of a join or leave of id, and op is
     * the transition record's op line. EX_OK, or a status after printing. */
    int (*reshape)(struct admin *a, const struct change_opts *o);
    char     op[96];
    uint32_t replicas, vnodes; /* reshape: the new R / vnodes (0: unchanged) */
    /* A join or leave of several nodes in one transition: the others after
     * id (join: n_more ID ADDR pairs; leave: n_more IDs), same weight and
     * zone. */
    char *const *more;
    size_t       n_more;
};

/* Run one change from the store to the end: mint epoch N+1, record it
 * with its transition record, and run every phase. */
int change_run(struct ctl_globals *g, const struct change_opts *o);

/* a->new = the membership after the change, epoch N+1 (join: id at addr
 * with weight and zone; leave: without id). */
int make_new(struct admin *a, bool join, const char *id, const char *addr, uint32_t weight,
             const char *zone);

/* Run the transition from the recorded phase `from` to the end. */
int run_from(struct admin *a, enum trec_phase from);

/* ABORT: delete pending from the store (kept as aborted.*), then Abort to
 * every node. Returns how many nodes did not acknowledge, or -1 when the
 * store refused. */
int do_abort(struct admin *a);

/* Abort after a failure during a transition ("WHY: aborting ..."); returns
 * EX_FAILED. */
int fail_abort(struct admin *a, const char *why);

/* The first node whose boot id (in its last status) is not the one the
 * record holds (it restarted since PREPARE), or NULL. */
struct tnode *boot_changed(struct admin *a);

/* Add the transition that just ended to the store's history of moves
 * (ringctl history): outcome "committed" or "aborted", why (NULL: none).
 * A failure to write it is reported, not fatal. */
void ctl_history_add(struct admin *a, const char *outcome, const char *why);
/* The history record with that line added (malloc'd, *len bytes), for a
 * transaction that writes it whatever its revision (the commit's: the
 * transition holds the store's pending, so no other admin ends a move
 * meanwhile); NULL when the store cannot be read or no memory. */
char *ctl_history_text(struct admin *a, const char *outcome, const char *why, size_t *len);
#define CTL_HISTORY_RECORD "history/moves"

/* The operator's settings for the pending transition (ringctl rate, pause,
 * unpause; ctl_control.c): true with *rate (bytes/s, 0 unlimited) and
 * *paused when the store's control record is for a->rec's token. */
bool control_poll(struct admin *a, uint64_t *rate, bool *paused);

/* The node with this id in a->nodes, or NULL. */
struct tnode *node_find(struct admin *a, const char *id);

/* Deliver Commit of a->new to every node in commit order, retrying silent
 * nodes for a while; returns how many never acknowledged. */
uint32_t deliver_commit(struct admin *a);

/* CLEANUP: wait (bounded) for every reachable node to report no orphans;
 * false (after a warning) when some are left. */
bool wait_cleanup(struct admin *a);

/* The request of kind `kind` for the current transition. */
struct cport_request transition_request(struct admin *a, enum cport_req_kind kind);

#endif
