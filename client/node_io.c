/*
 * node_io: one request on one node (a pooled connection, the epoch
 * declaration ahead of it, reply units fed to the request's handler,
 * MOVED and TRYAGAIN caught), and keyed requests around it: fail-over
 * down the key's preference list and the redirect loop.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "client/rc_internal.h"

/*
 * One request on one node
 */

/* True for the errors that say the node (not the request) is at fault. */
static bool
is_node_failure(int err)
{
    return err == RINGCACHE_EIO || err == RINGCACHE_ETIMEDOUT || err == RINGCACHE_EPROTO ||
           err == RINGCACHE_ETLS;
}

/* An ERROR or CLIENT_ERROR to `epoch` or `config`: rn is a plain
 * memcached, never asked or declared to again. */
void
node_saw_plain(struct rc_node *rn, const struct mcr_reply *r)
{
    if (r->kind == MCR_ERROR || r->kind == MCR_CLIENT_ERROR) {
        __atomic_store_n(&rn->no_ext, true, __ATOMIC_RELAXED);
    }
}

/* The tail of every reply handler (see rc_internal.h). */
int
node_reply_error(const struct mcr_reply *r, int *result)
{
    switch (r->kind) {
    case MCR_ERROR:
    case MCR_CLIENT_ERROR:
    case MCR_SERVER_ERROR:
        *result = mcp_error_code(r);
        return STEP_DONE;
    default:
        return RINGCACHE_EPROTO;
    }
}

/* The reply r to the declaration of epoch e on connection c of node rn:
 * OK records it; ERROR marks the node as not speaking epochs (it is then
 * never declared to again). 0, or RINGCACHE_EPROTO for any other reply. */
int
node_declare_ack(struct rc_node *rn, struct pool_conn *c, uint64_t e, const struct mcr_reply *r)
{
    if (r->kind == MCR_ERROR || r->kind == MCR_CLIENT_ERROR) {
        node_saw_plain(rn, r);
    } else if (r->kind != MCR_OK) {
        return RINGCACHE_EPROTO;
    }
    c->declared = e;
    return 0;
}

/* The address a MOVED reply names into addr (MCR_ADDR_MAX + 1 bytes; ""
 * when it names none). */
void
node_redirect_addr(char *addr, const struct mcr_reply *r)
{
    addr[0] = '\0';
    if (r->kind == MCR_MOVED && r->key_len > 0) {
        memcpy(addr, r->key, r->key_len);
        addr[r->key_len] = '\0';
    }
}

/*
 * Send iov to node and feed each reply unit to op->fn until it says
 * STEP_DONE. When declare is non-zero and the connection has not declared
 * that epoch, "epoch <declare>\r\n" goes first in the same write and its
 * OK is consumed here (an ERROR marks the node as not speaking epochs). A
 * MOVED or TRYAGAIN reply ends the request into *rd (the handler never
 * sees it). *sent tells whether any byte may have reached the node (a
 * write is then not tried elsewhere). Records the node's health. Returns
 * 0 or an error (the handler's own result travels in its context).
 */
int
node_request(struct ringcache *rc, struct rc_node *rn, uint64_t declare, const struct iovec *iov_in,
             int iovcnt, const struct op *op, bool *sent, struct redirect *rd)
{
    struct pool_node *node = &rn->pool;
    struct pool_conn *c = NULL;
    struct iovec      iov[6];
    struct mcr_reply  r;
    char              prefix[MCP_DECLARE_MAX];
    int64_t           deadline;
    bool              got_bytes, want_ack;
    int               ret, attempt, step, n;
    long              used;
    size_t            need;

    rd->kind = 0;
    for (attempt = 0; attempt < 2; attempt++) {
        /* A retried attempt starts clean: the stale one never ran. */
        *sent = false;
        got_bytes = false;
        *op->result = 0;
        if (op->reset != NULL) {
            op->reset(op->ctx);
        }
        ret = pool_acquire(node, &rc->cfg, &c);
        if (ret != 0) {
            goto fail;
        }
        if (c->connecting) {
            ret = pool_conn_wait_connected(c, util_now_ms() + rc->opt.connect_timeout_ms);
            if (ret != 0) {
                goto fail;
            }
        }
        deadline = util_now_ms() + rc->opt.op_timeout_ms;
        n = 0;
        want_ack = declare != 0 && c->declared != declare &&
                   !__atomic_load_n(&rn->no_ext, __ATOMIC_RELAXED);
        if (want_ack) {
            iov[0].iov_base = prefix;
            iov[0].iov_len = mcp_format_declare(prefix, declare);
            n = 1;
        }
        memcpy(iov + n, iov_in, sizeof(iov[0]) * (size_t)iovcnt);
        *sent = true;
        ret = pool_conn_send(c, iov, n + iovcnt, deadline);
        for (step = STEP_MORE; ret == 0 && step == STEP_MORE;) {
            used =
                mcp_parse(c->buf + c->start, c->end - c->start, rc->opt.max_value_bytes, &r, &need);
            if (used < 0) {
                ret = (int)used;
                break;
            }
            if (used == 0) {
                ret = pool_conn_recv(c, deadline);
                got_bytes = got_bytes || ret == 0;
                continue;
            }
            if (want_ack) {
                /* The reply to our declaration comes first. */
                ret = node_declare_ack(rn, c, declare, &r);
                if (ret != 0) {
                    break;
                }
                want_ack = false;
            } else if (r.kind == MCR_MOVED || r.kind == MCR_TRYAGAIN) {
                rd->kind = r.kind;
                rd->epoch = r.epoch;
                node_redirect_addr(rd->addr, &r);
                view_saw_epoch(rc, r.epoch);
                step = STEP_DONE;
            } else {
                step = op->fn(op->ctx, &r);
                if (step < 0) {
                    ret = step;
                }
            }
            c->start += (size_t)used;
        }
        if (ret == 0) {
            /* Bytes after a complete reply mean we are out of step. */
            if (c->start != c->end) {
                ret = RINGCACHE_EPROTO;
                goto fail;
            }
            pool_release(node, c, true, &rc->cfg);
            pool_node_ok(node);
            return 0;
        }
        /* A pooled connection the node closed while idle (restart, idle
         * timeout) fails at once with nothing read: the request never ran,
         * so try once more on a fresh connection. */
        if (ret == RINGCACHE_EIO && c->reused && !got_bytes) {
            pool_conn_close(c);
            c = NULL;
            pool_node_drop_idle(node);
            continue;
        }
        goto fail;
    }
fail:
    rd->kind = 0;
    pool_conn_close_how(c, ret == RINGCACHE_ETIMEDOUT);
    if (ret == RINGCACHE_ENOMEM) {
        pool_node_ok(node);
    } else {
        pool_node_failed(node, &rc->cfg, ret);
    }
    return ret;
}

