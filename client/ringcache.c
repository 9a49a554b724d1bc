/*
 * libringcache: creating and freeing handles, and the keyed operations
 * (get/gets, the storage commands, delete, incr/decr, touch) and stats
 * with their reply handlers. Views and epoch learning are in view.c, one
 * request on one node and the redirect loop in node_io.c, the multi-get
 * in mget.c. The public contract is in ringcache.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/rc_internal.h"

/* Write a one-line reason into the caller's err buffer, if it gave one. */
void
rc_set_err(char *err, size_t errlen, const char *fmt, const char *arg)
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
    case RINGCACHE_OK:
        return "success";
    case RINGCACHE_ENOTFOUND:
        return "not found";
    case RINGCACHE_ENOTSTORED:
        return "not stored (add: key exists; replace/append/prepend: key missing)";
    case RINGCACHE_EEXISTS:
        return "cas mismatch: the item changed since it was read";
    case RINGCACHE_EINVAL:
        return "invalid argument";
    case RINGCACHE_EKEY:
        return "invalid key (1..250 bytes, no space or control characters)";
    case RINGCACHE_ETOOBIG:
        return "value too large";
    case RINGCACHE_ENOMEM:
        return "out of memory";
    case RINGCACHE_EDOWN:
        return "every owner of the key is down";
    case RINGCACHE_ETIMEDOUT:
        return "timed out waiting for the node";
    case RINGCACHE_EIO:
        return "connection to the node failed";
    case RINGCACHE_EPROTO:
        return "protocol error in the node's reply";
    case RINGCACHE_ECLIENT:
        return "the node rejected the request (CLIENT_ERROR)";
    case RINGCACHE_ESERVER:
        return "the node could not do it (SERVER_ERROR)";
    case RINGCACHE_ENONNUMERIC:
        return "incr/decr on a value that is not a number";
    case RINGCACHE_EMEMBERS:
        return "bad membership or seed list";
    case RINGCACHE_EMOVED:
        return "the key's owner moved and 3 redirects (MOVED) did not reach it";
    case RINGCACHE_ETRYAGAIN:
        return "the key's range is being moved (TRYAGAIN) for longer than the op timeout";
    case RINGCACHE_EUNAVAILABLE:
        return "an owner of the key is down: the write failed until failover declares it failed";
    case RINGCACHE_ETLS:
        return "TLS handshake with the node failed (untrusted certificate, a name that does not "
               "match, a client certificate required, or no TLS on the node)";
    case RINGCACHE_EAUTH:
        return "the node refused the login (authentication failure: a wrong user or password, or no "
               "-Y on the node)";
    default:
        return "unknown error code";
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
    if (o->connect_timeout_ms <= 0 || o->op_timeout_ms <= 0 || o->retry_interval_ms <= 0 ||
        o->retry_max_ms <= 0 || o->max_value_bytes == 0 ||
        o->max_value_bytes > (size_t)INT32_MAX - 2) {
        return RINGCACHE_EINVAL;
    }
    return 0;
}

/*
 * The -Y login from auth_user and auth_password into cfg: memcached's
 * `set <key> 0 0 <len>` with "<user> <password>" as its data. The key is
 * one byte over memcached's limit on purpose: a node with -Y does not
 * look at it, and a node without -Y refuses the set (CLIENT_ERROR)
 * instead of storing the password as a value. 0 or RINGCACHE_EINVAL
 * (err says why) or RINGCACHE_ENOMEM.
 */
static int
make_login(struct pool_config *cfg, const char *user, const char *password, char *err,
           size_t errlen)
{
    size_t ulen, plen, i, n;

    if (user == NULL && password == NULL) {
        return 0;
    }
    if (user == NULL || password == NULL || user[0] == '\0' || password[0] == '\0') {
        rc_set_err(err, errlen, "%s", "auth_user and auth_password: both, or neither");
        return RINGCACHE_EINVAL;
    }
    ulen = strlen(user);
    plen = strlen(password);
    for (i = 0; i < ulen; i++) {
        if ((unsigned char)user[i] <= ' ' || user[i] == 0x7f) {
            rc_set_err(err, errlen, "%s", "auth_user: no spaces or control characters");
            return RINGCACHE_EINVAL;
        }
    }
    if (strpbrk(password, "\r\n") != NULL || ulen + 1 + plen > 16384) {
        rc_set_err(err, errlen, "%s", "auth_password: no CR or LF, at most 16 KiB with the user");
        return RINGCACHE_EINVAL;
    }
    n = 4 + RINGCACHE_KEY_MAX + 1 + 32 + ulen + 1 + plen + 2;
    cfg->login = malloc(n);
    if (cfg->login == NULL) {
        return RINGCACHE_ENOMEM;
    }
    cfg->login_len = (size_t)snprintf(cfg->login, n, "set %0*d 0 0 %zu\r\n%s %s\r\n",
                                      RINGCACHE_KEY_MAX + 1, 0, ulen + 1 + plen, user, password);
    return 0;
}

