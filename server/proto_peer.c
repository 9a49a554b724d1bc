/*
 * proto_peer: the text-protocol commands of the cluster (docs/cluster.md):
 * `config` and `epoch` for smart clients, and for peers `rc_peer` (the
 * connection proves it shares the token) and the replica writes `rc_set`
 * / `rc_del` that a key's primary sends (server/replicate.c). A replica
 * write enters here, never through the client storage commands.
 */
#include "config.h"
#include "server/proto_peer.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "lib/util.h"
#include "ring/ring.h"
#include "server/cluster.h"
#include "server/conn.h"
#include "server/forward.h"
#include "server/log.h"
#include "server/peerauth.h"
#include "server/replicate.h"
#include "server/route.h"
#include "server/store.h"
#include "server/thread.h"

/* A replica write at a node with no membership (lost state). */
#define NO_MEMBERSHIP "SERVER_ERROR no membership (this node has no state: ringctl repair it)"
/* A post-image of a key this node does not own in its view. */
#define NOT_OWNER "SERVER_ERROR not an owner of this key here"
/* A replica write without the sender's epoch and id (an older peer). */
#define OLD_IMAGE(cmd)                                                                     \
    "CLIENT_ERROR " cmd " without the sender's epoch and node id: the peer runs an older " \
    "version (every node needs this one)"

static inline struct store *
conn_store(struct conn *c)
{
    return c->w->srv->store;
}

/* `config`: the active membership (docs/cluster.md). */
void
proto_peer_config(struct conn *c)
{
    struct cluster            *cl = c->w->srv != NULL ? c->w->srv->cluster : NULL;
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
void
proto_peer_epoch(struct conn *c, const struct token *t, int ntok)
{
    struct cluster            *cl = c->w->srv != NULL ? c->w->srv->cluster : NULL;
    const struct cluster_view *v = cl != NULL ? cluster_view(cl) : NULL;
    uint64_t                   n;

    if (ntok == 1) {
        proto_reply_printf(c, "EPOCH %" PRIu64 " %" PRIu64 "\r\n", v != NULL ? v->epoch : 0,
                           v != NULL ? v->pending_epoch : 0);
        return;
    }
    if (ntok != 2 || !proto_parse_u64(&t[1], &n)) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        return;
    }
    c->declared_epoch = n;
    conn_out_add(c, "OK\r\n", 4);
}

/* The active epoch, for a refusal. */
static uint64_t
active_epoch(const struct conn *c)
{
    return cluster_view(c->w->srv->cluster)->epoch;
}

/* Refuse a replica write: `SERVER_ERROR fenced <why> epoch <active>` (the
 * primary does not count it; docs/cluster.md "Replication"). */
static void
refuse_fenced(struct conn *c, const char *why)
{
    proto_reply_printf(c, "SERVER_ERROR fenced %s epoch %" PRIu64 "\r\n", why, active_epoch(c));
}

/*
 * The fencing of a replica write of hash that sender sent in its active
 * epoch: true when it may be applied, else it was answered (no membership,
 * not an owner, or `SERVER_ERROR fenced not_primary|old_epoch|ahead epoch
 * <n>`). See route_image_check for the rules.
 */
static bool
image_admitted(struct conn *c, uint64_t hash, uint64_t epoch, const char *sender)
{
    if (!route_has_membership(c)) {
        /* No state to check the key against: the primary must not count
         * this copy (it answers the client "replica unavailable"). */
        REPLY(c, NO_MEMBERSHIP);
        return false;
    }
    switch (route_image_check(c, hash, epoch, sender)) {
    case ROUTE_IMAGE_OK:
        return true;
    case ROUTE_IMAGE_NOT_OWNER:
        /* Our view and the primary's disagree on who owns it (one of us
         * is a commit ahead): the copy is not kept, so it must not count
         * as one (the primary answers "replica unavailable"). */
        REPLY(c, NOT_OWNER);
        return false;
    case ROUTE_IMAGE_NOT_PRIMARY:
        refuse_fenced(c, "not_primary");
        return false;
    case ROUTE_IMAGE_OLD_EPOCH:
        refuse_fenced(c, "old_epoch");
        return false;
    case ROUTE_IMAGE_AHEAD:
        refuse_fenced(c, "ahead");
        return false;
    }
    return false;
}

