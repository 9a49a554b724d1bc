/*
 * transition: the node's side of a transition (docs/cluster.md, PREPARE,
 * COPY, FENCE, COMMIT, ABORT): the cluster state change, the purges and
 * the handoff around each one, the background CLEANUP after a commit, and
 * the orphan count for Status, in slices between the thread's other work.
 * server/admin.c decodes the admin's frames; all of this runs on its thread.
 */
#include "config.h"
#include "server/transition.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "lib/util.h"
#include "server/cluster.h"
#include "server/cluster_internal.h"
#include "server/handoff.h"
#include "server/health.h"
#include "server/log.h"
#include "server/store.h"

#define CLEANUP_ITEMS   2000 /* purged per cleanup tick */
#define CLEANUP_TICK_MS 10   /* so cleanup stays under ~200k items/s */
/* A Status is answered at once with the last orphan count if it ended
 * less than ORPHANS_FRESH_MS ago (or twice as long as it took, on a node
 * whose count takes longer), and one older than ORPHANS_REFRESH_MS is
 * counted again in the background. Else the Status waits for a count. */
#define ORPHANS_FRESH_MS   2000
#define ORPHANS_REFRESH_MS 1000
/* Items read per slice of an orphan count (about 3 ms at 0.2 us an item):
 * between slices the cluster thread answers heartbeats and requests. */
#define ORPHANS_SLICE 16384
/* The store committed the epoch this node prepared: its admin's Commit
 * normally follows within milliseconds; after this long without one the
 * node commits by itself (the admin died after the store's commit). */
#define STORE_COMMIT_GRACE_MS 1000

/* How often the background CLEANUP asks whether the new owner of a kept
 * range holds it. */
#define KEPT_CHECK_MS 100

/* Ranges this node handed to a new owner in a committed transition, not
 * purged until that owner answered a heartbeat after the commit with
 * something current: one that restarted since the copy (recovering, or
 * without a membership) lost them, and this node stays their holder. */
struct kept {
    char          id[RING_ID_MAX + 1];
    struct arcset arcs;
    uint64_t      since_ms; /* the commit; only a later Pong counts */
    bool          logged;   /* "holds nothing" said once */
};

/* A request for the orphan count: answered by count number need or later
 * (the one running when the request came, or the next one). */
struct orphan_waiter {
    transition_orphans_fn fn;
    void                 *arg;
    uint64_t              need;
};

struct transition {
    struct cluster       *cl;
    struct store         *store;
    struct handoff       *ho;
    struct event         *cleanup_ev;
    struct store_cursor   cleanup_cur;
    bool                  cleaning;
    uint64_t              orphans;    /* last complete orphan count */
    uint64_t              orphans_ms; /* when its count started (0: none for this state) */
    uint64_t              orphans_end_ms, orphans_took_ms; /* when it ended, how long it took */
    struct event         *count_ev; /* the next slice of the count in progress */
    bool                  counting;
    uint32_t              count_stripe;      /* where the count in progress resumes */
    uint64_t              count_n, count_ms; /* its partial figure; when it started */
    uint64_t              count_seq;         /* counts started (the running one's number) */
    struct orphan_waiter *waiters;           /* Status requests waiting for a count */
    size_t                n_waiters, cap_waiters;
    transition_done_fn    fence_fn; /* a fence waits for its drain */
    void                 *fence_arg;
    struct kept          *kept;
    uint32_t              n_kept;
    struct arcset         held; /* kept ranges whose owner holds nothing: not orphans */
    /* The prefixes where orphans may be (orphan_prefixes), for the epoch
     * and index they were built for. */
    uint64_t *omap;
    uint64_t  omap_epoch;
    int32_t   omap_self;
    bool      omap_ok;
    int (*peer_holds)(void *arg, const char *id, uint64_t since_ms);
    void *peer_arg;
    void (*end_streams)(void *arg); /* the caller's side of an abort */
    void         *end_arg;
    struct event *store_ev;    /* the grace before a store commit */
    uint64_t      store_epoch; /* the epoch it waits to commit (0: none) */
};

/*
 * Orphans
 */

/* Store predicate (arg: the cluster): a key the active epoch does not give
 * this node and that it does not import either. */
