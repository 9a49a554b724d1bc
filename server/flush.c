/*
 * flush: a client's flush_all across the cluster as one CAS floor F
 * (memcached's oldest_cas): every active member drops every item, image
 * and import with a CAS below F and mints above it from then on, so all
 * owners agree on what the flush removed whatever order the flush and
 * the images reach them in; a node joining meanwhile gets the floor with
 * its handoff batches (op_broadcast). See flush.h.
 *
 * F is proposed before it is known: the node the client sent the flush
 * to proposes P, its CAS clock FLUSH_LEAD_MS ahead (and above its own
 * counter), and every member it asks raises its counter to P as it
 * answers with what the counter was. When every answer is below P
 * (clocks within FLUSH_LEAD_MS of the proposer's), F = P: everything a
 * member held when asked is below F and everything it mints after is
 * above, so a write that reaches a member after the flush did survives
 * it, as in memcached. A member ahead by more makes F its counter
 * (counted: flush_skewed), and the writes other members took between
 * their answer and the floor may then fall below F: on every owner
 * alike, as a write concurrent with the flush.
 */
#include "config.h"
#include "server/flush.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "lib/util.h"
#include "ring/ring.h"
#include "server/cluster.h"
#include "server/conn.h"
#include "server/forward.h"
#include "server/fwd_order.h"
#include "server/log.h"
#include "server/proto_util.h"
#include "server/replicate.h"
#include "server/store.h"
#include "server/thread.h"

/* How far ahead of the proposer's clock a proposed floor is: above what
 * any member within that skew has minted by the time the question
 * reaches it. A member's CAS clock runs that much ahead of its wall
 * clock after a flush, until the wall catches up (no cost but that). */
#define FLUSH_LEAD_MS 100

/* What flush_counters reports (any thread). */
static uint64_t flush_asked, flush_skewed;

enum flush_phase {
    FL_WAIT, /* for the connection's earlier requests */
    FL_ASK,  /* rc_flush_cas to every member */
    FL_SET,  /* rc_flush <floor> to every member */
    FL_LINE, /* a delayed flush: rc_flush <floor> <when> to every member */
};

/* One client flush_all in flight (c->flush while c waits for it). */
struct flush_op {
    struct worker    *w;
    struct conn      *c; /* NULL once the connection closed */
    struct out_chunk *hold;
    enum flush_phase  phase;
    uint32_t          pending; /* calls in flight, plus one while sending */
    uint32_t          failed;
    uint64_t          floor;    /* FL_ASK: the proposal, or a larger counter seen */
    uint64_t          proposal; /* FL_ASK: what every member raised its counter to */
    int32_t           delay;
    bool              noreply;
};

static void op_release(struct flush_op *op);

static struct store *
op_store(const struct flush_op *op)
{
    return op->w->srv->store;
}

/* See flush.h. */
bool
flush_cluster_wide(const struct conn *c)
{
    struct cluster *cl = c->w->srv != NULL ? c->w->srv->cluster : NULL;

    return cl != NULL && !c->peer && cluster_view(cl)->ring != NULL;
}

/* See flush.h. */
bool
flush_refused(const struct conn *c)
{
    struct cluster *cl = c->w->srv != NULL ? c->w->srv->cluster : NULL;

    return cl != NULL && !c->peer && cluster_view(cl)->ring == NULL;
}

/* A member's reply: "CAS <n>" to rc_flush_cas, "OK" to the others. */
static void
op_reply(void *arg, const char *line, size_t len, enum fwd_err err)
{
    struct flush_op *op = arg;
    uint64_t         n;

    (void)err;
    if (line == NULL) {
        op->failed++;
    } else if (op->phase == FL_ASK) {
        if (len > 4 && memcmp(line, "CAS ", 4) == 0 && util_parse_u64n(line + 4, len - 4, &n)) {
            if (n > op->proposal && op->floor == op->proposal) {
                __atomic_fetch_add(&flush_skewed, 1, __ATOMIC_RELAXED);
                log_msg(LOG_INFO,
                        "flush_all: a member's CAS counter is more than %d ms "
                        "ahead of this node's clock; the floor is its counter",
                        FLUSH_LEAD_MS);
            }
            op->floor = n > op->floor ? n : op->floor;
        } else {
            op->failed++;
        }
    } else if (len != 2 || memcmp(line, "OK", 2) != 0) {
        op->failed++;
    }
    if (line != NULL && op->failed > 0) {
        log_msg(LOG_INFO, "flush_all: a member answered %.*s", (int)len, line);
    }
    op_release(op);
}

/* Send line to every other active member of the current view. A node
 * that joins meanwhile gets the floor with the handoff: a source's dirty
 * tracking sends what the flush removed as deletes, and its own CAS
 * clock (store_cas_mint) is above the floor up to clock skew. */
static void
op_broadcast(struct flush_op *op, const char *line, size_t len)
{
    const struct cluster_view *v = cluster_view(op->w->srv->cluster);
    const struct ring_members *m = ring_members(v->ring);
    struct iovec               iov = { .iov_base = (void *)line, .iov_len = len };
    uint32_t                   i;

    op->pending++; /* the guard: no finish while sending */
    for (i = 0; i < m->n_nodes; i++) {
        if ((int32_t)i != v->self) {
            op->pending++;
            forward_call(op->w, m->nodes[i].addr, v->epoch, &iov, 1, op_reply, op);
        }
    }
    op_release(op);
}

