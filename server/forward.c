/*
 * forward: relaying requests to peers' client ports. A request's life
 * cycle (pooled per worker), its retries (TRYAGAIN with backoff, MOVED,
 * a get's next owner) and the reading of replies into the client's hold
 * or a callback. The connections are upstream.c's, the order kept across
 * retries fwd_order.c's.
 */
#include "config.h"
#include "server/forward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>

#include "lib/util.h"
#include "proto/mcreply.h"
#include "ring/ring.h"
#include "server/conn.h"
#include "server/forward_internal.h"
#include "server/fwd_order.h"
#include "server/log.h"
#include "server/thread.h"
#include "server/upstream.h"

#define FWD_VALUE_MAX    (1u << 30) /* a VALUE larger than this is a protocol error */
#define FWD_REQ_POOL_MAX 1024       /* free requests a worker keeps */

/* The worker's forwarding state, created on first use; NULL on ENOMEM. */
static struct fwd_worker *
fw_get(struct worker *w)
{
    if (w->fwd == NULL) {
        struct fwd_worker *fw = calloc(1, sizeof(*fw));

        if (fw == NULL) {
            return NULL;
        }
        fw->w = w;
        TAILQ_INIT(&fw->waiting);
        TAILQ_INIT(&fw->req_pool);
        if (up_init(fw) < 0) {
            free(fw);
            return NULL;
        }
        w->fwd = fw;
    }
    return w->fwd;
}

/* See forward_internal.h. */
int
fw_timeout_ms(const struct fwd_worker *fw)
{
    const struct server *srv = fw->w->srv;

    return srv != NULL && srv->settings.forward_timeout_ms > 0 ? srv->settings.forward_timeout_ms
                                                               : FWD_TIMEOUT_MS_DEFAULT;
}

/* See forward_internal.h. */
void
fw_arm(struct event *timer, const struct fwd_req *r)
{
    struct timeval tv;
    int64_t        left;

    if (r == NULL) {
        evtimer_del(timer);
        return;
    }
    left = r->deadline - util_now_ms();
    if (left < 0) {
        left = 0;
    }
    tv.tv_sec = (time_t)(left / 1000);
    tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
    evtimer_add(timer, &tv);
}

/* See forward_internal.h. */
struct fwd_req *
req_new(struct fwd_worker *fw)
{
    struct fwd_req *r = TAILQ_FIRST(&fw->req_pool);

    if (r != NULL) {
        TAILQ_REMOVE(&fw->req_pool, r, link);
        fw->nreq_pool--;
        memset(r, 0, sizeof(*r));
    } else {
        r = calloc(1, sizeof(*r));
        if (r == NULL) {
            return NULL;
        }
    }
    r->fw = fw;
    return r;
}

/* See forward_internal.h. */
void
req_free(struct fwd_req *r)
{
    struct fwd_worker *fw = r->fw;

    ord_leave(r);
    if (r->again != NULL) {
        evbuffer_free(r->again);
    }
    if (r->retry_ev != NULL) {
        event_free(r->retry_ev);
    }
    if (fw->nreq_pool < FWD_REQ_POOL_MAX) {
        TAILQ_INSERT_HEAD(&fw->req_pool, r, link);
        fw->nreq_pool++;
        return;
    }
    free(r);
}

/* The connection of a request's hold closed; see forward.h. */
void
forward_req_gone(void *arg)
{
    struct fwd_req *r = arg;

    r->c = NULL;
    r->hold = NULL;
}

/* Finish a request's hold (nothing more comes for it). */
static void
req_done(struct fwd_req *r)
{
    if (r->hold != NULL) {
        conn_hold_done(r->c, r->hold);
        r->hold = NULL;
        r->c = NULL;
    }
}

/* Relay a text line (with its "\r\n") into the hold and finish it. */
static void
req_reply(struct fwd_req *r, const char *s, size_t n)
{
    if (r->hold != NULL) {
        conn_hold_add(r->c, r->hold, s, n);
    }
    req_done(r);
}

/* A get whose owner refused or reset the connection before any of its
 * reply came: it is sent to the key's next owner instead, once, within
 * the same request (a kill -9'd primary costs its readers nothing). */
