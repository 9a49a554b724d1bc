/*
 * upstream: per-worker connections to peers' client ports (bufferevents
 * on the worker's base). A request is written at once and queued on its
 * upstream; replies come back in order and complete the queue head
 * (forward.c reads them). One timer per upstream watches the head's
 * deadline: when it passes, everything in flight on that upstream fails
 * and the connection is closed (the next request reconnects).
 */
#include "config.h"
#include "server/upstream.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/util.h>

#include "lib/util.h"
#include "server/cluster.h"
#include "server/log.h"
#include "server/peer_tls.h"
#include "server/peerauth.h"
#include "server/thread.h"

static void up_flush(struct fwd_up *up);

/* Arm the upstream's timer for its head's deadline (or stop it). */
void
up_arm(struct fwd_up *up)
{
    fw_arm(up->timer, TAILQ_FIRST(&up->queue));
}

/* Close the upstream and fail everything in flight on it. After a
 * timeout the connection is reset, not closed: a plain close still
 * delivers what was written (a peer that was stopped, frozen or cut off
 * would run the timed-out requests when it comes back, after the writes
 * its client made since it was told the request failed), whereas a reset
 * discards what the peer has not read yet. */
void
up_fail(struct fwd_up *up, const char *why, enum fwd_err err)
{
    struct fwd_req_list q;
    struct fwd_req     *r;

    TAILQ_INIT(&q);
    TAILQ_CONCAT(&q, &up->queue, link);
    if (up->bev != NULL) {
        evutil_socket_t fd = bufferevent_getfd(up->bev);

        if (err == FWD_ETIMEOUT && fd >= 0) {
            struct linger lg = { 1, 0 };

            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        }
        bufferevent_free(up->bev);
        up->bev = NULL;
    }
    up->connected = false;
    up->dirty = false;
    up->authing = false;
    if (up->held != NULL) {
        evbuffer_drain(up->held, evbuffer_get_length(up->held));
    }
    evtimer_del(up->timer);
    while ((r = TAILQ_FIRST(&q)) != NULL) {
        TAILQ_REMOVE(&q, r, link);
        req_fail(r, why, err);
    }
}

/* Pop the head request. */
struct fwd_req *
up_pop(struct fwd_up *up)
{
    struct fwd_req *r = TAILQ_FIRST(&up->queue);

    TAILQ_REMOVE(&up->queue, r, link);
    return r;
}

/* Queue a request whose bytes were written. */
static void
up_push(struct fwd_up *up, struct fwd_req *r)
{
    /* The callback's clock: a batch of sends reads it once. */
    r->deadline = (int64_t)(latency_loop_now(&up->fw->w->clock) / 1000000) + fw_timeout_ms(up->fw);
    TAILQ_INSERT_TAIL(&up->queue, r, link);
    if (TAILQ_FIRST(&up->queue) == r) {
        up_arm(up);
    }
}

/* Timer: the head request is overdue. */
static void
up_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct fwd_up *up = arg;

    (void)fd;
    (void)what;
    if (TAILQ_EMPTY(&up->queue)) {
        return;
    }
    if (TAILQ_FIRST(&up->queue)->deadline > util_now_ms()) {
        up_arm(up);
        return;
    }
    log_msg(LOG_INFO, "forward to %s: no reply in %d ms, closing", up->addr, fw_timeout_ms(up->fw));
    up_fail(up, "forward timeout", FWD_ETIMEOUT);
}

/* Send a request again from its kept bytes. */
void
up_resend(struct fwd_up *up, struct fwd_req *r)
{
    struct iovec iov;

    iov.iov_len = evbuffer_get_length(r->again);
    iov.iov_base = evbuffer_pullup(r->again, -1);
    if (iov.iov_base == NULL) {
        req_fail(r, "forward failed", FWD_EOTHER);
        return;
    }
    up_send(up, r, &iov, 1);
}

/*
 * The reply to our `rc_peer` (docs/cluster.md, "Replication"):
 * `NONCE <node id> <hex>`. Answer `rc_peer <our id> <proof>` (its OK is
 * the same request's reply, checked as a hello line), then release the
 * requests held meanwhile. 1, or -1 (the upstream fails) when the peer
 * refused the challenge: a node that speaks only the old fixed proof
 * answers ERROR here.
 */
