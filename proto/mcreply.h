/*
 * mcreply: memcached text-protocol replies as a wire form, the one reader
 * of it for libringcache (client/mcproto.c) and the node's forwarding
 * (server/forward.c). It finds where a reply unit ends (one line, or a
 * VALUE, VA or CONFIG line and its data block) and says what the unit is,
 * the meta protocol's return codes and flags included.
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
    /* The meta protocol (mg ms md ma mn me): a two-letter code, then
     * flags (struct mcr_reply's meta fields). */
    MCR_META_VA, /* VA <size> <flags>* + data: a value (mg v, ma v) */
    MCR_META_HD, /* HD <flags>*: done (a hit without v, stored, deleted) */
    MCR_META_EN, /* EN <flags>*: mg miss (me too) */
    MCR_META_NF, /* NF <flags>*: not found */
    MCR_META_NS, /* NS <flags>*: not stored */
    MCR_META_EX, /* EX <flags>*: the CAS did not match */
    MCR_META_MN, /* MN: the answer to mn (the end of a pipeline) */
    MCR_META_ME, /* ME <key> <k=v>*: me's dump; key, data = the rest */
    /* MCR_OTHER stays last: the fuzz target checks kinds against it. */
    MCR_OTHER, /* a line of none of these shapes ("12a", "STAT x",
                * "FOO"): a relay passes it on, a client rejects it */
};

/* Meta return flags present in a reply (mcr_reply.mseen). */
#define MCR_MF_B (1u << 0)  /* b: the k token is base64 */
#define MCR_MF_C (1u << 1)  /* c<cas>: cas */
#define MCR_MF_F (1u << 2)  /* f<flags>: flags */
#define MCR_MF_H (1u << 3)  /* h<0|1>: hit_before */
#define MCR_MF_K (1u << 4)  /* k<key>: key, key_len */
#define MCR_MF_L (1u << 5)  /* l<seconds>: last_access */
#define MCR_MF_O (1u << 6)  /* O<opaque>: opaque, opaque_len */
#define MCR_MF_S (1u << 7)  /* s<bytes>: size */
#define MCR_MF_T (1u << 8)  /* t<seconds|-1>: ttl */
#define MCR_MF_W (1u << 9)  /* W: this client won the recache */
#define MCR_MF_X (1u << 10) /* X: the item is stale */
#define MCR_MF_Z (1u << 11) /* Z: a win was already handed out */

/* One reply unit. Pointers point into the parsed buffer. */
struct mcr_reply {
    enum mcr_kind kind;     /* 0: the line is not all there yet */
    size_t        line_len; /* the (head) line without its "\r\n" */
    const char   *key;      /* VALUE: the key; STAT: the name; MOVED: the address;
                             * meta: the k token; ME: the key */
    size_t      key_len;
    const char *data;  /* VALUE, VA, CONFIG: the data block (NULL until it is
                        * all there); STAT: the value; ERROR, CLIENT_ERROR,
                        * SERVER_ERROR, MOVED, TRYAGAIN: the message; ME:
                        * what follows the key */
    size_t   data_len; /* VALUE, VA, CONFIG: the block's size, even before it is there */
    uint32_t flags;    /* VALUE; meta: f */
    bool     has_cas;  /* VALUE with a cas; meta: c */
    uint64_t cas;
    uint64_t number;  /* MCR_NUMBER */
    uint64_t epoch;   /* MOVED, TRYAGAIN, CONFIG; EPOCH: the active one */
    uint64_t pending; /* EPOCH: the pending epoch (0: none) */
    /* Meta replies (VA HD EN NF NS EX): the flags after the code (and VA's
     * size), as text (mflags, no leading space) and read: */
    const char *mflags;
    size_t      mflags_len;
    uint32_t    mseen;       /* MCR_MF_* of the flags present */
    int64_t     ttl;         /* t: seconds left, -1 never expires */
    uint64_t    size;        /* s */
    uint64_t    last_access; /* l: seconds since */
    bool        hit_before;  /* h */
    const char *opaque;      /* O (the token without its O) */
    size_t      opaque_len;
};

/*
 * Parse the reply unit at the start of buf[0..len) (buf may be NULL when
 * len is 0). Returns the number of bytes the unit spans (> 0) and fills
 * *r; or 0 when more bytes are needed, with *need the smallest total
 * length worth retrying with (once the head line of a VALUE or CONFIG is
 * there, *r already describes it and *need is the whole unit's length);
 * or MCR_EPROTO when the bytes cannot be a reply: the first "\n" not
 * preceded by "\r", no "\n" in the first MCR_LINE_MAX bytes, or a line
 * starting "VALUE ", "VA " or "CONFIG " that is not a valid head (single
 * spaces, decimal fields, a block of at most max_value bytes, for VA
 * flags as below) or whose block does not end in "\r\n".
 *
 * Any other line is the kind whose shape it has exactly (the shapes do
 * not overlap; a SERVER_ERROR that is neither MOVED nor TRYAGAIN stays
 * MCR_SERVER_ERROR), or MCR_OTHER. A line may hold any byte but "\n"
 * ("\r", NUL and control characters too: a node stores keys with them),
 * and a VALUE key is any run of bytes but spaces. What a client accepts
 * on top of this is client/mcproto.h's business.
 *
 * Meta flags are tokens after single spaces, each a flag byte and its
 * argument. The ones a reply can carry are read into the meta fields:
 * c, f, s, l (decimal), t (decimal or -1), h (0 or 1), k (non-empty), O
 * (any), b, W, X, Z (no argument). A flag of another byte is skipped (a
 * newer node may send more). A HD, EN, NF, NS or EX line whose flags do
 * not read so (an empty token, a bad number) is MCR_OTHER, as a VA head
 * is MCR_EPROTO. MN is exact; ME needs a key.
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
