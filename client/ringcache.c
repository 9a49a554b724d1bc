/*
 * libringcache: handles, routing through ring/, single-key operations with
 * fail-over, and the parallel multi-get (one `get k1 k2 ...` per node, all
 * nodes polled together). The public contract is in ringcache.h.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/mcproto.h"
#include "client/pool.h"
#include "client/ringcache.h"
#include "client/route.h"
#include "ring/ring.h"

struct ringcache {
    struct ring             *ring;      /* read-only after creation */
    uint32_t                 replicas;  /* preference list length, <= ROUTE_R_MAX */
    struct ringcache_options opt;
    struct pool_config       cfg;
    size_t                   n_nodes;
    struct pool_node        *nodes;     /* one per membership node, same order */
};

/* What a reply handler says after each reply unit. */
#define STEP_MORE 0     /* keep reading */
#define STEP_DONE 1     /* the reply is complete */

/* A reply handler: consumes one parsed unit, returns STEP_MORE, STEP_DONE
 * or RINGCACHE_EPROTO (a reply this request cannot get). */
typedef int (*reply_fn)(void *ctx, const struct mcp_reply *r);

/* Write a one-line reason into the caller's err buffer, if it gave one. */
static void
set_err(char *err, size_t errlen, const char *fmt, const char *arg)
{
    if (err != NULL && errlen > 0) {
        snprintf(err, errlen, fmt, arg);
    }
}

void
ringcache_options_init(struct ringcache_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->connect_timeout_ms = 200;
    opt->op_timeout_ms = 1000;
    opt->retry_interval_ms = 1000;
    opt->retry_max_ms = 8000;
    opt->max_value_bytes = 1048576;
    opt->pool_size = 4;
}

const char *
ringcache_strerror(int code)
{
    switch (code) {
    case RINGCACHE_OK:          return "success";
    case RINGCACHE_ENOTFOUND:   return "not found";
    case RINGCACHE_ENOTSTORED:  return "not stored (add: key exists; replace/append/prepend: key missing)";
    case RINGCACHE_EEXISTS:     return "cas mismatch: the item changed since it was read";
    case RINGCACHE_EINVAL:      return "invalid argument";
    case RINGCACHE_EKEY:        return "invalid key (1..250 bytes, no space or control characters)";
    case RINGCACHE_ETOOBIG:     return "value too large";
    case RINGCACHE_ENOMEM:      return "out of memory";
    case RINGCACHE_EDOWN:       return "every owner of the key is down";
    case RINGCACHE_ETIMEDOUT:   return "timed out waiting for the node";
    case RINGCACHE_EIO:         return "connection to the node failed";
    case RINGCACHE_EPROTO:      return "protocol error in the node's reply";
    case RINGCACHE_ECLIENT:     return "the node rejected the request (CLIENT_ERROR)";
    case RINGCACHE_ESERVER:     return "the node could not do it (SERVER_ERROR)";
    case RINGCACHE_ENONNUMERIC: return "incr/decr on a value that is not a number";
    case RINGCACHE_EMEMBERS:    return "bad membership or seed list";
    default:                    return "unknown error code";
    }
}

void
ringcache_value_clear(struct ringcache_value *v)
{
    if (v != NULL) {
        free(v->data);
        memset(v, 0, sizeof(*v));
    }
}

/*
 * Creation
 */

/* 0 when the options make sense, RINGCACHE_EINVAL otherwise. */
static int
check_options(const struct ringcache_options *o)
{
    if (o->connect_timeout_ms <= 0 || o->op_timeout_ms <= 0 ||
        o->retry_interval_ms <= 0 || o->retry_max_ms <= 0 ||
        o->max_value_bytes == 0 || o->max_value_bytes > (size_t)INT32_MAX - 2) {
        return RINGCACHE_EINVAL;
    }
    return 0;
}

