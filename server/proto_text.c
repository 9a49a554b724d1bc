/*
 * proto_text: the classic memcached text protocol (see
 * shared notes/memcached-protocol.md for every reply and edge case).
 * Lines are tokenized in place inside the connection's read buffer; each
 * key is hashed once (XXH3_64bits, the ring's hash) and the hash is passed
 * to the store. Multi-gets stream: they pause when the output queue is full
 * and resume where they stopped, so no buffer is sized from the request.
 */
#include "config.h"
#include "server/proto_text.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/event.h>
#include <xxhash.h>

#include "server/cluster.h"
#include "server/conn.h"
#include "server/forward.h"
#include "server/log.h"
#include "server/replicate.h"
#include "server/stats.h"
#include "server/store.h"
#include "server/thread.h"

#define KEY_MAX          250
#define LINE_MAX_NONGET  2048   /* bytes without '\n' before we hang up */
#define GET_PREFIX_MAX   100    /* leading spaces allowed before a long get */
#define MAX_TOKENS       8
#define VALUE_HDR_MAX    (6 + KEY_MAX + 1 + 10 + 1 + 10 + 1 + 20 + 2)
#define NREAD_RC_SET     100    /* nread_op of a replica post-image (not a store_op) */

struct token {
    const char *p;
    size_t      len;
};

#define TOK_IS(t, lit) ((t)->len == sizeof(lit) - 1 && memcmp((t)->p, lit, sizeof(lit) - 1) == 0)

/* Queue a literal reply unless the command said noreply. */
#define REPLY(c, lit) reply((c), lit "\r\n", sizeof(lit "\r\n") - 1)

static const char ERR_FORMAT[] = "CLIENT_ERROR bad command line format";

/* Queue n bytes of reply text unless noreply is in force. */
static void
reply(struct conn *c, const char *s, size_t n)
{
    if (!c->noreply)
        conn_out_add(c, s, n);
}

/* Queue "<msg>\r\n" unless noreply. */
static void
reply_line(struct conn *c, const char *msg)
{
    if (c->noreply)
        return;
    conn_out_add(c, msg, strlen(msg));
    conn_out_add(c, "\r\n", 2);
}

/* Queue formatted text (stats only; always sent). */
static void __attribute__((format(printf, 2, 3)))
reply_printf(struct conn *c, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(buf))
        n = sizeof(buf) - 1;
    conn_out_add(c, buf, (size_t)n);
}

/* Decimal digits of v at p; returns the end. */
static char *
fmt_u64(char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0)
        *p++ = tmp[--n];
    return p;
}

/* An unsigned decimal that fits in 64 bits: digits, with an optional
 * leading '+' (memcached parses with strtoull, so clients send it). */
