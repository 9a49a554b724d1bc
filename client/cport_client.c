/*
 * cport_client: a blocking cluster-port client for ringctl. One
 * non-blocking socket driven with poll() against a monotonic deadline per
 * call, frames from proto/frame.h, protobuf-c messages converted to and
 * from cport_client.h's structs here and nowhere else.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "client/cport_client.h"
#include "client/ringcache.h"
#include "client/tls_client.h"
#include "lib/util.h"
#include "proto/frame.h"
#include "proto/members_pb.h"
#include "proto/ringcache.pb-c.h"

/* See cport_set_tls. */
static SSL_CTX *cport_tls;
static bool     cport_tls_check_name;

void
cport_set_tls(SSL_CTX *ctx, bool check_name)
{
    cport_tls = ctx;
    cport_tls_check_name = check_name;
}

struct cport_conn {
    SSL     *ssl; /* under TLS (cport_set_tls) */
    int      fd;  /* -1 once dead */
    uint64_t cluster_id;
    uint8_t *rbuf;
    size_t   rlen, rcap;
};

/* Split "host:port" or "[v6]:port" into host and port strings. */
static int
split_addr(const char *addr, char *host, size_t hostlen, char *port, size_t portlen)
{
    const char *colon, *h = addr;
    size_t      hl;

    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');

        if (close == NULL || close[1] != ':') {
            return -1;
        }
        h = addr + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(addr, ':');
        if (colon == NULL) {
            return -1;
        }
        hl = (size_t)(colon - addr);
    }
    if (hl == 0 || hl >= hostlen || strlen(colon + 1) == 0 || strlen(colon + 1) >= portlen) {
        return -1;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    strcpy(port, colon + 1);
    return 0;
}

int
cport_addr_of(const char *addr, char *out, size_t outlen)
{
    char host[RING_ADDR_MAX + 1], port[16], *end;
    long p;
    int  n;

    if (split_addr(addr, host, sizeof(host), port, sizeof(port)) != 0) {
        return -1;
    }
    errno = 0;
    p = strtol(port, &end, 10);
    if (errno != 0 || *end != '\0' || p < 1 || p + CPORT_PORT_OFFSET > 65535) {
        return -1;
    }
    n = snprintf(out, outlen, strchr(host, ':') != NULL ? "[%s]:%ld" : "%s:%ld", host,
                 p + CPORT_PORT_OFFSET);
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

/* Mark the connection dead (the socket is closed; the struct stays). */
static void
conn_kill(struct cport_conn *c)
{
    tls_client_close(c->ssl, c->fd >= 0);
    c->ssl = NULL;
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
}

/* Connect a non-blocking socket to host:port before the deadline. */
static int
tcp_connect(const char *addr, int64_t deadline, char *err, size_t errlen)
{
    struct addrinfo  hints = { .ai_family = AF_UNSPEC,
                               .ai_socktype = SOCK_STREAM,
                               .ai_flags = AI_NUMERICSERV };
    struct addrinfo *res = NULL, *ai;
    char             host[RING_ADDR_MAX + 1], port[16];
    int              fd = -1, rc, soerr, one = 1;
    socklen_t        sl;

    if (split_addr(addr, host, sizeof(host), port, sizeof(port)) != 0) {
        snprintf(err, errlen, "%s: not host:port", addr);
        return -1;
    }
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "%s: %s", addr, gai_strerror(rc));
        return -1;
    }
    snprintf(err, errlen, "%s: no address", addr);
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            snprintf(err, errlen, "%s: socket: %s", addr, strerror(errno));
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            break;
        }
        if (errno == EINPROGRESS) {
            rc = tls_client_wait(fd, POLLOUT, deadline);
            sl = sizeof(soerr);
            if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0) {
                break;
            }
            snprintf(err, errlen, "%s: connect: %s", addr,
                     rc == RINGCACHE_ETIMEDOUT ? "timed out" : strerror(rc == 0 ? soerr : errno));
        } else {
            snprintf(err, errlen, "%s: connect: %s", addr, strerror(errno));
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}

/* The node ended a TLS session we could not write to or read from: a
 * refused client certificate, most often. */
