/*
 * handoff: the source side of the copy (the destination's import is
 * server/handoff_in.c). A source stream is a PEER connection to the
 * destination's cluster port (its client port + 10000); batches are built
 * record by record straight into their wire form (a HandoffBatch is its
 * header fields followed by repeated records, so records are packed as
 * they come). Why the copy converges is told in server/store.h ("Ranges");
 * this file keeps that order on one FIFO per destination. What a walk or
 * drain step yields past a full window waits as item references (carry),
 * not as queued bytes, so a stream's output stays within its window.
 */
#include "config.h"
#include "server/handoff.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "lib/util.h"
#include "proto/frame.h"
#include "proto/ringcache.pb-c.h"
#include "server/cluster.h"
#include "server/log.h"
#include "server/peer.h"
#include "server/store.h"
#include "server/throttle.h"

#define CHUNK_BYTES     (HANDOFF_BATCH_BYTES - 1024) /* value bytes per chunk */
#define PUMP_BATCHES    32                           /* batches per pump call, then yield */
#define POLL_MS         5                            /* dirty polling while streaming */
#define BURST_MS        20                           /* token bucket depth, in ms of the rate */
#define COPY_NICE       10                           /* nice of the cluster thread while copying */
#define RECORD_TAG      0x22                         /* field 4 (records), wire type 2 */
#define ACK_PAYLOAD_MAX (1u << 20)                   /* frame payload ceiling from a destination */

enum xfer_state {
    XS_IDLE = 0,
    XS_CONNECTING, /* TCP connect, then Hello sent */
    XS_STREAMING,  /* HelloReply received */
    XS_FAILED,
};

/* A record a walk or drain step yielded while its stream's window was
 * full: sent, in order, before the stream walks or drains further. */
struct carried {
    struct store_item *it;    /* our reference; NULL: a tombstone */
    bool               drain; /* from the drain: expired by then = tombstone */
    uint8_t            nkey;  /* a tombstone's key */
    char               key[STORE_KEY_MAX];
};

/* One outgoing transfer. */
struct xfer {
    struct handoff        *h;
    char                   id[RING_ID_MAX + 1];
    char                   addr[RING_ADDR_MAX + 1];
    struct arcset          arcs;     /* our copy of the arcs it gains from us */
    uint64_t              *prefixes; /* their prefix map: the walk reads only those records */
    enum xfer_state        state;
    struct bufferevent    *bev;
    struct store_cursor    cur;
    bool                   walk_done;
    uint64_t               next_seq, unacked;
    uint8_t               *buf; /* packed records of the batch being built */
    size_t                 len, cap;
    uint32_t               nrec;
    size_t                 kv_bytes; /* key+value bytes in the batch */
    struct carried        *carry;    /* FIFO [carry_head, ncarry) of held records */
    size_t                 ncarry, carry_head, carry_cap;
    struct transfer_status st;
};

struct handoff {
    struct cluster    *cl;
    struct store      *s;
    struct event_base *base;
    struct xfer       *x;
    uint32_t           nx;
    struct arcset      track_arcs; /* predicate of the dirty tracking */
    bool               tracking;
    bool               copying;
    uint64_t           rate;   /* bytes/s in force, 0 = unlimited */
    uint64_t           cap;    /* the operator's rate (StartCopy), 0 = none */
    bool               paused; /* ringctl pause: the pump sends nothing but a fence */
    uint32_t           window; /* unacknowledged batches per stream */
    double             tokens;
    uint64_t           refill_ms;
    struct event      *pump_ev;
    bool               pump_armed;
    handoff_done_fn    fence_fn;
    void              *fence_arg;
    uint64_t           fence_start_ms;
    int                base_nice;   /* the thread's nice before the copy */
    bool               niced;       /* running at COPY_NICE now */
    bool               nice_broken; /* cannot come back: never nice again */
    /* The adaptive throttle (handoff_throttle): its controller, fed every
     * THROTTLE_TICK_MS by tick_ev from the workers' histograms. */
    struct throttle      thr;
    bool                 thr_on;
    struct server       *srv;
    struct throttle_pub *pub;
    struct event        *tick_ev;
    uint64_t             sent; /* bytes the streams queued, frames included */
};

static void pump_schedule(struct handoff *h, uint64_t ms);

