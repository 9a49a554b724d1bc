/*
 * meta: libringcache's meta operations (ringcache_mg, _ms, _md, _ma), the
 * pipelined meta multi-get (a protocol of mget.c's engine: one `mg ...
 * O<i>` per key and a final `mn` per node) and the herd-safe
 * ringcache_get_or_compute. Requests are built by mcproto.c, replies read
 * by proto/mcreply; routing, fail-over and redirects are node_io.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/rc_internal.h"

#define META_RECHECK_MS     5000 /* a node that answered ERROR to mn is asked again after this */
#define VIVIFY_DEFAULT_TTL  30   /* get_or_compute's stub ttl when the caller sets none */
#define COMPUTE_BACKOFF_MAX 50   /* ms: the longest pause of a caller waiting for the winner */

void
ringcache_meta_opts_init(struct ringcache_meta_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->want = RINGCACHE_WANT_VALUE | RINGCACHE_WANT_FLAGS | RINGCACHE_WANT_CAS;
    o->ttl = RINGCACHE_META_UNSET;
    o->vivify_ttl = RINGCACHE_META_UNSET;
    o->recache_below = RINGCACHE_META_UNSET;
    o->mode = 0;
    o->delta = 1;
    o->wait_ms = 2000;
}

void
ringcache_meta_result_clear(struct ringcache_meta_result *r)
{
    if (r != NULL) {
        free(r->value);
        memset(r, 0, sizeof(*r));
    }
}

/* *o, or the defaults into *def when o is NULL. */
static const struct ringcache_meta_opts *
opts_or_default(const struct ringcache_meta_opts *o, struct ringcache_meta_opts *def)
{
    if (o != NULL) {
        return o;
    }
    ringcache_meta_opts_init(def);
    return def;
}

/* The status and code of a meta reply code for cmd: the RINGCACHE_E code
 * (0 for success), or RINGCACHE_EPROTO for a code cmd never gets. */
static int
meta_status(enum mcp_meta_cmd cmd, enum mcr_kind kind, int *status)
{
    switch (kind) {
    case MCR_META_VA:
    case MCR_META_HD:
        if (kind == MCR_META_VA && (cmd == MCP_MS || cmd == MCP_MD)) {
            return RINGCACHE_EPROTO;
        }
        *status = cmd == MCP_MG   ? RINGCACHE_META_HIT
                  : cmd == MCP_MD ? RINGCACHE_META_DELETED
                                  : RINGCACHE_META_STORED;
        return 0;
    case MCR_META_EN:
        if (cmd != MCP_MG) {
            return RINGCACHE_EPROTO;
        }
        *status = RINGCACHE_META_MISS;
        return RINGCACHE_ENOTFOUND;
    case MCR_META_NF:
        if (cmd == MCP_MG) {
            return RINGCACHE_EPROTO;
        }
        *status = RINGCACHE_META_NOT_FOUND;
        return RINGCACHE_ENOTFOUND;
    case MCR_META_NS:
        if (cmd != MCP_MS && cmd != MCP_MA) {
            return RINGCACHE_EPROTO;
        }
        *status = RINGCACHE_META_NOT_STORED;
        return RINGCACHE_ENOTSTORED;
    case MCR_META_EX:
        if (cmd == MCP_MG) {
            return RINGCACHE_EPROTO;
        }
        *status = RINGCACHE_META_EXISTS;
        return RINGCACHE_EEXISTS;
    default:
        return RINGCACHE_EPROTO;
    }
}

/* The meta flags of reply r into out (not the value), and the key: the
 * request's (key, key_len), which an echoed k must match (decoded when
 * the reply says b). 0, or RINGCACHE_EPROTO for an echo of another key. */
