/*
 * mget: the parallel multi-key read. Each round sends one request per node
 * (keys grouped on their first usable owner) and polls every node's
 * connection together; failed keys move down their preference lists,
 * redirected ones wait for a newer epoch or a back-off. What a node's
 * request is and how its reply reads is a protocol's (struct mget_proto):
 * `get k1 k2 ...` here (ringcache_mget_cb), pipelined mg in meta.c.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "client/rc_internal.h"

enum batch_state {
    B_CONNECTING,
    B_SENDING,
    B_READING,
    B_DONE,
    B_FAILED
};

/* One node's share of a multi-get round. */
struct mget_batch {
    struct mget_share s; /* node, keys in request order, answered so far */
    enum batch_state  state;
    struct pool_conn *conn;
    bool              retried; /* already re-sent on a fresh connection */
    bool              got_bytes;
    bool              want_ack;                /* the reply to our `epoch <n>` comes first */
    char              prefix[MCP_DECLARE_MAX]; /* "epoch <n>\r\n" to declare first */
    char             *req;
    size_t            req_len;
    struct iovec      iov[2];
    struct iovec     *iovp;
    int               iovcnt;
    int64_t           connect_deadline;
};

struct mget {
    struct ringcache        *rc;
    struct rc_view          *v;       /* the view rounds route with (a reference) */
    uint64_t                 declare; /* epoch connections declare, 0 none */
    struct route_key        *keys;
    size_t                   n;
    const struct mget_proto *p;
    void                    *arg;
    /* Redirects of the current round (their keys stay pending). */
    bool            moved;
    bool            tryagain;
    uint64_t        rd_epoch; /* the highest epoch they carried */
    struct rc_node *rd_from;  /* the node that sent it */
    char            rd_addr[MCR_ADDR_MAX + 1];
};

/* The pool of the node of batch b. */
static struct pool_node *
batch_pool(struct mget *m, const struct mget_batch *b)
{
    return &m->v->nodes[b->s.node]->pool;
}

void
mget_answered(struct mget *m, size_t i)
{
    m->keys[i].done = true;
}

/* Key i is answered by nobody: its protocol reports it once. */
static void
mget_orphan(struct mget *m, size_t i)
{
    m->keys[i].done = true;
    m->p->orphan(m->arg, i, m->keys[i].refused ? RINGCACHE_EAUTH : RINGCACHE_ENOTFOUND);
}

/* Build the request of a batch (its protocol's). */
static int
batch_build(struct mget *m, struct mget_batch *b)
{
    b->req = malloc(m->p->format(m->arg, NULL, m->keys, &b->s));
    if (b->req == NULL) {
        return RINGCACHE_ENOMEM;
    }
    b->req_len = m->p->format(m->arg, b->req, m->keys, &b->s);
    return 0;
}

/* (Re)start a batch on a connection of its node. */
static int
batch_start(struct mget *m, struct mget_batch *b)
{
    int ret;

    struct rc_node *rn = m->v->nodes[b->s.node];

    ret = pool_acquire(&rn->pool, &m->rc->cfg, &b->conn);
    if (ret != 0) {
        return ret;
    }
    b->want_ack = m->declare != 0 && b->conn->declared != m->declare &&
                  !__atomic_load_n(&rn->no_ext, __ATOMIC_RELAXED);
    b->iov[0].iov_base = b->prefix;
    b->iov[0].iov_len = mcp_format_declare(b->prefix, m->declare);
    b->iov[1].iov_base = b->req;
    b->iov[1].iov_len = b->req_len;
    b->iovp = b->want_ack ? &b->iov[0] : &b->iov[1];
    b->iovcnt = b->want_ack ? 2 : 1;
    b->got_bytes = false;
    b->connect_deadline = util_now_ms() + m->rc->opt.connect_timeout_ms;
    b->state = b->conn->connecting ? B_CONNECTING : B_SENDING;
    return 0;
}

void
mget_redirected(struct mget *m, const struct mget_share *s, const struct mcr_reply *r)
{
    if (r->kind == MCR_MOVED) {
        m->moved = true;
    } else {
        m->tryagain = true;
    }
    view_saw_epoch(m->rc, r->epoch);
    if (r->epoch > m->rd_epoch) {
        m->rd_epoch = r->epoch;
        m->rd_from = m->v->nodes[s->node];
        node_redirect_addr(m->rd_addr, r);
    }
}

/* Consume the reply units buffered on a batch's connection: the reply to
 * our declaration here, every other unit by the protocol. Returns 0, or
 * RINGCACHE_EPROTO. */