/*
 * Priority. Every node of a transition copies on its cluster thread (a
 * source walks and sends, a destination imports), so during COPY that
 * thread runs at nice COPY_NICE: on a busy box the copy takes the CPU the
 * workers leave, not theirs, and the rate limit is only a ceiling (measured
 * in docs/cluster.md: nice 0 gave 4-5x the p99 of non-moving keys, 10 ~1-2x;
 * not 19: the heartbeats share this thread and must answer within 1 s). A
 * fence must not run in the background (the moving ranges wait for its
 * drain), so the thread gets its priority back first; a process that could
 * not raise it again (no CAP_SYS_NICE, RLIMIT_NICE too low) never lowers
 * it. Linux nice values are per thread (setpriority on the thread id).
 */
static void
set_background(struct handoff *h, bool bg)
{
    pid_t tid = (pid_t)syscall(SYS_gettid);

    if (bg == h->niced || h->nice_broken) {
        return;
    }
    if (bg) {
        errno = 0;
        h->base_nice = getpriority(PRIO_PROCESS, (id_t)tid);
        if (errno != 0 || h->base_nice >= COPY_NICE) {
            return;
        }
        /* Probe that the way back is allowed before going. */
        if (setpriority(PRIO_PROCESS, (id_t)tid, h->base_nice + 1) < 0) {
            return;
        }
        if (setpriority(PRIO_PROCESS, (id_t)tid, h->base_nice) < 0) {
            log_msg(LOG_INFO,
                    "handoff: the copy runs at normal priority (cannot renice back: "
                    "%s)",
                    strerror(errno));
            h->nice_broken = true;
            return;
        }
        if (setpriority(PRIO_PROCESS, (id_t)tid, COPY_NICE) == 0) {
            h->niced = true;
        }
        return;
    }
    if (setpriority(PRIO_PROCESS, (id_t)tid, h->base_nice) < 0) {
        log_msg(LOG_ERR, "handoff: cannot restore the cluster thread's priority: %s",
                strerror(errno));
        h->nice_broken = true;
        return;
    }
    h->niced = false;
}

/*
 * Source: batches
 */

/* Release every carried record of x. */
static void
carry_clear(struct xfer *x)
{
    size_t i;

    for (i = x->carry_head; i < x->ncarry; i++) {
        if (x->carry[i].it != NULL) {
            store_release(x->h->s, x->carry[i].it);
        }
    }
    free(x->carry);
    x->carry = NULL;
    x->ncarry = x->carry_head = x->carry_cap = 0;
}

/* Fail a transfer once: log, keep why for Status, close its connection.
 * A waiting fence learns it on the next pump. */
static void
xfer_fail(struct xfer *x, const char *why)
{
    if (x->state == XS_FAILED) {
        return;
    }
    carry_clear(x);
    log_msg(LOG_ERR, "handoff to %s failed: %s", x->id, why);
    snprintf(x->st.error, sizeof(x->st.error), "%s", why);
    x->state = XS_FAILED;
    if (x->bev != NULL) {
        bufferevent_free(x->bev);
        x->bev = NULL;
    }
    pump_schedule(x->h, 0);
}

/* Make room for n more bytes in the batch buffer. */
static int
batch_room(struct xfer *x, size_t n)
{
    if (x->cap - x->len >= n) {
        return 0;
    }
    {
        size_t   ncap = x->cap == 0 ? HANDOFF_BATCH_BYTES + 4096 : x->cap;
        uint8_t *nb;

        while (ncap - x->len < n) {
            ncap *= 2;
        }
        nb = realloc(x->buf, ncap);
        if (nb == NULL) {
            return -1;
        }
        x->buf = nb;
        x->cap = ncap;
    }
    return 0;
}

/* Send the batch being built (if any) as one frame. */
static void
batch_flush(struct xfer *x)
{
    struct handoff         *h = x->h;
    struct cluster         *cl = h->cl;
    Ringcache__HandoffBatch b = RINGCACHE__HANDOFF_BATCH__INIT;
    uint8_t                 hdr[FRAME_HEADER_SIZE], head[96 + CLUSTER_TOKEN_MAX];
    size_t                  hl;

    if (x->nrec == 0 || x->state != XS_STREAMING) {
        return;
    }
    b.token.data = (uint8_t *)cluster_pending_token(cl, &b.token.len);
    b.epoch = cluster_pending_epoch(cl);
    b.seq = ++x->next_seq;
    store_flush_state(h->s, &b.flush_floor, &b.flush_at_floor, &b.flush_at);
    hl = ringcache__handoff_batch__pack(&b, head);
    frame_header_write(hdr, FRAME_HANDOFF_BATCH, cluster_frame_id(cl), (uint32_t)(hl + x->len));
    if (bufferevent_write(x->bev, hdr, sizeof(hdr)) < 0 ||
        bufferevent_write(x->bev, head, hl) < 0 || bufferevent_write(x->bev, x->buf, x->len) < 0) {
        xfer_fail(x, "out of memory queueing a batch");
        return;
    }
    x->unacked++;
    x->st.items_sent += x->nrec;
    x->st.bytes_sent += x->kv_bytes;
    cluster_count_sent(cl, x->nrec, x->kv_bytes);
    h->sent += hl + x->len;
    if (h->rate > 0) {
        h->tokens -= (double)(hl + x->len);
    }
    x->len = 0;
    x->nrec = 0;
    x->kv_bytes = 0;
}