static bool
orphan_pred(uint64_t hash, void *arg)
{
    struct cluster *cl = arg;

    return !cluster_owned_active(cl, hash) && !arcset_has(&cl->importing, hash);
}

/* The prefix map (server/store.h) of the hashes the active epoch does not
 * give this node, which covers every orphan: the count and the cleanup
 * read only those records. Rebuilt when the epoch or this node's index
 * changed; NULL (no narrowing) without memory for it. */
static const uint64_t *
orphan_prefixes(struct transition *t)
{
    struct cluster *cl = t->cl;
    uint64_t        epoch = cluster_active_epoch(cl);
    struct arcset   owned = { 0 };

    if (t->omap_ok && t->omap_epoch == epoch && t->omap_self == cl->self_old) {
        return t->omap;
    }
    if (t->omap == NULL && (t->omap = malloc(STORE_PREFIX_WORDS * sizeof(uint64_t))) == NULL) {
        return NULL;
    }
    t->omap_ok = false;
    if (cl->active_ring == NULL || cl->self_old < 0) {
        /* No ring: everything is owned; not a member: nothing is. */
        memset(t->omap, cl->active_ring == NULL ? 0 : 0xff, STORE_PREFIX_WORDS * sizeof(uint64_t));
    } else if (arcset_owned(&owned, cl->active_ring, (uint32_t)cl->self_old) < 0) {
        arcset_clear(&owned);
        return NULL;
    } else {
        arcset_prefixes_outside(&owned, STORE_PREFIX_BITS, t->omap);
        arcset_clear(&owned);
    }
    t->omap_epoch = epoch;
    t->omap_self = cl->self_old;
    t->omap_ok = true;
    return t->omap;
}

/* Store predicate for the orphan count (arg: the transition): an orphan
 * that cleanup purges or waits to purge (a range kept for an owner that
 * restarted since the copy is held on purpose, not counted). */
static bool
count_pred(uint64_t hash, void *arg)
{
    struct transition *t = arg;

    return orphan_pred(hash, t->cl) && !arcset_has(&t->held, hash);
}

/* Start a count from the first stripe (a running one starts over: what it
 * read was judged under another state, or before a waiter's request). */
static void
count_start(struct transition *t)
{
    struct timeval tv = { 0, 0 };

    t->count_seq++;
    t->count_stripe = 0;
    t->count_n = 0;
    t->count_ms = util_now_ms();
    if (!t->counting) {
        t->counting = true;
        evtimer_add(t->count_ev, &tv);
    }
}

/* The state orphan_pred reads changed (prepare, commit, abort): the last
 * figure no longer stands, and a count in progress starts over. */
static void
orphans_reset(struct transition *t)
{
    t->orphans_ms = 0;
    if (t->counting) {
        count_start(t);
    }
}

/* Answer, one at a time, the waiters count number done answers. The array
 * is searched again after each call: a callback may add a waiter (a
 * Status that was buffered behind) or cancel one (a connection freed). */
static void
answer_waiters(struct transition *t, uint64_t done)
{
    for (;;) {
        struct orphan_waiter w;
        size_t               i;

        for (i = 0; i < t->n_waiters && t->waiters[i].need > done; i++) {
            continue;
        }
        if (i == t->n_waiters) {
            return;
        }
        w = t->waiters[i];
        t->waiters[i] = t->waiters[--t->n_waiters];
        w.fn(w.arg, t->orphans);
    }
}

/* One slice of the orphan count; the last one publishes the figure,
 * answers the waiters, and starts the next count if some wait for it. */
static void
count_cb(evutil_socket_t fd, short what, void *arg)
{
    struct transition *t = arg;
    struct timeval     tv = { 0, 0 };
    uint64_t           bytes = 0, done;

    (void)fd;
    (void)what;
    if (store_count_step(t->store, &t->count_stripe, count_pred, t, orphan_prefixes(t),
                         ORPHANS_SLICE, &t->count_n, &bytes) != 0) {
        evtimer_add(t->count_ev, &tv);
        return;
    }
    t->counting = false;
    t->orphans = t->count_n;
    t->orphans_ms = t->count_ms;
    t->orphans_end_ms = util_now_ms();
    t->orphans_took_ms = t->orphans_end_ms - t->count_ms;
    done = t->count_seq;
    answer_waiters(t, done);
    if (t->n_waiters > 0 && !t->counting) {
        count_start(t);
    }
}

