/*
 * forward: per-worker upstream connections to peers' client ports
 * (bufferevents on the worker's base). A request is written at once and
 * queued on its upstream; replies come back in order and complete the
 * queue head. One timer per upstream watches the head's deadline: when it
 * passes, everything in flight on that upstream fails and the connection is
 * closed (the next request reconnects). A client connection's relayed
 * requests keep their order of execution across retries: while one backs
 * off (TRYAGAIN) or is redirected (MOVED, a refused connection), the later
 * ones are held behind it (struct fwd_order).
 */
#include "config.h"
#include "server/forward.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/util.h>

#include "lib/util.h"
#include "proto/mcreply.h"
#include "ring/ring.h"
#include "server/cluster.h"
#include "server/conn.h"
#include "server/log.h"
#include "server/peer_tls.h"
#include "server/peerauth.h"
#include "server/thread.h"

#define FWD_VALUE_MAX (1u << 30) /* a VALUE larger than this is a protocol error */

struct fwd_up;
struct fwd_order;

/* One request in flight on an upstream (pooled per worker). */
struct fwd_req {
    struct fwd_req    *next;
    struct fwd_worker *fw;
    enum fwd_kind      kind;
    struct conn       *c;    /* the client (NULL: none, or it closed) */
    struct out_chunk  *hold; /* its hold on c, NULL with c */
    fwd_call_fn        fn;   /* FWD_CALL */
    void              *fn_arg;
    struct evbuffer   *again;    /* the request bytes, for retries */
    uint64_t           epoch;    /* declared by a new upstream */
    int64_t            deadline; /* monotonic ms: this send's reply is due */
    int64_t            give_up;  /* monotonic ms: no TRYAGAIN retry after it */
    bool               moved;    /* retried once after MOVED already */
    uint32_t           tries;    /* TRYAGAIN retries so far */
    struct fwd_up     *retry_up; /* waiting to be re-sent there */
    struct event      *retry_ev;
    bool               relayed;                /* some of its reply is in the hold */
    uint8_t            quiet;                  /* FWD_META: FWD_MQ_* dropped */
    char               alt[RING_ADDR_MAX + 1]; /* a get: the next owner to try when
                                                * this one refuses or resets ("") */
    struct fwd_order *ord;                     /* its client connection's order (or NULL) */
    uint64_t          seq;                     /* its place in that order */
    bool              ahead;                   /* on ord's ahead list: later ones wait for it */
    struct fwd_req   *aprev, *anext;           /* ord's ahead list */
    struct fwd_up    *held_up;                 /* held on ord: where it goes when released */
    bool              challenge;               /* FWD_HELLO `rc_peer`: its reply is the NONCE */
};

/*
 * The order of one client connection's relayed requests (refcounted: the
 * connection and each of its requests; it outlives a closed connection so
 * what it holds is still sent, in order). The upstream to a node keeps a
 * connection's requests in order there, but a request answered TRYAGAIN
 * or MOVED is sent again later or elsewhere, and a later one must not
 * overtake it (docs/guarantees.md "Per connection"). From such a retry on,
 * an episode: the requests later ones wait for are on `ahead` (the
 * retrying ones, and what was released after them), a request that would
 * start or be sent again with an earlier one still ahead or held is held
 * (sorted by seq, bounded), and when nothing is ahead any more the held
 * requests are released, the leading run of those going to one upstream
 * at once (its order holds there). Outside an episode nothing is held
 * and nothing waits.
 */
struct fwd_order {
    struct fwd_worker *fw;
    uint32_t           refs;
    uint64_t           next_seq;
    struct fwd_req    *ahead, *ahead_tail; /* sorted by seq */
    struct fwd_req    *held, *held_tail;   /* sorted by seq, linked by next */
    uint32_t           nheld;
    size_t             held_bytes;
    struct fwd_up     *up; /* what was released went there, all still in
                            * order: a new request to it may follow at once */
    bool          releasing;
    struct event *timer; /* the first held request's deadline */
};

/*
 * A connection to one peer's client port. A worker keeps two per peer:
 * one for relayed client requests and one for calls (replication). They
 * must not share one: the peer answers a connection's requests in order,
 * and a relayed write it is the primary of holds its reply until our
 * replica ack, so a post-image it sends us queued behind it there, and
 * ours queued behind a write we relayed the other way, would wait for
 * each other until the forward timeout (two primaries relaying to each
 * other, as the survivors of a failover do).
 */