/* Append one packed record; flushes first when the batch is full. */
static void
batch_add(struct xfer *x, const Ringcache__HandoffRecord *r)
{
    size_t n = ringcache__handoff_record__get_packed_size(r);
    size_t kv = r->key.len + r->value.len;

    if (x->state != XS_STREAMING) {
        return;
    }
    if (x->nrec >= HANDOFF_BATCH_RECORDS ||
        (x->nrec > 0 && x->kv_bytes + kv > HANDOFF_BATCH_BYTES)) {
        batch_flush(x);
    }
    if (batch_room(x, n + 11) < 0) {
        xfer_fail(x, "out of memory building a batch");
        return;
    }
    x->buf[x->len++] = RECORD_TAG;
    {
        size_t v = n;

        while (v >= 0x80) {
            x->buf[x->len++] = (uint8_t)(v | 0x80);
            v >>= 7;
        }
        x->buf[x->len++] = (uint8_t)v;
    }
    x->len += ringcache__handoff_record__pack(r, x->buf + x->len);
    x->nrec++;
    x->kv_bytes += kv;
}

/* A post-image, chunked when the value is over CHUNK_BYTES (each chunk
 * in a batch of its own). */
static void
add_item(struct xfer *x, struct store_item *it, int64_t ttl)
{
    Ringcache__HandoffRecord r = RINGCACHE__HANDOFF_RECORD__INIT;
    size_t                   off = 0;

    r.key.data = (uint8_t *)store_item_key(it);
    r.key.len = it->nkey;
    r.flags = it->flags;
    r.ttl = ttl;
    r.cas = it->cas;
    r.mflags = store_item_mflags(it) & STORE_MF_REPLICATED;
    if (r.mflags & STORE_MF_ECAS) {
        r.client_cas = store_item_cas(it);
    }
    if (it->nbytes <= CHUNK_BYTES) {
        r.value.data = (uint8_t *)store_item_value(it);
        r.value.len = it->nbytes;
        batch_add(x, &r);
        return;
    }
    batch_flush(x);
    while (off < it->nbytes) {
        size_t n = it->nbytes - off < CHUNK_BYTES ? it->nbytes - off : CHUNK_BYTES;

        r.total_bytes = off == 0 ? it->nbytes : 0;
        r.offset = (uint32_t)off;
        r.value.data = (uint8_t *)store_item_value(it) + off;
        r.value.len = n;
        batch_add(x, &r);
        batch_flush(x);
        off += n;
    }
}

/* A deleted (or expired) dirty key. */
static void
add_tombstone(struct xfer *x, const char *key, size_t nkey)
{
    Ringcache__HandoffRecord r = RINGCACHE__HANDOFF_RECORD__INIT;

    r.key.data = (uint8_t *)key;
    r.key.len = nkey;
    r.tombstone = 1;
    batch_add(x, &r);
}

/* Whether a record of nkey + nbytes keeps x within its window: the
 * batches in flight once it is added (the one being built included; a
 * value over CHUNK_BYTES is a batch per chunk) are at most the window, or
 * nothing is in flight (so a value larger than the window still goes,
 * alone). */