/* See transition.h. */
bool
transition_orphans_now(struct transition *t, uint64_t *orphans)
{
    uint64_t now = util_now_ms(), age, fresh = ORPHANS_FRESH_MS;

    if (t->orphans_ms == 0) {
        return false; /* no count since the state changed */
    }
    age = now - t->orphans_end_ms;
    if (fresh < 2 * t->orphans_took_ms) {
        fresh = 2 * t->orphans_took_ms;
    }
    if (age >= fresh) {
        return false;
    }
    if (age >= ORPHANS_REFRESH_MS && !t->counting) {
        count_start(t); /* for the next Status */
    }
    *orphans = t->orphans;
    return true;
}

/* See transition.h. */
uint64_t
transition_orphans_last(const struct transition *t)
{
    return t->orphans;
}

/* See transition.h. */
int
transition_orphans_wait(struct transition *t, transition_orphans_fn fn, void *arg)
{
    if (t->n_waiters == t->cap_waiters) {
        size_t                cap = t->cap_waiters > 0 ? 2 * t->cap_waiters : 8;
        struct orphan_waiter *w = realloc(t->waiters, cap * sizeof(*w));

        if (w == NULL) {
            return -1;
        }
        t->waiters = w;
        t->cap_waiters = cap;
    }
    /* The running count, if any, answers too: like one started now, it
     * reads every item present from its start to its end, and it started
     * after the last change of what orphan_pred reads (orphans_reset). */
    t->waiters[t->n_waiters].fn = fn;
    t->waiters[t->n_waiters].arg = arg;
    t->waiters[t->n_waiters].need = t->counting ? t->count_seq : t->count_seq + 1;
    t->n_waiters++;
    if (!t->counting) {
        count_start(t);
    }
    return 0;
}

/* See transition.h. */
void
transition_orphans_cancel(struct transition *t, void *arg)
{
    size_t i = 0;

    while (i < t->n_waiters) {
        if (t->waiters[i].arg == arg) {
            t->waiters[i] = t->waiters[--t->n_waiters];
        } else {
            i++;
        }
    }
}

/*
 * Purges
 */

/* Store predicate (arg: the cluster): a key this node imports and does
 * not hold in the active epoch, so what it has there is a leftover of an
 * older epoch (cleanup not finished) or of an aborted import. */
static bool
refill_pred(uint64_t hash, void *arg)
{
    struct cluster *cl = arg;

    return arcset_has(&cl->importing, hash) && !cluster_holds_active(cl, hash);
}

/* Remove what this node imports into ranges it does not hold in epoch N
 * (leftovers before a copy, what it imported after an abort). Nobody
 * writes there: this node does not serve those arcs. A range it owns in
 * N is never purged, though the copy refills it too (every new owner but
 * the old primary): it serves epoch N until the store's commit, an abort
 * must find it as it was, and writes accepted meanwhile reach it as an
 * owner of N; the import merges into it by CAS (handoff_in.c).
 * Synchronous, so no import can interleave. */
static void
purge_importing(struct transition *t)
{
    struct store_cursor cur;
    uint64_t           *map;

    if (t->cl->importing.n == 0) {
        return;
    }
    store_cursor_init(&cur);
    /* Only the importing ranges' records are read (without a map, if
     * there is no memory for one). */
    map = arcset_prefixes_new(&t->cl->importing, STORE_PREFIX_BITS);
    cur.prefixes = map;
    while (store_purge(t->store, refill_pred, t->cl, 1u << 16, &cur) != 0) {
        continue;
    }
    free(map);
}

/* Store predicate (arg: the cluster): an orphan that no kept range holds. */
static bool
cleanup_pred(uint64_t hash, void *arg)
{
    struct cluster *cl = arg;

    return orphan_pred(hash, arg) && !arcset_has(&cl->kept, hash);
}

/* Rebuild cl->kept, the union of the kept ranges, and t->held, that of
 * the ranges whose owner said it holds nothing; the orphan count starts
 * over. 0 or -1 (ENOMEM: the last unions stay, and nothing more is purged
 * while a kept range is released). */
