/*
 * cport: the cluster port's thread. Connections are libevent bufferevents
 * on the cluster event_base; every message is a frame (proto/frame.h)
 * whose protobuf payload is decoded here, at the edge, into the calls of
 * server/transition.h (admin requests), server/handoff_in.h (a peer's
 * batches) and server/health.h (pings). Requests on one connection are
 * answered in order: a Fence that waits for its drain pauses its
 * connection's input until it replies.
 */
#include "config.h"
#include "server/cport.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>

#include "proto/frame.h"
#include "proto/members_pb.h"
#include "proto/ringcache.pb-c.h"
#include "server/peerauth.h"
#include "server/cluster.h"
#include "server/handoff.h"
#include "server/handoff_in.h"
#include "server/health.h"
#include "server/storewatch.h"
#include "server/log.h"
#include "server/peer.h"
#include "server/peer_tls.h"
#include "server/store.h"
#include "server/thread.h"
#include "server/transition.h"

#define XFERS_MAX 64
#define PEERS_MAX 256 /* peers reported in Status */

/*
 * Admission before authentication (docs/cluster.md, "Cluster port
 * admission"). Anyone who can reach the port can open connections, so
 * until its Hello is accepted a connection is "pre-auth" and costs little:
 * a small frame limit, a deadline, and a slot in a bounded table of its
 * own. When that table (or one source's share of it) is full, a new
 * connection evicts the OLDEST pre-auth one instead of being refused:
 * refusing would let idle connections lock every newcomer out, while a
 * legitimate client (ringctl, a peer's heartbeat or handoff stream) sends
 * its Hello right after connect and is authenticated long before enough
 * newer connections arrive to push it out. On loopback, and behind NAT,
 * the attacker and the peers share an address, so the per-source share
 * only stops one address from taking the whole table when several compete;
 * the eviction order is what lets a same-address peer through.
 * Of the candidates, one that has sent nothing goes first, so a client
 * whose Hello is already in its socket is not evicted by a burst of idle
 * connections accepted before we read it (preauth_idle).
 * Authenticated connections never count toward the pre-auth table; the
 * overall cap only bounds descriptors, and pre-auth ones go first.
 */
#define CPORT_CONNS_MAX       1024 /* every cluster-port connection */
#define CPORT_PREAUTH_MAX     128  /* connections still waiting for their Hello */
#define CPORT_PREAUTH_PER_SRC 16   /* of them, from one address (IPv6: one /64) */
#define CPORT_HELLO_MS        3000 /* the Hello must be accepted within this */
#define CPORT_SWEEP_MS        250  /* overdue Hellos are looked for this often */
/* Frame payload limit before the Hello (a Hello is < 1 KiB: token <= 256
 * bytes), and at most one line about dropped pre-auth connections this
 * often (ms). */
#define CPORT_PREAUTH_PAYLOAD 4096
#define CPORT_DROP_LOG_MS     1000
#define CPORT_SRC_LEN         9 /* family + 8 address bytes (see source_key) */

/*
 * Failed Hellos (docs/security.md). A source (as source_key) whose Hello
 * carried a wrong token has its later Hellos checked no sooner than a
 * penalty after its previous check: CPORT_AUTH_BASE_MS doubled per
 * consecutive failure, at most CPORT_AUTH_CAP_MS. A throttled Hello is not
 * refused, it waits in its connection (input paused) until its turn, in
 * accept order, so the admin and the peers that share the address (on
 * loopback, behind NAT) still get in: with at most CPORT_PREAUTH_PER_SRC
 * Hellos waiting per source, a correct one is checked within 16 * 160 ms,
 * inside its Hello deadline. A source's failures are forgotten
 * CPORT_AUTH_FORGET_MS after its last one. The table is bounded: when
 * full, the source whose last failure is oldest gives up its entry.
 */
#define CPORT_AUTH_SRCS      256
#define CPORT_AUTH_BASE_MS   10
#define CPORT_AUTH_CAP_MS    160
#define CPORT_AUTH_FORGET_MS 60000

struct auth_src {
    uint8_t  src[CPORT_SRC_LEN];
    bool     used;
    uint32_t fails;        /* consecutive wrong tokens */
    uint64_t last_fail_ms; /* monotonic */
    uint64_t next_ms;      /* no Hello from it is checked before this */
};

enum cpc_state {
    CPC_HELLO = 0, /* waiting for Hello */
    CPC_ADMIN,
    CPC_PEER,
};

