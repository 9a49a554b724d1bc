/*
 * route: one decision per keyed request and the path it then takes (see
 * route.h). The decision reads the published cluster view and the health
 * state lock-free; relaying goes through the worker's upstreams
 * (server/forward.c), replication through server/replicate.c.
 */
#include "config.h"
#include "server/route.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "lib/util.h"
#include "server/cluster.h"
#include "server/conn.h"
#include "server/forward.h"
#include "server/proto_util.h"
#include "server/replicate.h"
#include "server/stats.h"
#include "server/store.h"
#include "server/thread.h"

#define LINE_FWD_MAX 2048 /* a relayed command line (proto_text's line limit) */
/* Parts (owner, next owner) a plain client's multi-get is split over, at
 * most; keys of further ones are answered as misses. */
#define GET_OWNERS_MAX 64

/*
 * The decision
 */

/* Whether this node must not serve anything right now: it stalled (the
 * ticker is late, or a post-stall heartbeat round has not finished), no
 * peer has answered it for a while (it may be cut off, and the others may
 * be acting without it), or a peer told it a higher epoch exists. */
static bool
live_unsafe(const struct cluster_live *l)
{
    uint64_t tick = __atomic_load_n(&l->tick_ms, __ATOMIC_ACQUIRE);

    if (__atomic_load_n(&l->suspect, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&l->isolated, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&l->behind_epoch, __ATOMIC_RELAXED) != 0) {
        return true;
    }
    return tick != 0 && (uint64_t)util_coarse_ms() > tick + CLUSTER_STALL_MS;
}

/* The first owner of list[0..n) not seen down (list[0] if all are): where a
 * read goes. Every owner holds every acknowledged write (a write is
 * acknowledged only once all owners applied it), so any live one is
 * current. */
static uint32_t
first_live(const struct cluster_view *v, const uint32_t *list, uint32_t n)
{
    uint32_t k;

    for (k = 0; v->live != NULL && k < n; k++) {
        if (!cluster_mask_has(v->live->down, list[k])) {
            return list[k];
        }
    }
    return list[0];
}

/* The acting primary of list[0..n): the first owner the pending transition
 * does not declare failed (and that is not back: cluster_view_gone). Only
 * the store's authority (a Prepare of `remove --failed`) moves the primary,
 * never this node's own guess. store_only: the first not declared failed,
 * whatever this node's heartbeats see (list[0] if all are). */
static uint32_t
first_acting_by(const struct cluster_view *v, const uint32_t *list, uint32_t n, bool store_only)
{
    uint32_t k;

    for (k = 0; k < n; k++) {
        if (!(store_only ? cluster_view_failed(v, list[k]) : cluster_view_gone(v, list[k]))) {
            return list[k];
        }
    }
    return list[0];
}

/* The acting primary of list[0..n) (see first_acting_by). */
static inline uint32_t
first_acting(const struct cluster_view *v, const uint32_t *list, uint32_t n)
{
    return first_acting_by(v, list, n, false);
}

/* An owner of list[0..n), not declared failed, that this node sees down
 * (the write could not reach it): its index in list, or -1. */
static int
owner_down(const struct cluster_view *v, const uint32_t *list, uint32_t n)
{
    uint32_t k;

    for (k = 0; v->live != NULL && k < n; k++) {
        if (cluster_mask_has(v->live->down, list[k]) && !cluster_view_gone(v, list[k])) {
            return (int)k;
        }
    }
    return -1;
}

/* The decision from rt's owners (already located on v); see route.h.
 * ordered: a read that must see this connection's earlier writes, which
 * may still be on their way to the key's acting primary: it is served
 * there too (relayed on the same upstream, so after them). */
