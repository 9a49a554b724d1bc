/*
 * fwd_order: a client connection's relayed requests keep their order of
 * execution across retries. While one backs off (TRYAGAIN) or is
 * redirected (MOVED, a refused connection), the later ones are held
 * behind it (struct fwd_order), then released in order.
 */
#include "config.h"
#include "server/fwd_order.h"

#include <inttypes.h>
#include <stdlib.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "lib/util.h"
#include "server/conn.h"
#include "server/log.h"
#include "server/thread.h"
#include "server/upstream.h"

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
    struct fwd_worker  *fw;
    uint32_t            refs;
    uint64_t            next_seq;
    struct fwd_req_list ahead; /* sorted by seq, linked by alink */
    struct fwd_req_list held;  /* sorted by seq, linked by link */
    uint32_t            nheld;
    size_t              held_bytes;
    struct fwd_up      *up; /* what was released went there, all still in
                             * order: a new request to it may follow at once */
    bool          releasing;
    struct event *timer;  /* the first held request's deadline */
    struct conn  *waiter; /* woken when no request is in flight (ord_wait) */
};

static void ord_release(struct fwd_order *o);

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
        TAILQ_INIT(&o->ahead);
        TAILQ_INIT(&o->held);
        c->fwd_order = o;
    }
    return o;
}

static void
ord_unref(struct fwd_order *o)
{
    if (--o->refs > 0) {
        if (o->refs == 1 && o->waiter != NULL) {
            /* Only the connection's reference is left (or, as one goes
             * during ord_release, about to be): the waiter looks again. */
            struct conn *c = o->waiter;

            o->waiter = NULL;
            if (c->ev != NULL) {
                event_active(c->ev, EV_WRITE, 0);
            }
        }
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
        o->waiter = NULL;
        ord_unref(o);
    }
}

/* See fwd_order.h. */
void
ord_wait(struct conn *c)
{
    if (c->fwd_order != NULL) {
        c->fwd_order->waiter = c;
    }
}

/* See forward.h. */
bool
forward_conn_busy(const struct conn *c)
{
    /* One reference is the connection's, one more each request's. */
    return c->fwd_order != NULL && c->fwd_order->refs > 1;
}

/* Put r on o's ahead list, sorted by seq (a new one usually goes last). */
static void
ahead_add(struct fwd_order *o, struct fwd_req *r)
{
    struct fwd_req *at;

    if (r->ahead) {
        return;
    }
    TAILQ_FOREACH_REVERSE(at, &o->ahead, fwd_req_list, alink)
    {
        if (at->seq <= r->seq) {
            break;
        }
    }
    if (at != NULL) {
        TAILQ_INSERT_AFTER(&o->ahead, at, r, alink);
    } else {
        TAILQ_INSERT_HEAD(&o->ahead, r, alink);
    }
    r->ahead = true;
}

static void
ahead_remove(struct fwd_order *o, struct fwd_req *r)
{
    if (!r->ahead) {
        return;
    }
    TAILQ_REMOVE(&o->ahead, r, alink);
    r->ahead = false;
}

/* Unlink o's first held request. */
static struct fwd_req *
held_pop(struct fwd_order *o)
{
    struct fwd_req *r = TAILQ_FIRST(&o->held);

    TAILQ_REMOVE(&o->held, r, link);
    r->held_up = NULL;
    o->nheld--;
    o->held_bytes -= evbuffer_get_length(r->again);
    return r;
}

/* Arm o's timer for its first held request's deadline (or stop it). */
static void
ord_arm(struct fwd_order *o)
{
    if (o->timer != NULL) {
        fw_arm(o->timer, TAILQ_FIRST(&o->held));
    }
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
    while (!TAILQ_EMPTY(&o->held) && TAILQ_FIRST(&o->held)->deadline <= now) {
        req_fail(held_pop(o), "forward timeout", FWD_ETIMEOUT);
    }
    ord_arm(o);
    if (TAILQ_EMPTY(&o->ahead)) {
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
    struct fwd_req   *last = TAILQ_LAST(&o->held, fwd_req_list);

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
    r->deadline = r->give_up + fw_timeout_ms(o->fw);
    if (last == NULL || last->seq < r->seq) {
        TAILQ_INSERT_TAIL(&o->held, r, link);
    } else {
        /* Sent before some held one and bounced back since. */
        struct fwd_req *at;

        TAILQ_FOREACH(at, &o->held, link)
        {
            if (at->seq >= r->seq) {
                break;
            }
        }
        TAILQ_INSERT_BEFORE(at, r, link);
    }
    o->nheld++;
    o->held_bytes += len;
    if (TAILQ_FIRST(&o->held) == r) {
        ord_arm(o);
    }
    if (TAILQ_EMPTY(&o->ahead)) {
        ord_release(o);
    }
}

/* Whether a request of r's connection earlier than r is ahead or held. */
static bool
ord_earlier(const struct fwd_order *o, const struct fwd_req *r)
{
    const struct fwd_req *a = TAILQ_FIRST(&o->ahead);
    const struct fwd_req *h = TAILQ_FIRST(&o->held);

    if (a == r) {
        a = TAILQ_NEXT(r, alink);
    }
    return (a != NULL && a->seq < r->seq) || (h != NULL && h->seq < r->seq);
}

/* See fwd_order.h. */
bool
ord_admit(struct fwd_worker *fw, struct conn *c, struct fwd_req *r, struct fwd_up *to)
{
    struct fwd_order *o = ord_get(fw, c);

    r->ord = o;
    if (o == NULL) {
        return false;
    }
    o->refs++;
    r->seq = o->next_seq++;
    if (!TAILQ_EMPTY(&o->ahead) || !TAILQ_EMPTY(&o->held)) {
        /* An episode: wait, unless this follows what was released to
         * the same upstream with nothing retried since. */
        if (!TAILQ_EMPTY(&o->held) || o->up != to) {
            ord_hold(r, to);
            return true;
        }
        ahead_add(o, r);
    }
    return false;
}

/* See fwd_order.h. */
bool
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

/* See fwd_order.h. */
void
ord_leave(struct fwd_req *r)
{
    struct fwd_order *o = r->ord;

    if (o == NULL) {
        return;
    }
    r->ord = NULL;
    if (r->ahead) {
        ahead_remove(o, r);
        if (TAILQ_EMPTY(&o->ahead)) {
            ord_release(o);
        }
    }
    ord_unref(o);
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
    while (TAILQ_EMPTY(&o->ahead) && !TAILQ_EMPTY(&o->held)) {
        struct fwd_up *to = TAILQ_FIRST(&o->held)->held_up;

        o->up = to;
        while (!TAILQ_EMPTY(&o->held) && TAILQ_FIRST(&o->held)->held_up == to) {
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