struct cp_conn {
    struct cport       *cp;
    struct bufferevent *bev;
    enum cpc_state      state;
    bool                closing;  /* close once the output is written */
    bool                waiting;  /* a reply is pending (Fence): input paused */
    bool                deferred; /* its Hello waits for its source's turn (auth_src) */
    struct handoff_in  *in;       /* peer: import state */
    struct cp_conn     *prev, *next;
    bool                preauth;            /* in the pre-auth table (no Hello accepted yet) */
    uint64_t            accepted_ms;        /* monotonic; the Hello deadline runs from here */
    uint8_t             src[CPORT_SRC_LEN]; /* source address (per-source share) */
    struct cp_conn     *pa_prev, *pa_next;  /* pre-auth table, oldest first */
    int                 reading;            /* conn_read_cb depth: the outermost frees c
                                               if it closed meanwhile */
};

struct cport {
    struct server     *srv;
    struct cluster    *cl;
    struct store      *store;
    char               addr[64];
    int                port;
    int                listen_fd;
    int                stop_fd[2];
    pthread_t          tid;
    bool               started;
    struct event_base *base;
    struct event      *listen_ev, *stop_ev;
    struct cp_conn    *conns;
    int                nconns;
    struct cp_conn    *pa_head, *pa_tail; /* pre-auth connections, oldest first */
    int                npreauth;
    struct event      *sweep_ev;      /* CPORT_SWEEP_MS: Hello deadlines */
    bool               listen_paused; /* out of descriptors: the sweep resumes */
    uint64_t           drop_log_ms;   /* when the last drop line was logged */
    uint64_t           n_timed_out, n_evicted, n_refused; /* since that line */
    struct handoff    *ho;
    struct transition *tr;
    struct health     *health;
    struct storewatch *sw;                             /* --store: the node's own watch (or NULL) */
    struct cp_conn    *fence_waiter;                   /* its Fence waits for the drain */
    struct auth_src    auth[CPORT_AUTH_SRCS];          /* sources with failed Hellos */
    struct event      *auth_ev;                        /* wakes the deferred Hellos */
    uint64_t           n_auth_failed, n_auth_deferred; /* since the last auth line */
    uint64_t           n_tls_failed, tls_log_ms;       /* since the last TLS line */
    uint64_t           auth_log_ms;
};

static void conn_read_cb(struct bufferevent *bev, void *arg);

/* Monotonic milliseconds. */
static uint64_t
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Take c out of the pre-auth table (its Hello was accepted, or it goes). */
static void
preauth_remove(struct cp_conn *c)
{
    struct cport *cp = c->cp;

    if (!c->preauth) {
        return;
    }
    if (c->pa_prev != NULL) {
        c->pa_prev->pa_next = c->pa_next;
    } else {
        cp->pa_head = c->pa_next;
    }
    if (c->pa_next != NULL) {
        c->pa_next->pa_prev = c->pa_prev;
    } else {
        cp->pa_tail = c->pa_prev;
    }
    c->pa_prev = c->pa_next = NULL;
    c->preauth = false;
    cp->npreauth--;
}

/* Free a connection now. */
static void
cpc_free(struct cp_conn *c)
{
    struct cport *cp = c->cp;

    if (cp->fence_waiter == c) {
        transition_fence_cancel(cp->tr);
        cp->fence_waiter = NULL;
    }
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        cp->conns = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    cp->nconns--;
    preauth_remove(c);
    handoff_in_free(c->in);
    bufferevent_free(c->bev);
    free(c);
}

/* Close once what is queued is written. Nothing queued (the Error frame
 * did not fit in memory, or the transport took it at once): now, unless
 * conn_read_cb is still using c (it frees c on its way out). */
static void
cpc_close_after_write(struct cp_conn *c)
{
    c->closing = true;
    bufferevent_disable(c->bev, EV_READ);
    if (c->reading == 0 && evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
        cpc_free(c);
    }
}

/* Output drained: a connection closing after its last frame goes now. */
static void
conn_write_cb(struct bufferevent *bev, void *arg)
{
    struct cp_conn *c = arg;

    (void)bev;
    if (c->closing) {
        cpc_free(c);
    }
}

/* A TLS handshake on the port failed (--cluster-tls): at most one line a
 * second, with the count and the last reason (an untrusted or missing
 * client certificate, plaintext sent to a TLS port). */
static void
tls_failed(struct cport *cp, struct bufferevent *bev)
{
    uint64_t now = mono_ms();
    char     why[256];

    cp->n_tls_failed++;
    if (now - cp->tls_log_ms < CPORT_DROP_LOG_MS) {
        return;
    }
    peer_tls_error(bev, why, sizeof(why));
    log_msg(LOG_ERR, "cluster port: %" PRIu64 " TLS handshakes failed (the last: %s)",
            cp->n_tls_failed, why[0] != '\0' ? why : "closed during the handshake");
    cp->n_tls_failed = 0;
    cp->tls_log_ms = now;
}

