/*
 * mcproto: client side of the memcached text protocol (see mcproto.h).
 * Replies are read by proto/mcreply; this file only narrows them: what a
 * memcached-compatible node would never send a client is RINGCACHE_EPROTO,
 * so the caller can drop the connection instead of reading out of step.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "client/mcproto.h"
#include "client/ringcache.h"
#include "lib/util.h"

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
mcp_format_stats(char *buf, const char *group)
{
    size_t n = group != NULL ? strlen(group) : 0, i;

    if (n > 32) {
        return 0;
    }
    for (i = 0; i < n; i++) {
        if (!((group[i] >= 'a' && group[i] <= 'z') || (group[i] >= 'A' && group[i] <= 'Z'))) {
            return 0;
        }
    }
    if (n == 0) {
        memcpy(buf, "stats\r\n", 7);
        return 7;
    }
    return (size_t)snprintf(buf, MCP_STATS_LINE_MAX, "stats %s\r\n", group);
}

/*
 * Meta commands
 */

int
mcp_meta_key(const char *key, size_t len)
{
    if (key == NULL || len == 0) {
        return RINGCACHE_EKEY;
    }
    if (mcp_check_key(key, len) == 0) {
        return 0;
    }
    return len <= RINGCACHE_META_BINARY_KEY_MAX ? 1 : RINGCACHE_EKEY;
}

bool
mcp_meta_writes(enum mcp_meta_cmd cmd, const struct ringcache_meta_opts *o)
{
    return cmd != MCP_MG || o->ttl != RINGCACHE_META_UNSET ||
           o->vivify_ttl != RINGCACHE_META_UNSET || o->recache_below != RINGCACHE_META_UNSET ||
           o->new_cas != 0;
}

/* A request line under construction: every append is bounded by
 * MCP_LINE_MAX; a line that would not fit comes out as length 0. */
struct mline {
    char  *buf;
    size_t len;
    bool   over;
};