static void
decide(const struct cluster_view *v, struct route *rt, bool declared, bool ordered)
{
    const uint32_t *list = rt->owners;
    uint32_t        n = rt->n_owners;
    enum route_do   away = declared ? ROUTE_MOVED : ROUTE_FORWARD;
    bool            live = n > 1 && v->live != NULL;
    uint32_t        k;

    rt->replicate = false;
    /* Where a TRYAGAIN goes: a plain client's request is relayed there and
     * retried with a backoff (plain_tryagain_forwards). The acting
     * primary, not list[0]: from the Prepare of `remove --failed` on,
     * list[0] may be the failed node, and a read relayed to it whose only
     * other owner is this node has nowhere to fall back to. */
    rt->target = n > 1 ? first_acting(v, list, n) : list[0];
    if (v->live != NULL && live_unsafe(v->live)) {
        rt->action = ROUTE_TRYAGAIN;
        return;
    }
    if (v->fence.n > 0 && arcset_has(&v->fence, rt->hash)) {
        rt->action = ROUTE_TRYAGAIN;
        return;
    }
    if (v->live != NULL && __atomic_load_n(&v->live->recovering, __ATOMIC_RELAXED) &&
        list_has(list, n, v->self)) {
        /* Ours, and we hold nothing: a read may go to a replica, unless
         * it must follow this connection's writes (ordered): those wait
         * for the primary (TRYAGAIN, relayed in order by a plain
         * connection's upstream), and so does the read. */
        if (!rt->write && live && !ordered) {
            for (k = 0; k < n; k++) {
                if ((int32_t)list[k] != v->self && !cluster_mask_has(v->live->down, list[k])) {
                    break;
                }
            }
            if (k < n) {
                rt->target = list[k];
                rt->action = away;
                return;
            }
        }
        rt->action = ROUTE_TRYAGAIN;
        return;
    }
    if (rt->write) {
        /* Writes: at the acting primary, which applies them and waits for
         * every other owner. An owner seen down that the store has not
         * declared failed could not take the write: it fails at once
         * (UNAVAILABLE) rather than being acknowledged with fewer copies,
         * until `ringctl watch` (or remove --failed) declares it failed. */
        uint32_t acting = n > 1 ? first_acting(v, list, n) : list[0];
        int      down = live ? owner_down(v, list, n) : -1;

        if (down >= 0) {
            rt->target = list[down];
            rt->action = ROUTE_UNAVAILABLE;
            return;
        }
        if ((int32_t)acting != v->self) {
            rt->target = acting;
            rt->action = away;
            return;
        }
        /* Taking over the writes of a failed primary for an arc this node
         * is importing (it purged it and is being refilled) would run
         * add/incr/cas on an empty copy that the import then overwrites:
         * the write waits for the transition instead (finding 9). */
        if (acting != list[0] && v->importing.n > 0 && arcset_has(&v->importing, rt->hash)) {
            rt->action = ROUTE_TRYAGAIN;
            return;
        }
        rt->action = ROUTE_SERVE;
        rt->replicate = n > 1;
        return;
    }
    if (ordered && live) {
        uint32_t target = first_acting(v, list, n);

        if (cluster_mask_has(v->live->down, target)) {
            target = first_live(v, list, n);
        }
        if ((int32_t)target == v->self) {
            rt->action = ROUTE_SERVE;
            return;
        }
        rt->target = target;
        rt->action = away;
        return;
    }
    /* Reads: any owner, except an owner importing the arc in a transition:
     * it purged the arc and is being refilled, so it would answer misses. */
    for (k = 0; k < n; k++) {
        if ((int32_t)list[k] == v->self &&
            (k == 0 || v->importing.n == 0 || !arcset_has(&v->importing, rt->hash))) {
            rt->action = ROUTE_SERVE;
            return;
        }
    }
    rt->target = live ? first_live(v, list, n) : list[0];
    rt->action = away;
}

/* Fill rt for a hash on v and look its owners up (once). */
static void
locate(const struct cluster_view *v, uint64_t hash, bool write, struct route *rt)
{
    rt->view = v;
    rt->view_gen = v->gen;
    rt->hash = hash;
    rt->write = write;
    rt->replicate = false;
    rt->action = ROUTE_SERVE;
    rt->n_owners = 0;
    if (v->ring != NULL) {
        rt->n_owners = ring_locate(v->ring, hash,
                                   v->replicas < RING_R_MAX ? v->replicas : RING_R_MAX, rt->owners);
    }
}

/* See route.h. */
void
route_decide(const struct cluster_view *v, uint64_t hash, bool write, bool declared,
             struct route *rt)
{
    locate(v, hash, write, rt);
    if (rt->n_owners > 0) {
        decide(v, rt, declared, false);
    }
}

/* Does this connection route by epoch (MOVED) rather than being
 * forwarded? Peers are never forwarded either. */
static inline bool
conn_declared(const struct conn *c)
{
    return c->declared_epoch != 0 || c->peer;
}

static inline struct cluster *
conn_cluster(const struct conn *c)
{
    return c->w->srv != NULL ? c->w->srv->cluster : NULL;
}

/*
 * A declared connection whose write of a key was just redirected (MOVED:
 * this node's view names another acting primary) has its reads of that
 * key redirected the same way, until its next write or a new view. The
 * connection may be a relaying node's upstream that sent the write here
 * by its own view (it saw the primary recovering a moment longer) with a
 * client's get pipelined behind it: read here, the get would miss the
 * write it follows, which the relaying node re-sends to the primary
 * (docs/guarantees.md, "Per connection"); MOVED, the relaying node holds
 * it behind that write (fwd_order).
 */