static bool
req_fallback(struct fwd_req *r, enum fwd_err err)
{
    struct fwd_up *to;

    if (err != FWD_ECONN || r->alt[0] == '\0' || r->relayed || r->again == NULL ||
        (r->kind != FWD_GET_WHOLE && r->kind != FWD_GET_SPLICE)) {
        return false;
    }
    to = up_find(r->fw, r->alt, false);
    r->alt[0] = '\0';
    if (to == NULL) {
        return false;
    }
    log_msg(LOG_DEBUG, "forward: a get goes to the next owner %s", to->addr);
    if (!ord_defer(r, to)) {
        up_resend(to, r);
    }
    return true;
}

/* A request failed; see forward_internal.h. The next owner is
 * req_fallback's. */
void
req_fail(struct fwd_req *r, const char *why, enum fwd_err err)
{
    char buf[128];
    int  n;

    if (req_fallback(r, err)) {
        return;
    }

    switch (r->kind) {
    case FWD_LINE:
    case FWD_META:
    case FWD_GET_WHOLE:
        n = snprintf(buf, sizeof(buf), "SERVER_ERROR %s\r\n", why);
        req_reply(r, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
        break;
    case FWD_CALL:
        r->fn(r->fn_arg, NULL, 0, err);
        break;
    case FWD_GET_SPLICE:
    case FWD_HELLO:
        req_done(r);
        break;
    }
    req_free(r);
}

/* Move n bytes of the reply into r's hold (or drop them). */
static void
move_to_hold(struct fwd_req *r, struct evbuffer *in, size_t n)
{
    r->relayed = true;
    if (r->hold == NULL) {
        evbuffer_drain(in, n);
        return;
    }
    while (n > 0) {
        struct out_chunk *at;
        size_t            k;

        conn_hold_reserve(r->c, r->hold, 1);
        at = r->hold->ins;
        k = at->cap - at->len;
        if (k > n) {
            k = n;
        }
        if (evbuffer_remove(in, at->buf + at->len, k) != (int)k) {
            /* Cannot happen: the caller checked the length. */
            evbuffer_drain(in, n);
            return;
        }
        conn_hold_commit(r->c, r->hold, k);
        n -= k;
    }
}

/* Backoff over: send the request again. */
static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
    struct fwd_req *r = arg;
    struct fwd_up  *up = r->retry_up;

    (void)fd;
    (void)what;
    TAILQ_REMOVE(&up->fw->waiting, r, link);
    r->retry_up = NULL;
    if (!ord_defer(r, up)) {
        up_resend(up, r);
    }
}

/*
 * The owner answered TRYAGAIN (its range is fenced for a moment during a
 * transition), or MOVED again. A plain client cannot retry by itself, so
 * the request is re-sent to up after a short backoff (5, 10, 20, then
 * 40 ms) until give_up; after that the error is relayed. Consumes r unless
 * it returns false.
 */
static bool
req_tryagain(struct fwd_up *up, struct fwd_req *r)
{
    struct timeval tv;
    int64_t        wait = (int64_t)5 << (r->tries < 3 ? r->tries : 3);

    if (r->again == NULL || util_now_ms() + wait >= r->give_up) {
        return false;
    }
    if (ord_defer(r, up)) {
        return true; /* held behind an earlier request, no backoff of its own */
    }
    if (r->retry_ev == NULL) {
        r->retry_ev = evtimer_new(up->fw->w->base, retry_cb, r);
        if (r->retry_ev == NULL) {
            return false;
        }
    }
    tv.tv_sec = 0;
    tv.tv_usec = (suseconds_t)wait * 1000;
    if (evtimer_add(r->retry_ev, &tv) < 0) {
        return false;
    }
    r->tries++;
    r->retry_up = up;
    TAILQ_INSERT_HEAD(&up->fw->waiting, r, link);
    return true;
}

/*
 * The owner answered "SERVER_ERROR MOVED <epoch> <addr>" (it is in a newer
 * epoch than this node): send the request to the address it names, at
 * once the first time, after a backoff later (nodes commit an epoch one
 * after the other, so the named node may still be behind), until give_up;
 * then answer SERVER_ERROR TRYAGAIN. Consumes r (requeued or finished).
 */