static bool
fits(const struct xfer *x, size_t nkey, size_t nbytes)
{
    uint64_t after = x->unacked;

    if (nbytes > CHUNK_BYTES) {
        after += (x->nrec > 0) + (nbytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
    } else if (x->nrec >= HANDOFF_BATCH_RECORDS ||
               (x->nrec > 0 && x->kv_bytes + nkey + nbytes > HANDOFF_BATCH_BYTES)) {
        after += 2;
    } else {
        after += 1;
    }
    return after <= x->h->window || x->unacked == 0;
}

/* Whether x's next record must wait in its carry: it does not fit, or
 * older records wait there already. */
static bool
must_carry(const struct xfer *x, size_t nkey, size_t nbytes)
{
    return x->ncarry > x->carry_head || !fits(x, nkey, nbytes);
}

/* Hold a record (a reference to it, or a tombstone's key) at the end of
 * x's carry. */
static void
carry_push(struct xfer *x, struct store_item *it, const char *key, size_t nkey, bool drain)
{
    struct carried *e;

    if (x->state != XS_STREAMING) {
        return;
    }
    if (x->ncarry == x->carry_cap) {
        size_t          ncap = x->carry_cap == 0 ? HANDOFF_BATCH_RECORDS : x->carry_cap * 2;
        struct carried *nc = realloc(x->carry, ncap * sizeof(*nc));

        if (nc == NULL) {
            xfer_fail(x, "out of memory holding records");
            return;
        }
        x->carry = nc;
        x->carry_cap = ncap;
    }
    e = &x->carry[x->ncarry++];
    e->it = it;
    e->drain = drain;
    e->nkey = 0;
    if (it != NULL) {
        store_item_ref(it);
    } else {
        e->nkey = (uint8_t)nkey;
        memcpy(e->key, key, nkey);
    }
}

/* Send x's carried records while its window and the rate allow (their
 * TTL as of now); true when none is left. */
static bool can_send(const struct handoff *h, const struct xfer *x);
static bool
carry_send(struct xfer *x)
{
    struct handoff *h = x->h;

    while (x->carry_head < x->ncarry && can_send(h, x)) {
        struct carried *e = &x->carry[x->carry_head];
        int64_t         ttl;

        if (!(e->it == NULL ? fits(x, e->nkey, 0) : fits(x, e->it->nkey, e->it->nbytes))) {
            break;
        }
        x->carry_head++;
        if (e->it == NULL) {
            add_tombstone(x, e->key, e->nkey);
            continue;
        }
        ttl = store_item_ttl_remaining(h->s, e->it);
        if (ttl >= 0) {
            add_item(x, e->it, ttl);
        } else if (e->drain) {
            add_tombstone(x, store_item_key(e->it), e->it->nkey);
        }
        store_release(h->s, e->it);
        e->it = NULL;
    }
    batch_flush(x);
    if (x->carry_head < x->ncarry) {
        return false;
    }
    x->ncarry = x->carry_head = 0;
    return true;
}

/* store_walk callback: one live item of the stream's arcs. */
static void
walk_cb(struct store_item *it, void *arg)
{
    struct xfer *x = arg;
    int64_t      ttl = store_item_ttl_remaining(x->h->s, it);

    if (ttl < 0) {
        return;
    }
    if (must_carry(x, it->nkey, it->nbytes)) {
        carry_push(x, it, NULL, 0, false);
    } else {
        add_item(x, it, ttl);
    }
}

/* store_track_drain callback: a changed key goes to every stream whose
 * arcs hold it (R >= 2 can give one arc two new owners). */
static void
drain_cb(const char *key, size_t nkey, uint64_t hash, struct store_item *it, void *arg)
{
    struct handoff *h = arg;
    int64_t         ttl = it != NULL ? store_item_ttl_remaining(h->s, it) : -1;
    uint32_t        i;

    for (i = 0; i < h->nx; i++) {
        struct xfer *x = &h->x[i];

        if (x->state != XS_STREAMING || !arcset_has(&x->arcs, hash)) {
            continue;
        }
        if (must_carry(x, nkey, ttl >= 0 ? it->nbytes : 0)) {
            carry_push(x, ttl >= 0 ? it : NULL, key, nkey, true);
        } else if (ttl >= 0) {
            add_item(x, it, ttl);
        } else {
            add_tombstone(x, key, nkey);
        }
    }
}

/*
 * Source: the pump (walk, then drain), the window and the rate limit
 */

/* Add the tokens the rate allows since the last refill. */
static void
refill(struct handoff *h)
{
    uint64_t t = util_now_ms();
    double   burst;

    if (h->rate == 0) {
        return;
    }
    /* A shallow bucket: the copy's CPU and network use stay smooth at the
     * scale of a foreground request instead of coming in long bursts. */
    burst = (double)h->rate * BURST_MS / 1000 > (double)(HANDOFF_BATCH_BYTES * 2)
                ? (double)h->rate * BURST_MS / 1000
                : HANDOFF_BATCH_BYTES * 2;
    h->tokens += (double)(t - h->refill_ms) * (double)h->rate / 1000.0;
    if (h->tokens > burst) {
        h->tokens = burst;
    }
    h->refill_ms = t;
}

/* The rate limit does not hold a fence: its drain is short and the
 * moving ranges answer TRYAGAIN until it ends. */
static bool
can_send(const struct handoff *h, const struct xfer *x)
{
    return x->state == XS_STREAMING && x->unacked < h->window &&
           (!h->paused || h->fence_fn != NULL) &&
           (h->rate == 0 || h->fence_fn != NULL || h->tokens > 0);
}

/* Every stream walked its arcs and sent what it carried (failed ones do
 * not count). */
static bool
walks_done(const struct handoff *h)
{
    uint32_t i;

    for (i = 0; i < h->nx; i++) {
        const struct xfer *x = &h->x[i];

        if (x->state != XS_FAILED &&
            (x->state != XS_STREAMING || !x->walk_done || x->ncarry > x->carry_head)) {
            return false;
        }
    }
    return true;
}

/* A fence is done when every stream is walked, flushed and acked and the
 * dirty set is empty; it fails when a stream failed. */
static void
fence_check(struct handoff *h)
{
    handoff_done_fn fn = h->fence_fn;
    const char     *why = NULL;
    uint32_t        i;

    if (fn == NULL) {
        return;
    }
    for (i = 0; i < h->nx; i++) {
        struct xfer *x = &h->x[i];

        if (x->state == XS_FAILED) {
            why = x->st.error;
            break;
        }
        if (!x->walk_done || x->nrec > 0 || x->unacked > 0 || x->ncarry > x->carry_head) {
            return;
        }
    }
    if (why == NULL && h->tracking && store_track_lost(h->s)) {
        why = "dirty tracking lost a key (out of memory)";
    }
    if (why == NULL && h->tracking && store_track_pending(h->s) > 0) {
        return;
    }
    h->fence_fn = NULL;
    cluster_set_fence_held_ms(h->cl, util_now_ms() - h->fence_start_ms);
    fn(h->fence_arg, why);
}

/* The pump: walk each stream's arcs within its window and the rate,
 * then drain dirty keys to every stream, check the fence, and schedule
 * the next run (at once, after the rate's debt, or to poll). */
static void
pump_cb(evutil_socket_t fd, short what, void *arg)
{
    struct handoff *h = arg;
    int             budget = PUMP_BATCHES;
    uint32_t        i;
    bool            more = false;

    (void)fd;
    (void)what;
    h->pump_armed = false;
    if (!h->copying) {
        return;
    }
    refill(h);
    for (i = 0; i < h->nx; i++) {
        struct xfer *x = &h->x[i];

        if (x->state == XS_STREAMING && !carry_send(x)) {
            continue; /* its window is full again: the next ack pumps */
        }
        while (!x->walk_done && budget > 0 && can_send(h, x) && x->ncarry == 0) {
            if (store_walk(h->s, &x->cur, arcset_pred, &x->arcs, walk_cb, x,
                           HANDOFF_BATCH_RECORDS) == 0) {
                x->walk_done = true;
                x->st.walk_done = true;
            }
            batch_flush(x);
            budget--;
        }
        if (x->state == XS_STREAMING && x->unacked < h->window &&
            (!x->walk_done || x->ncarry > x->carry_head)) {
            more = true;
        }
    }
    /* Dirty keys only once every stream is up and walked: a key popped now
     * must reach every stream it belongs to. */
    if (h->tracking && walks_done(h)) {
        while (budget > 0) {
            bool   room = true;
            size_t n;

            for (i = 0; i < h->nx; i++) {
                if (h->x[i].state == XS_STREAMING &&
                    (!can_send(h, &h->x[i]) || h->x[i].ncarry > h->x[i].carry_head)) {
                    room = false;
                }
            }
            if (!room) {
                break;
            }
            n = store_track_drain(h->s, drain_cb, h, HANDOFF_BATCH_RECORDS);
            for (i = 0; i < h->nx; i++) {
                batch_flush(&h->x[i]);
            }
            budget--;
            if (n == 0) {
                break;
            }
            more = true;
        }
    }
    for (i = 0; i < h->nx; i++) {
        h->x[i].st.dirty_backlog = h->tracking ? store_track_pending(h->s) : 0;
    }
    fence_check(h);
    if (h->rate > 0 && h->tokens <= 0 && h->fence_fn == NULL) {
        pump_schedule(h, (uint64_t)(-h->tokens * 1000.0 / (double)h->rate) + 1);
    } else if (more && budget == 0) {
        pump_schedule(h, 0);
    } else {
        pump_schedule(h, h->fence_fn != NULL ? 1 : POLL_MS);
    }
}

/* Run the pump in ms (0: as soon as possible, replacing a later run). */
static void
pump_schedule(struct handoff *h, uint64_t ms)
{
    struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };

    if (!h->copying || h->pump_ev == NULL) {
        return;
    }
    if (h->pump_armed && ms > 0) {
        return;
    }
    event_del(h->pump_ev);
    event_add(h->pump_ev, &tv);
    h->pump_armed = true;
}