static int
result_fill(struct ringcache_meta_result *out, const struct mcr_reply *r, const char *key,
            size_t key_len)
{
    out->got = 0;
    if ((r->mseen & MCR_MF_C) != 0) {
        out->cas = r->cas;
        out->got |= RINGCACHE_WANT_CAS;
    }
    if ((r->mseen & MCR_MF_F) != 0) {
        out->flags = r->flags;
        out->got |= RINGCACHE_WANT_FLAGS;
    }
    if ((r->mseen & MCR_MF_T) != 0) {
        out->ttl = r->ttl;
        out->got |= RINGCACHE_WANT_TTL;
    }
    if ((r->mseen & MCR_MF_S) != 0) {
        out->size = r->size;
        out->got |= RINGCACHE_WANT_SIZE;
    }
    if ((r->mseen & MCR_MF_H) != 0) {
        out->hit_before = r->hit_before;
        out->got |= RINGCACHE_WANT_HIT;
    }
    if ((r->mseen & MCR_MF_L) != 0) {
        out->last_access = r->last_access;
        out->got |= RINGCACHE_WANT_LAST_ACCESS;
    }
    out->won = (r->mseen & MCR_MF_W) != 0;
    out->stale = (r->mseen & MCR_MF_X) != 0;
    out->token_sent = (r->mseen & MCR_MF_Z) != 0;
    memcpy(out->key, key, key_len);
    out->key[key_len] = '\0';
    out->key_len = key_len;
    if ((r->mseen & MCR_MF_K) != 0) {
        unsigned char dec[RINGCACHE_KEY_MAX];
        const void   *echo = r->key;
        long          n = (long)r->key_len;

        if ((r->mseen & MCR_MF_B) != 0) {
            /* util_b64_decode: 0 when it does not decode. */
            n = r->key_len <= RINGCACHE_KEY_MAX ? (long)util_b64_decode(r->key, r->key_len, dec)
                                                : 0;
            echo = dec;
        }
        if (n != (long)key_len || memcmp(echo, key, key_len) != 0) {
            return RINGCACHE_EPROTO;
        }
        out->got |= RINGCACHE_WANT_KEY;
    }
    return 0;
}

/* The decimal number at the start of an ma value (memcached may pad it
 * with spaces). 0, or RINGCACHE_EPROTO when it is none. */
static int
parse_number(const char *s, size_t len, uint64_t *out)
{
    size_t i = 0;

    while (len > 0 && s[len - 1] == ' ') {
        len--;
    }
    if (len == 0 || len > 20) {
        return RINGCACHE_EPROTO;
    }
    *out = 0;
    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9' || *out > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10) {
            return RINGCACHE_EPROTO;
        }
        *out = *out * 10 + (uint64_t)(s[i] - '0');
    }
    return 0;
}

/*
 * One meta command on one key
 */

struct meta_ctx {
    enum mcp_meta_cmd            cmd;
    const char                  *key;
    size_t                       key_len;
    struct ringcache_meta_result res;
    int                          result;
};

/* Reply handler of mg, ms, md and ma: one meta reply (a VA copied into
 * res.value, malloc), or an error line. */
static int
meta_reply(void *arg, const struct mcr_reply *r)
{
    struct meta_ctx *m = arg;
    int              code, status = 0, ret;

    if (r->kind < MCR_META_VA || r->kind > MCR_META_EX) {
        return node_reply_error(r, &m->result);
    }
    code = meta_status(m->cmd, r->kind, &status);
    if (code == RINGCACHE_EPROTO) {
        return RINGCACHE_EPROTO;
    }
    ret = result_fill(&m->res, r, m->key, m->key_len);
    if (ret != 0) {
        return ret;
    }
    if (r->kind == MCR_META_VA) {
        if (m->cmd == MCP_MA && parse_number(r->data, r->data_len, &m->res.number) != 0) {
            return RINGCACHE_EPROTO;
        }
        m->res.value = malloc(r->data_len + 1);
        if (m->res.value == NULL) {
            m->result = RINGCACHE_ENOMEM;
            return STEP_DONE;
        }
        memcpy(m->res.value, r->data, r->data_len);
        m->res.value[r->data_len] = '\0';
        m->res.value_len = r->data_len;
        m->res.got |= RINGCACHE_WANT_VALUE;
    }
    m->res.status = status;
    m->result = code;
    return STEP_DONE;
}

/* Clear a meta context before another attempt. */
static void
meta_reset(void *arg)
{
    struct meta_ctx *m = arg;

    ringcache_meta_result_clear(&m->res);
    m->result = 0;
}

/* Reply handler of the `mn` check: MN says the node speaks the meta
 * protocol, ERROR or CLIENT_ERROR that it does not. */
