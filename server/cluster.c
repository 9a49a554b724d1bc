/*
 * cluster: memberships, rings and arcs of this node, the route decision,
 * views, and the transitions, persisted through the state directory
 * (server/statedir.c) before they are published. All mutation runs on one
 * thread (the cluster thread, or main before it starts); workers only read
 * the published view.
 */
#include "config.h"
#include "server/cluster.h"
#include "server/cluster_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "proto/frame.h"
#include "server/log.h"
#include "server/peer_tls.h"
#include "server/statedir.h"

static void mark_served(struct cluster *cl);

/* See cluster.h. */
const struct cluster_view *
cluster_view(const struct cluster *cl)
{
    return __atomic_load_n(&cl->view, __ATOMIC_ACQUIRE);
}

/* Bump a counter; see cluster.h. */
void
cluster_count(struct cluster *cl, enum cluster_counter k)
{
    uint64_t *c;

    switch (k) {
    case CLUSTER_CTR_MOVED:
        c = &cl->ctr.moved;
        break;
    case CLUSTER_CTR_TRYAGAIN:
        c = &cl->ctr.tryagain;
        break;
    case CLUSTER_CTR_FORWARDED:
        c = &cl->ctr.forwarded;
        break;
    case CLUSTER_CTR_MISROUTED:
        c = &cl->ctr.misrouted;
        break;
    case CLUSTER_CTR_REPLICATED:
        c = &cl->ctr.replicated;
        break;
    case CLUSTER_CTR_REPLICA_FAILED:
        c = &cl->ctr.replica_failures;
        break;
    case CLUSTER_CTR_REPLICA_SKIPPED:
        c = &cl->ctr.replica_skipped;
        break;
    case CLUSTER_CTR_UNAVAILABLE:
        c = &cl->ctr.unavailable;
        break;
    default:
        return;
    }
    __atomic_add_fetch(c, 1, __ATOMIC_RELAXED);
}

void
cluster_counters_get(const struct cluster *cl, struct cluster_counters *out)
{
    out->moved = __atomic_load_n(&cl->ctr.moved, __ATOMIC_RELAXED);
    out->tryagain = __atomic_load_n(&cl->ctr.tryagain, __ATOMIC_RELAXED);
    out->forwarded = __atomic_load_n(&cl->ctr.forwarded, __ATOMIC_RELAXED);
    out->misrouted = __atomic_load_n(&cl->ctr.misrouted, __ATOMIC_RELAXED);
    out->items_imported = __atomic_load_n(&cl->ctr.items_imported, __ATOMIC_RELAXED);
    out->bytes_imported = __atomic_load_n(&cl->ctr.bytes_imported, __ATOMIC_RELAXED);
    out->items_planned = __atomic_load_n(&cl->ctr.items_planned, __ATOMIC_RELAXED);
    out->bytes_planned = __atomic_load_n(&cl->ctr.bytes_planned, __ATOMIC_RELAXED);
    out->items_sent = __atomic_load_n(&cl->ctr.items_sent, __ATOMIC_RELAXED);
    out->bytes_sent = __atomic_load_n(&cl->ctr.bytes_sent, __ATOMIC_RELAXED);
    out->replicated = __atomic_load_n(&cl->ctr.replicated, __ATOMIC_RELAXED);
    out->replica_failures = __atomic_load_n(&cl->ctr.replica_failures, __ATOMIC_RELAXED);
    out->replica_skipped = __atomic_load_n(&cl->ctr.replica_skipped, __ATOMIC_RELAXED);
    out->unavailable = __atomic_load_n(&cl->ctr.unavailable, __ATOMIC_RELAXED);
}

/* Owned in the active epoch, any replica position (orphans, cleanup). */
bool
cluster_owned_active(const struct cluster *cl, uint64_t hash)
{
    uint32_t list[RING_R_MAX], n;

    if (cl->active_ring == NULL) {
        return true;
    }
    if (cl->self_old < 0) {
        return false;
    }
    n = ring_locate(cl->active_ring, hash, list_len(cl->active->replicas), list);
    return list_has(list, n, cl->self_old);
}

/* See cluster.h. */
bool
cluster_holds_active(const struct cluster *cl, uint64_t hash)
{
    return cl->active_ring != NULL && !(cl->pending != NULL && cl->fresh) &&
           cluster_owned_active(cl, hash);
}

const char *
cluster_phase_name(enum cluster_phase ph)
{
    switch (ph) {
    case CLUSTER_PHASE_PREPARED:
        return "prepared";
    case CLUSTER_PHASE_COPYING:
        return "copying";
    case CLUSTER_PHASE_FENCED:
        return "fenced";
    default:
        return "none";
    }
}

/* Handoff import counters; see cluster.h. */
void
cluster_count_imported(struct cluster *cl, uint64_t items, uint64_t bytes)
{
    __atomic_fetch_add(&cl->ctr.items_imported, items, __ATOMIC_RELAXED);
    __atomic_fetch_add(&cl->ctr.bytes_imported, bytes, __ATOMIC_RELAXED);
}

void
cluster_count_planned(struct cluster *cl, uint64_t items, uint64_t bytes)
{
    __atomic_fetch_add(&cl->ctr.items_planned, items, __ATOMIC_RELAXED);
    __atomic_fetch_add(&cl->ctr.bytes_planned, bytes, __ATOMIC_RELAXED);
}