static void
follow_redirect(struct conn *c, const struct cluster_view *v, struct route *rt)
{
    if (!conn_declared(c) || rt->n_owners == 0) {
        return;
    }
    if (rt->write) {
        c->moved_on = rt->action == ROUTE_MOVED;
        c->moved_to = (int32_t)rt->target;
        c->moved_hash = rt->hash;
        c->moved_gen = v->gen;
    } else if (c->moved_on && rt->action == ROUTE_SERVE && c->moved_hash == rt->hash &&
               c->moved_gen == v->gen) {
        rt->action = ROUTE_MOVED;
        rt->target = (uint32_t)c->moved_to;
    }
}

/* The decision for c's request on view v (ordered: see decide). */
static void
decide_for(struct conn *c, const struct cluster_view *v, uint64_t hash, bool write, bool ordered,
           struct route *rt)
{
    locate(v, hash, write, rt);
    if (rt->n_owners > 0) {
        STATS_ADD(&c->w->stats, route_lookups, 1);
        decide(v, rt, conn_declared(c), ordered);
        follow_redirect(c, v, rt);
    }
}

/* The decision for c's request; without a cluster SERVE with no view. */
static void
route_conn(struct conn *c, uint64_t hash, bool write, struct route *rt)
{
    struct cluster *cl = conn_cluster(c);

    if (cl == NULL) {
        /* A plain single-node cache: serve, no view, no owners. */
        *rt = (struct route){ .action = ROUTE_SERVE, .write = write, .hash = hash };
        return;
    }
    decide_for(c, cluster_view(cl), hash, write, !write && c->get_ordered, rt);
    if (rt->view->ring == NULL) {
        rt->action = ROUTE_REFUSE;
    }
}

/*
 * Answers and relaying
 */

/* The epoch to name in a TRYAGAIN reply: a higher epoch a peer runs, when
 * this node learnt it is behind, so the client refreshes. */
static uint64_t
reply_epoch(const struct cluster_view *v)
{
    uint64_t b = v->live != NULL ? __atomic_load_n(&v->live->behind_epoch, __ATOMIC_RELAXED) : 0;

    return b > v->epoch ? b : v->epoch;
}

/* Queue the reply for a keyed request this node does not serve and will
 * not forward: TRYAGAIN when fenced, else MOVED (a plain client only gets
 * MOVED where forwarding is impossible). */
static void
reply_route(struct conn *c, const struct route *rt)
{
    const struct cluster_view *v = rt->view;
    char                       buf[128 + RING_ADDR_MAX];
    int                        n;

    if (rt->action == ROUTE_REFUSE) {
        REPLY(c, NO_MEMBERSHIP_REPLY);
        return;
    }
    if (rt->action == ROUTE_UNAVAILABLE) {
        const struct ring_members *m = ring_members(v->ring);

        n = snprintf(buf, sizeof(buf),
                     "SERVER_ERROR UNAVAILABLE owner %.64s is down: writes to its keys fail "
                     "until it is declared failed\r\n",
                     rt->target < m->n_nodes ? m->nodes[rt->target].id : "?");
        cluster_count(conn_cluster(c), CLUSTER_CTR_UNAVAILABLE);
        if (n > 0 && (size_t)n < sizeof(buf)) {
            proto_reply(c, buf, (size_t)n);
        }
        return;
    }
    if (rt->action == ROUTE_TRYAGAIN) {
        n = snprintf(buf, sizeof(buf), "SERVER_ERROR TRYAGAIN %" PRIu64 "\r\n", reply_epoch(v));
    } else {
        n = snprintf(buf, sizeof(buf), "SERVER_ERROR MOVED %" PRIu64 " %s\r\n", v->epoch,
                     cluster_view_addr(v, rt->target));
    }
    cluster_count(conn_cluster(c),
                  rt->action == ROUTE_TRYAGAIN ? CLUSTER_CTR_TRYAGAIN : CLUSTER_CTR_MOVED);
    if (n > 0 && (size_t)n < sizeof(buf)) {
        proto_reply(c, buf, (size_t)n);
    }
}

/* A plain client cannot retry a fenced key: its request goes to the
 * primary (maybe this node) through an upstream, which retries with a
 * backoff until the fence lifts (server/forward.c). */
static void
plain_tryagain_forwards(const struct conn *c, struct route *rt)
{
    if (rt->action == ROUTE_TRYAGAIN && !conn_declared(c)) {
        rt->action = ROUTE_FORWARD;
    }
}

/* Relay the command line made of tokens t[0..n-1] (noreply dropped: the
 * reply is read and discarded instead; a meta command's q likewise, its
 * quiet replies dropped by the relay: meta, quiet). */