static int
kept_union(struct transition *t)
{
    struct arcset u = { 0 }, held = { 0 };
    uint32_t      i;

    for (i = 0; i < t->n_kept; i++) {
        if (arcset_append(&u, &t->kept[i].arcs) < 0 ||
            (t->kept[i].logged && arcset_append(&held, &t->kept[i].arcs) < 0)) {
            arcset_clear(&u);
            arcset_clear(&held);
            return -1;
        }
    }
    arcset_finish(&u);
    arcset_finish(&held);
    arcset_clear(&t->cl->kept);
    arcset_clear(&t->held);
    t->cl->kept = u;
    t->held = held;
    orphans_reset(t);
    return 0;
}

/* Forget kept range i (its owner holds it, or left the membership). */
static void
kept_drop(struct transition *t, uint32_t i)
{
    arcset_clear(&t->kept[i].arcs);
    t->kept[i] = t->kept[--t->n_kept];
}

/* Ask about every kept range's owner: one that answered after the commit
 * with something current holds it (its range is purged here); one that
 * holds nothing restarted since the copy (the range stays, logged once).
 * Whether a range was released. */
static bool
kept_check(struct transition *t)
{
    bool     released = false;
    uint32_t i = 0;

    while (i < t->n_kept) {
        struct kept *k = &t->kept[i];
        int holds = t->peer_holds != NULL ? t->peer_holds(t->peer_arg, k->id, k->since_ms) : 1;

        if (holds > 0) {
            kept_drop(t, i);
            kept_union(t);
            released = true;
            continue;
        }
        if (holds < 0 && !k->logged) {
            k->logged = true;
            kept_union(t);
            log_msg(LOG_ERR,
                    "%.64s holds nothing current: it restarted since the copy; keeping the "
                    "%.1f%% of the keyspace handed to it here (`ringctl repair %.64s` refills it "
                    "from this node)",
                    k->id, 100.0 * arcset_share(&k->arcs), k->id);
        }
        i++;
    }
    return released;
}

/* CLEANUP: what the active epoch does not give this node, in the
 * background, CLEANUP_ITEMS per tick, but for the kept ranges of owners
 * not heard from yet (asked every KEPT_CHECK_MS until they answer). */
static void
cleanup_cb(evutil_socket_t fd, short what, void *arg)
{
    struct transition *t = arg;
    struct timeval     tv = { 0, CLEANUP_TICK_MS * 1000 };
    struct timeval     later = { 0, KEPT_CHECK_MS * 1000 };

    (void)fd;
    (void)what;
    if (t->n_kept > 0 && kept_check(t)) {
        store_cursor_init(&t->cleanup_cur); /* released ranges: purge them too */
        t->cleaning = true;
    }
    t->cleanup_cur.prefixes = orphan_prefixes(t);
    if (t->cleaning &&
        store_purge(t->store, cleanup_pred, t->cl, CLEANUP_ITEMS, &t->cleanup_cur) == 0) {
        t->cleaning = false;
        log_msg(LOG_NOTICE, "cleanup done%s", t->n_kept > 0 ? " (but for kept ranges)" : "");
    }
    if (t->cleaning) {
        evtimer_add(t->cleanup_ev, &tv);
    } else if (t->n_kept > 0) {
        evtimer_add(t->cleanup_ev, &later);
    }
}

/* At a commit: the ranges this node sent (the dests of the transition)
 * are kept until their owners answer; kept ranges of nodes no longer
 * members are forgotten (this transition sourced them from here, see
 * compute_arcs, or this node owns them now). Before cluster_commit, which
 * forgets the dests: *out (n) the new entries, or NULL on ENOMEM. */
static struct kept *
kept_snapshot(struct transition *t, uint32_t *n)
{
    uint32_t                   nd, i;
    const struct cluster_dest *d = cluster_dests(t->cl, &nd);
    struct kept               *k = calloc(nd > 0 ? nd : 1, sizeof(*k));

    *n = 0;
    for (i = 0; k != NULL && i < nd; i++) {
        snprintf(k[i].id, sizeof(k[i].id), "%s", d[i].id);
        if (arcset_copy(&k[i].arcs, &d[i].arcs) < 0) {
            while (i-- > 0) {
                arcset_clear(&k[i].arcs);
            }
            free(k);
            return NULL;
        }
        k[i].since_ms = util_coarse_ms();
        *n = i + 1;
    }
    return k;
}

