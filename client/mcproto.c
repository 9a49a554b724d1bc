/*
 * mcproto: client side of the memcached text protocol (see mcproto.h).
 * Replies are read by proto/mcreply; this file only narrows them: what a
 * memcached-compatible node would never send a client is RINGCACHE_EPROTO,
 * so the caller can drop the connection instead of reading out of step.
 */
#include <stdio.h>
#include <string.h>

#include "client/mcproto.h"
#include "client/ringcache.h"

int
mcp_check_key(const char *key, size_t len)
{
    size_t i;

    if (key == NULL || len == 0 || len > RINGCACHE_KEY_MAX) {
        return RINGCACHE_EKEY;
    }
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)key[i];

        /* Space separates tokens; control chars (and DEL) could end or
         * corrupt the command line. */
        if (c <= 0x20 || c == 0x7f) {
            return RINGCACHE_EKEY;
        }
    }
    return 0;
}

long
mcp_parse(const char *buf, size_t len, size_t max_value, struct mcr_reply *r, size_t *need)
{
    long n = mcr_parse(buf, len, max_value, r, need);

    if (n < 0) {
        return RINGCACHE_EPROTO;
    }
    if (r->kind == 0) {
        return 0; /* the line is not all there yet */
    }
    /* A node relays lines of any shape and keys of any bytes; a client
     * only takes the replies it knows, on clean lines, for valid keys. */
    if (r->kind == MCR_OTHER || memchr(buf, '\r', r->line_len) != NULL ||
        memchr(buf, '\0', r->line_len) != NULL ||
        (r->kind == MCR_VALUE && mcp_check_key(r->key, r->key_len) != 0)) {
        return RINGCACHE_EPROTO;
    }
    return n;
}

/* True when the message contains needle (messages are not NUL-terminated). */
static bool
msg_has(const struct mcr_reply *r, const char *needle)
{
    size_t nl = strlen(needle), i;

    for (i = 0; i + nl <= r->data_len; i++) {
        if (memcmp(r->data + i, needle, nl) == 0) {
            return true;
        }
    }
    return false;
}

int
mcp_error_code(const struct mcr_reply *r)
{
    switch (r->kind) {
    case MCR_ERROR:
        return RINGCACHE_ECLIENT;
    case MCR_CLIENT_ERROR:
        if (msg_has(r, "non-numeric")) {
            return RINGCACHE_ENONNUMERIC;
        }
        return RINGCACHE_ECLIENT;
    case MCR_SERVER_ERROR:
        if (msg_has(r, "too large")) {
            return RINGCACHE_ETOOBIG;
        }
        if (msg_has(r, "UNAVAILABLE") || msg_has(r, "replica unavailable")) {
            return RINGCACHE_EUNAVAILABLE;
        }
        return RINGCACHE_ESERVER;
    case MCR_MOVED:
        return RINGCACHE_EMOVED;
    case MCR_TRYAGAIN:
        return RINGCACHE_ETRYAGAIN;
    default:
        return 0;
    }
}

/*
 * Request lines
 */

size_t
mcp_format_storage(char *buf, const char *cmd, const char *key, size_t key_len, uint32_t flags,
                   int32_t ttl, size_t bytes, bool with_cas, uint64_t cas)
{
    int n;

    /* key_len <= 250 (checked by the caller), so this fits MCP_LINE_MAX. */
    if (with_cas) {
        n = snprintf(buf, MCP_LINE_MAX, "%s %.*s %u %d %zu %llu\r\n", cmd, (int)key_len, key,
                     (unsigned)flags, (int)ttl, bytes, (unsigned long long)cas);
    } else {
        n = snprintf(buf, MCP_LINE_MAX, "%s %.*s %u %d %zu\r\n", cmd, (int)key_len, key,
                     (unsigned)flags, (int)ttl, bytes);
    }
    return (size_t)n;
}

/* "<cmd> <key><arg>\r\n" for a key no longer than a key may be; 0 for
 * any other. */
static size_t
keyed_line(char *buf, const char *cmd, const char *key, size_t key_len, const char *arg)
{
    int n;

    if (key == NULL || key_len > RINGCACHE_KEY_MAX) {
        return 0;
    }
    n = snprintf(buf, MCP_LINE_MAX, "%s %.*s%s\r\n", cmd, (int)key_len, key, arg);
    return n > 0 && n < MCP_LINE_MAX ? (size_t)n : 0;
}

size_t
mcp_format_get(char *buf, bool with_cas, const char *key, size_t key_len)
{
    return keyed_line(buf, with_cas ? "gets" : "get", key, key_len, "");
}

size_t
mcp_format_delete(char *buf, const char *key, size_t key_len)
{
    return keyed_line(buf, "delete", key, key_len, "");
}

size_t
mcp_format_arith(char *buf, bool incr, const char *key, size_t key_len, uint64_t delta)
{
    char arg[32];

    snprintf(arg, sizeof(arg), " %llu", (unsigned long long)delta);
    return keyed_line(buf, incr ? "incr" : "decr", key, key_len, arg);
}

size_t
mcp_format_touch(char *buf, const char *key, size_t key_len, int32_t ttl)
{
    char arg[32];

    snprintf(arg, sizeof(arg), " %d", (int)ttl);
    return keyed_line(buf, "touch", key, key_len, arg);
}

size_t
mcp_multiget_size(size_t n, size_t key_bytes)
{
    /* "gets", a space before each key, the keys, "\r\n". */
    return 4 + n + key_bytes + 2;
}

size_t
mcp_format_multiget(char *buf, bool with_cas, size_t n, mcp_key_fn key, void *arg)
{
    size_t off = with_cas ? 4 : 3, i;

    memcpy(buf, with_cas ? "gets" : "get", off);
    for (i = 0; i < n; i++) {
        size_t      len;
        const char *k = key(arg, i, &len);

        buf[off++] = ' ';
        memcpy(buf + off, k, len);
        off += len;
    }
    buf[off++] = '\r';
    buf[off++] = '\n';
    return off;
}

size_t
mcp_format_declare(char *buf, uint64_t epoch)
{
    return (size_t)snprintf(buf, MCP_DECLARE_MAX, "epoch %llu\r\n", (unsigned long long)epoch);
}

size_t
mcp_format_epoch_poll(char *buf)
{
    memcpy(buf, "epoch\r\n", 7);
    return 7;
}

size_t
mcp_format_config(char *buf)
{
    memcpy(buf, "config\r\n", 8);
    return 8;
}

size_t
mcp_format_stats(char *buf)
{
    memcpy(buf, "stats\r\n", 7);
    return 7;
}