static void
forward_tokens(struct conn *c, const struct route *rt, const struct token *t, int n, bool meta,
               unsigned quiet)
{
    char         buf[LINE_FWD_MAX + 8];
    struct iovec iov;
    size_t       len = 0;
    int          i;

    for (i = 0; i < n; i++) {
        if (len + t[i].len + 3 > sizeof(buf)) {
            proto_reply_line(c, PROTO_ERR_FORMAT);
            return;
        }
        if (i > 0) {
            buf[len++] = ' ';
        }
        memcpy(buf + len, t[i].p, t[i].len);
        len += t[i].len;
    }
    buf[len++] = '\r';
    buf[len++] = '\n';
    iov.iov_base = buf;
    iov.iov_len = len;
    if (meta) {
        forward_meta(c, cluster_view_addr(rt->view, rt->target), rt->view->epoch, &iov, 1, quiet);
        return;
    }
    forward_request(c, cluster_view_addr(rt->view, rt->target), rt->view->epoch, FWD_LINE, &iov, 1,
                    !c->noreply);
}

/* route_line and route_meta. */
static bool
route_tokens(struct conn *c, uint64_t hash, const struct token *t, int nfwd, bool meta,
             unsigned quiet, struct route *rt)
{
    route_conn(c, hash, true, rt);
    if (rt->action == ROUTE_SERVE) {
        return true;
    }
    plain_tryagain_forwards(c, rt);
    if (rt->action == ROUTE_FORWARD) {
        cluster_count(conn_cluster(c), CLUSTER_CTR_FORWARDED);
        forward_tokens(c, rt, t, nfwd, meta, quiet);
    } else {
        reply_route(c, rt);
    }
    return false;
}

/* See route.h. */
bool
route_line(struct conn *c, uint64_t hash, const struct token *t, int nfwd, struct route *rt)
{
    return route_tokens(c, hash, t, nfwd, false, 0, rt);
}

/* See route.h. */
bool
route_meta(struct conn *c, uint64_t hash, const struct token *t, int nfwd, unsigned quiet,
           struct route *rt)
{
    return route_tokens(c, hash, t, nfwd, true, quiet, rt);
}

/* The data block of a relayed storage command is in: send it. */
static void
forward_block_done(struct conn *c)
{
    struct iovec iov;

    c->noreply = c->fwd_noreply;
    if (c->fwd_buf[c->fwd_len - 2] != '\r' || c->fwd_buf[c->fwd_len - 1] != '\n') {
        REPLY(c, "CLIENT_ERROR bad data chunk");
    } else {
        iov.iov_base = c->fwd_buf;
        iov.iov_len = c->fwd_len;
        if (c->fwd_meta) {
            forward_meta(c, c->fwd_addr, c->fwd_epoch, &iov, 1, c->fwd_quiet);
        } else {
            forward_request(c, c->fwd_addr, c->fwd_epoch, FWD_LINE, &iov, 1, !c->noreply);
        }
    }
    free(c->fwd_buf);
    c->fwd_buf = NULL;
}

/* A relayed storage command (tokens t[0..n-1]) that cannot be stored:
 * delete its key at the owner (`md <key> [b]` for an ms, whose key may be
 * base64; `delete <key>` for the classic ones), the reply read and dropped. */
static void
drop_at_owner(struct conn *c, const struct route *rt, const struct token *t, int n)
{
    char         buf[16 + 4 * KEY_MAX];
    struct iovec iov;
    size_t       len = 0;
    bool         bin = false;
    int          i;

    if (n < 2 || t[1].len > 4 * KEY_MAX) {
        return;
    }
    for (i = 3; c->fwd_meta && i < n; i++) {
        bin = bin || (t[i].len == 1 && t[i].p[0] == 'b');
    }
    len = (size_t)snprintf(buf, sizeof(buf), "%s %.*s%s\r\n", c->fwd_meta ? "md" : "delete",
                           (int)t[1].len, t[1].p, bin ? " b" : "");
    iov.iov_base = buf;
    iov.iov_len = len;
    forward_request(c, cluster_view_addr(rt->view, rt->target), rt->view->epoch, FWD_LINE, &iov, 1,
                    false);
}

/*
 * A plain client's storage command for a key owned elsewhere: keep the
 * command line (tokens t[0..n-1], without noreply) in fwd_buf and read the
 * data block in after it; forward_block_done sends both.
 */
static void
forward_update(struct conn *c, const struct route *rt, const struct token *t, int n, size_t vlen)
{
    size_t line = 0;
    int    i;

    if (vlen > c->w->srv->settings.item_size_max) {
        /* Refused here without reading the block, but the owner must drop
         * its older value as it would for a failed store (memcached): a
         * delete goes there first, its reply dropped. */
        drop_at_owner(c, rt, t, n);
        STATS_ADD(&c->w->stats, store_too_large, 1);
        REPLY(c, "SERVER_ERROR object too large for cache");
        proto_swallow(c, vlen + 2);
        return;
    }
    for (i = 0; i < n; i++) {
        line += t[i].len + 1;
    }
    c->fwd_buf = malloc(line + 1 + vlen + 2);
    if (c->fwd_buf == NULL) {
        REPLY(c, "SERVER_ERROR out of memory storing object");
        proto_swallow(c, vlen + 2);
        return;
    }
    line = 0;
    for (i = 0; i < n; i++) {
        if (i > 0) {
            c->fwd_buf[line++] = ' ';
        }
        memcpy(c->fwd_buf + line, t[i].p, t[i].len);
        line += t[i].len;
    }
    c->fwd_buf[line++] = '\r';
    c->fwd_buf[line++] = '\n';
    c->fwd_len = line + vlen + 2;
    c->fwd_noreply = c->noreply;
    c->fwd_epoch = rt->view->epoch;
    snprintf(c->fwd_addr, sizeof(c->fwd_addr), "%s", cluster_view_addr(rt->view, rt->target));
    c->nread_it = NULL;
    proto_read_block(c, c->fwd_buf + line, vlen + 2, forward_block_done);
}

