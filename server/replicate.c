/*
 * replicate: the primary's side (capture a post-image, fan it out, hold the
 * client's reply until the acks) and the replica's side (CAS-ordered
 * apply). Requests ride the worker's upstreams, so a post-image costs one
 * pipelined round trip per replica and no extra thread.
 */
#include "config.h"
#include "server/replicate.h"

#include <inttypes.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "lib/util.h"
#include "server/cluster.h"
#include "server/conn.h"
#include "server/forward.h"
#include "server/latency.h"
#include "server/log.h"
#include "server/proto_util.h"
#include "server/route.h"
#include "server/store.h"
#include "server/thread.h"

#define KEY_LOCKS 1024 /* key lock stripes (power of two) */

static pthread_mutex_t key_locks[KEY_LOCKS] = { [0 ... KEY_LOCKS - 1] = PTHREAD_MUTEX_INITIALIZER };

/*
 * Replica tombstones (see replicate.h for the bound). A bucket is one cache
 * line; its lock is one of TOMB_LOCKS stripes. That lock is a leaf: the
 * store's drop hook takes it under a stripe lock of the store, with any key
 * lock of the caller held (an append or incr that evicts), so the key lock
 * cannot guard the table; nothing is called while it is held.
 */
#define TOMB_LOCKS 1024
#define TOMB_SHIFT 16 /* bucket = hash bits 16..30 (stripes and key locks use others) */

_Static_assert((REPLICATE_TOMB_BUCKETS & (REPLICATE_TOMB_BUCKETS - 1)) == 0,
               "tombstone buckets are a power of two");

struct tomb_bucket {
    uint64_t hash[REPLICATE_TOMB_WAYS];
    uint64_t cas[REPLICATE_TOMB_WAYS];
    uint32_t stamp[REPLICATE_TOMB_WAYS];  /* store clock when recorded; 0 empty */
    uint8_t  origin[REPLICATE_TOMB_WAYS]; /* who removed it (replicate_origin), 0 this store */
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct tomb_bucket) == 64, "a tombstone bucket is one cache line");

static struct tomb_bucket tombs[REPLICATE_TOMB_BUCKETS];
static pthread_mutex_t    tomb_locks[TOMB_LOCKS] = { [0 ... TOMB_LOCKS - 1] =
                                                         PTHREAD_MUTEX_INITIALIZER };
static uint32_t           tomb_ttl = REPLICATE_TOMB_TTL_S; /* atomic */

#define OP_REPLY_MAX 48         /* a held reply kept in the op (an incr value is 22) */
#define OP_BIG_MAX   (2u << 20) /* a longer one (meta replies, an mg with its value) */
#define OP_POOL_MAX  256        /* free ops a worker keeps */

struct repl_op;

/* One replica's share of an op. */
struct repl_call {
    struct repl_op *op;
    uint64_t        sent_ns; /* when it was sent (latency_loop_now) */
};

/* One write waiting for its replicas (pooled per worker: ops are made and
 * finished on the worker that sent them). */
struct repl_op {
    struct repl_op   *next; /* the worker's free list */
    struct worker    *w;
    struct conn      *c;      /* NULL: noreply, or the client closed */
    struct out_chunk *hold;   /* the reply goes here */
    struct out_chunk *end;    /* gat: closes the reply held whole */
    struct repl_op   *parent; /* gat: one key's op reports to the command's */
    struct cluster   *cl;
    uint32_t          pending; /* acks (or keys) still to come */
    uint32_t          failed;
    bool              open; /* gat: keys may still be added */
    uint32_t          ncalls, capcalls;
    struct repl_call *calls; /* calls_in unless more were needed */
    struct repl_call  calls_in[RING_R_MAX];
    uint32_t          len;
    char             *big;                 /* a reply over OP_REPLY_MAX (malloc'd), else NULL */
    char              reply[OP_REPLY_MAX]; /* the reply once every replica acked */
};