void
cluster_count_sent(struct cluster *cl, uint64_t items, uint64_t bytes)
{
    __atomic_fetch_add(&cl->ctr.items_sent, items, __ATOMIC_RELAXED);
    __atomic_fetch_add(&cl->ctr.bytes_sent, bytes, __ATOMIC_RELAXED);
}

void
cluster_handoff_reset(struct cluster *cl)
{
    __atomic_store_n(&cl->ctr.items_imported, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&cl->ctr.bytes_imported, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&cl->ctr.items_planned, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&cl->ctr.bytes_planned, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&cl->ctr.items_sent, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&cl->ctr.bytes_sent, 0, __ATOMIC_RELAXED);
}

/*
 * Accessors; see cluster.h
 */

const char *
cluster_node_id(const struct cluster *cl)
{
    return cl->id;
}

const char *
cluster_name(const struct cluster *cl)
{
    return cl->name;
}

uint64_t
cluster_frame_id(const struct cluster *cl)
{
    return cl->cluster_id;
}

uint64_t
cluster_boot_id(const struct cluster *cl)
{
    return cl->boot_id;
}

bool
cluster_has_token(const struct cluster *cl)
{
    return cl->has_token;
}

const uint8_t *
cluster_token(const struct cluster *cl, size_t *len)
{
    *len = cl->token_len;
    return cl->token;
}

const struct ring_members *
cluster_active(const struct cluster *cl)
{
    return cl->active;
}

uint64_t
cluster_active_epoch(const struct cluster *cl)
{
    return cl->active != NULL ? cl->active->epoch : 0;
}

uint64_t
cluster_pending_epoch(const struct cluster *cl)
{
    return cl->pending != NULL ? cl->pending->epoch : 0;
}

enum cluster_phase
cluster_pending_phase(const struct cluster *cl)
{
    return cl->phase;
}

const uint8_t *
cluster_pending_token(const struct cluster *cl, size_t *len)
{
    *len = cl->ptoken_len;
    return cl->ptoken;
}

const struct arcset *
cluster_importing(const struct cluster *cl)
{
    return &cl->importing;
}

const struct arcset *
cluster_sourcing(const struct cluster *cl)
{
    return &cl->sourcing;
}

const struct cluster_dest *
cluster_dests(const struct cluster *cl, uint32_t *n)
{
    *n = cl->n_dests;
    return cl->dests;
}

uint64_t
cluster_fence_held_ms(const struct cluster *cl)
{
    return cl->fence_held_ms;
}

void
cluster_set_fence_held_ms(struct cluster *cl, uint64_t ms)
{
    cl->fence_held_ms = ms;
}

struct cluster_live *
cluster_live(struct cluster *cl)
{
    return &cl->live;
}

/*
 * Views
 */

/* Free a view; its ring too unless `keep` (the next view) shares it. */
static void
view_free(struct cluster_view *v, const struct ring *keep)
{
    if (v == NULL) {
        return;
    }
    if (v->ring != NULL && v->ring != keep) {
        ring_free(v->ring);
    }
    arcset_clear(&v->fence);
    arcset_clear(&v->importing);
    free(v->config);
    free(v);
}

/* The `config` reply of a membership (NULL: none). */
static int
format_config(const struct ring_members *m, char **out, size_t *outlen)
{
    size_t tlen = m != NULL ? ring_members_format(m, NULL, 0) : 0;
    char   head[64];
    int    hl =
        snprintf(head, sizeof(head), "CONFIG %" PRIu64 " %zu\r\n", m != NULL ? m->epoch : 0, tlen);
    char *buf = malloc((size_t)hl + tlen + 1 + 7);

    if (buf == NULL) {
        return -1;
    }
    memcpy(buf, head, (size_t)hl);
    if (m != NULL) {
        ring_members_format(m, buf + hl, tlen + 1);
    }
    memcpy(buf + hl + tlen, "\r\nEND\r\n", 7);
    *out = buf;
    *outlen = (size_t)hl + tlen + 7;
    return 0;
}

/* Held by cluster_snapshot while it reads a view, and taken (then dropped)
 * by cluster_publish before it frees one: readers that are not workers
 * (the metrics thread) are not covered by the worker barrier. */
static pthread_mutex_t snapshot_lock = PTHREAD_MUTEX_INITIALIZER;

/* Copy what the metrics endpoint shows; see cluster.h. */
void
cluster_snapshot(const struct cluster *cl, struct cluster_snapshot *out,
                 cluster_snapshot_node_fn node_fn, void *arg)
{
    const struct cluster_view *v;
    const struct cluster_live *l = &cl->live;

    memset(out, 0, sizeof(*out));
    /* cl->phase is a word written by the cluster thread alone; a gauge may
     * read it a moment late. */
    out->phase = (enum cluster_phase)__atomic_load_n((const int *)&cl->phase, __ATOMIC_RELAXED);
    out->recovering = __atomic_load_n(&l->recovering, __ATOMIC_RELAXED) != 0;
    out->suspect = __atomic_load_n(&l->suspect, __ATOMIC_RELAXED) != 0;
    out->isolated = __atomic_load_n(&l->isolated, __ATOMIC_RELAXED) != 0;
    out->behind_epoch = __atomic_load_n(&l->behind_epoch, __ATOMIC_RELAXED);
    pthread_mutex_lock(&snapshot_lock);
    v = cluster_view(cl);
    if (v != NULL) {
        out->epoch = v->epoch;
        out->pending_epoch = v->pending_epoch;
        out->self = v->self;
        out->pending_self = v->pending_self;
        if (v->ring != NULL) {
            const struct ring_members *m = ring_members(v->ring);
            uint32_t                   i;

            out->n_nodes = m->n_nodes;
            for (i = 0; node_fn != NULL && i < m->n_nodes; i++) {
                node_fn(arg, m->nodes[i].id, m->nodes[i].addr, (int32_t)i == v->self,
                        cluster_mask_has(l->down, i), cluster_mask_has(l->empty, i));
            }
        }
    }
    if (out->pending_epoch == 0) {
        out->phase = CLUSTER_PHASE_NONE;
    }
    pthread_mutex_unlock(&snapshot_lock);
}

