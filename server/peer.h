/*
 * peer: the client side of a PEER connection to another node's cluster
 * port, shared by the handoff streams (server/handoff.c) and the
 * heartbeats (server/health.c), plus the frame send and read helpers the
 * cluster port (server/cport.c) uses on its accepted connections too.
 * Everything runs on the cluster thread's event_base.
 */
#ifndef SERVER_PEER_H
#define SERVER_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "proto/frame.h"

struct bufferevent;
struct cluster;
struct event_base;
struct peer_tls;
struct evbuffer;

/* peer_connect results (0 = connecting). */
#define PEER_EADDR    (-1) /* not host:port, or no cluster port for that port */
#define PEER_ECONNECT (-2) /* a numeric address that refused at once */
#define PEER_ERESOLVE (-3) /* a host name that did not resolve or connect */

/* Frame and send a protobuf message (a ProtobufCMessage *) on bev. 0, or
 * -1 when the output buffer cannot take it (out of memory). */
int peer_send(struct bufferevent *bev, enum frame_type type, uint64_t cluster_id, const void *msg);

/* Send this node's Hello with the PEER role (cluster name, admin token,
 * node id, boot id, active epoch) on bev. 0 or -1 (out of memory). */
int peer_send_hello(struct bufferevent *bev, const struct cluster *cl);

/*
 * The next whole frame buffered in `in`, checked against cluster_id and
 * max_payload. FRAME_OK: *f points into `in` (pulled up) and *size is the
 * frame's size, to drain once the caller is done with *f. FRAME_EAGAIN:
 * read more; *size is the size of the whole frame once its header is in
 * (0 before), for a read watermark. Any other result is a bad frame
 * (frame_strerror): the caller closes the connection.
 */
int peer_read_frame(struct evbuffer *in, uint64_t cluster_id, uint32_t max_payload, struct frame *f,
                    size_t *size);

/* "prefix: <message of the Error frame f>" into buf[len] ("?" for a
 * message that does not decode). */
void peer_error_text(const struct frame *f, const char *prefix, char *buf, size_t len);

/*
 * Start connecting bev (a bufferevent_socket_new(base, -1, ...) with its
 * callbacks set) to the cluster port of the member at addr ("host:port" or
 * "[v6]:port" of its client port; the cluster port is CLUSTER_PORT_OFFSET
 * above). A numeric address connects without blocking; a host name
 * resolves on this thread. 0, or PEER_E*; the event callback may already
 * have run (with BEV_EVENT_ERROR) when this returns.
 */
int peer_connect(struct bufferevent *bev, const char *addr);

/* A bufferevent for peer_connect to the member at addr: over TLS when the
 * cluster port speaks it (tls, server/peer_tls.h; NULL: plain), checking
 * that the member's certificate names addr's host. NULL when out of memory
 * (a malformed addr gets a plain one: peer_connect then says PEER_EADDR). */
struct bufferevent *peer_dial(struct event_base *base, struct peer_tls *tls,
                              const char *addr);

#endif /* SERVER_PEER_H */