struct fwd_up {
    struct fwd_worker  *fw;
    char                addr[RING_ADDR_MAX + 1];
    bool                calls; /* carries forward_call requests only */
    struct bufferevent *bev;   /* NULL: not connected */
    bool                tls;   /* bev is OpenSSL's: it writes its own output */
    bool                connected;
    bool                dirty; /* has output the flush has not seen */
    struct event       *timer;
    struct fwd_req     *head, *tail;
    /* Between `rc_peer` and its NONCE reply the requests' bytes wait in
     * held: they may go only after the proof (up_challenge). */
    bool             authing;
    struct evbuffer *held;
};

/* A worker's upstreams, by address (a linear table: a few peers). */
struct fwd_worker {
    struct worker  *w;
    struct fwd_up **ups;
    uint32_t        n, cap;
    struct fwd_req *waiting;  /* requests backing off after TRYAGAIN */
    struct event   *flush_ev; /* made active by a send: runs after the
                               * loop iteration's other callbacks */
    bool            flush_armed;
    struct fwd_req *req_pool; /* free requests */
    uint32_t        nreq_pool;
    bool            closing; /* forward_worker_free runs: release nothing */
};

#define FWD_REQ_POOL_MAX 1024

static void flush_cb(evutil_socket_t fd, short what, void *arg);
static void ord_release(struct fwd_order *o);
static bool ord_defer(struct fwd_req *r, struct fwd_up *to);

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
        fw->flush_ev = event_new(w->base, -1, 0, flush_cb, fw);
        if (fw->flush_ev == NULL) {
            free(fw);
            return NULL;
        }
        w->fwd = fw;
    }
    return w->fwd;
}

static int
timeout_ms(const struct fwd_worker *fw)
{
    const struct server *srv = fw->w->srv;

    return srv != NULL && srv->settings.forward_timeout_ms > 0 ? srv->settings.forward_timeout_ms
                                                               : FWD_TIMEOUT_MS_DEFAULT;
}

