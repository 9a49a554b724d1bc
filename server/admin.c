/*
 * admin: the node's side of the admin requests (see admin.h). Each
 * AdminRequest is decoded here, at the edge, into the node's structs
 * (struct ring_members, struct cluster_prep), run by server/transition.h,
 * and answered with an AdminReply carrying the node's whole NodeStatus.
 */
#include "config.h"
#include "server/admin.h"

#include <stdio.h>
#include <stdlib.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

#include "proto/frame.h"
#include "proto/members_pb.h"
#include "proto/ringcache.pb-c.h"
#include "server/cluster.h"
#include "server/cport_internal.h"
#include "server/handoff.h"
#include "server/health.h"
#include "server/store.h"
#include "server/transition.h"

#define XFERS_MAX 64
#define PEERS_MAX 256 /* peers reported in Status */

/*
 * Status and replies
 */

/* Add the peers' health to st and send the reply (the peer arrays live
 * on the heap: up to PEERS_MAX of them). */
static void
send_status_reply(struct cp_conn *c, Ringcache__AdminReply *r, Ringcache__NodeStatus *st, bool ok,
                  const char *err)
{
    struct health_peer    *hp = calloc(PEERS_MAX, sizeof(*hp));
    Ringcache__PeerState  *ps = calloc(PEERS_MAX, sizeof(*ps));
    Ringcache__PeerState **psp = calloc(PEERS_MAX, sizeof(*psp));
    size_t                 n = 0, i;

    if (hp != NULL && ps != NULL && psp != NULL) {
        n = health_status(c->cp->health, hp, PEERS_MAX);
        if (n > PEERS_MAX) {
            n = PEERS_MAX;
        }
    }
    for (i = 0; i < n; i++) {
        ringcache__peer_state__init(&ps[i]);
        ps[i].node_id = hp[i].id;
        ps[i].state = (Ringcache__PeerHealth)hp[i].state;
        ps[i].last_seen_ms = hp[i].last_seen_ms;
        ps[i].holds_nothing = hp[i].holds_nothing;
        ps[i].epoch = hp[i].epoch;
        ps[i].error = hp[i].error;
        psp[i] = &ps[i];
    }
    st->n_peers = n;
    st->peers = psp;
    r->ok = ok;
    r->error = (char *)(err != NULL ? err : "");
    r->status = st;
    cpc_send(c, FRAME_ADMIN_REPLY, r);
    free(psp);
    free(ps);
    free(hp);
}

/* Answer an admin request: ok or err, with the node's whole NodeStatus
 * (store, transfers, imports, health, and the orphan count given).
 * Cluster thread. */
static void
send_reply_orphans(struct cp_conn *c, bool ok, const char *err, uint64_t orphans)
{
    struct cport              *cp = c->cp;
    struct cluster            *cl = cp->cl;
    const struct cluster_live *live = cluster_live(cl);
    Ringcache__AdminReply      r = RINGCACHE__ADMIN_REPLY__INIT;
    Ringcache__NodeStatus      st = RINGCACHE__NODE_STATUS__INIT;
    Ringcache__TransferStatus  ts[XFERS_MAX], *tsp[XFERS_MAX];
    struct transfer_status     xs[XFERS_MAX];
    struct store_stats         ss;
    struct cluster_counters    cc;
    size_t                     n, i;

    store_get_stats(cp->store, &ss);
    cluster_counters_get(cl, &cc);
    st.node_id = (char *)cluster_node_id(cl);
    st.boot_id = cluster_boot_id(cl);
    st.active_epoch = cluster_active_epoch(cl);
    st.pending_epoch = cluster_pending_epoch(cl);
    st.phase = (Ringcache__Phase)cluster_pending_phase(cl);
    st.curr_items = ss.curr_items;
    st.bytes = ss.bytes;
    st.limit_maxbytes = ss.limit_maxbytes;
    st.evictions = ss.evictions;
    n = handoff_status(cp->ho, xs, XFERS_MAX);
    if (n > XFERS_MAX) {
        n = XFERS_MAX;
    }
    for (i = 0; i < n; i++) {
        ringcache__transfer_status__init(&ts[i]);
        ts[i].dest = xs[i].dest;
        ts[i].items_sent = xs[i].items_sent;
        ts[i].bytes_sent = xs[i].bytes_sent;
        ts[i].items_total = xs[i].items_total;
        ts[i].bytes_total = xs[i].bytes_total;
        ts[i].walk_done = xs[i].walk_done;
        ts[i].dirty_backlog = xs[i].dirty_backlog;
        ts[i].unacked = xs[i].unacked;
        ts[i].error = xs[i].error;
        tsp[i] = &ts[i];
    }
    st.n_transfers = n;
    st.transfers = tsp;
    st.items_imported = cc.items_imported;
    st.bytes_imported = cc.bytes_imported;
    st.orphans = orphans;
    st.misrouted = cc.misrouted;
    st.fence_held_ms = cluster_fence_held_ms(cl);
    st.recovering = __atomic_load_n(&live->recovering, __ATOMIC_RELAXED) != 0;
    st.behind_epoch = __atomic_load_n(&live->behind_epoch, __ATOMIC_RELAXED);
    send_status_reply(c, &r, &st, ok, err);
}