/* EOF or a socket error: free the connection (a Fence waiter is cancelled). */
static void
conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct cp_conn *c = arg;

    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        SSL *ssl = bufferevent_openssl_get_ssl(bev);

        if (ssl != NULL && !SSL_is_init_finished(ssl)) {
            tls_failed(c->cp, bev);
        }
        cpc_free(c);
    }
}

/* Queue one frame; out of memory closes the connection after the write. */
static void
send_msg(struct cp_conn *c, enum frame_type type, const void *msg)
{
    if (peer_send(c->bev, type, cluster_frame_id(c->cp->cl), msg) < 0) {
        c->closing = true;
    }
}

/* Error frame, then close (docs/cluster.md). */
static void send_error(struct cp_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void
send_error(struct cp_conn *c, const char *fmt, ...)
{
    Ringcache__Error           e = RINGCACHE__ERROR__INIT;
    const struct cluster_view *v = cluster_view(c->cp->cl);
    char                       msg[512];
    va_list                    ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_msg(LOG_INFO, "cluster port: %s", msg);
    e.message = msg;
    e.active_epoch = v->epoch;
    e.pending_epoch = v->pending_epoch;
    send_msg(c, FRAME_ERROR, &e);
    cpc_close_after_write(c);
}

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
    send_msg(c, FRAME_ADMIN_REPLY, r);
    free(psp);
    free(ps);
    free(hp);
}

/* Answer an admin request: ok or err, with the node's whole NodeStatus
 * (store, transfers, imports, orphans, health). Cluster thread. */
static void
send_reply(struct cp_conn *c, bool ok, const char *err)
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
    st.orphans = transition_orphans(cp->tr);
    st.misrouted = cc.misrouted;
    st.fence_held_ms = cluster_fence_held_ms(cl);
    st.recovering = __atomic_load_n(&live->recovering, __ATOMIC_RELAXED) != 0;
    st.behind_epoch = __atomic_load_n(&live->behind_epoch, __ATOMIC_RELAXED);
    send_status_reply(c, &r, &st, ok, err);
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

/* PREPARE (transition_prepare), then reply. */
static void
do_prepare(struct cp_conn *c, const Ringcache__Prepare *p)
{
    struct cport        *cp = c->cp;
    struct ring_members *m;
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
    rc = transition_prepare(cp->tr, m, p->token.data, p->token.len, p->from_epoch,
                            (const char *const *)p->failed_ids, (uint32_t)p->n_failed_ids,
                            (const char *const *)p->stale_ids, (uint32_t)p->n_stale_ids, err,
                            sizeof(err));
    ring_members_free(m);
    send_reply(c, rc == 0, rc == 0 ? NULL : err);
}