/* See route.h. */
enum route_do
route_update(struct conn *c, uint64_t hash, const struct token *t, int nfwd, size_t vlen)
{
    c->fwd_meta = false;
    return route_update_meta(c, hash, t, nfwd, vlen, false, 0);
}

/* See route.h. */
enum route_do
route_update_meta(struct conn *c, uint64_t hash, const struct token *t, int nfwd, size_t vlen,
                  bool meta, unsigned quiet)
{
    struct route *rt = &c->route;

    c->fwd_meta = meta;
    c->fwd_quiet = (uint8_t)quiet;

    route_conn(c, hash, true, rt);
    if (rt->action == ROUTE_SERVE) {
        return ROUTE_SERVE;
    }
    plain_tryagain_forwards(c, rt);
    if (rt->action == ROUTE_FORWARD) {
        cluster_count(conn_cluster(c), CLUSTER_CTR_FORWARDED);
        forward_update(c, rt, t, nfwd, vlen);
        return ROUTE_FORWARD;
    }
    reply_route(c, rt);
    return rt->action;
}

/* See route.h. */
bool
route_update_ready(struct conn *c)
{
    struct route              *rt = &c->route;
    struct cluster            *cl = conn_cluster(c);
    const struct cluster_view *v;

    if (cl == NULL) {
        return true;
    }
    /* Checked again: the data may have arrived in a later callback, after
     * a fence or a commit. The owners still hold unless a new view was
     * published since. */
    v = cluster_view(cl);
    if (v->gen != rt->view_gen) {
        decide_for(c, v, rt->hash, true, false, rt);
    } else {
        rt->view = v;
        if (rt->n_owners > 0) {
            decide(v, rt, conn_declared(c), false);
            follow_redirect(c, v, rt);
        }
    }
    if (rt->action == ROUTE_SERVE) {
        return true;
    }
    /* Cannot forward here (the data block is already in a local item,
     * after a commit moved the key): retrying is right. */
    if (rt->action == ROUTE_FORWARD) {
        rt->action = ROUTE_TRYAGAIN;
    }
    reply_route(c, rt);
    return false;
}

/*
 * Multi-gets
 */

/* A key's entry in route_get's where[]: served here, or relayed in no
 * part (its part would be past GET_OWNERS_MAX: the key is answered as a
 * miss). Any other entry is the index of the key's part. */
#define WHERE_HERE    UINT8_MAX
#define WHERE_NOWHERE (UINT8_MAX - 1)
_Static_assert(GET_OWNERS_MAX <= WHERE_NOWHERE, "a part index fits route_get's where[]");

/* A relayed part of a plain client's get: where it goes (its owner and,
 * for a plain get, the next owner to read from if that one refuses the
 * connection) and its line. */
struct relay {
    uint32_t target;
    uint32_t alt;  /* NO_ALT: none */
    size_t   keys; /* bytes of its keys, a space before each */
    size_t   off;  /* its line in the parts' buffer (part_lines) */
    size_t   len;
};
#define NO_ALT UINT32_MAX

/* The next owner of rt's key to read from after rt->target: the first of
 * the others, in preference order, that is not this node (which would
 * have served the read); NO_ALT for writes or when there is none. Only
 * the view decides, not the health table. */
static uint32_t
fallback(const struct route *rt)
{
    uint32_t k;

    if (rt->write) {
        return NO_ALT;
    }
    for (k = 0; k < rt->n_owners; k++) {
        uint32_t o = rt->owners[k];

        if (o != rt->target && (int32_t)o != rt->view->self) {
            return o;
        }
    }
    return NO_ALT;
}

/* g's first key not served here is key j of nkeys: keep where each key
 * goes from now on (keys 0..j-1 are served here). -1: out of memory. */
static int
keep_where(struct route_get *g, size_t nkeys, size_t j)
{
    g->where = nkeys <= ROUTE_GET_KEYS ? g->fixed : malloc(nkeys);
    if (g->where == NULL) {
        return -1;
    }
    memset(g->where, WHERE_HERE, j);
    return 0;
}

