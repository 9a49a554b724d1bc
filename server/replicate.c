/*
 * replicate: the primary's side (capture a post-image, fan it out, hold the
 * client's reply until the acks) and the replica's side (CAS-ordered
 * apply). Requests ride the worker's upstreams, so a post-image costs one
 * pipelined round trip per replica and no extra thread.
 */
#include "config.h"
#include "server/replicate.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "server/cluster.h"
#include "server/conn.h"
#include "server/forward.h"
#include "server/log.h"
#include "server/store.h"
#include "server/thread.h"

#define KEY_LOCKS 1024   /* key lock stripes (power of two) */

static pthread_mutex_t key_locks[KEY_LOCKS] = {
    [0 ... KEY_LOCKS - 1] = PTHREAD_MUTEX_INITIALIZER
};

/* One write waiting for its replicas. */
struct repl_op {
    struct conn      *c;         /* NULL: noreply, or the client closed */
    struct out_chunk *hold;
    struct cluster   *cl;
    uint32_t          pending;   /* acks still to come */
    uint32_t          failed;
    size_t            len;
    char              reply[];   /* the reply once every replica acked */
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

/* Replicate this write? See replicate.h. */
bool
replicate_wanted(const struct conn *c, uint64_t hash)
{
    struct cluster *cl = c->w->srv != NULL ? c->w->srv->cluster : NULL;
    const struct cluster_view *v;

    if (cl == NULL)
        return false;
    v = cluster_view(cl);
    if (v->ring == NULL || v->replicas < 2 || v->self < 0)
        return false;
    return cluster_view_acting(v, hash) == (uint32_t)v->self;
}

/* The client's connection closed: the op finishes without a reply. */
static void
op_gone(void *arg)
{
    struct repl_op *op = arg;

    op->c = NULL;
    op->hold = NULL;
}

/* Every replica answered (or failed): reply and free the op. */
static void
op_finish(struct repl_op *op)
{
    if (op->hold != NULL) {
        if (op->failed > 0)
            conn_hold_add(op->c, op->hold, REPLICA_UNAVAILABLE "\r\n",
                          sizeof(REPLICA_UNAVAILABLE "\r\n") - 1);
        else
            conn_hold_add(op->c, op->hold, op->reply, op->len);
        conn_hold_done(op->c, op->hold);
    }
    free(op);
}

/* One replica's share of an op. */
struct repl_call {
    struct repl_op *op;
    uint32_t        idx;      /* the replica's index in epoch `epoch` */
    uint64_t        epoch;
};

/*
 * A replica's answer: "OK", anything else, or none (err). A refused or
 * lost connection means the replica process is gone (or going): like a
 * replica the heartbeats see down, it is skipped and recorded, so it comes
 * back recovering and is refilled; the write is acknowledged. No answer in
 * time (a hung or overloaded replica) or a refusal fails the write.
 */
static void
op_ack(void *arg, const char *line, size_t len, enum fwd_err err)
{
    struct repl_call *rc = arg;
    struct repl_op *op = rc->op;
    bool ok = line != NULL && len == 2 && memcmp(line, "OK", 2) == 0;

    if (line == NULL && err == FWD_ECONN && op->cl != NULL) {
        const struct cluster_view *v = cluster_view(op->cl);

        if (v->epoch == rc->epoch)
            cluster_view_skip(v, rc->idx);
        cluster_count_replica_skipped(op->cl);
    } else {
        if (!ok) {
            op->failed++;
            if (line != NULL)
                log_msg(LOG_INFO, "replica refused a post-image: %.*s", (int)len, line);
        }
        if (op->cl != NULL)
            cluster_count_replica(op->cl, ok);
    }
    free(rc);
    if (--op->pending == 0)
        op_finish(op);
}

/* Send iov to node idx of view v for op (its ack counts in op). */
static void
op_send(struct conn *c, struct repl_op *op, const struct cluster_view *v, uint32_t idx,
        const char *addr, const struct iovec *iov, int niov)
{
    struct repl_call *rc = malloc(sizeof(*rc));

    op->pending++;
    if (rc == NULL) {
        op->failed++;
        op->pending--;
        return;
    }
    rc->op = op;
    rc->idx = idx;
    rc->epoch = v->epoch;
    forward_call(c->w, addr, v->epoch, iov, niov, op_ack, rc);
}

/* A new op holding c's reply (no hold with noreply); NULL on ENOMEM. */
static struct repl_op *
op_new(struct conn *c, const char *reply, size_t len, bool noreply)
{
    struct repl_op *op = malloc(sizeof(*op) + len);

    if (op == NULL)
        return NULL;
    op->c = NULL;
    op->hold = NULL;
    op->cl = c->w->srv->cluster;
    op->pending = 1;    /* released after the fan-out: no early finish */
    op->failed = 0;
    op->len = len;
    memcpy(op->reply, reply, len);
    if (!noreply) {
        op->c = c;
        op->hold = conn_out_hold(c, op, op_gone);
    }
    return op;
}

/* Post-image or tombstone to every other owner; see replicate.h. */
void
replicate_write(struct conn *c, const char *key, size_t nkey, uint64_t hash,
                uint64_t tomb_cas, const char *reply, size_t len, bool noreply)
{
    struct store *s = c->w->srv->store;
    const struct cluster_view *v = cluster_view(c->w->srv->cluster);
    uint32_t owners[CLUSTER_OWNERS_MAX], n, i;
    struct store_item *it = store_get(s, key, nkey, hash);
    struct repl_op *op;
    struct iovec iov[3];
    char head[64 + STORE_KEY_MAX];
    int64_t ttl = 0;
    int niov, hl;

    if (it != NULL) {
        ttl = store_item_ttl_remaining(s, it);
        if (ttl < 0) {
            /* Expired in between: that is a tombstone too. */
            tomb_cas = it->cas;
            store_release(s, it);
            it = NULL;
        }
    }
    if (it != NULL)
        hl = snprintf(head, sizeof(head), "rc_set %.*s %" PRIu32 " %" PRId64 " %" PRIu64
                      " %" PRIu32 "\r\n", (int)nkey, key, it->flags, ttl, it->cas,
                      it->nbytes);
    else
        hl = snprintf(head, sizeof(head), "rc_del %.*s %" PRIu64 "\r\n", (int)nkey, key,
                      tomb_cas);
    iov[0].iov_base = head;
    iov[0].iov_len = (size_t)hl;
    niov = 1;
    if (it != NULL) {
        iov[1].iov_base = (void *)store_item_value(it);
        iov[1].iov_len = (size_t)it->nbytes + 2;
        niov = 2;
    }
    op = op_new(c, reply, len, noreply);
    if (op == NULL) {
        if (!noreply)
            conn_out_add(c, REPLICA_UNAVAILABLE "\r\n", sizeof(REPLICA_UNAVAILABLE "\r\n") - 1);
        goto out;
    }
    n = cluster_view_owners(v, hash, owners, CLUSTER_OWNERS_MAX);
    for (i = 0; i < n; i++) {
        if ((int32_t)owners[i] == v->self)
            continue;
        if (cluster_view_down(v, owners[i])) {
            /* Seen down by the heartbeats (server/health.c): not waited
             * for; recorded so that node comes back recovering. */
            cluster_view_skip(v, owners[i]);
            cluster_count_replica_skipped(c->w->srv->cluster);
            continue;
        }
        op_send(c, op, v, owners[i], cluster_view_addr(v, owners[i]), iov, niov);
    }
    if (--op->pending == 0)
        op_finish(op);
out:
    if (it != NULL)
        store_release(s, it);
}

/* flush_all to every other member; see replicate.h. */
void
replicate_flush(struct conn *c, const char *line, size_t len, bool noreply)
{
    const struct cluster_view *v = cluster_view(c->w->srv->cluster);
    const struct ring_members *m = ring_members(v->ring);
    struct repl_op *op = op_new(c, "OK\r\n", 4, noreply);
    struct iovec iov;
    uint32_t i;

    if (op == NULL) {
        if (!noreply)
            conn_out_add(c, REPLICA_UNAVAILABLE "\r\n", sizeof(REPLICA_UNAVAILABLE "\r\n") - 1);
        return;
    }
    iov.iov_base = (void *)line;
    iov.iov_len = len;
    for (i = 0; i < m->n_nodes; i++) {
        if ((int32_t)i == v->self)
            continue;
        op_send(c, op, v, i, m->nodes[i].addr, &iov, 1);
    }
    if (--op->pending == 0)
        op_finish(op);
}

/* Replica: store a post-image unless a newer one is there. */
int
replicate_apply_put(struct store *s, struct store_item *it, uint64_t cas)
{
    struct store_item *old;
    int rc = 0;

    replicate_lock(it->hash);
    old = store_get(s, store_item_key(it), it->nkey, it->hash);
    if (old == NULL || old->cas <= cas) {
        rc = store_put_import(s, it, cas);
        rc = rc < 0 ? rc : 0;
    }
    if (old != NULL)
        store_release(s, old);
    replicate_unlock(it->hash);
    return rc;
}

/* Replica: apply a tombstone unless the key holds a newer CAS. */
void
replicate_apply_del(struct store *s, const char *key, size_t nkey, uint64_t hash,
                    uint64_t cas)
{
    struct store_item *old;

    replicate_lock(hash);
    old = store_get(s, key, nkey, hash);
    if (old != NULL && old->cas <= cas)
        store_delete(s, key, nkey, hash);
    if (old != NULL)
        store_release(s, old);
    replicate_unlock(hash);
}