static const char TLS_ENDED[] = "the node ended the TLS session (does it require a client "
                                "certificate it trusts? --tls-cert, --tls-key)";

/*
 * A write on c's TLS session failed. With TLS 1.3 the client's half of
 * the handshake ends before the node has checked the client's
 * certificate, so a node that refuses it sends its alert and closes
 * while we write our first frame; the write can then fail on the reset
 * before the alert was read. Read what the node sent (for at most a
 * second) so the error names the alert, whichever side won the race.
 */
static void
tls_write_failed(struct cport_conn *c, int64_t deadline, char *err, size_t errlen)
{
    int64_t until = util_now_ms() + 1000;
    char    buf[512];
    short   want;
    long    got;

    if (until > deadline) {
        until = deadline;
    }
    for (;;) {
        got = tls_client_read(c->ssl, buf, sizeof(buf), &want);
        if (got == RINGCACHE_ETLS) {
            snprintf(err, errlen, "%s", TLS_ENDED);
            return;
        }
        if (got < 0 || (got == 0 && tls_client_wait(c->fd, want, until) != 0)) {
            break;
        }
    }
    snprintf(err, errlen, "send: the TLS session broke");
}

/* Write header + payload before the deadline, gathered: one TLS record
 * (and one send) for a small frame. */
static int
send_frame(struct cport_conn *c, enum frame_type type, const uint8_t *payload, size_t len,
           int64_t deadline, char *err, size_t errlen)
{
    uint8_t      hdr[FRAME_HEADER_SIZE];
    struct iovec v[2] = { { hdr, sizeof(hdr) }, { (void *)payload, len } };
    int          first = 0, rc;
    ssize_t      w;

    frame_header_write(hdr, type, c->cluster_id, (uint32_t)len);
    while (first < 2) {
        short want = POLLOUT;

        if (c->ssl != NULL) {
            w = tls_client_write(c->ssl, v + first, 2 - first, &want);
            if (w < 0) {
                tls_write_failed(c, deadline, err, errlen);
                return CPORT_EIO;
            }
        } else {
            struct msghdr m = { .msg_iov = v + first, .msg_iovlen = (size_t)(2 - first) };

            w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
            if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                snprintf(err, errlen, "send: %s", strerror(errno));
                return CPORT_EIO;
            }
        }
        if (w > 0) {
            size_t n = (size_t)w;

            while (first < 2 && n >= v[first].iov_len) {
                n -= v[first].iov_len;
                first++;
            }
            if (first < 2) {
                v[first].iov_base = (uint8_t *)v[first].iov_base + n;
                v[first].iov_len -= n;
            }
            continue;
        }
        rc = tls_client_wait(c->fd, want, deadline);
        if (rc != 0) {
            snprintf(err, errlen, "send: %s",
                     rc == RINGCACHE_ETIMEDOUT ? "timed out" : strerror(errno));
            return CPORT_EIO;
        }
    }
    return CPORT_OK;
}

/*
 * Read one whole frame before the deadline. On CPORT_OK *f points into the
 * read buffer, valid until the next read; *consumed is to be dropped by
 * the caller with drop_frame once it has unpacked the payload.
 */