/* Keep rt, the route of a gat's key served here, in g (nkeys keys in
 * all, nhere kept so far). -1: out of memory. */
static int
keep_here(struct route_get *g, size_t nkeys, size_t nhere, const struct route *rt)
{
    if (g->here == NULL) {
        g->here = nkeys <= ROUTE_GAT_KEYS ? g->fixed_here : malloc(nkeys * sizeof(*rt));
        if (g->here == NULL) {
            return -1;
        }
    }
    g->here[nhere] = *rt;
    return 0;
}

/* The part of rt's key (relayed: rt->target and its fallback), added to
 * parts[0..*nparts) if new; WHERE_NOWHERE when there are too many. */
static uint8_t
part_of(const struct route *rt, struct relay *parts, uint32_t *nparts)
{
    uint32_t alt = fallback(rt);
    uint32_t i;

    for (i = 0; i < *nparts && (parts[i].target != rt->target || parts[i].alt != alt); i++) {
        continue;
    }
    if (i == *nparts) {
        if (*nparts == GET_OWNERS_MAX) {
            return WHERE_NOWHERE;
        }
        parts[i] = (struct relay){ .target = rt->target, .alt = alt };
        (*nparts)++;
    }
    return (uint8_t)i;
}

/*
 * The lines of the parts of a get, in one buffer (the caller frees it):
 * each is cmd (and exp, the raw exptime of gat/gats), then the keys
 * g->where puts in that part, in line order, then "\r\n"; parts[].off
 * and .len say where. No owner is looked up. NULL: out of memory.
 */
static char *
part_lines(const struct route_get *g, const char *cmd, size_t ncmd, const struct token *exp,
           const char *p, const char *end, struct relay *parts, uint32_t nparts)
{
    size_t       head = ncmd + (exp != NULL ? exp->len + 1 : 0);
    size_t       total = 0, j;
    struct token k;
    char        *buf;
    uint32_t     i;

    for (i = 0; i < nparts; i++) {
        parts[i].off = total;
        parts[i].len = head;
        total += head + parts[i].keys + 2;
    }
    buf = malloc(total);
    if (buf == NULL) {
        return NULL;
    }
    for (i = 0; i < nparts; i++) {
        char *o = buf + parts[i].off;

        memcpy(o, cmd, ncmd);
        if (exp != NULL) {
            o[ncmd] = ' ';
            memcpy(o + ncmd + 1, exp->p, exp->len);
        }
    }
    for (j = 0; proto_next_key(&p, end, &k); j++) {
        struct relay *r;
        char         *o;

        if (g->where[j] >= nparts) {
            continue;
        }
        r = &parts[g->where[j]];
        o = buf + r->off + r->len;
        o[0] = ' ';
        memcpy(o + 1, k.p, k.len);
        r->len += k.len + 1;
    }
    for (i = 0; i < nparts; i++) {
        memcpy(buf + parts[i].off + parts[i].len, "\r\n", 2);
        parts[i].len += 2;
    }
    return buf;
}

/*
 * Relay the parts of a plain client's get, their lines in buf
 * (part_lines). With whole, the get has no local key and one owner: its
 * reply is relayed as is; else each owner's VALUEs are spliced in ahead
 * of the local ones and one END closes the reply. Parts are split by
 * owner and next owner, so each can fall back whole.
 */
static void
forward_get(struct conn *c, const struct cluster_view *v, char *buf, const struct relay *parts,
            uint32_t nparts, bool whole)
{
    uint32_t i;

    for (i = 0; i < nparts; i++) {
        struct iovec iov = { .iov_base = buf + parts[i].off, .iov_len = parts[i].len };

        cluster_count(conn_cluster(c), CLUSTER_CTR_FORWARDED);
        forward_read(c, cluster_view_addr(v, parts[i].target),
                     parts[i].alt != NO_ALT ? cluster_view_addr(v, parts[i].alt) : NULL, v->epoch,
                     whole ? FWD_GET_WHOLE : FWD_GET_SPLICE, &iov, 1, true);
    }
}

/* See route.h. Every key is decided once, on one view; where it goes is
 * kept in g (from its first key not served here: an all-local get keeps
 * nothing), and so is the route of each key of a gat served here. */