/* Answer a request other than Status: its NodeStatus carries the last
 * orphan count, of any age (only a Status waits for a count). */
static void
send_reply(struct cp_conn *c, bool ok, const char *err)
{
    send_reply_orphans(c, ok, err, transition_orphans_last(c->cp->tr));
}

/* The count a Status waited for is done (arg: its connection): reply,
 * then go on with what the connection sent meanwhile. */
static void
status_done(void *arg, uint64_t orphans)
{
    struct cp_conn *c = arg;

    c->waiting = false;
    send_reply_orphans(c, true, NULL, orphans);
    if (!c->closing) {
        bufferevent_enable(c->bev, EV_READ);
        if (c->reading == 0) {
            cpc_read_cb(c->bev, c);
        }
    }
}

/* STATUS: answer at once with a recent figure (transition_orphans_now),
 * else at the end of the count in progress or of one started now (transition_orphans_wait: in
 * slices, so the heartbeats this thread answers never wait for a whole count); the connection reads
 * nothing until then. */
static void
do_status(struct cp_conn *c)
{
    struct cport *cp = c->cp;
    uint64_t      orphans;

    if (transition_orphans_now(cp->tr, &orphans)) {
        send_reply_orphans(c, true, NULL, orphans);
        return;
    }
    if (transition_orphans_wait(cp->tr, status_done, c) < 0) {
        send_reply(c, false, "out of memory");
        return;
    }
    c->waiting = true;
    bufferevent_disable(c->bev, EV_READ);
}

/*
 * Admin requests
 */

