/*
 * mcproto: the client side of the memcached text protocol. Key checks,
 * request lines, and a strict parser of reply units (one line, or a VALUE
 * line with its data block). Pure: no I/O, no allocation.
 */
#ifndef CLIENT_MCPROTO_H
#define CLIENT_MCPROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MCP_LINE_MAX 2048          /* longest reply line we accept */
#define MCP_ADDR_MAX 255           /* longest address in a MOVED reply (RING_ADDR_MAX) */

enum mcp_kind {
    MCP_VALUE = 1,       /* VALUE <key> <flags> <bytes>[ <cas>] + data */
    MCP_END,
    MCP_STORED,
    MCP_NOT_STORED,
    MCP_EXISTS,
    MCP_NOT_FOUND,
    MCP_DELETED,
    MCP_TOUCHED,
    MCP_NUMBER,          /* incr/decr result */
    MCP_STAT,            /* STAT <name> <value> */
    MCP_OK,
    MCP_ERROR,           /* ERROR */
    MCP_CLIENT_ERROR,    /* CLIENT_ERROR <msg> */
    MCP_SERVER_ERROR,    /* SERVER_ERROR <msg> */
    MCP_MOVED,           /* SERVER_ERROR MOVED <epoch> <addr>: key = addr */
    MCP_TRYAGAIN,        /* SERVER_ERROR TRYAGAIN <epoch> */
    MCP_CONFIG,          /* CONFIG <epoch> <bytes> + data (membership text); END follows */
    MCP_EPOCH,           /* EPOCH <active> <pending> */
};

/* One parsed reply unit. Pointers point into the parsed buffer. */
struct mcp_reply {
    enum mcp_kind kind;
    const char   *key;        /* VALUE: the key; STAT: the name */
    size_t        key_len;
    const char   *data;       /* VALUE: the data; STAT: the value; errors: the message */
    size_t        data_len;
    uint32_t      flags;
    bool          has_cas;
    uint64_t      cas;
    uint64_t      number;     /* MCP_NUMBER */
    uint64_t      epoch;      /* MOVED, TRYAGAIN, CONFIG; EPOCH: the active one */
    uint64_t      pending;    /* EPOCH: the pending epoch (0: none) */
};

/* 0 when key[0..len) is a valid memcached key (1..250 bytes, no space and
 * no control character), RINGCACHE_EKEY otherwise. */
int mcp_check_key(const char *key, size_t len);

/*
 * Parse the reply unit at the start of buf[0..len). Returns the number of
 * bytes it spans (> 0) and fills *r; 0 when more bytes are needed (*need
 * then holds the smallest total length worth retrying with); or
 * RINGCACHE_EPROTO when the bytes are not a valid reply (bad line ending,
 * unknown line, bad number, data block not followed by \r\n, a VALUE or
 * CONFIG larger than max_value, or a line over MCP_LINE_MAX).
 * The cluster extensions (docs/cluster.md) are units of their own:
 * "SERVER_ERROR MOVED <epoch> <addr>" and "SERVER_ERROR TRYAGAIN <epoch>"
 * (a SERVER_ERROR of another shape stays MCP_SERVER_ERROR), the CONFIG
 * head with its data block, and the EPOCH line.
 */
long mcp_parse(const char *buf, size_t len, size_t max_value,
               struct mcp_reply *r, size_t *need);

/* The RINGCACHE_E code for an error reply (ERROR, CLIENT_ERROR,
 * SERVER_ERROR; MOVED and TRYAGAIN give RINGCACHE_EMOVED and
 * RINGCACHE_ETRYAGAIN), reading the message where it matters (non-numeric incr,
 * object too large). 0 when r is not an error. */
int mcp_error_code(const struct mcp_reply *r);

/* Write "<cmd> <key> <flags> <ttl> <bytes>[ <cas>]\r\n" into buf (size
 * >= MCP_LINE_MAX is always enough); returns its length. */
size_t mcp_format_storage(char *buf, const char *cmd, const char *key,
                          size_t key_len, uint32_t flags, int32_t ttl,
                          size_t bytes, bool with_cas, uint64_t cas);

#endif