/*
 * Source: the adaptive throttle (server/throttle.h)
 */

/* Put the rate in force: the controller's, or the operator's alone with
 * the throttle off. The tokens earned at the old rate are kept. */
static void
apply_rate(struct handoff *h)
{
    uint64_t r = h->thr_on ? throttle_rate(&h->thr) : h->cap;

    if (r == h->rate) {
        return;
    }
    refill(h);
    if (h->rate == 0) {
        h->tokens = 0;
        h->refill_ms = util_now_ms();
    }
    h->rate = r;
    pump_schedule(h, 0);
}

/* Show the controller's figures (once handoff_throttle gave a place). */
static void
publish(struct handoff *h)
{
    if (h->pub != NULL) {
        throttle_publish(&h->thr, h->thr_on, h->pub);
    }
}

/* The node's client-request histograms now, summed over its workers,
 * and the workers' run-queue waits (none where /proc does not tell). */
static void
client_snapshot(struct handoff *h, struct throttle_sample *snap)
{
    struct latency_stats ls;

    latency_sum(h->srv, &ls);
    throttle_client_hist(&ls, &snap->hist);
    if (latency_sched_wait(h->srv, &snap->wait_ns, &snap->slices) < 0) {
        snap->wait_ns = snap->slices = 0;
    }
}