/* Lock stripe of a hash (its high bits: the low ones pick store stripes). */
static pthread_mutex_t *
key_lock(uint64_t hash)
{
    return &key_locks[(hash >> 40) & (KEY_LOCKS - 1)];
}

void
replicate_lock(uint64_t hash)
{
    pthread_mutex_lock(key_lock(hash));
}

void
replicate_unlock(uint64_t hash)
{
    pthread_mutex_unlock(key_lock(hash));
}

/* ---- replica tombstones ------------------------------------------------ */

static inline uint32_t
tomb_index(uint64_t hash)
{
    return (uint32_t)(hash >> TOMB_SHIFT) & (REPLICATE_TOMB_BUCKETS - 1);
}

/* The store clock as a stamp: never 0, which marks a free slot. */
static inline uint32_t
tomb_stamp(int64_t now)
{
    uint32_t t = (uint32_t)now;

    return t != 0 ? t : 1;
}

/* Is slot i of b a tombstone still in force at now? A clock that went back
 * makes the age wrap and the tombstone expire early: it never outlives its
 * ttl by more than a clock step. */
static inline bool
tomb_live(const struct tomb_bucket *b, int i, uint32_t now, uint32_t ttl)
{
    return b->stamp[i] != 0 && now - b->stamp[i] < ttl;
}

/* See replicate.h. FNV-1a of the sender's id plus the epoch, through
 * splitmix64's finalizer. */
uint8_t
replicate_origin(uint64_t epoch, const char *sender)
{
    uint64_t h = 14695981039346656037ULL;

    for (; *sender != '\0'; sender++) {
        h = (h ^ (unsigned char)*sender) * 1099511628211ULL;
    }
    h += epoch * 0x9e3779b97f4a7c15ULL;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return (uint8_t)(1 + h % 255);
}

/* Remember that the item (hash, cas) is gone at now, removed by origin. A
 * live tombstone of the same hash keeps the higher CAS (and its origin);
 * otherwise a free or expired slot is taken, else the oldest. */
static void
tomb_record(uint64_t hash, uint64_t cas, int64_t now, uint8_t origin)
{
    uint32_t            bi = tomb_index(hash), t = tomb_stamp(now);
    uint32_t            ttl = __atomic_load_n(&tomb_ttl, __ATOMIC_RELAXED);
    struct tomb_bucket *b = &tombs[bi];
    int                 i, pick = -1;

    pthread_mutex_lock(&tomb_locks[bi & (TOMB_LOCKS - 1)]);
    for (i = 0; i < REPLICATE_TOMB_WAYS && pick < 0; i++) {
        if (b->hash[i] == hash && tomb_live(b, i, t, ttl)) {
            if (b->cas[i] > cas) {
                cas = b->cas[i];
                origin = b->origin[i];
            }
            pick = i;
        }
    }
    for (i = 0; i < REPLICATE_TOMB_WAYS && pick < 0; i++) {
        if (!tomb_live(b, i, t, ttl)) {
            pick = i;
        }
    }
    if (pick < 0) {
        /* Full: the oldest goes (the bound in replicate.h). */
        pick = 0;
        for (i = 1; i < REPLICATE_TOMB_WAYS; i++) {
            if (t - b->stamp[i] > t - b->stamp[pick]) {
                pick = i;
            }
        }
    }
    b->hash[pick] = hash;
    b->cas[pick] = cas;
    b->stamp[pick] = t;
    b->origin[pick] = origin;
    pthread_mutex_unlock(&tomb_locks[bi & (TOMB_LOCKS - 1)]);
}

/* A post-image of an absent key: true when a live tombstone says the key
 * was removed at a CAS >= cas (drop the image; *origin is who removed it,
 * *tcas at what CAS). A newer image clears the tombstone (its slot is free
 * again). */