/* COPY (transition_start_copy), then reply. */
static void
do_start_copy(struct cp_conn *c, const Ringcache__StartCopy *p)
{
    char err[256];

    if (transition_start_copy(c->cp->tr, p->token.data, p->token.len, p->rate_bytes_per_s, err,
                              sizeof(err)) < 0) {
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
            conn_read_cb(c->bev, c);
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

/* ABORT's connection side (arg: the aborting connection): fail a waiting
 * Fence and end the incoming streams of the transition. */
static void
abort_streams(void *arg)
{
    struct cp_conn *c = arg;
    struct cport   *cp = c->cp;
    struct cp_conn *o, *next;

    if (cp->fence_waiter != NULL && cp->fence_waiter != c) {
        struct cp_conn *w = cp->fence_waiter;

        cp->fence_waiter = NULL;
        w->waiting = false;
        send_reply(w, false, "aborted");
        bufferevent_enable(w->bev, EV_READ);
    }
    /* Incoming streams of this transition end here. */
    for (o = cp->conns; o != NULL; o = next) {
        next = o->next;
        if (o->state == CPC_PEER && !o->closing) {
            send_error(o, "transition aborted");
        }
    }
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

/* One AdminRequest frame on an ADMIN connection: decode and run it. */
static void
admin_request(struct cp_conn *c, const struct frame *f)
{
    Ringcache__AdminRequest *rq = ringcache__admin_request__unpack(NULL, f->length, f->payload);

    if (rq == NULL) {
        send_error(c, "bad AdminRequest");
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
        send_reply(c, true, NULL);
        break;
    default:
        send_reply(c, false, "empty admin request");
        break;
    }
    ringcache__admin_request__free_unpacked(rq, NULL);
}

/*
 * Frames
 */

/* The failure record of src, or NULL when it has none (or it is
 * forgotten). */
static struct auth_src *
auth_find(struct cport *cp, const uint8_t *src, uint64_t now)
{
    int i;

    for (i = 0; i < CPORT_AUTH_SRCS; i++) {
        struct auth_src *a = &cp->auth[i];

        if (a->used && memcmp(a->src, src, CPORT_SRC_LEN) == 0) {
            if (now - a->last_fail_ms >= CPORT_AUTH_FORGET_MS) {
                a->used = false;
                return NULL;
            }
            return a;
        }
    }
    return NULL;
}

/* The wait after n consecutive failures (n >= 1). */
static uint64_t
auth_penalty_ms(uint32_t n)
{
    uint64_t ms = CPORT_AUTH_BASE_MS;

    while (--n > 0 && ms < CPORT_AUTH_CAP_MS) {
        ms *= 2;
    }
    return ms < CPORT_AUTH_CAP_MS ? ms : CPORT_AUTH_CAP_MS;
}

/* At most one line a second about failed and delayed Hellos. */
static void
auth_log(struct cport *cp, uint64_t now)
{
    if (cp->n_auth_failed == 0 || now - cp->auth_log_ms < CPORT_DROP_LOG_MS) {
        return;
    }
    log_msg(LOG_INFO,
            "cluster port: %" PRIu64 " Hellos with a wrong token, %" PRIu64
            " delayed (a source's Hellos wait up to %d ms after its failures)",
            cp->n_auth_failed, cp->n_auth_deferred, CPORT_AUTH_CAP_MS);
    cp->n_auth_failed = cp->n_auth_deferred = 0;
    cp->auth_log_ms = now;
}

/* c's Hello had a wrong token: its source waits longer for the next. */
static void
auth_failed(struct cp_conn *c)
{
    struct cport    *cp = c->cp;
    uint64_t         now = mono_ms();
    struct auth_src *a = auth_find(cp, c->src, now);
    int              i;

    if (a == NULL) {
        /* A free entry, else the one whose last failure is oldest. */
        for (i = 0; i < CPORT_AUTH_SRCS; i++) {
            struct auth_src *o = &cp->auth[i];

            if (!o->used) {
                a = o;
                break;
            }
            if (a == NULL || o->last_fail_ms < a->last_fail_ms) {
                a = o;
            }
        }
        memset(a, 0, sizeof(*a));
        a->used = true;
        memcpy(a->src, c->src, CPORT_SRC_LEN);
    }
    if (a->fails < UINT32_MAX) {
        a->fails++;
    }
    a->last_fail_ms = now;
    a->next_ms = now + auth_penalty_ms(a->fails);
    cp->n_auth_failed++;
    auth_log(cp, now);
}

/* Arm auth_ev for the earliest turn of a deferred Hello, if any. */
static void
auth_arm(struct cport *cp, uint64_t now)
{
    struct cp_conn *o;
    uint64_t        first = UINT64_MAX;

    for (o = cp->pa_head; o != NULL; o = o->pa_next) {
        struct auth_src *a;

        if (!o->deferred) {
            continue;
        }
        a = auth_find(cp, o->src, now);
        first = a == NULL || a->next_ms <= now ? now : (a->next_ms < first ? a->next_ms : first);
        if (first == now) {
            break;
        }
    }
    if (first != UINT64_MAX) {
        uint64_t       ms = first - now;
        struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000) };

        evtimer_add(cp->auth_ev, &tv);
    }
}

/*
 * Whether c's Hello may be checked now. A source with failures gets one
 * check per penalty: this one takes the turn (next_ms moves on), or c
 * waits (deferred, input paused) and auth_cb resumes it.
 */
static bool
auth_turn(struct cp_conn *c)
{
    struct cport    *cp = c->cp;
    uint64_t         now = mono_ms();
    struct auth_src *a = auth_find(cp, c->src, now);

    if (a == NULL) {
        return true;
    }
    if (now >= a->next_ms) {
        /* Until this check's outcome, its source's next one waits. */
        a->next_ms = now + auth_penalty_ms(a->fails);
        return true;
    }
    if (!c->deferred) {
        cp->n_auth_deferred++;
    }
    c->deferred = true;
    c->waiting = true;
    /* Nothing more is read meanwhile: the frame limit is checked only
     * when frames are decoded. */
    bufferevent_disable(c->bev, EV_READ);
    auth_arm(cp, now);
    return false;
}

/* A deferred Hello's turn may have come: resume them in accept order (the
 * first one of a source takes its turn, the others wait again). */
static void
auth_cb(evutil_socket_t fd, short what, void *arg)
{
    struct cport   *cp = arg;
    struct cp_conn *o, *next;

    (void)fd;
    (void)what;
    for (o = cp->pa_head; o != NULL; o = next) {
        next = o->pa_next;
        if (o->deferred && !o->closing) {
            o->deferred = false;
            o->waiting = false;
            bufferevent_enable(o->bev, EV_READ);
            conn_read_cb(o->bev, o);
        }
    }
    auth_arm(cp, mono_ms());
}

/* The first frame of a connection: check cluster, token and role, make
 * it an ADMIN or PEER connection and answer with our Hello. */
static void
hello(struct cp_conn *c, const struct frame *f)
{
    struct cluster   *cl = c->cp->cl;
    Ringcache__Hello *m = ringcache__hello__unpack(NULL, f->length, f->payload);
    Ringcache__Hello  r = RINGCACHE__HELLO__INIT;
    size_t            token_len;
    const uint8_t    *token = cluster_token(cl, &token_len);

    if (m == NULL) {
        send_error(c, "bad Hello");
        return;
    }
    if (m->cluster == NULL || strcmp(m->cluster, cluster_name(cl)) != 0) {
        send_error(c, "wrong cluster");
    } else if (!cluster_has_token(cl)) {
        send_error(c, "this node has no --token-file: the cluster port is closed");
    } else if (!peerauth_equal(m->token.data, m->token.len, token, token_len)) {
        /* Constant time: a timing must not tell how much of a guess was
         * right. */
        auth_failed(c);
        send_error(c, "wrong token");
    } else if (m->role != RINGCACHE__HELLO__ROLE__ADMIN &&
               m->role != RINGCACHE__HELLO__ROLE__PEER) {
        send_error(c, "unknown role");
    } else {
        if (m->role == RINGCACHE__HELLO__ROLE__PEER) {
            c->in = handoff_in_new(cl, c->cp->store);
            if (c->in == NULL) {
                send_error(c, "out of memory");
                goto out;
            }
            c->state = CPC_PEER;
            log_msg(LOG_INFO, "cluster port: peer %.64s connected",
                    m->node_id != NULL ? m->node_id : "?");
        } else {
            c->state = CPC_ADMIN;
        }
        /* Authenticated: no deadline, no pre-auth slot, full frame size. */
        preauth_remove(c);
        r.cluster = (char *)cluster_name(cl);
        r.node_id = (char *)cluster_node_id(cl);
        r.boot_id = cluster_boot_id(cl);
        r.active_epoch = cluster_active_epoch(cl);
        send_msg(c, FRAME_HELLO, &r);
    }
out:
    ringcache__hello__free_unpacked(m, NULL);
}

/* A HandoffBatch on a PEER connection: import it and ack (with the
 * store's refusal, if any); a lying peer gets an Error and is closed. */
static void
peer_batch(struct cp_conn *c, const struct frame *f)
{
    Ringcache__HandoffAck a = RINGCACHE__HANDOFF_ACK__INIT;
    char                  err[512];
    uint64_t              seq = 0;
    int                   rc;

    err[0] = '\0';
    rc = handoff_in_batch(c->in, f->payload, f->length, &seq, err, sizeof(err));
    if (rc < 0) {
        send_error(c, "%s", err);
        return;
    }
    a.seq = seq;
    a.error = err;
    send_msg(c, FRAME_HANDOFF_ACK, &a);
}

/* Route one frame by the connection's state; anything unexpected is an
 * Error and a close. */
static void
dispatch(struct cp_conn *c, const struct frame *f)
{
    switch (c->state) {
    case CPC_HELLO:
        if (f->type != FRAME_HELLO) {
            send_error(c, "the first frame must be Hello");
        } else {
            hello(c, f);
        }
        return;
    case CPC_ADMIN:
        if (f->type == FRAME_ADMIN_REQUEST) {
            admin_request(c, f);
        } else {
            send_error(c, "unexpected frame type %u on an admin connection", f->type);
        }
        return;
    case CPC_PEER:
        if (f->type == FRAME_HANDOFF_BATCH) {
            peer_batch(c, f);
        } else if (f->type == FRAME_PING) {
            if (health_on_ping(c->cp->health, c->bev, f) < 0) {
                send_error(c, "bad Ping");
            }
        } else {
            send_error(c, "unexpected frame type %u on a peer connection", f->type);
        }
        return;
    }
}

/* Decode every whole frame buffered; a bad one closes the connection
 * (after an Error frame). Stops while a reply is pending. */
static void
conn_read_cb(struct bufferevent *bev, void *arg)
{
    struct cp_conn  *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);

    c->reading++;
    while (!c->closing && !c->waiting) {
        struct frame f;
        size_t       used;
        /* Before the Hello, nobody gets to make us buffer megabytes; after
         * it, --max-frame-bytes (a header past it is refused at once). */
        uint32_t max = c->state == CPC_HELLO ? CPORT_PREAUTH_PAYLOAD
                                             : (uint32_t)c->cp->srv->settings.max_frame_bytes;
        int      rc = peer_read_frame(in, cluster_frame_id(c->cp->cl), max, &f, &used);

        if (rc == FRAME_EAGAIN) {
            /* Wake up once the whole frame is in, not per segment. */
            bufferevent_setwatermark(bev, EV_READ, used, 0);
            break;
        }
        if (rc != FRAME_OK) {
            send_error(c, "bad frame: %s", frame_strerror(rc));
            break;
        }
        bufferevent_setwatermark(bev, EV_READ, 0, 0);
        if (c->state == CPC_HELLO && f.type == FRAME_HELLO && !auth_turn(c)) {
            break; /* the frame stays buffered until auth_cb */
        }
        /* c stays allocated while we read (c->reading): a closed one is
         * freed below, or by the write callback once its Error is out. */
        dispatch(c, &f);
        evbuffer_drain(in, used);
    }
    if (--c->reading == 0 && c->closing && evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
        cpc_free(c);
    }
}

