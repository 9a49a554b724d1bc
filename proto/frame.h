/*
 * frame: the cluster port's framing. Every peer and admin message is one
 * frame: a 16-byte header (magic, version, type, cluster id, payload length)
 * then a protobuf payload. A frame that is truncated, oversized, of an
 * unknown type or from another cluster is rejected; the caller closes that
 * connection and nothing else.
 */
#ifndef PROTO_FRAME_H
#define PROTO_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring/ring.h"

#define FRAME_HEADER_SIZE 16
#define FRAME_MAGIC0      'R'
#define FRAME_MAGIC1      'C'
#define FRAME_VERSION     1
#define FRAME_PAYLOAD_MAX (8u << 20) /* hard ceiling; callers may pass less */

/* Frame types. The payload of each is named beside it. */
enum frame_type {
    FRAME_HELLO = 1,     /* ringcache.Hello: cluster name, token, node id */
    FRAME_MEMBERSHIP,    /* ringcache.Membership */
    FRAME_ADMIN_REQUEST, /* admin request (cluster issue) */
    FRAME_ADMIN_REPLY,   /* admin reply */
    FRAME_HANDOFF_BATCH, /* post-images and tombstones */
    FRAME_HANDOFF_ACK,   /* ringcache.HandoffAck */
    FRAME_ERROR,         /* ringcache.Error, then the sender closes */
    FRAME_PING,          /* ringcache.Ping: heartbeat, peer -> peer */
    FRAME_PONG,          /* ringcache.Pong: its answer */
    FRAME_TYPE_END       /* first unknown type */
};

/* Decoder results (FRAME_OK = a whole frame; FRAME_EAGAIN = read more). */
#define FRAME_OK       0
#define FRAME_EAGAIN   (-1)
#define FRAME_EMAGIC   (-2)
#define FRAME_EVERSION (-3)
#define FRAME_ETYPE    (-4)
#define FRAME_ECLUSTER (-5)
#define FRAME_ETOOBIG  (-6)

struct frame {
    uint8_t        type;       /* enum frame_type */
    uint64_t       cluster_id; /* frame_cluster_id of the cluster name */
    uint32_t       length;     /* payload bytes */
    const uint8_t *payload;    /* points into the decoded buffer */
};

/* The cluster id of a cluster name, as every frame header carries it:
 * XXH3_64bits of the name, seed 0 (ring_hash). Node and admin tool both
 * call this, so they agree on the wire. */
uint64_t frame_cluster_id(const char *name);

/* Write a header for a payload of `length` bytes into out[16]. */
void frame_header_write(uint8_t out[FRAME_HEADER_SIZE], enum frame_type type, uint64_t cluster_id,
                        uint32_t length);

/*
 * Decode one frame from the start of buf[0..len). On FRAME_OK, *f describes
 * it (payload points into buf) and *consumed is header + payload. Checks,
 * in order as bytes arrive: magic, version, type, cluster id (against
 * want_cluster), length (against max_payload, capped at FRAME_PAYLOAD_MAX),
 * so a bad frame is rejected as soon as its header is in, never after
 * buffering a huge payload. FRAME_EAGAIN when more bytes are needed.
 */
int frame_decode(const uint8_t *buf, size_t len, uint64_t want_cluster, uint32_t max_payload,
                 struct frame *f, size_t *consumed);

/* A short description of a decoder result, for logs. */
const char *frame_strerror(int err);

/* One outgoing transfer of a source node, as ringcache.TransferStatus
 * carries it in a Status reply: the node fills it (server/handoff.c), the
 * admin reads it (client/cport_client.c). */
struct transfer_status {
    char     dest[RING_ID_MAX + 1];
    uint64_t items_sent, bytes_sent, items_total, bytes_total;
    bool     walk_done;
    uint64_t dirty_backlog, unacked;
    char     error[256];
};

#endif