static bool
tomb_covers(uint64_t hash, uint64_t cas, int64_t now, uint8_t *origin, uint64_t *tcas)
{
    uint32_t            bi = tomb_index(hash), t = tomb_stamp(now);
    uint32_t            ttl = __atomic_load_n(&tomb_ttl, __ATOMIC_RELAXED);
    struct tomb_bucket *b = &tombs[bi];
    bool                covered = false;
    int                 i;

    pthread_mutex_lock(&tomb_locks[bi & (TOMB_LOCKS - 1)]);
    for (i = 0; i < REPLICATE_TOMB_WAYS; i++) {
        if (b->hash[i] != hash || !tomb_live(b, i, t, ttl)) {
            continue;
        }
        if (cas <= b->cas[i]) {
            covered = true;
            *origin = b->origin[i];
            *tcas = b->cas[i];
        } else {
            b->stamp[i] = 0;
        }
        break;
    }
    pthread_mutex_unlock(&tomb_locks[bi & (TOMB_LOCKS - 1)]);
    return covered;
}

/* The store's drop hook: an eviction or expiry is a tombstone too (a late
 * image older than the dropped item must not bring the key back). */
static void
tomb_on_drop(uint64_t hash, uint64_t cas, int64_t now, void *arg)
{
    (void)arg;
    tomb_record(hash, cas, now, 0);
}

/* See replicate.h. */
void
replicate_tomb_init(struct store *s, uint32_t ttl_s)
{
    __atomic_store_n(&tomb_ttl, ttl_s > 0 ? ttl_s : 1, __ATOMIC_RELAXED);
    store_set_drop_hook(s, tomb_on_drop, NULL);
}

/* A free op from w's pool (or the heap), reset; NULL on ENOMEM. */
static struct repl_op *
op_take(struct worker *w)
{
    struct repl_op *op = w->repl_pool;

    if (op != NULL) {
        w->repl_pool = op->next;
        w->nrepl_pool--;
    } else {
        op = malloc(sizeof(*op));
        if (op == NULL) {
            return NULL;
        }
    }
    memset(op, 0, offsetof(struct repl_op, calls_in));
    op->big = NULL;
    op->w = w;
    op->cl = w->srv->cluster;
    op->calls = op->calls_in;
    op->capcalls = RING_R_MAX;
    return op;
}

/* Give an op back to its worker's pool. */
static void
op_put(struct repl_op *op)
{
    struct worker *w = op->w;

    if (op->calls != op->calls_in) {
        free(op->calls);
    }
    free(op->big);
    op->big = NULL;
    if (w->nrepl_pool < OP_POOL_MAX) {
        op->next = w->repl_pool;
        w->repl_pool = op;
        w->nrepl_pool++;
        return;
    }
    free(op);
}

/* Free worker w's pool; see replicate.h. */
void
replicate_worker_free(struct worker *w)
{
    while (w->repl_pool != NULL) {
        struct repl_op *op = w->repl_pool;

        w->repl_pool = op->next;
        free(op);
    }
    w->nrepl_pool = 0;
}

static void op_finish(struct repl_op *op);

/* Release an op's guard (the count that kept it from finishing while it
 * was being filled). */
static void
op_release(struct repl_op *op)
{
    if (--op->pending == 0) {
        op_finish(op);
    }
}

/* The client's connection closed: the op finishes without a reply (a gat
 * that was still adding keys stops doing so). Called once per hold. */
static void
op_gone(void *arg)
{
    struct repl_op *op = arg;

    op->c = NULL;
    op->hold = NULL;
    op->end = NULL;
    if (op->open) {
        op->open = false;
        op_release(op);
    }
}

/* Every replica answered (or failed): reply and free the op. A key of a
 * gat reports to the command's op instead. */
