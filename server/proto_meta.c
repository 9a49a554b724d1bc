/*
 * proto_meta: see proto_meta.h. Each command parses its line the way
 * memcached 1.6.45 does (proto_parser.c's _meta_flag_preparse: the same
 * error strings, in the same order of precedence), asks the route once
 * (route_meta / route_update_meta), runs one store_m* operation under the
 * key's replication lock, and builds its reply with the return flags in
 * the order the request gave them.
 */
#include "config.h"
#include "server/proto_meta.h"

#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "ring/ring.h"
#include "server/conn.h"
#include "server/forward.h"
#include "server/proto_util.h"
#include "server/route.h"
#include "server/stats.h"
#include "server/store.h"
#include "server/watch.h"
#include "server/thread.h"

#define META_TOK_MAX    23 /* tokens read from a line; the rest is ignored (memcached's) */
#define META_OPT_MAX    20 /* more tokens than this: "options flags are too long" */
#define META_OPAQUE_MAX 32
#define META_HDR_MAX    (2048 + 4 * KEY_MAX)

static const char ERR_FORMAT[] = "CLIENT_ERROR bad command line format";
static const char ERR_TOKEN[] = "CLIENT_ERROR bad token in command line format";
static const char ERR_OPAQUE[] = "CLIENT_ERROR opaque token too long";

/* A parsed meta request: the line's tokens and what its flags ask. */
struct mreq {
    struct token  t[META_TOK_MAX];
    int           ntok;
    int           first; /* index of the first flag token */
    const char   *key;   /* the key as stored (decoded with b) */
    size_t        nkey;
    bool          binary; /* b */
    bool          value, quiet, no_bump, stale, empty, has_cas, has_ecas, vivify, touch;
    bool          recache, has_la, has_hit;
    int           pos_t, pos_n, pos_r;   /* where T, N, R came (0: absent): order matters */
    int32_t       viv, ttl, recache_ttl; /* N T R, as sent */
    uint32_t      flags;                 /* F */
    char          mode;                  /* M */
    uint64_t      cas, ecas, delta, initial;
    unsigned char bin[KEY_MAX]; /* the decoded key (b); not zeroed */
};

static inline struct store *
conn_store(struct conn *c)
{
    return c->w->srv->store;
}

/* Split [p, end) at spaces into at most META_TOK_MAX tokens (what follows
 * is ignored, as memcached's tokenizer does); the count, or -1 when a
 * token from index `first` on (a flag) does not start with a letter (or
 * one of [\]^_`) or a digit: memcached refuses such a line before reading
 * its length, so an ms's block is not skipped. */
static int
tokenize(const char *p, const char *end, struct token *t, int first)
{
    int n = 0;

    for (;;) {
        const char *s;

        while (p < end && *p == ' ') {
            p++;
        }
        if (p == end || n == META_TOK_MAX) {
            return n;
        }
        s = p;
        while (p < end && *p != ' ') {
            p++;
        }
        if (n >= first && !(*s > 64 && *s < 123) && !(*s >= '0' && *s <= '9')) {
            return -1;
        }
        t[n].p = s;
        t[n].len = (size_t)(p - s);
        n++;
    }
}

/* A flag's numeric argument (the token after its letter), as memcached's
 * mcmc_toktou64 / mcmc_tokto32 read them: digits only (a leading '-' for
 * the signed ones), bounded length, no overflow, at least one digit. */