int
up_challenge(struct fwd_up *up, struct fwd_req *r, const char *line, size_t llen)
{
    struct cluster  *cl = up->fw->w->srv != NULL ? up->fw->w->srv->cluster : NULL;
    struct evbuffer *in = bufferevent_get_input(up->bev), *out = bufferevent_get_output(up->bev);
    char             id[PEERAUTH_ID_MAX + 1], nonce[PEERAUTH_NONCE_HEX + 1];
    char             proof[PEERAUTH_PROOF_HEX + 1], msg[PEERAUTH_ID_MAX + PEERAUTH_PROOF_HEX + 16];
    const uint8_t   *token;
    size_t           token_len, n = llen;
    const char      *sp, *me;
    int              len;

    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) {
        n--;
    }
    sp = n > 6 ? memchr(line + 6, ' ', n - 6) : NULL;
    if (cl == NULL || n <= 6 || memcmp(line, "NONCE ", 6) != 0 || sp == NULL ||
        (size_t)(sp - line - 6) > PEERAUTH_ID_MAX ||
        (size_t)(line + n - sp - 1) != PEERAUTH_NONCE_HEX) {
        log_msg(LOG_ERR,
                "forward to %s: peer refused the rc_peer challenge: %.*s (does it speak only "
                "the old fixed peer proof? every node needs this version)",
                up->addr, (int)n, line);
        return -1;
    }
    memcpy(id, line + 6, (size_t)(sp - line - 6));
    id[sp - line - 6] = '\0';
    memcpy(nonce, sp + 1, PEERAUTH_NONCE_HEX);
    nonce[PEERAUTH_NONCE_HEX] = '\0';
    evbuffer_drain(in, llen);
    token = cluster_token(cl, &token_len);
    me = cluster_node_id(cl);
    if (me == NULL || me[0] == '\0') {
        me = "-";
    }
    peerauth_proof(token, token_len, cluster_name(cl), id, nonce, me, proof);
    len = snprintf(msg, sizeof(msg), "rc_peer %s %s\r\n", me, proof);
    if (len < 0 || (size_t)len >= sizeof(msg) || evbuffer_add(out, msg, (size_t)len) < 0 ||
        (up->held != NULL && evbuffer_add_buffer(out, up->held) < 0)) {
        return -1;
    }
    /* The same request now waits for the proof's OK. */
    r->challenge = false;
    r->deadline = util_now_ms() + fw_timeout_ms(up->fw);
    up->authing = false;
    up->dirty = true;
    if (!up->fw->flush_armed) {
        up->fw->flush_armed = true;
        event_active(up->fw->flush_ev, EV_TIMEOUT, 1);
    }
    return 1;
}

/*
 * Write the upstream's queued requests now: every request a worker sent
 * in one loop iteration goes out in one writev per upstream (flush_cb).
 * Only when the socket cannot take it all is the bufferevent's write
 * event enabled (and disabled again once drained, up_write_cb), so the
 * usual request costs no epoll_ctl and no extra loop iteration.
 */
static void
up_flush(struct fwd_up *up)
{
    struct evbuffer *out;

    if (up->bev == NULL || !up->connected) {
        return;
    }
    out = bufferevent_get_output(up->bev);
    if (up->tls) {
        /* TLS encrypts inside the bufferevent: let it write (up_write_cb
         * stops watching once the output is drained). */
        if (evbuffer_get_length(out) > 0) {
            bufferevent_enable(up->bev, EV_WRITE);
        }
        return;
    }
    /* A socket bufferevent keeps its output's front frozen (only it may
     * drain it): evbuffer_write on it fails at once without a syscall,
     * leaving a stale errno, so thaw it for the write as libevent's own
     * write callback does. */
    evbuffer_unfreeze(out, 1);
    while (evbuffer_get_length(out) > 0) {
        int n;

        errno = 0;
        n = evbuffer_write(out, bufferevent_getfd(up->bev));
        if (n > 0) {
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            int e = errno;

            evbuffer_freeze(out, 1);
            log_msg(LOG_INFO, "forward to %s: %s", up->addr, e != 0 ? strerror(e) : "write failed");
            up_fail(up, "forward failed", FWD_ECONN);
            return;
        }
        break;
    }
    evbuffer_freeze(out, 1);
    if (evbuffer_get_length(out) > 0) {
        bufferevent_enable(up->bev, EV_WRITE);
    }
}

