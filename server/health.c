/*
 * health: heartbeats between the members of the active epoch, per-peer
 * state, and the stall detector. Each node keeps one outgoing PEER
 * connection per other member and sends a Ping every HEALTH_PING_MS; the
 * Pong carries the peer's epochs. A ticker thread beats every 100 ms so a
 * process that was paused (SIGSTOP, a frozen VM) notices on wake-up and
 * serves nothing until one heartbeat round told it the cluster's epoch.
 */
#include "config.h"
#include "server/health.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>

#include <xxhash.h>

#include "lib/util.h"
#include "proto/frame.h"
#include "proto/ringcache.pb-c.h"
#include "server/cluster.h"
#include "server/log.h"
#include "server/peer.h"

#define TIMER_MS   50   /* the heartbeat timer's period */
#define TICKER_MS  100  /* the ticker thread's beat */
#define CONNECT_MS 1000 /* a connect + Hello taking longer fails */
#define PONG_MAX   4096 /* frame payload ceiling on heartbeat links */

enum pconn {
    PC_NONE = 0,
    PC_CONNECTING, /* TCP connect, then Hello sent */
    PC_READY,      /* HelloReply received: pinging */
};

/* One other member of the active epoch. */
struct peer {
    struct health      *h;
    char                id[RING_ID_MAX + 1];
    char                addr[RING_ADDR_MAX + 1];
    int32_t             idx; /* in the active membership */
    struct bufferevent *bev;
    enum pconn          cstate;
    uint64_t            attempt_ms;   /* last connect attempt */
    uint64_t            last_pong_ms; /* 0 = never */
    uint64_t            ping_in_ms;   /* its last Ping to us, 0 = never */
    uint64_t            last_ping_ms;
    uint64_t            fail_ms; /* last connection failure, 0 = none since a Pong */
    uint64_t            born_ms; /* entered the table: silence counts from here */
    uint64_t            seq, round_seq, epoch;
    bool                pong_empty; /* its last Pong: it holds nothing current */
    bool                empty;      /* pong_empty as last published (live->empty) */
    bool                refused;    /* the last connect was refused: the host answered
                                     * that nothing listens (the process is gone) */
    bool             settled;       /* answered (or failed) in the current round */
    enum peer_health state;
    char             error[128];
};

struct health {
    struct cluster    *cl;
    struct event_base *base;
    struct event      *timer;
    struct peer       *peers;
    uint32_t           n;
    uint64_t           table_epoch; /* the active epoch the table was built for */
    uint64_t           start_ms;
    bool               round;    /* a post-stall round runs */
    bool               isolated; /* published to the workers (live->isolated) */
    uint64_t           round_start;
    pthread_t          tid;
    bool               ticker_started;
    int                stop;         /* atomic: the ticker exits */
    uint64_t           epoch_margin; /* HEALTH_EPOCH_MARGIN_DEFAULT, or set */
    uint64_t           store_epoch;  /* the highest the store said */
    uint64_t           far_log_ms;   /* the last "far ahead" line */
    uint64_t           far_ignored;  /* claims ignored since that line */
    uint64_t           id_epoch, id; /* health_members_id of the active epoch id_epoch */
    health_aborted_fn  aborted;      /* drops a pending transition aborted elsewhere */
    void              *aborted_arg;
};

/* See health.h. */
const char *
health_state_name(enum peer_health s)
{
    switch (s) {
    case PEER_UP:
        return "up";
    case PEER_SUSPECT:
        return "suspect";
    case PEER_DOWN:
        return "down";
    default:
        return "unknown";
    }
}

/*
 * The ticker: beats every TICKER_MS. A beat that comes CLUSTER_STALL_MS
 * late means the whole process was stopped: raise `suspect` before the new
 * beat is visible (workers read the beat first), so no request is served
 * until the cluster thread finished a heartbeat round.
 */