static int
read_frame(struct cport_conn *c, struct frame *f, size_t *consumed, int64_t deadline, char *err,
           size_t errlen)
{
    ssize_t got;
    short   want;
    int     rc;

    for (;;) {
        rc = frame_decode(c->rbuf, c->rlen, c->cluster_id, CPORT_PAYLOAD_MAX, f, consumed);
        if (rc == FRAME_OK) {
            return CPORT_OK;
        }
        if (rc != FRAME_EAGAIN) {
            snprintf(err, errlen, "bad frame from the node: %s", frame_strerror(rc));
            return CPORT_EPROTO;
        }
        if (c->rcap - c->rlen < 65536) {
            size_t   ncap = c->rcap == 0 ? 65536 : c->rcap * 2;
            uint8_t *nb;

            if (ncap > CPORT_PAYLOAD_MAX + FRAME_HEADER_SIZE + 65536) {
                snprintf(err, errlen, "frame too large");
                return CPORT_EPROTO;
            }
            nb = realloc(c->rbuf, ncap);
            if (nb == NULL) {
                snprintf(err, errlen, "out of memory");
                return CPORT_ENOMEM;
            }
            c->rbuf = nb;
            c->rcap = ncap;
        }
        if (c->ssl != NULL) {
            got = tls_client_read(c->ssl, (char *)c->rbuf + c->rlen, c->rcap - c->rlen, &want);
            if (got > 0) {
                c->rlen += (size_t)got;
                continue;
            }
            if (got < 0) {
                snprintf(err, errlen, "%s",
                         got == RINGCACHE_ETLS ? TLS_ENDED : "the node closed the connection");
                return CPORT_EIO;
            }
            rc = tls_client_wait(c->fd, want, deadline);
            if (rc != 0) {
                snprintf(err, errlen, "recv: %s",
                         rc == RINGCACHE_ETIMEDOUT ? "timed out" : strerror(errno));
                return CPORT_EIO;
            }
            continue;
        }
        got = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
        if (got > 0) {
            c->rlen += (size_t)got;
            continue;
        }
        if (got == 0) {
            snprintf(err, errlen, "the node closed the connection");
            return CPORT_EIO;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            snprintf(err, errlen, "recv: %s", strerror(errno));
            return CPORT_EIO;
        }
        rc = tls_client_wait(c->fd, POLLIN, deadline);
        if (rc != 0) {
            snprintf(err, errlen, "recv: %s",
                     rc == RINGCACHE_ETIMEDOUT ? "timed out" : strerror(errno));
            return CPORT_EIO;
        }
    }
}

/* Drop a consumed frame from the front of the read buffer. */
static void
drop_frame(struct cport_conn *c, size_t consumed)
{
    memmove(c->rbuf, c->rbuf + consumed, c->rlen - consumed);
    c->rlen -= consumed;
}

/* An Error frame's message into err. */
static void
error_frame(const struct frame *f, char *err, size_t errlen)
{
    Ringcache__Error *e = ringcache__error__unpack(NULL, f->length, f->payload);

    if (e == NULL) {
        snprintf(err, errlen, "the node sent a malformed Error frame");
        return;
    }
    snprintf(err, errlen, "%s (node epoch %llu, pending %llu)", e->message,
             (unsigned long long)e->active_epoch, (unsigned long long)e->pending_epoch);
    ringcache__error__free_unpacked(e, NULL);
}

/*
 * One round trip: msg packed into a frame of type stype, then one reply
 * frame read before the deadline. An Error frame is CPORT_EREFUSED (its
 * message in err); a frame other than rtype, or a payload that does not
 * unpack as rdesc, is CPORT_EPROTO ("expected <what>"). On CPORT_OK
 * *reply is the unpacked message, owned by the caller (free it with its
 * free_unpacked). The reply frame is dropped from the read buffer.
 */
static int
exchange(struct cport_conn *c, enum frame_type stype, const ProtobufCMessage *msg,
         enum frame_type rtype, const ProtobufCMessageDescriptor *rdesc, const char *what,
         int64_t deadline, ProtobufCMessage **reply, char *err, size_t errlen)
{
    struct frame f;
    uint8_t     *buf;
    size_t       len, consumed = 0;
    int          rc;

    *reply = NULL;
    len = protobuf_c_message_get_packed_size(msg);
    buf = malloc(len + 1);
    if (buf == NULL) {
        snprintf(err, errlen, "out of memory");
        return CPORT_ENOMEM;
    }
    protobuf_c_message_pack(msg, buf);
    rc = send_frame(c, stype, buf, len, deadline, err, errlen);
    free(buf);
    if (rc != CPORT_OK) {
        return rc;
    }
    rc = read_frame(c, &f, &consumed, deadline, err, errlen);
    if (rc != CPORT_OK) {
        return rc;
    }
    if (f.type == FRAME_ERROR) {
        error_frame(&f, err, errlen);
        rc = CPORT_EREFUSED;
    } else if (f.type != rtype ||
               (*reply = protobuf_c_message_unpack(rdesc, NULL, f.length, f.payload)) == NULL) {
        snprintf(err, errlen, "expected %s, got frame type %u", what, f.type);
        rc = CPORT_EPROTO;
    }
    drop_frame(c, consumed);
    return rc;
}