/*
 * Listener and thread
 */

/* The per-source key of a peer address: the family and the IPv4 address,
 * or the first 64 bits of an IPv6 one (one host usually owns a whole /64).
 * A v4-mapped IPv6 address counts as its IPv4 address. */
static void
source_key(const struct sockaddr_storage *ss, uint8_t key[CPORT_SRC_LEN])
{
    memset(key, 0, CPORT_SRC_LEN);
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;

        if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
            key[0] = AF_INET;
            memcpy(key + 1, s6->sin6_addr.s6_addr + 12, 4);
        } else {
            key[0] = AF_INET6;
            memcpy(key + 1, s6->sin6_addr.s6_addr, 8);
        }
    } else if (ss->ss_family == AF_INET) {
        key[0] = AF_INET;
        memcpy(key + 1, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    }
}

/* One line about the pre-auth connections closed since the last one, if
 * there were any and CPORT_DROP_LOG_MS has passed (a flood must not turn
 * into a flood of log lines); the sweep prints what is left over. */
static void
drop_log(struct cport *cp, uint64_t now)
{
    if (cp->n_timed_out + cp->n_evicted + cp->n_refused == 0 ||
        now - cp->drop_log_ms < CPORT_DROP_LOG_MS) {
        return;
    }
    log_msg(LOG_INFO,
            "cluster port: closed %" PRIu64 " connections without a Hello after "
            "%d ms, evicted %" PRIu64 " waiting ones for newer (pre-auth table: %d of %d, "
            "%d per source), refused %" PRIu64 " (%d connections open)",
            cp->n_timed_out, CPORT_HELLO_MS, cp->n_evicted, cp->npreauth, CPORT_PREAUTH_MAX,
            CPORT_PREAUTH_PER_SRC, cp->n_refused, cp->nconns);
    cp->n_timed_out = cp->n_evicted = cp->n_refused = 0;
    cp->drop_log_ms = now;
}