static void
req_moved(struct fwd_up *from, struct fwd_req *r, const char *line, const struct mcr_reply *rep)
{
    /* The line is "SERVER_ERROR MOVED <epoch> <addr>" (mcr_parse). */
    const char    *ep = line + strlen("SERVER_ERROR MOVED ");
    char           addr[MCR_ADDR_MAX + 1];
    struct fwd_up *to;

    _Static_assert(MCR_ADDR_MAX <= RING_ADDR_MAX, "a MOVED address fits an upstream");
    memcpy(addr, rep->key, rep->key_len);
    addr[rep->key_len] = '\0';
    if (r->again != NULL && (to = up_find(from->fw, addr, from->calls)) != NULL) {
        if (!r->moved && to != from) {
            r->moved = true;
            if (!ord_defer(r, to)) {
                up_resend(to, r);
            }
            return;
        }
        if (req_tryagain(to, r)) {
            return;
        }
    }
    if (r->kind == FWD_GET_SPLICE) {
        /* Inside a multi-get: those keys are misses. */
        req_done(r);
    } else {
        char msg[64];
        int  n = snprintf(msg, sizeof(msg), "SERVER_ERROR TRYAGAIN %.*s\r\n",
                          (int)(rep->key - 1 - ep), ep);

        req_reply(r, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
    }
    req_free(r);
}

/* Does the reply unit of `need` bytes at the front of in (a VALUE or VA
 * line and its block) end in "\r\n"? */
static bool
block_ends_crlf(struct evbuffer *in, size_t need)
{
    struct evbuffer_ptr at;
    char                crlf[2];

    return evbuffer_ptr_set(in, &at, need - 2, EVBUFFER_PTR_SET) == 0 &&
           evbuffer_copyout_from(in, &at, crlf, 2) == 2 && crlf[0] == '\r' && crlf[1] == '\n';
}

/*
 * Consume what the head request's reply has ready: 1 when progress was
 * made (call again), 0 when more bytes are needed, -1 on a protocol error.
 * The reply's first line is copied out and read by mcr_parse; a VALUE's
 * data block is moved on into the client's hold without being looked at.
 */
static int
up_parse_one(struct fwd_up *up)
{
    struct evbuffer    *in;
    struct fwd_req     *r = TAILQ_FIRST(&up->queue);
    struct evbuffer_ptr e;
    struct mcr_reply    rep;
    size_t              llen, have, need;
    char                line[MCR_LINE_MAX];
    long                got;

    if (up->bev == NULL) {
        return 0;
    }
    in = bufferevent_get_input(up->bev);
    have = evbuffer_get_length(in);
    if (have == 0) {
        return 0;
    }
    if (r == NULL) {
        log_msg(LOG_INFO, "forward to %s: reply without a request", up->addr);
        return -1;
    }
    e = evbuffer_search_eol(in, NULL, NULL, EVBUFFER_EOL_LF);
    if (e.pos < 0) {
        return have >= MCR_LINE_MAX ? -1 : 0;
    }
    /* A line end past MCR_LINE_MAX is mcr_parse's to refuse. */
    llen = (size_t)e.pos + 1 < MCR_LINE_MAX ? (size_t)e.pos + 1 : MCR_LINE_MAX;
    if (evbuffer_copyout(in, line, llen) != (ev_ssize_t)llen) {
        return -1;
    }
    if (r->kind == FWD_HELLO && r->challenge) {
        return up_challenge(up, r, line, llen);
    }
    got = mcr_parse(line, llen, FWD_VALUE_MAX, &rep, &need);
    if (got < 0 || rep.kind == 0) {
        return -1;
    }
    if (got > 0) {
        need = (size_t)got; /* need: the whole unit's length */
    }
    llen = rep.line_len;

    switch (r->kind) {
    case FWD_HELLO:
        evbuffer_drain(in, llen + 2);
        up_pop(up);
        req_free(r);
        if (rep.kind != MCR_OK) {
            log_msg(LOG_ERR, "forward to %s: peer refused: %.*s", up->addr, (int)llen, line);
            return -1;
        }
        return 1;
    case FWD_CALL:
        evbuffer_drain(in, llen + 2);
        up_pop(up);
        r->fn(r->fn_arg, line, llen, FWD_OK);
        req_free(r);
        return 1;
    case FWD_META:
        if (rep.kind == MCR_META_VA) {
            if (have < need) {
                return 0;
            }
            if (!block_ends_crlf(in, need)) {
                return -1;
            }
            if (r->quiet & FWD_MQ_VA) {
                evbuffer_drain(in, need);
            } else {
                move_to_hold(r, in, need);
            }
            up_pop(up);
            req_done(r);
            req_free(r);
            return 1;
        }
        /* A line: relayed as FWD_LINE's are, less what q hides. */
        /* fall through */
    case FWD_LINE:
        evbuffer_drain(in, llen + 2);
        up_pop(up);
        if (rep.kind == MCR_MOVED) {
            req_moved(up, r, line, &rep);
            return 1;
        }
        if (rep.kind == MCR_TRYAGAIN && req_tryagain(up, r)) {
            return 1;
        }
        if ((rep.kind == MCR_META_HD && (r->quiet & FWD_MQ_HD)) ||
            (rep.kind == MCR_META_EN && (r->quiet & FWD_MQ_EN))) {
            req_done(r);
        } else {
            req_reply(r, line, llen + 2);
        }
        req_free(r);
        return 1;
    case FWD_GET_WHOLE:
    case FWD_GET_SPLICE:
        if (rep.kind == MCR_VALUE) {
            /* The line, the data block, its "\r\n". */
            if (have < need) {
                return 0;
            }
            if (!block_ends_crlf(in, need)) {
                return -1;
            }
            move_to_hold(r, in, need);
            return 1;
        }
        evbuffer_drain(in, llen + 2);
        up_pop(up);
        if (rep.kind == MCR_TRYAGAIN && req_tryagain(up, r)) {
            return 1;
        }
        if (rep.kind == MCR_MOVED) {
            req_moved(up, r, line, &rep);
            return 1;
        }
        if (r->kind == FWD_GET_SPLICE) {
            /* END, or an error for the whole part: its keys are misses. */
            req_done(r);
        } else {
            req_reply(r, line, llen + 2);
        }
        req_free(r);
        return 1;
    }
    return -1;
}

/*
 * Replication acks in bulk: while the head request is a FWD_CALL, hand it
 * the next reply line (mcr_line: a call's reply is one line) straight from
 * the input's first contiguous segment (no copy, no per-line search of the
 * whole buffer), then drain what was used at once. A line crossing a
 * segment, or anything unusual, is left to up_parse_one. Returns the
 * number of requests completed.
 */
static int
up_read_calls(struct fwd_up *up)
{
    struct evbuffer      *in = bufferevent_get_input(up->bev);
    struct evbuffer_iovec v;
    const char           *p, *end;
    size_t                need;
    long                  n;
    int                   done = 0;

    if (evbuffer_peek(in, -1, NULL, &v, 1) < 1 || v.iov_len == 0) {
        return 0;
    }
    p = v.iov_base;
    end = p + v.iov_len;
    while (!TAILQ_EMPTY(&up->queue) && TAILQ_FIRST(&up->queue)->kind == FWD_CALL && p < end &&
           (n = mcr_line(p, (size_t)(end - p), &need)) > 0) {
        struct fwd_req *r = up_pop(up);

        r->fn(r->fn_arg, p, (size_t)n - 2, FWD_OK);
        req_free(r);
        p += n;
        done++;
    }
    if (done > 0) {
        evbuffer_drain(in, (size_t)(p - (const char *)v.iov_base));
    }
    return done;
}

/* Upstream readable: complete every request whose reply is in; see
 * forward_internal.h. */
void
up_read_cb(struct bufferevent *bev, void *arg)
{
    struct fwd_up        *up = arg;
    struct latency_clock *clock = &up->fw->w->clock; /* acks and holds time with one read */
    int                   r;

    (void)bev;
    latency_loop_enter(clock);
    for (;;) {
        if (up->bev != NULL && !TAILQ_EMPTY(&up->queue) &&
            TAILQ_FIRST(&up->queue)->kind == FWD_CALL && up_read_calls(up) > 0) {
            continue;
        }
        r = up_parse_one(up);
        if (r <= 0) {
            break;
        }
    }
    if (r < 0) {
        log_msg(LOG_INFO, "forward to %s: bad reply, closing", up->addr);
        up_fail(up, "forward failed", FWD_EOTHER);
    } else {
        up_arm(up);
    }
    latency_loop_leave(clock);
}

/* Relay a client's request; see forward.h. */
int
forward_request(struct conn *c, const char *addr, uint64_t epoch, enum fwd_kind kind,
                const struct iovec *iov, int iovcnt, bool want_reply)
{
    return forward_read(c, addr, NULL, epoch, kind, iov, iovcnt, want_reply);
}

static int forward_send(struct conn *c, const char *addr, const char *alt, uint64_t epoch,
                        enum fwd_kind kind, const struct iovec *iov, int iovcnt, bool want_reply,
                        unsigned quiet);

/* A meta command; see forward.h. */
int
forward_meta(struct conn *c, const char *addr, uint64_t epoch, const struct iovec *iov, int iovcnt,
             unsigned quiet)
{
    return forward_send(c, addr, NULL, epoch, FWD_META, iov, iovcnt, true, quiet);
}

/* The same with a next owner for a get; see forward.h. */
int
forward_read(struct conn *c, const char *addr, const char *alt, uint64_t epoch, enum fwd_kind kind,
             const struct iovec *iov, int iovcnt, bool want_reply)
{
    return forward_send(c, addr, alt, epoch, kind, iov, iovcnt, want_reply, 0);
}

static int
forward_send(struct conn *c, const char *addr, const char *alt, uint64_t epoch, enum fwd_kind kind,
             const struct iovec *iov, int iovcnt, bool want_reply, unsigned quiet)
{
    struct fwd_worker *fw = fw_get(c->w);
    struct fwd_up     *up = fw != NULL ? up_find(fw, addr, false) : NULL;
    struct fwd_req    *r = up != NULL ? req_new(fw) : NULL;
    int                i;

    if (r == NULL) {
        if (want_reply) {
            conn_out_add(c, "SERVER_ERROR out of memory\r\n", 28);
        }
        return -1;
    }
    r->kind = kind;
    r->epoch = epoch;
    r->quiet = (uint8_t)quiet;
    if (alt != NULL && strcmp(alt, addr) != 0) {
        snprintf(r->alt, sizeof(r->alt), "%s", alt);
    }
    r->give_up = util_now_ms() + (int64_t)fw_timeout_ms(fw) * FWD_RETRY_TIMEOUTS;
    {
        /* Kept for retries (MOVED once, TRYAGAIN with backoff). */
        r->again = evbuffer_new();
        for (i = 0; r->again != NULL && i < iovcnt; i++) {
            evbuffer_add(r->again, iov[i].iov_base, iov[i].iov_len);
        }
    }
    if (want_reply) {
        r->c = c;
        r->hold = conn_out_hold(c, r, forward_req_gone);
    }
    if (ord_admit(fw, c, r, up)) {
        return 0;
    }
    return up_send(up, r, iov, iovcnt);
}

/* A request whose reply goes to a callback; see forward.h. */
void
forward_call(struct worker *w, const char *addr, uint64_t epoch, const struct iovec *iov,
             int iovcnt, fwd_call_fn fn, void *arg)
{
    struct fwd_worker *fw = fw_get(w);
    struct fwd_up     *up = fw != NULL ? up_find(fw, addr, true) : NULL;
    struct fwd_req    *r = up != NULL ? req_new(fw) : NULL;

    if (r == NULL) {
        fn(arg, NULL, 0, FWD_EOTHER);
        return;
    }
    r->kind = FWD_CALL;
    r->epoch = epoch;
    r->fn = fn;
    r->fn_arg = arg;
    up_send(up, r, iov, iovcnt);
}

/* Close every upstream; see forward.h. */
void
forward_worker_free(struct worker *w)
{
    struct fwd_worker *fw = w->fwd;
    struct fwd_req    *r;

    if (fw == NULL) {
        return;
    }
    fw->closing = true;
    while ((r = TAILQ_FIRST(&fw->waiting)) != NULL) {
        TAILQ_REMOVE(&fw->waiting, r, link);
        req_fail(r, "shutting down", FWD_EOTHER);
    }
    up_free_all(fw);
    while ((r = TAILQ_FIRST(&fw->req_pool)) != NULL) {
        TAILQ_REMOVE(&fw->req_pool, r, link);
        free(r);
    }
    free(fw);
    w->fwd = NULL;
}