/* Every THROTTLE_TICK_MS: a snapshot for a baseline, or in a copy (not
 * paused nor in a fence) a decision. */
static void
throttle_cb(evutil_socket_t fd, short what, void *arg)
{
    struct handoff        *h = arg;
    struct throttle_sample snap;

    (void)fd;
    (void)what;
    client_snapshot(h, &snap);
    if (!h->thr.running) {
        throttle_observe(&h->thr, &snap);
        return;
    }
    if (h->fence_fn != NULL || h->paused) {
        return;
    }
    if (throttle_tick(&h->thr, &snap, h->sent, util_now_ms()) != THROTTLE_WAIT) {
        apply_rate(h);
        publish(h);
    }
}

/* See handoff.h. */
int
handoff_throttle(struct handoff *h, struct server *srv, bool on, uint64_t floor,
                 struct throttle_pub *pub)
{
    struct timeval tv = { 0, THROTTLE_TICK_MS * 1000 };

    throttle_init(&h->thr, floor);
    h->srv = srv;
    h->pub = pub;
    h->thr_on = on;
    throttle_publish(&h->thr, on, pub);
    if (!on) {
        return 0;
    }
    h->tick_ev = event_new(h->base, -1, EV_PERSIST, throttle_cb, h);
    if (h->tick_ev == NULL || event_add(h->tick_ev, &tv) < 0) {
        return -1;
    }
    return 0;
}

/* A frame from the destination: HelloReply, HandoffAck or Error. */
static void
xfer_frame(struct xfer *x, const struct frame *f)
{
    if (f->type == FRAME_HELLO && x->state == XS_CONNECTING) {
        Ringcache__Hello *m = ringcache__hello__unpack(NULL, f->length, f->payload);

        if (m == NULL) {
            xfer_fail(x, "bad HelloReply");
            return;
        }
        ringcache__hello__free_unpacked(m, NULL);
        x->state = XS_STREAMING;
        pump_schedule(x->h, 0);
    } else if (f->type == FRAME_HANDOFF_ACK && x->state == XS_STREAMING) {
        Ringcache__HandoffAck *a = ringcache__handoff_ack__unpack(NULL, f->length, f->payload);

        if (a == NULL) {
            xfer_fail(x, "bad HandoffAck");
            return;
        }
        if (a->error != NULL && a->error[0] != '\0') {
            char why[160];

            snprintf(why, sizeof(why), "destination: %s", a->error);
            ringcache__handoff_ack__free_unpacked(a, NULL);
            xfer_fail(x, why);
            return;
        }
        ringcache__handoff_ack__free_unpacked(a, NULL);
        if (x->unacked > 0) {
            x->unacked--;
        }
        pump_schedule(x->h, 0);
    } else if (f->type == FRAME_ERROR) {
        char why[160];

        peer_error_text(f, "destination refused", why, sizeof(why));
        xfer_fail(x, why);
    } else {
        xfer_fail(x, "unexpected frame from the destination");
    }
}