/* The wire membership of a request as a struct ring_members. */
static struct ring_members *
unpack_members(const Ringcache__Membership *pm, char *err, size_t errlen)
{
    struct ring_members *m = NULL;
    size_t               n = ringcache__membership__get_packed_size(pm);
    uint8_t             *buf = malloc(n > 0 ? n : 1);

    if (buf == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    ringcache__membership__pack(pm, buf);
    if (members_pb_unpack(buf, n, &m, err, errlen) != RING_OK) {
        m = NULL;
    }
    free(buf);
    return m;
}

/* PREPARE (transition_prepare), the request as a struct cluster_prep,
 * then reply. */
static void
do_prepare(struct cp_conn *c, const Ringcache__Prepare *p)
{
    struct cport        *cp = c->cp;
    struct ring_members *m;
    struct cluster_prep  prep;
    char                 err[512];
    int                  rc;

    if (p->membership == NULL) {
        send_reply(c, false, "prepare: no membership");
        return;
    }
    m = unpack_members(p->membership, err, sizeof(err));
    if (m == NULL) {
        send_reply(c, false, err);
        return;
    }
    prep.next = m;
    prep.token = p->token.data;
    prep.token_len = p->token.len;
    prep.from_epoch = p->from_epoch;
    prep.failed = (const char *const *)p->failed_ids;
    prep.n_failed = (uint32_t)p->n_failed_ids;
    prep.stale = (const char *const *)p->stale_ids;
    prep.n_stale = (uint32_t)p->n_stale_ids;
    rc = transition_prepare(cp->tr, &prep, err, sizeof(err));
    ring_members_free(m);
    send_reply(c, rc == 0, rc == 0 ? NULL : err);
}

/* COPY (transition_start_copy), then reply. */
static void
do_start_copy(struct cp_conn *c, const Ringcache__StartCopy *p)
{
    char err[256];

    if (transition_start_copy(c->cp->tr, p->token.data, p->token.len, p->rate_bytes_per_s,
                              p->paused, err, sizeof(err)) < 0) {
        send_reply(c, false, err);
        return;
    }
    send_reply(c, true, NULL);
}

/* The drain of a fence finished: answer the waiting admin. */
static void
fence_done(void *arg, const char *err)
{
    struct cport   *cp = arg;
    struct cp_conn *c = cp->fence_waiter;

    cp->fence_waiter = NULL;
    if (c == NULL) {
        return;
    }
    c->waiting = false;
    send_reply(c, err == NULL, err);
    if (!c->closing) {
        bufferevent_enable(c->bev, EV_READ);
        /* Requests that came while we waited are already buffered. A
         * drain over at once (not a source, a copy that cannot start)
         * answers from inside do_fence: the read loop we are in goes on
         * (reading the Fence again from here would fence forever). */
        if (c->reading == 0) {
            cpc_read_cb(c->bev, c);
        }
    }
}

/* FENCE: publish the fence view, then reply once the handoff drained
 * (fence_done); the connection reads nothing until then. */
static void
do_fence(struct cp_conn *c, const Ringcache__Fence *p)
{
    struct cport *cp = c->cp;
    char          err[256];

    if (transition_fence(cp->tr, p->token.data, p->token.len, err, sizeof(err)) < 0) {
        send_reply(c, false, err);
        return;
    }
    cp->fence_waiter = c;
    c->waiting = true;
    bufferevent_disable(c->bev, EV_READ);
    transition_fence_wait(cp->tr, fence_done, cp);
}

/* COMMIT (transition_commit), then reply. A repeated commit only replies. */
static void
do_commit(struct cp_conn *c, const Ringcache__Commit *p)
{
    struct cport        *cp = c->cp;
    struct ring_members *m = NULL;
    char                 err[512];
    int                  rc;

    if (p->membership != NULL) {
        m = unpack_members(p->membership, err, sizeof(err));
        if (m == NULL) {
            send_reply(c, false, err);
            return;
        }
    }
    rc = transition_commit(cp->tr, m, p->token.data, p->token.len, err, sizeof(err));
    ring_members_free(m);
    send_reply(c, rc == 0, rc == 0 ? NULL : err);
}

/* ABORT's connection side (c: the aborting connection, or NULL): fail a
 * waiting Fence and end the incoming streams of the transition. */
static void
end_streams(struct cport *cp, const struct cp_conn *c)
{
    struct cp_conn *o, *next;

    if (cp->fence_waiter != NULL && cp->fence_waiter != c) {
        struct cp_conn *w = cp->fence_waiter;

        cp->fence_waiter = NULL;
        w->waiting = false;
        send_reply(w, false, "aborted");
        bufferevent_enable(w->bev, EV_READ);
    }
    /* Incoming streams of this transition end here. */
    for (o = LIST_FIRST(&cp->conns); o != NULL; o = next) {
        next = LIST_NEXT(o, link);
        if (o->state == CPC_PEER && !o->closing) {
            cpc_error(o, "transition aborted");
        }
    }
}

/* transition_abort's end_streams for an Abort frame (arg: its connection). */
static void
abort_streams(void *arg)
{
    struct cp_conn *c = arg;

    end_streams(c->cp, c);
}

/* See admin.h. */
void
admin_end_streams(void *arg)
{
    end_streams(arg, NULL);
}

/* ABORT (transition_abort), then reply. */
static void
do_abort(struct cp_conn *c, const Ringcache__Abort *p)
{
    char err[256];

    if (transition_abort(c->cp->tr, p->token.data, p->token.len, p->epoch, abort_streams, c, err,
                         sizeof(err)) < 0) {
        send_reply(c, false, err);
        return;
    }
    send_reply(c, true, NULL);
}

/* See admin.h. */
void
admin_request(struct cp_conn *c, const struct frame *f)
{
    Ringcache__AdminRequest *rq = ringcache__admin_request__unpack(NULL, f->length, f->payload);

    if (rq == NULL) {
        cpc_error(c, "bad AdminRequest");
        return;
    }
    switch (rq->req_case) {
    case RINGCACHE__ADMIN_REQUEST__REQ_PREPARE:
        do_prepare(c, rq->prepare);
        break;
    case RINGCACHE__ADMIN_REQUEST__REQ_START_COPY:
        do_start_copy(c, rq->start_copy);
        break;
    case RINGCACHE__ADMIN_REQUEST__REQ_FENCE:
        do_fence(c, rq->fence);
        break;
    case RINGCACHE__ADMIN_REQUEST__REQ_COMMIT:
        do_commit(c, rq->commit);
        break;
    case RINGCACHE__ADMIN_REQUEST__REQ_ABORT:
        do_abort(c, rq->abort);
        break;
    case RINGCACHE__ADMIN_REQUEST__REQ_STATUS:
        do_status(c);
        break;
    default:
        send_reply(c, false, "empty admin request");
        break;
    }
    ringcache__admin_request__free_unpacked(rq, NULL);
}
/* See admin.h. */
void
admin_conn_gone(struct cp_conn *c)
{
    struct cport *cp = c->cp;

    transition_orphans_cancel(cp->tr, c);
    if (cp->fence_waiter == c) {
        transition_fence_cancel(cp->tr);
        cp->fence_waiter = NULL;
    }
}