/* A replica write's `<epoch> <sender id>` tokens: false when malformed
 * (sender gets the id, RING_ID_MAX bytes at most). */
static bool
parse_origin(const struct token *t, uint64_t *epoch, char *sender)
{
    if (!proto_parse_u64(&t[0], epoch) || t[1].len == 0 || t[1].len > RING_ID_MAX) {
        return false;
    }
    memcpy(sender, t[1].p, t[1].len);
    sender[t[1].len] = '\0';
    return true;
}

/* The data block of an rc_set is in: apply it (the replica side). The
 * image's origin (replicate_origin) rides in nread_op. */
static void
rc_set_block_done(struct conn *c)
{
    struct store      *s = conn_store(c);
    struct store_item *it = c->nread_it;
    uint64_t           tcas = 0;
    int                r;

    c->nread_it = NULL;
    if (!proto_block_ok(c, it)) {
        return;
    }
    r = replicate_apply_put(s, it, c->nread_cas, (uint8_t)c->nread_op, &tcas);
    store_release(s, it);
    if (r < 0) {
        REPLY(c, "SERVER_ERROR out of memory storing object");
    } else if (r == REPLICATE_REMOVED) {
        /* Removed here at a CAS >= the image's by another origin: not
         * known to be older, so not a copy the primary may count. */
        proto_reply_printf(c, "SERVER_ERROR fenced removed epoch %" PRIu64 " cas %" PRIu64 "\r\n",
                           active_epoch(c), tcas);
    } else {
        REPLY(c, "OK");
    }
}

/* A base64 key token decoded into bin (KEY64_MAX bytes): false when it is
 * not base64 or decodes to no key or too long a one. */
#define KEY64_MAX (4 * ((KEY_MAX + 2) / 3))
static bool
peer_key64(struct token *key, unsigned char *bin)
{
    size_t n;

    if (key->len > KEY64_MAX) {
        return false;
    }
    n = util_b64_decode(key->p, key->len, bin);
    if (n == 0 || n > KEY_MAX) {
        return false;
    }
    key->p = (const char *)bin;
    key->len = n;
    return true;
}

/* An rc_set's meta state token: m<mflags>[,<client cas>], the client CAS
 * present exactly when STORE_MF_ECAS is set. */
static bool
parse_meta_state(const struct token *t, uint64_t *mf, uint64_t *ecas)
{
    const char  *comma;
    struct token a, b;

    if (t->len < 2 || t->p[0] != 'm') {
        return false;
    }
    a.p = t->p + 1;
    a.len = t->len - 1;
    comma = memchr(a.p, ',', a.len);
    if (comma != NULL) {
        b.p = comma + 1;
        b.len = (size_t)(a.p + a.len - b.p);
        a.len = (size_t)(comma - a.p);
        if (!proto_parse_u64(&b, ecas)) {
            return false;
        }
    }
    if (!proto_parse_u64(&a, mf) ||
        (*mf & ~(uint64_t)(STORE_MF_REPLICATED | STORE_MF_KEY64)) != 0) {
        return false;
    }
    return ((*mf & STORE_MF_ECAS) != 0) == (comma != NULL);
}

/*
 * `rc_set <key> <flags> <ttl> <cas> <bytes> <epoch> <sender id>
 * [m<mflags>[,<client cas>]]` + data: a post-image from the key's primary
 * (peers only), sent in the sender's active epoch. ttl is the remaining
 * lifetime (0 never); the m token is its meta state (STORE_MF_*: stale,
 * win token handed out, a client CAS, a binary key). Answered OK once
 * applied or when this node holds a newer item; refused (not OK) when the
 * fencing rules refuse the epoch or sender (image_admitted), this node
 * does not own the key, or a tombstone of another origin covers it.
 */