/* Build a handle around m (borrowed: the ring keeps its own copy). */
static int
new_from_members(struct ringcache **out, const struct ring_members *m,
                 const struct ringcache_options *opt, char *err, size_t errlen)
{
    struct ringcache *rc;
    const struct ring_members *rm;
    size_t i;
    int ret;

    rc = calloc(1, sizeof(*rc));
    if (rc == NULL) {
        return RINGCACHE_ENOMEM;
    }
    if (opt != NULL) {
        rc->opt = *opt;
    } else {
        ringcache_options_init(&rc->opt);
    }
    if (check_options(&rc->opt) != 0) {
        set_err(err, errlen, "%s", "bad options (timeouts must be > 0, max_value_bytes 1..2^31-3)");
        ret = RINGCACHE_EINVAL;
        goto fail;
    }
    rc->cfg.connect_timeout_ms = rc->opt.connect_timeout_ms;
    rc->cfg.op_timeout_ms = rc->opt.op_timeout_ms;
    rc->cfg.retry_interval_ms = rc->opt.retry_interval_ms;
    rc->cfg.retry_max_ms = rc->opt.retry_max_ms;
    rc->cfg.pool_size = rc->opt.pool_size;
    if (m->n_nodes == 0) {
        set_err(err, errlen, "%s", "the membership has no nodes");
        ret = RINGCACHE_EMEMBERS;
        goto fail;
    }
    rc->ring = ring_build(m);
    if (rc->ring == NULL) {
        set_err(err, errlen, "%s", "cannot build the ring (invalid membership or out of memory)");
        ret = RINGCACHE_EMEMBERS;
        goto fail;
    }
    rm = ring_members(rc->ring);
    rc->replicas = rm->replicas < ROUTE_R_MAX ? rm->replicas : ROUTE_R_MAX;
    if (rc->replicas == 0) {
        rc->replicas = 1;
    }
    rc->nodes = calloc(rm->n_nodes, sizeof(*rc->nodes));
    if (rc->nodes == NULL) {
        ret = RINGCACHE_ENOMEM;
        goto fail;
    }
    for (i = 0; i < rm->n_nodes; i++) {
        char why[256] = "";

        ret = pool_node_init(&rc->nodes[i], rm->nodes[i].addr, why, sizeof(why));
        if (ret != 0) {
            set_err(err, errlen, "%s", why);
            goto fail;
        }
        rc->n_nodes++;
    }
    *out = rc;
    return 0;
fail:
    ringcache_free(rc);
    return ret;
}

int
ringcache_new_members_text(struct ringcache **out, const char *text,
                           size_t len, const char *name,
                           const struct ringcache_options *opt,
                           char *err, size_t errlen)
{
    struct ring_members *m = NULL;
    char why[512] = "";
    int ret;

    if (out == NULL || text == NULL) {
        return RINGCACHE_EINVAL;
    }
    ret = ring_members_parse(text, len, name != NULL ? name : "members", &m,
                             why, sizeof(why));
    if (ret != RING_OK) {
        set_err(err, errlen, "%s", why[0] != '\0' ? why : "cannot parse the membership");
        return ret == RING_ENOMEM ? RINGCACHE_ENOMEM : RINGCACHE_EMEMBERS;
    }
    ret = new_from_members(out, m, opt, err, errlen);
    ring_members_free(m);
    return ret;
}

int
ringcache_new_members_file(struct ringcache **out, const char *path,
                           const struct ringcache_options *opt,
                           char *err, size_t errlen)
{
    FILE *f;
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    int ret;

    if (out == NULL || path == NULL) {
        return RINGCACHE_EINVAL;
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        if (err != NULL && errlen > 0) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
        }
        return RINGCACHE_EMEMBERS;
    }
    for (;;) {
        if (cap - len < 4096) {
            char *nbuf;

            cap = cap == 0 ? 8192 : cap * 2;
            nbuf = realloc(buf, cap);
            if (nbuf == NULL) {
                ret = RINGCACHE_ENOMEM;
                goto out;
            }
            buf = nbuf;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            break;
        }
    }
    if (ferror(f)) {
        if (err != NULL && errlen > 0) {
            snprintf(err, errlen, "%s: read error", path);
        }
        ret = RINGCACHE_EMEMBERS;
        goto out;
    }
    ret = ringcache_new_members_text(out, buf, len, path, opt, err, errlen);
out:
    free(buf);
    fclose(f);
    return ret;
}

int
ringcache_new_seeds(struct ringcache **out, const char *const *addrs,
                    size_t n_addrs, const struct ringcache_options *opt,
                    char *err, size_t errlen)
{
    struct ring_members *m;
    size_t i;
    int ret;

    if (out == NULL || addrs == NULL || n_addrs == 0) {
        return RINGCACHE_EINVAL;
    }
    m = ring_members_new();
    if (m == NULL) {
        return RINGCACHE_ENOMEM;
    }
    m->vnodes = RING_VNODES_DEFAULT;
    m->replicas = 1;
    for (i = 0; i < n_addrs; i++) {
        char id[RING_ID_MAX + 1];
        size_t j, k = 0;

        if (addrs[i] == NULL || strlen(addrs[i]) > RING_ID_MAX + 2) {
            set_err(err, errlen, "seed %s: address too long to be a node id",
                    addrs[i] != NULL ? addrs[i] : "(null)");
            ret = RINGCACHE_EMEMBERS;
            goto out;
        }
        /* The id is the address; ids cannot hold brackets. */
        for (j = 0; addrs[i][j] != '\0' && k < RING_ID_MAX; j++) {
            if (addrs[i][j] != '[' && addrs[i][j] != ']') {
                id[k++] = addrs[i][j];
            }
        }
        id[k] = '\0';
        if (ring_members_add(m, id, addrs[i], 1, "") != RING_OK) {
            set_err(err, errlen, "seed %s: invalid or duplicate address", addrs[i]);
            ret = RINGCACHE_EMEMBERS;
            goto out;
        }
    }
    ret = new_from_members(out, m, opt, err, errlen);
out:
    ring_members_free(m);
    return ret;
}

