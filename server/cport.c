/*
 * cport: the cluster port's thread and transport. Connections are libevent
 * bufferevents on the cluster event_base; every message is a frame
 * (proto/frame.h). The Hello is checked here; then frames go to
 * server/admin.h (admin requests), server/handoff_in.h (a peer's batches)
 * and server/health.h (pings). Admission before the Hello is
 * server/cport_guard.h. Requests on one connection are answered in order:
 * a Fence that waits for its drain pauses its connection's input until it
 * replies.
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
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>

#include "lib/util.h"
#include "proto/frame.h"
#include "proto/ringcache.pb-c.h"
#include "server/admin.h"
#include "server/cluster.h"
#include "server/cport_guard.h"
#include "server/cport_internal.h"
#include "server/handoff.h"
#include "server/handoff_in.h"
#include "server/health.h"
#include "server/storewatch.h"
#include "server/log.h"
#include "server/peerauth.h"
#include "server/peer.h"
#include "server/peer_tls.h"
#include "server/store.h"
#include "server/thread.h"
#include "server/transition.h"

/* See cport_internal.h. */
void
cpc_free(struct cp_conn *c)
{
    struct cport *cp = c->cp;

    admin_conn_gone(c);
    LIST_REMOVE(c, link);
    cp->nconns--;
    preauth_remove(c);
    handoff_in_free(c->in);
    bufferevent_free(c->bev);
    free(c);
}

/* Close once what is queued is written. Nothing queued (the Error frame
 * did not fit in memory, or the transport took it at once): now, unless
 * cpc_read_cb is still using c (it frees c on its way out). */
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
    uint64_t now = (uint64_t)util_now_ms();
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

/* See cport_internal.h. */
void
cpc_send(struct cp_conn *c, enum frame_type type, const void *msg)
{
    if (peer_send(c->bev, type, cluster_frame_id(c->cp->cl), msg) < 0) {
        c->closing = true;
    }
}

/* See cport_internal.h. */
void
cpc_error(struct cp_conn *c, const char *fmt, ...)
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
    cpc_send(c, FRAME_ERROR, &e);
    cpc_close_after_write(c);
}

