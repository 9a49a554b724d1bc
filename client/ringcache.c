/*
 * libringcache: handles, routing through ring/ with a reference-counted
 * ring snapshot per epoch, single-key operations with fail-over and
 * MOVED/TRYAGAIN handling, epoch learning (config, epoch poll), and the
 * parallel multi-get (one `get k1 k2 ...` per node, all nodes polled
 * together). The public contract is in ringcache.h.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/mcproto.h"
#include "client/pool.h"
#include "client/ringcache.h"
#include "client/route.h"
#include "ring/ring.h"

#define HOPS_MAX          3      /* MOVED redirects followed per operation */
#define POLL_DEFAULT_MS   1000   /* default epoch poll interval */
#define DECLARE_MAX       40     /* "epoch <u64>\r\n" and its NUL */

/* A node as the handle knows it. Nodes live until ringcache_free (a ring
 * snapshot in use may still point at a node an epoch dropped), so the
 * strings below can be handed out. */
struct rc_node {
    struct pool_node pool;
    char             id[RING_ID_MAX + 1];   /* "" for a node known only by a MOVED address */
    char             addr[RING_ADDR_MAX + 1];
    bool             no_ext;                /* atomic: answered ERROR to `epoch`/`config` */
};

/* One epoch's routing: immutable once published, freed with its last
 * reference. */
struct rc_view {
    unsigned         refs;                  /* atomic */
    uint64_t         epoch;
    struct ring     *ring;
    uint32_t         replicas;              /* preference list length, <= ROUTE_R_MAX */
    size_t           n_nodes;
    struct rc_node **nodes;                 /* ring index -> node (the handle owns the nodes) */
};

struct ringcache {
    pthread_mutex_t          view_lock;     /* guards view (read + take a reference) */
    struct rc_view          *view;
    pthread_mutex_t          refresh_lock;  /* one adoption at a time; guards the node table */
    struct rc_node         **all;           /* every node ever used, until free */
    size_t                   n_all;
    size_t                   cap_all;
    struct ringcache_options opt;
    struct pool_config       cfg;
    int                      poll_ms;       /* atomic; 0 = no poll */
    int64_t                  next_poll;     /* atomic; monotonic ms */
    unsigned                 poll_rr;       /* atomic; round robin of polled nodes */
    bool                     confirmed;     /* atomic: a node reported a non-zero epoch */
};

/* What a reply handler says after each reply unit. */
#define STEP_MORE 0     /* keep reading */
#define STEP_DONE 1     /* the reply is complete */

/* A reply handler: consumes one parsed unit, returns STEP_MORE, STEP_DONE
 * or RINGCACHE_EPROTO (a reply this request cannot get). */
typedef int (*reply_fn)(void *ctx, const struct mcp_reply *r);

/* A request's reply handling: the handler, its context, how to clear the
 * context before another attempt, and where the handler leaves its code. */
struct op {
    reply_fn  fn;
    void    (*reset)(void *ctx);
    void     *ctx;
    int      *result;
};

/* A MOVED or TRYAGAIN reply (kind 0: none). */
struct redirect {
    enum mcp_kind kind;
    uint64_t      epoch;
    char          addr[MCP_ADDR_MAX + 1];
};

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
    case RINGCACHE_EMOVED:      return "the key's owner moved and 3 redirects (MOVED) did not reach it";
    case RINGCACHE_ETRYAGAIN:   return "the key's range is being moved (TRYAGAIN) for longer than the op timeout";
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
 * Ring snapshots and the node table
 */

/* Take a reference on the current view. Takes view_lock briefly. */
static struct rc_view *
view_get(struct ringcache *rc)
{
    struct rc_view *v;

    pthread_mutex_lock(&rc->view_lock);
    v = rc->view;
    __atomic_add_fetch(&v->refs, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&rc->view_lock);
    return v;
}

/* Free a view that nobody references (its nodes belong to the handle). */
static void
view_free(struct rc_view *v)
{
    if (v != NULL) {
        ring_free(v->ring);
        free(v->nodes);
        free(v);
    }
}