/* Whether pre-auth c has sent us nothing yet (nothing buffered, nothing
 * in the socket), or is closing anyway: the first to evict. A client that
 * connected and sent its Hello at once has it waiting in the socket even
 * when a burst of newer connections is accepted before we read it. */
static bool
preauth_idle(struct cp_conn *c)
{
    int n = 0;

    if (c->closing) {
        return true;
    }
    if (evbuffer_get_length(bufferevent_get_input(c->bev)) > 0) {
        return false;
    }
    return ioctl(bufferevent_getfd(c->bev), FIONREAD, &n) == 0 && n == 0;
}

/* Make room for one more pre-auth connection from src. When that source
 * has its share, one of its connections goes; else, when the pre-auth
 * table or the whole port is full, one of any. Of those, the oldest idle
 * one (preauth_idle), or the oldest if none is idle. The walk from the
 * oldest usually stops at the first. */
static void
preauth_make_room(struct cport *cp, const uint8_t *src)
{
    struct cp_conn *o, *victim = NULL;
    bool            one_src;
    int             same = 0;

    /* At most CPORT_PREAUTH_MAX entries: a walk is cheaper than a map. */
    for (o = cp->pa_head; o != NULL; o = o->pa_next) {
        same += memcmp(o->src, src, CPORT_SRC_LEN) == 0;
    }
    one_src = same >= CPORT_PREAUTH_PER_SRC;
    if (!one_src && cp->npreauth < CPORT_PREAUTH_MAX && cp->nconns < CPORT_CONNS_MAX) {
        return;
    }
    for (o = cp->pa_head; o != NULL; o = o->pa_next) {
        if (one_src && memcmp(o->src, src, CPORT_SRC_LEN) != 0) {
            continue;
        }
        if (victim == NULL) {
            victim = o; /* the oldest, should none be idle */
        }
        if (preauth_idle(o)) {
            victim = o;
            break;
        }
    }
    if (victim != NULL) {
        cpc_free(victim);
        cp->n_evicted++;
    }
}