/* Build a view of the current state, publish it, wait for every worker
 * to pass a barrier, then free the old one. */
int
cluster_publish(struct cluster *cl)
{
    struct cluster_view *v = calloc(1, sizeof(*v)), *old;

    if (v == NULL) {
        return -1;
    }
    v->epoch = cl->active != NULL ? cl->active->epoch : 0;
    v->pending_epoch = cl->pending != NULL ? cl->pending->epoch : 0;
    v->ring = cl->active_ring;
    v->self = cl->self_old;
    v->pending_self = cl->pending != NULL ? cl->self_new : -1;
    v->replicas = cl->active != NULL ? cl->active->replicas : 1;
    v->live = cl->barrier != NULL ? &cl->live : NULL;
    v->gen = cl->view != NULL ? cl->view->gen + 1 : 1;
    if (cl->view == NULL || cl->view->epoch != v->epoch) {
        uint32_t i;

        /* Indexes of the old epoch mean other nodes in the new one. */
        for (i = 0; i < CLUSTER_MASK_WORDS; i++) {
            __atomic_store_n(&cl->live.down[i], 0, __ATOMIC_RELEASE);
            __atomic_store_n(&cl->live.empty[i], 0, __ATOMIC_RELEASE);
            __atomic_store_n(&cl->live.skipped[i], 0, __ATOMIC_RELEASE);
        }
    }
    if (cl->pending != NULL && cl->active != NULL) {
        uint32_t i;

        for (i = 0; i < cl->n_dead; i++) {
            int idx = ring_members_find(cl->active, cl->failed[i]);

            if (idx >= 0 && idx < 64 * CLUSTER_MASK_WORDS) {
                v->failed[idx / 64] |= (uint64_t)1 << (idx % 64);
            }
        }
    }
    if (format_config(cl->active, &v->config, &v->config_len) < 0 ||
        (cl->pending != NULL && cl->phase == CLUSTER_PHASE_FENCED &&
         arcset_copy(&v->fence, &cl->fence_arcs) < 0) ||
        (cl->pending != NULL && arcset_copy(&v->importing, &cl->importing) < 0)) {
        v->ring = NULL;
        view_free(v, NULL);
        return -1;
    }
    old = cl->view;
    __atomic_store_n(&cl->view, v, __ATOMIC_RELEASE);
    /* After the barrier no worker can still be inside a request that
     * loaded `old`: a request never outlives its event callback. */
    if (cl->barrier != NULL && cl->barrier(cl->barrier_arg) < 0) {
        /* A stuck worker might still read it: leak it rather than free. */
        return 0;
    }
    /* A cluster_snapshot reader that loaded `old` holds this lock. */
    pthread_mutex_lock(&snapshot_lock);
    pthread_mutex_unlock(&snapshot_lock);
    view_free(old, v->ring);
    return 0;
}

/* Persist the pending transition's token and phase. */
static int
save_phase(struct cluster *cl, char *err, size_t errlen)
{
    return statedir_save_phase(cl->state_dir, cl->ptoken, cl->ptoken_len,
                               cluster_phase_name(cl->phase), err, errlen);
}

_Static_assert(STATEDIR_TOKEN_MAX >= CLUSTER_TOKEN_MAX, "a transition token fits the phase record");

/* A phase name of the phase record (statedir_load_phase), or -1. */
static int
phase_of(const char *name)
{
    if (strcmp(name, "prepared") == 0) {
        return CLUSTER_PHASE_PREPARED;
    }
    if (strcmp(name, "copying") == 0) {
        return CLUSTER_PHASE_COPYING;
    }
    if (strcmp(name, "fenced") == 0) {
        return CLUSTER_PHASE_FENCED;
    }
    return -1;
}

/*
 * Transitions
 */

/* Forget the pending transition in memory. */
static void
clear_pending(struct cluster *cl)
{
    uint32_t i;

    ring_members_free(cl->pending);
    cl->pending = NULL;
    ring_free(cl->pending_ring);
    cl->pending_ring = NULL;
    cl->self_new = -1;
    cl->ptoken_len = 0;
    cl->phase = CLUSTER_PHASE_NONE;
    cl->fresh = false;
    cl->restored = false;
    free(cl->failed);
    cl->failed = NULL;
    cl->n_failed = 0;
    cl->n_dead = 0;
    arcset_clear(&cl->importing);
    arcset_clear(&cl->sourcing);
    arcset_clear(&cl->losing);
    arcset_clear(&cl->fence_arcs);
    for (i = 0; i < cl->n_dests; i++) {
        arcset_clear(&cl->dests[i].arcs);
    }
    free(cl->dests);
    cl->dests = NULL;
    cl->n_dests = 0;
}