static bool
parse_u64(const struct token *t, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;

    if (t->len > 1 && t->p[0] == '+')
        i = 1;
    if (t->len == 0 || t->len - i > 20)
        return false;
    for (; i < t->len; i++) {
        unsigned d = (unsigned char)t->p[i] - '0';
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* 32-bit client flags. */
static bool
parse_u32(const struct token *t, uint32_t *out)
{
    uint64_t v;

    if (!parse_u64(t, &v) || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

/* A signed 32-bit decimal (exptime, bytes, delay). */
static bool
parse_i32(const struct token *t, int32_t *out)
{
    struct token digits = *t;
    bool neg = false;
    uint64_t v;

    if (digits.len > 0 && digits.p[0] == '-') {
        neg = true;
        digits.p++;
        digits.len--;
    }
    if (!parse_u64(&digits, &v) || v > (uint64_t)INT32_MAX + (neg ? 1 : 0))
        return false;
    *out = neg ? (int32_t)(-(int64_t)v) : (int32_t)v;
    return true;
}

/* Split [p, end) at runs of spaces into at most max tokens; returns the
 * count, or max + 1 when there are more. */
static int
tokenize(const char *p, const char *end, struct token *t, int max)
{
    int n = 0;

    for (;;) {
        const char *s;

        while (p < end && *p == ' ')
            p++;
        if (p == end)
            return n;
        if (n == max)
            return max + 1;
        s = p;
        p = memchr(p, ' ', (size_t)(end - p));
        if (p == NULL)
            p = end;
        t[n].p = s;
        t[n].len = (size_t)(p - s);
        n++;
    }
}

/* The last token of [p, end), or an empty token. */
static struct token
last_token(const char *p, const char *end)
{
    struct token t = { end, 0 };
    const char *e = end;

    while (e > p && e[-1] == ' ')
        e--;
    t.p = e;
    while (t.p > p && t.p[-1] != ' ')
        t.p--;
    t.len = (size_t)(e - t.p);
    return t;
}

static inline uint64_t
key_hash(const char *key, size_t nkey)
{
    return XXH3_64bits(key, nkey);
}

static inline struct store *
conn_store(struct conn *c)
{
    return c->w->srv->store;
}

/* Does this connection route by epoch (MOVED) rather than being
 * forwarded? Peers are never forwarded either. */
static inline bool
conn_declared(const struct conn *c)
{
    return c->declared_epoch != 0 || c->peer;
}

/* Queue the reply for a keyed request this node does not serve and will
 * not forward: TRYAGAIN when fenced, else MOVED (a plain client only gets
 * MOVED where forwarding is impossible). */
static void
reply_route(struct conn *c, const struct cluster_view *v, enum cluster_route r,
            uint32_t owner)
{
    char buf[64 + RING_ADDR_MAX];
    int n;

    if (r == CLUSTER_TRYAGAIN)
        n = snprintf(buf, sizeof(buf), "SERVER_ERROR TRYAGAIN %" PRIu64 "\r\n",
                     cluster_view_reply_epoch(v));
    else
        n = snprintf(buf, sizeof(buf), "SERVER_ERROR MOVED %" PRIu64 " %s\r\n", v->epoch,
                     cluster_view_addr(v, owner));
    cluster_count(c->w->srv->cluster, r == CLUSTER_FORWARD ? CLUSTER_MOVED : r);
    if (n > 0 && (size_t)n < sizeof(buf))
        reply(c, buf, (size_t)n);
}

/* What to do with a keyed request (route_check). */
enum route_do {
    ROUTE_SERVE = 0,   /* serve it here */
    ROUTE_REPLIED,     /* MOVED or TRYAGAIN was queued */
    ROUTE_FORWARD,     /* plain client: relay to fw->addr */
};

/* Where a forwarded request goes. */
struct fwd_target {
    char     addr[RING_ADDR_MAX + 1];
    uint64_t epoch;
};

/* The ownership check of a keyed request (docs/cluster.md), run right
 * before the store is touched. ROUTE_FORWARD fills *fw (and counts it). */
static enum route_do
route_check(struct conn *c, uint64_t hash, bool write, struct fwd_target *fw)
{
    struct cluster *cl = c->w->srv != NULL ? c->w->srv->cluster : NULL;
    const struct cluster_view *v;
    enum cluster_route r;
    uint32_t owner = 0;

    if (cl == NULL)
        return ROUTE_SERVE;
    v = cluster_view(cl);
    r = cluster_route(v, hash, write, conn_declared(c), &owner);
    if (r == CLUSTER_LOCAL)
        return ROUTE_SERVE;
    /* A plain client cannot retry a fenced key: the request goes to the
     * primary (maybe this node) through an upstream, which retries with a
     * backoff until the fence lifts (server/forward.c). */
    if (r == CLUSTER_TRYAGAIN && !conn_declared(c) && fw != NULL)
        r = CLUSTER_FORWARD;
    if (r == CLUSTER_FORWARD && fw != NULL) {
        snprintf(fw->addr, sizeof(fw->addr), "%s", cluster_view_addr(v, owner));
        fw->epoch = v->epoch;
        cluster_count(cl, CLUSTER_FORWARD);
        return ROUTE_FORWARD;
    }
    if (r == CLUSTER_FORWARD) {
        /* Cannot forward here (the data block is already in a local
         * item, after a commit moved the key): retrying is right. */
        r = CLUSTER_TRYAGAIN;
    }
    reply_route(c, v, r, owner);
    return ROUTE_REPLIED;
}

/* route_check without forwarding: true to serve here. */
static bool
route_ok(struct conn *c, uint64_t hash, bool write)
{
    return route_check(c, hash, write, NULL) == ROUTE_SERVE;
}

/* Forward the command line made of tokens t[0..n-1] (noreply dropped: the
 * reply is read and discarded instead). */
static void
forward_tokens(struct conn *c, const struct token *t, int n, const struct fwd_target *fw)
{
    char buf[LINE_MAX_NONGET + 8];
    struct iovec iov;
    size_t len = 0;
    int i;

    for (i = 0; i < n; i++) {
        if (len + t[i].len + 3 > sizeof(buf)) {
            reply_line(c, ERR_FORMAT);
            return;
        }
        if (i > 0)
            buf[len++] = ' ';
        memcpy(buf + len, t[i].p, t[i].len);
        len += t[i].len;
    }
    buf[len++] = '\r';
    buf[len++] = '\n';
    iov.iov_base = buf;
    iov.iov_len = len;
    forward_request(c, fw->addr, fw->epoch, FWD_LINE, &iov, 1, !c->noreply);
}

/* After a local write: the view may have changed under it. A write that
 * is no longer owned and not fenced would be a misrouted acknowledgement
 * (the fence barrier makes that impossible; the counter proves it). */
static void
route_after_write(struct conn *c, uint64_t hash)
{
    struct cluster *cl = c->w->srv != NULL ? c->w->srv->cluster : NULL;
    uint32_t owner;
    enum cluster_route r;

    if (cl == NULL)
        return;
    r = cluster_route(cluster_view(cl), hash, true, true, &owner);
    if (r == CLUSTER_MOVED)
        cluster_count_misrouted(cl);
}

/* Does a line start (after <= 100 spaces) with "get " or "gets "? Only
 * those may run past LINE_MAX_NONGET without a newline. */
static bool
is_get_prefix(const char *p, size_t len)
{
    size_t i = 0;

    while (i < len && i <= GET_PREFIX_MAX && p[i] == ' ')
        i++;
    if (i > GET_PREFIX_MAX)
        return false;
    p += i;
    len -= i;
    return (len >= 4 && memcmp(p, "get ", 4) == 0) ||
           (len >= 5 && memcmp(p, "gets ", 5) == 0);
}

/* Begin discarding a rejected data block of n bytes (+2 for "\r\n"). */
static void
swallow(struct conn *c, size_t n)
{
    c->swallow_left = n;
    c->pstate = CONN_PS_SWALLOW;
}

/* Queue one hit: the VALUE line, then the value (copied when small, else
 * referenced: the queue takes over the reference). */
static void
emit_value(struct conn *c, struct store_item *it, bool with_cas)
{
    size_t vlen = (size_t)it->nbytes + 2;
    bool copy = vlen <= CONN_COPY_MAX;
    char *o = conn_out_reserve(c, VALUE_HDR_MAX + (copy ? vlen : 0));
    char *p = o;

    memcpy(p, "VALUE ", 6);
    p += 6;
    memcpy(p, store_item_key(it), it->nkey);
    p += it->nkey;
    *p++ = ' ';
    p = fmt_u64(p, it->flags);
    *p++ = ' ';
    p = fmt_u64(p, it->nbytes);
    if (with_cas) {
        *p++ = ' ';
        p = fmt_u64(p, it->cas);
    }
    *p++ = '\r';
    *p++ = '\n';
    if (copy) {
        memcpy(p, store_item_value(it), vlen);
        p += vlen;
        conn_out_commit(c, (size_t)(p - o));
        store_release(conn_store(c), it);
    } else {
        conn_out_commit(c, (size_t)(p - o));
        conn_out_item(c, it, store_item_value(it), vlen);
    }
}

/* Serve keys of a (possibly paused) get from get_pos to get_end; pauses
 * when the output queue reaches its soft cap. */
static enum proto_status
get_continue(struct conn *c)
{
    struct thread_stats *ts = &c->w->stats;
    struct store *s = conn_store(c);
    const char *p = c->rbuf + c->get_pos;
    const char *end = c->rbuf + c->get_end;

    for (;;) {
        const char *key;
        struct store_item *it;
        size_t nkey;

        while (p < end && *p == ' ')
            p++;
        if (p == end)
            break;
        if (c->out_bytes >= CONN_OUT_SOFT_CAP && c->repl_gat == NULL) {
            c->get_pos = (uint32_t)(p - c->rbuf);
            return PROTO_PAUSE;
        }
        key = p;
        p = memchr(p, ' ', (size_t)(end - p));
        if (p == NULL)
            p = end;
        nkey = (size_t)(p - key);
        STATS_ADD(ts, cmd_get, 1);
        if (c->w->srv != NULL && c->w->srv->cluster != NULL) {
            uint32_t owner;
            enum cluster_route r = cluster_route(cluster_view(c->w->srv->cluster),
                                                 key_hash(key, nkey), c->get_touch,
                                                 conn_declared(c), &owner);

            /* A plain client's remote keys were forwarded (process_get).
             * Otherwise ownership may have moved since the line was
             * checked (a paused get resumes later): a miss, never a stale
             * hit. */
            if (r == CLUSTER_FORWARD || (r == CLUSTER_TRYAGAIN && !conn_declared(c)))
                continue;
            if (r != CLUSTER_LOCAL) {
                STATS_ADD(ts, get_misses, 1);
                continue;
            }
        }
        if (c->get_touch) {
            uint64_t hash = key_hash(key, nkey);
            bool repl = c->repl_gat != NULL && replicate_wanted(c, hash);

            STATS_ADD(ts, cmd_touch, 1);
            if (repl)
                replicate_lock(hash);
            it = store_get_touch(s, key, nkey, hash, c->get_exptime);
            if (it != NULL && repl)
                replicate_gat_key(c, it);
            if (repl)
                replicate_unlock(hash);
            if (it != NULL)
                STATS_ADD(ts, touch_hits, 1);
            else
                STATS_ADD(ts, touch_misses, 1);
        } else {
            it = store_get(s, key, nkey, key_hash(key, nkey));
            if (it != NULL)
                STATS_ADD(ts, get_hits, 1);
            else
                STATS_ADD(ts, get_misses, 1);
        }
        if (it != NULL)
            emit_value(c, it, c->get_cas);
    }
    conn_out_add(c, "END\r\n", 5);
    if (c->repl_gat != NULL)
        replicate_gat_end(c);
    c->pstate = CONN_PS_CMD;
    return PROTO_MORE;
}

/* Owners a plain client's multi-get is split over, at most. Beyond, the
 * keys of further owners are answered as misses. */
#define GET_OWNERS_MAX 32

/*
 * Forward the remote keys of a plain client's get: one request per owner
 * with that owner's keys (cmd and exp are the command word and the raw
 * exptime of gat/gats, or NULL). With whole, the get has no local key and
 * one owner: its reply is relayed as is; else each owner's VALUEs are
 * spliced in ahead of the local ones and one END closes the reply.
 */
static void
forward_get(struct conn *c, const struct cluster_view *v, const char *cmd, size_t ncmd,
            const struct token *exp, const char *p, const char *end,
            const uint32_t *owners, uint32_t nowners, bool touch, bool whole)
{
    size_t cap = ncmd + (exp != NULL ? exp->len + 1 : 0) + (size_t)(end - p) + 4;
    char *buf = malloc(cap);
    uint32_t i;

    if (buf == NULL) {
        REPLY(c, "SERVER_ERROR out of memory");
        return;
    }
    for (i = 0; i < nowners; i++) {
        const char *q = p;
        size_t len = ncmd;
        struct iovec iov;

        memcpy(buf, cmd, ncmd);
        if (exp != NULL) {
            buf[len++] = ' ';
            memcpy(buf + len, exp->p, exp->len);
            len += exp->len;
        }
        for (;;) {
            const char *k;
            uint32_t owner = 0;
            enum cluster_route r;

            while (q < end && *q == ' ')
                q++;
            if (q == end)
                break;
            k = q;
            q = memchr(q, ' ', (size_t)(end - q));
            if (q == NULL)
                q = end;
            r = cluster_route(v, key_hash(k, (size_t)(q - k)), touch, false, &owner);
            if ((r != CLUSTER_FORWARD && r != CLUSTER_TRYAGAIN) || owner != owners[i])
                continue;
            buf[len++] = ' ';
            memcpy(buf + len, k, (size_t)(q - k));
            len += (size_t)(q - k);
        }
        buf[len++] = '\r';
        buf[len++] = '\n';
        iov.iov_base = buf;
        iov.iov_len = len;
        cluster_count(c->w->srv->cluster, CLUSTER_FORWARD);
        forward_request(c, cluster_view_addr(v, owners[i]), v->epoch,
                        whole ? FWD_GET_WHOLE : FWD_GET_SPLICE, &iov, 1, true);
    }
    free(buf);
}

/* get/gets/gat/gats: keys in [p, end). Every key is checked before any
 * reply so a bad key gives the error alone, with no partial VALUEs. A
 * plain client's keys owned elsewhere are forwarded (forward_get). */
static enum proto_status
process_get(struct conn *c, const char *cmd, size_t ncmd, const struct token *exp,
            const char *p, const char *end, bool with_cas, bool touch, int64_t exptime)
{
    const char *q = p;
    size_t nkeys = 0, nlocal = 0;
    struct cluster *cl = c->w->srv != NULL ? c->w->srv->cluster : NULL;
    const struct cluster_view *v = cl != NULL ? cluster_view(cl) : NULL;
    enum cluster_route worst = CLUSTER_LOCAL;
    uint32_t worst_owner = 0;
    uint32_t owners[GET_OWNERS_MAX], nowners = 0;

    if (v != NULL && v->ring == NULL)
        v = NULL;
    for (;;) {
        const char *k;

        while (q < end && *q == ' ')
            q++;
        if (q == end)
            break;
        k = q;
        q = memchr(q, ' ', (size_t)(end - q));
        if (q == NULL)
            q = end;
        if (q - k > KEY_MAX) {
            reply_line(c, ERR_FORMAT);
            return PROTO_MORE;
        }
        nkeys++;
        if (v != NULL && worst != CLUSTER_TRYAGAIN) {
            uint32_t owner = 0, i;
            enum cluster_route r = cluster_route(v, key_hash(k, (size_t)(q - k)), touch,
                                                 conn_declared(c), &owner);

            if (r == CLUSTER_LOCAL) {
                nlocal++;
            } else if (r == CLUSTER_FORWARD ||
                       (r == CLUSTER_TRYAGAIN && !conn_declared(c))) {
                for (i = 0; i < nowners && owners[i] != owner; i++)
                    continue;
                if (i == nowners && nowners < GET_OWNERS_MAX)
                    owners[nowners++] = owner;
            } else if (worst == CLUSTER_LOCAL || r == CLUSTER_TRYAGAIN) {
                worst = r;
                worst_owner = owner;
            }
        } else if (v == NULL) {
            nlocal++;
        }
    }
    if (nkeys == 0) {
        reply_line(c, ERR_FORMAT);
        return PROTO_MORE;
    }
    /* One key not served here answers the whole get (docs/cluster.md):
     * MOVED for a declared connection, TRYAGAIN for a fenced key. */
    if (worst != CLUSTER_LOCAL) {
        reply_route(c, v, worst, worst_owner);
        return PROTO_MORE;
    }
    /* gat/gats at the key's primary with replicas: the new expiries are
     * replicated and the whole reply is held for the acks (replicate.h);
     * its first hold goes before any forwarded part. */
    if (touch && nlocal > 0 && v != NULL && v->replicas >= 2 && v->self >= 0 &&
        replicate_gat_begin(c) < 0) {
        REPLY(c, "SERVER_ERROR out of memory");
        return PROTO_MORE;
    }
    if (nowners > 0) {
        bool whole = nlocal == 0 && nowners == 1;

        forward_get(c, v, cmd, ncmd, exp, p, end, owners, nowners, touch, whole);
        if (whole)
            return PROTO_MORE;
    }
    c->get_pos = (uint32_t)(p - c->rbuf);
    c->get_end = (uint32_t)(end - c->rbuf);
    c->get_cas = with_cas;
    c->get_touch = touch;
    c->get_exptime = exptime;
    c->pstate = CONN_PS_GET;
    return get_continue(c);
}

/*
 * A plain client's storage command for a key owned elsewhere: keep the
 * command line (tokens t[0..n-1], without noreply) in fwd_buf and read the
 * data block in after it; complete_forward sends both.
 */
static void
forward_update(struct conn *c, const struct token *t, int n, size_t vlen,
               const struct fwd_target *fw)
{
    size_t line = 0;
    int i;

    if (vlen > c->w->srv->settings.item_size_max) {
        STATS_ADD(&c->w->stats, store_too_large, 1);
        REPLY(c, "SERVER_ERROR object too large for cache");
        swallow(c, vlen + 2);
        return;
    }
    for (i = 0; i < n; i++)
        line += t[i].len + 1;
    c->fwd_buf = malloc(line + 1 + vlen + 2);
    if (c->fwd_buf == NULL) {
        REPLY(c, "SERVER_ERROR out of memory storing object");
        swallow(c, vlen + 2);
        return;
    }
    line = 0;
    for (i = 0; i < n; i++) {
        if (i > 0)
            c->fwd_buf[line++] = ' ';
        memcpy(c->fwd_buf + line, t[i].p, t[i].len);
        line += t[i].len;
    }
    c->fwd_buf[line++] = '\r';
    c->fwd_buf[line++] = '\n';
    c->fwd_len = line + vlen + 2;
    c->fwd_noreply = c->noreply;
    c->fwd_epoch = fw->epoch;
    snprintf(c->fwd_addr, sizeof(c->fwd_addr), "%s", fw->addr);
    c->nread_it = NULL;
    c->nread_dst = c->fwd_buf + line;
    c->nread_left = vlen + 2;
    c->pstate = CONN_PS_NREAD;
}

/* The data block of a forwarded storage command is in: send it. */
static void
complete_forward(struct conn *c)
{
    struct iovec iov;

    c->pstate = CONN_PS_CMD;
    c->noreply = c->fwd_noreply;
    if (c->fwd_buf[c->fwd_len - 2] != '\r' || c->fwd_buf[c->fwd_len - 1] != '\n') {
        REPLY(c, "CLIENT_ERROR bad data chunk");
    } else {
        iov.iov_base = c->fwd_buf;
        iov.iov_len = c->fwd_len;
        forward_request(c, c->fwd_addr, c->fwd_epoch, FWD_LINE, &iov, 1, !c->noreply);
    }
    free(c->fwd_buf);
    c->fwd_buf = NULL;
}

/* set/add/replace/append/prepend/cas: validate, allocate the item and
 * switch to reading its data block (or swallow it on a rejection). */
static void
process_update(struct conn *c, struct token *t, int ntok, enum store_op op)
{
    struct store *s = conn_store(c);
    struct thread_stats *ts = &c->w->stats;
    int base = op == STORE_OP_CAS ? 6 : 5;
    struct store_item *it;
    uint32_t flags;
    int32_t exptime, vlen;
    uint64_t cas = 0, hash;
    struct fwd_target fw;
    int err = 0;

    if (ntok != base && ntok != base + 1) {
        reply_line(c, ERR_FORMAT);
        return;
    }
    c->noreply = TOK_IS(&t[ntok - 1], "noreply");
    if (!parse_i32(&t[4], &vlen) || vlen < 0 || vlen > INT_MAX - 2) {
        reply_line(c, ERR_FORMAT);
        return;
    }
    if (t[1].len > KEY_MAX || !parse_u32(&t[2], &flags) || !parse_i32(&t[3], &exptime) ||
        (op == STORE_OP_CAS && !parse_u64(&t[5], &cas))) {
        reply_line(c, ERR_FORMAT);
        swallow(c, (size_t)vlen + 2);
        return;
    }
    hash = key_hash(t[1].p, t[1].len);
    switch (route_check(c, hash, true, &fw)) {
    case ROUTE_SERVE:
        break;
    case ROUTE_REPLIED:
        STATS_ADD(ts, cmd_set, 1);
        swallow(c, (size_t)vlen + 2);
        return;
    case ROUTE_FORWARD:
        forward_update(c, t, base, (size_t)vlen, &fw);
        return;
    }
    STATS_ADD(ts, cmd_set, 1);
    it = store_alloc(s, t[1].p, t[1].len, hash, flags, store_exptime(s, exptime),
                     (size_t)vlen, &err);
    if (it == NULL) {
        if (err == STORE_TOO_LARGE) {
            STATS_ADD(ts, store_too_large, 1);
            REPLY(c, "SERVER_ERROR object too large for cache");
        } else {
            STATS_ADD(ts, store_no_memory, 1);
            REPLY(c, "SERVER_ERROR out of memory storing object");
        }
        /* Stale data must not outlive a failed set. */
        if (op == STORE_OP_SET)
            store_delete(s, t[1].p, t[1].len, hash);
        swallow(c, (size_t)vlen + 2);
        return;
    }
    c->nread_it = it;
    c->nread_dst = store_item_value_mut(it);
    c->nread_left = (size_t)vlen + 2;
    c->nread_op = op;
    c->nread_cas = cas;
    c->pstate = CONN_PS_NREAD;
}

/* The data block is in: check its "\r\n" and store it. */
static void
complete_nread(struct conn *c)
{
    struct store *s = conn_store(c);
    struct thread_stats *ts = &c->w->stats;
    struct store_item *it = c->nread_it;
    const char *v;
    int r;

    bool repl;

    if (c->fwd_buf != NULL) {
        complete_forward(c);
        return;
    }
    v = store_item_value(it);
    c->nread_it = NULL;
    c->pstate = CONN_PS_CMD;
    if (v[it->nbytes] != '\r' || v[it->nbytes + 1] != '\n') {
        REPLY(c, "CLIENT_ERROR bad data chunk");
        store_release(s, it);
        return;
    }
    if (c->nread_op == NREAD_RC_SET) {
        /* A post-image from the key's primary (process_rc_set). */
        r = replicate_apply_put(s, it, c->nread_cas);
        store_release(s, it);
        if (r < 0)
            REPLY(c, "SERVER_ERROR out of memory storing object");
        else
            REPLY(c, "OK");
        return;
    }
    /* Checked again here: the data may have arrived in a later callback,
     * after a fence or a commit. */
    if (!route_ok(c, it->hash, true)) {
        store_release(s, it);
        return;
    }
    repl = replicate_wanted(c, it->hash);
    if (repl)
        replicate_lock(it->hash);
    r = store_put(s, it, (enum store_op)c->nread_op, c->nread_cas, NULL);
    route_after_write(c, it->hash);
    if (repl) {
        if (r == STORE_STORED) {
            if (c->nread_op == STORE_OP_CAS)
                STATS_ADD(ts, cas_hits, 1);
            replicate_write(c, store_item_key(it), it->nkey, it->hash, 0, "STORED\r\n", 8,
                            c->noreply);
            replicate_unlock(it->hash);
            store_release(s, it);
            return;
        }
        replicate_unlock(it->hash);
    }
    if (c->nread_op == STORE_OP_CAS) {
        if (r == STORE_STORED)
            STATS_ADD(ts, cas_hits, 1);
        else if (r == STORE_EXISTS)
            STATS_ADD(ts, cas_badval, 1);
        else if (r == STORE_NOT_FOUND)
            STATS_ADD(ts, cas_misses, 1);
    }
    switch (r) {
    case STORE_STORED:
        REPLY(c, "STORED");
        break;
    case STORE_NOT_STORED:
        REPLY(c, "NOT_STORED");
        break;
    case STORE_EXISTS:
        REPLY(c, "EXISTS");
        break;
    case STORE_NOT_FOUND:
        REPLY(c, "NOT_FOUND");
        break;
    case STORE_TOO_LARGE:
        STATS_ADD(ts, store_too_large, 1);
        REPLY(c, "SERVER_ERROR object too large for cache");
        break;
    default:
        STATS_ADD(ts, store_no_memory, 1);
        REPLY(c, "SERVER_ERROR out of memory storing object");
        break;
    }
    store_release(s, it);
}

/* Route a keyed command made of plain tokens (delete, incr, decr, touch):
 * true when this node serves it; otherwise it has been answered (MOVED,
 * TRYAGAIN) or forwarded with its first nfwd tokens to the owner. */
static bool
route_tokens(struct conn *c, struct token *t, int nfwd, uint64_t hash)
{
    struct fwd_target fw;

    switch (route_check(c, hash, true, &fw)) {
    case ROUTE_SERVE:
        return true;
    case ROUTE_FORWARD:
        forward_tokens(c, t, nfwd, &fw);
        return false;
    case ROUTE_REPLIED:
        break;
    }
    return false;
}

/* delete <key> [0] [noreply] */
static void
process_delete(struct conn *c, struct token *t, int ntok)
{
    struct thread_stats *ts = &c->w->stats;
    uint64_t hash;
    int r;

    if (ntok < 2 || ntok > 4) {
        reply_line(c, ERR_FORMAT);
        return;
    }
    if (ntok > 2) {
        bool hold_is_zero = TOK_IS(&t[2], "0");
        bool nr = TOK_IS(&t[ntok - 1], "noreply");

        c->noreply = nr;
        if (!((ntok == 3 && (hold_is_zero || nr)) || (ntok == 4 && hold_is_zero && nr))) {
            reply_line(c, ERR_FORMAT);
            return;
        }
    }
    if (t[1].len > KEY_MAX) {
        reply_line(c, ERR_FORMAT);
        return;
    }
    hash = key_hash(t[1].p, t[1].len);
    if (!route_tokens(c, t, 2, hash))
        return;
    if (replicate_wanted(c, hash)) {
        /* The tombstone carries the CAS of what it deletes, so a replica
         * never drops a newer value (replicate_apply_del). */
        struct store_item *old;
        uint64_t tomb = 0;

        replicate_lock(hash);
        old = store_get(conn_store(c), t[1].p, t[1].len, hash);
        if (old != NULL) {
            tomb = old->cas;
            store_release(conn_store(c), old);
        }
        r = store_delete(conn_store(c), t[1].p, t[1].len, hash);
        route_after_write(c, hash);
        if (r == STORE_DELETED) {
            STATS_ADD(ts, delete_hits, 1);
            replicate_write(c, t[1].p, t[1].len, hash, tomb, "DELETED\r\n", 9, c->noreply);
        } else {
            STATS_ADD(ts, delete_misses, 1);
            REPLY(c, "NOT_FOUND");
        }
        replicate_unlock(hash);
        return;
    }
    r = store_delete(conn_store(c), t[1].p, t[1].len, hash);
    route_after_write(c, hash);
    if (r == STORE_DELETED) {
        STATS_ADD(ts, delete_hits, 1);
        REPLY(c, "DELETED");
    } else {
        STATS_ADD(ts, delete_misses, 1);
        REPLY(c, "NOT_FOUND");
    }
}

/* incr|decr <key> <delta> [noreply] */
static void
process_arith(struct conn *c, struct token *t, int ntok, bool incr)
{
    struct thread_stats *ts = &c->w->stats;
    uint64_t delta, value = 0, hash;
    char buf[24], *p;
    bool repl;
    int r;

    if (ntok != 3 && ntok != 4) {
        reply_line(c, ERR_FORMAT);
        return;
    }
    c->noreply = TOK_IS(&t[ntok - 1], "noreply");
    if (t[1].len > KEY_MAX) {
        reply_line(c, ERR_FORMAT);
        return;
    }
    if (!parse_u64(&t[2], &delta)) {
        REPLY(c, "CLIENT_ERROR invalid numeric delta argument");
        return;
    }
    hash = key_hash(t[1].p, t[1].len);
    if (!route_tokens(c, t, 3, hash))
        return;
    repl = replicate_wanted(c, hash);
    if (repl)
        replicate_lock(hash);
    r = store_arith(conn_store(c), t[1].p, t[1].len, hash, incr, delta, &value, NULL);
    route_after_write(c, hash);
    switch (r) {
    case STORE_STORED:
        if (incr)
            STATS_ADD(ts, incr_hits, 1);
        else
            STATS_ADD(ts, decr_hits, 1);
        p = fmt_u64(buf, value);
        *p++ = '\r';
        *p++ = '\n';
        if (repl)
            replicate_write(c, t[1].p, t[1].len, hash, 0, buf, (size_t)(p - buf), c->noreply);
        else
            reply(c, buf, (size_t)(p - buf));
        break;
    case STORE_NOT_FOUND:
        if (incr)
            STATS_ADD(ts, incr_misses, 1);
        else
            STATS_ADD(ts, decr_misses, 1);
        REPLY(c, "NOT_FOUND");
        break;
    case STORE_NON_NUMERIC:
        REPLY(c, "CLIENT_ERROR cannot increment or decrement non-numeric value");
        break;
    default:
        STATS_ADD(ts, store_no_memory, 1);
        REPLY(c, "SERVER_ERROR out of memory");
        break;
    }
    if (repl)
        replicate_unlock(hash);
}

/* touch <key> <exptime> [noreply] */
static void
process_touch(struct conn *c, struct token *t, int ntok)
{
    struct thread_stats *ts = &c->w->stats;
    struct store *s = conn_store(c);
    int32_t exptime;
    uint64_t hash;
    int r;

    if (ntok != 3 && ntok != 4) {
        reply_line(c, ERR_FORMAT);
        return;
    }
    c->noreply = TOK_IS(&t[ntok - 1], "noreply");
    if (t[1].len > KEY_MAX) {
        reply_line(c, ERR_FORMAT);
        return;
    }
    if (!parse_i32(&t[2], &exptime)) {
        REPLY(c, "CLIENT_ERROR invalid exptime argument");
        return;
    }
    hash = key_hash(t[1].p, t[1].len);
    if (!route_tokens(c, t, 3, hash))
        return;
    STATS_ADD(ts, cmd_touch, 1);
    if (replicate_wanted(c, hash)) {
        replicate_lock(hash);
        r = store_touch(s, t[1].p, t[1].len, hash, store_exptime(s, exptime));
        route_after_write(c, hash);
        if (r == STORE_TOUCHED) {
            STATS_ADD(ts, touch_hits, 1);
            replicate_write(c, t[1].p, t[1].len, hash, 0, "TOUCHED\r\n", 9, c->noreply);
        } else {
            STATS_ADD(ts, touch_misses, 1);
            REPLY(c, "NOT_FOUND");
        }
        replicate_unlock(hash);
        return;
    }
    r = store_touch(s, t[1].p, t[1].len, hash, store_exptime(s, exptime));
    route_after_write(c, hash);
    if (r == STORE_TOUCHED) {
        STATS_ADD(ts, touch_hits, 1);
        REPLY(c, "TOUCHED");
    } else {
        STATS_ADD(ts, touch_misses, 1);
        REPLY(c, "NOT_FOUND");
    }
}

/* flush_all [delay] [noreply] */
static void
process_flush(struct conn *c, struct token *t, int ntok)
{
    struct store *s = conn_store(c);
    int32_t delay = 0;
    int nargs;

    if (ntok > 3) {
        reply_line(c, ERR_FORMAT);
        return;
    }
    c->noreply = ntok > 1 && TOK_IS(&t[ntok - 1], "noreply");
    nargs = ntok - 1 - (c->noreply ? 1 : 0);
    if (nargs > 0 && !parse_i32(&t[1], &delay)) {
        REPLY(c, "CLIENT_ERROR invalid exptime argument");
        return;
    }
    STATS_ADD(&c->w->stats, cmd_flush, 1);
    store_flush(s, delay > 0 ? store_exptime(s, delay) : store_now(s));
    if (c->w->srv != NULL && c->w->srv->cluster != NULL && !c->peer &&
        cluster_view(c->w->srv->cluster)->ring != NULL) {
        /* In a cluster flush_all is cluster-wide (docs/cluster.md): every
         * other member flushes too, so replicas stay identical. */
        char line[48];
        int n = snprintf(line, sizeof(line), "flush_all %" PRId32 "\r\n", delay);

        replicate_flush(c, line, (size_t)n, c->noreply);
        return;
    }
    REPLY(c, "OK");
}

/* verbosity <level> [noreply]; extra tokens are ignored. */
static void
process_verbosity(struct conn *c, struct token *t, int ntok, struct token last)
{
    uint32_t level;

    c->noreply = ntok > 1 && TOK_IS(&last, "noreply");
    if (ntok < 2 || !parse_u32(&t[1], &level)) {
        reply_line(c, ERR_FORMAT);
        return;
    }
    log_set_level(level > LOG_DEBUG ? LOG_DEBUG : (int)level);
    REPLY(c, "OK");
}

/* `stats`: memcached's general statistics, names as in protocol.txt. */
static void
stats_general(struct conn *c)
{
    struct server *srv = c->w->srv;
    struct thread_stats ts;
    struct store_stats ss;
    struct rusage ru;
    uint64_t total_conns, rejected, buckets;
    int64_t now = store_now(srv->store);
    unsigned hashpower = 0;

    server_thread_stats(srv, &ts);
    server_store_stats(srv, &ss);
    server_conn_totals(srv, &total_conns, &rejected);
    getrusage(RUSAGE_SELF, &ru);
    for (buckets = ss.hash_buckets; buckets > 1; buckets >>= 1)
        hashpower++;

    reply_printf(c, "STAT pid %ld\r\n", (long)getpid());
    reply_printf(c, "STAT uptime %" PRId64 "\r\n", now - srv->started);
    reply_printf(c, "STAT time %" PRId64 "\r\n", now);
    reply_printf(c, "STAT version %s\r\n", PROTO_VERSION_STRING);
    reply_printf(c, "STAT libevent %s\r\n", event_get_version());
    reply_printf(c, "STAT pointer_size %d\r\n", (int)(8 * sizeof(void *)));
    reply_printf(c, "STAT rusage_user %ld.%06ld\r\n", (long)ru.ru_utime.tv_sec,
                 (long)ru.ru_utime.tv_usec);
    reply_printf(c, "STAT rusage_system %ld.%06ld\r\n", (long)ru.ru_stime.tv_sec,
                 (long)ru.ru_stime.tv_usec);
    reply_printf(c, "STAT max_connections %d\r\n", srv->settings.maxconns);
    reply_printf(c, "STAT curr_connections %d\r\n",
                 __atomic_load_n(&srv->curr_conns, __ATOMIC_RELAXED));
    reply_printf(c, "STAT total_connections %" PRIu64 "\r\n", total_conns);
    reply_printf(c, "STAT rejected_connections %" PRIu64 "\r\n", rejected);
    reply_printf(c, "STAT connection_structures %d\r\n",
                 __atomic_load_n(&srv->curr_conns, __ATOMIC_RELAXED));
    reply_printf(c, "STAT cmd_get %" PRIu64 "\r\n", ts.cmd_get);
    reply_printf(c, "STAT cmd_set %" PRIu64 "\r\n", ts.cmd_set);
    reply_printf(c, "STAT cmd_flush %" PRIu64 "\r\n", ts.cmd_flush);
    reply_printf(c, "STAT cmd_touch %" PRIu64 "\r\n", ts.cmd_touch);
    reply_printf(c, "STAT get_hits %" PRIu64 "\r\n", ts.get_hits);
    reply_printf(c, "STAT get_misses %" PRIu64 "\r\n", ts.get_misses);
    reply_printf(c, "STAT get_expired %" PRIu64 "\r\n", ss.get_expired);
    reply_printf(c, "STAT get_flushed %" PRIu64 "\r\n", ss.get_flushed);
    reply_printf(c, "STAT delete_misses %" PRIu64 "\r\n", ts.delete_misses);
    reply_printf(c, "STAT delete_hits %" PRIu64 "\r\n", ts.delete_hits);
    reply_printf(c, "STAT incr_misses %" PRIu64 "\r\n", ts.incr_misses);
    reply_printf(c, "STAT incr_hits %" PRIu64 "\r\n", ts.incr_hits);
    reply_printf(c, "STAT decr_misses %" PRIu64 "\r\n", ts.decr_misses);
    reply_printf(c, "STAT decr_hits %" PRIu64 "\r\n", ts.decr_hits);
    reply_printf(c, "STAT cas_misses %" PRIu64 "\r\n", ts.cas_misses);
    reply_printf(c, "STAT cas_hits %" PRIu64 "\r\n", ts.cas_hits);
    reply_printf(c, "STAT cas_badval %" PRIu64 "\r\n", ts.cas_badval);
    reply_printf(c, "STAT touch_hits %" PRIu64 "\r\n", ts.touch_hits);
    reply_printf(c, "STAT touch_misses %" PRIu64 "\r\n", ts.touch_misses);
    reply_printf(c, "STAT store_too_large %" PRIu64 "\r\n", ts.store_too_large);
    reply_printf(c, "STAT store_no_memory %" PRIu64 "\r\n", ts.store_no_memory);
    reply_printf(c, "STAT auth_cmds 0\r\nSTAT auth_errors 0\r\n");
    reply_printf(c, "STAT bytes_read %" PRIu64 "\r\n", ts.bytes_read);
    reply_printf(c, "STAT bytes_written %" PRIu64 "\r\n", ts.bytes_written);
    reply_printf(c, "STAT limit_maxbytes %zu\r\n", srv->settings.maxbytes);
    reply_printf(c, "STAT accepting_conns 1\r\n");
    reply_printf(c, "STAT threads %d\r\n", srv->nworkers);
    reply_printf(c, "STAT conn_yields %" PRIu64 "\r\n", ts.conn_yields);
    reply_printf(c, "STAT hash_power_level %u\r\n", hashpower);
    reply_printf(c, "STAT hash_bytes %" PRIu64 "\r\n", ss.hash_buckets * sizeof(void *));
    reply_printf(c, "STAT bytes %" PRIu64 "\r\n", ss.bytes);
    reply_printf(c, "STAT curr_items %" PRIu64 "\r\n", ss.curr_items);
    reply_printf(c, "STAT total_items %" PRIu64 "\r\n", ss.total_items);
    reply_printf(c, "STAT expired_unfetched %" PRIu64 "\r\n", ss.expired_unfetched);
    reply_printf(c, "STAT evictions %" PRIu64 "\r\n", ss.evictions);
    reply_printf(c, "STAT reclaimed %" PRIu64 "\r\n", ss.reclaimed);
    {
        const struct cluster_view *v = srv->cluster != NULL ? cluster_view(srv->cluster) : NULL;
        struct cluster_counters cc;

        memset(&cc, 0, sizeof(cc));
        if (srv->cluster != NULL)
            cluster_counters_get(srv->cluster, &cc);
        reply_printf(c, "STAT cluster_epoch %" PRIu64 "\r\n", v != NULL ? v->epoch : 0);
        reply_printf(c, "STAT cluster_pending_epoch %" PRIu64 "\r\n",
                     v != NULL ? v->pending_epoch : 0);
        reply_printf(c, "STAT moved %" PRIu64 "\r\n", cc.moved);
        reply_printf(c, "STAT tryagain %" PRIu64 "\r\n", cc.tryagain);
        reply_printf(c, "STAT forwarded %" PRIu64 "\r\n", cc.forwarded);
        reply_printf(c, "STAT misrouted %" PRIu64 "\r\n", cc.misrouted);
        reply_printf(c, "STAT replicated %" PRIu64 "\r\n", cc.replicated);
        reply_printf(c, "STAT replica_failures %" PRIu64 "\r\n", cc.replica_failures);
        reply_printf(c, "STAT replica_skipped %" PRIu64 "\r\n", cc.replica_skipped);
        reply_printf(c, "STAT cluster_items_imported %" PRIu64 "\r\n", cc.items_imported);
        reply_printf(c, "STAT cluster_bytes_imported %" PRIu64 "\r\n", cc.bytes_imported);
    }
    conn_out_add(c, "END\r\n", 5);
}

/* `stats settings`: the options that clients and exporters look for. */
static void
stats_settings(struct conn *c)
{
    const struct settings *st = &c->w->srv->settings;

    reply_printf(c, "STAT maxbytes %zu\r\n", st->maxbytes);
    reply_printf(c, "STAT maxconns %d\r\n", st->maxconns);
    reply_printf(c, "STAT tcpport %d\r\n", c->w->srv->bound_port ? c->w->srv->bound_port
                                                                 : st->port);
    reply_printf(c, "STAT udpport 0\r\n");
    reply_printf(c, "STAT inter %s\r\n", st->listen_addr);
    reply_printf(c, "STAT verbosity %d\r\n", log_get_level());
    reply_printf(c, "STAT oldest 0\r\n");
    reply_printf(c, "STAT evictions on\r\n");
    reply_printf(c, "STAT domain_socket NULL\r\n");
    reply_printf(c, "STAT umask 700\r\n");
    reply_printf(c, "STAT num_threads %d\r\n", st->num_threads);
    reply_printf(c, "STAT num_threads_per_udp %d\r\n", st->num_threads);
    reply_printf(c, "STAT stat_key_prefix :\r\n");
    reply_printf(c, "STAT detail_enabled no\r\n");
    reply_printf(c, "STAT reqs_per_event 20\r\n");
    reply_printf(c, "STAT cas_enabled yes\r\n");
    reply_printf(c, "STAT tcp_backlog 1024\r\n");
    reply_printf(c, "STAT binding_protocol ascii\r\n");
    reply_printf(c, "STAT auth_enabled_sasl no\r\n");
    reply_printf(c, "STAT auth_enabled_ascii no\r\n");
    reply_printf(c, "STAT item_size_max %zu\r\n", st->item_size_max);
    reply_printf(c, "STAT maxconns_fast yes\r\n");
    reply_printf(c, "STAT client_flags_size 4\r\n");
    conn_out_add(c, "END\r\n", 5);
}

/* stats [settings|reset|items|slabs|sizes]; anything else is ERROR. */
static void
process_stats(struct conn *c, struct token *t, int ntok)
{
    if (ntok == 1) {
        stats_general(c);
    } else if (TOK_IS(&t[1], "settings")) {
        stats_settings(c);
    } else if (TOK_IS(&t[1], "reset")) {
        server_stats_reset(c->w->srv);
        conn_out_add(c, "RESET\r\n", 7);
    } else if (TOK_IS(&t[1], "items") || TOK_IS(&t[1], "slabs")) {
        /* No slab classes here; an empty group keeps exporters happy. */
        conn_out_add(c, "END\r\n", 5);
    } else if (TOK_IS(&t[1], "sizes")) {
        /* memcached's answer when the size histogram is off. */
        conn_out_add(c, "STAT sizes_status disabled\r\nEND\r\n", 33);
    } else {
        conn_out_add(c, "ERROR\r\n", 7);
    }
}

/* `config`: the active membership (docs/cluster.md). */
static void
process_config(struct conn *c)
{
    struct cluster *cl = c->w->srv != NULL ? c->w->srv->cluster : NULL;
    const struct cluster_view *v;

    if (cl == NULL) {
        conn_out_add(c, "CONFIG 0 0\r\n\r\nEND\r\n", 19);
        return;
    }
    v = cluster_view(cl);
    conn_out_add(c, v->config, v->config_len);
}

/* `epoch`: "EPOCH <active> <pending>"; `epoch <n>`: this connection
 * declares its epoch and gets MOVED instead of forwarding from now on
 * (`epoch 0` withdraws it). */
static void
process_epoch(struct conn *c, struct token *t, int ntok)
{
    struct cluster *cl = c->w->srv != NULL ? c->w->srv->cluster : NULL;
    const struct cluster_view *v = cl != NULL ? cluster_view(cl) : NULL;
    uint64_t n;

    if (ntok == 1) {
        reply_printf(c, "EPOCH %" PRIu64 " %" PRIu64 "\r\n", v != NULL ? v->epoch : 0,
                     v != NULL ? v->pending_epoch : 0);
        return;
    }
    if (ntok != 2 || !parse_u64(&t[1], &n)) {
        reply_line(c, ERR_FORMAT);
        return;
    }
    c->declared_epoch = n;
    conn_out_add(c, "OK\r\n", 4);
}

/* Is the key of hash owned by this node (any position) in the active
 * epoch, or being imported for the pending one? Replicas keep only what
 * they own; during a commit the new primary (already in epoch N+1)
 * replicates to owners that may not have committed yet. */
static bool
owned_here(struct conn *c, uint64_t hash)
{
    const struct cluster_view *v = cluster_view(c->w->srv->cluster);
    uint32_t owners[CLUSTER_OWNERS_MAX], n, i;

    if (v->importing.n > 0 && arcset_has(&v->importing, hash))
        return true;

    n = cluster_view_owners(v, hash, owners, CLUSTER_OWNERS_MAX);
    for (i = 0; i < n; i++)
        if ((int32_t)owners[i] == v->self)
            return true;
    return false;
}

/*
 * `rc_set <key> <flags> <ttl> <cas> <bytes>` + data: a post-image from the
 * key's primary (peers only). ttl is the remaining lifetime (0 never).
 * Answered OK once applied, or ignored when this node does not own the
 * key (it is not a replica of it any more) or holds a newer CAS.
 */
static void
process_rc_set(struct conn *c, struct token *t, int ntok)
{
    struct store *s = conn_store(c);
    struct store_item *it;
    uint32_t flags;
    int32_t vlen;
    uint64_t cas, hash, ttl;
    int64_t exptime = 0;
    int err = 0;

    if (ntok != 6 || !parse_i32(&t[5], &vlen) || vlen < 0 || vlen > INT_MAX - 2) {
        reply_line(c, ERR_FORMAT);
        return;
    }
    if (t[1].len > KEY_MAX || !parse_u32(&t[2], &flags) || !parse_u64(&t[3], &ttl) ||
        !parse_u64(&t[4], &cas) || ttl > UINT32_MAX) {
        reply_line(c, ERR_FORMAT);
        swallow(c, (size_t)vlen + 2);
        return;
    }
    if (!c->peer || c->w->srv == NULL || c->w->srv->cluster == NULL) {
        REPLY(c, "CLIENT_ERROR rc_set is for cluster peers (rc_peer)");
        swallow(c, (size_t)vlen + 2);
        return;
    }
    hash = key_hash(t[1].p, t[1].len);
    if (!owned_here(c, hash)) {
        swallow(c, (size_t)vlen + 2);
        REPLY(c, "OK");
        return;
    }
    if (ttl > 0)
        exptime = store_now(s) + (int64_t)ttl;
    it = store_alloc(s, t[1].p, t[1].len, hash, flags, exptime, (size_t)vlen, &err);
    if (it == NULL) {
        REPLY(c, "SERVER_ERROR out of memory storing object");
        swallow(c, (size_t)vlen + 2);
        return;
    }
    c->nread_it = it;
    c->nread_dst = store_item_value_mut(it);
    c->nread_left = (size_t)vlen + 2;
    c->nread_op = NREAD_RC_SET;
    c->nread_cas = cas;
    c->pstate = CONN_PS_NREAD;
}

/* `rc_del <key> <cas>`: a tombstone from the key's primary (peers only). */
static void
process_rc_del(struct conn *c, struct token *t, int ntok)
{
    uint64_t cas, hash;

    if (ntok != 3 || t[1].len > KEY_MAX || !parse_u64(&t[2], &cas)) {
        reply_line(c, ERR_FORMAT);
        return;
    }
    if (!c->peer || c->w->srv == NULL || c->w->srv->cluster == NULL) {
        REPLY(c, "CLIENT_ERROR rc_del is for cluster peers (rc_peer)");
        return;
    }
    hash = key_hash(t[1].p, t[1].len);
    if (owned_here(c, hash))
        replicate_apply_del(conn_store(c), t[1].p, t[1].len, hash, cas);
    REPLY(c, "OK");
}

/* `rc_peer <auth>`: the connection is a cluster peer (docs/cluster.md:
 * it may send replication post-images and is never forwarded). */
static void
process_rc_peer(struct conn *c, struct token *t, int ntok)
{
    struct cluster *cl = c->w->srv != NULL ? c->w->srv->cluster : NULL;
    char auth[CLUSTER_PEER_AUTH_LEN + 1];

    if (ntok != 2) {
        reply_line(c, ERR_FORMAT);
        return;
    }
    if (cl == NULL || !cl->has_token) {
        conn_out_add(c, "CLIENT_ERROR not a cluster node\r\n", 33);
        return;
    }
    cluster_peer_auth(cl, auth);
    if (t[1].len != CLUSTER_PEER_AUTH_LEN || memcmp(t[1].p, auth, CLUSTER_PEER_AUTH_LEN) != 0) {
        log_msg(LOG_INFO, "connection %d: rc_peer with a wrong token", c->fd);
        conn_out_add(c, "CLIENT_ERROR bad peer authentication\r\n", 38);
        return;
    }
    c->peer = true;
    conn_out_add(c, "OK\r\n", 4);
}

/* Execute one command line [line, end) (no "\r\n"). */
static enum proto_status
process_command(struct conn *c, const char *line, const char *end)
{
    struct token t[MAX_TOKENS];
    const char *p = line;
    const char *cmd;
    size_t ncmd;
    int ntok;

    c->noreply = false;
    while (p < end && *p == ' ')
        p++;
    cmd = p;
    while (p < end && *p != ' ')
        p++;
    ncmd = (size_t)(p - cmd);

    /* The get family reads its own keys: no token limit. */
    if (ncmd == 3 && memcmp(cmd, "get", 3) == 0)
        return process_get(c, cmd, ncmd, NULL, p, end, false, false, 0);
    if (ncmd == 4 && memcmp(cmd, "gets", 4) == 0)
        return process_get(c, cmd, ncmd, NULL, p, end, true, false, 0);
    if ((ncmd == 3 && memcmp(cmd, "gat", 3) == 0) ||
        (ncmd == 4 && memcmp(cmd, "gats", 4) == 0)) {
        struct token e;
        int32_t exptime;

        ntok = tokenize(p, end, &e, 1);
        if (ntok == 0) {
            reply_line(c, ERR_FORMAT);
            return PROTO_MORE;
        }
        if (!parse_i32(&e, &exptime)) {
            REPLY(c, "CLIENT_ERROR invalid exptime argument");
            return PROTO_MORE;
        }
        return process_get(c, cmd, ncmd, &e, e.p + e.len, end, ncmd == 4, true,
                           store_exptime(conn_store(c), exptime));
    }

    ntok = tokenize(line, end, t, MAX_TOKENS);
    if (ntok == 0) {
        conn_out_add(c, "ERROR\r\n", 7);
        return PROTO_MORE;
    }
    switch (ncmd) {
    case 3:
        if (TOK_IS(&t[0], "set")) {
            process_update(c, t, ntok, STORE_OP_SET);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "add")) {
            process_update(c, t, ntok, STORE_OP_ADD);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "cas")) {
            process_update(c, t, ntok, STORE_OP_CAS);
            return PROTO_MORE;
        }
        break;
    case 4:
        if (TOK_IS(&t[0], "incr")) {
            process_arith(c, t, ntok, true);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "decr")) {
            process_arith(c, t, ntok, false);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "quit"))
            return PROTO_QUIT;
        break;
    case 5:
        if (TOK_IS(&t[0], "touch")) {
            process_touch(c, t, ntok);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "stats")) {
            process_stats(c, t, ntok);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "epoch")) {
            process_epoch(c, t, ntok);
            return PROTO_MORE;
        }
        break;
    case 6:
        if (TOK_IS(&t[0], "delete")) {
            process_delete(c, t, ntok);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "append")) {
            process_update(c, t, ntok, STORE_OP_APPEND);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "rc_set")) {
            process_rc_set(c, t, ntok);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "rc_del")) {
            process_rc_del(c, t, ntok);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "config") && ntok == 1) {
            process_config(c);
            return PROTO_MORE;
        }
        break;
    case 7:
        if (TOK_IS(&t[0], "rc_peer")) {
            process_rc_peer(c, t, ntok);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "replace")) {
            process_update(c, t, ntok, STORE_OP_REPLACE);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "prepend")) {
            process_update(c, t, ntok, STORE_OP_PREPEND);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "version")) {
            conn_out_add(c, "VERSION " PROTO_VERSION_STRING "\r\n",
                         sizeof("VERSION " PROTO_VERSION_STRING "\r\n") - 1);
            return PROTO_MORE;
        }
        break;
    case 9:
        if (TOK_IS(&t[0], "flush_all")) {
            process_flush(c, t, ntok);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "verbosity")) {
            process_verbosity(c, t, ntok, last_token(line, end));
            return PROTO_MORE;
        }
        break;
    default:
        break;
    }
    {
        /* Unknown command. A last token of "HTTP/..." is a browser or a
         * cross-protocol attack: hang up without a word. */
        struct token last = last_token(line, end);

        if (last.len >= 5 && memcmp(last.p, "HTTP/", 5) == 0)
            return PROTO_CLOSE;
    }
    conn_out_add(c, "ERROR\r\n", 7);
    return PROTO_MORE;
}

