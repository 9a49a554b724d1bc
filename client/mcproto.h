/*
 * mcproto: the client side of the memcached text protocol. Key checks,
 * every request line libringcache sends (classic and meta, base64 keys
 * with lib/util's util_b64_*), and which replies a client
 * accepts (read by proto/mcreply, the reader the node shares) and what
 * they mean as RINGCACHE_E codes. Pure: no I/O, no allocation.
 */
#ifndef CLIENT_MCPROTO_H
#define CLIENT_MCPROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/ringcache.h"
#include "proto/mcreply.h"

#define MCP_LINE_MAX    2048 /* a request line with a valid key always fits */
#define MCP_DECLARE_MAX 40   /* "epoch <u64>\r\n" and its NUL */

/* 0 when key[0..len) is a valid memcached key (1..250 bytes, no space and
 * no control character), RINGCACHE_EKEY otherwise. */
int mcp_check_key(const char *key, size_t len);

/*
 * Parse the reply unit at the start of buf[0..len) as a client reads it:
 * mcr_parse (its return convention, with RINGCACHE_EPROTO for MCR_EPROTO)
 * narrowed to what a memcached-compatible node sends a client. A line of
 * no known shape (MCR_OTHER), a "\r" or NUL inside a line, or a VALUE
 * whose key is not a valid key (mcp_check_key) is RINGCACHE_EPROTO too,
 * so the caller drops the connection instead of reading out of step.
 * max_value bounds VALUE and CONFIG blocks.
 */
long mcp_parse(const char *buf, size_t len, size_t max_value, struct mcr_reply *r, size_t *need);

/* The RINGCACHE_E code for an error reply (ERROR, CLIENT_ERROR,
 * SERVER_ERROR; MOVED and TRYAGAIN give RINGCACHE_EMOVED and
 * RINGCACHE_ETRYAGAIN), reading the message where it matters (non-numeric incr,
 * object too large). 0 when r is not an error. */
int mcp_error_code(const struct mcr_reply *r);

/*
 * Request lines. Each is written into buf (MCP_LINE_MAX bytes unless
 * said otherwise) with its "\r\n"; the length is returned. The keyed ones
 * return 0, writing nothing worth sending, for a key that cannot be one
 * (NULL or over 250 bytes): callers check keys with mcp_check_key before
 * anything is sent.
 */

/* "<cmd> <key> <flags> <ttl> <bytes>[ <cas>]\r\n" (set, add, replace,
 * append, prepend, cas); the data block is the caller's. */
size_t mcp_format_storage(char *buf, const char *cmd, const char *key, size_t key_len,
                          uint32_t flags, int32_t ttl, size_t bytes, bool with_cas, uint64_t cas);

/* "get <key>\r\n", or "gets <key>\r\n" with with_cas. */
size_t mcp_format_get(char *buf, bool with_cas, const char *key, size_t key_len);

/* "delete <key>\r\n". */
size_t mcp_format_delete(char *buf, const char *key, size_t key_len);

/* "incr <key> <delta>\r\n", or decr when incr is false. */
size_t mcp_format_arith(char *buf, bool incr, const char *key, size_t key_len, uint64_t delta);

/* "touch <key> <ttl>\r\n". */
size_t mcp_format_touch(char *buf, const char *key, size_t key_len, int32_t ttl);

/* Key i (0..n-1) of a multi-get: its bytes, its length in *len. */
typedef const char *(*mcp_key_fn)(void *arg, size_t i, size_t *len);

/* The buffer size mcp_format_multiget needs for n keys of key_bytes
 * bytes in all. */
size_t mcp_multiget_size(size_t n, size_t key_bytes);

/* "get <k0> <k1> ...\r\n" (gets with with_cas) over the n keys key()
 * gives (valid keys), into buf of mcp_multiget_size bytes. */
size_t mcp_format_multiget(char *buf, bool with_cas, size_t n, mcp_key_fn key, void *arg);

/* "epoch <epoch>\r\n", the declaration a connection sends before its
 * first request routed with that epoch, into buf of MCP_DECLARE_MAX bytes. */
size_t mcp_format_declare(char *buf, uint64_t epoch);

/* "epoch\r\n" (the epoch poll), "config\r\n"; buf of 16 bytes is enough. */
size_t mcp_format_epoch_poll(char *buf);
size_t mcp_format_config(char *buf);

/* "stats\r\n", or "stats <group>\r\n" for a group of 1-32 letters, into
 * buf[MCP_STATS_LINE_MAX]; 0 for a bad group. */
#define MCP_STATS_LINE_MAX 48
size_t mcp_format_stats(char *buf, const char *group);

/*
 * Meta commands (mg ms md ma mn)
 */

enum mcp_meta_cmd {
    MCP_MG,
    MCP_MS,
    MCP_MD,
    MCP_MA
};

#define MCP_OPAQUE_MAX 32 /* memcached's limit on an O token */

/* How key[0..len) travels in a meta command: 0 as text (mcp_check_key
 * takes it), 1 base64-encoded with the b flag (1..186 bytes that a text
 * key cannot carry), or RINGCACHE_EKEY (NULL, empty, or too long for
 * either). */
int mcp_meta_key(const char *key, size_t len);

/* The request line of a meta command for key (sent as mcp_meta_key
 * says) with the options o: "<cm> <key>[ <datalen>][ <flag>...]\r\n",
 * datalen for MCP_MS only. Only the flags cmd knows are written (see
 * struct ringcache_meta_opts); opaque (NULL: none, at most
 * MCP_OPAQUE_MAX bytes, no spaces) becomes "O<opaque>". Returns the
 * length, 0 for a key mcp_meta_key refuses or a mode cmd has not. */
size_t mcp_format_meta(char *buf, enum mcp_meta_cmd cmd, const char *key, size_t key_len,
                       size_t datalen, const struct ringcache_meta_opts *o, const char *opaque);

/* True when a meta command with these options changes the item (so it
 * is routed as a write): every ms, md and ma; an mg with T, N, R or E. */
bool mcp_meta_writes(enum mcp_meta_cmd cmd, const struct ringcache_meta_opts *o);

/* "mn\r\n" into buf (4 bytes). */
size_t mcp_format_mn(char *buf);

#endif