static bool
arg_u64(const struct token *t, uint64_t *out)
{
    uint64_t v = 0;
    size_t   i;

    if (t->len < 2 || t->len - 1 > 22) {
        return false;
    }
    for (i = 1; i < t->len; i++) {
        unsigned d = (unsigned)(t->p[i] - '0');

        if (d > 9 || v > (UINT64_MAX - d) / 10) {
            return false;
        }
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static bool
arg_u32(const struct token *t, uint32_t *out)
{
    uint64_t v;

    if (t->len - 1 > 11 || !arg_u64(t, &v) || v > UINT32_MAX) {
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

static bool
arg_i32(const struct token *t, int32_t *out)
{
    struct token u = *t;
    bool         neg = t->len >= 2 && t->p[1] == '-';
    uint64_t     v;

    if (t->len < 2 || t->len - 1 > 11) {
        return false;
    }
    if (neg) {
        /* "T-" alone is 0, as memcached reads it. */
        u.p++;
        u.len--;
        if (u.len == 1) {
            *out = 0;
            return true;
        }
    }
    if (!arg_u64(&u, &v) || v > (neg ? (uint64_t)INT32_MAX + 1 : (uint64_t)INT32_MAX)) {
        return false;
    }
    *out = neg ? (int32_t)(-(int64_t)v) : (int32_t)v;
    return true;
}

/*
 * Read the flags of r->t[r->first..] (memcached's _meta_flag_preparse):
 * NULL, or the error string to answer. A repeated or unknown flag stops
 * at once; a bad argument is remembered and the scan goes on (the last
 * one named wins).
 */
static const char *
parse_flags(struct mreq *r)
{
    const char   *err = NULL;
    bool          failed = false;
    unsigned char seen[128] = { 0 };
    int           i;

    r->key = r->t[1].p;
    r->nkey = r->t[1].len;
    if (r->t[1].len > KEY_MAX) {
        return ERR_FORMAT;
    }
    if (r->ntok > META_OPT_MAX) {
        return "CLIENT_ERROR options flags are too long";
    }
    for (i = r->first; i < r->ntok; i++) {
        const struct token *t = &r->t[i];
        unsigned char       o = (unsigned char)t->p[0];

        if (o >= 127 || seen[o]) {
            return "CLIENT_ERROR duplicate flag";
        }
        seen[o] = 1;
        switch (o) {
        case 'b':
            r->nkey = util_b64_decode(r->t[1].p, r->t[1].len, r->bin);
            r->key = (const char *)r->bin;
            r->binary = true;
            if (r->nkey == 0) {
                err = "CLIENT_ERROR error decoding key";
                failed = true;
            }
            break;
        case 'N':
            r->vivify = true;
            r->pos_n = i;
            if (!arg_i32(t, &r->viv)) {
                err = ERR_TOKEN;
                failed = true;
            }
            break;
        case 'T':
            r->touch = true;
            r->pos_t = i;
            if (!arg_i32(t, &r->ttl)) {
                err = ERR_TOKEN;
                failed = true;
            }
            break;
        case 'R':
            r->recache = true;
            r->pos_r = i;
            if (!arg_i32(t, &r->recache_ttl)) {
                err = ERR_TOKEN;
                failed = true;
            }
            break;
        case 'l':
            r->has_la = true;
            break;
        case 'h':
            r->has_hit = true;
            break;
        case 'O':
        case 'P':
        case 'L':
        case 'k':
        case 's':
        case 't':
        case 'c':
        case 'f':
            break;
        case 'v':
            r->value = true;
            break;
        case 'u':
            r->no_bump = true;
            break;
        case 'q':
            r->quiet = true;
            break;
        case 'x':
            r->empty = true;
            break;
        case 'F':
            if (!arg_u32(t, &r->flags)) {
                failed = true; /* memcached names no reason for this one */
            }
            break;
        case 'C':
            if (arg_u64(t, &r->cas)) {
                r->has_cas = true;
            } else {
                err = ERR_TOKEN;
                failed = true;
            }
            break;
        case 'E':
            if (arg_u64(t, &r->ecas)) {
                r->has_ecas = true;
            } else {
                err = ERR_TOKEN;
                failed = true;
            }
            break;
        case 'M':
            /* The byte after M; a bare M reads the line's end (invalid). */
            r->mode = t->len > 1 ? t->p[1] : '\r';
            break;
        case 'J':
            if (!arg_u64(t, &r->initial)) {
                err = "CLIENT_ERROR invalid numeric initial value";
                failed = true;
            }
            break;
        case 'D':
            if (!arg_u64(t, &r->delta)) {
                err = "CLIENT_ERROR invalid numeric delta value";
                failed = true;
            }
            break;
        case 'I':
            r->stale = true;
            break;
        default:
            return "CLIENT_ERROR invalid flag";
        }
    }
    if (failed) {
        return err != NULL ? err : ERR_FORMAT;
    }
    return NULL;
}

/* The tokens relayed to the key's owner: the line without q (the relay
 * drops what q would suppress, so the owner always answers). */
static int
relay_tokens(const struct mreq *r, struct token *out)
{
    int i, n = 0;

    for (i = 0; i < r->ntok; i++) {
        if (i >= r->first && r->t[i].len == 1 && r->t[i].p[0] == 'q') {
            continue;
        }
        out[n++] = r->t[i];
    }
    return n;
}

/* Append " <c>" to the reply at p. */
static inline char *
put_flag(char *p, char c)
{
    *p++ = ' ';
    *p++ = c;
    return p;
}

/* " k<key>", base64 with a trailing " b" when the key is binary. */
static char *
put_key(char *p, const char *key, size_t nkey, bool binary)
{
    p = put_flag(p, 'k');
    if (!binary) {
        memcpy(p, key, nkey);
        return p + nkey;
    }
    p += util_b64_encode((const unsigned char *)key, nkey, p);
    return put_flag(p, 'b');
}

/* " <opaque token>" (O and its value, as sent); NULL when too long. */
static char *
put_opaque(char *p, const struct token *t)
{
    if (t->len > META_OPAQUE_MAX) {
        return NULL;
    }
    *p++ = ' ';
    memcpy(p, t->p, t->len);
    return p + t->len;
}

static inline char *
put_i64(char *p, int64_t v)
{
    if (v < 0) {
        *p++ = '-';
        return util_fmt_u64(p, (uint64_t)(-v));
    }
    return util_fmt_u64(p, (uint64_t)v);
}

/* The O and k flags of a reply without an item (misses, NF, EX). NULL:
 * an opaque too long. */
static char *
put_ok_flags(const struct mreq *r, char *p)
{
    int i;

    for (i = r->first; i < r->ntok && p != NULL; i++) {
        if (r->t[i].p[0] == 'O') {
            p = put_opaque(p, &r->t[i]);
        } else if (r->t[i].p[0] == 'k') {
            p = put_key(p, r->key, r->nkey, r->binary);
        }
    }
    return p;
}

/* An absolute expiry as the item keeps it (32 bits, 0 never). */
static uint32_t
time32_of(int64_t t)
{
    if (t <= 0) {
        return t == 0 ? 0 : 1;
    }
    return t > (int64_t)UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)t;
}

/* Seconds left of an absolute expiry, -1 for never. */
static int64_t
ttl_left(struct store *s, uint32_t exptime)
{
    int64_t left;

    if (exptime == 0) {
        return -1;
    }
    left = (int64_t)exptime - store_now(s);
    return left < 0 ? 0 : left;
}

/* Finish a request served here: a reply that changed the key's state goes
 * out once the other owners hold the new state (len 0: a quiet success,
 * still held so a replica failure is reported); one that changed nothing
 * is queued as is. */
static void
meta_done(struct conn *c, const struct route *rt, const struct mreq *r, bool changed,
          uint64_t tomb_cas, const char *reply, size_t len, bool suppress)
{
    if (changed) {
        route_write_end(c, rt, r->key, r->nkey, tomb_cas, suppress ? "" : reply,
                        suppress ? 0 : len);
        return;
    }
    route_write_end(c, rt, r->key, r->nkey, 0, NULL, 0);
    if (!suppress) {
        conn_out_add(c, reply, len);
    }
}

/* Route r (mg md ma me): true when this node serves it (rt filled and the
 * key's write lock taken), else it was relayed or answered. */
static bool
meta_route(struct conn *c, const struct mreq *r, unsigned quiet, struct route *rt)
{
    struct token fwd[META_TOK_MAX];
    int          n = relay_tokens(r, fwd);

    if (!route_meta(c, proto_key_hash(c, r->key, r->nkey), fwd, n, quiet, rt)) {
        return false;
    }
    route_write_begin(rt);
    return true;
}

/* ---- mg ----------------------------------------------------------------- */

static void
meta_get(struct conn *c, struct mreq *r)
{
    struct store         *s = conn_store(c);
    struct thread_stats  *ts = &c->w->stats;
    struct store_mget     q = { 0 };
    struct store_mget_res res;
    struct store_item    *it;
    struct route          rt;
    char                  hdr[META_HDR_MAX], *p = hdr;
    const char           *err;
    bool                  value;
    uint32_t              exp;
    int64_t               la;
    int                   i, e = 0;

    if ((err = parse_flags(r)) != NULL) {
        proto_reply_line(c, err);
        return;
    }
    if (!meta_route(c, r, r->quiet ? FWD_MQ_EN : 0, &rt)) {
        return;
    }
    q.bump = !r->no_bump;
    q.touch = r->touch;
    q.touch_first = r->pos_t < r->pos_r;
    q.touch_after_viv = r->pos_t > r->pos_n;
    q.touch_exptime = store_exptime(s, r->ttl);
    q.vivify = r->vivify;
    q.viv_exptime = store_exptime(s, r->viv);
    q.recache = r->recache;
    q.recache_at = store_exptime(s, r->recache_ttl);
    q.has_ecas = r->has_ecas;
    q.ecas = r->ecas;
    q.binkey = r->binary;
    it = store_mget(s, r->key, r->nkey, ring_hash(r->key, r->nkey), &q, &res, &e);
    if (!r->binary) {
        watch_fetch(c, r->key, r->nkey, it != NULL, it != NULL ? it->nbytes : 0);
    }
    if (r->touch) {
        STATS_ADD(ts, cmd_touch, 1);
        if (it != NULL) {
            STATS_ADD(ts, touch_hits, 1);
        } else {
            STATS_ADD(ts, touch_misses, 1);
        }
    } else {
        STATS_ADD(ts, cmd_get, 1);
        if (it != NULL) {
            STATS_ADD(ts, get_hits, 1);
        } else {
            STATS_ADD(ts, get_misses, 1);
        }
    }
    if (it == NULL) {
        route_write_end(c, &rt, r->key, r->nkey, 0, NULL, 0);
        if (e != 0) {
            REPLY(c, "SERVER_ERROR out of memory");
            return;
        }
        memcpy(p, "EN", 2);
        p = put_ok_flags(r, p + 2);
        if (p == NULL) {
            proto_reply_line(c, ERR_OPAQUE);
        } else if (!r->quiet) {
            *p++ = '\r';
            *p++ = '\n';
            conn_out_add(c, hdr, (size_t)(p - hdr));
        }
        return;
    }
    /* t shows the expiry as of its place on the line: T or N before it
     * changed it (memcached applies the flags in order). */
    exp = res.created ? 0 : res.exptime_before;
    value = r->value && !(r->has_cas && store_item_cas(it) == r->cas);
    if (value) {
        memcpy(p, "VA ", 3);
        p = util_fmt_u64(p + 3, it->nbytes);
    } else {
        memcpy(p, "HD", 2);
        p += 2;
    }
    for (i = r->first; i < r->ntok && p != NULL; i++) {
        const struct token *t = &r->t[i];

        switch (t->p[0]) {
        case 'T':
            exp = time32_of(q.touch_exptime);
            break;
        case 'N':
            if (res.created) {
                exp = time32_of(q.viv_exptime);
            }
            break;
        case 's':
            p = util_fmt_u64(put_flag(p, 's'), it->nbytes);
            break;
        case 't':
            p = put_i64(put_flag(p, 't'), ttl_left(s, exp));
            break;
        case 'c':
            p = util_fmt_u64(put_flag(p, 'c'), store_item_cas(it));
            break;
        case 'f':
            p = util_fmt_u64(put_flag(p, 'f'), it->flags);
            break;
        case 'l':
            la = store_now(s) - (int64_t)res.atime_before;
            p = util_fmt_u64(put_flag(p, 'l'), la > 0 ? (uint64_t)la : 0);
            break;
        case 'h':
            p = put_flag(p, 'h');
            *p++ = res.fetched_before ? '1' : '0';
            break;
        case 'O':
            p = put_opaque(p, t);
            break;
        case 'k':
            p = put_key(p, store_item_key(it), it->nkey,
                        (store_item_mflags(it) & STORE_MF_BINKEY) != 0);
            break;
        default:
            break;
        }
    }
    if (p == NULL) {
        /* As memcached: what the flags did to the item stands. */
        meta_done(c, &rt, r, res.changed, 0, NULL, 0, true);
        store_release(s, it);
        proto_reply_line(c, ERR_OPAQUE);
        return;
    }
    /* Z before X before W, and never W with Z. */
    if (res.token_sent) {
        p = put_flag(p, 'Z');
    }
    if (res.stale) {
        p = put_flag(p, 'X');
    }
    if (res.won) {
        p = put_flag(p, 'W');
    }
    *p++ = '\r';
    *p++ = '\n';
    if (!value) {
        meta_done(c, &rt, r, res.changed, 0, hdr, (size_t)(p - hdr), false);
        store_release(s, it);
        return;
    }
    if (res.changed) {
        /* Held until the replicas have the new state: header and value in
         * one reply. */
        size_t hl = (size_t)(p - hdr), vl = (size_t)it->nbytes + 2;
        char  *buf = malloc(hl + vl);

        if (buf == NULL) {
            meta_done(c, &rt, r, true, 0, "SERVER_ERROR out of memory\r\n", 28, false);
        } else {
            memcpy(buf, hdr, hl);
            memcpy(buf + hl, store_item_value(it), vl);
            meta_done(c, &rt, r, true, 0, buf, hl + vl, false);
            free(buf);
        }
        store_release(s, it);
        return;
    }
    route_write_end(c, &rt, r->key, r->nkey, 0, NULL, 0);
    conn_out_add(c, hdr, (size_t)(p - hdr));
    conn_out_item(c, it, store_item_value(it), (size_t)it->nbytes + 2); /* takes the reference */
}

/* ---- ms ----------------------------------------------------------------- */

static void mset_block_done(struct conn *c);

/* What an ms keeps between its line and its data block. */
struct mset_ctx {
    struct mreq       r;
    enum store_op     op;
    struct store_mset o;
};

static void
meta_set(struct conn *c, struct mreq *r, int32_t vlen)
{
    struct store        *s = conn_store(c);
    struct thread_stats *ts = &c->w->stats;
    struct mset_ctx     *x;
    struct store_item   *it;
    struct token         fwd[META_TOK_MAX];
    const char          *err;
    enum store_op        op = STORE_OP_SET;
    uint64_t             hash;
    int64_t              exptime;
    int                  i, n, e = 0;

    if ((err = parse_flags(r)) != NULL) {
        proto_reply_line(c, err);
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    exptime = store_exptime(s, r->ttl);
    switch (r->mode) {
    case '\0':
    case 'S':
        break;
    case 'E':
        op = STORE_OP_ADD;
        break;
    case 'A':
    case 'P':
        op = r->mode == 'A' ? STORE_OP_APPEND : STORE_OP_PREPEND;
        if (r->vivify) {
            exptime = store_exptime(s, r->viv);
        }
        break;
    case 'R':
        op = STORE_OP_REPLACE;
        break;
    default:
        proto_reply_line(c, "CLIENT_ERROR invalid mode for ms M token");
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    if (r->has_cas && (op == STORE_OP_SET || op == STORE_OP_REPLACE)) {
        op = STORE_OP_CAS;
    }
    /* memcached checks the opaque before it reads the block. */
    for (i = r->first; i < r->ntok; i++) {
        if (r->t[i].p[0] == 'O' && r->t[i].len > META_OPAQUE_MAX) {
            proto_reply_line(c, ERR_OPAQUE);
            proto_swallow(c, (size_t)vlen + 2);
            return;
        }
    }
    hash = proto_key_hash(c, r->key, r->nkey);
    n = relay_tokens(r, fwd);
    switch (route_update_meta(c, hash, fwd, n, (size_t)vlen, true, r->quiet ? FWD_MQ_HD : 0)) {
    case ROUTE_SERVE:
        break;
    case ROUTE_FORWARD:
        return;
    default:
        STATS_ADD(ts, cmd_set, 1);
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    STATS_ADD(ts, cmd_set, 1);
    it = store_alloc_meta(s, r->key, r->nkey, hash, r->flags, exptime, (size_t)vlen, r->has_ecas,
                          r->ecas, &e);
    if (it == NULL) {
        if (e == STORE_TOO_LARGE) {
            STATS_ADD(ts, store_too_large, 1);
            proto_reply_line(c, "SERVER_ERROR object too large for cache");
        } else {
            STATS_ADD(ts, store_no_memory, 1);
            proto_reply_line(c, "SERVER_ERROR out of memory storing object");
        }
        /* Stale data must not outlive a failed store (memcached drops it
         * whatever the mode). */
        store_delete(s, r->key, r->nkey, hash);
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    if (r->binary) {
        it->mflags |= STORE_MF_BINKEY;
    }
    x = malloc(sizeof(*x));
    if (x == NULL) {
        store_release(s, it);
        proto_reply_line(c, "SERVER_ERROR out of memory storing object");
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    x->r = *r;
    /* The key may point into r's own buffer (b) or the read buffer, which
     * moves on before the block is in: use the item's copy. */
    x->r.key = store_item_key(it);
    x->op = op;
    x->o.allow_stale = r->stale && op == STORE_OP_CAS;
    x->o.vivify = r->vivify && (op == STORE_OP_APPEND || op == STORE_OP_PREPEND);
    x->o.viv_exptime = exptime;
    for (i = 0; i < x->r.ntok; i++) {
        x->r.t[i].p = NULL; /* the line is gone by then: keep only what is needed */
    }
    /* The flags wanted in the reply, in order: kept as letters, with the
     * opaque tokens copied. */
    c->meta_set = x;
    c->meta_set_flags_len = 0;
    for (i = r->first; i < r->ntok; i++) {
        const struct token *t = &r->t[i];
        char                f = t->p[0];

        if (f == 'O') {
            if (c->meta_set_flags_len + t->len + 1 <= sizeof(c->meta_set_flags)) {
                memcpy(c->meta_set_flags + c->meta_set_flags_len, t->p, t->len);
                c->meta_set_flags_len += t->len;
                c->meta_set_flags[c->meta_set_flags_len++] = ' ';
            }
        } else if ((f == 'k' || f == 'c' || f == 's') &&
                   c->meta_set_flags_len + 2 <= sizeof(c->meta_set_flags)) {
            c->meta_set_flags[c->meta_set_flags_len++] = f;
            c->meta_set_flags[c->meta_set_flags_len++] = ' ';
        }
    }
    c->nread_it = it;
    proto_read_block(c, store_item_value_mut(it), (size_t)vlen + 2, mset_block_done);
}

/* The data block of an ms is in: store it and reply. */
static void
mset_block_done(struct conn *c)
{
    struct store        *s = conn_store(c);
    struct mset_ctx     *x = c->meta_set;
    struct store_item   *it = c->nread_it;
    struct thread_stats *ts = &c->w->stats;
    char                 hdr[META_HDR_MAX], *p = hdr;
    const char          *f, *end;
    uint64_t             cas = 0;
    uint32_t             nbytes = 0;
    int                  rc;

    c->nread_it = NULL;
    c->meta_set = NULL;
    if (it->data[it->nkey + it->nbytes] != '\r' || it->data[it->nkey + it->nbytes + 1] != '\n') {
        /* Always answered, q or not. */
        conn_out_add(c, "CLIENT_ERROR bad data chunk\r\n", 29);
        store_release(s, it);
        free(x);
        return;
    }
    if (!route_update_ready(c)) {
        store_release(s, it);
        free(x);
        return;
    }
    route_write_begin(&c->route);
    rc = store_mset(s, it, x->op, x->r.has_cas ? x->r.cas : 0, &x->o, &cas, &nbytes);
    if (!x->r.binary && watch_on(WATCH_MUTATIONS)) {
        watch_stored(c, it, x->op, rc, store_now(s));
    }
    if (x->op == STORE_OP_CAS) {
        if (rc == STORE_STORED) {
            STATS_ADD(ts, cas_hits, 1);
        } else if (rc == STORE_EXISTS) {
            STATS_ADD(ts, cas_badval, 1);
        } else if (rc == STORE_NOT_FOUND) {
            STATS_ADD(ts, cas_misses, 1);
        }
    }
    switch (rc) {
    case STORE_STORED:
        memcpy(p, "HD", 2);
        break;
    case STORE_EXISTS:
        memcpy(p, "EX", 2);
        break;
    case STORE_NOT_FOUND:
        memcpy(p, "NF", 2);
        break;
    case STORE_NOT_STORED:
        memcpy(p, "NS", 2);
        break;
    default:
        route_write_end(c, &c->route, store_item_key(it), it->nkey, 0, NULL, 0);
        if (rc == STORE_TOO_LARGE) {
            STATS_ADD(ts, store_too_large, 1);
            conn_out_add(c, "SERVER_ERROR object too large for cache\r\n", 41);
        } else {
            STATS_ADD(ts, store_no_memory, 1);
            conn_out_add(c, "SERVER_ERROR out of memory storing object\r\n", 43);
        }
        store_release(s, it);
        free(x);
        return;
    }
    p += 2;
    for (f = c->meta_set_flags, end = f + c->meta_set_flags_len; f < end;) {
        const char *sp = memchr(f, ' ', (size_t)(end - f));
        size_t      len = (size_t)(sp - f);

        if (f[0] == 'O') {
            *p++ = ' ';
            memcpy(p, f, len);
            p += len;
        } else if (f[0] == 'k') {
            p = put_key(p, store_item_key(it), it->nkey,
                        (store_item_mflags(it) & STORE_MF_BINKEY) != 0);
        } else if (f[0] == 'c') {
            p = util_fmt_u64(put_flag(p, 'c'), rc == STORE_STORED ? cas : 0);
        } else if (f[0] == 's') {
            p = util_fmt_u64(put_flag(p, 's'), nbytes != 0 ? nbytes : it->nbytes);
        }
        f = sp + 1;
    }
    *p++ = '\r';
    *p++ = '\n';
    if (rc == STORE_STORED && x->op != STORE_OP_APPEND && x->op != STORE_OP_PREPEND) {
        /* it is what the key holds now (an append's is a new item) */
        route_write_end_item(c, &c->route, it, x->r.quiet ? "" : hdr,
                             x->r.quiet ? 0 : (size_t)(p - hdr));
    } else if (rc == STORE_STORED) {
        route_write_end(c, &c->route, store_item_key(it), it->nkey, 0, x->r.quiet ? "" : hdr,
                        x->r.quiet ? 0 : (size_t)(p - hdr));
    } else {
        route_write_end(c, &c->route, store_item_key(it), it->nkey, 0, NULL, 0);
        conn_out_add(c, hdr, (size_t)(p - hdr));
    }
    store_release(s, it);
    free(x);
}

/* ---- md ----------------------------------------------------------------- */

static void
meta_delete(struct conn *c, struct mreq *r)
{
    struct store        *s = conn_store(c);
    struct thread_stats *ts = &c->w->stats;
    struct store_mdel    o = { 0 };
    struct route         rt;
    char                 hdr[META_HDR_MAX], *p;
    const char          *err;
    uint64_t             tomb = 0;
    bool                 removed = false;
    int                  rc;

    if ((err = parse_flags(r)) != NULL) {
        proto_reply_line(c, err);
        return;
    }
    p = put_ok_flags(r, hdr + 2);
    if (p == NULL) {
        proto_reply_line(c, ERR_OPAQUE);
        return;
    }
    if (!meta_route(c, r, r->quiet ? FWD_MQ_HD : 0, &rt)) {
        return;
    }
    o.has_cas = r->has_cas;
    o.cas = r->cas;
    o.stale = r->stale;
    o.touch = r->touch && r->stale;
    o.exptime = r->touch ? store_exptime(s, r->ttl) : 0;
    o.empty = r->empty;
    o.flags = r->flags;
    o.has_ecas = r->has_ecas;
    o.ecas = r->ecas;
    rc = store_mdel(s, r->key, r->nkey, ring_hash(r->key, r->nkey), &o, &removed, &tomb);
    switch (rc) {
    case STORE_DELETED:
        memcpy(hdr, "HD", 2);
        if (!r->stale) {
            STATS_ADD(ts, delete_hits, 1);
        }
        if (!r->binary) {
            watch_delete(c, r->key, r->nkey, "md");
        }
        break;
    case STORE_NOT_FOUND:
    case STORE_EXISTS:
        STATS_ADD(ts, delete_misses, 1);
        memcpy(hdr, rc == STORE_EXISTS ? "EX" : "NF", 2);
        break;
    case STORE_NOT_STORED:
        memcpy(hdr, "NS", 2);
        break;
    default:
        route_write_end(c, &rt, r->key, r->nkey, 0, NULL, 0);
        REPLY(c, "SERVER_ERROR out of memory");
        return;
    }
    *p++ = '\r';
    *p++ = '\n';
    /* NF is acknowledged with a fresh tombstone to the other owners, as
     * the classic delete's NOT_FOUND (process_delete). */
    if (rc == STORE_NOT_FOUND && rt.replicate) {
        tomb = store_cas_mint(s);
    }
    meta_done(c, &rt, r, rc == STORE_DELETED || rc == STORE_NOT_FOUND, tomb, hdr, (size_t)(p - hdr),
              rc == STORE_DELETED && r->quiet);
}

/* ---- ma ----------------------------------------------------------------- */

static void
meta_arith(struct conn *c, struct mreq *r)
{
    struct store           *s = conn_store(c);
    struct thread_stats    *ts = &c->w->stats;
    struct store_marith     o = { 0 };
    struct route            rt;
    struct store_marith_res res;
    char                    hdr[META_HDR_MAX], num[24], *p = hdr;
    uint32_t                exp;
    size_t                  nlen;
    int                     i, rc;

    r->delta = 1;
    if (parse_flags(r) != NULL) {
        proto_reply_line(c, "CLIENT_ERROR invalid or duplicate flag");
        return;
    }
    switch (r->mode) {
    case '\0':
    case 'I':
    case '+':
        o.incr = true;
        break;
    case 'D':
    case '-':
        o.incr = false;
        break;
    default:
        proto_reply_line(c, "CLIENT_ERROR invalid mode for ma M token");
        return;
    }
    if (!meta_route(c, r, r->quiet ? FWD_MQ_HD | FWD_MQ_VA : 0, &rt)) {
        return;
    }
    o.delta = r->delta;
    o.cas_in = r->has_cas ? r->cas : 0;
    o.vivify = r->vivify;
    o.initial = r->initial;
    o.viv_exptime = store_exptime(s, r->viv);
    o.touch = r->touch;
    o.touch_after_viv = r->pos_t > r->pos_n;
    o.exptime = store_exptime(s, r->ttl);
    o.has_ecas = r->has_ecas;
    o.ecas = r->ecas;
    rc = store_marith(s, r->key, r->nkey, ring_hash(r->key, r->nkey), &o, &res);
    if (rc == STORE_STORED) {
        if (o.incr) {
            STATS_ADD(ts, incr_hits, 1);
        } else {
            STATS_ADD(ts, decr_hits, 1);
        }
        nlen = (size_t)(util_fmt_u64(num, res.value) - num);
        exp = res.created ? 0 : res.exptime_before; /* t: as of its place (see mg) */
        if (r->value) {
            memcpy(p, "VA ", 3);
            p = util_fmt_u64(p + 3, nlen);
        } else {
            memcpy(p, "HD", 2);
            p += 2;
        }
        for (i = r->first; i < r->ntok && p != NULL; i++) {
            switch (r->t[i].p[0]) {
            case 'T':
                exp = time32_of(o.exptime);
                break;
            case 'N':
                if (res.created) {
                    exp = time32_of(o.viv_exptime);
                }
                break;
            case 'c':
                p = util_fmt_u64(put_flag(p, 'c'), res.cas);
                break;
            case 't':
                p = put_i64(put_flag(p, 't'), ttl_left(s, exp));
                break;
            case 'O':
                p = put_opaque(p, &r->t[i]);
                break;
            case 'k':
                p = put_key(p, r->key, r->nkey, r->binary);
                break;
            default:
                break;
            }
        }
        if (p == NULL) {
            meta_done(c, &rt, r, true, 0, NULL, 0, true);
            proto_reply_line(c, ERR_OPAQUE);
            return;
        }
        if (r->value) {
            *p++ = '\r';
            *p++ = '\n';
            memcpy(p, num, nlen);
            p += nlen;
        }
        *p++ = '\r';
        *p++ = '\n';
        meta_done(c, &rt, r, true, 0, hdr, (size_t)(p - hdr), r->quiet);
        return;
    }
    route_write_end(c, &rt, r->key, r->nkey, 0, NULL, 0);
    switch (rc) {
    case STORE_NOT_FOUND:
        if (o.incr) {
            STATS_ADD(ts, incr_misses, 1);
        } else {
            STATS_ADD(ts, decr_misses, 1);
        }
        memcpy(p, "NF", 2);
        break;
    case STORE_EXISTS:
        memcpy(p, "EX", 2);
        break;
    case STORE_NOT_STORED:
        memcpy(p, "NS", 2);
        break;
    case STORE_NON_NUMERIC:
        proto_reply_line(c, "CLIENT_ERROR cannot increment or decrement non-numeric value");
        return;
    default:
        proto_reply_line(c, "SERVER_ERROR out of memory");
        return;
    }
    p = put_ok_flags(r, p + 2);
    if (p == NULL) {
        proto_reply_line(c, ERR_OPAQUE);
        return;
    }
    *p++ = '\r';
    *p++ = '\n';
    conn_out_add(c, hdr, (size_t)(p - hdr));
}

/* ---- me ----------------------------------------------------------------- */

static void
meta_debug(struct conn *c, struct mreq *r)
{
    struct store       *s = conn_store(c);
    struct store_mdebug d;
    struct route        rt;
    char                hdr[META_HDR_MAX], *p = hdr;

    if (r->t[1].len > KEY_MAX) {
        proto_reply_line(c, ERR_FORMAT);
        return;
    }
    r->key = r->t[1].p;
    r->nkey = r->t[1].len;
    /* memcached 1.6.45 tests ntokens >= 4 here, which its tokenizer's count
     * of "me <key> b" (3) does not pass: b takes effect only with a token
     * more after it. */
    if (r->ntok >= 4 && r->t[2].len == 1 && r->t[2].p[0] == 'b') {
        r->nkey = util_b64_decode(r->t[1].p, r->t[1].len, r->bin);
        r->key = (const char *)r->bin;
        r->binary = true;
        if (r->nkey == 0) {
            proto_reply_line(c, ERR_FORMAT);
            return;
        }
    }
    r->first = r->ntok; /* no flags to relay specially */
    if (!meta_route(c, r, 0, &rt)) {
        return;
    }
    if (!store_mdebug(s, r->key, r->nkey, ring_hash(r->key, r->nkey), &d)) {
        route_write_end(c, &rt, r->key, r->nkey, 0, NULL, 0);
        conn_out_add(c, "EN\r\n", 4);
        return;
    }
    route_write_end(c, &rt, r->key, r->nkey, 0, NULL, 0);
    memcpy(p, "ME ", 3);
    p += 3;
    if (d.mflags & STORE_MF_BINKEY) {
        p += util_b64_encode((const unsigned char *)r->key, r->nkey, p);
    } else {
        memcpy(p, r->key, r->nkey);
        p += r->nkey;
    }
    p += snprintf(p, 160,
                  " exp=%" PRId64 " la=%" PRIu32 " cas=%" PRIu64 " fetch=%s cls=1 size=%" PRIu32
                  "\r\n",
                  d.exp, d.la, d.cas, d.fetched ? "yes" : "no", d.size);
    conn_out_add(c, hdr, (size_t)(p - hdr));
}

/* ---- dispatch ----------------------------------------------------------- */

void
proto_meta(struct conn *c, const char *line, const char *end)
{
    struct mreq r;
    char        cmd = line[1];
    int32_t     vlen;

    c->noreply = false; /* q is per command, and errors are always sent */
    if (cmd == 'n') {
        conn_out_add(c, "MN\r\n", 4);
        return;
    }
    if (cmd != 'g' && cmd != 's' && cmd != 'd' && cmd != 'a' && cmd != 'e') {
        conn_out_add(c, "ERROR\r\n", 7);
        return;
    }
    memset(&r, 0, offsetof(struct mreq, bin));
    r.first = cmd == 's' ? 3 : 2;
    r.ntok = tokenize(line, end, r.t, r.first);
    if (r.ntok < r.first) {
        proto_reply_line(c, ERR_FORMAT);
        return;
    }
    switch (cmd) {
    case 'g':
        meta_get(c, &r);
        break;
    case 's': {
        struct token n = r.t[2];

        /* The length must parse before anything else: without it the
         * block cannot be skipped. */
        if (n.len == 0 || n.len > 11 || !proto_parse_i32(&n, &vlen) || vlen < 0 ||
            vlen > INT_MAX - 2 || n.p[0] == '+') {
            proto_reply_line(c, ERR_FORMAT);
            return;
        }
        meta_set(c, &r, vlen);
        break;
    }
    case 'd':
        meta_delete(c, &r);
        break;
    case 'a':
        meta_arith(c, &r);
        break;
    default:
        meta_debug(c, &r);
        break;
    }
}