/* The TLS handshake on c's new connection to addr (cport_set_tls). */
static int
tls_start(struct cport_conn *c, const char *addr, int64_t deadline, char *err, size_t errlen)
{
    char host[RING_ADDR_MAX + 1], port[16], why[256];
    int  rc;

    if (split_addr(addr, host, sizeof(host), port, sizeof(port)) != 0) {
        snprintf(err, errlen, "%s: not host:port", addr);
        return CPORT_EIO;
    }
    rc = tls_client_handshake(cport_tls, c->fd, host, cport_tls_check_name, deadline, &c->ssl, why,
                              sizeof(why));
    if (rc == 0) {
        return CPORT_OK;
    }
    if (rc == RINGCACHE_ETLS) {
        snprintf(err, errlen,
                 "%s: TLS handshake failed: %s (is the node started with "
                 "--cluster-tls, its certificate signed by --tls-ca?)",
                 addr, why[0] != '\0' ? why : "no reason given");
    } else {
        snprintf(err, errlen, "%s: TLS handshake: %s", addr, ringcache_strerror(rc));
    }
    return CPORT_EIO;
}

int
cport_connect(const char *addr, const char *cluster, const uint8_t *token, size_t token_len,
              int timeout_ms, struct cport_conn **out, struct cport_hello *hello, char *err,
              size_t errlen)
{
    Ringcache__Hello   h = RINGCACHE__HELLO__INIT;
    Ringcache__Hello  *reply = NULL;
    ProtobufCMessage  *msg = NULL;
    struct cport_conn *c;
    int64_t            deadline = util_now_ms() + timeout_ms;
    int                rc;

    *out = NULL;
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return CPORT_ENOMEM;
    }
    c->cluster_id = frame_cluster_id(cluster);
    c->fd = tcp_connect(addr, deadline, err, errlen);
    if (c->fd < 0) {
        rc = CPORT_EIO;
        goto out;
    }
    if (cport_tls != NULL && (rc = tls_start(c, addr, deadline, err, errlen)) != CPORT_OK) {
        goto out;
    }
    h.cluster = (char *)cluster;
    h.token.data = (uint8_t *)token;
    h.token.len = token_len;
    h.role = RINGCACHE__HELLO__ROLE__ADMIN;
    h.node_id = (char *)"ringctl";
    rc = exchange(c, FRAME_HELLO, &h.base, FRAME_HELLO, &ringcache__hello__descriptor,
                  "a Hello reply", deadline, &msg, err, errlen);
    if (rc != CPORT_OK) {
        goto out;
    }
    reply = (Ringcache__Hello *)msg;
    if (hello != NULL) {
        memset(hello, 0, sizeof(*hello));
        snprintf(hello->node_id, sizeof(hello->node_id), "%s", reply->node_id);
        hello->boot_id = reply->boot_id;
        hello->active_epoch = reply->active_epoch;
    }
    *out = c;
    c = NULL;
out:
    if (reply != NULL) {
        ringcache__hello__free_unpacked(reply, NULL);
    }
    cport_close(c);
    return rc;
}