static int
mn_reply(void *arg, const struct mcr_reply *r)
{
    int *answer = arg;

    if (r->kind == MCR_META_MN) {
        *answer = 1;
        return STEP_DONE;
    }
    if (r->kind == MCR_ERROR || r->kind == MCR_CLIENT_ERROR) {
        *answer = -1;
        return STEP_DONE;
    }
    return RINGCACHE_EPROTO;
}

/*
 * Before an ms: the owner it will go to speaks the meta protocol, so its
 * value is never read as a command. The key's owners are taken in the
 * order a write tries them; the first that is usable decides: known to
 * speak it (0), asked with `mn` now if not known (a node that fails the
 * question is marked down and the next owner decides), or known not to
 * (RINGCACHE_ECLIENT, as its ERROR would be). Asked again after
 * META_RECHECK_MS, so an upgraded node is found.
 */
static int
meta_ready(struct ringcache *rc, const char *key, size_t key_len)
{
    uint32_t        owners[RING_R_MAX], n, i;
    struct rc_view *v = view_get(rc);
    int             ret = 0;

    n = route_owners(v->ring, v->replicas, key, key_len, owners);
    for (i = 0; i < n; i++) {
        struct rc_node *node = v->nodes[owners[i]];
        int             meta = __atomic_load_n(&node->meta, __ATOMIC_RELAXED), answer = 0;
        int64_t         now = util_now_ms();
        char            line[8];
        struct iovec    iov = { .iov_base = line, .iov_len = mcp_format_mn(line) };
        struct op       op = { mn_reply, NULL, &answer, &answer };
        struct redirect rd;
        bool            sent;

        if (meta == 1) {
            break;
        }
        if (meta == -1 &&
            now < __atomic_load_n(&node->meta_at, __ATOMIC_RELAXED) + META_RECHECK_MS) {
            ret = RINGCACHE_ECLIENT;
            break;
        }
        if (!pool_node_usable(&node->pool, now)) {
            continue;
        }
        if (node_request(rc, node, 0, &iov, 1, &op, &sent, &rd) != 0 || answer == 0) {
            continue; /* marked down: the write goes to the next owner */
        }
        if (answer < 0) {
            __atomic_store_n(&node->meta_at, util_now_ms(), __ATOMIC_RELAXED);
            __atomic_store_n(&node->meta, -1, __ATOMIC_RELAXED);
            ret = RINGCACHE_ECLIENT;
        } else {
            __atomic_store_n(&node->meta, 1, __ATOMIC_RELAXED);
        }
        break;
    }
    view_put(v);
    return ret;
}

/*
 * Send one meta command (line[0..len), then the value for ms) for key
 * with node_keyed_request and hand the reply to *out (which the caller
 * clears). out may be NULL.
 */
static int
meta_call(struct ringcache *rc, enum mcp_meta_cmd cmd, const char *key, size_t key_len,
          const struct ringcache_meta_opts *o, const void *value, size_t value_len,
          struct ringcache_meta_result *out)
{
    struct meta_ctx m = { .cmd = cmd, .key = key, .key_len = key_len };
    struct op       op = { meta_reply, meta_reset, &m, &m.result };
    char            line[MCP_LINE_MAX];
    struct iovec    iov[3];
    int             ret;

    if (out != NULL) {
        memset(out, 0, sizeof(*out));
    }
    if (rc == NULL || (cmd == MCP_MS && value == NULL && value_len > 0)) {
        return RINGCACHE_EINVAL;
    }
    if (mcp_meta_key(key, key_len) < 0) {
        return RINGCACHE_EKEY;
    }
    if (cmd == MCP_MS && value_len > rc->opt.max_value_bytes) {
        return RINGCACHE_ETOOBIG;
    }
    iov[0].iov_base = line;
    iov[0].iov_len = mcp_format_meta(line, cmd, key, key_len, value_len, o, NULL);
    if (iov[0].iov_len == 0) {
        return RINGCACHE_EINVAL; /* the key was checked: a mode cmd has not */
    }
    if (cmd == MCP_MS) {
        ret = meta_ready(rc, key, key_len);
        if (ret != 0) {
            return ret;
        }
        iov[1].iov_base = (void *)value;
        iov[1].iov_len = value_len;
        iov[2].iov_base = (void *)"\r\n";
        iov[2].iov_len = 2;
    }
    ret = node_keyed_request(rc, key, key_len, mcp_meta_writes(cmd, o), iov, cmd == MCP_MS ? 3 : 1,
                             &op);
    if (m.res.status == 0 || ret != m.result) {
        /* No meta reply decided it (a node failed, every owner down, an
         * error line): nothing to hand out. */
        ringcache_meta_result_clear(&m.res);
    }
    if (out != NULL) {
        *out = m.res;
    } else {
        ringcache_meta_result_clear(&m.res);
    }
    return ret;
}

