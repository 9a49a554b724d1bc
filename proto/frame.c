/*
 * frame: encode and decode the cluster port's 16-byte frame header
 * (big-endian): "RC", version, type, cluster id (8), payload length (4).
 */
#include <string.h>

#include "proto/frame.h"
#include "ring/ring.h"

/* See frame.h. */
uint64_t
frame_cluster_id(const char *name)
{
    return ring_hash(name, strlen(name));
}

static void
put_be64(uint8_t *p, uint64_t v)
{
    int i;

    for (i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static uint64_t
get_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    int      i;

    for (i = 0; i < n; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

void
frame_header_write(uint8_t out[FRAME_HEADER_SIZE], enum frame_type type, uint64_t cluster_id,
                   uint32_t length)
{
    out[0] = FRAME_MAGIC0;
    out[1] = FRAME_MAGIC1;
    out[2] = FRAME_VERSION;
    out[3] = (uint8_t)type;
    put_be64(out + 4, cluster_id);
    out[12] = (uint8_t)(length >> 24);
    out[13] = (uint8_t)(length >> 16);
    out[14] = (uint8_t)(length >> 8);
    out[15] = (uint8_t)length;
}

int
frame_decode(const uint8_t *buf, size_t len, uint64_t want_cluster, uint32_t max_payload,
             struct frame *f, size_t *consumed)
{
    uint32_t length;

    /* Reject on the first bad byte, so garbage never waits for more input. */
    if ((len >= 1 && buf[0] != FRAME_MAGIC0) || (len >= 2 && buf[1] != FRAME_MAGIC1)) {
        return FRAME_EMAGIC;
    }
    if (len >= 3 && buf[2] != FRAME_VERSION) {
        return FRAME_EVERSION;
    }
    if (len >= 4 && (buf[3] == 0 || buf[3] >= FRAME_TYPE_END)) {
        return FRAME_ETYPE;
    }
    if (len < FRAME_HEADER_SIZE) {
        return FRAME_EAGAIN;
    }
    if (get_be(buf + 4, 8) != want_cluster) {
        return FRAME_ECLUSTER;
    }
    length = (uint32_t)get_be(buf + 12, 4);
    if (max_payload > FRAME_PAYLOAD_MAX) {
        max_payload = FRAME_PAYLOAD_MAX;
    }
    if (length > max_payload) {
        return FRAME_ETOOBIG;
    }
    if (len - FRAME_HEADER_SIZE < length) {
        return FRAME_EAGAIN;
    }
    f->type = buf[3];
    f->cluster_id = want_cluster;
    f->length = length;
    f->payload = buf + FRAME_HEADER_SIZE;
    *consumed = FRAME_HEADER_SIZE + (size_t)length;
    return FRAME_OK;
}

const char *
frame_strerror(int err)
{
    switch (err) {
    case FRAME_OK:
        return "ok";
    case FRAME_EAGAIN:
        return "truncated frame";
    case FRAME_EMAGIC:
        return "bad frame magic (not a ringcache cluster peer)";
    case FRAME_EVERSION:
        return "unsupported frame version";
    case FRAME_ETYPE:
        return "unknown frame type";
    case FRAME_ECLUSTER:
        return "frame from another cluster";
    case FRAME_ETOOBIG:
        return "frame payload too large";
    default:
        return "unknown frame error";
    }
}