static void
op_finish(struct repl_op *op)
{
    if (op->parent != NULL) {
        struct repl_op *p = op->parent;

        p->failed += op->failed;
        op_put(op);
        op_release(p);
        return;
    }
    if (op->hold != NULL) {
        struct conn *c = op->c;

        if (op->failed > 0) {
            /* A gat's VALUEs (queued between its two holds) give way to
             * the error: the client is not told of expiries that did not
             * reach every owner. */
            if (op->end != NULL) {
                conn_hold_drop_until(c, op->hold, op->end);
            }
            conn_hold_add(c, op->hold, REPLICA_UNAVAILABLE "\r\n",
                          sizeof(REPLICA_UNAVAILABLE "\r\n") - 1);
        } else if (op->len > 0) {
            conn_hold_add(c, op->hold, op->big != NULL ? op->big : op->reply, op->len);
        }
        conn_hold_done(c, op->hold);
        if (op->end != NULL) {
            conn_hold_done(c, op->end);
        }
    }
    op_put(op);
}

/* Is line a fencing refusal naming an epoch above this node's active one
 * (the replica committed an epoch this node has not)? */
static bool
fenced_ahead(const struct repl_op *op, const char *line, size_t len)
{
    static const char pre[] = "SERVER_ERROR fenced ";
    const char       *ep;
    uint64_t          e = 0;

    if (op->cl == NULL || len < sizeof(pre) - 1 || memcmp(line, pre, sizeof(pre) - 1) != 0) {
        return false;
    }
    ep = memmem(line, len, " epoch ", 7);
    if (ep == NULL) {
        return false;
    }
    for (ep += 7; ep < line + len && *ep >= '0' && *ep <= '9' && e < UINT64_MAX / 10; ep++) {
        e = e * 10 + (uint64_t)(*ep - '0');
    }
    return e > cluster_view(op->cl)->epoch;
}

/*
 * A replica's answer: "OK", anything else, or none (err). Anything but OK
 * fails the write (SERVER_ERROR replica unavailable), a fencing refusal
 * (`SERVER_ERROR fenced <reason> epoch <n>`, server/proto_peer.c) too: a
 * replica at a newer epoch than ours means this node is behind, which its
 * next heartbeat round learns from that peer's Pong (server/health.c
 * learn_epoch) and routes TRYAGAIN from then on. A write is
 * acknowledged only once every owner applied it, so no owner can have
 * missed an acknowledged write. A replica that is gone stays an owner
 * until the store declares it failed (ringctl watch, remove --failed);
 * until then its keys' writes fail (route.c answers them UNAVAILABLE once
 * the heartbeats see it down).
 */
static void
op_ack(void *arg, const char *line, size_t len, enum fwd_err err)
{
    struct repl_call *rc = arg;
    struct repl_op   *op = rc->op;
    bool              ok = line != NULL && len == 2 && line[0] == 'O' && line[1] == 'K';

    (void)err;
    if (!ok) {
        op->failed++;
        if (line != NULL) {
            log_msg(fenced_ahead(op, line, len) ? LOG_ERR : LOG_INFO,
                    "replica refused a post-image: %.*s", (int)len, line);
        }
    }
    if (op->cl != NULL) {
        cluster_count(op->cl, ok ? CLUSTER_CTR_REPLICATED : CLUSTER_CTR_REPLICA_FAILED);
        if (ok) {
            /* On the worker that sent it: the histogram's one writer. */
            latency_record(&op->w->lat.repl, latency_loop_now(&op->w->clock) - rc->sent_ns);
        }
    }
    op_release(op);
}

/* Send iov to the node at addr of view v for op (its ack counts in op). */
static void
op_send(struct worker *w, struct repl_op *op, const struct cluster_view *v, const char *addr,
        const struct iovec *iov, int niov)
{
    struct repl_call *rc;

    if (op->ncalls == op->capcalls) {
        /* Cannot happen: a key has at most capcalls other owners. */
        op->failed++;
        return;
    }
    rc = &op->calls[op->ncalls++];
    rc->op = op;
    rc->sent_ns = latency_loop_now(&w->clock);
    op->pending++;
    forward_call(w, addr, v->epoch, iov, niov, op_ack, rc);
}

