/*
 * proto_util: the pieces of the text protocol that its command files share
 * (server/proto_text.c for clients, server/proto_peer.c for peers,
 * server/proto_stats.c, and the relaying in server/route.c): tokens and
 * number parsing, reply helpers that honour noreply, and reading or
 * discarding a data block.
 */
#ifndef SERVER_PROTO_UTIL_H
#define SERVER_PROTO_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ring/ring.h"
#include "server/conn.h"
#include "server/hotkeys.h"
#include "server/thread.h"

#define KEY_MAX 250 /* memcached's longest key */

/* A token of a command line: bytes in the connection's read buffer. */
struct token {
    const char *p;
    size_t      len;
};

#define TOK_IS(t, lit) ((t)->len == sizeof(lit) - 1 && memcmp((t)->p, lit, sizeof(lit) - 1) == 0)

/* Queue a literal reply unless the command said noreply. */
#define REPLY(c, lit) proto_reply((c), lit "\r\n", sizeof(lit "\r\n") - 1)

/* Count a key a client asked for in the worker's hot-key sketch, once per
 * request (a get's keys as it checks them). A request a peer relays was
 * counted where its client sent it. */
static inline void
proto_note_key(struct conn *c, const char *key, size_t nkey)
{
    hotkeys_note(c->peer ? NULL : c->w->hot, key, nkey);
}

/* The ring hash of the key of a single-key request (each hashes its key
 * once, here), noted as proto_note_key does. */
static inline uint64_t
proto_key_hash(struct conn *c, const char *key, size_t nkey)
{
    proto_note_key(c, key, nkey);
    return ring_hash(key, nkey);
}

/* memcached's answer to a malformed line. */
extern const char PROTO_ERR_FORMAT[];

/* Queue n bytes of reply text unless noreply is in force. */
static inline void
proto_reply(struct conn *c, const char *s, size_t n)
{
    if (!c->noreply) {
        conn_out_add(c, s, n);
    }
}

/* Queue "<msg>\r\n" unless noreply. */
void proto_reply_line(struct conn *c, const char *msg);

/* Queue formatted text, always (stats and other multi-line replies). */
void proto_reply_printf(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An unsigned decimal that fits in 64 bits: digits, with an optional
 * leading '+' (memcached parses with strtoull, so clients send it). */
bool proto_parse_u64(const struct token *t, uint64_t *out);
/* 32-bit client flags. */
bool proto_parse_u32(const struct token *t, uint32_t *out);
/* A signed 32-bit decimal (exptime, bytes, delay). */
bool proto_parse_i32(const struct token *t, int32_t *out);

/*
 * The classic commands read their numbers as memcached 1.6.45 does; see
 * shared notes/memcached-protocol.md. Tokens (lengths, cas uniques, deltas,
 * touch/gat/flush_all exptimes, verbosity levels) are read like its
 * mcmc_toktou32/toktou64/tokto32: decimal digits only, no '+', at most 11
 * characters (32-bit) or 22 (64-bit), no overflow; the signed form takes a
 * leading '-', and a lone "-" reads as 0.
 */
bool proto_tok_u32(const struct token *t, uint32_t *out);
bool proto_tok_u64(const struct token *t, uint64_t *out);
bool proto_tok_i32(const struct token *t, int32_t *out);

/*
 * A storage command's flags and exptime, read as memcached's
 * safe_strtoul/safe_strtol read them: strtoul/strtol (base 10, C locale) on
 * the line from p, which need not stop at the token's end: leading
 * whitespace (even tabs and spaces that run into the next token) is
 * skipped, a '+' or '-' sign taken, and the number must be followed by
 * whitespace, a NUL or the end of the line [p, end) (the byte there is the
 * line's '\r' or '\n'). proto_strtoul gives the unsigned long (a '-'
 * negates it, and a result negative as a long is refused); proto_strtol
 * the long, which memcached then truncates to 32 bits.
 */
bool proto_strtoul(const char *p, const char *end, uint64_t *out);
bool proto_strtol(const char *p, const char *end, int64_t *out);

/* The next key of a get's key list [*p, end): true with it in k, *p moved
 * past it; false at the end of the list. */
static inline bool
proto_next_key(const char **p, const char *end, struct token *k)
{
    const char *q = *p;

    while (q < end && *q == ' ') {
        q++;
    }
    if (q == end) {
        *p = q;
        return false;
    }
    k->p = q;
    q = memchr(q, ' ', (size_t)(end - q));
    if (q == NULL) {
        q = end;
    }
    k->len = (size_t)(q - k->p);
    *p = q;
    return true;
}

/* A data block read into item it ends in "\r\n": true; otherwise
 * CLIENT_ERROR bad data chunk is queued and the caller's reference to it
 * released. */
bool proto_block_ok(struct conn *c, struct store_item *it);

/* Called by the parser once a data block is in, in the command state. */
typedef void (*proto_block_fn)(struct conn *c);

/* The next n bytes of the stream (a data block and its "\r\n") go to dst;
 * then done(c) runs. */
static inline void
proto_read_block(struct conn *c, char *dst, size_t n, proto_block_fn done)
{
    c->nread_dst = dst;
    c->nread_left = n;
    c->nread_done = done;
    c->pstate = CONN_PS_NREAD;
}

/* Discard the next n bytes of the stream (a rejected data block + 2). */
static inline void
proto_swallow(struct conn *c, size_t n)
{
    c->swallow_left = n;
    c->pstate = CONN_PS_SWALLOW;
}

#endif /* SERVER_PROTO_UTIL_H */
