/*
 * proto_text: the classic memcached text protocol (see
 * shared notes/memcached-protocol.md for every reply and edge case): parse,
 * dispatch, reply. Lines are tokenized in place inside the connection's
 * read buffer; each key is hashed once (proto_key_hash) and the hash serves the
 * cluster decision (server/route.h) and the store. Multi-gets stream: they
 * pause when the output queue is full and resume where they stopped, so no
 * buffer is sized from the request. Peer commands are in proto_peer.c,
 * `stats` in proto_stats.c.
 */
#include "config.h"
#include "server/proto_text.h"

#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "ring/ring.h"
#include "server/conn.h"
#include "server/flush.h"
#include "server/latency.h"
#include "server/log.h"
#include "server/proto_admin.h"
#include "server/proto_auth.h"
#include "server/proto_meta.h"
#include "server/proto_peer.h"
#include "server/proto_stats.h"
#include "server/proto_util.h"
#include "server/route.h"
#include "server/stats.h"
#include "server/store.h"
#include "server/watch.h"
#include "server/thread.h"
#include "server/tls.h"

#define LINE_MAX_NONGET 2048 /* past this many bytes without '\n' we hang up */
#define GET_PREFIX_MAX  100  /* leading spaces allowed before a long get */
#define LINE_MIN        4    /* a shorter line, "\r\n" or "\n" included, is malformed */
#define MAX_TOKENS      23   /* memcached's tokenizer keeps this many; the rest is ignored */
#define VALUE_HDR_MAX   (6 + KEY_MAX + 1 + 10 + 1 + 10 + 1 + 20 + 2)

/* Split [p, end) at runs of spaces into at most max tokens and return the
 * count; as memcached's tokenizer does, whatever follows the max-th token
 * is ignored (so a noreply there is not seen). */
static int
tokenize(const char *p, const char *end, struct token *t, int max)
{
    int n = 0;

    while (n < max) {
        const char *s;

        while (p < end && *p == ' ') {
            p++;
        }
        if (p == end) {
            break;
        }
        s = p;
        p = memchr(p, ' ', (size_t)(end - p));
        if (p == NULL) {
            p = end;
        }
        t[n].p = s;
        t[n].len = (size_t)(p - s);
        n++;
    }
    return n;
}

/* Is the last of n tokens "noreply"? memcached looks there only. */
static bool
last_is_noreply(const struct token *t, int n)
{
    return n > 0 && TOK_IS(&t[n - 1], "noreply");
}

static inline struct store *
conn_store(struct conn *c)
{
    return c->w->srv->store;
}

/* `stats detail`: count a key served here (a relayed one counts where it
 * is served). */
static inline void
note_detail(struct conn *c, const struct token *key, enum admin_detail_op op, bool hit)
{
    if (proto_admin_detail_on()) {
        proto_admin_detail(&c->w->srv->settings, key->p, key->len, op, hit);
    }
}

/* Does a line start (after <= 100 spaces) with "get " or "gets "? Only
 * those may run past LINE_MAX_NONGET without a newline. */
static bool
is_get_prefix(const char *p, size_t len)
{
    size_t i = 0;

    while (i < len && i <= GET_PREFIX_MAX && p[i] == ' ') {
        i++;
    }
    if (i > GET_PREFIX_MAX) {
        return false;
    }
    p += i;
    len -= i;
    return (len >= 4 && memcmp(p, "get ", 4) == 0) || (len >= 5 && memcmp(p, "gets ", 5) == 0);
}

/* Queue one hit: the VALUE line, then the value (copied when small, else
 * referenced: the queue takes over the reference). */
