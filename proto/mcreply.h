/*
 * mcreply: memcached text-protocol replies as a wire form, the one reader
 * of it for libringcache (client/mcproto.c) and the node's forwarding
 * (server/forward.c). It finds where a reply unit ends (one line, or a
 * VALUE or CONFIG line and its data block) and says what the unit is.
 * Pure: no I/O, no allocation, no copy (results point into the buffer).
 */
#ifndef PROTO_MCREPLY_H
#define PROTO_MCREPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A reply line, "\r\n" included, is at most this long: mcr_parse looks
 * for its end in the first MCR_LINE_MAX bytes only, so that many bytes
 * without a "\n" are never a reply (a reader stops buffering there). */
#define MCR_LINE_MAX 2048
#define MCR_ADDR_MAX 255  /* longest address in a MOVED reply (RING_ADDR_MAX) */
#define MCR_EPROTO   (-1) /* not a reply: the reader is out of step */

enum mcr_kind {
    MCR_VALUE = 1, /* VALUE <key> <flags> <bytes>[ <cas>] + data */
    MCR_END,
    MCR_STORED,
    MCR_NOT_STORED,
    MCR_EXISTS,
    MCR_NOT_FOUND,
    MCR_DELETED,
    MCR_TOUCHED,
    MCR_NUMBER, /* incr/decr result */
    MCR_STAT,   /* STAT <name> <value> */
    MCR_OK,
    MCR_ERROR,        /* ERROR[ <msg>] */
    MCR_CLIENT_ERROR, /* CLIENT_ERROR[ <msg>] */
    MCR_SERVER_ERROR, /* SERVER_ERROR[ <msg>] */
    MCR_MOVED,        /* SERVER_ERROR MOVED <epoch> <addr>: key = addr */
    MCR_TRYAGAIN,     /* SERVER_ERROR TRYAGAIN <epoch> */
    MCR_CONFIG,       /* CONFIG <epoch> <bytes> + data (membership text); END follows */
    MCR_EPOCH,        /* EPOCH <active> <pending> */
    MCR_OTHER,        /* a line of none of these shapes ("12a", "STAT x",
                       * "FOO"): a relay passes it on, a client rejects it */
};

/* One reply unit. Pointers point into the parsed buffer. */
struct mcr_reply {
    enum mcr_kind kind;     /* 0: the line is not all there yet */
    size_t        line_len; /* the (head) line without its "\r\n" */
    const char   *key;      /* VALUE: the key; STAT: the name; MOVED: the address */
    size_t        key_len;
    const char   *data; /* VALUE, CONFIG: the data block (NULL until it is all
                         * there); STAT: the value; ERROR, CLIENT_ERROR,
                         * SERVER_ERROR, MOVED, TRYAGAIN: the message */
    size_t   data_len;  /* VALUE, CONFIG: the block's size, even before it is there */
    uint32_t flags;
    bool     has_cas;
    uint64_t cas;
    uint64_t number;  /* MCR_NUMBER */
    uint64_t epoch;   /* MOVED, TRYAGAIN, CONFIG; EPOCH: the active one */
    uint64_t pending; /* EPOCH: the pending epoch (0: none) */
};

/*
 * Parse the reply unit at the start of buf[0..len) (buf may be NULL when
 * len is 0). Returns the number of bytes the unit spans (> 0) and fills
 * *r; or 0 when more bytes are needed, with *need the smallest total
 * length worth retrying with (once the head line of a VALUE or CONFIG is
 * there, *r already describes it and *need is the whole unit's length);
 * or MCR_EPROTO when the bytes cannot be a reply: the first "\n" not
 * preceded by "\r", no "\n" in the first MCR_LINE_MAX bytes, or a line
 * starting "VALUE " or "CONFIG " that is not a valid head (single spaces,
 * decimal fields, a block of at most max_value bytes) or whose block does
 * not end in "\r\n".
 *
 * Any other line is the kind whose shape it has exactly (the shapes do
 * not overlap; a SERVER_ERROR that is neither MOVED nor TRYAGAIN stays
 * MCR_SERVER_ERROR), or MCR_OTHER. A line may hold any byte but "\n"
 * ("\r", NUL and control characters too: a node stores keys with them),
 * and a VALUE key is any run of bytes but spaces. What a client accepts
 * on top of this is client/mcproto.h's business.
 */
long mcr_parse(const char *buf, size_t len, size_t max_value, struct mcr_reply *r, size_t *need);

/*
 * Where the reply line at the start of buf[0..len) ends: its length with
 * its "\r\n" (> 0); 0 when that is not there yet (*need as above); or
 * MCR_EPROTO (the first "\n" not preceded by "\r", or no "\n" in the first
 * MCR_LINE_MAX bytes). mcr_parse starts with this; a reader that takes
 * replies as lines only (the node's replication acks) calls it alone.
 */
long mcr_line(const char *buf, size_t len, size_t *need);

#endif
