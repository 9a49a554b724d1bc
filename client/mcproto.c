/*
 * mcproto: client side of the memcached text protocol (see mcproto.h).
 * The parser is strict on purpose: anything a memcached-compatible node
 * would never send is reported as RINGCACHE_EPROTO, so the caller can drop
 * the connection instead of reading out of step.
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

/* Parse a decimal unsigned number of exactly [s, s+len) into *out, at most
 * max. -1 on an empty token, a non-digit or overflow. */
static int
parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    size_t i;

    if (len == 0 || len > 20) {
        return -1;
    }
    for (i = 0; i < len; i++) {
        unsigned d;

        if (s[i] < '0' || s[i] > '9') {
            return -1;
        }
        d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) {
            return -1;
        }
        v = v * 10 + d;
    }
    if (v > max) {
        return -1;
    }
    *out = v;
    return 0;
}

/* Split line[0..len) into up to max tokens separated by single spaces;
 * returns the count, or -1 on an empty token (double or edge space). */
static int
split(const char *line, size_t len, const char **tok, size_t *tlen, int max)
{
    size_t start = 0, i;
    int n = 0;

    for (i = 0; i <= len; i++) {
        if (i == len || line[i] == ' ') {
            if (i == start || n == max) {
                return -1;
            }
            tok[n] = line + start;
            tlen[n] = i - start;
            n++;
            start = i + 1;
        }
    }
    return n;
}

/* True when line[0..len) is exactly word, or word followed by a space
 * (the message then starts at *msg). */
static bool
starts_word(const char *line, size_t len, const char *word, const char **msg,
            size_t *msg_len)
{
    size_t wl = strlen(word);

    if (len < wl || memcmp(line, word, wl) != 0) {
        return false;
    }
    if (len == wl) {
        *msg = line + len;
        *msg_len = 0;
        return true;
    }
    if (line[wl] != ' ') {
        return false;
    }
    *msg = line + wl + 1;
    *msg_len = len - wl - 1;
    return true;
}

/* True when line[0..len) is exactly word. */
static bool
is_exactly(const char *line, size_t len, const char *word)
{
    return len == strlen(word) && memcmp(line, word, len) == 0;
}

/* The data block of `bytes` bytes plus "\r\n" after a header line of
 * line_len bytes plus "\r\n" (VALUE, CONFIG): a reply of this kind when it
 * is all there, 0 with *need when not yet, RINGCACHE_EPROTO when the block
 * does not end in "\r\n". See mcp_parse for the return convention. */
static long
data_block(const char *line, size_t line_len, size_t avail, uint64_t bytes,
           enum mcp_kind kind, struct mcp_reply *r, size_t *need)
{
    size_t head = line_len + 2;

    if (avail < head + bytes + 2) {
        *need = head + bytes + 2;
        return 0;
    }
    if (line[head + bytes] != '\r' || line[head + bytes + 1] != '\n') {
        return RINGCACHE_EPROTO;
    }
    r->kind = kind;
    r->data = line + head;
    r->data_len = bytes;
    return (long)(head + bytes + 2);
}

/* Parse a VALUE line (without "\r\n") whose data block follows; see
 * mcp_parse for the return convention. */
static long
parse_value(const char *line, size_t line_len, size_t avail, size_t max_value,
            struct mcp_reply *r, size_t *need)
{
    const char *tok[6];
    size_t tlen[6];
    uint64_t v, bytes;
    int n;

    n = split(line, line_len, tok, tlen, 6);
    if (n != 4 && n != 5) {
        return RINGCACHE_EPROTO;
    }
    if (mcp_check_key(tok[1], tlen[1]) != 0) {
        return RINGCACHE_EPROTO;
    }
    r->key = tok[1];
    r->key_len = tlen[1];
    if (parse_u64(tok[2], tlen[2], UINT32_MAX, &v) != 0) {
        return RINGCACHE_EPROTO;
    }
    r->flags = (uint32_t)v;
    if (parse_u64(tok[3], tlen[3], max_value, &bytes) != 0) {
        return RINGCACHE_EPROTO;
    }
    r->has_cas = n == 5;
    r->cas = 0;
    if (n == 5 && parse_u64(tok[4], tlen[4], UINT64_MAX, &r->cas) != 0) {
        return RINGCACHE_EPROTO;
    }
    return data_block(line, line_len, avail, bytes, MCP_VALUE, r, need);
}