static void
emit_value(struct conn *c, struct store_item *it, bool with_cas)
{
    size_t vlen = (size_t)it->nbytes + 2;
    bool   copy = vlen <= CONN_COPY_MAX;
    char  *o = conn_out_reserve(c, VALUE_HDR_MAX + (copy ? vlen : 0));
    char  *p = o;

    memcpy(p, "VALUE ", 6);
    p += 6;
    memcpy(p, store_item_key(it), it->nkey);
    p += it->nkey;
    *p++ = ' ';
    p = util_fmt_u64(p, it->flags);
    *p++ = ' ';
    p = util_fmt_u64(p, it->nbytes);
    if (with_cas) {
        *p++ = ' ';
        p = util_fmt_u64(p, store_item_cas(it)); /* the client's (E) or ours */
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
 * when the output queue reaches its soft cap. g: route_get's decisions,
 * when the get starts in the callback that made them; NULL once it has
 * paused (its keys are then decided again). */
static enum proto_status
get_continue(struct conn *c, struct route_get *g)
{
    struct thread_stats *ts = &c->w->stats;
    struct store        *s = conn_store(c);
    const char          *p = c->rbuf + c->get_pos;
    const char          *end = c->rbuf + c->get_end;

    for (;;) {
        struct store_item *it;
        struct token       k;
        struct route       rt;
        uint64_t           hash;

        if (!proto_next_key(&p, end, &k)) {
            break;
        }
        if (c->out_bytes >= c->out_cap && c->repl_gat == NULL) {
            c->get_pos = (uint32_t)(k.p - c->rbuf);
            return PROTO_PAUSE;
        }
        STATS_ADD(ts, cmd_get, 1);
        switch (route_get_key(c, g, &k, c->get_touch, &rt, &hash)) {
        case ROUTE_KEY_SERVE:
            break;
        case ROUTE_KEY_RELAYED:
            continue;
        case ROUTE_KEY_MISS:
            STATS_ADD(ts, get_misses, 1);
            note_detail(c, &k, ADMIN_DETAIL_GET, false);
            continue;
        }
        if (c->get_touch) {
            STATS_ADD(ts, cmd_touch, 1);
            route_write_begin(&rt);
            it = store_get_touch(s, k.p, k.len, hash, c->get_exptime);
            route_gat_key(c, &rt, it);
            if (it != NULL) {
                STATS_ADD(ts, touch_hits, 1);
            } else {
                STATS_ADD(ts, touch_misses, 1);
            }
        } else {
            it = store_get(s, k.p, k.len, hash);
            if (it != NULL) {
                STATS_ADD(ts, get_hits, 1);
            } else {
                STATS_ADD(ts, get_misses, 1);
            }
        }
        note_detail(c, &k, ADMIN_DETAIL_GET, it != NULL);
        watch_fetch(c, k.p, k.len, it != NULL, it != NULL ? it->nbytes : 0);
        if (it != NULL) {
            emit_value(c, it, c->get_cas);
        }
    }
    conn_out_add(c, "END\r\n", 5);
    route_gat_end(c);
    c->pstate = CONN_PS_CMD;
    return PROTO_MORE;
}

/* get/gets/gat/gats: keys in [p, end). Every key is checked before any
 * reply so a bad key gives the error alone, with no partial VALUEs (and,
 * unlike memcached 1.6.45, without an empty line after it), and so does a
 * line of more keys than --max-keys-per-get; then the cluster decision for
 * the keys (route_get: a plain client's keys owned elsewhere are relayed),
 * then the local ones are served. noreply is not recognized. */
static enum proto_status
process_get(struct conn *c, const char *cmd, size_t ncmd, const struct token *exp, const char *p,
            const char *end, bool with_cas, bool touch, int64_t exptime)
{
    const char       *q = p;
    struct token      k;
    size_t            nkeys = 0;
    int               max_keys = c->w->srv->settings.max_keys_per_get;
    struct route_get  g;
    enum proto_status st;

    while (proto_next_key(&q, end, &k)) {
        if (k.len > KEY_MAX) {
            proto_reply_line(c, PROTO_ERR_FORMAT);
            return PROTO_MORE;
        }
        proto_note_key(c, k.p, k.len);
        nkeys++;
    }
    if (nkeys == 0) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        return PROTO_MORE;
    }
    if (max_keys > 0 && nkeys > (size_t)max_keys) {
        /* The line is read whole, so the connection goes on with the next
         * one, as after any CLIENT_ERROR. */
        REPLY(c, "CLIENT_ERROR too many keys");
        return PROTO_MORE;
    }
    if (!route_get(c, &g, cmd, ncmd, exp, p, end, nkeys, touch)) {
        route_get_done(&g);
        return PROTO_MORE;
    }
    c->get_pos = (uint32_t)(p - c->rbuf);
    c->get_end = (uint32_t)(end - c->rbuf);
    c->get_cas = with_cas;
    c->get_touch = touch;
    c->get_exptime = exptime;
    c->pstate = CONN_PS_GET;
    st = get_continue(c, &g);
    route_get_done(&g);
    return st;
}

static void update_block_done(struct conn *c);

/* set/add/replace/append/prepend/cas on the line [t[0].p, end): validate,
 * route, allocate the item and switch to reading its data block (or
 * swallow it on a rejection). Tokens past the command's are ignored, and
 * noreply counts only as the last token (memcached 1.6.45). */
static void
process_update(struct conn *c, struct token *t, int ntok, const char *end, enum store_op op)
{
    struct store        *s = conn_store(c);
    struct thread_stats *ts = &c->w->stats;
    int                  base = op == STORE_OP_CAS ? 6 : 5;
    struct store_item   *it;
    uint32_t             flags;
    int32_t              exptime, vlen;
    uint64_t             cas = 0, hash, flags64;
    int64_t              exptime64;
    int                  err = 0;

    /* Without a length there is no block to skip: what follows is read as
     * commands, and noreply is not looked at yet. */
    if (ntok < 5 || !proto_tok_i32(&t[4], &vlen) || vlen < 0 || vlen > INT_MAX - 2) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        return;
    }
    c->noreply = last_is_noreply(t, ntok);
    /* The length parsed, so any other fault swallows the block: a missing
     * cas unique too. Flags of 2^32 or more are refused (the notes' choice;
     * memcached keeps their low 32 bits); an exptime is strtol's long cut
     * to 32 bits, as memcached's safe_strtol stores it. */
    if (t[1].len > KEY_MAX || !proto_strtoul(t[2].p, end, &flags64) || flags64 > UINT32_MAX ||
        !proto_strtol(t[3].p, end, &exptime64) ||
        (op == STORE_OP_CAS && (ntok < 6 || !proto_tok_u64(&t[5], &cas)))) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    flags = (uint32_t)flags64;
    exptime = (int32_t)(uint32_t)(uint64_t)exptime64;
    hash = proto_key_hash(c, t[1].p, t[1].len);
    switch (route_update(c, hash, t, base, (size_t)vlen)) {
    case ROUTE_SERVE:
        break;
    case ROUTE_FORWARD:
        return;
    case ROUTE_TRYAGAIN:
    case ROUTE_MOVED:
    case ROUTE_REFUSE:
    case ROUTE_UNAVAILABLE:
        STATS_ADD(ts, cmd_set, 1);
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    STATS_ADD(ts, cmd_set, 1);
    note_detail(c, &t[1], ADMIN_DETAIL_SET, false);
    it = store_alloc(s, t[1].p, t[1].len, hash, flags, store_exptime(s, exptime), (size_t)vlen,
                     &err);
    if (it == NULL) {
        if (err == STORE_TOO_LARGE) {
            STATS_ADD(ts, store_too_large, 1);
            REPLY(c, "SERVER_ERROR object too large for cache");
        } else {
            STATS_ADD(ts, store_no_memory, 1);
            REPLY(c, "SERVER_ERROR out of memory storing object");
        }
        /* Stale data must not outlive a failed set. */
        if (op == STORE_OP_SET) {
            store_delete(s, t[1].p, t[1].len, hash);
        }
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    c->nread_it = it;
    c->nread_op = op;
    c->nread_cas = cas;
    proto_read_block(c, store_item_value_mut(it), (size_t)vlen + 2, update_block_done);
}

/* The data block of a storage command is in: check its "\r\n", check the
 * route again (route_update_ready) and store it. */
static void
update_block_done(struct conn *c)
{
    struct store        *s = conn_store(c);
    struct thread_stats *ts = &c->w->stats;
    struct store_item   *it = c->nread_it;
    int                  r;

    c->nread_it = NULL;
    if (!proto_block_ok(c, it)) {
        return;
    }
    if (!route_update_ready(c)) {
        store_release(s, it);
        return;
    }
    route_write_begin(&c->route);
    r = store_put(s, it, (enum store_op)c->nread_op, c->nread_cas, NULL);
    if (watch_on(WATCH_MUTATIONS)) {
        watch_stored(c, it, c->nread_op, r, store_now(s));
    }
    if (c->nread_op == STORE_OP_CAS) {
        if (r == STORE_STORED) {
            STATS_ADD(ts, cas_hits, 1);
        } else if (r == STORE_EXISTS) {
            STATS_ADD(ts, cas_badval, 1);
        } else if (r == STORE_NOT_FOUND) {
            STATS_ADD(ts, cas_misses, 1);
        }
    }
    if (r == STORE_STORED) {
        if (c->nread_op != STORE_OP_APPEND && c->nread_op != STORE_OP_PREPEND) {
            /* it is what the key holds now */
            route_write_end_item(c, &c->route, it, "STORED\r\n", 8);
        } else {
            /* append and prepend linked a new item: read it */
            route_write_end(c, &c->route, store_item_key(it), it->nkey, 0, "STORED\r\n", 8);
        }
        store_release(s, it);
        return;
    }
    route_write_end(c, &c->route, store_item_key(it), it->nkey, 0, NULL, 0);
    switch (r) {
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

/* delete <key> [0] [noreply]. Any other token is a format error: 1.6.18's
 * rule, which memccapable checks (memcached 1.6.45 ignores extra tokens);
 * see the shared notes. */
static void
process_delete(struct conn *c, struct token *t, int ntok)
{
    struct thread_stats *ts = &c->w->stats;
    struct store        *s = conn_store(c);
    struct route         rt;
    uint64_t             hash, tomb = 0;
    int                  r;

    if (ntok < 2 || ntok > 4) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        return;
    }
    if (ntok > 2) {
        bool hold_is_zero = TOK_IS(&t[2], "0");
        bool nr = TOK_IS(&t[ntok - 1], "noreply");

        c->noreply = nr;
        if (!((ntok == 3 && (hold_is_zero || nr)) || (ntok == 4 && hold_is_zero && nr))) {
            proto_reply_line(c, PROTO_ERR_FORMAT);
            return;
        }
    }
    if (t[1].len > KEY_MAX) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        return;
    }
    hash = proto_key_hash(c, t[1].p, t[1].len);
    if (!route_line(c, hash, t, 2, &rt)) {
        return;
    }
    note_detail(c, &t[1], ADMIN_DETAIL_DEL, false);
    route_write_begin(&rt);
    /* The tombstone carries the CAS of what it deletes, so a replica
     * never drops a newer value (replicate_apply_del). */
    r = store_delete_cas(s, t[1].p, t[1].len, hash, &tomb);
    if (r == STORE_DELETED) {
        STATS_ADD(ts, delete_hits, 1);
        watch_delete(c, t[1].p, t[1].len, "delete");
        route_write_end(c, &rt, t[1].p, t[1].len, tomb, "DELETED\r\n", 9);
    } else {
        /* NOT_FOUND is an acknowledged delete too: the other owners get a
         * tombstone newer than anything here, so a replica that missed an
         * earlier delete (it failed, unacknowledged) drops its copy before
         * the reply goes out. */
        STATS_ADD(ts, delete_misses, 1);
        route_write_end(c, &rt, t[1].p, t[1].len, rt.replicate ? store_cas_mint(s) : 0,
                        "NOT_FOUND\r\n", 11);
    }
}

/* `<cmd> <key> <arg> [noreply]` (incr, decr, touch): true when the line
 * has at least those tokens (more are ignored, as memcached 1.6.45 does)
 * and the key is not too long (noreply, the last token, is set);
 * otherwise the format error is queued. */
static bool
key_arg_line(struct conn *c, const struct token *t, int ntok)
{
    if (ntok < 3) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        return false;
    }
    c->noreply = last_is_noreply(t, ntok);
    if (t[1].len > KEY_MAX) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        return false;
    }
    return true;
}