static void *
ticker_main(void *arg)
{
    struct health       *h = arg;
    struct cluster_live *l = cluster_live(h->cl);
    struct timespec      ts = { 0, TICKER_MS * 1000000L };

    while (!__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE)) {
        uint64_t now = util_coarse_ms(), prev = __atomic_load_n(&l->tick_ms, __ATOMIC_RELAXED);

        if (prev != 0 && now > prev + CLUSTER_STALL_MS) {
            __atomic_store_n(&l->suspect, 1, __ATOMIC_RELEASE);
        }
        __atomic_store_n(&l->tick_ms, now, __ATOMIC_RELEASE);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* The live state SIGCONT marks suspect (one cluster per process). */
static struct cluster_live *sigcont_live;

/* SIGCONT: we were stopped. Raise `suspect` at once (an atomic store is
 * async-signal-safe); the ticker's late beat is the backstop for a pause
 * that sends no signal (a frozen VM). */
static void
sigcont_handler(int sig)
{
    (void)sig;
    if (sigcont_live != NULL) {
        __atomic_store_n(&sigcont_live->suspect, 1, __ATOMIC_RELEASE);
    }
}

/* Whether a peer's epoch e is beyond the margin past the highest epoch
 * this node knows (its own, the store's, one it already learnt): logged
 * (at most once a second, with a count) and ignored. */
static bool
too_far(struct health *h, uint64_t e, uint64_t active, uint64_t pending, uint64_t was)
{
    uint64_t known = active, now;

    known = pending > known ? pending : known;
    known = was > known ? was : known;
    known = h->store_epoch > known ? h->store_epoch : known;
    if (e - known <= h->epoch_margin) {
        return false;
    }
    h->far_ignored++;
    now = util_coarse_ms();
    if (h->far_log_ms == 0 || now - h->far_log_ms >= 1000) {
        log_msg(LOG_ERR,
                "ignored %" PRIu64 " peer claims of an epoch more than %" PRIu64
                " beyond the highest this node knows (%" PRIu64 "), the last %" PRIu64,
                h->far_ignored, h->epoch_margin, known, e);
        h->far_log_ms = now;
        h->far_ignored = 0;
    }
    return true;
}

/* See health.h. */
uint64_t
health_members_id(const struct ring_members *m)
{
    char     buf[4096], *text = buf;
    size_t   n;
    uint64_t id;

    if (m == NULL) {
        return 0;
    }
    n = ring_members_format(m, NULL, 0);
    if (n >= sizeof(buf) && (text = malloc(n + 1)) == NULL) {
        return 0;
    }
    ring_members_format(m, text, n + 1);
    id = XXH3_64bits(text, n);
    if (text != buf) {
        free(text);
    }
    return id != 0 ? id : 1;
}

/* The identity of this node's active epoch (cached: a node activates each
 * epoch number at most once). */
static uint64_t
active_id(struct health *h)
{
    const struct ring_members *m = cluster_active(h->cl);

    if (m == NULL) {
        return 0;
    }
    if (h->id_epoch != m->epoch || h->id == 0) {
        h->id = health_members_id(m);
        h->id_epoch = m->epoch;
    }
    return h->id;
}

/* A peer `from` (NULL: the store) tells us an epoch e of identity id (0:
 * not said): above both of ours, we are behind (removed, or a commit never
 * reached us) and must serve nothing until a transition includes us again.
 * Our pending epoch under another identity was aborted (the store
 * committed another membership under its number): it is dropped, and we
 * are behind too. A node without a membership ignores it. */
static void
learn_epoch(struct health *h, const char *from, uint64_t e, uint64_t id)
{
    struct cluster      *cl = h->cl;
    struct cluster_live *live = cluster_live(cl);
    uint64_t             active = cluster_active_epoch(cl);
    uint64_t             pending = cluster_pending_epoch(cl);
    uint64_t             was = __atomic_load_n(&live->behind_epoch, __ATOMIC_RELAXED);

    if (from == NULL && e > h->store_epoch) {
        h->store_epoch = e;
    }
    if (active == 0 || e <= active || e <= was) {
        return;
    }
    if (e == pending && id != 0 && h->aborted != NULL && h->aborted(h->aborted_arg, e, id)) {
        pending = cluster_pending_epoch(cl);
    }
    if (e <= pending) {
        return;
    }
    if (from != NULL && too_far(h, e, active, pending, was)) {
        return;
    }
    __atomic_store_n(&live->behind_epoch, e, __ATOMIC_RELEASE);
    log_msg(LOG_ERR,
            "%s%.64s runs epoch %" PRIu64 ", this node %" PRIu64 ": behind, "
            "answering TRYAGAIN until a transition includes it",
            from != NULL ? "peer " : "the membership store", from != NULL ? from : "", e, active);
}

/* See health.h. */
void
health_learn_epoch(struct health *h, uint64_t epoch)
{
    learn_epoch(h, NULL, epoch, 0);
}

/* See health.h. */
void
health_set_aborted(struct health *h, health_aborted_fn fn, void *arg)
{
    h->aborted = fn;
    h->aborted_arg = arg;
}

/*
 * Peer connections
 */

/* Close a peer's connection (if any); it reconnects on a later tick. */
static void
peer_close(struct peer *p)
{
    if (p->bev != NULL) {
        bufferevent_free(p->bev);
    }
    p->bev = NULL;
    p->cstate = PC_NONE;
}

/* The connection failed: remember why. */
static void
peer_fail(struct peer *p, const char *why, bool outright)
{
    uint64_t now = util_coarse_ms();

    snprintf(p->error, sizeof(p->error), "%s", why);
    peer_close(p);
    p->fail_ms = now;
    p->refused = outright;
    /* Only a refusal answers a round: a silent peer may be alive and
     * acting on a Prepare that declared this node failed. */
    if (outright && p->h->round && now >= p->h->round_start) {
        p->settled = true;
    }
}

/* Send a Ping with our active epoch and the next sequence number. */
static void
peer_ping(struct peer *p)
{
    Ringcache__Ping m = RINGCACHE__PING__INIT;
    struct cluster *cl = p->h->cl;

    m.node_id = (char *)cluster_node_id(cl);
    m.active_epoch = cluster_active_epoch(cl);
    m.active_id = active_id(p->h);
    m.seq = ++p->seq;
    p->last_ping_ms = util_coarse_ms();
    if (peer_send(p->bev, FRAME_PING, cluster_frame_id(cl), &m) < 0) {
        peer_fail(p, "out of memory", false);
    }
}

/* A frame on a heartbeat connection: the HelloReply (then ping), a
 * Pong (the peer is up; what it tells about epochs and our absence), or
 * an Error. */
static void
peer_frame(struct peer *p, const struct frame *f)
{
    if (f->type == FRAME_HELLO && p->cstate == PC_CONNECTING) {
        Ringcache__Hello *m = ringcache__hello__unpack(NULL, f->length, f->payload);

        if (m == NULL) {
            peer_fail(p, "bad HelloReply", false);
            return;
        }
        learn_epoch(p->h, p->id, m->active_epoch, 0);
        ringcache__hello__free_unpacked(m, NULL);
        p->cstate = PC_READY;
        p->error[0] = '\0';
        peer_ping(p);
    } else if (f->type == FRAME_PONG && p->cstate == PC_READY) {
        Ringcache__Pong *m = ringcache__pong__unpack(NULL, f->length, f->payload);

        if (m == NULL) {
            peer_fail(p, "bad Pong", false);
            return;
        }
        p->last_pong_ms = util_coarse_ms();
        p->fail_ms = 0;
        p->refused = false;
        p->epoch = m->active_epoch;
        p->pong_empty = m->holds_nothing;
        if (p->h->round && m->seq > p->round_seq) {
            p->settled = true;
        }
        learn_epoch(p->h, p->id, m->active_epoch, m->active_id);
        if (m->saw_you_down) {
            struct cluster_live *live = cluster_live(p->h->cl);

            /* The peer acted without us on the store's authority (a
             * Prepare declaring us failed, maybe aborted since): what we
             * hold may be stale. */
            if (cluster_active(p->h->cl) != NULL &&
                !__atomic_load_n(&live->recovering, __ATOMIC_RELAXED)) {
                __atomic_store_n(&live->recovering, 1, __ATOMIC_RELEASE);
                log_msg(LOG_ERR,
                        "peer %.64s holds a transition that declared this node failed: "
                        "recovering",
                        p->id);
            }
        }
        ringcache__pong__free_unpacked(m, NULL);
    } else if (f->type == FRAME_ERROR) {
        char why[128];

        peer_error_text(f, "refused", why, sizeof(why));
        peer_fail(p, why, false);
    } else {
        peer_fail(p, "unexpected frame", false);
    }
}

/* Every whole frame buffered; a bad one fails the connection. */
static void
peer_read_cb(struct bufferevent *bev, void *arg)
{
    struct peer     *p = arg;
    struct evbuffer *in = bufferevent_get_input(bev);

    while (p->cstate != PC_NONE) {
        struct frame f;
        size_t       used;
        int          rc = peer_read_frame(in, cluster_frame_id(p->h->cl), PONG_MAX, &f, &used);

        if (rc == FRAME_EAGAIN) {
            return;
        }
        if (rc != FRAME_OK) {
            peer_fail(p, frame_strerror(rc), false);
            return;
        }
        peer_frame(p, &f);
        if (p->cstate == PC_NONE) {
            return;
        }
        evbuffer_drain(in, used);
    }
}

/* Connected: send Hello. Closed or failed: fail the connection. */
static void
peer_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct peer *p = arg;

    (void)bev;
    if (what & BEV_EVENT_CONNECTED) {
        if (peer_send_hello(p->bev, p->h->cl) < 0) {
            peer_fail(p, "out of memory", false);
        }
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        char why[128];
        bool connecting = p->cstate == PC_CONNECTING;

        snprintf(why, sizeof(why), "%s",
                 (what & BEV_EVENT_EOF) ? "closed by the peer"
                                        : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        /* A refused connect to a member's cluster port: nobody listens,
         * the process is gone (its host answered, so the path is up). */
        peer_fail(p, why,
                  connecting && (what & BEV_EVENT_ERROR) && EVUTIL_SOCKET_ERROR() == ECONNREFUSED);
    }
}

/* Open the heartbeat connection to a peer (server/peer.h). A numeric
 * address refused at once counts as down at once, like a refusal seen
 * later by peer_event_cb. */
static void
peer_connect_to(struct peer *p)
{
    int rc;

    p->attempt_ms = util_coarse_ms();
    p->bev = peer_dial(p->h->base, cluster_peer_tls(p->h->cl), p->addr);
    if (p->bev == NULL) {
        peer_fail(p, "out of memory", false);
        return;
    }
    bufferevent_setcb(p->bev, peer_read_cb, NULL, peer_event_cb, p);
    bufferevent_enable(p->bev, EV_READ | EV_WRITE);
    p->cstate = PC_CONNECTING;
    rc = peer_connect(p->bev, p->addr);
    /* peer_event_cb may already have failed it. */
    if (rc < 0 && p->cstate != PC_NONE) {
        peer_fail(p,
                  rc == PEER_EADDR      ? "bad address"
                  : rc == PEER_ECONNECT ? "connect failed"
                                        : "cannot resolve",
                  rc == PEER_ECONNECT);
    }
}

/*
 * The table of peers and the timer
 */

/* Close every peer connection and empty the table. */
static void
table_free(struct health *h)
{
    uint32_t i;

    for (i = 0; i < h->n; i++) {
        peer_close(&h->peers[i]);
    }
    free(h->peers);
    h->peers = NULL;
    h->n = 0;
}

/* Rebuild the peers from the active membership (every other member). A
 * peer of the old table with the same id and address keeps its connection
 * and history; a new one starts its silence count now. */
static void
table_build(struct health *h)
{
    const struct ring_members *m = cluster_active(h->cl);
    struct peer               *old = h->peers;
    uint32_t                   i, k, nold = h->n;
    uint64_t                   now = util_coarse_ms();

    h->peers = NULL;
    h->n = 0;
    h->table_epoch = m != NULL ? m->epoch : 0;
    if (m != NULL && m->n_nodes > 1) {
        h->peers = calloc(m->n_nodes, sizeof(*h->peers));
    }
    for (i = 0; h->peers != NULL && i < m->n_nodes; i++) {
        struct peer *p;

        if (strcmp(m->nodes[i].id, cluster_node_id(h->cl)) == 0) {
            continue;
        }
        p = &h->peers[h->n++];
        for (k = 0; k < nold; k++) {
            if (strcmp(old[k].id, m->nodes[i].id) == 0 &&
                strcmp(old[k].addr, m->nodes[i].addr) == 0) {
                *p = old[k];
                old[k].bev = NULL;
                if (p->bev != NULL) {
                    bufferevent_setcb(p->bev, peer_read_cb, NULL, peer_event_cb, p);
                }
                break;
            }
        }
        if (k == nold) {
            p->h = h;
            p->born_ms = now;
            snprintf(p->id, sizeof(p->id), "%s", m->nodes[i].id);
            snprintf(p->addr, sizeof(p->addr), "%s", m->nodes[i].addr);
        }
        p->idx = (int32_t)i;
    }
    for (k = 0; k < nold; k++) {
        peer_close(&old[k]);
    }
    free(old);
}

/* State of a peer now: up while Pongs (or its Pings) come, suspect after a
 * silence, down after a longer one or at once when its port refuses. */
static enum peer_health
peer_state(const struct peer *p, uint64_t now)
{
    uint64_t heard = p->last_pong_ms > p->ping_in_ms ? p->last_pong_ms : p->ping_in_ms;
    uint64_t since = heard != 0 ? heard : p->born_ms;

    if (p->refused) {
        return PEER_DOWN;
    }
    if (now < since + HEALTH_SUSPECT_MS) {
        return heard != 0 ? PEER_UP : PEER_UNKNOWN;
    }
    if (now < since + HEALTH_DOWN_MS) {
        return PEER_SUSPECT;
    }
    return PEER_DOWN;
}

/* Every TIMER_MS: follow the active epoch, start a round after a stall,
 * (re)connect, time out and ping peers, and publish the down mask and
 * the end of the round to the workers. */
static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct health       *h = arg;
    struct cluster_live *live = cluster_live(h->cl);
    struct timeval       tv = { 0, TIMER_MS * 1000 };
    uint64_t             now = util_coarse_ms(), mask[CLUSTER_MASK_WORDS] = { 0 };
    uint64_t             empty[CLUSTER_MASK_WORDS] = { 0 };
    uint64_t             epoch = cluster_active_epoch(h->cl);
    bool                 all_settled = true, heard = false;
    uint32_t             i;

    (void)fd;
    (void)what;
    if (epoch != h->table_epoch) {
        table_build(h);
    }
    if (!h->round && __atomic_load_n(&live->suspect, __ATOMIC_ACQUIRE)) {
        /* We were paused: ask everybody before serving again. */
        h->round = true;
        h->round_start = now;
        log_msg(LOG_ERR,
                "this process stalled for over %d ms (or heard no peer): serving nothing "
                "until %u peers answered",
                CLUSTER_STALL_MS, h->n);
        for (i = 0; i < h->n; i++) {
            struct peer *p = &h->peers[i];

            p->settled = false;
            p->round_seq = p->seq;
            p->attempt_ms = 0;
            if (p->cstate == PC_READY) {
                peer_ping(p);
            }
        }
    }
    for (i = 0; i < h->n; i++) {
        struct peer *p = &h->peers[i];

        if (p->cstate == PC_NONE && now >= p->attempt_ms + HEALTH_PING_MS) {
            peer_connect_to(p);
        } else if (p->cstate == PC_CONNECTING && now >= p->attempt_ms + CONNECT_MS) {
            peer_fail(p, "no answer to connect/Hello", false);
        } else if (p->cstate == PC_READY &&
                   now >= (p->last_pong_ms > p->attempt_ms ? p->last_pong_ms : p->attempt_ms) +
                              HEALTH_SUSPECT_MS) {
            /* Ready but silent: the connection may be dead without a FIN
             * (this process or the peer was stopped, a middlebox dropped
             * it). Dial again rather than ping into it for good. */
            peer_fail(p, "no Pong for 1 s: reconnecting", false);
        } else if (p->cstate == PC_READY && now >= p->last_ping_ms + HEALTH_PING_MS) {
            peer_ping(p);
        }
        {
            enum peer_health was = p->state;

            p->state = peer_state(p, now);
            if ((p->state == PEER_DOWN) != (was == PEER_DOWN)) {
                if (p->state != PEER_DOWN) {
                    log_msg(LOG_NOTICE, "peer %.64s is %s again", p->id,
                            health_state_name(p->state));
                } else {
                    log_msg(
                        LOG_NOTICE, "peer %.64s is down (%s; silent for %" PRIu64 " ms)", p->id,
                        p->refused ? "its port refused the connection" : "no answer",
                        now - (p->last_pong_ms > p->ping_in_ms ? p->last_pong_ms : p->ping_in_ms));
                }
            }
        }
        p->empty = p->pong_empty;
        if (p->state == PEER_DOWN && p->idx < 64 * CLUSTER_MASK_WORDS) {
            mask[p->idx / 64] |= (uint64_t)1 << (p->idx % 64);
        } else if (p->state == PEER_UP && p->empty && p->idx < 64 * CLUSTER_MASK_WORDS) {
            empty[p->idx / 64] |= (uint64_t)1 << (p->idx % 64);
        }
        /* Heard: it answered lately, it is new, or its host refused the
         * connection (it is dead but the network works). */
        heard = heard || p->state == PEER_UP || p->state == PEER_UNKNOWN || p->refused;
        all_settled = all_settled && p->settled;
    }
    for (i = 0; i < CLUSTER_MASK_WORDS; i++) {
        __atomic_store_n(&live->down[i], mask[i], __ATOMIC_RELEASE);
        __atomic_store_n(&live->empty[i], empty[i], __ATOMIC_RELEASE);
    }
    /* Cut off from every peer: they may see this node down and have the
     * store declare it failed, so it serves nothing (HEALTH_SUSPECT_MS of
     * silence, before any peer sees it down at HEALTH_DOWN_MS). */
    if (h->isolated != (h->n > 0 && !heard)) {
        h->isolated = !h->isolated;
        if (h->isolated) {
            /* Back from it, every peer must answer first (a round, as
             * after a stall): one of them may hold a Prepare that
             * declared this node failed, and its Pong says so. */
            __atomic_store_n(&live->suspect, 1, __ATOMIC_RELEASE);
        }
        __atomic_store_n(&live->isolated, h->isolated ? 1 : 0, __ATOMIC_RELEASE);
        log_msg(h->isolated ? LOG_ERR : LOG_NOTICE,
                h->isolated ? "no peer has answered for %d ms: serving nothing until all do"
                            : "a peer answers again (%d ms rule)",
                HEALTH_SUSPECT_MS);
    }
    /* The round ends when every peer answered a Ping sent after it began
     * (or refused outright): a silent one may be acting on the store's
     * authority without us, so there is no give-up; a dead one leaves the
     * table when the store removes it. */
    if (h->round && all_settled) {
        h->round = false;
        __atomic_store_n(&live->suspect, 0, __ATOMIC_RELEASE);
        log_msg(LOG_NOTICE, "heartbeat round after the stall done in %" PRIu64 " ms%s",
                now - h->round_start,
                __atomic_load_n(&live->behind_epoch, __ATOMIC_RELAXED) ? ": behind a higher epoch"
                                                                       : "");
    }
    evtimer_add(h->timer, &tv);
}