static bool
list_has_id(const struct ring_members *m, const uint32_t *list, uint32_t n, const char *id)
{
    uint32_t k;

    for (k = 0; k < n; k++) {
        if (strcmp(m->nodes[list[k]].id, id) == 0) {
            return true;
        }
    }
    return false;
}

/* Find or add the transfer to new node idx. */
static struct cluster_dest *
dest_for(struct cluster *cl, uint32_t idx)
{
    struct cluster_dest *d;
    uint32_t             i;

    for (i = 0; i < cl->n_dests; i++) {
        if (cl->dests[i].new_idx == idx) {
            return &cl->dests[i];
        }
    }
    d = realloc(cl->dests, (size_t)(cl->n_dests + 1) * sizeof(*d));
    if (d == NULL) {
        return NULL;
    }
    cl->dests = d;
    d = &cl->dests[cl->n_dests++];
    memset(d, 0, sizeof(*d));
    d->new_idx = idx;
    snprintf(d->id, sizeof(d->id), "%s", cl->pending->nodes[idx].id);
    snprintf(d->addr, sizeof(d->addr), "%s", cl->pending->nodes[idx].addr);
    return d;
}

/* Does the arc (lo, hi] meet cl->kept (ranges this node kept for a new
 * owner that restarted since the copy, server/transition.c)? */
static bool
kept_meets(const struct cluster *cl, uint64_t lo, uint64_t hi)
{
    uint32_t i;

    for (i = 0; i < cl->kept.n; i++) {
        const struct arc_range *r = &cl->kept.r[i];

        if (lo < hi ? r->start <= hi && r->end > lo : r->end > lo || r->start <= hi) {
            return true;
        }
    }
    return false;
}

/* Is id one of the pending transition's failed nodes? */
static bool
is_failed(const struct cluster *cl, const char *id)
{
    uint32_t i;

    for (i = 0; i < cl->n_failed; i++) {
        if (strcmp(cl->failed[i], id) == 0) {
            return true;
        }
    }
    return false;
}

/*
 * This node's arcs in the pending transition, from ring_diff(active,
 * pending): importing (in the new list, not a holder of the old),
 * losing (an old owner not in the new list), and as the arc's source (its
 * first surviving holder), one transfer per gaining node. The holders of
 * an arc in epoch N are every old owner once writes are replicated, else
 * only the old primary, and never a failed node (`remove --failed`).
 * Without an active membership, or when the transition was accepted
 * fresh (recovering or behind: our epoch N is stale and we hold nothing),
 * the node imports everything it owns in the new epoch.
 */
static int
compute_arcs(struct cluster *cl)
{
    const struct ring_members *om = cl->active, *nm = cl->pending;
    struct ring_diff          *d;
    uint32_t                   i, k;
    int                        rc = -1;

    if (cl->fresh || cl->active_ring == NULL || cl->self_old < 0) {
        if (cl->self_new >= 0 &&
            arcset_owned(&cl->importing, cl->pending_ring, (uint32_t)cl->self_new) < 0) {
            return -1;
        }
        if (cl->fresh || cl->active_ring == NULL) {
            return 0;
        }
    }
    /* With failed or stale nodes the unchanged arcs count too: a stale
     * owner keeps its place but holds nothing, and is refilled. */
    d = cl->n_failed > 0 ? ring_diff_all(cl->active_ring, cl->pending_ring)
                         : ring_diff(cl->active_ring, cl->pending_ring);
    if (d == NULL) {
        return -1;
    }
    for (i = 0; i < d->n_arcs; i++) {
        const struct ring_arc *a = &d->arcs[i];
        const char            *me = cl->id;
        /* Who holds the arc's data in epoch N: its old owners once writes
         * are replicated, minus failed ones (remove --failed). When the old
         * primary survives it alone is trusted and every other new owner is
         * purged and refilled from it: a secondary is normally current, but
         * not after a write whose replica failed ("replica unavailable"). */
        uint32_t n_had = CLUSTER_REPLICATED ? a->n_old : (a->n_old > 0 ? 1 : 0);
        uint32_t hold[RING_R_MAX], nh = 0;
        bool     in_old, in_new;

        for (k = 0; k < n_had && k < RING_R_MAX; k++) {
            if (!is_failed(cl, om->nodes[a->old_nodes[k]].id)) {
                hold[nh++] = a->old_nodes[k];
            }
        }
        if (nh > 1 && hold[0] == a->old_nodes[0]) {
            nh = 1;
        }
        /* No holder of N left, but this node kept the arc: it is the holder. */
        if (nh == 0 && cl->self_old >= 0 && kept_meets(cl, a->lo, a->hi)) {
            hold[nh++] = (uint32_t)cl->self_old;
        }
        if (!a->changed) {
            /* The owners stay: only a stale one (it is in cl->failed but
             * still a member) is refilled, from the arc's first holder. */
            if (nh == 0 || (int32_t)hold[0] != cl->self_old) {
                continue;
            }
            for (k = 0; k < a->n_new; k++) {
                struct cluster_dest *dst;

                if (!is_failed(cl, nm->nodes[a->new_nodes[k]].id)) {
                    continue;
                }
                dst = dest_for(cl, a->new_nodes[k]);
                if (dst == NULL || arcset_add_arc(&dst->arcs, a->lo, a->hi) < 0 ||
                    arcset_add_arc(&cl->sourcing, a->lo, a->hi) < 0) {
                    goto out;
                }
            }
            continue;
        }
        in_old = list_has_id(om, hold, nh, me);
        in_new = list_has_id(nm, a->new_nodes, a->n_new, me);
        if (cl->self_old >= 0 && in_new && !in_old &&
            arcset_add_arc(&cl->importing, a->lo, a->hi) < 0) {
            goto out;
        }
        if (list_has_id(om, a->old_nodes, a->n_old, me) && !in_new &&
            arcset_add_arc(&cl->losing, a->lo, a->hi) < 0) {
            goto out;
        }
        if (nh == 0 || (int32_t)hold[0] != cl->self_old) {
            continue;
        }
        for (k = 0; k < a->n_new; k++) {
            const char          *gid = nm->nodes[a->new_nodes[k]].id;
            struct cluster_dest *dst;

            if (list_has_id(om, hold, nh, gid)) {
                continue;
            }
            dst = dest_for(cl, a->new_nodes[k]);
            if (dst == NULL || arcset_add_arc(&dst->arcs, a->lo, a->hi) < 0 ||
                arcset_add_arc(&cl->sourcing, a->lo, a->hi) < 0) {
                goto out;
            }
        }
    }
    if (cl->self_old >= 0) {
        arcset_finish(&cl->importing);
    }
    arcset_finish(&cl->losing);
    arcset_finish(&cl->sourcing);
    for (i = 0; i < cl->n_dests; i++) {
        arcset_finish(&cl->dests[i].arcs);
    }
    if (arcset_append(&cl->fence_arcs, &cl->sourcing) < 0 ||
        arcset_append(&cl->fence_arcs, &cl->losing) < 0) {
        goto out;
    }
    arcset_finish(&cl->fence_arcs);
    rc = 0;
out:
    ring_diff_free(d);
    return rc;
}