/* incr|decr <key> <delta> [noreply] */
static void
process_arith(struct conn *c, struct token *t, int ntok, bool incr)
{
    struct thread_stats *ts = &c->w->stats;
    uint64_t             delta, value = 0, hash;
    struct route         rt;
    char                 buf[24], *p;
    int                  r;

    if (!key_arg_line(c, t, ntok)) {
        return;
    }
    if (!proto_tok_u64(&t[2], &delta)) {
        REPLY(c, "CLIENT_ERROR invalid numeric delta argument");
        return;
    }
    hash = proto_key_hash(c, t[1].p, t[1].len);
    if (!route_line(c, hash, t, 3, &rt)) {
        return;
    }
    route_write_begin(&rt);
    r = store_arith(conn_store(c), t[1].p, t[1].len, hash, incr, delta, &value, NULL);
    if (r == STORE_STORED) {
        if (incr) {
            STATS_ADD(ts, incr_hits, 1);
        } else {
            STATS_ADD(ts, decr_hits, 1);
        }
        p = util_fmt_u64(buf, value);
        *p++ = '\r';
        *p++ = '\n';
        route_write_end(c, &rt, t[1].p, t[1].len, 0, buf, (size_t)(p - buf));
        return;
    }
    route_write_end(c, &rt, t[1].p, t[1].len, 0, NULL, 0);
    switch (r) {
    case STORE_NOT_FOUND:
        if (incr) {
            STATS_ADD(ts, incr_misses, 1);
        } else {
            STATS_ADD(ts, decr_misses, 1);
        }
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
}

/* touch <key> <exptime> [noreply] */
static void
process_touch(struct conn *c, struct token *t, int ntok)
{
    struct thread_stats *ts = &c->w->stats;
    struct store        *s = conn_store(c);
    struct route         rt;
    int32_t              exptime;
    uint64_t             hash;

    if (!key_arg_line(c, t, ntok)) {
        return;
    }
    if (!proto_tok_i32(&t[2], &exptime)) {
        REPLY(c, "CLIENT_ERROR invalid exptime argument");
        return;
    }
    hash = proto_key_hash(c, t[1].p, t[1].len);
    if (!route_line(c, hash, t, 3, &rt)) {
        return;
    }
    STATS_ADD(ts, cmd_touch, 1);
    route_write_begin(&rt);
    if (store_touch(s, t[1].p, t[1].len, hash, store_exptime(s, exptime)) == STORE_TOUCHED) {
        STATS_ADD(ts, touch_hits, 1);
        route_write_end(c, &rt, t[1].p, t[1].len, 0, "TOUCHED\r\n", 9);
    } else {
        STATS_ADD(ts, touch_misses, 1);
        route_write_end(c, &rt, t[1].p, t[1].len, 0, NULL, 0);
        REPLY(c, "NOT_FOUND");
    }
}

/* flush_all [delay] [noreply]. As memcached 1.6.45: the delay is the
 * second token unless the line is just `flush_all [noreply]`, and further
 * tokens are ignored. */
static void
process_flush(struct conn *c, struct token *t, int ntok)
{
    struct store *s = conn_store(c);
    int32_t       delay = 0;

    c->noreply = last_is_noreply(t, ntok);
    if (c->w->srv->settings.flush_disabled) {
        /* -F: memcached counts it and refuses before reading the delay. */
        STATS_ADD(&c->w->stats, cmd_flush, 1);
        REPLY(c, "CLIENT_ERROR flush_all not allowed");
        return;
    }
    if (ntok != (c->noreply ? 2 : 1) && !proto_tok_i32(&t[1], &delay)) {
        REPLY(c, "CLIENT_ERROR invalid exptime argument");
        return;
    }
    STATS_ADD(&c->w->stats, cmd_flush, 1);
    if (flush_cluster_wide(c)) {
        flush_start(c, delay, c->noreply);
        return;
    }
    if (flush_refused(c)) {
        REPLY(c, NO_MEMBERSHIP_REPLY);
        return;
    }
    store_flush(s, delay > 0 ? store_exptime(s, delay) : store_now(s));
    REPLY(c, "OK");
}

/* verbosity <level> [noreply]; extra tokens are ignored. */
static void
process_verbosity(struct conn *c, struct token *t, int ntok)
{
    uint32_t level;

    c->noreply = last_is_noreply(t, ntok);
    if (ntok < 2 || !proto_tok_u32(&t[1], &level)) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        return;
    }
    log_set_level(level > LOG_VERBOSITY_MAX ? LOG_VERBOSITY_MAX : (int)level);
    REPLY(c, "OK");
}