/* The bufferevent wrote out what up_flush could not: stop watching for
 * writability until the next partial write. */
static void
up_write_cb(struct bufferevent *bev, void *arg)
{
    (void)arg;
    if (evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
        bufferevent_disable(bev, EV_WRITE);
    }
}

/* Once per loop iteration with sends: flush every upstream written to. */
static void
flush_cb(evutil_socket_t fd, short what, void *arg)
{
    struct fwd_worker *fw = arg;
    uint32_t           i;

    (void)fd;
    (void)what;
    fw->flush_armed = false;
    for (i = 0; i < fw->n; i++) {
        struct fwd_up *up = fw->ups[i];

        if (up->dirty) {
            up->dirty = false;
            up_flush(up);
        }
    }
}

/* Upstream connected, closed or failed. */
static void
up_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct fwd_up *up = arg;

    if (what & BEV_EVENT_CONNECTED) {
        int one = 1;

        setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        up->connected = true;
        up_flush(up);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        char why[256];

        if (up->tls && peer_tls_error(bev, why, sizeof(why))[0] != '\0') {
            log_msg(LOG_ERR, "forward to %s: %s", up->addr, why);
        } else {
            log_msg(LOG_INFO, "forward to %s: %s", up->addr,
                    (what & BEV_EVENT_EOF) ? "connection closed"
                                           : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        }
        up_fail(up, "forward failed", FWD_ECONN);
    }
}