static int
batch_parse(struct mget *m, struct mget_batch *b)
{
    struct pool_conn *c = b->conn;
    struct mcr_reply  r;
    size_t            need;
    long              used;
    int               step;

    for (;;) {
        used =
            mcp_parse(c->buf + c->start, c->end - c->start, m->rc->opt.max_value_bytes, &r, &need);
        if (used <= 0) {
            return (int)used;
        }
        if (b->want_ack) {
            /* The reply to our declaration comes first. */
            if (node_declare_ack(m->v->nodes[b->s.node], c, m->declare, &r) != 0) {
                return RINGCACHE_EPROTO;
            }
            b->want_ack = false;
            c->start += (size_t)used;
            continue;
        }
        step = m->p->unit(m->arg, m, &b->s, m->keys, &r);
        if (step < 0) {
            return step;
        }
        c->start += (size_t)used;
        if (step == MGET_DONE) {
            /* Bytes after a complete reply mean we are out of step. */
            if (c->start != c->end) {
                return RINGCACHE_EPROTO;
            }
            b->state = B_DONE;
            return 0;
        }
    }
}

/* A batch failed: drop its connection. A pooled connection found dead
 * before any byte came back is retried once on a fresh one; otherwise the
 * node is marked down and the unanswered keys move to their next owner
 * (a refused login: neither). */
static void
batch_fail(struct mget *m, struct mget_batch *b, int err)
{
    struct pool_conn *c = b->conn;
    size_t            j;

    b->conn = NULL;
    if (c != NULL) {
        bool stale = err == RINGCACHE_EIO && c->reused && !b->got_bytes;

        pool_conn_close(c);
        if (stale && !b->retried) {
            b->retried = true;
            pool_node_drop_idle(batch_pool(m, b));
            if (batch_start(m, b) == 0) {
                return;
            }
        }
    }
    b->state = B_FAILED;
    pool_node_failed(batch_pool(m, b), &m->rc->cfg, err);
    for (j = b->s.pos; j < b->s.n; j++) {
        struct route_key *k = &m->keys[b->s.idx[j]];

        /* A refused login is no outage (pool_node_failed): the keys are
         * not read from a replica, they end as RINGCACHE_EAUTH from no
         * node, and ringcache_node_error says EAUTH too. */
        if (err == RINGCACHE_EAUTH) {
            k->refused = true;
            k->next = k->n_owners;
        } else {
            k->next++;
        }
    }
}

/* Drive one event (or the first attempt) of a batch. */
static void
batch_step(struct mget *m, struct mget_batch *b, short revents)
{
    long got;
    int  ret;

    if (b->state == B_CONNECTING) {
        if (revents == 0) {
            return;
        }
        ret = pool_conn_finish_connect(b->conn);
        if (ret != 0) {
            batch_fail(m, b, ret);
            return;
        }
        b->state = B_SENDING;
    }
    if (b->state == B_SENDING) {
        ret = pool_conn_send_some(b->conn, &b->iovp, &b->iovcnt);
        if (ret != 0) {
            batch_fail(m, b, ret);
            return;
        }
        if (b->iovcnt == 0) {
            b->state = B_READING;
        }
        return;
    }
    if (b->state == B_READING && revents != 0) {
        for (;;) {
            got = pool_conn_recv_some(b->conn);
            if (got == 0) {
                return;
            }
            if (got < 0) {
                batch_fail(m, b, (int)got);
                return;
            }
            b->got_bytes = true;
            ret = batch_parse(m, b);
            if (ret != 0) {
                batch_fail(m, b, ret);
                return;
            }
            if (b->state == B_DONE) {
                pool_release(batch_pool(m, b), b->conn, true, &m->rc->cfg);
                b->conn = NULL;
                pool_node_ok(batch_pool(m, b));
                return;
            }
        }
    }
}

/* Run every batch of a round in parallel until each is done or failed, or
 * the deadline passes (the rest then fail with a timeout). */