/*
 * refresh_certs: reload the TLS certificate chains, keys and CAs from the
 * files named at start, the client port's and the cluster port's
 * (server_refresh_certs). OK, or the reason after SERVER_ERROR (memcached
 * sends the bare reason, which no client can tell from a reply); the
 * certificates in use stay then.
 */
static void
process_refresh_certs(struct conn *c)
{
    char err[1536];
    int  rc = server_refresh_certs(c->w->srv, err, sizeof(err));

    if (rc < 0) {
        if (rc == -1) { /* not for -2, a node without TLS */
            log_msg(LOG_ERR, "refresh_certs: certificates not reloaded, keeping the old ones: %s",
                    err);
        }
        conn_out_add(c, "SERVER_ERROR ", 13);
        conn_out_add(c, err, strlen(err));
        conn_out_add(c, "\r\n", 2);
        return;
    }
    log_msg(LOG_INFO, "refresh_certs: certificates reloaded");
    REPLY(c, "OK");
}

/*
 * The commands memcached's tokenizer does not know (its text_cmd_entries,
 * and ours for peers), found by their first token even after leading
 * spaces; false when t[0] is none of them.
 */
static bool
process_extra(struct conn *c, struct token *t, int ntok)
{
    if (TOK_IS(&t[0], "flush_all")) {
        process_flush(c, t, ntok);
    } else if (TOK_IS(&t[0], "verbosity")) {
        process_verbosity(c, t, ntok);
    } else if (TOK_IS(&t[0], "epoch")) {
        proto_peer_epoch(c, t, ntok);
    } else if (TOK_IS(&t[0], "rc_set")) {
        proto_peer_rc_set(c, t, ntok);
    } else if (TOK_IS(&t[0], "rc_del")) {
        proto_peer_rc_del(c, t, ntok);
    } else if (TOK_IS(&t[0], "rc_flush_cas")) {
        flush_peer_cas(c, t, ntok);
    } else if (TOK_IS(&t[0], "rc_flush")) {
        flush_peer_floor(c, t, ntok);
    } else if (TOK_IS(&t[0], "rc_peer")) {
        proto_peer_rc_peer(c, t, ntok);
    } else if (TOK_IS(&t[0], "config") && ntok == 1) {
        proto_peer_config(c);
    } else if (TOK_IS(&t[0], "refresh_certs")) {
        process_refresh_certs(c);
    } else {
        return false;
    }
    return true;
}