/* The commit took: old entries of non-members go, the snapshot is added
 * (taken over; freed). */
static void
kept_commit(struct transition *t, struct kept *add, uint32_t n_add)
{
    const struct ring_members *m = cluster_active(t->cl);
    struct kept               *k;
    uint32_t                   i = 0;

    while (i < t->n_kept) {
        if (m == NULL || ring_members_find(m, t->kept[i].id) < 0) {
            kept_drop(t, i);
        } else {
            i++;
        }
    }
    k = realloc(t->kept, (t->n_kept + n_add + 1) * sizeof(*k));
    if (k != NULL) {
        t->kept = k;
        memcpy(k + t->n_kept, add, n_add * sizeof(*k));
        t->n_kept += n_add;
    } else {
        /* ENOMEM: purge as before rather than keep unbounded state. */
        for (i = 0; i < n_add; i++) {
            arcset_clear(&add[i].arcs);
        }
    }
    free(add);
    kept_union(t);
}

/* Start (or restart from the beginning) the background CLEANUP. */
static void
cleanup_start(struct transition *t)
{
    struct timeval tv = { 0, 0 };

    store_cursor_init(&t->cleanup_cur);
    t->cleaning = true;
    evtimer_add(t->cleanup_ev, &tv);
}

/*
 * Phases
 */

/* See transition.h. */
int
transition_prepare(struct transition *t, const struct cluster_prep *p, char *err, size_t errlen)
{
    bool again;

    if (cluster_prepare_failed(t->cl, p, &again, err, errlen) < 0) {
        return -1;
    }
    if (!again) {
        /* Cleanup of an older epoch must not touch what we will import. */
        purge_importing(t);
        orphans_reset(t); /* the importing arcs changed: recount */
        cluster_handoff_reset(t->cl);
    }
    /* Sources track changes before they acknowledge. */
    return handoff_prepare(t->ho, err, errlen);
}

/* A pending transition with this token; else the error and -1. */
static int
token_check(struct transition *t, const uint8_t *token, size_t token_len, char *err, size_t errlen)
{
    struct cluster *cl = t->cl;

    if (cl->pending == NULL) {
        snprintf(err, errlen, "no pending transition");
        return -1;
    }
    if (!cluster_token_ok(cl, token, token_len)) {
        snprintf(err, errlen, "token does not match the pending transition");
        return -1;
    }
    return 0;
}

/* See transition.h. */
int
transition_start_copy(struct transition *t, const uint8_t *token, size_t token_len,
                      uint64_t rate_bytes_per_s, bool paused, char *err, size_t errlen)
{
    if (token_check(t, token, token_len, err, errlen) < 0) {
        return -1;
    }
    if (t->cl->phase == CLUSTER_PHASE_PREPARED &&
        cluster_set_phase(t->cl, CLUSTER_PHASE_COPYING, err, errlen) < 0) {
        return -1;
    }
    return handoff_start_copy(t->ho, rate_bytes_per_s, paused, err, errlen);
}

/* The drain of a fence finished: tell the waiter. */
static void
fence_done(void *arg, const char *err)
{
    struct transition *t = arg;
    transition_done_fn fn = t->fence_fn;

    t->fence_fn = NULL;
    if (fn == NULL) {
        return;
    }
    log_msg(LOG_NOTICE, "fence %s after %" PRIu64 " ms", err == NULL ? "done" : "failed",
            t->cl->fence_held_ms);
    fn(t->fence_arg, err);
}

/* See transition.h. */
int
transition_fence(struct transition *t, const uint8_t *token, size_t token_len, char *err,
                 size_t errlen)
{
    uint64_t t0 = util_now_ms();

    if (token_check(t, token, token_len, err, errlen) < 0) {
        return -1;
    }
    if (t->fence_fn != NULL) {
        snprintf(err, errlen, "a fence is already in progress");
        return -1;
    }
    /* Publishing the fence view waits for every worker to finish the
     * request it is in: after it, no write to a fenced arc is in flight. */
    if (cluster_set_phase(t->cl, CLUSTER_PHASE_FENCED, err, errlen) < 0) {
        return -1;
    }
    log_msg(LOG_INFO, "fence: persisted and published in %" PRIu64 " ms", util_now_ms() - t0);
    return 0;
}