/* Install `next` as pending in memory (a copy) and compute the arcs. */
static int
install_pending(struct cluster *cl, const struct ring_members *next, const uint8_t *token,
                size_t token_len, char *err, size_t errlen)
{
    cl->pending = ring_members_dup(next);
    cl->pending_ring = cl->pending != NULL ? ring_build(cl->pending) : NULL;
    if (cl->pending_ring == NULL) {
        clear_pending(cl);
        snprintf(err, errlen, "cannot build the ring of epoch %" PRIu64, next->epoch);
        return -1;
    }
    cl->self_new = ring_members_find(cl->pending, cl->id);
    if (token != NULL) {
        memcpy(cl->ptoken, token, token_len);
        cl->ptoken_len = token_len;
    }
    if (compute_arcs(cl) < 0) {
        clear_pending(cl);
        snprintf(err, errlen, "out of memory computing arcs");
        return -1;
    }
    return 0;
}

void
cluster_set_peer_tls(struct cluster *cl, struct peer_tls *t)
{
    cl->tls = t;
}

struct peer_tls *
cluster_peer_tls(const struct cluster *cl)
{
    return cl != NULL ? cl->tls : NULL;
}

bool
cluster_token_ok(const struct cluster *cl, const uint8_t *token, size_t len)
{
    return cl->pending != NULL && len == cl->ptoken_len &&
           (len == 0 || memcmp(token, cl->ptoken, len) == 0);
}

/* PREPARE; see cluster.h and docs/cluster.md. */
int
cluster_prepare(struct cluster *cl, const struct ring_members *next, const uint8_t *token,
                size_t token_len, uint64_t from_epoch, bool *again, char *err, size_t errlen)
{
    struct cluster_prep p = {
        .next = next, .token = token, .token_len = token_len, .from_epoch = from_epoch
    };

    return cluster_prepare_failed(cl, &p, again, err, errlen);
}

/* Does this node's health table see member `id` of the active epoch down,
 * or up but holding nothing current (recovering, behind, no membership)?
 * True where it has no table to ask (unit tests, not a member of N). The
 * other owners act for a failed node's arcs once the Prepare is accepted:
 * a live node must not be declared failed by an admin that cannot reach
 * it while its peers can (no split brain). */
static bool
failed_seen_down(struct cluster *cl, const char *id)
{
    int idx = cl->active != NULL ? ring_members_find(cl->active, id) : -1;

    if (cl->barrier == NULL || cl->self_old < 0 || idx < 0) {
        return true;
    }
    return cluster_live_gone(&cl->live, (uint32_t)idx);
}

/* PREPARE with failed nodes; see cluster.h. A recovering node (restarted
 * empty) or one behind (a peer runs a higher epoch) holds nothing anybody
 * owns: like a node without a membership it accepts any from_epoch and
 * imports everything it owns in N+1. */