/* Finish a paused get only; see proto_text.h. */
enum proto_status
proto_text_drain(struct conn *c)
{
    if (c->pstate != CONN_PS_GET)
        return PROTO_MORE;
    if (c->out_bytes >= CONN_OUT_SOFT_CAP)
        return PROTO_PAUSE;
    return get_continue(c);
}

/* Parse and execute; see proto_text.h. */
enum proto_status
proto_text_process(struct conn *c)
{
    for (;;) {
        enum proto_status st;
        char *start, *nl;
        const char *end;
        size_t avail, n;

        if (c->out_bytes >= CONN_OUT_SOFT_CAP)
            return PROTO_PAUSE;
        avail = c->rend - c->rpos;
        switch (c->pstate) {
        case CONN_PS_GET:
            st = get_continue(c);
            if (st != PROTO_MORE)
                return st;
            continue;
        case CONN_PS_NREAD:
            n = avail < c->nread_left ? avail : c->nread_left;
            if (n > 0) {
                memcpy(c->nread_dst, c->rbuf + c->rpos, n);
                c->nread_dst += n;
                c->nread_left -= n;
                c->rpos += (uint32_t)n;
            }
            if (c->nread_left > 0)
                return PROTO_MORE;
            complete_nread(c);
            continue;
        case CONN_PS_SWALLOW:
            n = avail < c->swallow_left ? avail : c->swallow_left;
            c->swallow_left -= n;
            c->rpos += (uint32_t)n;
            if (c->swallow_left > 0)
                return PROTO_MORE;
            c->pstate = CONN_PS_CMD;
            continue;
        case CONN_PS_CMD:
            break;
        }
        if (avail == 0)
            return PROTO_MORE;
        start = c->rbuf + c->rpos;
        if (!c->started) {
            c->started = true;
            /* The binary protocol's magic byte: we do not speak it. */
            if ((unsigned char)start[0] == 0x80)
                return PROTO_CLOSE;
        }
        nl = memchr(start, '\n', avail);
        if (nl == NULL) {
            if (avail >= LINE_MAX_NONGET && !is_get_prefix(start, avail))
                return PROTO_CLOSE;
            return PROTO_MORE;
        }
        end = nl;
        if (end > start && end[-1] == '\r')
            end--;
        c->rpos += (uint32_t)(nl + 1 - start);
        st = process_command(c, start, end);
        if (st != PROTO_MORE)
            return st;
    }
}