/* A new op holding c's reply (no hold with noreply); NULL on ENOMEM. Its
 * guard (pending 1) is released by the caller after the fan-out. */
static struct repl_op *
op_new(struct conn *c, const char *reply, size_t len, bool noreply)
{
    struct repl_op *op;

    if (len > OP_BIG_MAX) {
        log_msg(LOG_ERR, "replicate: a %zu-byte reply cannot be held", len);
        return NULL;
    }
    op = op_take(c->w);
    if (op == NULL) {
        return NULL;
    }
    if (len > OP_REPLY_MAX && (op->big = malloc(len)) == NULL) {
        op_put(op);
        return NULL;
    }
    op->pending = 1;
    op->len = (uint32_t)len;
    memcpy(op->big != NULL ? op->big : op->reply, reply, len);
    if (!noreply) {
        op->c = c;
        op->hold = conn_out_hold(c, op, op_gone);
    }
    return op;
}

/* " <epoch> <sender id>" at p (an id longer than RING_ID_MAX, which no
 * member has, is cut: the replica refuses it); returns the end. */
static char *
fmt_origin(char *p, uint64_t epoch, const char *me)
{
    size_t n = me != NULL ? strnlen(me, RING_ID_MAX) : 0;

    *p++ = ' ';
    p = util_fmt_u64(p, epoch);
    *p++ = ' ';
    if (n == 0) {
        *p++ = '-';
        return p;
    }
    memcpy(p, me, n);
    return p + n;
}

/*
 * Send the state of key to every other owner of rt (the request's route)
 * for op: a post-image of it (a reference the caller keeps), or a
 * tombstone carrying tomb_cas when it is NULL or expired.
 */
static void
send_image(struct conn *c, struct repl_op *op, const struct route *rt, const char *key, size_t nkey,
           struct store_item *it, uint64_t tomb_cas)
{
    struct store              *s = c->w->srv->store;
    const struct cluster_view *v = rt->view;
    uint32_t                   i;
    struct iovec               iov[2];
    const char                *me = cluster_node_id(c->w->srv->cluster);
    char                       head[128 + RING_ID_MAX + 4 * ((STORE_KEY_MAX + 2) / 3)], *p = head;
    int64_t                    ttl = 0;
    int                        niov = 1;
    bool                       key64 = false;
    size_t                     i0;