int
cluster_prepare_failed(struct cluster *cl, const struct cluster_prep *p, bool *again, char *err,
                       size_t errlen)
{
    uint64_t active = cl->active != NULL ? cl->active->epoch : 0;
    bool     fresh =
        cl->active != NULL && (__atomic_load_n(&cl->live.recovering, __ATOMIC_RELAXED) ||
                               __atomic_load_n(&cl->live.behind_epoch, __ATOMIC_RELAXED) != 0);
    uint32_t i;

    *again = false;
    if (p->token_len == 0 || p->token_len > CLUSTER_TOKEN_MAX) {
        snprintf(err, errlen, "prepare: the token must be 1-%d bytes", CLUSTER_TOKEN_MAX);
        return -1;
    }
    if (cl->pending != NULL) {
        if (cluster_token_ok(cl, p->token, p->token_len) && cl->pending->epoch == p->next->epoch) {
            *again = true;
            return 0;
        }
        snprintf(err, errlen, "another transition is pending (epoch %" PRIu64 ", phase %s)",
                 cl->pending->epoch, cluster_phase_name(cl->phase));
        return -1;
    }
    if (p->next->epoch != p->from_epoch + 1) {
        snprintf(err, errlen, "prepare: epoch %" PRIu64 " does not follow %" PRIu64, p->next->epoch,
                 p->from_epoch);
        return -1;
    }
    /* A node without a membership holds nothing anyone owns: it may join
     * any epoch. Otherwise the transition must start from our epoch. */
    if (fresh && ring_members_find(p->next, cl->id) < 0) {
        snprintf(err, errlen, "prepare: node %s is %s and not in epoch %" PRIu64, cl->id,
                 cl->live.recovering ? "recovering" : "behind", p->next->epoch);
        return -1;
    }
    for (i = 0; i < p->n_failed; i++) {
        if (strcmp(p->failed[i], cl->id) == 0) {
            snprintf(err, errlen, "prepare: this node (%s) is declared failed", cl->id);
            return -1;
        }
        if (ring_members_find(p->next, p->failed[i]) >= 0) {
            snprintf(err, errlen, "prepare: failed node %.64s is in epoch %" PRIu64, p->failed[i],
                     p->next->epoch);
            return -1;
        }
        if (!fresh && !failed_seen_down(cl, p->failed[i])) {
            snprintf(err, errlen,
                     "prepare: node %.64s is declared failed but answers this node's "
                     "heartbeats (%s): refusing to take over from a live node",
                     p->failed[i], cl->id);
            return -1;
        }
    }
    if (!fresh && active != 0 && active != p->from_epoch) {
        snprintf(err, errlen, "prepare: active epoch is %" PRIu64 ", not %" PRIu64, active,
                 p->from_epoch);
        return -1;
    }
    if (cl->self_old < 0 && ring_members_find(p->next, cl->id) < 0) {
        snprintf(err, errlen, "prepare: node %s is in neither epoch", cl->id);
        return -1;
    }
    if (p->n_failed + p->n_stale > 0) {
        /* Both are "not a holder" for compute_arcs. */
        cl->failed = calloc(p->n_failed + p->n_stale, sizeof(*cl->failed));
        if (cl->failed == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        for (i = 0; i < p->n_failed; i++) {
            snprintf(cl->failed[i], sizeof(cl->failed[i]), "%s", p->failed[i]);
        }
        for (i = 0; i < p->n_stale; i++) {
            snprintf(cl->failed[p->n_failed + i], sizeof(cl->failed[0]), "%s", p->stale[i]);
        }
        cl->n_failed = p->n_failed + p->n_stale;
        cl->n_dead = p->n_failed;
    }
    cl->fresh = fresh;
    if (install_pending(cl, p->next, p->token, p->token_len, err, errlen) < 0) {
        return -1;
    }
    cl->phase = CLUSTER_PHASE_PREPARED;
    if (statedir_save_members(cl->state_dir, STATEDIR_PENDING, cl->pending, err, errlen) < 0 ||
        save_phase(cl, err, errlen) < 0) {
        char e2[256];

        statedir_remove(cl->state_dir, STATEDIR_PENDING, e2, sizeof(e2));
        statedir_remove_phase(cl->state_dir, e2, sizeof(e2));
        clear_pending(cl);
        return -1;
    }
    if (cluster_publish(cl) < 0) {
        snprintf(err, errlen, "out of memory publishing the view");
        return -1;
    }
    log_msg(LOG_NOTICE,
            "prepared epoch %" PRIu64 ": importing %.4f, sourcing %.4f to %u, "
            "losing %.4f",
            p->next->epoch, arcset_share(&cl->importing), arcset_share(&cl->sourcing), cl->n_dests,
            arcset_share(&cl->losing));
    return 0;
}

/* Record a phase; see cluster.h. */
int
cluster_set_phase(struct cluster *cl, enum cluster_phase ph, char *err, size_t errlen)
{
    if (cl->pending == NULL) {
        snprintf(err, errlen, "no pending transition");
        return -1;
    }
    if (cl->phase == ph) {
        return 0;
    }
    cl->phase = ph;
    if (save_phase(cl, err, errlen) < 0) {
        return -1;
    }
    if (cluster_publish(cl) < 0) {
        snprintf(err, errlen, "out of memory publishing the view");
        return -1;
    }
    return 0;
}

/* Install m as active in memory (takes it) and publish. */
static int
activate(struct cluster *cl, struct ring_members *m, char *err, size_t errlen)
{
    struct ring *r = ring_build(m);

    if (r == NULL) {
        ring_members_free(m);
        snprintf(err, errlen, "cannot build the ring of epoch %" PRIu64, m->epoch);
        return -1;
    }
    ring_members_free(cl->active);
    cl->active = m;
    /* The old ring belongs to the current view, which frees it. */
    cl->active_ring = r;
    cl->self_old = ring_members_find(m, cl->id);
    return 0;
}

/* COMMIT; see cluster.h. */
int
cluster_commit(struct cluster *cl, const struct ring_members *next, const uint8_t *token,
               size_t token_len, bool *again, char *err, size_t errlen)
{
    struct ring_members *m;
    uint64_t             active = cl->active != NULL ? cl->active->epoch : 0;

    *again = false;
    if (cl->pending == NULL) {
        if (next == NULL) {
            snprintf(err, errlen, "commit: no pending transition");
            return -1;
        }
        if (active == next->epoch) {
            *again = true;
            return 0;
        }
        if (active != 0) {
            snprintf(err, errlen,
                     "commit: no pending transition for epoch %" PRIu64 " (active %" PRIu64 ")",
                     next->epoch, active);
            return -1;
        }
        m = ring_members_dup(next);
    } else {
        if (!cluster_token_ok(cl, token, token_len)) {
            snprintf(err, errlen, "commit: token does not match the pending transition");
            return -1;
        }
        if (next != NULL && next->epoch != cl->pending->epoch) {
            snprintf(err, errlen, "commit: epoch %" PRIu64 " is not the pending %" PRIu64,
                     next->epoch, cl->pending->epoch);
            return -1;
        }
        if (cl->n_dests > 0 && cl->phase != CLUSTER_PHASE_FENCED) {
            snprintf(err, errlen, "commit: this node is a source and was not fenced");
            return -1;
        }
        m = ring_members_dup(cl->pending);
    }
    if (m == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (m->epoch <= active) {
        ring_members_free(m);
        snprintf(err, errlen, "commit: epoch %" PRIu64 " is not above active %" PRIu64,
                 next != NULL ? next->epoch : 0, active);
        return -1;
    }
    /* Persist first: a crash after this comes back in the new epoch (a
     * stale pending file below the active epoch is dropped at load). */
    if (statedir_save_members(cl->state_dir, STATEDIR_ACTIVE, m, err, errlen) < 0) {
        ring_members_free(m);
        return -1;
    }
    if (activate(cl, m, err, errlen) < 0) {
        return -1;
    }
    /* A fresh transition imported everything this node owns: it serves
     * again. A higher epoch a peer told us about is reached or passed. */
    if (cl->fresh) {
        __atomic_store_n(&cl->live.recovering, 0, __ATOMIC_RELEASE);
    }
    /* Restarted since the Prepare (the store committed, then this node's
     * Commit came after its restart): what it imported is gone, so it must
     * not serve the ranges it gained as empty (finding 7's last case). */
    if (cl->restored && cl->importing.n > 0 && cl->active->n_nodes > 1) {
        __atomic_store_n(&cl->live.recovering, 1, __ATOMIC_RELEASE);
        log_msg(LOG_ERR,
                "committed epoch %" PRIu64 " after a restart: the ranges it imported are "
                "gone: recovering (ringctl repair %s)",
                cl->active->epoch, cl->id);
    }
    if (cl->barrier != NULL) {
        mark_served(cl);
    }
    if (__atomic_load_n(&cl->live.behind_epoch, __ATOMIC_RELAXED) <= cl->active->epoch) {
        __atomic_store_n(&cl->live.behind_epoch, 0, __ATOMIC_RELEASE);
    }
    clear_pending(cl);
    /* The view first: the fence lifts as soon as the new epoch is synced
     * (the fenced ranges wait for every node's commit, rank by rank). */
    if (cluster_publish(cl) < 0) {
        snprintf(err, errlen, "out of memory publishing the view");
        return -1;
    }
    if (statedir_drop_pending(cl->state_dir, err, errlen) < 0) {
        log_msg(LOG_ERR, "%s", err);
    }
    log_msg(LOG_NOTICE, "committed epoch %" PRIu64, cl->active->epoch);
    return 0;
}

/* ABORT; see cluster.h. Without a pending transition it is a no-op. */
int
cluster_abort(struct cluster *cl, const uint8_t *token, size_t token_len, char *err, size_t errlen)
{
    if (cl->pending == NULL) {
        return 0;
    }
    if (!cluster_token_ok(cl, token, token_len)) {
        snprintf(err, errlen, "abort: token does not match the pending transition");
        return -1;
    }
    if (statedir_remove_phase(cl->state_dir, err, errlen) < 0 ||
        statedir_remove(cl->state_dir, STATEDIR_PENDING, err, errlen) < 0) {
        return -1;
    }
    log_msg(LOG_NOTICE, "aborted epoch %" PRIu64, cl->pending->epoch);
    clear_pending(cl);
    if (cluster_publish(cl) < 0) {
        snprintf(err, errlen, "out of memory publishing the view");
        return -1;
    }
    return 0;
}

/* Read the state directory into cl. */
static int
load_state(struct cluster *cl, char *err, size_t errlen)
{
    struct ring_members *m = NULL, *p = NULL;
    int                  rc, phase = 0;

    rc = statedir_load_members(cl->state_dir, STATEDIR_ACTIVE, &m, err, errlen);
    if (rc < 0) {
        return -1;
    }
    if (rc == 0 && activate(cl, m, err, errlen) < 0) {
        return -1;
    }
    rc = statedir_load_members(cl->state_dir, STATEDIR_PENDING, &p, err, errlen);
    if (rc < 0) {
        return -1;
    }
    if (rc == 1) {
        return 0;
    }
    if (cl->active != NULL && p->epoch <= cl->active->epoch) {
        /* Crashed between persisting the commit and removing pending (its
         * phase record may be gone already, or not). */
        log_msg(LOG_NOTICE, "dropping stale pending epoch %" PRIu64, p->epoch);
        ring_members_free(p);
        statedir_remove_phase(cl->state_dir, err, errlen);
        return statedir_remove(cl->state_dir, STATEDIR_PENDING, err, errlen);
    }
    if (statedir_load_phase(cl->state_dir, cl->ptoken, sizeof(cl->ptoken), &cl->ptoken_len,
                            phase_of, &phase, err, errlen) < 0) {
        ring_members_free(p);
        return -1;
    }
    cl->phase = (enum cluster_phase)phase;
    {
        enum cluster_phase ph = cl->phase;
        uint8_t            tok[CLUSTER_TOKEN_MAX];
        size_t             tl = cl->ptoken_len;

        memcpy(tok, cl->ptoken, tl);
        rc = install_pending(cl, p, tok, tl, err, errlen);
        ring_members_free(p);
        if (rc < 0) {
            return -1;
        }
        cl->phase = ph;
        cl->restored = true;
    }
    return 0;
}

/* Record that this node has served as a member (the served marker): a
 * later start is a restart. Logged, not fatal: the node still serves. */
static void
mark_served(struct cluster *cl)
{
    char err[1300];

    if (cl->served || cl->active == NULL || cl->self_old < 0) {
        return;
    }
    if (statedir_mark_served(cl->state_dir, err, sizeof(err)) < 0) {
        log_msg(LOG_ERR, "%s", err);
    } else {
        cl->served = true;
    }
}

/* See cluster.h. */
void
cluster_started(struct cluster *cl)
{
    cl->served = statedir_served(cl->state_dir);
    /* Whatever this node held before it stopped is gone (the store is
     * memory only) and may be stale anyway: until a transition copies its
     * ranges back (docs/cluster.md, "Node failure"), its own keys answer
     * TRYAGAIN rather than misses. A state directory written by hand (no
     * served file) is a first start; a cluster of one has nobody to copy
     * from, it serves empty. */
    if (cl->served && cl->active != NULL && cl->self_old >= 0 && cl->active->n_nodes > 1) {
        __atomic_store_n(&cl->live.recovering, 1, __ATOMIC_RELEASE);
        log_msg(LOG_NOTICE,
                "restarted as a member of epoch %" PRIu64 ": recovering (its keys "
                "answer TRYAGAIN until `ringctl repair %s` or remove --failed + join)",
                cl->active->epoch, cl->id);
    }
    mark_served(cl);
}

/* See cluster.h. */
int
cluster_new(cluster_barrier_fn barrier, void *barrier_arg, const char *id, const char *state_dir,
            const char *name, const uint8_t *token, size_t token_len, struct cluster **out,
            char *err, size_t errlen)
{
    struct cluster *cl = calloc(1, sizeof(*cl));
    struct stat     st;

    *out = NULL;
    if (cl == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    cl->barrier = barrier;
    cl->barrier_arg = barrier_arg;
    cl->self_old = cl->self_new = -1;
    if (id == NULL || strlen(id) == 0 || strlen(id) > RING_ID_MAX ||
        strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-") !=
            strlen(id)) {
        snprintf(err, errlen, "--id: a node id is 1-64 bytes of [A-Za-z0-9._:-]");
        goto fail;
    }
    strcpy(cl->id, id);
    if (strlen(state_dir) >= sizeof(cl->state_dir) || strlen(name) >= sizeof(cl->name)) {
        snprintf(err, errlen, "--state-dir or --cluster too long");
        goto fail;
    }
    strcpy(cl->state_dir, state_dir);
    strcpy(cl->name, name);
    cl->cluster_id = frame_cluster_id(name);
    if (token != NULL) {
        if (token_len > CLUSTER_TOKEN_MAX) {
            snprintf(err, errlen, "the token is over %d bytes", CLUSTER_TOKEN_MAX);
            goto fail;
        }
        memcpy(cl->token, token, token_len);
        cl->token_len = token_len;
        cl->has_token = true;
    }
    if (stat(state_dir, &st) < 0) {
        snprintf(err, errlen, "--state-dir %s: %s", state_dir, strerror(errno));
        goto fail;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--state-dir %s: not a directory", state_dir);
        goto fail;
    }
    if (getrandom(&cl->boot_id, sizeof(cl->boot_id), 0) != (ssize_t)sizeof(cl->boot_id)) {
        cl->boot_id = (uint64_t)getpid() ^ ((uint64_t)time(NULL) << 20);
    }
    if (load_state(cl, err, errlen) < 0) {
        goto fail;
    }
    if (cluster_publish(cl) < 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    *out = cl;
    return 0;
fail:
    cluster_free(cl);
    return -1;
}

/* Free everything; no worker may be running. */
void
cluster_free(struct cluster *cl)
{
    if (cl == NULL) {
        return;
    }
    clear_pending(cl);
    arcset_clear(&cl->kept);
    /* A ring not yet published (failed start) is in no view. */
    if (cl->view == NULL || cl->view->ring != cl->active_ring) {
        ring_free(cl->active_ring);
    }
    view_free(cl->view, NULL);
    ring_members_free(cl->active);
    peer_tls_free(cl->tls);
    free(cl);
}