/* A handle with no membership yet (rc->view NULL). */
static int
handle_new(struct ringcache **out, const struct ringcache_options *opt, char *err, size_t errlen)
{
    struct ringcache *rc;
    int               ret;

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
        rc_set_err(err, errlen, "%s",
                   "bad options (timeouts must be > 0, max_value_bytes 1..2^31-3)");
        free(rc);
        return RINGCACHE_EINVAL;
    }
    rc->cfg.connect_timeout_ms = rc->opt.connect_timeout_ms;
    rc->cfg.op_timeout_ms = rc->opt.op_timeout_ms;
    rc->cfg.retry_interval_ms = rc->opt.retry_interval_ms;
    rc->cfg.retry_max_ms = rc->opt.retry_max_ms;
    rc->cfg.pool_size = rc->opt.pool_size;
    if (rc->opt.tls) {
        rc->cfg.tls = tls_client_ctx_new(&rc->opt, err, errlen);
        if (rc->cfg.tls == NULL) {
            free(rc);
            return RINGCACHE_EINVAL;
        }
        rc->cfg.tls_check_name = !rc->opt.tls_skip_name_check;
    }
    ret = make_login(&rc->cfg, rc->opt.auth_user, rc->opt.auth_password, err, errlen);
    if (ret != 0) {
        SSL_CTX_free(rc->cfg.tls);
        free(rc);
        return ret;
    }
    /* The options' strings are the caller's: they are not kept. */
    rc->opt.tls_ca_file = rc->opt.tls_cert_file = rc->opt.tls_key_file = NULL;
    rc->opt.auth_user = rc->opt.auth_password = NULL;
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
    int               ret;

    ret = handle_new(&rc, opt, err, errlen);
    if (ret != 0) {
        return ret;
    }
    ret = view_adopt(rc, m, err, errlen);
    if (ret < 0) {
        ringcache_free(rc);
        return ret;
    }
    rc->next_poll = 0;
    *out = rc;
    return 0;
}

int
ringcache_new_members_text(struct ringcache **out, const char *text, size_t len, const char *name,
                           const struct ringcache_options *opt, char *err, size_t errlen)
{
    struct ring_members *m = NULL;
    char                 why[512] = "";
    int                  ret;

    if (out == NULL || text == NULL) {
        return RINGCACHE_EINVAL;
    }
    ret = ring_members_parse(text, len, name != NULL ? name : "members", &m, why, sizeof(why));
    if (ret != RING_OK) {
        rc_set_err(err, errlen, "%s", why[0] != '\0' ? why : "cannot parse the membership");
        return ret == RING_ENOMEM ? RINGCACHE_ENOMEM : RINGCACHE_EMEMBERS;
    }
    ret = new_from_members(out, m, opt, err, errlen);
    ring_members_free(m);
    return ret;
}