/*
 * Execute one command line [line, end) (no "\r\n"). As in memcached
 * 1.6.45, the command is what precedes the first space, so a line that
 * starts with a space names none of the commands it dispatches on that
 * (get, set, ..., stats, version, quit).
 */
static enum proto_status
process_command(struct conn *c, const char *line, const char *end)
{
    struct token t[MAX_TOKENS];
    const char  *cmd = line;
    const char  *p;
    size_t       ncmd;
    int          ntok;

    c->noreply = false;
    __atomic_store_n(&c->last_cmd_s, (uint32_t)(util_coarse_ms() / 1000), __ATOMIC_RELAXED);
    p = memchr(line, ' ', (size_t)(end - line));
    if (p == NULL) {
        p = end;
    }
    ncmd = (size_t)(p - cmd);
    latency_begin(c, cmd, ncmd);

    /* The get family reads its own keys: no token limit. */
    if (ncmd == 3 && memcmp(cmd, "get", 3) == 0) {
        return process_get(c, cmd, ncmd, NULL, p, end, false, false, 0);
    }
    if (ncmd == 4 && memcmp(cmd, "gets", 4) == 0) {
        return process_get(c, cmd, ncmd, NULL, p, end, true, false, 0);
    }
    if ((ncmd == 3 && memcmp(cmd, "gat", 3) == 0) || (ncmd == 4 && memcmp(cmd, "gats", 4) == 0)) {
        struct token e[2];
        int32_t      exptime;

        /* An exptime and a key, or a format error before the exptime is
         * looked at. */
        if (tokenize(p, end, e, 2) < 2) {
            proto_reply_line(c, PROTO_ERR_FORMAT);
            return PROTO_MORE;
        }
        if (!proto_tok_i32(&e[0], &exptime)) {
            REPLY(c, "CLIENT_ERROR invalid exptime argument");
            return PROTO_MORE;
        }
        return process_get(c, cmd, ncmd, &e[0], e[0].p + e[0].len, end, ncmd == 4, true,
                           store_exptime(conn_store(c), exptime));
    }

    /* The meta commands (mg ms md ma mn me) take up to 24 tokens. */
    if (ncmd == 2 && cmd[0] == 'm') {
        proto_meta(c, cmd, end);
        return PROTO_MORE;
    }
    ntok = tokenize(line, end, t, MAX_TOKENS);
    /* With ncmd > 0, t[0] is the command. */
    switch (ncmd) {
    case 3:
        if (TOK_IS(&t[0], "set")) {
            process_update(c, t, ntok, end, STORE_OP_SET);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "add")) {
            process_update(c, t, ntok, end, STORE_OP_ADD);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "cas")) {
            process_update(c, t, ntok, end, STORE_OP_CAS);
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
        if (TOK_IS(&t[0], "quit")) {
            return PROTO_QUIT;
        }
        break;
    case 5:
        if (TOK_IS(&t[0], "touch")) {
            process_touch(c, t, ntok);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "stats")) {
            proto_stats(c, t, ntok);
            return PROTO_MORE;
        }
        break;
    case 6:
        if (TOK_IS(&t[0], "delete")) {
            process_delete(c, t, ntok);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "append")) {
            process_update(c, t, ntok, end, STORE_OP_APPEND);
            return PROTO_MORE;
        }
        break;
    case 7:
        if (TOK_IS(&t[0], "replace")) {
            process_update(c, t, ntok, end, STORE_OP_REPLACE);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "prepend")) {
            process_update(c, t, ntok, end, STORE_OP_PREPEND);
            return PROTO_MORE;
        }
        if (TOK_IS(&t[0], "version")) {
            conn_out_add(c, "VERSION " PROTO_VERSION_STRING "\r\n",
                         sizeof("VERSION " PROTO_VERSION_STRING "\r\n") - 1);
            return PROTO_MORE;
        }
        break;
    default:
        break;
    }
    if (ntok > 0 && process_extra(c, t, ntok)) {
        return PROTO_MORE;
    }
    if (ntok > 0) {
        enum proto_status st;

        if (proto_admin(c, t, ntok, &st)) {
            return st;
        }
    }
    /* Unknown command. With two tokens or more, a last one of "HTTP/..."
     * is a browser or a cross-protocol attack: hang up without a word. */
    if (ntok > 1 && t[ntok - 1].len >= 5 && memcmp(t[ntok - 1].p, "HTTP/", 5) == 0) {
        return PROTO_CLOSE;
    }
    /* memcached honours a last noreply even here. */
    c->noreply = last_is_noreply(t, ntok);
    REPLY(c, "ERROR");
    return PROTO_MORE;
}