void
ringcache_free(struct ringcache *rc)
{
    size_t i;

    if (rc == NULL) {
        return;
    }
    for (i = 0; i < rc->n_nodes; i++) {
        pool_node_destroy(&rc->nodes[i]);
    }
    free(rc->nodes);
    ring_free(rc->ring);
    free(rc);
}

/*
 * Introspection
 */

size_t
ringcache_node_count(const struct ringcache *rc)
{
    return rc != NULL ? rc->n_nodes : 0;
}

const char *
ringcache_node_id(const struct ringcache *rc, size_t i)
{
    if (rc == NULL || i >= rc->n_nodes) {
        return NULL;
    }
    return ring_members(rc->ring)->nodes[i].id;
}

const char *
ringcache_node_addr(const struct ringcache *rc, size_t i)
{
    if (rc == NULL || i >= rc->n_nodes) {
        return NULL;
    }
    return ring_members(rc->ring)->nodes[i].addr;
}

int
ringcache_node_is_down(struct ringcache *rc, size_t i)
{
    if (rc == NULL || i >= rc->n_nodes) {
        return 0;
    }
    return pool_node_is_down(&rc->nodes[i], pool_now_ms()) ? 1 : 0;
}

int
ringcache_locate(const struct ringcache *rc, const char *key, size_t key_len,
                 size_t *out, size_t want)
{
    uint32_t owners[ROUTE_R_MAX];
    uint32_t n, i;

    if (rc == NULL || out == NULL) {
        return RINGCACHE_EINVAL;
    }
    if (mcp_check_key(key, key_len) != 0) {
        return RINGCACHE_EKEY;
    }
    n = route_owners(rc->ring, rc->replicas, key, key_len, owners);
    if (n > want) {
        n = (uint32_t)want;
    }
    for (i = 0; i < n; i++) {
        out[i] = owners[i];
    }
    return (int)n;
}

/*
 * One request on one node
 */

/* True for the errors that say the node (not the request) is at fault. */
static bool
is_node_failure(int err)
{
    return err == RINGCACHE_EIO || err == RINGCACHE_ETIMEDOUT ||
           err == RINGCACHE_EPROTO;
}

/*
 * Send iov to node idx and feed each reply unit to fn until it says
 * STEP_DONE. *sent tells whether any byte may have reached the node (a
 * write is then not tried elsewhere). Records the node's health. Returns
 * 0 or an error (the handler's own result travels in ctx).
 */