int
ringcache_new_members_file(struct ringcache **out, const char *path,
                           const struct ringcache_options *opt, char *err, size_t errlen)
{
    FILE  *f;
    char  *buf = NULL;
    size_t len = 0, cap = 0, got;
    int    ret;

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
ringcache_new_seeds(struct ringcache **out, const char *const *addrs, size_t n_addrs,
                    const struct ringcache_options *opt, char *err, size_t errlen)
{
    struct ringcache    *rc = NULL;
    struct ring_members *m;
    size_t               i;
    int                  ret;

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
        char   id[RING_ID_MAX + 1];
        size_t j, k = 0;

        if (addrs[i] == NULL || strlen(addrs[i]) > RING_ID_MAX + 2) {
            rc_set_err(err, errlen, "seed %s: address too long to be a node id",
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
            rc_set_err(err, errlen, "seed %s: invalid or duplicate address", addrs[i]);
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

        if (pool_node_usable(&node->pool, util_now_ms()) &&
            view_refresh_from(rc, node, NULL, 0) > 0) {
            break;
        }
    }
    ret = 0;
    rc->next_poll = util_now_ms() + rc->poll_ms;
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
    SSL_CTX_free(rc->cfg.tls);
    if (rc->cfg.login != NULL) {
        explicit_bzero(rc->cfg.login, rc->cfg.login_len);
        free(rc->cfg.login);
    }
    pthread_mutex_destroy(&rc->view_lock);
    pthread_mutex_destroy(&rc->refresh_lock);
    free(rc);
}

/*
 * Keyed operations
 */

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

struct get_ctx {
    const char            *key;
    size_t                 key_len;
    struct ringcache_value v;
    bool                   hit;
    int                    result;
};

/* Reply handler of get/gets: at most one VALUE for our key, then END.
 * The value is copied (malloc) into the context; the caller frees it. */
static int
get_reply(void *arg, const struct mcr_reply *r)
{
    struct get_ctx *g = arg;

    switch (r->kind) {
    case MCR_VALUE:
        if (g->hit || r->key_len != g->key_len || memcmp(r->key, g->key, r->key_len) != 0) {
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
    case MCR_END:
        if (g->result == 0 && !g->hit) {
            g->result = RINGCACHE_ENOTFOUND;
        }
        return STEP_DONE;
    default:
        return node_reply_error(r, &g->result);
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
}

/* get (gets with with_cas) of one key, failing over down its preference
 * list. */
static int
do_get(struct ringcache *rc, bool with_cas, const char *key, size_t key_len,
       struct ringcache_value *out)
{
    struct get_ctx g = { .key = key, .key_len = key_len };
    struct op      op = { get_reply, get_reset, &g, &g.result };
    char           line[MCP_LINE_MAX];
    struct iovec   iov = { .iov_base = line };
    int            ret;

    if (out == NULL) {
        return RINGCACHE_EINVAL;
    }
    ret = check_call(rc, key, key_len);
    if (ret != 0) {
        return ret;
    }
    iov.iov_len = mcp_format_get(line, with_cas, key, key_len);
    ret = node_keyed_request(rc, key, key_len, false, &iov, 1, &op);
    if (ret == 0) {
        *out = g.v;
        return 0;
    }
    /* A fail-over may leave a value from a node that later failed. */
    ringcache_value_clear(&g.v);
    return ret;
}

int
ringcache_get(struct ringcache *rc, const char *key, size_t key_len, struct ringcache_value *out)
{
    return do_get(rc, false, key, key_len, out);
}

int
ringcache_gets(struct ringcache *rc, const char *key, size_t key_len, struct ringcache_value *out)
{
    return do_get(rc, true, key, key_len, out);
}

/* Replies of storage, delete, touch, incr and decr: one line each. */
struct line_ctx {
    enum mcr_kind ok; /* the success line of this command */
    int           result;
    uint64_t      number;
};

/* Reply handler of the one-line commands: maps the line to a code and
 * rejects lines that command can never get. */
static int
line_reply(void *arg, const struct mcr_reply *r)
{
    struct line_ctx *l = arg;

    if (r->kind == l->ok) {
        l->result = 0;
        l->number = r->number;
        return STEP_DONE;
    }
    switch (r->kind) {
    case MCR_NOT_STORED:
        if (l->ok != MCR_STORED) {
            return RINGCACHE_EPROTO;
        }
        l->result = RINGCACHE_ENOTSTORED;
        return STEP_DONE;
    case MCR_EXISTS:
        if (l->ok != MCR_STORED) {
            return RINGCACHE_EPROTO;
        }
        l->result = RINGCACHE_EEXISTS;
        return STEP_DONE;
    case MCR_NOT_FOUND:
        l->result = RINGCACHE_ENOTFOUND;
        return STEP_DONE;
    default:
        return node_reply_error(r, &l->result);
    }
}

/* A storage command (set/add/replace/append/prepend/cas): validate, then
 * header, value and \r\n in one sendmsg (no copy of the value). */
static int
do_store(struct ringcache *rc, const char *cmd, const char *key, size_t key_len, const void *value,
         size_t value_len, uint32_t flags, int32_t ttl, bool with_cas, uint64_t cas)
{
    struct line_ctx l = { .ok = MCR_STORED };
    struct op       op = { line_reply, NULL, &l, &l.result };
    char            head[MCP_LINE_MAX];
    struct iovec    iov[3];
    int             ret;

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
    iov[0].iov_len =
        mcp_format_storage(head, cmd, key, key_len, flags, ttl, value_len, with_cas, cas);
    iov[1].iov_base = (void *)value;
    iov[1].iov_len = value_len;
    iov[2].iov_base = (void *)"\r\n";
    iov[2].iov_len = 2;
    return node_keyed_request(rc, key, key_len, true, iov, 3, &op);
}

int
ringcache_set(struct ringcache *rc, const char *key, size_t key_len, const void *value,
              size_t value_len, uint32_t flags, int32_t ttl)
{
    return do_store(rc, "set", key, key_len, value, value_len, flags, ttl, false, 0);
}

int
ringcache_add(struct ringcache *rc, const char *key, size_t key_len, const void *value,
              size_t value_len, uint32_t flags, int32_t ttl)
{
    return do_store(rc, "add", key, key_len, value, value_len, flags, ttl, false, 0);
}

int
ringcache_replace(struct ringcache *rc, const char *key, size_t key_len, const void *value,
                  size_t value_len, uint32_t flags, int32_t ttl)
{
    return do_store(rc, "replace", key, key_len, value, value_len, flags, ttl, false, 0);
}

int
ringcache_append(struct ringcache *rc, const char *key, size_t key_len, const void *value,
                 size_t value_len)
{
    return do_store(rc, "append", key, key_len, value, value_len, 0, 0, false, 0);
}

int
ringcache_prepend(struct ringcache *rc, const char *key, size_t key_len, const void *value,
                  size_t value_len)
{
    return do_store(rc, "prepend", key, key_len, value, value_len, 0, 0, false, 0);
}

int
ringcache_cas(struct ringcache *rc, const char *key, size_t key_len, const void *value,
              size_t value_len, uint32_t flags, int32_t ttl, uint64_t cas)
{
    return do_store(rc, "cas", key, key_len, value, value_len, flags, ttl, true, cas);
}

/* A keyed one-line command (delete, incr/decr, touch) whose request line
 * is line[0..len) (mcp_format_*: 0 for a key that cannot be one, which
 * check_call rejects before anything is sent). */
static int
do_line(struct ringcache *rc, const char *key, size_t key_len, char *line, size_t len,
        enum mcr_kind ok, uint64_t *number)
{
    struct line_ctx l = { .ok = ok };
    struct op       op = { line_reply, NULL, &l, &l.result };
    struct iovec    iov = { .iov_base = line, .iov_len = len };
    int             ret;

    ret = check_call(rc, key, key_len);
    if (ret != 0) {
        return ret;
    }
    ret = node_keyed_request(rc, key, key_len, true, &iov, 1, &op);
    if (ret == 0 && number != NULL) {
        *number = l.number;
    }
    return ret;
}

int
ringcache_delete(struct ringcache *rc, const char *key, size_t key_len)
{
    char line[MCP_LINE_MAX];

    return do_line(rc, key, key_len, line, mcp_format_delete(line, key, key_len), MCR_DELETED,
                   NULL);
}

/* incr (incr true) or decr of key by delta; the new value into *result. */
static int
do_arith(struct ringcache *rc, bool incr, const char *key, size_t key_len, uint64_t delta,
         uint64_t *result)
{
    char line[MCP_LINE_MAX];

    return do_line(rc, key, key_len, line, mcp_format_arith(line, incr, key, key_len, delta),
                   MCR_NUMBER, result);
}

int
ringcache_incr(struct ringcache *rc, const char *key, size_t key_len, uint64_t delta,
               uint64_t *result)
{
    return do_arith(rc, true, key, key_len, delta, result);
}

int
ringcache_decr(struct ringcache *rc, const char *key, size_t key_len, uint64_t delta,
               uint64_t *result)
{
    return do_arith(rc, false, key, key_len, delta, result);
}

int
ringcache_touch(struct ringcache *rc, const char *key, size_t key_len, int32_t ttl)
{
    char line[MCP_LINE_MAX];

    return do_line(rc, key, key_len, line, mcp_format_touch(line, key, key_len, ttl), MCR_TOUCHED,
                   NULL);
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
stats_reply(void *arg, const struct mcr_reply *r)
{
    struct stats_ctx *s = arg;
    char              name[MCR_LINE_MAX], value[MCR_LINE_MAX];

    switch (r->kind) {
    case MCR_STAT:
        memcpy(name, r->key, r->key_len);
        name[r->key_len] = '\0';
        memcpy(value, r->data, r->data_len);
        value[r->data_len] = '\0';
        s->fn(s->arg, name, value);
        return STEP_MORE;
    case MCR_END:
        return STEP_DONE;
    default:
        return node_reply_error(r, &s->result);
    }
}

int
ringcache_stats(struct ringcache *rc, size_t i, ringcache_stat_fn fn, void *arg)
{
    return ringcache_stats_group(rc, i, NULL, fn, arg);
}

int
ringcache_stats_group(struct ringcache *rc, size_t i, const char *group, ringcache_stat_fn fn,
                      void *arg)
{
    struct stats_ctx s = { .fn = fn, .arg = arg };
    struct op        op = { stats_reply, NULL, &s, &s.result };
    char             line[MCP_STATS_LINE_MAX];
    struct iovec     iov = { .iov_base = line };
    struct redirect  rd;
    struct rc_node  *node;
    bool             sent;
    int              ret;

    node = view_current_node(rc, i);
    iov.iov_len = mcp_format_stats(line, group);
    if (fn == NULL || node == NULL || iov.iov_len == 0) {
        return RINGCACHE_EINVAL;
    }
    ret = node_request(rc, node, 0, &iov, 1, &op, &sent, &rd);
    return ret != 0 ? ret : s.result;
}