static int
mget_run(struct mget *m, struct mget_batch *b, size_t nb)
{
    struct pollfd *pfd;
    size_t        *map, i, np;
    int64_t        deadline = util_now_ms() + m->rc->opt.op_timeout_ms, now;
    int            rc, wait;

    pfd = calloc(nb, sizeof(*pfd));
    map = calloc(nb, sizeof(*map));
    if (pfd == NULL || map == NULL) {
        free(pfd);
        free(map);
        return RINGCACHE_ENOMEM;
    }
    for (i = 0; i < nb; i++) {
        batch_step(m, &b[i], 0);
    }
    for (;;) {
        now = util_now_ms();
        np = 0;
        wait = (int)(deadline - now);
        for (i = 0; i < nb; i++) {
            if (b[i].state == B_CONNECTING && now >= b[i].connect_deadline) {
                batch_fail(m, &b[i], RINGCACHE_ETIMEDOUT);
            }
            if (b[i].state == B_DONE || b[i].state == B_FAILED) {
                continue;
            }
            if (b[i].state == B_CONNECTING && b[i].connect_deadline - now < wait) {
                wait = (int)(b[i].connect_deadline - now);
            }
            pfd[np].fd = b[i].conn->fd;
            pfd[np].events = b[i].state == B_CONNECTING ? POLLOUT
                                                        : pool_conn_events(b[i].conn, b[i].state == B_READING);
            pfd[np].revents = 0;
            map[np++] = i;
        }
        if (np == 0) {
            break;
        }
        if (now >= deadline) {
            for (i = 0; i < np; i++) {
                /* No stale-connection retry past the deadline. */
                b[map[i]].retried = true;
                batch_fail(m, &b[map[i]], RINGCACHE_ETIMEDOUT);
            }
            break;
        }
        rc = poll(pfd, np, wait > 0 ? wait : 0);
        if (rc < 0 && errno != EINTR) {
            for (i = 0; i < np; i++) {
                b[map[i]].retried = true;
                batch_fail(m, &b[map[i]], RINGCACHE_EIO);
            }
            break;
        }
        for (i = 0; rc > 0 && i < np; i++) {
            if (pfd[i].revents != 0) {
                batch_step(m, &b[map[i]], pfd[i].revents);
            }
        }
    }
    free(pfd);
    free(map);
    return 0;
}

/* Close what a round left open and free its batches. */
static void
batches_free(struct mget_batch *b, size_t nb)
{
    size_t i;

    for (i = 0; i < nb; i++) {
        pool_conn_close(b[i].conn);
        free(b[i].req);
    }
    free(b);
}

/* route_usable_fn over the nodes of a multi-get's view. */
static bool
node_usable(void *arg, uint32_t node)
{
    struct mget *m = arg;

    return pool_node_usable(&m->v->nodes[node]->pool, util_now_ms());
}

/* One round: every unanswered key goes to its next usable owner, one
 * request per node, all in parallel. Returns 0 or RINGCACHE_ENOMEM; *left
 * counts keys still unanswered after it. */
static int
mget_round(struct mget *m, size_t *left)
{
    struct route_plan  plan;
    struct mget_batch *b = NULL;
    size_t             i, nb = 0;
    int                ret;

    ret = route_plan_build(&plan, m->v->n_nodes, m->keys, m->n, node_usable, m);
    if (ret != 0) {
        return ret;
    }
    for (i = 0; i < m->n; i++) {
        if (!m->keys[i].done && m->keys[i].next == m->keys[i].n_owners) {
            mget_orphan(m, i);
        }
    }
    nb = plan.n_groups;
    b = calloc(nb > 0 ? nb : 1, sizeof(*b));
    if (b == NULL) {
        ret = RINGCACHE_ENOMEM;
        goto out;
    }
    for (i = 0; i < nb; i++) {
        b[i].s.node = plan.node[i];
        b[i].s.idx = plan.idx + plan.start[i];
        b[i].s.n = plan.start[i + 1] - plan.start[i];
        b[i].state = B_FAILED;
    }
    for (i = 0; i < nb; i++) {
        ret = batch_build(m, &b[i]);
        if (ret != 0) {
            goto out;
        }
    }
    for (i = 0; i < nb; i++) {
        ret = batch_start(m, &b[i]);
        if (ret == RINGCACHE_ENOMEM) {
            goto out;
        }
        if (ret != 0) {
            b[i].retried = true;
            batch_fail(m, &b[i], ret);
            ret = 0;
        }
    }
    ret = mget_run(m, b, nb);
out:
    if (ret != 0) {
        /* Out of memory: release every probe this round claimed. */
        for (i = 0; i < plan.n_groups; i++) {
            pool_node_ok(&m->v->nodes[plan.node[i]]->pool);
        }
    }
    if (b != NULL) {
        batches_free(b, nb);
    }
    route_plan_free(&plan);
    *left = 0;
    for (i = 0; i < m->n; i++) {
        *left += m->keys[i].done ? 0 : 1;
    }
    return ret;
}

/* Route every pending key with m->v from the start of its preference
 * list (after the view changed: indexes belong to the new view). */
