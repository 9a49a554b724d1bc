/*
 * view: a handle's ring snapshots (one reference-counted view per epoch),
 * the table of every node it has used, what the public calls read of
 * them, and epoch learning: `config` fetch and adoption, the periodic
 * `epoch` poll, learning from MOVED and TRYAGAIN.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/rc_internal.h"

/*
 * Ring snapshots and the node table
 */

/* Take a reference on the current view. Takes view_lock briefly. */
struct rc_view *
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
void
view_put(struct rc_view *v)
{
    if (v != NULL && __atomic_sub_fetch(&v->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        view_free(v);
    }
}

/* The epoch a connection declares for requests routed with v: only once
 * some node has reported an epoch, so plain memcached never sees it. */
uint64_t
view_declare_epoch(struct ringcache *rc, const struct rc_view *v)
{
    if (v->epoch == 0 || !__atomic_load_n(&rc->confirmed, __ATOMIC_ACQUIRE)) {
        return 0;
    }
    return v->epoch;
}

/* A node reported epoch e: from now on connections declare theirs. */
void
view_saw_epoch(struct ringcache *rc, uint64_t e)
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
node_lookup(struct ringcache *rc, const char *id, const char *addr, char *err, size_t errlen)
{
    struct rc_node *n;
    size_t          i;

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
        rc_set_err(err, errlen, "%s: address too long", addr);
        return NULL;
    }
    if (rc->n_all == rc->cap_all) {
        size_t           ncap = rc->cap_all == 0 ? 8 : rc->cap_all * 2;
        struct rc_node **na = realloc(rc->all, ncap * sizeof(*na));

        if (na == NULL) {
            rc_set_err(err, errlen, "%s", "out of memory");
            return NULL;
        }
        rc->all = na;
        rc->cap_all = ncap;
    }
    n = calloc(1, sizeof(*n));
    if (n == NULL) {
        rc_set_err(err, errlen, "%s", "out of memory");
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
view_build(struct ringcache *rc, const struct ring_members *m, struct rc_view **out, char *err,
           size_t errlen)
{
    const struct ring_members *rm;
    struct rc_view            *v;
    size_t                     i;
    int                        ret;

    if (m->n_nodes == 0) {
        rc_set_err(err, errlen, "%s", "the membership has no nodes");
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
        rc_set_err(err, errlen, "%s",
                   "cannot build the ring (invalid membership or out of memory)");
        ret = RINGCACHE_EMEMBERS;
        goto fail;
    }
    rm = ring_members(v->ring);
    v->replicas = rm->replicas < RING_R_MAX ? rm->replicas : RING_R_MAX;
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
int
view_adopt(struct ringcache *rc, const struct ring_members *m, char *err, size_t errlen)
{
    struct rc_view *v = NULL, *old;
    size_t          i, j;
    int             ret;

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
 * Introspection
 */

size_t
ringcache_node_count(const struct ringcache *rc)
{
    struct rc_view *v;
    size_t          n;

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
struct rc_node *
view_current_node(const struct ringcache *rc, size_t i)
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
    struct rc_node *n = view_current_node(rc, i);

    return n != NULL ? n->id : NULL;
}

const char *
ringcache_node_addr(const struct ringcache *rc, size_t i)
{
    struct rc_node *n = view_current_node(rc, i);

    return n != NULL ? n->addr : NULL;
}

int
ringcache_node_is_down(struct ringcache *rc, size_t i)
{
    struct rc_node *n = view_current_node(rc, i);

    if (n == NULL) {
        return 0;
    }
    return pool_node_is_down(&n->pool, util_now_ms()) ? 1 : 0;
}

int
ringcache_node_error(struct ringcache *rc, size_t i)
{
    struct rc_node *n = view_current_node(rc, i);

    return n != NULL ? pool_node_error(&n->pool) : 0;
}

int
ringcache_locate(const struct ringcache *rc, const char *key, size_t key_len, size_t *out,
                 size_t want)
{
    uint32_t        owners[RING_R_MAX];
    struct rc_view *v;
    uint32_t        n, i;

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
    uint64_t        e;

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
    __atomic_store_n(&rc->next_poll, util_now_ms() + ms, __ATOMIC_RELEASE);
    return 0;
}

/*
 * Epoch learning: config, epoch poll, adoption
 */

struct config_ctx {
    struct ring_members *m;    /* the membership (NULL: the node has none) */
    const char          *name; /* for parse errors */
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
config_reply(void *arg, const struct mcr_reply *r)
{
    struct config_ctx *g = arg;
    char               why[512] = "";
    int                ret;

    switch (r->kind) {
    case MCR_CONFIG:
        if (g->m != NULL || g->result != 0) {
            return RINGCACHE_EPROTO;
        }
        if (r->epoch == 0) {
            return STEP_MORE; /* no membership: END follows */
        }
        ret = ring_members_parse(r->data, r->data_len, g->name, &g->m, why, sizeof(why));
        if (ret != RING_OK) {
            g->result = ret == RING_ENOMEM ? RINGCACHE_ENOMEM : RINGCACHE_EMEMBERS;
            rc_set_err(g->err, g->errlen, "%s", why[0] != '\0' ? why : "invalid membership");
        } else if (g->m->epoch != r->epoch || g->m->n_nodes == 0) {
            g->result = RINGCACHE_EMEMBERS;
            rc_set_err(g->err, g->errlen, "%s: CONFIG epoch and membership disagree, or no nodes",
                       g->name);
            ring_members_free(g->m);
            g->m = NULL;
        }
        return STEP_MORE;
    case MCR_END:
        return STEP_DONE;
    default:
        node_saw_plain(g->node, r);
        return node_reply_error(r, &g->result);
    }
}

/* Ask node for `config`. 0 with *out the membership (NULL when the node
 * has none; the caller frees it), or an error. */
static int
fetch_config(struct ringcache *rc, struct rc_node *node, struct ring_members **out, char *err,
             size_t errlen)
{
    struct config_ctx g = { .node = node, .err = err, .errlen = errlen };
    struct op         op = { config_reply, config_reset, &g, &g.result };
    char              line[16];
    struct iovec      iov = { .iov_base = line, .iov_len = mcp_format_config(line) };
    struct redirect   rd;
    char              name[RING_ADDR_MAX + 32];
    bool              sent;
    int               ret;

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
int
view_refresh_from(struct ringcache *rc, struct rc_node *node, char *err, size_t errlen)
{
    struct ring_members *m = NULL;
    int                  ret;

    ret = fetch_config(rc, node, &m, err, errlen);
    if (ret != 0 || m == NULL) {
        return ret;
    }
    view_saw_epoch(rc, m->epoch);
    ret = view_adopt(rc, m, err, errlen);
    ring_members_free(m);
    return ret;
}

/* A node told us of epoch `want`, higher than `had` (the epoch the caller
 * routed with): fetch config from that node, else from addr (a MOVED
 * target; may be NULL). Threads that learn the same news together fetch
 * once: the others find the epoch already adopted. True when the handle's
 * epoch is now above `had`. Takes refresh_lock. */
bool
view_learn(struct ringcache *rc, uint64_t had, uint64_t want, struct rc_node *from,
           const char *addr)
{
    struct rc_node *to;
    uint64_t        now;

    pthread_mutex_lock(&rc->refresh_lock);
    now = rc->view->epoch;
    if (now < want && from != NULL) {
        view_refresh_from(rc, from, NULL, 0);
        now = rc->view->epoch;
    }
    if (now < want && addr != NULL && addr[0] != '\0') {
        to = node_lookup(rc, NULL, addr, NULL, 0);
        if (to != NULL && to != from && pool_node_usable(&to->pool, util_now_ms())) {
            view_refresh_from(rc, to, NULL, 0);
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
    size_t          i;
    int             ret = RINGCACHE_EDOWN;

    if (rc == NULL) {
        return RINGCACHE_EINVAL;
    }
    v = view_get(rc);
    pthread_mutex_lock(&rc->refresh_lock);
    for (i = 0; i < v->n_nodes; i++) {
        if (!pool_node_usable(&v->nodes[i]->pool, util_now_ms())) {
            continue;
        }
        ret = view_refresh_from(rc, v->nodes[i], NULL, 0);
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
epoch_reply(void *arg, const struct mcr_reply *r)
{
    struct epoch_ctx *e = arg;

    switch (r->kind) {
    case MCR_EPOCH:
        e->active = r->epoch;
        e->got = true;
        return STEP_DONE;
    default:
        node_saw_plain(e->node, r);
        return node_reply_error(r, &e->result);
    }
}

/* The periodic poll, run by the first call that finds it due (the
 * compare-and-swap on next_poll elects one thread per interval): ask one
 * node, round robin, skipping nodes marked down or without the extension,
 * for its epoch; fetch config from it when it is ahead. */
void
view_maybe_poll(struct ringcache *rc)
{
    int              ms = __atomic_load_n(&rc->poll_ms, __ATOMIC_ACQUIRE);
    int64_t          now, due;
    struct rc_view  *v;
    struct rc_node  *node = NULL;
    struct epoch_ctx e = { 0 };
    struct op        op = { epoch_reply, NULL, &e, &e.result };
    char             line[16];
    struct iovec     iov = { .iov_base = line, .iov_len = mcp_format_epoch_poll(line) };
    struct redirect  rd;
    unsigned         start;
    size_t           k;
    bool             sent;

    if (ms <= 0) {
        return;
    }
    now = util_now_ms();
    due = __atomic_load_n(&rc->next_poll, __ATOMIC_ACQUIRE);
    if (now < due || !__atomic_compare_exchange_n(&rc->next_poll, &due, now + ms, false,
                                                  __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
        return;
    }
    v = view_get(rc);
    start = __atomic_fetch_add(&rc->poll_rr, 1, __ATOMIC_RELAXED);
    for (k = 0; k < v->n_nodes; k++) {
        struct rc_node *n = v->nodes[(start + k) % v->n_nodes];

        if (!__atomic_load_n(&n->no_ext, __ATOMIC_RELAXED) && pool_node_usable(&n->pool, now)) {
            node = n;
            break;
        }
    }
    if (node != NULL) {
        e.node = node;
        if (node_request(rc, node, 0, &iov, 1, &op, &sent, &rd) == 0 && e.got) {
            view_saw_epoch(rc, e.active);
            if (e.active > v->epoch) {
                view_learn(rc, v->epoch, e.active, node, NULL);
            }
        }
    }
    view_put(v);
}