/* A zeroed request from fw's pool (or the heap); NULL on ENOMEM. */
static struct fwd_req *
req_new(struct fwd_worker *fw)
{
    struct fwd_req *r = fw->req_pool;

    if (r != NULL) {
        fw->req_pool = r->next;
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

/*
 * A connection's order (struct fwd_order)
 */

/* c's order, made on its first relayed request; NULL on ENOMEM (its
 * requests are then relayed unordered, as before an episode). */
static struct fwd_order *
ord_get(struct fwd_worker *fw, struct conn *c)
{
    struct fwd_order *o = c->fwd_order;

    if (o == NULL) {
        o = calloc(1, sizeof(*o));
        if (o == NULL) {
            return NULL;
        }
        o->fw = fw;
        o->refs = 1; /* the connection's (forward_conn_closed) */
        c->fwd_order = o;
    }
    return o;
}

static void
ord_unref(struct fwd_order *o)
{
    if (--o->refs > 0) {
        return;
    }
    if (o->timer != NULL) {
        event_free(o->timer);
    }
    free(o);
}

/* The connection closed; see forward.h. Its held and retrying requests
 * go on in order (a noreply write is still applied), their replies
 * dropped with its holds. */
void
forward_conn_closed(struct conn *c)
{
    struct fwd_order *o = c->fwd_order;

    c->fwd_order = NULL;
    if (o != NULL) {
        ord_unref(o);
    }
}

/* Put r on o's ahead list, sorted by seq (a new one usually goes last). */
static void
ahead_add(struct fwd_order *o, struct fwd_req *r)
{
    struct fwd_req *at = o->ahead_tail;

    if (r->ahead) {
        return;
    }
    while (at != NULL && at->seq > r->seq) {
        at = at->aprev;
    }
    r->aprev = at;
    r->anext = at != NULL ? at->anext : o->ahead;
    if (r->anext != NULL) {
        r->anext->aprev = r;
    } else {
        o->ahead_tail = r;
    }
    if (at != NULL) {
        at->anext = r;
    } else {
        o->ahead = r;
    }
    r->ahead = true;
}

static void
ahead_remove(struct fwd_order *o, struct fwd_req *r)
{
    if (!r->ahead) {
        return;
    }
    if (r->aprev != NULL) {
        r->aprev->anext = r->anext;
    } else {
        o->ahead = r->anext;
    }
    if (r->anext != NULL) {
        r->anext->aprev = r->aprev;
    } else {
        o->ahead_tail = r->aprev;
    }
    r->aprev = r->anext = NULL;
    r->ahead = false;
}

/* Free a request (its hold, if any, was finished or dropped): back to
 * its worker's pool. */
static void
req_free(struct fwd_req *r)
{
    struct fwd_worker *fw = r->fw;
    struct fwd_order  *o = r->ord;

    if (o != NULL) {
        /* Done: what its connection held behind it may go now. */
        r->ord = NULL;
        if (r->ahead) {
            ahead_remove(o, r);
            if (o->ahead == NULL) {
                ord_release(o);
            }
        }
        ord_unref(o);
    }
    if (r->again != NULL) {
        evbuffer_free(r->again);
    }
    if (r->retry_ev != NULL) {
        event_free(r->retry_ev);
    }
    if (fw->nreq_pool < FWD_REQ_POOL_MAX) {
        r->next = fw->req_pool;
        fw->req_pool = r;
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

static void           up_resend(struct fwd_up *up, struct fwd_req *r);
static struct fwd_up *up_find(struct fwd_worker *fw, const char *addr, bool calls);

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

/* A request failed (timeout, lost or refused connection): a get goes to
 * its next owner if it has one (req_fallback); otherwise the client sees
 * SERVER_ERROR <why>, a multi-get part is a miss, a callback gets NULL. */
static void
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

/* Unlink o's first held request. */
static struct fwd_req *
held_pop(struct fwd_order *o)
{
    struct fwd_req *r = o->held;

    o->held = r->next;
    if (o->held == NULL) {
        o->held_tail = NULL;
    }
    r->next = NULL;
    r->held_up = NULL;
    o->nheld--;
    o->held_bytes -= evbuffer_get_length(r->again);
    return r;
}

/* Arm o's timer for its first held request's deadline (or stop it). */
static void
ord_arm(struct fwd_order *o)
{
    struct timeval tv;
    int64_t        left;

    if (o->timer == NULL) {
        return;
    }
    if (o->held == NULL) {
        evtimer_del(o->timer);
        return;
    }
    left = o->held->deadline - util_now_ms();
    if (left < 0) {
        left = 0;
    }
    tv.tv_sec = (time_t)(left / 1000);
    tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
    evtimer_add(o->timer, &tv);
}

/* Timer: the first held request's deadline passed. A held request waits
 * no longer than it could have retried by itself (its give_up, plus one
 * timeout for the last try's reply), then fails as a timed-out one. */
static void
ord_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct fwd_order *o = arg;
    int64_t           now = util_now_ms();

    (void)fd;
    (void)what;
    o->refs++;
    while (o->held != NULL && o->held->deadline <= now) {
        req_fail(held_pop(o), "forward timeout", FWD_ETIMEOUT);
    }
    ord_arm(o);
    if (o->ahead == NULL) {
        ord_release(o);
    }
    ord_unref(o);
}

/*
 * Hold r (not sent yet, or answered without being executed) until nothing
 * of its connection is ahead of it; it then goes to `to`. Bounded: past
 * FWD_HELD_MAX requests or FWD_HELD_BYTES_MAX bytes held on the
 * connection it is answered SERVER_ERROR instead (failed as the request
 * it is). Consumes r (it may even be sent and done before this returns).
 */
static void
ord_hold(struct fwd_req *r, struct fwd_up *to)
{
    struct fwd_order *o = r->ord;
    size_t            len = r->again != NULL ? evbuffer_get_length(r->again) : 0;

    if (r->again == NULL) {
        req_fail(r, "out of memory", FWD_EOTHER);
        return;
    }
    if (o->nheld >= FWD_HELD_MAX || (o->nheld > 0 && o->held_bytes + len > FWD_HELD_BYTES_MAX)) {
        log_msg(LOG_INFO,
                "forward: %" PRIu32 " requests (%zu bytes) of one connection held "
                "behind a retry: refusing the next",
                o->nheld, o->held_bytes);
        req_fail(r, "too many requests held behind a retry", FWD_EOTHER);
        return;
    }
    if (o->timer == NULL && (o->timer = evtimer_new(o->fw->w->base, ord_timer_cb, o)) == NULL) {
        req_fail(r, "out of memory", FWD_EOTHER);
        return;
    }
    r->held_up = to;
    r->deadline = r->give_up + timeout_ms(o->fw);
    if (o->held_tail == NULL || o->held_tail->seq < r->seq) {
        r->next = NULL;
        if (o->held_tail != NULL) {
            o->held_tail->next = r;
        } else {
            o->held = r;
        }
        o->held_tail = r;
    } else {
        /* Sent before some held one and bounced back since. */
        struct fwd_req **pp = &o->held;

        while ((*pp)->seq < r->seq) {
            pp = &(*pp)->next;
        }
        r->next = *pp;
        *pp = r;
    }
    o->nheld++;
    o->held_bytes += len;
    if (o->held == r) {
        ord_arm(o);
    }
    if (o->ahead == NULL) {
        ord_release(o);
    }
}

/* Whether a request of r's connection earlier than r is ahead or held. */
static bool
ord_earlier(const struct fwd_order *o, const struct fwd_req *r)
{
    const struct fwd_req *a = o->ahead != r ? o->ahead : r->anext;

    return (a != NULL && a->seq < r->seq) || (o->held != NULL && o->held->seq < r->seq);
}

/*
 * r was not executed (answered TRYAGAIN or MOVED, or its owner refused
 * the connection) and is about to be sent again to `to`, later or at
 * once. true: an earlier request of its connection is still ahead or
 * held, so r is held behind it instead (consumed). false: r is its
 * connection's earliest; it goes on, and what comes later waits for it.
 */
static bool
ord_defer(struct fwd_req *r, struct fwd_up *to)
{
    struct fwd_order *o = r->ord;

    if (o == NULL) {
        return false;
    }
    /* What was released is no longer all in order on one upstream. */
    o->up = NULL;
    if (!o->fw->closing && ord_earlier(o, r)) {
        ahead_remove(o, r);
        ord_hold(r, to);
        return true;
    }
    ahead_add(o, r);
    return false;
}

/*
 * Nothing of o is ahead any more: send its held requests in order, the
 * leading run of those that go to one upstream at once (they are ahead
 * now, and a new request to that upstream may follow them); the rest
 * wait for that run. When nothing is held the episode is over.
 */
static void
ord_release(struct fwd_order *o)
{
    if (o->releasing) {
        return; /* the loop below sees what changed */
    }
    o->releasing = true;
    o->refs++;
    while (o->ahead == NULL && o->held != NULL) {
        struct fwd_up *to = o->held->held_up;

        o->up = to;
        while (o->held != NULL && o->held->held_up == to) {
            struct fwd_req *r = held_pop(o);

            ahead_add(o, r);
            if (o->fw->closing) {
                req_fail(r, "shutting down", FWD_EOTHER);
            } else {
                up_resend(to, r);
            }
        }
    }
    ord_arm(o);
    o->releasing = false;
    ord_unref(o);
}

/* Arm the upstream's timer for its head's deadline (or stop it). */
static void
up_arm(struct fwd_up *up)
{
    struct timeval tv;
    int64_t        left;

    if (up->head == NULL) {
        evtimer_del(up->timer);
        return;
    }
    left = up->head->deadline - util_now_ms();
    if (left < 0) {
        left = 0;
    }
    tv.tv_sec = (time_t)(left / 1000);
    tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
    evtimer_add(up->timer, &tv);
}

/* Close the upstream and fail everything in flight on it. After a
 * timeout the connection is reset, not closed: a plain close still
 * delivers what was written (a peer that was stopped, frozen or cut off
 * would run the timed-out requests when it comes back, after the writes
 * its client made since it was told the request failed), whereas a reset
 * discards what the peer has not read yet. */
static void
up_fail(struct fwd_up *up, const char *why, enum fwd_err err)
{
    struct fwd_req *r = up->head, *next;

    up->head = up->tail = NULL;
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
    for (; r != NULL; r = next) {
        next = r->next;
        req_fail(r, why, err);
    }
}

/* Pop the head request. */
static struct fwd_req *
up_pop(struct fwd_up *up)
{
    struct fwd_req *r = up->head;

    up->head = r->next;
    if (up->head == NULL) {
        up->tail = NULL;
    }
    r->next = NULL;
    return r;
}

/* Queue a request whose bytes were written. */
static void
up_push(struct fwd_up *up, struct fwd_req *r)
{
    r->next = NULL;
    r->deadline = util_now_ms() + timeout_ms(up->fw);
    if (up->tail != NULL) {
        up->tail->next = r;
    } else {
        up->head = r;
    }
    up->tail = r;
    if (up->head == r) {
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
    if (up->head == NULL) {
        return;
    }
    if (up->head->deadline > util_now_ms()) {
        up_arm(up);
        return;
    }
    log_msg(LOG_INFO, "forward to %s: no reply in %d ms, closing", up->addr, timeout_ms(up->fw));
    up_fail(up, "forward timeout", FWD_ETIMEOUT);
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

static int  up_send(struct fwd_up *up, struct fwd_req *r, const struct iovec *iov, int iovcnt);
static void up_flush(struct fwd_up *up);

/* Send a request again from its kept bytes. */
static void
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

/* Unlink a request from the worker's backing-off list. */
static void
waiting_remove(struct fwd_worker *fw, struct fwd_req *r)
{
    struct fwd_req **pp;

    for (pp = &fw->waiting; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            r->next = NULL;
            return;
        }
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
    waiting_remove(up->fw, r);
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
    r->next = up->fw->waiting;
    up->fw->waiting = r;
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
 * The reply to our `rc_peer` (docs/cluster.md, "Replication"):
 * `NONCE <node id> <hex>`. Answer `rc_peer <our id> <proof>` (its OK is
 * the same request's reply, checked as a hello line), then release the
 * requests held meanwhile. 1, or -1 (the upstream fails) when the peer
 * refused the challenge: a node that speaks only the old fixed proof
 * answers ERROR here.
 */
static int
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
    r->deadline = util_now_ms() + timeout_ms(up->fw);
    up->authing = false;
    up->dirty = true;
    if (!up->fw->flush_armed) {
        up->fw->flush_armed = true;
        event_active(up->fw->flush_ev, EV_TIMEOUT, 1);
    }
    return 1;
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
    struct fwd_req     *r = up->head;
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
    while (up->head != NULL && up->head->kind == FWD_CALL && p < end &&
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

/* Upstream readable: complete every request whose reply is in. */
static void
up_read_cb(struct bufferevent *bev, void *arg)
{
    struct fwd_up *up = arg;
    int            r;

    (void)bev;
    for (;;) {
        if (up->bev != NULL && up->head != NULL && up->head->kind == FWD_CALL &&
            up_read_calls(up) > 0) {
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
        return;
    }
    up_arm(up);
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
    if (evbuffer_add(up->authing ? up->held : bufferevent_get_output(up->bev), text,
                     strlen(text)) < 0) {
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
static struct fwd_up *
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
static int
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
    r->give_up = util_now_ms() + (int64_t)timeout_ms(fw) * FWD_RETRY_TIMEOUTS;
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
    r->ord = ord_get(fw, c);
    if (r->ord != NULL) {
        struct fwd_order *o = r->ord;

        o->refs++;
        r->seq = o->next_seq++;
        if (o->ahead != NULL || o->held != NULL) {
            /* An episode: wait, unless this follows what was released
             * to the same upstream with nothing retried since. */
            if (o->held != NULL || o->up != up) {
                ord_hold(r, up);
                return 0;
            }
            ahead_add(o, r);
        }
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
    uint32_t           i;

    if (fw == NULL) {
        return;
    }
    fw->closing = true;
    while (fw->waiting != NULL) {
        struct fwd_req *r = fw->waiting;

        fw->waiting = r->next;
        req_fail(r, "shutting down", FWD_EOTHER);
    }
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
    while (fw->req_pool != NULL) {
        struct fwd_req *r = fw->req_pool;

        fw->req_pool = r->next;
        free(r);
    }
    free(fw);
    w->fwd = NULL;
}

/* See forward.h. */
bool
forward_conn_busy(const struct conn *c)
{
    /* One reference is the connection's, one more each request's. */
    return c->fwd_order != NULL && c->fwd_order->refs > 1;
}