void
proto_peer_rc_set(struct conn *c, const struct token *t, int ntok)
{
    struct store      *s = conn_store(c);
    struct store_item *it;
    uint32_t           flags;
    int32_t            vlen;
    uint64_t           cas, hash, ttl, mf = 0, ecas = 0, epoch = 0;
    int64_t            exptime = 0;
    int                err = 0;
    struct token       key;
    unsigned char      bin[KEY64_MAX];
    char               sender[RING_ID_MAX + 1] = "";

    if (ntok < 6 || ntok > 9 || !proto_parse_i32(&t[5], &vlen) || vlen < 0 || vlen > INT_MAX - 2) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        return;
    }
    if (ntok < 8 && c->peer) {
        REPLY(c, OLD_IMAGE("rc_set"));
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    if ((ntok >= 8 && !parse_origin(&t[6], &epoch, sender)) ||
        (ntok == 9 && !parse_meta_state(&t[8], &mf, &ecas))) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    key = t[1];
    if ((mf & STORE_MF_KEY64) && !peer_key64(&key, bin)) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    if (key.len > KEY_MAX || !proto_parse_u32(&t[2], &flags) || !proto_parse_u64(&t[3], &ttl) ||
        !proto_parse_u64(&t[4], &cas) || ttl > UINT32_MAX) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    if (!c->peer || c->w->srv == NULL || c->w->srv->cluster == NULL) {
        REPLY(c, "CLIENT_ERROR rc_set is for cluster peers (rc_peer)");
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    hash = ring_hash(key.p, key.len);
    if (!image_admitted(c, hash, epoch, sender)) {
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    if (ttl > 0) {
        exptime = store_now(s) + (int64_t)ttl;
    }
    it = store_alloc_meta(s, key.p, key.len, hash, flags, exptime, (size_t)vlen,
                          (mf & STORE_MF_ECAS) != 0, ecas, &err);
    if (it == NULL) {
        REPLY(c, "SERVER_ERROR out of memory storing object");
        proto_swallow(c, (size_t)vlen + 2);
        return;
    }
    it->mflags |= (uint8_t)(mf & (STORE_MF_STALE | STORE_MF_WON | STORE_MF_BINKEY));
    c->nread_it = it;
    c->nread_cas = cas;
    c->nread_op = replicate_origin(epoch, sender);
    proto_read_block(c, store_item_value_mut(it), (size_t)vlen + 2, rc_set_block_done);
}

/* `rc_del <key> <cas> <epoch> <sender id> [b]`: a tombstone from the
 * key's primary (peers only), fenced as rc_set is; with b the key token is
 * base64. */
void
proto_peer_rc_del(struct conn *c, const struct token *t, int ntok)
{
    uint64_t      cas, hash, epoch;
    struct token  key = t[1];
    unsigned char bin[KEY64_MAX];
    char          sender[RING_ID_MAX + 1];
    bool          b64 = ntok == 6 || ntok == 4;

    if (ntok < 3 || ntok > 6) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        return;
    }
    if (!c->peer || c->w->srv == NULL || c->w->srv->cluster == NULL) {
        REPLY(c, "CLIENT_ERROR rc_del is for cluster peers (rc_peer)");
        return;
    }
    if (ntok < 5) {
        REPLY(c, OLD_IMAGE("rc_del"));
        return;
    }
    if ((b64 && !TOK_IS(&t[5], "b")) || !proto_parse_u64(&t[2], &cas) ||
        !parse_origin(&t[3], &epoch, sender) || (b64 && !peer_key64(&key, bin)) ||
        key.len > KEY_MAX) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        return;
    }
    hash = ring_hash(key.p, key.len);
    if (!image_admitted(c, hash, epoch, sender)) {
        return;
    }
    replicate_apply_del(conn_store(c), key.p, key.len, hash, cas, replicate_origin(epoch, sender));
    REPLY(c, "OK");
}

/* This node's id in the peer challenge ("-" for none). */
static const char *
peer_node_id(const struct cluster *cl)
{
    const char *id = cluster_node_id(cl);

    return id != NULL && id[0] != '\0' ? id : "-";
}