/*
 * Frames
 */

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
        cpc_error(c, "bad Hello");
        return;
    }
    if (m->cluster == NULL || strcmp(m->cluster, cluster_name(cl)) != 0) {
        cpc_error(c, "wrong cluster");
    } else if (!cluster_has_token(cl)) {
        cpc_error(c, "this node has no --token-file: the cluster port is closed");
    } else if (!peerauth_equal(m->token.data, m->token.len, token, token_len)) {
        /* Constant time: a timing must not tell how much of a guess was
         * right. */
        auth_failed(c);
        cpc_error(c, "wrong token");
    } else if (m->role != RINGCACHE__HELLO__ROLE__ADMIN &&
               m->role != RINGCACHE__HELLO__ROLE__PEER) {
        cpc_error(c, "unknown role");
    } else {
        if (m->role == RINGCACHE__HELLO__ROLE__PEER) {
            c->in = handoff_in_new(cl, c->cp->store);
            if (c->in == NULL) {
                cpc_error(c, "out of memory");
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
        cpc_send(c, FRAME_HELLO, &r);
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
        cpc_error(c, "%s", err);
        return;
    }
    a.seq = seq;
    a.error = err;
    cpc_send(c, FRAME_HANDOFF_ACK, &a);
}

/* Route one frame by the connection's state; anything unexpected is an
 * Error and a close. */
static void
dispatch(struct cp_conn *c, const struct frame *f)
{
    switch (c->state) {
    case CPC_HELLO:
        if (f->type != FRAME_HELLO) {
            cpc_error(c, "the first frame must be Hello");
        } else {
            hello(c, f);
        }
        return;
    case CPC_ADMIN:
        if (f->type == FRAME_ADMIN_REQUEST) {
            admin_request(c, f);
        } else {
            cpc_error(c, "unexpected frame type %u on an admin connection", f->type);
        }
        return;
    case CPC_PEER:
        if (f->type == FRAME_HANDOFF_BATCH) {
            peer_batch(c, f);
        } else if (f->type == FRAME_PING) {
            if (health_on_ping(c->cp->health, c->bev, f) < 0) {
                cpc_error(c, "bad Ping");
            }
        } else {
            cpc_error(c, "unexpected frame type %u on a peer connection", f->type);
        }
        return;
    }
}

/* See cport_internal.h. A bad frame closes the connection (after an Error
 * frame). */
void
cpc_read_cb(struct bufferevent *bev, void *arg)
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
            cpc_error(c, "bad frame: %s", frame_strerror(rc));
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

/* A new connection c (bev and src set) joins cp: pre-auth, with its
 * Hello deadline running from now, reading. */
static void
cpc_start(struct cport *cp, struct cp_conn *c)
{
    c->cp = cp;
    LIST_INSERT_HEAD(&cp->conns, c, link);
    cp->nconns++;
    preauth_add(c);
    bufferevent_setcb(c->bev, cpc_read_cb, conn_write_cb, conn_event_cb, c);
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
                if (!TAILQ_EMPTY(&cp->preauth)) {
                    cpc_free(TAILQ_FIRST(&cp->preauth));
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
    drop_log(cp, (uint64_t)util_now_ms());
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
 * deadline (preauth_sweep); resume a listener paused out of descriptors. */
static void
sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    struct cport *cp = arg;
    uint64_t      now = (uint64_t)util_now_ms();

    (void)fd;
    (void)what;
    preauth_sweep(cp, now);
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

/* health_aborted_fn: a peer runs the epoch this node has pending under
 * another identity (arg: the struct cport). */
static bool
peer_committed(void *arg, uint64_t epoch, uint64_t id)
{
    struct cport *cp = arg;

    return transition_drop_aborted(cp->tr, epoch, id);
}

/* transition_set_peer_holds' question, to the heartbeats (arg: the cport). */
static int
peer_holds(void *arg, const char *id, uint64_t since_ms)
{
    struct cport *cp = arg;

    return health_peer_holds(cp->health, id, since_ms);
}

/* See cport.h. */
struct cport *
cport_new(struct server *srv, struct cluster *cl, const char *listen_addr, int port)
{
    struct cport *cp = calloc(1, sizeof(*cp));

    if (cp == NULL) {
        return NULL;
    }
    LIST_INIT(&cp->conns);
    TAILQ_INIT(&cp->preauth);
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
    if (cp->ho != NULL && handoff_throttle(cp->ho, srv, !srv->settings.throttle_off,
                                           (uint64_t)srv->settings.throttle_floor_mib << 20,
                                           &srv->copy_throttle) < 0) {
        goto fail;
    }
    cp->tr = cp->ho != NULL ? transition_new(cl, srv->store, cp->ho, cp->base) : NULL;
    cp->health = health_new(cl, cp->base);
    cp->stop_ev = event_new(cp->base, cp->stop_fd[0], EV_READ, stop_cb, cp);
    cp->sweep_ev = event_new(cp->base, -1, EV_PERSIST, sweep_cb, cp);
    cp->auth_ev = evtimer_new(cp->base, auth_cb, cp);
    if (cp->ho == NULL || cp->tr == NULL || cp->health == NULL || cp->stop_ev == NULL ||
        cp->sweep_ev == NULL || cp->auth_ev == NULL) {
        goto fail;
    }
    transition_set_end_streams(cp->tr, admin_end_streams, cp);
    transition_set_peer_holds(cp->tr, peer_holds, cp);
    health_set_aborted(cp->health, peer_committed, cp);
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
    while (!LIST_EMPTY(&cp->conns)) {
        cpc_free(LIST_FIRST(&cp->conns));
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