/* A new connection c (bev and src set) joins cp: pre-auth, with its
 * Hello deadline running from now, reading. */
static void
cpc_start(struct cport *cp, struct cp_conn *c)
{
    c->cp = cp;
    c->next = cp->conns;
    if (cp->conns != NULL) {
        cp->conns->prev = c;
    }
    cp->conns = c;
    cp->nconns++;
    c->preauth = true;
    c->accepted_ms = mono_ms();
    c->pa_prev = cp->pa_tail;
    if (cp->pa_tail != NULL) {
        cp->pa_tail->pa_next = c;
    } else {
        cp->pa_head = c;
    }
    cp->pa_tail = c;
    cp->npreauth++;
    bufferevent_setcb(c->bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

/* Accept every pending connection; each starts pre-auth, waiting for its
 * Hello (preauth_make_room evicts an older one if needed). Only when every
 * one of CPORT_CONNS_MAX connections is authenticated is a new one closed
 * at once. Out of descriptors, an idle pre-auth connection gives its up;
 * with none to give, the listener pauses until the next sweep instead of
 * spinning on a readable listener. */
static void
accept_cb(evutil_socket_t lfd, short what, void *arg)
{
    struct cport *cp = arg;
    int           one = 1;

    (void)what;
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t               sl = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        struct cp_conn *c;

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }
            if (errno == EMFILE || errno == ENFILE) {
                if (cp->pa_head != NULL) {
                    cpc_free(cp->pa_head);
                    cp->n_evicted++;
                    continue;
                }
                event_del(cp->listen_ev);
                cp->listen_paused = true;
            }
            break;
        }
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
            close(fd);
            continue;
        }
        source_key(&ss, c->src);
        preauth_make_room(cp, c->src);
        if (cp->nconns >= CPORT_CONNS_MAX) {
            close(fd);
            free(c);
            cp->n_refused++;
            continue;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c->bev = peer_tls_accept(cluster_peer_tls(cp->cl), cp->base, fd);
        if (c->bev == NULL) {
            free(c);
            continue;
        }
        cpc_start(cp, c);
    }
    drop_log(cp, mono_ms());
}

/* See cport.h. The connection comes from nowhere (source key zero). */
int
cport_adopt(struct cport *cp, struct bufferevent *bev)
{
    struct cp_conn *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        return -1;
    }
    preauth_make_room(cp, c->src);
    c->bev = bev;
    cpc_start(cp, c);
    return 0;
}

/* See cport.h. */
struct event_base *
cport_base(struct cport *cp)
{
    return cp->base;
}

/* Every CPORT_SWEEP_MS: close the pre-auth connections past their Hello
 * deadline. The table is in accept order, so the walk stops at the first
 * one still in time and costs only what it closes. A pre-auth connection
 * that is closing (its Error frame unread by the other side) goes too. */
static void
sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    struct cport *cp = arg;
    uint64_t      now = mono_ms();

    (void)fd;
    (void)what;
    while (cp->pa_head != NULL && now - cp->pa_head->accepted_ms >= CPORT_HELLO_MS) {
        cpc_free(cp->pa_head);
        cp->n_timed_out++;
    }
    if (cp->listen_paused && event_add(cp->listen_ev, NULL) == 0) {
        cp->listen_paused = false;
    }
    drop_log(cp, now);
}

/* cport_free wrote to the stop pipe: leave the event loop. */
static void
stop_cb(evutil_socket_t fd, short what, void *arg)
{
    struct cport *cp = arg;

    (void)fd;
    (void)what;
    event_base_loopbreak(cp->base);
}

/* The cluster thread: runs the cluster base until stop_cb. */
static void *
cport_main(void *arg)
{
    struct cport *cp = arg;

    event_base_dispatch(cp->base);
    return NULL;
}