/* Every whole frame from the destination; a bad one fails the transfer. */
static void
xfer_read_cb(struct bufferevent *bev, void *arg)
{
    struct xfer     *x = arg;
    struct evbuffer *in = bufferevent_get_input(bev);

    while (x->state != XS_FAILED) {
        struct frame f;
        size_t       used;
        int rc = peer_read_frame(in, cluster_frame_id(x->h->cl), ACK_PAYLOAD_MAX, &f, &used);

        if (rc == FRAME_EAGAIN) {
            return;
        }
        if (rc != FRAME_OK) {
            xfer_fail(x, frame_strerror(rc));
            return;
        }
        xfer_frame(x, &f);
        if (x->state == XS_FAILED) {
            return;
        }
        evbuffer_drain(in, used);
    }
}

/* Connected: send Hello. Closed or failed: fail the transfer. */
static void
xfer_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct xfer *x = arg;

    (void)bev;
    if (what & BEV_EVENT_CONNECTED) {
        if (peer_send_hello(x->bev, x->h->cl) < 0) {
            xfer_fail(x, "out of memory");
        }
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        char why[160];

        snprintf(why, sizeof(why), "connection to %.64s: %s", x->addr,
                 (what & BEV_EVENT_EOF) ? "closed by the destination"
                                        : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        xfer_fail(x, why);
    }
}

/* Open the peer connection of a transfer and count what it will copy. */
static void
xfer_open(struct xfer *x)
{
    int rc;

    store_count(x->h->s, arcset_pred, &x->arcs, x->prefixes, &x->st.items_total,
                &x->st.bytes_total);
    cluster_count_planned(x->h->cl, x->st.items_total, x->st.bytes_total);
    x->bev = peer_dial(x->h->base, cluster_peer_tls(x->h->cl), x->addr);
    if (x->bev == NULL) {
        xfer_fail(x, "out of memory");
        return;
    }
    bufferevent_setcb(x->bev, xfer_read_cb, NULL, xfer_event_cb, x);
    bufferevent_enable(x->bev, EV_READ | EV_WRITE);
    x->state = XS_CONNECTING;
    rc = peer_connect(x->bev, x->addr);
    /* xfer_event_cb may already have failed it. */
    if (rc < 0 && x->state != XS_FAILED) {
        xfer_fail(x, rc == PEER_EADDR ? "bad destination address"
                                      : "cannot connect to the destination");
    }
}

/*
 * Source: the API
 */

/* See handoff.h. */
struct handoff *
handoff_new(struct cluster *cl, struct store *s, struct event_base *base, uint32_t window)
{
    struct handoff *h = calloc(1, sizeof(*h));

    if (h == NULL) {
        return NULL;
    }
    h->cl = cl;
    h->s = s;
    h->base = base;
    h->window = window > 0 ? window : 1;
    h->pump_ev = evtimer_new(base, pump_cb, h);
    if (h->pump_ev == NULL) {
        free(h);
        return NULL;
    }
    throttle_init(&h->thr, THROTTLE_FLOOR);
    return h;
}

/* Close every stream and forget the transfers. */
static void
xfers_clear(struct handoff *h)
{
    uint32_t i;

    for (i = 0; i < h->nx; i++) {
        struct xfer *x = &h->x[i];

        if (x->bev != NULL) {
            bufferevent_free(x->bev);
        }
        arcset_clear(&x->arcs);
        free(x->prefixes);
        carry_clear(x);
        free(x->buf);
    }
    free(h->x);
    h->x = NULL;
    h->nx = 0;
}

/* See handoff.h. The thread gets its priority back first. */
void
handoff_stop(struct handoff *h)
{
    set_background(h, false);
    h->copying = false;
    if (h->thr.running) {
        throttle_stop(&h->thr);
        publish(h);
    }
    event_del(h->pump_ev);
    h->pump_armed = false;
    xfers_clear(h);
    if (h->tracking) {
        store_track_stop(h->s);
        h->tracking = false;
    }
    arcset_clear(&h->track_arcs);
    h->fence_fn = NULL;
}