static void
mget_route(struct mget *m)
{
    size_t i;

    for (i = 0; i < m->n; i++) {
        struct route_key *k = &m->keys[i];

        if (!k->done) {
            k->n_owners = route_owners(m->v->ring, m->v->replicas, k->key, k->len, k->owners);
            k->next = 0;
            k->refused = false;
        }
    }
}

int
mget_keys(struct ringcache *rc, const char *const *keys, const size_t *key_lens, size_t n,
          const struct mget_proto *p, void *arg)
{
    struct mget     m = { .rc = rc, .n = n, .p = p, .arg = arg };
    struct rc_view *nv;
    size_t          i, left = n;
    uint32_t        fail_rounds = 0;
    int64_t         deadline;
    int             hops = 0, backoff = 1, ret = 0;

    if (rc == NULL || (keys == NULL && n > 0)) {
        return RINGCACHE_EINVAL;
    }
    if (n == 0) {
        return 0;
    }
    m.keys = calloc(n, sizeof(*m.keys));
    if (m.keys == NULL) {
        return RINGCACHE_ENOMEM;
    }
    /* Validate everything before anything leaves the process. */
    for (i = 0; i < n; i++) {
        struct route_key *k = &m.keys[i];

        k->key = keys[i];
        k->len = key_lens != NULL ? key_lens[i] : (keys[i] != NULL ? strlen(keys[i]) : 0);
        if (p->check(arg, k->key, k->len) != 0) {
            ret = RINGCACHE_EKEY;
            goto out;
        }
    }
    view_maybe_poll(rc);
    deadline = util_now_ms() + rc->opt.op_timeout_ms;
    m.v = view_get(rc);
    mget_route(&m);
    /* A round without redirects moves each failed key one step down its
     * preference list (at most R + 1 of them). Redirected keys are sent
     * again: at once after learning a newer epoch (regrouped by the new
     * ring), else after a back-off; at most HOPS_MAX rounds with MOVED
     * and TRYAGAIN within the op timeout. Whatever is left is a miss. */
    while (left > 0) {
        m.declare = view_declare_epoch(rc, m.v);
        m.moved = m.tryagain = false;
        m.rd_epoch = 0;
        m.rd_from = NULL;
        m.rd_addr[0] = '\0';
        ret = mget_round(&m, &left);
        if (ret != 0 || left == 0) {
            break;
        }
        if (!m.moved && !m.tryagain) {
            if (++fail_rounds > m.v->replicas) {
                break;
            }
            continue;
        }
        if (m.moved && ++hops > HOPS_MAX) {
            break;
        }
        if (!(m.rd_epoch > m.v->epoch &&
              view_learn(rc, m.v->epoch, m.rd_epoch, m.rd_from, m.moved ? m.rd_addr : NULL)) &&
            !node_backoff_wait(&backoff, deadline)) {
            break;
        }
        nv = view_get(rc);
        if (nv != m.v) {
            view_put(m.v);
            m.v = nv;
            mget_route(&m);
        } else {
            view_put(nv);
        }
    }
    for (i = 0; ret == 0 && i < n; i++) {
        if (!m.keys[i].done) {
            mget_orphan(&m, i);
        }
    }
out:
    view_put(m.v);
    free(m.keys);
    return ret;
}

/*
 * The classic multi-get: `get k1 k2 ...` (gets with with_cas), hits as
 * VALUE in request order, misses left out, then END.
 */

struct classic {
    bool              with_cas;
    ringcache_mget_fn fn;
    void             *arg;
};

/* Report key i to the caller exactly once (v NULL: a miss). */
static void
classic_report(struct classic *g, struct mget *m, size_t i, int node,
               const struct ringcache_value *v)
{
    mget_answered(m, i);
    g->fn(g->arg, i, node, v != NULL ? 0 : RINGCACHE_ENOTFOUND, v);
}

static int
classic_check(void *arg, const char *key, size_t len)
{
    (void)arg;
    return mcp_check_key(key, len);
}

/* What share_key reads: a share's keys in the multi-get's table. */
struct share_keys {
    const struct route_key  *keys;
    const struct mget_share *s;
};

/* mcp_key_fn over a share: its i-th key in request order. */
static const char *
share_key(void *arg, size_t i, size_t *len)
{
    const struct share_keys *sk = arg;
    const struct route_key  *k = &sk->keys[sk->s->idx[i]];

    *len = k->len;
    return k->key;
}

/* "get k1 k2 ...\r\n" for a share (its size when buf is NULL). */
static size_t
classic_format(void *arg, char *buf, const struct route_key *keys, const struct mget_share *s)
{
    const struct classic *g = arg;
    struct share_keys     sk = { keys, s };
    size_t                i, bytes = 0;

    if (buf == NULL) {
        for (i = 0; i < s->n; i++) {
            bytes += keys[s->idx[i]].len;
        }
        return mcp_multiget_size(s->n, bytes);
    }
    return mcp_format_multiget(buf, g->with_cas, s->n, share_key, &sk);
}