    if (it != NULL) {
        ttl = store_item_ttl_remaining(s, it);
        if (ttl < 0) {
            /* Expired in between (or a gat with a past exptime): that is
             * a tombstone too. */
            tomb_cas = it->cas;
            it = NULL;
        }
    }
    if (nkey > STORE_KEY_MAX) {
        nkey = STORE_KEY_MAX; /* cannot happen: keys were checked */
    }
    /* A key given base64 (meta b) may hold spaces or control bytes: such
     * a key travels base64 too. */
    for (i0 = 0; i0 < nkey && !key64; i0++) {
        key64 = (unsigned char)key[i0] <= ' ' || (unsigned char)key[i0] == 0x7f;
    }
    memcpy(p, it != NULL ? "rc_set " : "rc_del ", 7);
    p += 7;
    if (key64) {
        p += util_b64_encode((const unsigned char *)key, nkey, p);
    } else {
        memcpy(p, key, nkey);
        p += nkey;
    }
    if (it != NULL) {
        *p++ = ' ';
        p = util_fmt_u64(p, it->flags);
        *p++ = ' ';
        p = util_fmt_u64(p, (uint64_t)ttl);
        *p++ = ' ';
        p = util_fmt_u64(p, it->cas);
        *p++ = ' ';
        p = util_fmt_u64(p, it->nbytes);
        p = fmt_origin(p, v->epoch, me);
        {
            /* The meta state rides along: m<mflags>[,<client cas>]. */
            uint8_t mf = store_item_mflags(it) & STORE_MF_REPLICATED;

            if (key64) {
                mf |= STORE_MF_KEY64;
            }
            if (mf != 0) {
                *p++ = ' ';
                *p++ = 'm';
                p = util_fmt_u64(p, mf);
                if (mf & STORE_MF_ECAS) {
                    *p++ = ',';
                    p = util_fmt_u64(p, store_item_cas(it));
                }
            }
        }
        iov[1].iov_base = (void *)store_item_value(it);
        iov[1].iov_len = (size_t)it->nbytes + 2;
        niov = 2;
    } else {
        *p++ = ' ';
        p = util_fmt_u64(p, tomb_cas);
        p = fmt_origin(p, v->epoch, me);
        if (key64) {
            memcpy(p, " b", 2); /* the key token is base64 */
            p += 2;
        }
    }
    *p++ = '\r';
    *p++ = '\n';
    iov[0].iov_base = head;
    iov[0].iov_len = (size_t)(p - head);
    for (i = 0; i < rt->n_owners; i++) {
        uint32_t o = rt->owners[i];

        if ((int32_t)o == v->self) {
            continue;
        }
        if (cluster_view_gone(v, o)) {
            /* Declared failed by the pending transition (the store's
             * authority): it is leaving the ring and is not waited for;
             * recorded, so it turns recovering if it comes back before
             * (an abort). */
            if (v->live != NULL) {
                cluster_mask_set(v->live->skipped, o);
            }
            cluster_count(c->w->srv->cluster, CLUSTER_CTR_REPLICA_SKIPPED);
            continue;
        }
        op_send(c->w, op, v, cluster_view_addr(v, o), iov, niov);
    }
}

/* Post-image or tombstone to every other owner; see replicate.h. */
void
replicate_write(struct conn *c, const struct route *rt, const char *key, size_t nkey,
                struct store_item *linked, uint64_t tomb_cas, const char *reply, size_t len,
                bool noreply)
{
    struct store      *s = c->w->srv->store;
    struct store_item *it = linked;
    struct repl_op    *op = op_new(c, reply, len, noreply);

    if (op == NULL) {
        if (!noreply) {
            conn_out_add(c, REPLICA_UNAVAILABLE "\r\n", sizeof(REPLICA_UNAVAILABLE "\r\n") - 1);
        }
        return;
    }
    /* The item the write linked is the key's state: only writes under
     * this key lock change an item in place (a touch, a win token; an incr
     * in place only while nobody else holds a reference) or link another.
     * Its eviction, expiry or flush since does not matter: the replica
     * may hold what this node dropped, and an expired item goes as a
     * tombstone (send_image). Without one the state is read (not a read:
     * no bump, no fetched mark). */
    if (it == NULL) {
        it = store_peek(s, key, nkey, rt->hash);
    }
    if (it != NULL) {
        tomb_cas = 0;
    } else if (tomb_cas != 0) {
        /* This node's own delete, as the key's acting primary: a late image
         * of the key (from a deposed primary, or one that passed the
         * fence) must not re-create it here either. */
        const char *me = cluster_node_id(c->w->srv->cluster);

        tomb_record(rt->hash, tomb_cas, store_now(s),
                    replicate_origin(rt->view->epoch, me != NULL ? me : "-"));
    }
    send_image(c, op, rt, key, nkey, it, tomb_cas);
    if (it != NULL && it != linked) {
        store_release(s, it);
    }
    op_release(op);
}

/* Hold a gat's reply; see replicate.h. */
int
replicate_gat_begin(struct conn *c)
{
    struct repl_op *op = op_new(c, "", 0, false);

    if (op == NULL) {
        return -1;
    }
    op->open = true;
    c->repl_gat = op;
    return 0;
}