/* See cport.h. */
struct cport *
cport_new(struct server *srv, struct cluster *cl, const char *listen_addr, int port)
{
    struct cport *cp = calloc(1, sizeof(*cp));

    if (cp == NULL) {
        return NULL;
    }
    cp->srv = srv;
    cp->cl = cl;
    cp->store = srv->store;
    cp->port = port;
    cp->listen_fd = -1;
    cp->stop_fd[0] = cp->stop_fd[1] = -1;
    snprintf(cp->addr, sizeof(cp->addr), "%s", listen_addr);
    cp->base = event_base_new();
    if (cp->base == NULL || pipe2(cp->stop_fd, O_NONBLOCK | O_CLOEXEC) < 0) {
        goto fail;
    }
    cp->ho = handoff_new(cl, srv->store, cp->base, (uint32_t)srv->settings.handoff_window);
    cp->tr = cp->ho != NULL ? transition_new(cl, srv->store, cp->ho, cp->base) : NULL;
    cp->health = health_new(cl, cp->base);
    cp->stop_ev = event_new(cp->base, cp->stop_fd[0], EV_READ, stop_cb, cp);
    cp->sweep_ev = event_new(cp->base, -1, EV_PERSIST, sweep_cb, cp);
    cp->auth_ev = evtimer_new(cp->base, auth_cb, cp);
    if (cp->ho == NULL || cp->tr == NULL || cp->health == NULL || cp->stop_ev == NULL ||
        cp->sweep_ev == NULL || cp->auth_ev == NULL) {
        goto fail;
    }
    return cp;
fail:
    cport_free(cp);
    return NULL;
}

/* The store watch read the store's active membership (cluster thread). */
static void
store_behind(void *arg, uint64_t epoch)
{
    struct cport *cp = arg;

    health_learn_epoch(cp->health, epoch);
}

static void
store_active_cb(void *arg, const struct ring_members *m)
{
    struct cport *cp = arg;

    transition_store_active(cp->tr, m, store_behind, cp);
}

/* See cport.h. */
int
cport_watch_store(struct cport *cp, const char *spec, char *err, size_t errlen)
{
    cp->sw = storewatch_new(cp->base, spec, cluster_node_id(cp->cl), cluster_boot_id(cp->cl),
                            store_active_cb, cp, err, errlen);
    return cp->sw != NULL ? 0 : -1;
}

/* Bind and listen on the first address of cp->addr:port that works.
 * 0, or -1 (logged). */
static int
cport_listen(struct cport *cp)
{
    int fd = listen_tcp(cp->addr, cp->port, 128, "cluster port");

    if (fd < 0) {
        return -1;
    }
    cp->listen_fd = fd;
    return 0;
}

/* See cport.h. SIGTERM and SIGINT stay with the main thread. */
int
cport_start(struct cport *cp)
{
    struct timeval sweep = { CPORT_SWEEP_MS / 1000, (CPORT_SWEEP_MS % 1000) * 1000 };
    sigset_t       block, old;
    int            rc;

    if (cport_listen(cp) < 0) {
        return -1;
    }
    cp->listen_ev = event_new(cp->base, cp->listen_fd, EV_READ | EV_PERSIST, accept_cb, cp);
    if (cp->listen_ev == NULL || event_add(cp->listen_ev, NULL) < 0 ||
        event_add(cp->stop_ev, NULL) < 0 || event_add(cp->sweep_ev, &sweep) < 0) {
        return -1;
    }
    cluster_started(cp->cl);
    if (health_start(cp->health) < 0) {
        return -1;
    }
    /* A pending transition that survived a restart: track again. */
    transition_resume(cp->tr);
    if (cp->sw != NULL && storewatch_start(cp->sw) < 0) {
        return -1;
    }
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    rc = pthread_create(&cp->tid, NULL, cport_main, cp);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        log_msg(LOG_ERR, "cannot start the cluster port thread");
        return -1;
    }
    cp->started = true;
    log_msg(LOG_INFO, "cluster port on %s:%d", cp->addr, cp->port);
    return 0;
}

/* See cport.h. */
void
cport_free(struct cport *cp)
{
    if (cp == NULL) {
        return;
    }
    if (cp->started) {
        if (write(cp->stop_fd[1], "s", 1) < 0) {
            log_msg(LOG_ERR, "cluster port wake-up: %s", strerror(errno));
        }
        pthread_join(cp->tid, NULL);
    }
    storewatch_free(cp->sw);
    while (cp->conns != NULL) {
        cpc_free(cp->conns);
    }
    health_free(cp->health);
    transition_free(cp->tr);
    handoff_free(cp->ho);
    if (cp->listen_ev != NULL) {
        event_free(cp->listen_ev);
    }
    if (cp->stop_ev != NULL) {
        event_free(cp->stop_ev);
    }
    if (cp->sweep_ev != NULL) {
        event_free(cp->sweep_ev);
    }
    if (cp->auth_ev != NULL) {
        event_free(cp->auth_ev);
    }
    if (cp->base != NULL) {
        event_base_free(cp->base);
    }
    if (cp->listen_fd >= 0) {
        close(cp->listen_fd);
    }
    if (cp->stop_fd[0] >= 0) {
        close(cp->stop_fd[0]);
    }
    if (cp->stop_fd[1] >= 0) {
        close(cp->stop_fd[1]);
    }
    free(cp);
}