/* Resolve "host:port" (numeric first; a name through getaddrinfo). */
static int
resolve(const char *addr, struct sockaddr_storage *ss, int *len)
{
    struct addrinfo hints, *res = NULL;
    char            host[RING_ADDR_MAX + 1];
    const char     *colon;
    int             rc;

    *len = (int)sizeof(*ss);
    if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)ss, len) == 0) {
        return 0;
    }
    colon = strrchr(addr, ':');
    if (colon == NULL || (size_t)(colon - addr) >= sizeof(host)) {
        return -1;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, colon + 1, &hints, &res);
    if (rc != 0 || res == NULL) {
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = (int)res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* The host of "host:port" or "[v6]:port", brackets removed. 0 or -1. */
static int
addr_host(const char *addr, char *host, size_t hostlen)
{
    const char *colon = strrchr(addr, ':');
    size_t      n;

    if (colon == NULL) {
        return -1;
    }
    n = (size_t)(colon - addr);
    if (addr[0] == '[' && n >= 2 && addr[n - 1] == ']') {
        addr++;
        n -= 2;
    }
    if (n == 0 || n >= hostlen) {
        return -1;
    }
    memcpy(host, addr, n);
    host[n] = '\0';
    return 0;
}

/* Queue a hello line (its "OK" is checked and dropped). */
static int
up_hello(struct fwd_up *up, const char *text)
{
    struct fwd_req *r = req_new(up->fw);

    if (r == NULL) {
        return -1;
    }
    r->kind = FWD_HELLO;
    r->challenge = strcmp(text, "rc_peer\r\n") == 0;
    if (evbuffer_add(up->authing ? up->held : bufferevent_get_output(up->bev), text, strlen(text)) <
        0) {
        req_free(r);
        return -1;
    }
    up_push(up, r);
    return 0;
}

/*
 * Open the upstream: connect (non-blocking), authenticate as a peer when
 * the node has a token (replication needs it, and a node started with -Y
 * takes nothing else before), then declare the epoch so the owner
 * answers MOVED instead of forwarding again. 0 or -1.
 */
static int
up_connect(struct fwd_up *up, uint64_t epoch)
{
    struct worker          *w = up->fw->w;
    struct cluster         *cl = w->srv != NULL ? w->srv->cluster : NULL;
    struct sockaddr_storage ss;
    char                    line[96], host[RING_ADDR_MAX + 1];
    int                     len;

    if (resolve(up->addr, &ss, &len) < 0 || addr_host(up->addr, host, sizeof(host)) < 0) {
        log_msg(LOG_ERR, "forward: cannot resolve %s", up->addr);
        return -1;
    }
    /* Over TLS when the client ports speak it (-Z): peer_tls.h. */
    up->bev = peer_tls_dial(cl != NULL ? cluster_peer_tls(cl) : NULL, w->base, host, false);
    if (up->bev == NULL) {
        return -1;
    }
    up->tls = bufferevent_openssl_get_ssl(up->bev) != NULL;
    bufferevent_setcb(up->bev, up_read_cb, up_write_cb, up_event_cb, up);
    /* EV_WRITE stays off: up_flush writes (the connect completes anyway). */
    if (bufferevent_enable(up->bev, EV_READ) < 0 ||
        bufferevent_socket_connect(up->bev, (struct sockaddr *)&ss, len) < 0) {
        bufferevent_free(up->bev);
        up->bev = NULL;
        return -1;
    }
    if (cl != NULL && cluster_has_token(cl)) {
        /* The challenge: the epoch line and the requests wait in held
         * until up_challenge has sent the proof. */
        if (up_hello(up, "rc_peer\r\n") < 0) {
            goto fail;
        }
        if (up->held == NULL && (up->held = evbuffer_new()) == NULL) {
            goto fail;
        }
        up->authing = true;
    }
    snprintf(line, sizeof(line), "epoch %" PRIu64 "\r\n", epoch);
    if (up_hello(up, line) < 0) {
        goto fail;
    }
    return 0;
fail:
    up_fail(up, "forward failed", FWD_EOTHER);
    return -1;
}

/* The upstream to addr for relayed requests or for calls (struct
 * fwd_up), created (unconnected) if new; NULL on ENOMEM. */
struct fwd_up *
up_find(struct fwd_worker *fw, const char *addr, bool calls)
{
    struct fwd_up *up;
    uint32_t       i;

    for (i = 0; i < fw->n; i++) {
        if (fw->ups[i]->calls == calls && strcmp(fw->ups[i]->addr, addr) == 0) {
            return fw->ups[i];
        }
    }
    if (strlen(addr) > RING_ADDR_MAX) {
        return NULL;
    }
    if (fw->n == fw->cap) {
        uint32_t        cap = fw->cap ? fw->cap * 2 : 8;
        struct fwd_up **nu = realloc(fw->ups, cap * sizeof(*nu));

        if (nu == NULL) {
            return NULL;
        }
        fw->ups = nu;
        fw->cap = cap;
    }
    up = calloc(1, sizeof(*up));
    if (up == NULL) {
        return NULL;
    }
    up->fw = fw;
    up->calls = calls;
    TAILQ_INIT(&up->queue);
    snprintf(up->addr, sizeof(up->addr), "%s", addr);
    up->timer = evtimer_new(fw->w->base, up_timer_cb, up);
    if (up->timer == NULL) {
        free(up);
        return NULL;
    }
    fw->ups[fw->n++] = up;
    return up;
}

/* Write a request on the upstream (connecting first if needed) and queue
 * it; on failure r is failed at once. 0 or -1. */
int
up_send(struct fwd_up *up, struct fwd_req *r, const struct iovec *iov, int iovcnt)
{
    int i;

    if (up->bev == NULL && up_connect(up, r->epoch) < 0) {
        req_fail(r, "forward failed", FWD_ECONN);
        return -1;
    }
    for (i = 0; i < iovcnt; i++) {
        struct evbuffer *dst = up->authing ? up->held : bufferevent_get_output(up->bev);

        if (evbuffer_add(dst, iov[i].iov_base, iov[i].iov_len) < 0) {
            up_push(up, r);
            up_fail(up, "forward failed", FWD_EOTHER);
            return -1;
        }
    }
    up_push(up, r);
    if (!up->dirty) {
        struct fwd_worker *fw = up->fw;

        up->dirty = true;
        if (!fw->flush_armed) {
            fw->flush_armed = true;
            event_active(fw->flush_ev, EV_TIMEOUT, 1);
        }
    }
    return 0;
}

/* See upstream.h. */
int
up_init(struct fwd_worker *fw)
{
    fw->flush_ev = event_new(fw->w->base, -1, 0, flush_cb, fw);
    return fw->flush_ev != NULL ? 0 : -1;
}

/* See upstream.h. */
void
up_free_all(struct fwd_worker *fw)
{
    uint32_t i;

    for (i = 0; i < fw->n; i++) {
        struct fwd_up *up = fw->ups[i];

        up_fail(up, "shutting down", FWD_EOTHER);
        event_free(up->timer);
        if (up->held != NULL) {
            evbuffer_free(up->held);
        }
        free(up);
    }
    free(fw->ups);
    event_free(fw->flush_ev);
}