/* Parse "CONFIG <epoch> <bytes>" (line without "\r\n") and its data
 * block, like a VALUE. */
static long
parse_config(const char *line, size_t line_len, size_t avail, size_t max_value,
             struct mcp_reply *r, size_t *need)
{
    const char *tok[4];
    size_t tlen[4];
    uint64_t bytes;

    if (split(line, line_len, tok, tlen, 4) != 3 ||
        parse_u64(tok[1], tlen[1], UINT64_MAX, &r->epoch) != 0 ||
        parse_u64(tok[2], tlen[2], max_value, &bytes) != 0) {
        return RINGCACHE_EPROTO;
    }
    return data_block(line, line_len, avail, bytes, MCP_CONFIG, r, need);
}

/* A SERVER_ERROR message of the cluster extension: "MOVED <epoch> <addr>"
 * or "TRYAGAIN <epoch>". Changes r only when it is one. */
static void
parse_redirect(const char *msg, size_t len, struct mcp_reply *r)
{
    const char *tok[4];
    size_t tlen[4];
    uint64_t epoch;
    int n;

    n = split(msg, len, tok, tlen, 4);
    if (n == 3 && tlen[0] == 5 && memcmp(tok[0], "MOVED", 5) == 0 &&
        parse_u64(tok[1], tlen[1], UINT64_MAX, &epoch) == 0 &&
        tlen[2] <= MCP_ADDR_MAX) {
        r->kind = MCP_MOVED;
        r->epoch = epoch;
        r->key = tok[2];
        r->key_len = tlen[2];
    } else if (n == 2 && tlen[0] == 8 && memcmp(tok[0], "TRYAGAIN", 8) == 0 &&
               parse_u64(tok[1], tlen[1], UINT64_MAX, &epoch) == 0) {
        r->kind = MCP_TRYAGAIN;
        r->epoch = epoch;
    }
}