/* Copy a wire status into ours. */
static int
copy_status(const Ringcache__NodeStatus *s, struct cport_status *st)
{
    size_t i;

    memset(st, 0, sizeof(*st));
    snprintf(st->node_id, sizeof(st->node_id), "%s", s->node_id);
    st->boot_id = s->boot_id;
    st->active_epoch = s->active_epoch;
    st->pending_epoch = s->pending_epoch;
    st->phase = (int)s->phase >= 0 && (int)s->phase <= (int)CPORT_PHASE_ABORTED
                    ? (enum cport_phase)s->phase
                    : CPORT_PHASE_NONE;
    st->curr_items = s->curr_items;
    st->bytes = s->bytes;
    st->limit_maxbytes = s->limit_maxbytes;
    st->evictions = s->evictions;
    st->items_imported = s->items_imported;
    st->bytes_imported = s->bytes_imported;
    st->orphans = s->orphans;
    st->misrouted = s->misrouted;
    st->fence_held_ms = s->fence_held_ms;
    st->recovering = s->recovering;
    st->behind_epoch = s->behind_epoch;
    if (s->n_peers > 0) {
        st->peers = calloc(s->n_peers, sizeof(*st->peers));
        if (st->peers == NULL) {
            return CPORT_ENOMEM;
        }
        for (i = 0; i < s->n_peers; i++) {
            const Ringcache__PeerState *p = s->peers[i];
            struct cport_peer          *o = &st->peers[i];

            snprintf(o->node_id, sizeof(o->node_id), "%s", p->node_id);
            o->state = (int)p->state >= 0 && (int)p->state <= (int)CPORT_PEER_DOWN
                           ? (enum cport_peer_health)p->state
                           : CPORT_PEER_UNKNOWN;
            o->last_seen_ms = p->last_seen_ms;
            o->holds_nothing = p->holds_nothing;
            o->epoch = p->epoch;
            snprintf(o->error, sizeof(o->error), "%s", p->error);
        }
        st->n_peers = (uint32_t)s->n_peers;
    }
    if (s->n_transfers == 0) {
        return CPORT_OK;
    }
    st->transfers = calloc(s->n_transfers, sizeof(*st->transfers));
    if (st->transfers == NULL) {
        return CPORT_ENOMEM;
    }
    for (i = 0; i < s->n_transfers; i++) {
        const Ringcache__TransferStatus *t = s->transfers[i];
        struct transfer_status          *o = &st->transfers[i];

        snprintf(o->dest, sizeof(o->dest), "%s", t->dest);
        o->items_sent = t->items_sent;
        o->bytes_sent = t->bytes_sent;
        o->items_total = t->items_total;
        o->bytes_total = t->bytes_total;
        o->walk_done = t->walk_done;
        o->dirty_backlog = t->dirty_backlog;
        o->unacked = t->unacked;
        snprintf(o->error, sizeof(o->error), "%s", t->error);
    }
    st->n_transfers = (uint32_t)s->n_transfers;
    return CPORT_OK;
}

/* The wire form of a membership, as an unpacked protobuf-c message that
 * the caller frees with ringcache__membership__free_unpacked. */
static Ringcache__Membership *
membership_msg(const struct ring_members *m)
{
    Ringcache__Membership *pb;
    uint8_t               *buf;
    size_t                 len = 0;

    buf = members_pb_pack(m, &len);
    if (buf == NULL) {
        return NULL;
    }
    pb = ringcache__membership__unpack(NULL, len, buf);
    free(buf);
    return pb;
}

/* Set AdminRequest's oneof to m, the message of one request kind: the
 * field whose type is m's (protobuf-c's oneof case is the field's number). */
static void
set_request(Ringcache__AdminRequest *ar, ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = ar->base.descriptor;
    unsigned                          i;

    for (i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];

        if (f->descriptor == m->descriptor) {
            *(uint32_t *)((uint8_t *)ar + f->quantifier_offset) = f->id;
            *(ProtobufCMessage **)((uint8_t *)ar + f->offset) = m;
            return;
        }
    }
}

int
cport_call(struct cport_conn *c, const struct cport_request *req, int timeout_ms,
           struct cport_status *st, char *err, size_t errlen)
{
    Ringcache__AdminRequest  ar = RINGCACHE__ADMIN_REQUEST__INIT;
    Ringcache__Prepare       prep = RINGCACHE__PREPARE__INIT;
    Ringcache__StartCopy     sc = RINGCACHE__START_COPY__INIT;
    Ringcache__Fence         fe = RINGCACHE__FENCE__INIT;
    Ringcache__Commit        co = RINGCACHE__COMMIT__INIT;
    Ringcache__Abort         ab = RINGCACHE__ABORT__INIT;
    Ringcache__StatusRequest sr = RINGCACHE__STATUS_REQUEST__INIT;
    ProtobufCMessage        *body = &sr.base;
    Ringcache__Membership   *mpb = NULL;
    Ringcache__AdminReply   *reply = NULL;
    ProtobufCMessage        *msg = NULL;
    ProtobufCBinaryData      tok = { req->token_len, (uint8_t *)req->token };
    int64_t                  deadline = util_now_ms() + timeout_ms;
    int                      rc = CPORT_ENOMEM;