/* See transition.h. */
void
transition_fence_wait(struct transition *t, transition_done_fn done, void *arg)
{
    t->fence_fn = done;
    t->fence_arg = arg;
    handoff_fence(t->ho, fence_done, t);
}

/* See transition.h. */
void
transition_fence_cancel(struct transition *t)
{
    handoff_fence_cancel(t->ho);
    t->fence_fn = NULL;
}

/* See transition.h. */
int
transition_commit(struct transition *t, const struct ring_members *next, const uint8_t *token,
                  size_t token_len, char *err, size_t errlen)
{
    bool         again = false;
    uint32_t     n_add = 0, i;
    struct kept *add = kept_snapshot(t, &n_add);
    int          rc = cluster_commit(t->cl, next, token, token_len, &again, err, errlen);

    if (rc < 0 || again) {
        for (i = 0; add != NULL && i < n_add; i++) {
            arcset_clear(&add[i].arcs);
        }
        free(add);
        return rc;
    }
    if (add != NULL) {
        kept_commit(t, add, n_add);
    }
    handoff_stop(t->ho);
    orphans_reset(t); /* the active epoch changed */
    cleanup_start(t);
    return 0;
}

/* Is m the membership this node has pending (same text form)? */
static bool
is_pending(const struct cluster *cl, const struct ring_members *m)
{
    size_t a, b;
    char  *x, *y;
    bool   same;

    if (cl->pending == NULL || cl->pending->epoch != m->epoch) {
        return false;
    }
    a = ring_members_format(cl->pending, NULL, 0);
    b = ring_members_format(m, NULL, 0);
    if (a != b) {
        return false;
    }
    x = malloc(a + 1);
    y = malloc(b + 1);
    same = x != NULL && y != NULL;
    if (same) {
        ring_members_format(cl->pending, x, a + 1);
        ring_members_format(m, y, b + 1);
        same = memcmp(x, y, a) == 0;
    }
    free(x);
    free(y);
    return same;
}

/* The grace after the store committed our pending epoch ran out: commit
 * it with the pending transition's own token, unless the admin did. */
static void
store_commit_cb(evutil_socket_t fd, short what, void *arg)
{
    struct transition *t = arg;
    struct cluster    *cl = t->cl;
    uint64_t           epoch = t->store_epoch;
    char               err[512];

    (void)fd;
    (void)what;
    t->store_epoch = 0;
    if (cl->pending == NULL || cl->pending->epoch != epoch) {
        return; /* the admin's Commit (or an Abort) came */
    }
    log_msg(LOG_ERR,
            "the store committed epoch %" PRIu64 " and no admin sent Commit within %d ms: "
            "committing it from the store (the admin died after the store's commit?)",
            epoch, STORE_COMMIT_GRACE_MS);
    if (transition_commit(t, NULL, cl->ptoken, cl->ptoken_len, err, sizeof(err)) < 0) {
        log_msg(LOG_ERR, "commit of epoch %" PRIu64 " from the store failed: %s", epoch, err);
    }
}

/* See transition.h. */
void
transition_store_active(struct transition *t, const struct ring_members *m,
                        void (*behind)(void *arg, uint64_t epoch), void *arg)
{
    struct cluster *cl = t->cl;
    uint64_t        active = cl->active != NULL ? cl->active->epoch : 0;

    if (m->epoch <= active) {
        return;
    }
    if (is_pending(cl, m)) {
        struct timeval tv = { STORE_COMMIT_GRACE_MS / 1000, (STORE_COMMIT_GRACE_MS % 1000) * 1000 };

        if (t->store_epoch != m->epoch && evtimer_add(t->store_ev, &tv) == 0) {
            t->store_epoch = m->epoch;
        }
        return;
    }
    /* The number this node has pending, another membership: the store
     * aborted our transition and committed another one under its number. */
    if (cl->pending != NULL && m->epoch == cl->pending->epoch) {
        transition_drop_aborted(t, m->epoch, health_members_id(m));
    }
    /* Above all this node holds, and not what it prepared: behind. */
    if (active != 0 && (cl->pending == NULL || m->epoch > cl->pending->epoch)) {
        behind(arg, m->epoch);
    }
}