int
ringcache_mg(struct ringcache *rc, const char *key, size_t key_len,
             const struct ringcache_meta_opts *opts, struct ringcache_meta_result *out)
{
    struct ringcache_meta_opts def;

    if (out == NULL) {
        return RINGCACHE_EINVAL;
    }
    return meta_call(rc, MCP_MG, key, key_len, opts_or_default(opts, &def), NULL, 0, out);
}

int
ringcache_ms(struct ringcache *rc, const char *key, size_t key_len, const void *value,
             size_t value_len, const struct ringcache_meta_opts *opts,
             struct ringcache_meta_result *out)
{
    struct ringcache_meta_opts def;

    return meta_call(rc, MCP_MS, key, key_len, opts_or_default(opts, &def), value, value_len, out);
}

int
ringcache_md(struct ringcache *rc, const char *key, size_t key_len,
             const struct ringcache_meta_opts *opts, struct ringcache_meta_result *out)
{
    struct ringcache_meta_opts def;

    return meta_call(rc, MCP_MD, key, key_len, opts_or_default(opts, &def), NULL, 0, out);
}

int
ringcache_ma(struct ringcache *rc, const char *key, size_t key_len,
             const struct ringcache_meta_opts *opts, struct ringcache_meta_result *out)
{
    struct ringcache_meta_opts def;

    return meta_call(rc, MCP_MA, key, key_len, opts_or_default(opts, &def), NULL, 0, out);
}

/*
 * The pipelined meta multi-get: a protocol of mget.c's engine. Every key
 * of a node's share is one `mg <key> <flags> O<index>` and the share ends
 * with `mn`. No q flag: an error line (MOVED and TRYAGAIN included)
 * carries no opaque, so every key gets its own reply line, in request
 * order, and the opaque of VA, HD (and EN, from nodes that echo it) must
 * be the key's: a reply for another key is out of step.
 */

struct mg_multi {
    const struct ringcache_meta_opts *o;
    ringcache_mg_fn                   fn;
    void                             *arg;
};

static int
mgm_check(void *arg, const char *key, size_t len)
{
    (void)arg;
    return mcp_meta_key(key, len) < 0 ? RINGCACHE_EKEY : 0;
}

/* The share's pipeline into buf (its size when buf is NULL). */
static size_t
mgm_format(void *arg, char *buf, const struct route_key *keys, const struct mget_share *s)
{
    const struct mg_multi *g = arg;
    char                   line[MCP_LINE_MAX], opaque[24];
    size_t                 j, len, off = 0;

    for (j = 0; j < s->n; j++) {
        const struct route_key *k = &keys[s->idx[j]];

        snprintf(opaque, sizeof(opaque), "%zu", s->idx[j]);
        len = mcp_format_meta(buf != NULL ? buf + off : line, MCP_MG, k->key, k->len, 0, g->o,
                              opaque);
        off += len;
    }
    off += mcp_format_mn(buf != NULL ? buf + off : line);
    return off;
}

/* True when the opaque r carries is the decimal index i. */
static bool
opaque_is(const struct mcr_reply *r, size_t i)
{
    char   want[24];
    size_t n = (size_t)snprintf(want, sizeof(want), "%zu", i);

    return r->opaque_len == n && memcmp(r->opaque, want, n) == 0;
}

/* One reply unit of a share's pipeline. */
static int
mgm_unit(void *arg, struct mget *m, struct mget_share *s, const struct route_key *keys,
         struct mcr_reply *r)
{
    struct mg_multi             *g = arg;
    struct ringcache_meta_result res;
    const struct route_key      *k;
    size_t                       i;
    int                          code, status = 0;