static int
node_request(struct ringcache *rc, uint32_t idx, const struct iovec *iov_in,
             int iovcnt, reply_fn fn, void *ctx, bool *sent)
{
    struct pool_node *node = &rc->nodes[idx];
    struct pool_conn *c = NULL;
    struct iovec iov[4];
    struct mcp_reply r;
    int64_t deadline;
    bool got_bytes;
    int ret, attempt, step;
    long used;
    size_t need;

    for (attempt = 0; attempt < 2; attempt++) {
        /* A retried attempt starts clean: the stale one never ran. */
        *sent = false;
        got_bytes = false;
        ret = pool_acquire(node, &rc->cfg, &c);
        if (ret != 0) {
            goto fail;
        }
        if (c->connecting) {
            ret = pool_conn_wait_connected(c, pool_now_ms() + rc->opt.connect_timeout_ms);
            if (ret != 0) {
                goto fail;
            }
        }
        deadline = pool_now_ms() + rc->opt.op_timeout_ms;
        memcpy(iov, iov_in, sizeof(iov[0]) * (size_t)iovcnt);
        *sent = true;
        ret = pool_conn_send(c, iov, iovcnt, deadline);
        for (step = STEP_MORE; ret == 0 && step == STEP_MORE;) {
            used = mcp_parse(c->buf + c->start, c->end - c->start,
                             rc->opt.max_value_bytes, &r, &need);
            if (used < 0) {
                ret = (int)used;
            } else if (used == 0) {
                ret = pool_conn_recv(c, deadline);
                got_bytes = got_bytes || ret == 0;
            } else {
                step = fn(ctx, &r);
                if (step < 0) {
                    ret = step;
                }
                c->start += (size_t)used;
            }
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
    pool_conn_close(c);
    if (ret == RINGCACHE_ENOMEM) {
        pool_node_ok(node);
    } else {
        pool_node_failed(node, &rc->cfg);
    }
    return ret;
}

/* Owners of a key in preference order; validates the key. */
static int
owners_of(struct ringcache *rc, const char *key, size_t key_len,
          uint32_t *owners, uint32_t *n)
{
    if (rc == NULL) {
        return RINGCACHE_EINVAL;
    }
    if (mcp_check_key(key, key_len) != 0) {
        return RINGCACHE_EKEY;
    }
    *n = route_owners(rc->ring, rc->replicas, key, key_len, owners);
    return 0;
}

/* A read: the first owner that answers decides; every owner down or
 * failing is a miss. */
static int
read_request(struct ringcache *rc, const char *key, size_t key_len,
             const struct iovec *iov, int iovcnt, reply_fn fn, void *ctx,
             int *result)
{
    uint32_t owners[ROUTE_R_MAX], n, i;
    bool sent;
    int ret;

    ret = owners_of(rc, key, key_len, owners, &n);
    if (ret != 0) {
        return ret;
    }
    for (i = 0; i < n; i++) {
        if (!pool_node_usable(&rc->nodes[owners[i]], pool_now_ms())) {
            continue;
        }
        ret = node_request(rc, owners[i], iov, iovcnt, fn, ctx, &sent);
        if (ret == 0) {
            return *result;
        }
        if (!is_node_failure(ret)) {
            return ret;
        }
    }
    return RINGCACHE_ENOTFOUND;
}

/* A write: the first owner not marked down; fail-over only when nothing
 * was sent. */
static int
write_request(struct ringcache *rc, const char *key, size_t key_len,
              const struct iovec *iov, int iovcnt, reply_fn fn, void *ctx,
              int *result)
{
    uint32_t owners[ROUTE_R_MAX], n, i;
    bool sent;
    int ret;

    ret = owners_of(rc, key, key_len, owners, &n);
    if (ret != 0) {
        return ret;
    }
    for (i = 0; i < n; i++) {
        if (!pool_node_usable(&rc->nodes[owners[i]], pool_now_ms())) {
            continue;
        }
        ret = node_request(rc, owners[i], iov, iovcnt, fn, ctx, &sent);
        if (ret == 0) {
            return *result;
        }
        if (!is_node_failure(ret) || sent) {
            return ret;
        }
    }
    return RINGCACHE_EDOWN;
}

/*
 * Reply handlers
 */

struct get_ctx {
    const char             *key;
    size_t                  key_len;
    struct ringcache_value  v;
    bool                    hit;
    int                     result;
};

/* Reply handler of get/gets: at most one VALUE for our key, then END.
 * The value is copied (malloc) into the context; the caller frees it. */
static int
get_reply(void *arg, const struct mcp_reply *r)
{
    struct get_ctx *g = arg;

    switch (r->kind) {
    case MCP_VALUE:
        if (g->hit || r->key_len != g->key_len ||
            memcmp(r->key, g->key, r->key_len) != 0) {
            return RINGCACHE_EPROTO;
        }
        g->v.data = malloc(r->data_len + 1);
        if (g->v.data == NULL) {
            g->result = RINGCACHE_ENOMEM;
        } else {
            memcpy(g->v.data, r->data, r->data_len);
            g->v.data[r->data_len] = '\0';
            g->v.len = r->data_len;
            g->v.flags = r->flags;
            g->v.cas = r->cas;
        }
        g->hit = true;
        return STEP_MORE;
    case MCP_END:
        if (g->result == 0 && !g->hit) {
            g->result = RINGCACHE_ENOTFOUND;
        }
        return STEP_DONE;
    case MCP_ERROR:
    case MCP_CLIENT_ERROR:
    case MCP_SERVER_ERROR:
        g->result = mcp_error_code(r);
        return STEP_DONE;
    default:
        return RINGCACHE_EPROTO;
    }
}

/* get or gets of one key, failing over down its preference list. */
static int
do_get(struct ringcache *rc, const char *cmd, const char *key, size_t key_len,
       struct ringcache_value *out)
{
    struct get_ctx g = { .key = key, .key_len = key_len };
    struct iovec iov[3];
    int ret;

    if (out == NULL) {
        return RINGCACHE_EINVAL;
    }
    iov[0].iov_base = (void *)cmd;
    iov[0].iov_len = strlen(cmd);
    iov[1].iov_base = (void *)key;
    iov[1].iov_len = key_len;
    iov[2].iov_base = (void *)"\r\n";
    iov[2].iov_len = 2;
    ret = read_request(rc, key, key_len, iov, 3, get_reply, &g, &g.result);
    if (ret == 0) {
        *out = g.v;
        return 0;
    }
    /* A fail-over may leave a value from a node that later failed. */
    ringcache_value_clear(&g.v);
    return ret;
}

int
ringcache_get(struct ringcache *rc, const char *key, size_t key_len,
              struct ringcache_value *out)
{
    return do_get(rc, "get ", key, key_len, out);
}

int
ringcache_gets(struct ringcache *rc, const char *key, size_t key_len,
               struct ringcache_value *out)
{
    return do_get(rc, "gets ", key, key_len, out);
}

/* Replies of storage, delete, touch, incr and decr: one line each. */
struct line_ctx {
    enum mcp_kind ok;        /* the success line of this command */
    int           result;
    uint64_t      number;
};

/* Reply handler of the one-line commands: maps the line to a code and
 * rejects lines that command can never get. */
static int
line_reply(void *arg, const struct mcp_reply *r)
{
    struct line_ctx *l = arg;

    if (r->kind == l->ok) {
        l->result = 0;
        l->number = r->number;
        return STEP_DONE;
    }
    switch (r->kind) {
    case MCP_NOT_STORED:
        if (l->ok != MCP_STORED) {
            return RINGCACHE_EPROTO;
        }
        l->result = RINGCACHE_ENOTSTORED;
        return STEP_DONE;
    case MCP_EXISTS:
        if (l->ok != MCP_STORED) {
            return RINGCACHE_EPROTO;
        }
        l->result = RINGCACHE_EEXISTS;
        return STEP_DONE;
    case MCP_NOT_FOUND:
        l->result = RINGCACHE_ENOTFOUND;
        return STEP_DONE;
    case MCP_ERROR:
    case MCP_CLIENT_ERROR:
    case MCP_SERVER_ERROR:
        l->result = mcp_error_code(r);
        return STEP_DONE;
    default:
        return RINGCACHE_EPROTO;
    }
}

/* A storage command (set/add/replace/append/prepend/cas): validate, then
 * header, value and \r\n in one sendmsg (no copy of the value). */
static int
do_store(struct ringcache *rc, const char *cmd, const char *key,
         size_t key_len, const void *value, size_t value_len, uint32_t flags,
         int32_t ttl, bool with_cas, uint64_t cas)
{
    struct line_ctx l = { .ok = MCP_STORED };
    char head[MCP_LINE_MAX];
    struct iovec iov[3];
    int ret;

    if (rc == NULL || (value == NULL && value_len > 0)) {
        return RINGCACHE_EINVAL;
    }
    ret = mcp_check_key(key, key_len);
    if (ret != 0) {
        return ret;
    }
    if (value_len > rc->opt.max_value_bytes) {
        return RINGCACHE_ETOOBIG;
    }
    iov[0].iov_base = head;
    iov[0].iov_len = mcp_format_storage(head, cmd, key, key_len, flags, ttl,
                                        value_len, with_cas, cas);
    iov[1].iov_base = (void *)value;
    iov[1].iov_len = value_len;
    iov[2].iov_base = (void *)"\r\n";
    iov[2].iov_len = 2;
    return write_request(rc, key, key_len, iov, 3, line_reply, &l, &l.result);
}

int
ringcache_set(struct ringcache *rc, const char *key, size_t key_len,
              const void *value, size_t value_len, uint32_t flags, int32_t ttl)
{
    return do_store(rc, "set", key, key_len, value, value_len, flags, ttl, false, 0);
}

int
ringcache_add(struct ringcache *rc, const char *key, size_t key_len,
              const void *value, size_t value_len, uint32_t flags, int32_t ttl)
{
    return do_store(rc, "add", key, key_len, value, value_len, flags, ttl, false, 0);
}

int
ringcache_replace(struct ringcache *rc, const char *key, size_t key_len,
                  const void *value, size_t value_len, uint32_t flags,
                  int32_t ttl)
{
    return do_store(rc, "replace", key, key_len, value, value_len, flags, ttl, false, 0);
}

int
ringcache_append(struct ringcache *rc, const char *key, size_t key_len,
                 const void *value, size_t value_len)
{
    return do_store(rc, "append", key, key_len, value, value_len, 0, 0, false, 0);
}

int
ringcache_prepend(struct ringcache *rc, const char *key, size_t key_len,
                  const void *value, size_t value_len)
{
    return do_store(rc, "prepend", key, key_len, value, value_len, 0, 0, false, 0);
}

int
ringcache_cas(struct ringcache *rc, const char *key, size_t key_len,
              const void *value, size_t value_len, uint32_t flags, int32_t ttl,
              uint64_t cas)
{
    return do_store(rc, "cas", key, key_len, value, value_len, flags, ttl, true, cas);
}

/* A keyed one-line command: "<cmd> <key><tail>\r\n". */
static int
do_line(struct ringcache *rc, const char *cmd, const char *key, size_t key_len,
        const char *tail, enum mcp_kind ok, uint64_t *number)
{
    struct line_ctx l = { .ok = ok };
    struct iovec iov[3];
    int ret;

    if (rc == NULL) {
        return RINGCACHE_EINVAL;
    }
    ret = mcp_check_key(key, key_len);
    if (ret != 0) {
        return ret;
    }
    iov[0].iov_base = (void *)cmd;
    iov[0].iov_len = strlen(cmd);
    iov[1].iov_base = (void *)key;
    iov[1].iov_len = key_len;
    iov[2].iov_base = (void *)tail;
    iov[2].iov_len = strlen(tail);
    ret = write_request(rc, key, key_len, iov, 3, line_reply, &l, &l.result);
    if (ret == 0 && number != NULL) {
        *number = l.number;
    }
    return ret;
}

int
ringcache_delete(struct ringcache *rc, const char *key, size_t key_len)
{
    return do_line(rc, "delete ", key, key_len, "\r\n", MCP_DELETED, NULL);
}

int
ringcache_incr(struct ringcache *rc, const char *key, size_t key_len,
               uint64_t delta, uint64_t *result)
{
    char tail[32];

    snprintf(tail, sizeof(tail), " %llu\r\n", (unsigned long long)delta);
    return do_line(rc, "incr ", key, key_len, tail, MCP_NUMBER, result);
}

int
ringcache_decr(struct ringcache *rc, const char *key, size_t key_len,
               uint64_t delta, uint64_t *result)
{
    char tail[32];

    snprintf(tail, sizeof(tail), " %llu\r\n", (unsigned long long)delta);
    return do_line(rc, "decr ", key, key_len, tail, MCP_NUMBER, result);
}

int
ringcache_touch(struct ringcache *rc, const char *key, size_t key_len,
                int32_t ttl)
{
    char tail[32];

    snprintf(tail, sizeof(tail), " %d\r\n", (int)ttl);
    return do_line(rc, "touch ", key, key_len, tail, MCP_TOUCHED, NULL);
}

/*
 * stats
 */

struct stats_ctx {
    ringcache_stat_fn fn;
    void             *arg;
    int               result;
};

/* Reply handler of stats: each STAT line to the caller's callback with
 * NUL-terminated copies, until END. */
static int
stats_reply(void *arg, const struct mcp_reply *r)
{
    struct stats_ctx *s = arg;
    char name[MCP_LINE_MAX], value[MCP_LINE_MAX];

    switch (r->kind) {
    case MCP_STAT:
        memcpy(name, r->key, r->key_len);
        name[r->key_len] = '\0';
        memcpy(value, r->data, r->data_len);
        value[r->data_len] = '\0';
        s->fn(s->arg, name, value);
        return STEP_MORE;
    case MCP_END:
        return STEP_DONE;
    case MCP_ERROR:
    case MCP_CLIENT_ERROR:
    case MCP_SERVER_ERROR:
        s->result = mcp_error_code(r);
        return STEP_DONE;
    default:
        return RINGCACHE_EPROTO;
    }
}

int
ringcache_stats(struct ringcache *rc, size_t i, ringcache_stat_fn fn, void *arg)
{
    struct stats_ctx s = { .fn = fn, .arg = arg };
    struct iovec iov = { .iov_base = (void *)"stats\r\n", .iov_len = 7 };
    bool sent;
    int ret;

    if (rc == NULL || fn == NULL || i >= rc->n_nodes) {
        return RINGCACHE_EINVAL;
    }
    ret = node_request(rc, (uint32_t)i, &iov, 1, stats_reply, &s, &sent);
    return ret != 0 ? ret : s.result;
}

/*
 * Multi-get
 */

enum batch_state { B_CONNECTING, B_SENDING, B_READING, B_DONE, B_FAILED };

/* One node's share of a multi-get round. */
struct mget_batch {
    uint32_t           node;
    enum batch_state   state;
    struct pool_conn  *conn;
    bool               retried;     /* already re-sent on a fresh connection */
    bool               got_bytes;
    char              *req;
    size_t             req_len;
    struct iovec       iov;
    struct iovec      *iovp;
    int                iovcnt;
    const size_t      *idx;         /* key indexes in request order (in the plan) */
    size_t             n;
    size_t             pos;         /* first request slot not yet answered */
    int64_t            connect_deadline;
};

struct mget {
    struct ringcache  *rc;
    struct route_key   *keys;
    size_t             n;
    bool               with_cas;
    ringcache_mget_fn  fn;
    void              *arg;
};

/* Report key i to the caller exactly once (v NULL: a miss). */
static void
mget_report(struct mget *m, size_t i, int node, const struct ringcache_value *v)
{
    m->keys[i].done = true;
    m->fn(m->arg, i, node, v != NULL ? 0 : RINGCACHE_ENOTFOUND, v);
}

/* Build "get k1 k2 ...\r\n" for a batch. */
static int
batch_build(struct mget *m, struct mget_batch *b)
{
    size_t i, len = 6, off;

    for (i = 0; i < b->n; i++) {
        len += 1 + m->keys[b->idx[i]].len;
    }
    b->req = malloc(len);
    if (b->req == NULL) {
        return RINGCACHE_ENOMEM;
    }
    off = m->with_cas ? 4 : 3;
    memcpy(b->req, m->with_cas ? "gets" : "get", off);
    for (i = 0; i < b->n; i++) {
        const struct route_key *k = &m->keys[b->idx[i]];

        b->req[off++] = ' ';
        memcpy(b->req + off, k->key, k->len);
        off += k->len;
    }
    b->req[off++] = '\r';
    b->req[off++] = '\n';
    b->req_len = off;
    return 0;
}

/* (Re)start a batch on a connection of its node. */
static int
batch_start(struct mget *m, struct mget_batch *b)
{
    int ret;

    ret = pool_acquire(&m->rc->nodes[b->node], &m->rc->cfg, &b->conn);
    if (ret != 0) {
        return ret;
    }
    b->iov.iov_base = b->req;
    b->iov.iov_len = b->req_len;
    b->iovp = &b->iov;
    b->iovcnt = 1;
    b->got_bytes = false;
    b->connect_deadline = pool_now_ms() + m->rc->opt.connect_timeout_ms;
    b->state = b->conn->connecting ? B_CONNECTING : B_SENDING;
    return 0;
}

/* Consume the reply units buffered on a batch's connection. Returns 0,
 * or RINGCACHE_EPROTO. */
static int
batch_parse(struct mget *m, struct mget_batch *b)
{
    struct pool_conn *c = b->conn;
    struct mcp_reply r;
    size_t need, j;
    long used;

    for (;;) {
        used = mcp_parse(c->buf + c->start, c->end - c->start,
                         m->rc->opt.max_value_bytes, &r, &need);
        if (used <= 0) {
            return (int)used;
        }
        if (r.kind == MCP_VALUE) {
            struct ringcache_value v;

            /* Hits come in request order, misses omitted: find the key at
             * or after pos; the slots skipped are misses. */
            for (j = b->pos; j < b->n; j++) {
                const struct route_key *k = &m->keys[b->idx[j]];

                if (k->len == r.key_len && memcmp(k->key, r.key, r.key_len) == 0) {
                    break;
                }
            }
            if (j == b->n || r.has_cas != m->with_cas) {
                return RINGCACHE_EPROTO;
            }
            for (; b->pos < j; b->pos++) {
                mget_report(m, b->idx[b->pos], (int)b->node, NULL);
            }
            /* The data is followed by \r\n in our buffer: terminate it
             * in place for the callback (already validated). */
            ((char *)r.data)[r.data_len] = '\0';
            v.data = (char *)r.data;
            v.len = r.data_len;
            v.flags = r.flags;
            v.cas = r.cas;
            mget_report(m, b->idx[b->pos], (int)b->node, &v);
            b->pos++;
            c->start += (size_t)used;
            continue;
        }
        c->start += (size_t)used;
        if (r.kind == MCP_END || r.kind == MCP_ERROR ||
            r.kind == MCP_CLIENT_ERROR || r.kind == MCP_SERVER_ERROR) {
            /* END: the rest are misses. An error reply ends the request
             * too; its keys are reported as misses (the node is fine). */
            for (; b->pos < b->n; b->pos++) {
                mget_report(m, b->idx[b->pos], (int)b->node, NULL);
            }
            if (c->start != c->end) {
                return RINGCACHE_EPROTO;
            }
            b->state = B_DONE;
            return 0;
        }
        return RINGCACHE_EPROTO;
    }
}

/* A batch failed: drop its connection. A pooled connection found dead
 * before any byte came back is retried once on a fresh one; otherwise the
 * node is marked down and the unanswered keys move to their next owner. */
static void
batch_fail(struct mget *m, struct mget_batch *b, int err)
{
    struct pool_conn *c = b->conn;
    size_t j;

    b->conn = NULL;
    if (c != NULL) {
        bool stale = err == RINGCACHE_EIO && c->reused && !b->got_bytes;

        pool_conn_close(c);
        if (stale && !b->retried) {
            b->retried = true;
            pool_node_drop_idle(&m->rc->nodes[b->node]);
            if (batch_start(m, b) == 0) {
                return;
            }
        }
    }
    b->state = B_FAILED;
    pool_node_failed(&m->rc->nodes[b->node], &m->rc->cfg);
    for (j = b->pos; j < b->n; j++) {
        m->keys[b->idx[j]].next++;
    }
}

/* Drive one event (or the first attempt) of a batch. */
static void
batch_step(struct mget *m, struct mget_batch *b, short revents)
{
    long got;
    int ret;

    if (b->state == B_CONNECTING) {
        if (revents == 0) {
            return;
        }
        if (pool_conn_finish_connect(b->conn) != 0) {
            batch_fail(m, b, RINGCACHE_EIO);
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
                pool_release(&m->rc->nodes[b->node], b->conn, true, &m->rc->cfg);
                b->conn = NULL;
                pool_node_ok(&m->rc->nodes[b->node]);
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
    size_t *map, i, np;
    int64_t deadline = pool_now_ms() + m->rc->opt.op_timeout_ms, now;
    int rc, wait;

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
        now = pool_now_ms();
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
            pfd[np].events = b[i].state == B_READING ? POLLIN : POLLOUT;
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

/* route_usable_fn over the handle's nodes. */
static bool
node_usable(void *arg, uint32_t node)
{
    struct ringcache *rc = arg;

    return pool_node_usable(&rc->nodes[node], pool_now_ms());
}

/* One round: every unanswered key goes to its next usable owner, one
 * request per node, all in parallel. Returns 0 or RINGCACHE_ENOMEM; *left
 * counts keys still unanswered after it. */
static int
mget_round(struct mget *m, size_t *left)
{
    struct ringcache *rc = m->rc;
    struct route_plan plan;
    struct mget_batch *b = NULL;
    size_t i, nb = 0;
    int ret;

    ret = route_plan_build(&plan, rc->n_nodes, m->keys, m->n, node_usable, rc);
    if (ret != 0) {
        return ret;
    }
    for (i = 0; i < m->n; i++) {
        if (!m->keys[i].done && m->keys[i].next == m->keys[i].n_owners) {
            mget_report(m, i, -1, NULL);
        }
    }
    nb = plan.n_groups;
    b = calloc(nb > 0 ? nb : 1, sizeof(*b));
    if (b == NULL) {
        ret = RINGCACHE_ENOMEM;
        goto out;
    }
    for (i = 0; i < nb; i++) {
        b[i].node = plan.node[i];
        b[i].idx = plan.idx + plan.start[i];
        b[i].n = plan.start[i + 1] - plan.start[i];
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
            pool_node_ok(&rc->nodes[plan.node[i]]);
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

int
ringcache_mget_cb(struct ringcache *rc, const char *const *keys,
                  const size_t *key_lens, size_t n, int with_cas,
                  ringcache_mget_fn fn, void *arg)
{
    struct mget m = { .rc = rc, .n = n, .with_cas = with_cas != 0, .fn = fn, .arg = arg };
    size_t i, left = n;
    uint32_t round;
    int ret = 0;

    if (rc == NULL || fn == NULL || (keys == NULL && n > 0)) {
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
        if (mcp_check_key(k->key, k->len) != 0) {
            ret = RINGCACHE_EKEY;
            goto out;
        }
        k->n_owners = route_owners(rc->ring, rc->replicas, k->key, k->len, k->owners);
    }
    /* Each round moves a failed key one step down its preference list. */
    for (round = 0; left > 0 && round <= rc->replicas; round++) {
        ret = mget_round(&m, &left);
        if (ret != 0) {
            goto out;
        }
    }
    for (i = 0; i < n; i++) {
        if (!m.keys[i].done) {
            mget_report(&m, i, -1, NULL);
        }
    }
out:
    free(m.keys);
    return ret;
}

/* Collects mget results into the caller's arrays. */
struct mget_arrays {
    struct ringcache_value *values;
    int                    *status;
    int                     result;
};

static void
mget_collect(void *arg, size_t index, int node, int status,
             const struct ringcache_value *v)
{
    struct mget_arrays *a = arg;
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
ringcache_mget(struct ringcache *rc, const char *const *keys,
               const size_t *key_lens, size_t n,
               struct ringcache_value *values, int *status)
{
    struct mget_arrays a = { .values = values, .status = status };
    size_t i;
    int ret;

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