/* Replica tombstone lifetime for a forward timeout (ms, <= 0: the
 * default): every retry of a post-image plus 2 s, at least
 * REPLICATE_TOMB_TTL_S. */
static uint32_t
tomb_ttl(int forward_timeout_ms)
{
    int64_t ms = forward_timeout_ms > 0 ? forward_timeout_ms : FWD_TIMEOUT_MS_DEFAULT;
    int64_t s = (ms * FWD_RETRY_TIMEOUTS + 999) / 1000 + 2;

    return s > REPLICATE_TOMB_TTL_S ? (uint32_t)s : REPLICATE_TOMB_TTL_S;
}

/*
 * `rc_peer`: the challenge. The node answers `NONCE <node id> <hex>`, a
 * fresh random nonce (PEERAUTH_NONCE_LEN bytes) kept on the connection.
 * `rc_peer <peer id> <proof>`: the response, HMAC-SHA256 of the nonce and
 * both ids keyed with the token (server/peerauth.h); the nonce is used up by
 * the attempt, right or wrong, so a proof seen once proves nothing again.
 * Proven, the connection is a cluster peer (docs/cluster.md: it may send
 * replication post-images and is never forwarded). The old fixed proof,
 * `rc_peer <16 hex digits>`, gets an error that says so.
 */
void
proto_peer_rc_peer(struct conn *c, const struct token *t, int ntok)
{
    struct cluster *cl = c->w->srv != NULL ? c->w->srv->cluster : NULL;
    uint8_t         rnd[PEERAUTH_NONCE_LEN];
    char            nonce[PEERAUTH_NONCE_HEX + 1], id[PEERAUTH_ID_MAX + 1];
    const uint8_t  *token;
    size_t          token_len;
    bool            ok;

    if (ntok < 1 || ntok > 3) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        return;
    }
    if (cl == NULL || !cluster_has_token(cl)) {
        conn_out_add(c, "CLIENT_ERROR not a cluster node\r\n", 33);
        return;
    }
    if (ntok == 1) {
        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
            REPLY(c, "SERVER_ERROR no randomness for the peer challenge");
            return;
        }
        util_hex(rnd, sizeof(rnd), c->peer_nonce);
        proto_reply_printf(c, "NONCE %s %s\r\n", peer_node_id(cl), c->peer_nonce);
        return;
    }
    if (ntok == 2) {
        log_msg(LOG_INFO,
                "connection %d: rc_peer with the old fixed proof: that peer runs an older "
                "version (every node needs the rc_peer challenge)",
                c->fd);
        REPLY(c, "CLIENT_ERROR old peer proof: this node wants `rc_peer`, then `rc_peer <id> "
                 "<proof>` (upgrade the peer)");
        return;
    }
    if (c->peer_nonce[0] == '\0') {
        REPLY(c, "CLIENT_ERROR no peer challenge on this connection (send rc_peer first)");
        return;
    }
    /* One attempt per nonce. */
    memcpy(nonce, c->peer_nonce, sizeof(nonce));
    c->peer_nonce[0] = '\0';
    if (t[1].len > PEERAUTH_ID_MAX) {
        proto_reply_line(c, PROTO_ERR_FORMAT);
        return;
    }
    memcpy(id, t[1].p, t[1].len);
    id[t[1].len] = '\0';
    token = cluster_token(cl, &token_len);
    ok = peerauth_check(token, token_len, cluster_name(cl), peer_node_id(cl), nonce, id, t[2].p,
                        t[2].len);
    if (!ok) {
        log_msg(LOG_INFO, "connection %d: rc_peer from %.64s with a wrong proof", c->fd, id);
        conn_out_add(c, "CLIENT_ERROR bad peer authentication\r\n", 38);
        return;
    }
    c->peer = true;
    /* A peer may send post-images from now on: replica tombstones must
     * outlive the longest a post-image can be in flight, every retry of a
     * forwarded request included (and evictions start being recorded). */
    replicate_tomb_init(conn_store(c), tomb_ttl(c->w->srv->settings.forward_timeout_ms));
    conn_out_add(c, "OK\r\n", 4);
}