/* Finish a paused get only; see proto_text.h. */
enum proto_status
proto_text_drain(struct conn *c)
{
    if (c->pstate != CONN_PS_GET) {
        return PROTO_MORE;
    }
    if (c->out_bytes >= c->out_cap) {
        return PROTO_PAUSE;
    }
    return get_continue(c, NULL);
}

/* Parse and execute everything buffered (or up to a pause). */
static enum proto_status
process_batch(struct conn *c)
{
    for (;;) {
        enum proto_status st;
        char             *start, *nl;
        const char       *end;
        size_t            avail, n;

        /* Back to a command line: the last command is done (its data
         * block read, its get finished) and its reply queued. */
        if (c->lat_cmd != LATENCY_NONE && c->pstate == CONN_PS_CMD) {
            latency_end(c);
        }
        if (c->out_bytes >= c->out_cap) {
            return PROTO_PAUSE;
        }
        avail = c->rend - c->rpos;
        switch (c->pstate) {
        case CONN_PS_GET:
            st = get_continue(c, NULL);
            if (st != PROTO_MORE) {
                return st;
            }
            continue;
        case CONN_PS_DUMP:
            proto_admin_dump_continue(c);
            continue;
        case CONN_PS_WATCH:
            c->rpos = c->rend; /* a watcher's input is ignored, as memcached does */
            return PROTO_MORE;
        case CONN_PS_NREAD:
            n = avail < c->nread_left ? avail : c->nread_left;
            if (n > 0) {
                memcpy(c->nread_dst, c->rbuf + c->rpos, n);
                c->nread_dst += n;
                c->nread_left -= n;
                c->rpos += (uint32_t)n;
            }
            if (c->nread_left > 0) {
                return PROTO_MORE;
            }
            c->pstate = CONN_PS_CMD;
            c->nread_done(c);
            continue;
        case CONN_PS_SWALLOW:
            n = avail < c->swallow_left ? avail : c->swallow_left;
            c->swallow_left -= n;
            c->rpos += (uint32_t)n;
            if (c->swallow_left > 0) {
                return PROTO_MORE;
            }
            c->pstate = CONN_PS_CMD;
            continue;
        case CONN_PS_CMD:
            break;
        }
        if (c->flush != NULL && flush_blocks(c)) {
            return PROTO_PAUSE; /* a flush_all of c runs: nothing after it yet */
        }
        if (avail == 0) {
            return PROTO_MORE;
        }
        start = c->rbuf + c->rpos;
        if (!c->started) {
            c->started = true;
            /* The binary protocol's magic byte: we do not speak it. */
            if ((unsigned char)start[0] == 0x80) {
                return PROTO_CLOSE;
            }
        }
        if (!c->authenticated) {
            /* -Y: nothing is dispatched before a login. */
            st = proto_auth(c);
            if (st != PROTO_MORE || !c->authenticated) {
                return st;
            }
            continue;
        }
        nl = memchr(start, '\n', avail);
        if (nl == NULL) {
            if (avail > LINE_MAX_NONGET && !is_get_prefix(start, avail)) {
                return PROTO_CLOSE;
            }
            return PROTO_MORE;
        }
        end = nl;
        if (end > start && end[-1] == '\r') {
            end--;
        }
        c->rpos += (uint32_t)(nl + 1 - start);
        if ((size_t)(nl + 1 - start) < LINE_MIN) {
            /* memcached 1.6.45 refuses such a line before reading it. */
            c->noreply = false;
            proto_reply_line(c, PROTO_ERR_FORMAT);
            continue;
        }
        st = process_command(c, start, end);
        if (st != PROTO_MORE) {
            return st;
        }
    }
}

/* Parse and execute; see proto_text.h. The batch's commands are timed
 * around it (server/latency.h). */
enum proto_status
proto_text_process(struct conn *c)
{
    enum proto_status st;

    latency_batch(c);
    st = process_batch(c);
    latency_batch_end(c);
    return st;
}