long
mcp_parse(const char *buf, size_t len, size_t max_value, struct mcp_reply *r,
          size_t *need)
{
    const char *nl, *msg;
    size_t line_len, msg_len, scan;

    memset(r, 0, sizeof(*r));
    if (len == 0) {
        /* buf may be NULL here (a connection that has read nothing yet). */
        *need = 1;
        return 0;
    }
    scan = len < MCP_LINE_MAX ? len : MCP_LINE_MAX;
    nl = memchr(buf, '\n', scan);
    if (nl == NULL) {
        if (len >= MCP_LINE_MAX) {
            return RINGCACHE_EPROTO;
        }
        *need = len + 1;
        return 0;
    }
    /* memcached always ends reply lines with \r\n. */
    if (nl == buf || nl[-1] != '\r') {
        return RINGCACHE_EPROTO;
    }
    line_len = (size_t)(nl - buf) - 1;
    if (memchr(buf, '\r', line_len) != NULL || memchr(buf, '\0', line_len) != NULL) {
        return RINGCACHE_EPROTO;
    }
    if (line_len > 6 && memcmp(buf, "VALUE ", 6) == 0) {
        return parse_value(buf, line_len, len, max_value, r, need);
    }
    if (line_len > 7 && memcmp(buf, "CONFIG ", 7) == 0) {
        return parse_config(buf, line_len, len, max_value, r, need);
    }
    if (is_exactly(buf, line_len, "END")) {
        r->kind = MCP_END;
    } else if (is_exactly(buf, line_len, "STORED")) {
        r->kind = MCP_STORED;
    } else if (is_exactly(buf, line_len, "NOT_STORED")) {
        r->kind = MCP_NOT_STORED;
    } else if (is_exactly(buf, line_len, "EXISTS")) {
        r->kind = MCP_EXISTS;
    } else if (is_exactly(buf, line_len, "NOT_FOUND")) {
        r->kind = MCP_NOT_FOUND;
    } else if (is_exactly(buf, line_len, "DELETED")) {
        r->kind = MCP_DELETED;
    } else if (is_exactly(buf, line_len, "TOUCHED")) {
        r->kind = MCP_TOUCHED;
    } else if (is_exactly(buf, line_len, "OK")) {
        r->kind = MCP_OK;
    } else if (line_len > 0 && buf[0] >= '0' && buf[0] <= '9') {
        if (parse_u64(buf, line_len, UINT64_MAX, &r->number) != 0) {
            return RINGCACHE_EPROTO;
        }
        r->kind = MCP_NUMBER;
    } else if (line_len > 5 && memcmp(buf, "STAT ", 5) == 0) {
        const char *name = buf + 5, *sp;
        size_t rest = line_len - 5;

        sp = memchr(name, ' ', rest);
        if (sp == NULL || sp == name) {
            return RINGCACHE_EPROTO;
        }
        r->kind = MCP_STAT;
        r->key = name;
        r->key_len = (size_t)(sp - name);
        r->data = sp + 1;
        r->data_len = rest - r->key_len - 1;
    } else if (starts_word(buf, line_len, "CLIENT_ERROR", &msg, &msg_len)) {
        r->kind = MCP_CLIENT_ERROR;
        r->data = msg;
        r->data_len = msg_len;
    } else if (line_len > 6 && memcmp(buf, "EPOCH ", 6) == 0) {
        const char *tok[4];
        size_t tlen[4];

        if (split(buf, line_len, tok, tlen, 4) != 3 ||
            parse_u64(tok[1], tlen[1], UINT64_MAX, &r->epoch) != 0 ||
            parse_u64(tok[2], tlen[2], UINT64_MAX, &r->pending) != 0) {
            return RINGCACHE_EPROTO;
        }
        r->kind = MCP_EPOCH;
    } else if (starts_word(buf, line_len, "SERVER_ERROR", &msg, &msg_len)) {
        r->kind = MCP_SERVER_ERROR;
        r->data = msg;
        r->data_len = msg_len;
        parse_redirect(msg, msg_len, r);
    } else if (starts_word(buf, line_len, "ERROR", &msg, &msg_len)) {
        r->kind = MCP_ERROR;
        r->data = msg;
        r->data_len = msg_len;
    } else {
        return RINGCACHE_EPROTO;
    }
    return (long)(line_len + 2);
}

/* True when the message contains needle (messages are not NUL-terminated). */
static bool
msg_has(const struct mcp_reply *r, const char *needle)
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
mcp_error_code(const struct mcp_reply *r)
{
    switch (r->kind) {
    case MCP_ERROR:
        return RINGCACHE_ECLIENT;
    case MCP_CLIENT_ERROR:
        if (msg_has(r, "non-numeric")) {
            return RINGCACHE_ENONNUMERIC;
        }
        return RINGCACHE_ECLIENT;
    case MCP_SERVER_ERROR:
        if (msg_has(r, "too large")) {
            return RINGCACHE_ETOOBIG;
        }
        return RINGCACHE_ESERVER;
    case MCP_MOVED:
        return RINGCACHE_EMOVED;
    case MCP_TRYAGAIN:
        return RINGCACHE_ETRYAGAIN;
    default:
        return 0;
    }
}

size_t
mcp_format_storage(char *buf, const char *cmd, const char *key,
                   size_t key_len, uint32_t flags, int32_t ttl, size_t bytes,
                   bool with_cas, uint64_t cas)
{
    int n;

    /* key_len <= 250 (checked by the caller), so this fits MCP_LINE_MAX. */
    if (with_cas) {
        n = snprintf(buf, MCP_LINE_MAX, "%s %.*s %u %d %zu %llu\r\n", cmd,
                     (int)key_len, key, (unsigned)flags, (int)ttl, bytes,
                     (unsigned long long)cas);
    } else {
        n = snprintf(buf, MCP_LINE_MAX, "%s %.*s %u %d %zu\r\n", cmd,
                     (int)key_len, key, (unsigned)flags, (int)ttl, bytes);
    }
    return (size_t)n;
}