bool
route_get(struct conn *c, struct route_get *g, const char *cmd, size_t ncmd,
          const struct token *exp, const char *p, const char *end, size_t nkeys, bool touch)
{
    struct cluster            *cl = conn_cluster(c);
    const struct cluster_view *v = cl != NULL ? cluster_view(cl) : NULL;
    struct route               worst = { .action = ROUTE_SERVE };
    struct relay               parts[GET_OWNERS_MAX];
    uint32_t                   nparts = 0;
    size_t                     nlocal = 0, j;
    const char                *q = p;
    struct token               k;
    char                      *buf;
    bool                       whole;

    g->next = 0;
    g->next_here = 0;
    g->where = NULL;
    g->here = NULL;
    g->hash = NULL;
    /* A plain client's writes at a node that is not the key's primary are
     * relayed; while replies queued before this get are still out
     * (c->nholds), or relayed requests of it are (a noreply write leaves
     * no reply to wait for), its keys are read where those writes went, the key's
     * acting primary (on the same upstream, so after them). Fixed for the
     * whole get, as it pauses and resumes. */
    c->get_ordered = !touch && (c->nholds > 0 || forward_conn_busy(c)) && !conn_declared(c);
    if (v == NULL) {
        return true;
    }
    if (v->ring == NULL) {
        REPLY(c, NO_MEMBERSHIP_REPLY);
        return false;
    }
    /* Longer gets hash their local keys again rather than allocate. */
    g->hash = nkeys <= ROUTE_GET_KEYS ? g->fixed_hash : NULL;
    for (j = 0; j < nkeys && proto_next_key(&q, end, &k); j++) {
        struct route rt;
        uint64_t     hash = ring_hash(k.p, k.len);

        if (g->hash != NULL) {
            g->hash[j] = hash;
        }
        decide_for(c, v, hash, touch, c->get_ordered, &rt);
        if (rt.action == ROUTE_SERVE) {
            if (touch && keep_here(g, nkeys, nlocal, &rt) < 0) {
                REPLY(c, "SERVER_ERROR out of memory");
                return false;
            }
            nlocal++;
            if (g->where != NULL) {
                g->where[j] = WHERE_HERE;
            }
            continue;
        }
        plain_tryagain_forwards(c, &rt);
        if (rt.action == ROUTE_FORWARD) {
            if (g->where == NULL && keep_where(g, nkeys, j) < 0) {
                REPLY(c, "SERVER_ERROR out of memory");
                return false;
            }
            g->where[j] = part_of(&rt, parts, &nparts);
            if (g->where[j] < nparts) {
                parts[g->where[j]].keys += k.len + 1;
            }
        } else if (worst.action == ROUTE_SERVE || rt.action == ROUTE_TRYAGAIN) {
            worst = rt;
            if (rt.action == ROUTE_TRYAGAIN) {
                break;
            }
        }
    }
    /* One key not served here answers the whole get (docs/cluster.md):
     * MOVED for a declared connection, TRYAGAIN for a fenced key. */
    if (worst.action != ROUTE_SERVE) {
        reply_route(c, &worst);
        return false;
    }
    /* gat/gats at the key's primary with replicas: the new expiries are
     * replicated and the whole reply is held for the acks (replicate.h);
     * its first hold goes before any forwarded part. */
    if (touch && nlocal > 0 && v->replicas >= 2 && v->self >= 0 && replicate_gat_begin(c) < 0) {
        REPLY(c, "SERVER_ERROR out of memory");
        return false;
    }
    if (nparts == 0) {
        return true;
    }
    whole = nlocal == 0 && nparts == 1;
    buf = part_lines(g, cmd, ncmd, exp, p, end, parts, nparts);
    if (buf == NULL) {
        REPLY(c, "SERVER_ERROR out of memory");
    } else {
        forward_get(c, v, buf, parts, nparts, whole);
        free(buf);
    }
    return !whole;
}

/* See route.h. */
void
route_get_done(struct route_get *g)
{
    if (g->where != g->fixed) {
        free(g->where);
    }
    if (g->here != g->fixed_here) {
        free(g->here);
    }
    g->where = NULL;
    g->here = NULL;
    g->hash = NULL;
}

/* See route.h. */
enum route_key
route_get_key(struct conn *c, struct route_get *g, const struct token *k, bool touch,
              struct route *rt, uint64_t *hash)
{
    if (g != NULL) {
        uint32_t j = g->next++;
        uint8_t  where = g->where != NULL ? g->where[j] : WHERE_HERE;

        if (where != WHERE_HERE) {
            return ROUTE_KEY_RELAYED;
        }
        *hash = g->hash != NULL ? g->hash[j] : ring_hash(k->p, k->len);
        /* Served here: the decision stands while the get runs on in the
         * callback that made it; a gat's carries its replication plan.
         * (Without a cluster route_get kept no route.) */
        if (!touch) {
            return ROUTE_KEY_SERVE;
        }
        if (g->here != NULL) {
            *rt = g->here[g->next_here++];
            return ROUTE_KEY_SERVE;
        }
    } else {
        *hash = ring_hash(k->p, k->len);
    }
    route_conn(c, *hash, touch, rt);
    if (rt->action == ROUTE_SERVE) {
        return ROUTE_KEY_SERVE;
    }
    /* A plain client's remote keys were relayed (route_get). Otherwise
     * ownership may have moved since the line was checked (a paused get
     * resumes later): a miss, never a stale hit. */
    if (rt->action == ROUTE_FORWARD || (rt->action == ROUTE_TRYAGAIN && !conn_declared(c))) {
        return ROUTE_KEY_RELAYED;
    }
    return ROUTE_KEY_MISS;
}