static void mline_put(struct mline *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
mline_put(struct mline *l, const char *fmt, ...)
{
    va_list ap;
    int     n;

    if (l->over) {
        return;
    }
    va_start(ap, fmt);
    n = vsnprintf(l->buf + l->len, MCP_LINE_MAX - l->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= MCP_LINE_MAX - l->len) {
        l->over = true;
        return;
    }
    l->len += (size_t)n;
}

/* " <c>" when want has bit: a return flag. */
static void
mline_want(struct mline *l, unsigned want, unsigned bit, char c)
{
    if ((want & bit) != 0) {
        mline_put(l, " %c", c);
    }
}

/* " <c><v>" for a numeric option that is set. */
static void
mline_i32(struct mline *l, char c, int32_t v)
{
    if (v != RINGCACHE_META_UNSET) {
        mline_put(l, " %c%d", c, (int)v);
    }
}

static void
mline_u64(struct mline *l, char c, uint64_t v)
{
    if (v != 0) {
        mline_put(l, " %c%llu", c, (unsigned long long)v);
    }
}

/* The ms mode letter of a RINGCACHE_MS_* mode ('\0' for set, '?' for
 * none). */
static char
ms_mode_letter(unsigned mode)
{
    switch (mode) {
    case RINGCACHE_MS_SET:
        return '\0';
    case RINGCACHE_MS_ADD:
        return 'E';
    case RINGCACHE_MS_REPLACE:
        return 'R';
    case RINGCACHE_MS_APPEND:
        return 'A';
    case RINGCACHE_MS_PREPEND:
        return 'P';
    default:
        return '?';
    }
}

/* True when opaque is a token memcached copies back: 1..32 bytes, no
 * space or control character. */
static bool
opaque_ok(const char *opaque)
{
    size_t n = strlen(opaque), i;

    if (n == 0 || n > MCP_OPAQUE_MAX) {
        return false;
    }
    for (i = 0; i < n; i++) {
        if ((unsigned char)opaque[i] <= 0x20 || opaque[i] == 0x7f) {
            return false;
        }
    }
    return true;
}

size_t
mcp_format_meta(char *buf, enum mcp_meta_cmd cmd, const char *key, size_t key_len, size_t datalen,
                const struct ringcache_meta_opts *o, const char *opaque)
{
    static const char *const names[] = { "mg", "ms", "md", "ma" };
    struct mline             l = { .buf = buf };
    char                     kb[4 * ((RINGCACHE_META_BINARY_KEY_MAX + 2) / 3) + 1];
    int                      how = mcp_meta_key(key, key_len);
    char                     mode;

    if (how < 0 || (opaque != NULL && !opaque_ok(opaque)) || (unsigned)cmd > MCP_MA) {
        return 0;
    }
    if (how == 1) {
        key_len = util_b64_encode((const unsigned char *)key, key_len, kb);
        key = kb;
    }
    mline_put(&l, "%s %.*s", names[cmd], (int)key_len, key);
    if (cmd == MCP_MS) {
        mline_put(&l, " %zu", datalen);
    }
    if (how == 1) {
        mline_put(&l, " b");
    }
    switch (cmd) {
    case MCP_MG:
        mline_want(&l, o->want, RINGCACHE_WANT_VALUE, 'v');
        mline_want(&l, o->want, RINGCACHE_WANT_CAS, 'c');
        mline_want(&l, o->want, RINGCACHE_WANT_FLAGS, 'f');
        mline_want(&l, o->want, RINGCACHE_WANT_TTL, 't');
        mline_want(&l, o->want, RINGCACHE_WANT_SIZE, 's');
        mline_want(&l, o->want, RINGCACHE_WANT_HIT, 'h');
        mline_want(&l, o->want, RINGCACHE_WANT_LAST_ACCESS, 'l');
        /* A binary key is not asked back: memcached 1.6.18 echoes it
         * decoded, spaces and all. */
        mline_want(&l, how == 0 ? o->want : 0, RINGCACHE_WANT_KEY, 'k');
        if (o->no_bump) {
            mline_put(&l, " u");
        }
        mline_i32(&l, 'T', o->ttl);
        mline_i32(&l, 'N', o->vivify_ttl);
        mline_i32(&l, 'R', o->recache_below);
        mline_u64(&l, 'C', o->cas);
        mline_u64(&l, 'E', o->new_cas);
        break;
    case MCP_MS:
        mode = ms_mode_letter(o->mode);
        if (mode == '?') {
            return 0;
        }
        mline_want(&l, o->want, RINGCACHE_WANT_CAS, 'c');
        mline_want(&l, o->want, RINGCACHE_WANT_SIZE, 's');
        mline_want(&l, how == 0 ? o->want : 0, RINGCACHE_WANT_KEY, 'k');
        mline_i32(&l, 'T', o->ttl);
        if (o->flags != 0) {
            mline_put(&l, " F%u", (unsigned)o->flags);
        }
        mline_u64(&l, 'C', o->cas);
        mline_u64(&l, 'E', o->new_cas);
        if (o->invalidate) {
            mline_put(&l, " I");
        }
        if (mode != '\0') {
            mline_put(&l, " M%c", mode);
        }
        if (o->mode == RINGCACHE_MS_APPEND || o->mode == RINGCACHE_MS_PREPEND) {
            mline_i32(&l, 'N', o->vivify_ttl);
        }
        break;
    case MCP_MD:
        mline_want(&l, how == 0 ? o->want : 0, RINGCACHE_WANT_KEY, 'k');
        mline_u64(&l, 'C', o->cas);
        mline_u64(&l, 'E', o->new_cas);
        if (o->invalidate) {
            mline_put(&l, " I");
            mline_i32(&l, 'T', o->ttl);
        }
        break;
    case MCP_MA:
        if (o->mode != RINGCACHE_MA_INCR && o->mode != RINGCACHE_MA_DECR) {
            return 0;
        }
        mline_want(&l, o->want, RINGCACHE_WANT_VALUE, 'v');
        mline_want(&l, o->want, RINGCACHE_WANT_CAS, 'c');
        mline_want(&l, o->want, RINGCACHE_WANT_TTL, 't');
        mline_want(&l, how == 0 ? o->want : 0, RINGCACHE_WANT_KEY, 'k');
        if (o->mode == RINGCACHE_MA_DECR) {
            mline_put(&l, " MD");
        }
        if (o->delta != 1) {
            mline_put(&l, " D%llu", (unsigned long long)o->delta);
        }
        mline_i32(&l, 'T', o->ttl);
        mline_i32(&l, 'N', o->vivify_ttl);
        if (o->vivify_ttl != RINGCACHE_META_UNSET) {
            mline_u64(&l, 'J', o->initial);
        }
        mline_u64(&l, 'C', o->cas);
        mline_u64(&l, 'E', o->new_cas);
        break;
    }
    if (opaque != NULL) {
        mline_put(&l, " O%s", opaque);
    }
    mline_put(&l, "\r\n");
    return l.over ? 0 : l.len;
}

size_t
mcp_format_mn(char *buf)
{
    memcpy(buf, "mn\r\n", 4);
    return 4;
}