    if (s->pos == s->n) {
        /* After every key: MN, or the error of a node that has no mn. */
        return r->kind == MCR_META_MN || r->kind == MCR_ERROR || r->kind == MCR_CLIENT_ERROR
                   ? MGET_DONE
                   : RINGCACHE_EPROTO;
    }
    i = s->idx[s->pos];
    k = &keys[i];
    memset(&res, 0, sizeof(res));
    switch (r->kind) {
    case MCR_MOVED:
    case MCR_TRYAGAIN:
        /* This key stays pending for the next round. */
        mget_redirected(m, s, r);
        s->pos++;
        return MGET_MORE;
    case MCR_ERROR:
    case MCR_CLIENT_ERROR:
    case MCR_SERVER_ERROR:
        code = mcp_error_code(r);
        break;
    case MCR_META_VA:
    case MCR_META_HD:
    case MCR_META_EN:
        if ((r->kind != MCR_META_EN || (r->mseen & MCR_MF_O) != 0) && !opaque_is(r, i)) {
            return RINGCACHE_EPROTO;
        }
        code = meta_status(MCP_MG, r->kind, &status);
        if (result_fill(&res, r, k->key, k->len) != 0) {
            return RINGCACHE_EPROTO;
        }
        res.status = status;
        if (r->kind == MCR_META_VA) {
            /* The block is followed by "\r\n" in the buffer: terminate it
             * in place for the callback. */
            ((char *)r->data)[r->data_len] = '\0';
            res.value = (char *)r->data;
            res.value_len = r->data_len;
            res.got |= RINGCACHE_WANT_VALUE;
        }
        break;
    default:
        return RINGCACHE_EPROTO;
    }
    mget_answered(m, i);
    g->fn(g->arg, i, (int)s->node, code, &res);
    s->pos++;
    return MGET_MORE;
}

static void
mgm_orphan(void *arg, size_t i, int status)
{
    struct mg_multi             *g = arg;
    struct ringcache_meta_result res;

    memset(&res, 0, sizeof(res));
    g->fn(g->arg, i, -1, status, &res);
}

static const struct mget_proto mgm_proto = { mgm_check, mgm_format, mgm_unit, mgm_orphan };

int
ringcache_mg_multi(struct ringcache *rc, const char *const *keys, const size_t *key_lens, size_t n,
                   const struct ringcache_meta_opts *opts, ringcache_mg_fn fn, void *arg)
{
    struct ringcache_meta_opts def;
    struct mg_multi            g = { .o = opts_or_default(opts, &def), .fn = fn, .arg = arg };

    if (fn == NULL) {
        return RINGCACHE_EINVAL;
    }
    return mget_keys(rc, keys, key_lens, n, &mgm_proto, &g);
}

/*
 * get or compute
 */