    if (st != NULL) {
        memset(st, 0, sizeof(*st));
    }
    if (c->fd < 0) {
        snprintf(err, errlen, "connection already closed");
        return CPORT_EIO;
    }
    if ((req->kind == CPORT_PREPARE || req->kind == CPORT_COMMIT) && req->membership != NULL) {
        mpb = membership_msg(req->membership);
        if (mpb == NULL) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
    }
    switch (req->kind) {
    case CPORT_PREPARE:
        prep.membership = mpb;
        prep.token = tok;
        prep.from_epoch = req->from_epoch;
        prep.failed_ids = (char **)req->failed_ids;
        prep.n_failed_ids = req->failed_ids != NULL ? req->n_failed_ids : 0;
        prep.stale_ids = (char **)req->stale_ids;
        prep.n_stale_ids = req->stale_ids != NULL ? req->n_stale_ids : 0;
        body = &prep.base;
        break;
    case CPORT_START_COPY:
        sc.token = tok;
        sc.rate_bytes_per_s = req->rate_bytes_per_s;
        sc.paused = req->paused;
        body = &sc.base;
        break;
    case CPORT_FENCE:
        fe.token = tok;
        fe.hold_ms = req->hold_ms;
        body = &fe.base;
        break;
    case CPORT_COMMIT:
        co.token = tok;
        co.membership = mpb;
        body = &co.base;
        break;
    case CPORT_ABORT:
        ab.token = tok;
        ab.epoch = req->epoch;
        body = &ab.base;
        break;
    case CPORT_STATUS:
        break;
    }
    set_request(&ar, body);
    rc =
        exchange(c, FRAME_ADMIN_REQUEST, &ar.base, FRAME_ADMIN_REPLY,
                 &ringcache__admin_reply__descriptor, "an AdminReply", deadline, &msg, err, errlen);
    reply = (Ringcache__AdminReply *)msg;
    if (rc != CPORT_OK) {
        goto out;
    }
    if (st != NULL && reply->status != NULL && copy_status(reply->status, st) != CPORT_OK) {
        snprintf(err, errlen, "out of memory");
        rc = CPORT_ENOMEM;
        goto out;
    }
    if (!reply->ok) {
        snprintf(err, errlen, "%s", reply->error[0] != '\0' ? reply->error : "refused");
        rc = CPORT_EREFUSED;
        goto out;
    }
    rc = CPORT_OK;
out:
    /* Any failure but a plain refusal (ok = false) leaves the stream in an
     * unknown state: close it. */
    if (rc != CPORT_OK && !(rc == CPORT_EREFUSED && reply != NULL)) {
        conn_kill(c);
    }
    if (reply != NULL) {
        ringcache__admin_reply__free_unpacked(reply, NULL);
    }
    if (mpb != NULL) {
        ringcache__membership__free_unpacked(mpb, NULL);
    }
    return rc;
}

bool
cport_alive(const struct cport_conn *c)
{
    return c != NULL && c->fd >= 0;
}

void
cport_close(struct cport_conn *c)
{
    if (c == NULL) {
        return;
    }
    conn_kill(c);
    free(c->rbuf);
    free(c);
}

void
cport_status_clear(struct cport_status *st)
{
    if (st == NULL) {
        return;
    }
    free(st->transfers);
    st->transfers = NULL;
    st->n_transfers = 0;
    free(st->peers);
    st->peers = NULL;
    st->n_peers = 0;
}

const char *
cport_peer_health_name(enum cport_peer_health s)
{
    switch (s) {
    case CPORT_PEER_UP:
        return "up";
    case CPORT_PEER_SUSPECT:
        return "suspect";
    case CPORT_PEER_DOWN:
        return "down";
    default:
        return "unknown";
    }
}

const char *
cport_phase_name(enum cport_phase p)
{
    switch (p) {
    case CPORT_PHASE_PREPARED:
        return "PREPARED";
    case CPORT_PHASE_COPYING:
        return "COPYING";
    case CPORT_PHASE_FENCED:
        return "FENCED";
    case CPORT_PHASE_COMMITTED:
        return "COMMITTED";
    case CPORT_PHASE_ABORTED:
        return "ABORTED";
    default:
        return "NONE";
    }
}