/* One reply unit of a `get k1 k2 ...`. */
static int
classic_unit(void *arg, struct mget *m, struct mget_share *s, const struct route_key *keys,
             struct mcr_reply *r)
{
    struct classic *g = arg;
    size_t          j;

    if (r->kind == MCR_MOVED || r->kind == MCR_TRYAGAIN) {
        /* The whole request is redirected: its unanswered keys stay
         * pending for the next round (regrouped if the view changes). */
        mget_redirected(m, s, r);
        return MGET_DONE;
    }
    if (r->kind == MCR_VALUE) {
        struct ringcache_value v;

        /* Hits come in request order, misses omitted: find the key at
         * or after pos; the slots skipped are misses. */
        for (j = s->pos; j < s->n; j++) {
            const struct route_key *k = &keys[s->idx[j]];

            if (k->len == r->key_len && memcmp(k->key, r->key, r->key_len) == 0) {
                break;
            }
        }
        if (j == s->n || r->has_cas != g->with_cas) {
            return RINGCACHE_EPROTO;
        }
        for (; s->pos < j; s->pos++) {
            classic_report(g, m, s->idx[s->pos], (int)s->node, NULL);
        }
        /* The data is followed by \r\n in our buffer: terminate it
         * in place for the callback (already validated). */
        ((char *)r->data)[r->data_len] = '\0';
        v.data = (char *)r->data;
        v.len = r->data_len;
        v.flags = r->flags;
        v.cas = r->cas;
        classic_report(g, m, s->idx[s->pos], (int)s->node, &v);
        s->pos++;
        return MGET_MORE;
    }
    if (r->kind == MCR_END || r->kind == MCR_ERROR || r->kind == MCR_CLIENT_ERROR ||
        r->kind == MCR_SERVER_ERROR) {
        /* END: the rest are misses. An error reply ends the request
         * too; its keys are reported as misses (the node is fine). */
        for (; s->pos < s->n; s->pos++) {
            classic_report(g, m, s->idx[s->pos], (int)s->node, NULL);
        }
        return MGET_DONE;
    }
    return RINGCACHE_EPROTO;
}

static void
classic_orphan(void *arg, size_t i, int status)
{
    struct classic *g = arg;

    g->fn(g->arg, i, -1, status, NULL);
}

static const struct mget_proto classic_proto = { classic_check, classic_format, classic_unit,
                                                 classic_orphan };

int
ringcache_mget_cb(struct ringcache *rc, const char *const *keys, const size_t *key_lens, size_t n,
                  int with_cas, ringcache_mget_fn fn, void *arg)
{
    struct classic g = { .with_cas = with_cas != 0, .fn = fn, .arg = arg };

    if (fn == NULL) {
        return RINGCACHE_EINVAL;
    }
    return mget_keys(rc, keys, key_lens, n, &classic_proto, &g);
}

/* Collects mget results into the caller's arrays. */
struct mget_arrays {
    struct ringcache_value *values;
    int                    *status;
    int                     result;
};

static void
mget_collect(void *arg, size_t index, int node, int status, const struct ringcache_value *v)
{
    struct mget_arrays     *a = arg;
    struct ringcache_value *out = &a->values[index];

    (void)node;
    memset(out, 0, sizeof(*out));
    a->status[index] = status;
    if (status != 0) {
        return;
    }
    out->data = malloc(v->len + 1);
    if (out->data == NULL) {
        a->status[index] = RINGCACHE_ENOMEM;
        a->result = RINGCACHE_ENOMEM;
        return;
    }
    memcpy(out->data, v->data, v->len + 1);
    out->len = v->len;
    out->flags = v->flags;
    out->cas = v->cas;
}

int
ringcache_mget(struct ringcache *rc, const char *const *keys, const size_t *key_lens, size_t n,
               struct ringcache_value *values, int *status)
{
    struct mget_arrays a = { .values = values, .status = status };
    size_t             i;
    int                ret;

    if (values == NULL || status == NULL) {
        return RINGCACHE_EINVAL;
    }
    for (i = 0; i < n; i++) {
        memset(&values[i], 0, sizeof(values[i]));
        status[i] = RINGCACHE_ENOTFOUND;
    }
    ret = ringcache_mget_cb(rc, keys, key_lens, n, 0, mget_collect, &a);
    return ret != 0 ? ret : a.result;
}