/* Sleep ms milliseconds (EINTR resumes). */
static void
sleep_ms(int ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Give back a win on a stub: delete it if it is still the one won (its
 * CAS), so that the next caller wins instead of waiting for it to expire.
 * A stale item won is left as it is (its old value stays usable). */
static void
release_win(struct ringcache *rc, const char *key, size_t key_len,
            const struct ringcache_meta_result *won)
{
    struct ringcache_meta_opts d;

    if (won != NULL && won->value_len == 0 && !won->stale) {
        ringcache_meta_opts_init(&d);
        d.cas = won->cas;
        ringcache_md(rc, key, key_len, &d, NULL);
    }
}

/* Compute the value into out and, with store, ms it (with the CAS of the
 * item won, when won is given, so that a value someone stored meanwhile
 * is not overwritten). A failed compute or store gives the win back. */
static int
compute_and_store(struct ringcache *rc, const char *key, size_t key_len,
                  const struct ringcache_meta_opts *o, const struct ringcache_meta_result *won,
                  bool store, ringcache_compute_fn compute, void *arg,
                  struct ringcache_meta_result *out)
{
    struct ringcache_meta_opts   so;
    struct ringcache_meta_result sr;
    struct ringcache_value       v = { 0 };
    int                          ret;

    ret = compute(arg, key, key_len, &v);
    if (ret == 0 && v.data == NULL && v.len > 0) {
        ret = RINGCACHE_EINVAL;
    }
    if (ret != 0) {
        ringcache_value_clear(&v);
        release_win(rc, key, key_len, won);
        return ret > 0 ? RINGCACHE_EINVAL : ret;
    }
    if (v.data == NULL) {
        v.data = calloc(1, 1);
        if (v.data == NULL) {
            release_win(rc, key, key_len, won);
            return RINGCACHE_ENOMEM;
        }
    }
    if (store) {
        ringcache_meta_opts_init(&so);
        so.want = RINGCACHE_WANT_CAS;
        so.ttl = o->ttl;
        so.flags = v.flags;
        so.cas = won != NULL ? won->cas : 0;
        ret = ringcache_ms(rc, key, key_len, v.data, v.len, &so, &sr);
        /* EX, NF: another value replaced what was won; it stays. */
        if (ret != 0 && ret != RINGCACHE_EEXISTS && ret != RINGCACHE_ENOTFOUND) {
            release_win(rc, key, key_len, won);
        }
        out->status = RINGCACHE_META_HIT;
        out->won = 1;
        if (ret == 0 && (sr.got & RINGCACHE_WANT_CAS) != 0) {
            out->cas = sr.cas;
            out->got |= RINGCACHE_WANT_CAS;
        }
        ringcache_meta_result_clear(&sr);
    }
    out->value = v.data;
    out->value_len = v.len;
    out->flags = v.flags;
    out->got |= RINGCACHE_WANT_VALUE | RINGCACHE_WANT_FLAGS;
    memcpy(out->key, key, key_len);
    out->key[key_len] = '\0';
    out->key_len = key_len;
    return 0;
}

int
ringcache_get_or_compute(struct ringcache *rc, const char *key, size_t key_len,
                         const struct ringcache_meta_opts *opts, ringcache_compute_fn compute,
                         void *arg, struct ringcache_meta_result *out)
{
    struct ringcache_meta_opts   o;
    struct ringcache_meta_result res;
    int64_t                      deadline;
    int                          ret, backoff = 1, left, last;

    if (out == NULL || compute == NULL) {
        return RINGCACHE_EINVAL;
    }
    memset(out, 0, sizeof(*out));
    if (opts != NULL) {
        o = *opts;
    } else {
        ringcache_meta_opts_init(&o);
    }
    if (o.vivify_ttl == RINGCACHE_META_UNSET) {
        o.vivify_ttl = VIVIFY_DEFAULT_TTL;
    }
    /* The store needs the CAS of what was won. */
    o.want |= RINGCACHE_WANT_VALUE | RINGCACHE_WANT_FLAGS | RINGCACHE_WANT_CAS;
    deadline = util_now_ms() + (o.wait_ms > 0 ? o.wait_ms : 0);
    for (;;) {
        ret = ringcache_mg(rc, key, key_len, &o, &res);
        if (ret == RINGCACHE_EDOWN) {
            /* No owner to protect or to store in: the value, unstored. */
            return compute_and_store(rc, key, key_len, &o, NULL, false, compute, arg, out);
        }
        if (ret == RINGCACHE_ENOTFOUND && res.status == RINGCACHE_META_MISS) {
            /* The node made no stub (it could not): this caller computes
             * and stores. */
            ringcache_meta_result_clear(&res);
            return compute_and_store(rc, key, key_len, &o, NULL, true, compute, arg, out);
        }
        if (ret == RINGCACHE_EUNAVAILABLE || ret == RINGCACHE_ETRYAGAIN ||
            ret == RINGCACHE_EMOVED) {
            /* An owner down until its failover, the key's range fenced
             * or its owner moving for longer than a call: ask again while
             * the wait lasts. */
            last = ret;
        } else if (ret != 0) {
            return ret;
        } else if (res.won) {
            ret = compute_and_store(rc, key, key_len, &o, &res, true, compute, arg, out);
            ringcache_meta_result_clear(&res);
            return ret;
        } else if (res.value_len > 0 || !res.token_sent) {
            /* Not won: a value is good (the stale one too); an empty one
             * with a win handed out is the winner's stub, still computing. */
            *out = res;
            return 0;
        } else {
            last = RINGCACHE_ETIMEDOUT;
        }
        ringcache_meta_result_clear(&res);
        left = (int)(deadline - util_now_ms());
        if (left <= 0) {
            return last;
        }
        sleep_ms(backoff < left ? backoff : left);
        if (backoff < COMPUTE_BACKOFF_MAX) {
            backoff = backoff * 2 < COMPUTE_BACKOFF_MAX ? backoff * 2 : COMPUTE_BACKOFF_MAX;
        }
    }
}