/*
 * API
 */

/* See health.h. */
struct health *
health_new(struct cluster *cl, struct event_base *base)
{
    struct health *h = calloc(1, sizeof(*h));

    if (h == NULL) {
        return NULL;
    }
    h->cl = cl;
    h->base = base;
    h->epoch_margin = HEALTH_EPOCH_MARGIN_DEFAULT;
    h->timer = evtimer_new(base, timer_cb, h);
    if (h->timer == NULL) {
        free(h);
        return NULL;
    }
    return h;
}

/* See health.h. The ticker blocks every signal: SIGCONT goes to another
 * thread and its handler stays the backstop. */
int
health_start(struct health *h)
{
    struct timeval tv = { 0, 0 };
    sigset_t       block, old;
    int            rc;

    struct sigaction sa;

    h->start_ms = util_coarse_ms();
    __atomic_store_n(&cluster_live(h->cl)->tick_ms, h->start_ms, __ATOMIC_RELEASE);
    sigcont_live = cluster_live(h->cl);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = sigcont_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCONT, &sa, NULL);
    if (evtimer_add(h->timer, &tv) < 0) {
        return -1;
    }
    sigfillset(&block);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    rc = pthread_create(&h->tid, NULL, ticker_main, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        log_msg(LOG_ERR, "cannot start the heartbeat ticker");
        __atomic_store_n(&cluster_live(h->cl)->tick_ms, 0, __ATOMIC_RELEASE);
        return -1;
    }
    h->ticker_started = true;
    return 0;
}