/* See handoff.h. */
void
handoff_free(struct handoff *h)
{
    if (h == NULL) {
        return;
    }
    h->niced = false; /* called after the cluster thread ended: no renice */
    handoff_stop(h);
    event_free(h->pump_ev);
    if (h->tick_ev != NULL) {
        event_free(h->tick_ev);
    }
    free(h);
}

/* Copy the sourcing arcs and start tracking them. */
int
handoff_prepare(struct handoff *h, char *err, size_t errlen)
{
    const struct arcset *sourcing = cluster_sourcing(h->cl);
    int                  rc;

    if (h->tracking || sourcing->n == 0) {
        return 0;
    }
    if (arcset_copy(&h->track_arcs, sourcing) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rc = store_track_start(h->s, arcset_pred, &h->track_arcs);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start dirty tracking (%s)",
                 rc == STORE_BUSY ? "a session is active" : "out of memory");
        arcset_clear(&h->track_arcs);
        return -1;
    }
    h->tracking = true;
    return 0;
}

/* See handoff.h. One transfer per destination of the pending
 * transition, each with its own copy of the arcs. */
int
handoff_start_copy(struct handoff *h, uint64_t rate, bool paused, char *err, size_t errlen)
{
    const struct cluster_dest *dests;
    uint32_t                   i, n_dests;

    if (handoff_prepare(h, err, errlen) < 0) {
        return -1;
    }
    /* Paused: the pump sends nothing (it polls, so the next StartCopy
     * without the flag goes on within POLL_MS); a fence is never paused. */
    h->paused = paused;
    if (h->copying) {
        if (h->cap != rate) {
            h->cap = rate;
            throttle_set_cap(&h->thr, rate);
            apply_rate(h);
            publish(h);
        }
        return 0;
    }
    h->cap = rate;
    dests = cluster_dests(h->cl, &n_dests);
    h->x = calloc(n_dests > 0 ? n_dests : 1, sizeof(*h->x));
    if (h->x == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    h->nx = n_dests;
    h->copying = true;
    set_background(h, true);
    /* Off, it is never ticked: it shows the operator's rate. */
    if (h->nx > 0) {
        struct throttle_sample snap;

        client_snapshot(h, &snap);
        throttle_start(&h->thr, &snap, h->sent, rate, util_now_ms());
        publish(h);
    }
    apply_rate(h);
    for (i = 0; i < h->nx; i++) {
        struct xfer               *x = &h->x[i];
        const struct cluster_dest *d = &dests[i];

        x->h = h;
        snprintf(x->id, sizeof(x->id), "%s", d->id);
        snprintf(x->addr, sizeof(x->addr), "%s", d->addr);
        snprintf(x->st.dest, sizeof(x->st.dest), "%s", d->id);
        store_cursor_init(&x->cur);
        if (arcset_copy(&x->arcs, &d->arcs) < 0 ||
            (x->prefixes = arcset_prefixes_new(&x->arcs, STORE_PREFIX_BITS)) == NULL) {
            xfer_fail(x, "out of memory");
            continue;
        }
        x->cur.prefixes = x->prefixes;
        xfer_open(x);
    }
    pump_schedule(h, 0);
    return 0;
}

/* See handoff.h. A node that sources nothing is done at once. */
void
handoff_fence(struct handoff *h, handoff_done_fn fn, void *arg)
{
    char     err[160];
    uint32_t n_dests;

    cluster_dests(h->cl, &n_dests);
    set_background(h, false);
    h->fence_fn = fn;
    h->fence_arg = arg;
    h->fence_start_ms = util_now_ms();
    if (!h->copying && n_dests > 0 &&
        handoff_start_copy(h, h->cap, h->paused, err, sizeof(err)) < 0) {
        h->fence_fn = NULL;
        fn(arg, err);
        return;
    }
    if (!h->copying) {
        /* Not a source: nothing to drain. */
        h->fence_fn = NULL;
        cluster_set_fence_held_ms(h->cl, 0);
        fn(arg, NULL);
        return;
    }
    pump_schedule(h, 0);
}

/* See handoff.h. */
void
handoff_fence_cancel(struct handoff *h)
{
    h->fence_fn = NULL;
}

/* See handoff.h. */
size_t
handoff_status(struct handoff *h, struct transfer_status *out, size_t max)
{
    uint32_t i;

    for (i = 0; i < h->nx && i < max; i++) {
        out[i] = h->x[i].st;
        out[i].unacked = h->x[i].unacked;
    }
    return h->nx;
}