/* See route.h. */
void
route_gat_key(struct conn *c, const struct route *rt, struct store_item *it)
{
    if (!rt->replicate) {
        return;
    }
    if (it != NULL && c->repl_gat != NULL) {
        replicate_gat_key(c, rt, it);
    }
    replicate_unlock(rt->hash);
}

/* See route.h. */
void
route_gat_end(struct conn *c)
{
    if (c->repl_gat != NULL) {
        replicate_gat_end(c);
    }
}

/*
 * Writes served here
 */

/* See route.h. */
void
route_write_begin(const struct route *rt)
{
    if (rt->replicate) {
        replicate_lock(rt->hash);
    }
}

/* After a local write the view may have changed under it. A write that is
 * no longer owned and not fenced would be a misrouted acknowledgement (the
 * fence barrier makes that impossible; the counter proves it). */
static void
check_misrouted(struct conn *c, const struct route *rt)
{
    struct cluster            *cl = conn_cluster(c);
    const struct cluster_view *v;
    struct route               now;

    if (cl == NULL) {
        return;
    }
    v = cluster_view(cl);
    if (v->gen == rt->view_gen) {
        return;
    }
    route_decide(v, rt->hash, true, true, &now);
    if (now.action == ROUTE_MOVED) {
        cluster_count(cl, CLUSTER_CTR_MISROUTED);
    }
}

/* See route.h. */
void
route_write_end(struct conn *c, const struct route *rt, const char *key, size_t nkey,
                uint64_t tomb_cas, const char *reply, size_t len)
{
    check_misrouted(c, rt);
    if (!rt->replicate) {
        if (reply != NULL) {
            proto_reply(c, reply, len);
        }
        return;
    }
    if (reply != NULL) {
        replicate_write(c, rt, key, nkey, NULL, tomb_cas, reply, len, c->noreply);
    }
    replicate_unlock(rt->hash);
}

/* See route.h. */
void
route_write_end_item(struct conn *c, const struct route *rt, struct store_item *it,
                     const char *reply, size_t len)
{
    check_misrouted(c, rt);
    if (!rt->replicate) {
        proto_reply(c, reply, len);
        return;
    }
    replicate_write(c, rt, store_item_key(it), it->nkey, it, 0, reply, len, c->noreply);
    replicate_unlock(rt->hash);
}

/* See route.h. */
bool
route_has_membership(const struct conn *c)
{
    const struct cluster_view *v = cluster_view(c->w->srv->cluster);

    return v->ring != NULL || v->importing.n > 0;
}

/* See route.h. */
enum route_image
route_image_check(const struct conn *c, uint64_t hash, uint64_t epoch, const char *sender)
{
    const struct cluster_view *v = cluster_view(c->w->srv->cluster);
    bool                       importing = v->importing.n > 0 && arcset_has(&v->importing, hash);
    struct route               rt;
    int                        idx;

    locate(v, hash, true, &rt);
    if (!importing && !list_has(rt.owners, rt.n_owners, v->self)) {
        return ROUTE_IMAGE_NOT_OWNER;
    }
    if (epoch == v->pending_epoch && epoch > v->epoch) {
        /* The sender committed first (docs/cluster.md COMMIT: destinations
         * first, sources last). This node does not hold the pending ring
         * to name that epoch's primary; it owns or imports the key there. */
        return ROUTE_IMAGE_OK;
    }
    if (epoch > v->epoch) {
        return ROUTE_IMAGE_AHEAD;
    }
    if (epoch + 1 < v->epoch) {
        return ROUTE_IMAGE_OLD_EPOCH;
    }
    /* The active epoch, or the one before it from a sender that has not
     * committed yet (this node committed first): the sender must be the
     * key's acting primary in the active epoch, as route.c decides it
     * (its heartbeats' view) or as the store declares it. A node removed
     * from the active epoch, or deposed by `remove --failed`, is not. */
    idx = v->ring != NULL ? ring_members_find(ring_members(v->ring), sender) : -1;
    if (idx < 0 || !list_has(rt.owners, rt.n_owners, v->self)) {
        return epoch < v->epoch ? ROUTE_IMAGE_OLD_EPOCH : ROUTE_IMAGE_NOT_PRIMARY;
    }
    if ((uint32_t)idx == first_acting(v, rt.owners, rt.n_owners) ||
        (uint32_t)idx == first_acting_by(v, rt.owners, rt.n_owners, true)) {
        return ROUTE_IMAGE_OK;
    }
    return epoch < v->epoch ? ROUTE_IMAGE_OLD_EPOCH : ROUTE_IMAGE_NOT_PRIMARY;
}