/* See health.h. */
void
health_free(struct health *h)
{
    if (h == NULL) {
        return;
    }
    if (sigcont_live == cluster_live(h->cl)) {
        signal(SIGCONT, SIG_DFL);
        sigcont_live = NULL;
    }
    if (h->ticker_started) {
        __atomic_store_n(&h->stop, 1, __ATOMIC_RELEASE);
        pthread_join(h->tid, NULL);
        /* Nobody beats any more: workers must not read that as a stall. */
        __atomic_store_n(&cluster_live(h->cl)->tick_ms, 0, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&cluster_live(h->cl)->isolated, 0, __ATOMIC_RELEASE);
    table_free(h);
    event_free(h->timer);
    free(h);
}

/* A member's Ping: it is alive and talking to us. It counts as up at once
 * (not at our next timer), so a Prepare declaring it failed that this
 * thread handles after our Pong (which said nothing of it) is refused:
 * either the Pong says saw_you_down, or the Prepare finds it up. */
static void
heard_ping(struct health *h, const char *id)
{
    struct cluster_live *live = cluster_live(h->cl);
    uint32_t             i;

    for (i = 0; id != NULL && i < h->n; i++) {
        struct peer *p = &h->peers[i];

        if (strcmp(p->id, id) == 0 && p->idx >= 0 && p->idx < 64 * CLUSTER_MASK_WORDS) {
            if (p->state == PEER_DOWN) {
                log_msg(LOG_NOTICE, "peer %.64s is up (its Ping came)", p->id);
            }
            p->ping_in_ms = util_coarse_ms();
            p->refused = false;
            p->state = PEER_UP;
            __atomic_and_fetch(&live->down[p->idx / 64], ~((uint64_t)1 << (p->idx % 64)),
                               __ATOMIC_RELEASE);
        }
    }
}

/* Does this node act, or did it act, without the pinger `id` at `epoch`
 * on the store's authority: a pending transition declares it failed, or
 * post-images were not sent to it because one did (`skipped`, kept after
 * an abort until the epoch changes)? Then the pinger may have missed
 * acknowledged writes. */
static bool
said_failed(struct cluster *cl, const char *id, uint64_t epoch)
{
    const struct ring_members *active = cluster_active(cl);
    const struct cluster_view *v = cluster_view(cl);
    int                        idx;

    if (active == NULL || id == NULL || epoch != active->epoch) {
        return false;
    }
    idx = ring_members_find(active, id);
    return idx >= 0 && (cluster_view_failed(v, (uint32_t)idx) ||
                        cluster_mask_has(cluster_live(cl)->skipped, (uint32_t)idx));
}

/* See health.h. saw_you_down tells the pinger that this node acted
 * without it (said_failed): it turns recovering. holds_nothing lets a peer
 * accept a Prepare that declares this node failed while it runs. */
int
health_on_ping(struct health *h, struct bufferevent *bev, const struct frame *f)
{
    struct cluster            *cl = h->cl;
    const struct cluster_live *live = cluster_live(cl);
    Ringcache__Ping           *m = ringcache__ping__unpack(NULL, f->length, f->payload);
    Ringcache__Pong            r = RINGCACHE__PONG__INIT;
    int                        rc;

    if (m == NULL) {
        return -1;
    }
    learn_epoch(h, m->node_id != NULL ? m->node_id : "?", m->active_epoch, m->active_id);
    heard_ping(h, m->node_id);
    r.node_id = (char *)cluster_node_id(cl);
    r.active_epoch = cluster_active_epoch(cl);
    r.active_id = active_id(h);
    r.pending_epoch = cluster_pending_epoch(cl);
    r.seq = m->seq;
    r.boot_id = cluster_boot_id(cl);
    r.saw_you_down = said_failed(cl, m->node_id, m->active_epoch);
    r.holds_nothing = r.active_epoch == 0 ||
                      __atomic_load_n(&live->recovering, __ATOMIC_RELAXED) != 0 ||
                      __atomic_load_n(&live->behind_epoch, __ATOMIC_RELAXED) != 0;
    ringcache__ping__free_unpacked(m, NULL);
    rc = peer_send(bev, FRAME_PONG, cluster_frame_id(cl), &r);
    return rc < 0 ? -1 : 0;
}

/* See health.h. */
int
health_peer_holds(struct health *h, const char *id, uint64_t since_ms)
{
    uint32_t i;

    for (i = 0; i < h->n; i++) {
        const struct peer *p = &h->peers[i];

        if (strcmp(p->id, id) == 0) {
            if (p->last_pong_ms <= since_ms) {
                return 0;
            }
            return p->pong_empty ? -1 : 1;
        }
    }
    return 0;
}

/* See health.h. */
void
health_set_epoch_margin(struct health *h, uint64_t margin)
{
    h->epoch_margin = margin != 0 ? margin : HEALTH_EPOCH_MARGIN_DEFAULT;
}

/* See health.h. */
size_t
health_status(struct health *h, struct health_peer *out, size_t max)
{
    uint64_t now = util_coarse_ms();
    size_t   i;

    for (i = 0; i < h->n && i < max; i++) {
        const struct peer *p = &h->peers[i];

        snprintf(out[i].id, sizeof(out[i].id), "%s", p->id);
        /* As last published to the workers (the down mask), so an admin
         * that saw a peer down finds its Prepare judged the same way. */
        out[i].state = p->state;
        out[i].holds_nothing = p->empty;
        out[i].last_seen_ms = p->last_pong_ms != 0 ? now - p->last_pong_ms + 1 : 0;
        out[i].epoch = p->epoch;
        snprintf(out[i].error, sizeof(out[i].error), "%s", p->cstate == PC_READY ? "" : p->error);
    }
    return h->n;
}