/* One touched key of a gat; see replicate.h. */
void
replicate_gat_key(struct conn *c, const struct route *rt, struct store_item *it)
{
    struct repl_op *p = c->repl_gat, *op;

    op = op_take(c->w);
    if (op == NULL) {
        p->failed++;
        return;
    }
    op->parent = p;
    op->pending = 1;
    p->pending++;
    send_image(c, op, rt, store_item_key(it), it->nkey, it, 0);
    op_release(op);
}

/* The gat's reply is all queued; see replicate.h. */
void
replicate_gat_end(struct conn *c)
{
    struct repl_op *op = c->repl_gat;

    c->repl_gat = NULL;
    if (op->hold != NULL) {
        op->end = conn_out_hold(c, op, op_gone);
    }
    op->open = false;
    op_release(op);
}

/* What replicate_apply_put's tombstone probe found (under the store's
 * stripe lock). */
struct cover {
    bool     covered;
    uint8_t  by;   /* who removed the key */
    uint64_t tcas; /* at what CAS */
};

/* store_put_import_newer's hook: tomb_covers for an absent key. */
static bool
cover_probe(uint64_t hash, uint64_t cas, int64_t now, void *arg)
{
    struct cover *cv = arg;

    cv->covered = tomb_covers(hash, cas, now, &cv->by, &cv->tcas);
    return cv->covered;
}

/* Replica: store a post-image unless a newer one is there; see
 * replicate.h. */
int
replicate_apply_put(struct store *s, struct store_item *it, uint64_t cas, uint8_t origin,
                    uint64_t *removed_cas)
{
    struct cover cv = { 0 };
    int          rc;

    /* Kept although the store decides and links under one stripe lock:
     * a node's own writes as a key's acting primary hold it from their
     * store operation to replicate_write (a delete records its tombstone
     * there), and an image of the key arriving in between (from a deposed
     * primary) must see that tombstone. */
    replicate_lock(it->hash);
    /* An absent key may be absent because a later write removed it: a
     * delete whose tombstone overtook this image on another connection, or
     * an eviction or expiry here of a newer copy. Its tombstone then holds
     * a CAS >= this one and the image is dropped. Removed by the same
     * sender in the same epoch (origin), the primary applied this write and
     * a later delete, the replica holds the state after it: not behind, 0.
     * Removed by anything else (an eviction or expiry here, another
     * primary, this node's own delete as primary, the same node before a
     * restart), the CAS values need not be of one counter, so the write is
     * not known to be older: REPLICATE_REMOVED, and the primary must not
     * acknowledge it. A present key is ordered by its own CAS (only an
     * absent one probes the table): a newer item held is the answer. The
     * store makes the decision and the import one step under the key's
     * stripe lock (store_put_import_newer), with the probe inside it. */
    rc = store_put_import_newer(s, it, cas, cover_probe, &cv);
    replicate_unlock(it->hash);
    if (rc < 0) {
        return rc;
    }
    if (cv.covered && cv.by != origin) {
        if (removed_cas != NULL) {
            *removed_cas = cv.tcas;
        }
        return REPLICATE_REMOVED;
    }
    return 0;
}

/* store_delete_older's hook: remember the tombstone (origin in arg). */
static void
tomb_on_delete(uint64_t hash, uint64_t cas, int64_t now, void *arg)
{
    tomb_record(hash, cas, now, *(const uint8_t *)arg);
}

/* Replica: apply a tombstone unless the key holds a newer CAS. */
void
replicate_apply_del(struct store *s, const char *key, size_t nkey, uint64_t hash, uint64_t cas,
                    uint8_t origin)
{
    replicate_lock(hash);
    /* The tombstone is remembered even when the key is already absent:
     * the image it follows may still be on its way (another worker's
     * connection) and must not re-create the key. */
    store_delete_older(s, key, nkey, hash, cas, tomb_on_delete, &origin);
    replicate_unlock(hash);
}