/* See transition.h. */
void
transition_set_peer_holds(struct transition *t,
                          int (*fn)(void *arg, const char *id, uint64_t since_ms), void *arg)
{
    t->peer_holds = fn;
    t->peer_arg = arg;
}

/* See transition.h. */
void
transition_set_end_streams(struct transition *t, void (*end_streams)(void *arg), void *arg)
{
    t->end_streams = end_streams;
    t->end_arg = arg;
}

/* See transition.h. The token is copied: the abort clears the pending
 * transition it belongs to. */
bool
transition_drop_aborted(struct transition *t, uint64_t epoch, uint64_t id)
{
    struct cluster *cl = t->cl;
    uint8_t         token[CLUSTER_TOKEN_MAX];
    size_t          len;
    char            err[256];

    if (cl->pending == NULL || cl->pending->epoch != epoch || id == 0 || t->end_streams == NULL ||
        health_members_id(cl->pending) == id) {
        return false;
    }
    len = cl->ptoken_len;
    memcpy(token, cl->ptoken, len);
    log_msg(LOG_ERR,
            "epoch %" PRIu64 " was committed with another membership than the one this node "
            "has pending: its transition was aborted (a missed Abort); dropping it",
            epoch);
    if (transition_abort(t, token, len, epoch, t->end_streams, t->end_arg, err, sizeof(err)) < 0) {
        log_msg(LOG_ERR, "dropping the aborted epoch %" PRIu64 " failed: %s", epoch, err);
        return false;
    }
    return true;
}

/* See transition.h. */
int
transition_abort(struct transition *t, const uint8_t *token, size_t token_len, uint64_t epoch,
                 void (*end_streams)(void *arg), void *arg, char *err, size_t errlen)
{
    struct cluster *cl = t->cl;
    int             rc;

    if (cl->pending == NULL) {
        return 0;
    }
    if (!cluster_token_ok(cl, token, token_len)) {
        snprintf(err, errlen, "token does not match the pending transition");
        return -1;
    }
    if (epoch != 0 && epoch != cl->pending->epoch) {
        snprintf(err, errlen, "abort: not the pending epoch");
        return -1;
    }
    handoff_stop(t->ho);
    /* handoff_stop forgot the fence: end_streams fails its waiter. */
    t->fence_fn = NULL;
    end_streams(arg);
    purge_importing(t);
    rc = cluster_abort(cl, token, token_len, err, errlen);
    orphans_reset(t); /* nothing imported any more */
    return rc;
}

/* See transition.h. */
void
transition_resume(struct transition *t)
{
    char err[256];

    /* The store is empty, but the rules stay the same. */
    if (t->cl->pending != NULL && handoff_prepare(t->ho, err, sizeof(err)) < 0) {
        log_msg(LOG_ERR, "%s", err);
    }
}

/*
 * Life cycle
 */

/* See transition.h. */
struct transition *
transition_new(struct cluster *cl, struct store *s, struct handoff *ho, struct event_base *base)
{
    struct transition *t = calloc(1, sizeof(*t));

    if (t == NULL) {
        return NULL;
    }
    t->cl = cl;
    t->store = s;
    t->ho = ho;
    t->cleanup_ev = evtimer_new(base, cleanup_cb, t);
    t->store_ev = evtimer_new(base, store_commit_cb, t);
    t->count_ev = evtimer_new(base, count_cb, t);
    if (t->cleanup_ev == NULL || t->store_ev == NULL || t->count_ev == NULL) {
        transition_free(t);
        return NULL;
    }
    return t;
}

/* See transition.h. */
void
transition_free(struct transition *t)
{
    if (t == NULL) {
        return;
    }
    if (t->cleanup_ev != NULL) {
        event_free(t->cleanup_ev);
    }
    if (t->store_ev != NULL) {
        event_free(t->store_ev);
    }
    if (t->count_ev != NULL) {
        event_free(t->count_ev);
    }
    while (t->n_kept > 0) {
        kept_drop(t, 0);
    }
    free(t->kept);
    arcset_clear(&t->held);
    free(t->omap);
    free(t->waiters);
    free(t);
}