/* Drop a reference; the last one frees the view. NULL is allowed. */
static void
view_put(struct rc_view *v)
{
    if (v != NULL && __atomic_sub_fetch(&v->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        view_free(v);
    }
}

/* The epoch a connection declares for requests routed with v: only once
 * some node has reported an epoch, so plain memcached never sees it. */
static uint64_t
declare_epoch(struct ringcache *rc, const struct rc_view *v)
{
    if (v->epoch == 0 || !__atomic_load_n(&rc->confirmed, __ATOMIC_ACQUIRE)) {
        return 0;
    }
    return v->epoch;
}

/* A node reported epoch e: from now on connections declare theirs. */
static void
saw_epoch(struct ringcache *rc, uint64_t e)
{
    if (e > 0 && !__atomic_load_n(&rc->confirmed, __ATOMIC_RELAXED)) {
        __atomic_store_n(&rc->confirmed, true, __ATOMIC_RELEASE);
    }
}

/* The node with this address (and this id; id "" or NULL: any id), added
 * to the table when missing. A node first known by address only takes the
 * id of the membership that names it (it is in no view before). Caller
 * holds refresh_lock (or is creating the handle). NULL with err set. */
static struct rc_node *
node_lookup(struct ringcache *rc, const char *id, const char *addr, char *err,
            size_t errlen)
{
    struct rc_node *n;
    size_t i;

    if (id == NULL) {
        id = "";
    }
    for (i = 0; i < rc->n_all; i++) {
        n = rc->all[i];
        if (strcmp(n->addr, addr) != 0) {
            continue;
        }
        if (id[0] == '\0' || strcmp(n->id, id) == 0) {
            return n;
        }
        if (n->id[0] == '\0') {
            snprintf(n->id, sizeof(n->id), "%s", id);
            return n;
        }
    }
    if (strlen(addr) > RING_ADDR_MAX) {
        set_err(err, errlen, "%s: address too long", addr);
        return NULL;
    }
    if (rc->n_all == rc->cap_all) {
        size_t ncap = rc->cap_all == 0 ? 8 : rc->cap_all * 2;
        struct rc_node **na = realloc(rc->all, ncap * sizeof(*na));

        if (na == NULL) {
            set_err(err, errlen, "%s", "out of memory");
            return NULL;
        }
        rc->all = na;
        rc->cap_all = ncap;
    }
    n = calloc(1, sizeof(*n));
    if (n == NULL) {
        set_err(err, errlen, "%s", "out of memory");
        return NULL;
    }
    if (pool_node_init(&n->pool, addr, err, errlen) != 0) {
        free(n);
        return NULL;
    }
    snprintf(n->id, sizeof(n->id), "%s", id);
    snprintf(n->addr, sizeof(n->addr), "%s", addr);
    rc->all[rc->n_all++] = n;
    return n;
}

/* Build a view of membership m (borrowed). Caller holds refresh_lock.
 * RINGCACHE_EMEMBERS or RINGCACHE_ENOMEM with err set. */
static int
view_build(struct ringcache *rc, const struct ring_members *m,
           struct rc_view **out, char *err, size_t errlen)
{
    const struct ring_members *rm;
    struct rc_view *v;
    size_t i;
    int ret;

    if (m->n_nodes == 0) {
        set_err(err, errlen, "%s", "the membership has no nodes");
        return RINGCACHE_EMEMBERS;
    }
    v = calloc(1, sizeof(*v));
    if (v == NULL) {
        return RINGCACHE_ENOMEM;
    }
    v->refs = 1;
    v->epoch = m->epoch;
    v->ring = ring_build(m);
    if (v->ring == NULL) {
        set_err(err, errlen, "%s", "cannot build the ring (invalid membership or out of memory)");
        ret = RINGCACHE_EMEMBERS;
        goto fail;
    }
    rm = ring_members(v->ring);
    v->replicas = rm->replicas < ROUTE_R_MAX ? rm->replicas : ROUTE_R_MAX;
    if (v->replicas == 0) {
        v->replicas = 1;
    }
    v->nodes = calloc(rm->n_nodes, sizeof(*v->nodes));
    if (v->nodes == NULL) {
        ret = RINGCACHE_ENOMEM;
        goto fail;
    }
    for (i = 0; i < rm->n_nodes; i++) {
        v->nodes[i] = node_lookup(rc, rm->nodes[i].id, rm->nodes[i].addr, err, errlen);
        if (v->nodes[i] == NULL) {
            ret = RINGCACHE_EMEMBERS;
            goto fail;
        }
    }
    v->n_nodes = rm->n_nodes;
    *out = v;
    return 0;
fail:
    view_free(v);
    return ret;
}

/* Make m the handle's membership if it is the first one or its epoch is
 * strictly higher than the current one. Returns 1 adopted, 0 not newer,
 * or an error (err set). Caller holds refresh_lock. Nodes the new epoch
 * dropped lose their idle connections (calls still using the old view
 * keep theirs). */
static int
adopt(struct ringcache *rc, const struct ring_members *m, char *err, size_t errlen)
{
    struct rc_view *v = NULL, *old;
    size_t i, j;
    int ret;

    if (rc->view != NULL && m->epoch <= rc->view->epoch) {
        return 0;
    }
    ret = view_build(rc, m, &v, err, errlen);
    if (ret != 0) {
        return ret;
    }
    pthread_mutex_lock(&rc->view_lock);
    old = rc->view;
    rc->view = v;
    pthread_mutex_unlock(&rc->view_lock);
    view_put(old);
    for (i = 0; i < rc->n_all; i++) {
        for (j = 0; j < v->n_nodes && v->nodes[j] != rc->all[i]; j++) {
        }
        if (j == v->n_nodes) {
            pool_node_drop_idle(&rc->all[i]->pool);
        }
    }
    return 1;
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

/* A handle with no membership yet (rc->view NULL). */
static int
handle_new(struct ringcache **out, const struct ringcache_options *opt,
           char *err, size_t errlen)
{
    struct ringcache *rc;

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
        free(rc);
        return RINGCACHE_EINVAL;
    }
    rc->cfg.connect_timeout_ms = rc->opt.connect_timeout_ms;
    rc->cfg.op_timeout_ms = rc->opt.op_timeout_ms;
    rc->cfg.retry_interval_ms = rc->opt.retry_interval_ms;
    rc->cfg.retry_max_ms = rc->opt.retry_max_ms;
    rc->cfg.pool_size = rc->opt.pool_size;
    rc->poll_ms = POLL_DEFAULT_MS;
    pthread_mutex_init(&rc->view_lock, NULL);
    pthread_mutex_init(&rc->refresh_lock, NULL);
    *out = rc;
    return 0;
}

/* Build a handle around m (borrowed). The first call polls the nodes'
 * epoch, so a membership file learns at once whether the nodes speak
 * epochs (and whether a newer one exists). */
static int
new_from_members(struct ringcache **out, const struct ring_members *m,
                 const struct ringcache_options *opt, char *err, size_t errlen)
{
    struct ringcache *rc;
    int ret;

    ret = handle_new(&rc, opt, err, errlen);
    if (ret != 0) {
        return ret;
    }
    ret = adopt(rc, m, err, errlen);
    if (ret < 0) {
        ringcache_free(rc);
        return ret;
    }
    rc->next_poll = 0;
    *out = rc;
    return 0;
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

static int refresh_from(struct ringcache *rc, struct rc_node *node, char *err,
                        size_t errlen);

int
ringcache_new_seeds(struct ringcache **out, const char *const *addrs,
                    size_t n_addrs, const struct ringcache_options *opt,
                    char *err, size_t errlen)
{
    struct ringcache *rc = NULL;
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
    ret = new_from_members(&rc, m, opt, err, errlen);
    if (ret != 0) {
        goto out;
    }
    /* The seeds' view (epoch 0) is in place; ask them for the real one.
     * A seed that fails or has none is skipped; an invalid membership
     * from a node is skipped too (another seed may do better). */
    for (i = 0; i < rc->view->n_nodes; i++) {
        struct rc_node *node = rc->view->nodes[i];

        if (pool_node_usable(&node->pool, pool_now_ms()) && refresh_from(rc, node, NULL, 0) > 0) {
            break;
        }
    }
    ret = 0;
    rc->next_poll = pool_now_ms() + rc->poll_ms;
    *out = rc;
    rc = NULL;
out:
    ringcache_free(rc);
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
    view_put(rc->view);
    for (i = 0; i < rc->n_all; i++) {
        pool_node_destroy(&rc->all[i]->pool);
        free(rc->all[i]);
    }
    free(rc->all);
    pthread_mutex_destroy(&rc->view_lock);
    pthread_mutex_destroy(&rc->refresh_lock);
    free(rc);
}

/*
 * Introspection
 */

size_t
ringcache_node_count(const struct ringcache *rc)
{
    struct rc_view *v;
    size_t n;

    if (rc == NULL) {
        return 0;
    }
    /* The handle is opaque: "const" means the call changes nothing the
     * caller can see; taking a reference on the view is internal. */
    v = view_get((struct ringcache *)rc);
    n = v->n_nodes;
    view_put(v);
    return n;
}

/* Node i of the current view, or NULL. The node outlives the view. */
static struct rc_node *
current_node(const struct ringcache *rc, size_t i)
{
    struct rc_view *v;
    struct rc_node *n;

    if (rc == NULL) {
        return NULL;
    }
    v = view_get((struct ringcache *)rc);
    n = i < v->n_nodes ? v->nodes[i] : NULL;
    view_put(v);
    return n;
}

const char *
ringcache_node_id(const struct ringcache *rc, size_t i)
{
    struct rc_node *n = current_node(rc, i);

    return n != NULL ? n->id : NULL;
}

const char *
ringcache_node_addr(const struct ringcache *rc, size_t i)
{
    struct rc_node *n = current_node(rc, i);

    return n != NULL ? n->addr : NULL;
}

int
ringcache_node_is_down(struct ringcache *rc, size_t i)
{
    struct rc_node *n = current_node(rc, i);

    if (n == NULL) {
        return 0;
    }
    return pool_node_is_down(&n->pool, pool_now_ms()) ? 1 : 0;
}

int
ringcache_locate(const struct ringcache *rc, const char *key, size_t key_len,
                 size_t *out, size_t want)
{
    uint32_t owners[ROUTE_R_MAX];
    struct rc_view *v;
    uint32_t n, i;

    if (rc == NULL || out == NULL) {
        return RINGCACHE_EINVAL;
    }
    if (mcp_check_key(key, key_len) != 0) {
        return RINGCACHE_EKEY;
    }
    v = view_get((struct ringcache *)rc);
    n = route_owners(v->ring, v->replicas, key, key_len, owners);
    view_put(v);
    if (n > want) {
        n = (uint32_t)want;
    }
    for (i = 0; i < n; i++) {
        out[i] = owners[i];
    }
    return (int)n;
}

uint64_t
ringcache_epoch(struct ringcache *rc)
{
    struct rc_view *v;
    uint64_t e;

    if (rc == NULL) {
        return 0;
    }
    v = view_get(rc);
    e = v->epoch;
    view_put(v);
    return e;
}

int
ringcache_set_poll_interval(struct ringcache *rc, int ms)
{
    if (rc == NULL || ms < 0) {
        return RINGCACHE_EINVAL;
    }
    __atomic_store_n(&rc->poll_ms, ms, __ATOMIC_RELEASE);
    __atomic_store_n(&rc->next_poll, pool_now_ms() + ms, __ATOMIC_RELEASE);
    return 0;
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

/* "epoch <e>\r\n" into buf (DECLARE_MAX bytes): the line a connection
 * sends before its first request routed with epoch e. Returns its length. */
static size_t
declare_line(char *buf, uint64_t e)
{
    return (size_t)snprintf(buf, DECLARE_MAX, "epoch %llu\r\n", (unsigned long long)e);
}

/* The reply r to the declaration of epoch e on connection c of node rn:
 * OK records it; ERROR marks the node as not speaking epochs (it is then
 * never declared to again). 0, or RINGCACHE_EPROTO for any other reply. */
static int
declare_ack(struct rc_node *rn, struct pool_conn *c, uint64_t e, const struct mcp_reply *r)
{
    if (r->kind == MCP_ERROR || r->kind == MCP_CLIENT_ERROR) {
        __atomic_store_n(&rn->no_ext, true, __ATOMIC_RELAXED);
    } else if (r->kind != MCP_OK) {
        return RINGCACHE_EPROTO;
    }
    c->declared = e;
    return 0;
}

/* The address a MOVED reply names into addr (MCP_ADDR_MAX + 1 bytes; ""
 * when it names none). */
static void
redirect_addr(char *addr, const struct mcp_reply *r)
{
    addr[0] = '\0';
    if (r->kind == MCP_MOVED && r->key_len > 0) {
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
static int
node_request(struct ringcache *rc, struct rc_node *rn, uint64_t declare,
             const struct iovec *iov_in, int iovcnt, const struct op *op,
             bool *sent, struct redirect *rd)
{
    struct pool_node *node = &rn->pool;
    struct pool_conn *c = NULL;
    struct iovec iov[6];
    struct mcp_reply r;
    char prefix[DECLARE_MAX];
    int64_t deadline;
    bool got_bytes, want_ack;
    int ret, attempt, step, n;
    long used;
    size_t need;

    rd->kind = 0;
    for (attempt = 0; attempt < 2; attempt++) {
        /* A retried attempt starts clean: the stale one never ran. */
        *sent = false;
        got_bytes = false;
        if (op->reset != NULL) {
            op->reset(op->ctx);
        }
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
        n = 0;
        want_ack = declare != 0 && c->declared != declare &&
                   !__atomic_load_n(&rn->no_ext, __ATOMIC_RELAXED);
        if (want_ack) {
            iov[0].iov_base = prefix;
            iov[0].iov_len = declare_line(prefix, declare);
            n = 1;
        }
        memcpy(iov + n, iov_in, sizeof(iov[0]) * (size_t)iovcnt);
        *sent = true;
        ret = pool_conn_send(c, iov, n + iovcnt, deadline);
        for (step = STEP_MORE; ret == 0 && step == STEP_MORE;) {
            used = mcp_parse(c->buf + c->start, c->end - c->start,
                             rc->opt.max_value_bytes, &r, &need);
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
                ret = declare_ack(rn, c, declare, &r);
                if (ret != 0) {
                    break;
                }
                want_ack = false;
            } else if (r.kind == MCP_MOVED || r.kind == MCP_TRYAGAIN) {
                rd->kind = r.kind;
                rd->epoch = r.epoch;
                redirect_addr(rd->addr, &r);
                saw_epoch(rc, r.epoch);
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
    pool_conn_close(c);
    if (ret == RINGCACHE_ENOMEM) {
        pool_node_ok(node);
    } else {
        pool_node_failed(node, &rc->cfg);
    }
    return ret;
}

/*
 * Epoch learning: config, epoch poll, adoption
 */

struct config_ctx {
    struct ring_members *m;        /* the membership (NULL: the node has none) */
    const char          *name;     /* for parse errors */
    char                *err;
    size_t               errlen;
    struct rc_node      *node;
    int                  result;
};

/* Clear a config context before another attempt. */
static void
config_reset(void *arg)
{
    struct config_ctx *g = arg;

    ring_members_free(g->m);
    g->m = NULL;
    g->result = 0;
}

/* Reply handler of `config`: CONFIG <epoch> <bytes> + text, then END. The
 * text is parsed here (a bad one is RINGCACHE_EMEMBERS, the connection
 * stays in step). ERROR: a node without the extension. */
static int
config_reply(void *arg, const struct mcp_reply *r)
{
    struct config_ctx *g = arg;
    char why[512] = "";
    int ret;

    switch (r->kind) {
    case MCP_CONFIG:
        if (g->m != NULL || g->result != 0) {
            return RINGCACHE_EPROTO;
        }
        if (r->epoch == 0) {
            return STEP_MORE;      /* no membership: END follows */
        }
        ret = ring_members_parse(r->data, r->data_len, g->name, &g->m, why, sizeof(why));
        if (ret != RING_OK) {
            g->result = ret == RING_ENOMEM ? RINGCACHE_ENOMEM : RINGCACHE_EMEMBERS;
            set_err(g->err, g->errlen, "%s", why[0] != '\0' ? why : "invalid membership");
        } else if (g->m->epoch != r->epoch || g->m->n_nodes == 0) {
            g->result = RINGCACHE_EMEMBERS;
            set_err(g->err, g->errlen, "%s: CONFIG epoch and membership disagree, or no nodes",
                    g->name);
            ring_members_free(g->m);
            g->m = NULL;
        }
        return STEP_MORE;
    case MCP_END:
        return STEP_DONE;
    case MCP_ERROR:
    case MCP_CLIENT_ERROR:
        __atomic_store_n(&g->node->no_ext, true, __ATOMIC_RELAXED);
        g->result = mcp_error_code(r);
        return STEP_DONE;
    case MCP_SERVER_ERROR:
        g->result = mcp_error_code(r);
        return STEP_DONE;
    default:
        return RINGCACHE_EPROTO;
    }
}

/* Ask node for `config`. 0 with *out the membership (NULL when the node
 * has none; the caller frees it), or an error. */
static int
fetch_config(struct ringcache *rc, struct rc_node *node, struct ring_members **out,
             char *err, size_t errlen)
{
    struct config_ctx g = { .node = node, .err = err, .errlen = errlen };
    struct op op = { config_reply, config_reset, &g, &g.result };
    struct iovec iov = { .iov_base = (void *)"config\r\n", .iov_len = 8 };
    struct redirect rd;
    char name[RING_ADDR_MAX + 32];
    bool sent;
    int ret;

    snprintf(name, sizeof(name), "config from %s", node->addr);
    g.name = name;
    ret = node_request(rc, node, 0, &iov, 1, &op, &sent, &rd);
    if (ret == 0) {
        ret = g.result;
    }
    if (ret != 0) {
        ring_members_free(g.m);
        return ret;
    }
    *out = g.m;
    return 0;
}

/* Fetch config from node and adopt it when newer. 1 adopted, 0 not
 * newer (or none), or an error. Caller holds refresh_lock (or is creating
 * the handle). */
static int
refresh_from(struct ringcache *rc, struct rc_node *node, char *err, size_t errlen)
{
    struct ring_members *m = NULL;
    int ret;

    ret = fetch_config(rc, node, &m, err, errlen);
    if (ret != 0 || m == NULL) {
        return ret;
    }
    saw_epoch(rc, m->epoch);
    ret = adopt(rc, m, err, errlen);
    ring_members_free(m);
    return ret;
}

/* A node told us of epoch `want`, higher than `had` (the epoch the caller
 * routed with): fetch config from that node, else from addr (a MOVED
 * target; may be NULL). Threads that learn the same news together fetch
 * once: the others find the epoch already adopted. True when the handle's
 * epoch is now above `had`. Takes refresh_lock. */
static bool
learn(struct ringcache *rc, uint64_t had, uint64_t want, struct rc_node *from,
      const char *addr)
{
    struct rc_node *to;
    uint64_t now;

    pthread_mutex_lock(&rc->refresh_lock);
    now = rc->view->epoch;
    if (now < want && from != NULL) {
        refresh_from(rc, from, NULL, 0);
        now = rc->view->epoch;
    }
    if (now < want && addr != NULL && addr[0] != '\0') {
        to = node_lookup(rc, NULL, addr, NULL, 0);
        if (to != NULL && to != from && pool_node_usable(&to->pool, pool_now_ms())) {
            refresh_from(rc, to, NULL, 0);
            now = rc->view->epoch;
        }
    }
    pthread_mutex_unlock(&rc->refresh_lock);
    return now > had;
}

int
ringcache_refresh(struct ringcache *rc)
{
    struct rc_view *v;
    size_t i;
    int ret = RINGCACHE_EDOWN;

    if (rc == NULL) {
        return RINGCACHE_EINVAL;
    }
    v = view_get(rc);
    pthread_mutex_lock(&rc->refresh_lock);
    for (i = 0; i < v->n_nodes; i++) {
        if (!pool_node_usable(&v->nodes[i]->pool, pool_now_ms())) {
            continue;
        }
        ret = refresh_from(rc, v->nodes[i], NULL, 0);
        if (ret >= 0 || ret == RINGCACHE_EMEMBERS || ret == RINGCACHE_ENOMEM) {
            ret = ret > 0 ? 0 : ret;
            break;
        }
    }
    pthread_mutex_unlock(&rc->refresh_lock);
    view_put(v);
    return ret;
}

struct epoch_ctx {
    struct rc_node *node;
    uint64_t        active;
    bool            got;
    int             result;
};

/* Reply handler of `epoch`: one EPOCH line, or ERROR from a node without
 * the extension. */
static int
epoch_reply(void *arg, const struct mcp_reply *r)
{
    struct epoch_ctx *e = arg;

    switch (r->kind) {
    case MCP_EPOCH:
        e->active = r->epoch;
        e->got = true;
        return STEP_DONE;
    case MCP_ERROR:
    case MCP_CLIENT_ERROR:
        __atomic_store_n(&e->node->no_ext, true, __ATOMIC_RELAXED);
        /* fall through */
    case MCP_SERVER_ERROR:
        e->result = mcp_error_code(r);
        return STEP_DONE;
    default:
        return RINGCACHE_EPROTO;
    }
}

/* The periodic poll, run by the first call that finds it due (the
 * compare-and-swap on next_poll elects one thread per interval): ask one
 * node, round robin, skipping nodes marked down or without the extension,
 * for its epoch; fetch config from it when it is ahead. */
static void
maybe_poll(struct ringcache *rc)
{
    int ms = __atomic_load_n(&rc->poll_ms, __ATOMIC_ACQUIRE);
    int64_t now, due;
    struct rc_view *v;
    struct rc_node *node = NULL;
    struct epoch_ctx e = { 0 };
    struct op op = { epoch_reply, NULL, &e, &e.result };
    struct iovec iov = { .iov_base = (void *)"epoch\r\n", .iov_len = 7 };
    struct redirect rd;
    unsigned start;
    size_t k;
    bool sent;

    if (ms <= 0) {
        return;
    }
    now = pool_now_ms();
    due = __atomic_load_n(&rc->next_poll, __ATOMIC_ACQUIRE);
    if (now < due || !__atomic_compare_exchange_n(&rc->next_poll, &due, now + ms, false,
                                                  __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
        return;
    }
    v = view_get(rc);
    start = __atomic_fetch_add(&rc->poll_rr, 1, __ATOMIC_RELAXED);
    for (k = 0; k < v->n_nodes; k++) {
        struct rc_node *n = v->nodes[(start + k) % v->n_nodes];

        if (!__atomic_load_n(&n->no_ext, __ATOMIC_RELAXED) &&
            pool_node_usable(&n->pool, now)) {
            node = n;
            break;
        }
    }
    if (node != NULL) {
        e.node = node;
        if (node_request(rc, node, 0, &iov, 1, &op, &sent, &rd) == 0 && e.got) {
            saw_epoch(rc, e.active);
            if (e.active > v->epoch) {
                learn(rc, v->epoch, e.active, node, NULL);
            }
        }
    }
    view_put(v);
}

/* Sleep *backoff ms unless that passes deadline; then double it. False
 * when the budget is spent. */
static bool
backoff_wait(int *backoff, int64_t deadline)
{
    struct timespec ts;

    if (pool_now_ms() + *backoff > deadline) {
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
 * RINGCACHE_EDOWN. A redirect stops it (*rd, *from).
 */
static int
owners_once(struct ringcache *rc, struct rc_view *v, const char *key, size_t key_len,
            bool write, const struct iovec *iov, int iovcnt, const struct op *op,
            struct redirect *rd, struct rc_node **from)
{
    uint32_t owners[ROUTE_R_MAX], n, i;
    uint64_t declare = declare_epoch(rc, v);
    bool sent;
    int ret;

    rd->kind = 0;
    n = route_owners(v->ring, v->replicas, key, key_len, owners);
    for (i = 0; i < n; i++) {
        struct rc_node *node = v->nodes[owners[i]];

        if (!pool_node_usable(&node->pool, pool_now_ms())) {
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
    }
    return write ? RINGCACHE_EDOWN : RINGCACHE_ENOTFOUND;
}

/*
 * A keyed request with the epoch rules of ringcache.h: MOVED with a
 * higher epoch -> learn it and retry at once; MOVED from a node behind us
 * (or when nothing newer could be fetched) -> back off and retry; at most
 * HOPS_MAX MOVED per call. TRYAGAIN -> back off 1 ms doubling within the
 * op timeout (at once when it taught us a newer epoch). Out of budget: a
 * read is a miss, a write RINGCACHE_EMOVED / RINGCACHE_ETRYAGAIN. The
 * caller has checked rc and the key (check_call).
 */
static int
keyed_request(struct ringcache *rc, const char *key, size_t key_len, bool write,
              const struct iovec *iov, int iovcnt, const struct op *op)
{
    struct redirect rd;
    struct rc_node *from;
    struct rc_view *v;
    uint64_t had;
    int64_t deadline;
    int hops = 0, backoff = 1, ret;

    maybe_poll(rc);
    deadline = pool_now_ms() + rc->opt.op_timeout_ms;
    for (;;) {
        from = NULL;
        v = view_get(rc);
        had = v->epoch;
        ret = owners_once(rc, v, key, key_len, write, iov, iovcnt, op, &rd, &from);
        view_put(v);
        if (rd.kind == 0) {
            return ret;
        }
        if (rd.kind == MCP_MOVED && ++hops > HOPS_MAX) {
            return write ? RINGCACHE_EMOVED : RINGCACHE_ENOTFOUND;
        }
        if (rd.epoch > had &&
            learn(rc, had, rd.epoch, from, rd.kind == MCP_MOVED ? rd.addr : NULL)) {
            continue;
        }
        if (!backoff_wait(&backoff, deadline)) {
            if (!write) {
                return RINGCACHE_ENOTFOUND;
            }
            return rd.kind == MCP_MOVED ? RINGCACHE_EMOVED : RINGCACHE_ETRYAGAIN;
        }
    }
}

/* The checks every keyed call makes before anything is sent: 0,
 * RINGCACHE_EINVAL or RINGCACHE_EKEY. */
static int
check_call(const struct ringcache *rc, const char *key, size_t key_len)
{
    if (rc == NULL) {
        return RINGCACHE_EINVAL;
    }
    return mcp_check_key(key, key_len);
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

/* Clear a get context before another attempt (a node that failed after
 * sending a VALUE leaves one behind). */
static void
get_reset(void *arg)
{
    struct get_ctx *g = arg;

    ringcache_value_clear(&g->v);
    g->hit = false;
    g->result = 0;
}

/* get or gets of one key, failing over down its preference list. */
static int
do_get(struct ringcache *rc, const char *cmd, const char *key, size_t key_len,
       struct ringcache_value *out)
{
    struct get_ctx g = { .key = key, .key_len = key_len };
    struct op op = { get_reply, get_reset, &g, &g.result };
    struct iovec iov[3];
    int ret;

    if (out == NULL) {
        return RINGCACHE_EINVAL;
    }
    ret = check_call(rc, key, key_len);
    if (ret != 0) {
        return ret;
    }
    iov[0].iov_base = (void *)cmd;
    iov[0].iov_len = strlen(cmd);
    iov[1].iov_base = (void *)key;
    iov[1].iov_len = key_len;
    iov[2].iov_base = (void *)"\r\n";
    iov[2].iov_len = 2;
    ret = keyed_request(rc, key, key_len, false, iov, 3, &op);
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

/* Clear a one-line context before another attempt. */
static void
line_reset(void *arg)
{
    struct line_ctx *l = arg;

    l->result = 0;
    l->number = 0;
}

/* A storage command (set/add/replace/append/prepend/cas): validate, then
 * header, value and \r\n in one sendmsg (no copy of the value). */
static int
do_store(struct ringcache *rc, const char *cmd, const char *key,
         size_t key_len, const void *value, size_t value_len, uint32_t flags,
         int32_t ttl, bool with_cas, uint64_t cas)
{
    struct line_ctx l = { .ok = MCP_STORED };
    struct op op = { line_reply, line_reset, &l, &l.result };
    char head[MCP_LINE_MAX];
    struct iovec iov[3];
    int ret;

    if (value == NULL && value_len > 0) {
        return RINGCACHE_EINVAL;
    }
    ret = check_call(rc, key, key_len);
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
    return keyed_request(rc, key, key_len, true, iov, 3, &op);
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
    struct op op = { line_reply, line_reset, &l, &l.result };
    struct iovec iov[3];
    int ret;

    ret = check_call(rc, key, key_len);
    if (ret != 0) {
        return ret;
    }
    iov[0].iov_base = (void *)cmd;
    iov[0].iov_len = strlen(cmd);
    iov[1].iov_base = (void *)key;
    iov[1].iov_len = key_len;
    iov[2].iov_base = (void *)tail;
    iov[2].iov_len = strlen(tail);
    ret = keyed_request(rc, key, key_len, true, iov, 3, &op);
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
    struct op op = { stats_reply, NULL, &s, &s.result };
    struct iovec iov = { .iov_base = (void *)"stats\r\n", .iov_len = 7 };
    struct redirect rd;
    struct rc_node *node;
    bool sent;
    int ret;

    node = current_node(rc, i);
    if (fn == NULL || node == NULL) {
        return RINGCACHE_EINVAL;
    }
    ret = node_request(rc, node, 0, &iov, 1, &op, &sent, &rd);
    return ret != 0 ? ret : s.result;
}

/*
 * Multi-get
 */

enum batch_state { B_CONNECTING, B_SENDING, B_READING, B_DONE, B_FAILED };

/* One node's share of a multi-get round. */
struct mget_batch {
    uint32_t           node;        /* index in the round's view */
    enum batch_state   state;
    struct pool_conn  *conn;
    bool               retried;     /* already re-sent on a fresh connection */
    bool               got_bytes;
    bool               want_ack;    /* the reply to our `epoch <n>` comes first */
    char               prefix[DECLARE_MAX];  /* "epoch <n>\r\n" when the connection must declare */
    char              *req;
    size_t             req_len;
    struct iovec       iov[2];
    struct iovec      *iovp;
    int                iovcnt;
    const size_t      *idx;         /* key indexes in request order (in the plan) */
    size_t             n;
    size_t             pos;         /* first request slot not yet answered */
    int64_t            connect_deadline;
};

struct mget {
    struct ringcache  *rc;
    struct rc_view    *v;           /* the view rounds route with (a reference) */
    uint64_t           declare;     /* epoch connections declare, 0 none */
    struct route_key   *keys;
    size_t             n;
    bool               with_cas;
    ringcache_mget_fn  fn;
    void              *arg;
    /* Redirects of the current round (their keys stay pending). */
    bool               moved;
    bool               tryagain;
    uint64_t           rd_epoch;    /* the highest epoch they carried */
    struct rc_node    *rd_from;     /* the node that sent it */
    char               rd_addr[MCP_ADDR_MAX + 1];
};

/* The pool of the node of batch b. */
static struct pool_node *
batch_pool(struct mget *m, const struct mget_batch *b)
{
    return &m->v->nodes[b->node]->pool;
}

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

    struct rc_node *rn = m->v->nodes[b->node];

    ret = pool_acquire(&rn->pool, &m->rc->cfg, &b->conn);
    if (ret != 0) {
        return ret;
    }
    b->want_ack = m->declare != 0 && b->conn->declared != m->declare &&
                  !__atomic_load_n(&rn->no_ext, __ATOMIC_RELAXED);
    b->iov[0].iov_base = b->prefix;
    b->iov[0].iov_len = declare_line(b->prefix, m->declare);
    b->iov[1].iov_base = b->req;
    b->iov[1].iov_len = b->req_len;
    b->iovp = b->want_ack ? &b->iov[0] : &b->iov[1];
    b->iovcnt = b->want_ack ? 2 : 1;
    b->got_bytes = false;
    b->connect_deadline = pool_now_ms() + m->rc->opt.connect_timeout_ms;
    b->state = b->conn->connecting ? B_CONNECTING : B_SENDING;
    return 0;
}

/* Record a MOVED or TRYAGAIN answer to batch b (keeps the highest epoch
 * and who sent it). */
static void
mget_redirect(struct mget *m, const struct mget_batch *b, const struct mcp_reply *r)
{
    if (r->kind == MCP_MOVED) {
        m->moved = true;
    } else {
        m->tryagain = true;
    }
    saw_epoch(m->rc, r->epoch);
    if (r->epoch > m->rd_epoch) {
        m->rd_epoch = r->epoch;
        m->rd_from = m->v->nodes[b->node];
        redirect_addr(m->rd_addr, r);
    }
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
        if (b->want_ack) {
            /* The reply to our declaration comes first. */
            if (declare_ack(m->v->nodes[b->node], c, m->declare, &r) != 0) {
                return RINGCACHE_EPROTO;
            }
            b->want_ack = false;
            c->start += (size_t)used;
            continue;
        }
        if (r.kind == MCP_MOVED || r.kind == MCP_TRYAGAIN) {
            /* The whole request is redirected: its unanswered keys stay
             * pending for the next round (regrouped if the view changes). */
            c->start += (size_t)used;
            mget_redirect(m, b, &r);
            if (c->start != c->end) {
                return RINGCACHE_EPROTO;
            }
            b->state = B_DONE;
            return 0;
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
            pool_node_drop_idle(batch_pool(m, b));
            if (batch_start(m, b) == 0) {
                return;
            }
        }
    }
    b->state = B_FAILED;
    pool_node_failed(batch_pool(m, b), &m->rc->cfg);
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

/* route_usable_fn over the nodes of a multi-get's view. */
static bool
node_usable(void *arg, uint32_t node)
{
    struct mget *m = arg;

    return pool_node_usable(&m->v->nodes[node]->pool, pool_now_ms());
}

/* One round: every unanswered key goes to its next usable owner, one
 * request per node, all in parallel. Returns 0 or RINGCACHE_ENOMEM; *left
 * counts keys still unanswered after it. */
static int
mget_round(struct mget *m, size_t *left)
{
    struct route_plan plan;
    struct mget_batch *b = NULL;
    size_t i, nb = 0;
    int ret;

    ret = route_plan_build(&plan, m->v->n_nodes, m->keys, m->n, node_usable, m);
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
        }
    }
}

int
ringcache_mget_cb(struct ringcache *rc, const char *const *keys,
                  const size_t *key_lens, size_t n, int with_cas,
                  ringcache_mget_fn fn, void *arg)
{
    struct mget m = { .rc = rc, .n = n, .with_cas = with_cas != 0, .fn = fn, .arg = arg };
    struct rc_view *nv;
    size_t i, left = n;
    uint32_t fail_rounds = 0;
    int64_t deadline;
    int hops = 0, backoff = 1, ret = 0;

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
    }
    maybe_poll(rc);
    deadline = pool_now_ms() + rc->opt.op_timeout_ms;
    m.v = view_get(rc);
    mget_route(&m);
    /* A round without redirects moves each failed key one step down its
     * preference list (at most R + 1 of them). Redirected keys are sent
     * again: at once after learning a newer epoch (regrouped by the new
     * ring), else after a back-off; at most HOPS_MAX rounds with MOVED
     * and TRYAGAIN within the op timeout. Whatever is left is a miss. */
    while (left > 0) {
        m.declare = declare_epoch(rc, m.v);
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
              learn(rc, m.v->epoch, m.rd_epoch, m.rd_from, m.moved ? m.rd_addr : NULL)) &&
            !backoff_wait(&backoff, deadline)) {
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
            mget_report(&m, i, -1, NULL);
        }
    }
out:
    view_put(m.v);
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