/* Sleep *backoff ms unless that passes deadline; then double it. False
 * when the budget is spent. */
bool
node_backoff_wait(int *backoff, int64_t deadline)
{
    struct timespec ts;

    if (util_now_ms() + *backoff > deadline) {
        return false;
    }
    ts.tv_sec = *backoff / 1000;
    ts.tv_nsec = (long)(*backoff % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    if (*backoff < 512) {
        *backoff *= 2;
    }
    return true;
}

/*
 * Keyed requests: one attempt with a view, then the redirect loop
 */

/*
 * One attempt with view v down the key's preference list, skipping owners
 * marked down. A read: the first owner that answers decides; every owner
 * down or failing is a miss. A write: fail-over only while nothing was
 * sent (a write is never applied twice); every owner down is
 * RINGCACHE_EDOWN. A redirect stops it (*rd, *from); *primary_down says
 * whether the key's primary was passed over (marked down or failing).
 */
static int
owners_once(struct ringcache *rc, struct rc_view *v, const char *key, size_t key_len, bool write,
            const struct iovec *iov, int iovcnt, const struct op *op, struct redirect *rd,
            struct rc_node **from, bool *primary_down)
{
    uint32_t owners[RING_R_MAX], n, i;
    uint64_t declare = view_declare_epoch(rc, v);
    bool     sent;
    int      ret;

    rd->kind = 0;
    *primary_down = false;
    n = route_owners(v->ring, v->replicas, key, key_len, owners);
    for (i = 0; i < n; i++) {
        struct rc_node *node = v->nodes[owners[i]];

        if (!pool_node_usable(&node->pool, util_now_ms())) {
            *primary_down |= i == 0;
            continue;
        }
        ret = node_request(rc, node, declare, iov, iovcnt, op, &sent, rd);
        if (rd->kind != 0) {
            *from = node;
            return 0;
        }
        if (ret == 0) {
            return *op->result;
        }
        if (!is_node_failure(ret) || (write && sent)) {
            return ret;
        }
        *primary_down |= i == 0;
    }
    return write ? RINGCACHE_EDOWN : RINGCACHE_ENOTFOUND;
}

/*
 * A keyed request with the epoch rules of ringcache.h: MOVED with a
 * higher epoch -> learn it and retry at once; MOVED from a node behind us
 * (or when nothing newer could be fetched) -> back off and retry; at most
 * HOPS_MAX MOVED per call. TRYAGAIN -> back off 1 ms doubling within the
 * op timeout (at once when it taught us a newer epoch). Out of budget: a
 * read is a miss, a write RINGCACHE_EMOVED / RINGCACHE_ETRYAGAIN, or
 * RINGCACHE_EUNAVAILABLE when it was redirected because its primary is
 * down (a replica sends it back there until the failover). The caller has
 * checked rc and the key (check_call in ringcache.c).
 */
int
node_keyed_request(struct ringcache *rc, const char *key, size_t key_len, bool write,
                   const struct iovec *iov, int iovcnt, const struct op *op)
{
    struct redirect rd;
    struct rc_node *from;
    struct rc_view *v;
    uint64_t        had;
    int64_t         deadline;
    int             hops = 0, backoff = 1, ret;
    bool            primary_down = false;

    view_maybe_poll(rc);
    deadline = util_now_ms() + rc->opt.op_timeout_ms;
    for (;;) {
        from = NULL;
        v = view_get(rc);
        had = v->epoch;
        ret = owners_once(rc, v, key, key_len, write, iov, iovcnt, op, &rd, &from, &primary_down);
        view_put(v);
        if (rd.kind == 0) {
            return ret;
        }
        if (rd.kind == MCR_MOVED && ++hops > HOPS_MAX) {
            return !write         ? RINGCACHE_ENOTFOUND
                   : primary_down ? RINGCACHE_EUNAVAILABLE
                                  : RINGCACHE_EMOVED;
        }
        if (rd.epoch > had &&
            view_learn(rc, had, rd.epoch, from, rd.kind == MCR_MOVED ? rd.addr : NULL)) {
            continue;
        }
        if (!node_backoff_wait(&backoff, deadline)) {
            if (!write) {
                return RINGCACHE_ENOTFOUND;
            }
            return rd.kind != MCR_MOVED ? RINGCACHE_ETRYAGAIN
                   : primary_down       ? RINGCACHE_EUNAVAILABLE
                                        : RINGCACHE_EMOVED;
        }
    }
}
