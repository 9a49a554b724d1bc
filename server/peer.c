/*
 * peer: frames on a cluster-port bufferevent and the PEER connection's
 * client side (address, connect, Hello). The handoff streams and the
 * heartbeats speak the same handshake; only what follows it differs.
 */
#include "config.h"
#include "server/peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/util.h>

#include "proto/ringcache.pb-c.h"
#include "server/cluster.h"
#include "server/peer_tls.h"

#define PORT_MAX 65535

/* Frame and send; see peer.h. */
int
peer_send(struct bufferevent *bev, enum frame_type type, uint64_t cluster_id, const void *msg)
{
    const ProtobufCMessage *m = msg;
    size_t                  n = protobuf_c_message_get_packed_size(m);
    uint8_t                 hdr[FRAME_HEADER_SIZE];
    uint8_t                *buf = malloc(n > 0 ? n : 1);
    int                     rc;

    if (buf == NULL) {
        return -1;
    }
    protobuf_c_message_pack(m, buf);
    frame_header_write(hdr, type, cluster_id, (uint32_t)n);
    rc = bufferevent_write(bev, hdr, sizeof(hdr)) == 0 && bufferevent_write(bev, buf, n) == 0 ? 0
                                                                                              : -1;
    free(buf);
    return rc;
}

/* The PEER Hello; see peer.h. */
int
peer_send_hello(struct bufferevent *bev, const struct cluster *cl)
{
    Ringcache__Hello m = RINGCACHE__HELLO__INIT;

    m.cluster = (char *)cluster_name(cl);
    m.token.data = (uint8_t *)cluster_token(cl, &m.token.len);
    m.role = RINGCACHE__HELLO__ROLE__PEER;
    m.node_id = (char *)cluster_node_id(cl);
    m.boot_id = cluster_boot_id(cl);
    m.active_epoch = cluster_active_epoch(cl);
    return peer_send(bev, FRAME_HELLO, cluster_frame_id(cl), &m);
}

/* Payload length of a whole header (big-endian, bytes 12-15). */
static size_t
header_payload_len(const uint8_t *hdr)
{
    return (size_t)hdr[12] << 24 | (size_t)hdr[13] << 16 | (size_t)hdr[14] << 8 | hdr[15];
}

/*
 * The next frame; see peer.h. The header is checked as soon as its bytes
 * are in (a peer sending garbage or a huge length is refused before its
 * payload is buffered), and only the frame itself is pulled up, never the
 * whole input.
 */
int
peer_read_frame(struct evbuffer *in, uint64_t cluster_id, uint32_t max_payload, struct frame *f,
                size_t *size)
{
    size_t   len = evbuffer_get_length(in);
    size_t   hl = len < FRAME_HEADER_SIZE ? len : FRAME_HEADER_SIZE, total;
    uint8_t *p;
    int      rc;

    *size = 0;
    if (len == 0) {
        return FRAME_EAGAIN;
    }
    p = evbuffer_pullup(in, (ssize_t)hl);
    rc = frame_decode(p, hl, cluster_id, max_payload, f, size);
    if (rc != FRAME_OK && rc != FRAME_EAGAIN) {
        return rc;
    }
    if (hl < FRAME_HEADER_SIZE) {
        return FRAME_EAGAIN;
    }
    total = FRAME_HEADER_SIZE + header_payload_len(p);
    *size = total;
    if (len < total) {
        return FRAME_EAGAIN;
    }
    p = evbuffer_pullup(in, (ssize_t)total);
    return frame_decode(p, total, cluster_id, max_payload, f, size);
}

/* The text of an Error frame; see peer.h. */
void
peer_error_text(const struct frame *f, const char *prefix, char *buf, size_t len)
{
    Ringcache__Error *e = ringcache__error__unpack(NULL, f->length, f->payload);

    snprintf(buf, len, "%s: %s", prefix, e != NULL && e->message != NULL ? e->message : "?");
    if (e != NULL) {
        ringcache__error__free_unpacked(e, NULL);
    }
}

/* host:port or [v6]:port -> host (brackets removed) and the cluster port
 * (port + CLUSTER_PORT_OFFSET). 0 or -1. */
static int
cluster_addr(const char *addr, char *host, size_t hostlen, int *port)
{
    const char *colon = strrchr(addr, ':');
    const char *h = addr;
    size_t      n;
    long        p;

    if (colon == NULL) {
        return -1;
    }
    n = (size_t)(colon - addr);
    if (addr[0] == '[' && n >= 2 && addr[n - 1] == ']') {
        h = addr + 1;
        n -= 2;
    }
    if (n == 0 || n >= hostlen) {
        return -1;
    }
    memcpy(host, h, n);
    host[n] = '\0';
    p = strtol(colon + 1, NULL, 10);
    if (p <= 0 || p + CLUSTER_PORT_OFFSET > PORT_MAX) {
        return -1;
    }
    *port = (int)p + CLUSTER_PORT_OFFSET;
    return 0;
}

/* See peer.h. */
struct bufferevent *
peer_dial(struct event_base *base, struct peer_tls *tls, const char *addr)
{
    char host[RING_ADDR_MAX + 1];
    int  port;

    if (cluster_addr(addr, host, sizeof(host), &port) < 0) {
        return bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE); /* peer_connect says why */
    }
    return peer_tls_dial(tls, base, host, true);
}

/* Connect to a member's cluster port; see peer.h. */
int
peer_connect(struct bufferevent *bev, const char *addr)
{
    char                    host[RING_ADDR_MAX + 1], target[RING_ADDR_MAX + 16];
    struct sockaddr_storage ss;
    int                     sslen = sizeof(ss), port;

    if (cluster_addr(addr, host, sizeof(host), &port) < 0) {
        return PEER_EADDR;
    }
    snprintf(target, sizeof(target), strchr(host, ':') != NULL ? "[%s]:%d" : "%s:%d", host, port);
    if (evutil_parse_sockaddr_port(target, (struct sockaddr *)&ss, &sslen) == 0) {
        return bufferevent_socket_connect(bev, (struct sockaddr *)&ss, sslen) < 0 ? PEER_ECONNECT
                                                                                  : 0;
    }
    if (bufferevent_socket_connect_hostname(bev, NULL, AF_UNSPEC, host, port) < 0) {
        return PEER_ERESOLVE;
    }
    return 0;
}