/* Every member answered: the reply, and c may go on. */
static void
op_finish(struct flush_op *op)
{
    struct conn *c = op->c;

    if (c != NULL) {
        if (op->failed > 0) {
            if (!op->noreply) {
                conn_hold_add(c, op->hold, REPLICA_UNAVAILABLE "\r\n",
                              sizeof(REPLICA_UNAVAILABLE "\r\n") - 1);
            }
        } else if (!op->noreply) {
            conn_hold_add(c, op->hold, "OK\r\n", 4);
        }
        c->flush = NULL;
        conn_hold_done(c, op->hold);
    }
    free(op);
}

static void
op_release(struct flush_op *op)
{
    char line[48];
    int  n;

    if (--op->pending > 0) {
        return;
    }
    if (op->phase == FL_ASK && op->failed == 0) {
        /* Every counter is below floor: each member raises its floor to
         * it, so every write it held is flushed and every later one is
         * minted above. */
        op->phase = FL_SET;
        store_flush_at(op_store(op), op->floor, -1);
        n = snprintf(line, sizeof(line), "rc_flush %" PRIu64 "\r\n", op->floor);
        op_broadcast(op, line, (size_t)n);
        return;
    }
    op_finish(op);
}

/* The connection's earlier requests are answered: start. */
static void
op_begin(struct flush_op *op)
{
    struct store *s = op_store(op);
    uint64_t      next;
    char          line[64];
    int           n;

    if (op->delay > 0) {
        uint64_t floor, when_floor;
        int64_t  when;

        /* One floor and one moment for every member (a relative delay
         * would land on each at its own moment). */
        op->phase = FL_LINE;
        store_flush(s, store_exptime(s, op->delay));
        store_flush_state(s, &floor, &when_floor, &when);
        n = snprintf(line, sizeof(line), "rc_flush %" PRIu64 " %" PRId64 "\r\n", when_floor, when);
        op_broadcast(op, line, (size_t)n);
        return;
    }
    op->phase = FL_ASK;
    next = store_cas_next(s);
    op->proposal = store_cas_clock_ahead(s, FLUSH_LEAD_MS);
    if (op->proposal < next) {
        op->proposal = next;
    }
    op->floor = op->proposal;
    store_cas_raise(s, op->proposal);
    n = snprintf(line, sizeof(line), "rc_flush_cas %" PRIu64 "\r\n", op->proposal);
    op_broadcast(op, line, (size_t)n);
}

/* c closed: the flush goes on (or, not begun, is dropped) unanswered. */
static void
op_gone(void *arg)
{
    struct flush_op *op = arg;

    op->c = NULL;
    op->hold = NULL;
    if (op->phase == FL_WAIT) {
        free(op);
    }
}

/* See flush.h. */
bool
flush_blocks(struct conn *c)
{
    struct flush_op *op = c->flush;

    if (op == NULL) {
        return false;
    }
    if (op->phase == FL_WAIT) {
        /* Our own hold is one of c's; any other is an earlier request's,
         * as is a relayed noreply request still in flight. */
        if (c->nholds > 1 || forward_conn_busy(c)) {
            ord_wait(c);
            return true;
        }
        op_begin(op);
    }
    return c->flush != NULL;
}

/* See flush.h. */
void
flush_start(struct conn *c, int32_t delay, bool noreply)
{
    struct flush_op *op = calloc(1, sizeof(*op));

    if (op == NULL) {
        if (!noreply) {
            conn_out_add(c, REPLICA_UNAVAILABLE "\r\n", sizeof(REPLICA_UNAVAILABLE "\r\n") - 1);
        }
        return;
    }
    op->w = c->w;
    op->c = c;
    op->delay = delay;
    op->noreply = noreply;
    op->phase = FL_WAIT;
    /* A hold even with noreply: c's output then waits for it, which is
     * what puts c to sleep until the flush is done. */
    op->hold = conn_out_hold(c, op, op_gone);
    c->flush = op;
    flush_blocks(c);
}

/* See flush.h. */
void
flush_peer_cas(struct conn *c, const struct token *t, int ntok)
{
    struct store *s = c->w->srv->store;
    uint64_t      proposal = 0, was;
    char          line[40];
    int           n;

    c->noreply = false;
    if (!c->peer || ntok > 2 || (ntok == 2 && !proto_parse_u64(&t[1], &proposal))) {
        REPLY(c, "CLIENT_ERROR usage: rc_flush_cas [<proposed floor>] (cluster peers only)");
        return;
    }
    /* What the counter was, and every CAS minted from here on above the
     * proposal (a write that comes after the question survives the
     * flush). Without a proposal (a node before it): the counter only. */
    was = store_cas_next(s);
    store_cas_raise(s, proposal);
    __atomic_fetch_add(&flush_asked, 1, __ATOMIC_RELAXED);
    n = snprintf(line, sizeof(line), "CAS %" PRIu64 "\r\n", was);
    conn_out_add(c, line, (size_t)n);
}

/* See flush.h. */
void
flush_counters(uint64_t *asked, uint64_t *skewed)
{
    *asked = __atomic_load_n(&flush_asked, __ATOMIC_RELAXED);
    *skewed = __atomic_load_n(&flush_skewed, __ATOMIC_RELAXED);
}

/* See flush.h. */
void
flush_peer_floor(struct conn *c, const struct token *t, int ntok)
{
    uint64_t floor, when = 0;

    c->noreply = false;
    if (!c->peer || ntok < 2 || ntok > 3 || !proto_parse_u64(&t[1], &floor) ||
        (ntok == 3 && (!proto_parse_u64(&t[2], &when) || when > INT64_MAX))) {
        REPLY(c, "CLIENT_ERROR usage: rc_flush <floor> [<unix time>] (cluster peers only)");
        return;
    }
    /* Without a moment: flush_all now, which cancels a delayed one. */
    store_flush_at(c->w->srv->store, floor, ntok == 3 ? (int64_t)when : -1);
    REPLY(c, "OK");
}
