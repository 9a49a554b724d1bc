/*
 * proto_util: shared text-protocol helpers; see proto_util.h.
 */
#include "config.h"
#include "server/proto_util.h"

#include "lib/util.h"
#include "server/store.h"
#include "server/thread.h"

#include <stdarg.h>
#include <stdio.h>

const char PROTO_ERR_FORMAT[] = "CLIENT_ERROR bad command line format";

/* Queue "<msg>\r\n" unless noreply. */
void
proto_reply_line(struct conn *c, const char *msg)
{
    if (c->noreply) {
        return;
    }
    conn_out_add(c, msg, strlen(msg));
    conn_out_add(c, "\r\n", 2);
}

/* Queue formatted text (always sent). */
void
proto_reply_printf(struct conn *c, const char *fmt, ...)
{
    char    buf[512];
    va_list ap;
    int     n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0) {
        return;
    }
    if ((size_t)n >= sizeof(buf)) {
        n = sizeof(buf) - 1;
    }
    conn_out_add(c, buf, (size_t)n);
}

/* An unsigned 64-bit decimal; see proto_util.h. */
bool
proto_parse_u64(const struct token *t, uint64_t *out)
{
    return util_parse_u64n(t->p, t->len, out);
}

/* 32-bit client flags. */
bool
proto_parse_u32(const struct token *t, uint32_t *out)
{
    uint64_t v;

    if (!proto_parse_u64(t, &v) || v > UINT32_MAX) {
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

/* A signed 32-bit decimal (exptime, bytes, delay). */
bool
proto_parse_i32(const struct token *t, int32_t *out)
{
    struct token digits = *t;
    bool         neg = false;
    uint64_t     v;

    if (digits.len > 0 && digits.p[0] == '-') {
        neg = true;
        digits.p++;
        digits.len--;
    }
    if (!proto_parse_u64(&digits, &v) || v > (uint64_t)INT32_MAX + (neg ? 1 : 0)) {
        return false;
    }
    *out = neg ? (int32_t)(-(int64_t)v) : (int32_t)v;
    return true;
}

/* Digits [p, p + len) into *out; false on anything else or when the value
 * passes max. */
static bool
tok_digits(const char *p, size_t len, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    size_t   i;

    for (i = 0; i < len; i++) {
        unsigned d = (unsigned char)p[i] - '0';

        if (d > 9 || v > (max - d) / 10) {
            return false;
        }
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

#define TOK32_MAX_LEN 11 /* mcmc's MCMC_TOKTO32_MAX */
#define TOK64_MAX_LEN 22 /* MCMC_TOKTO64_MAX */

/* See proto_util.h. */
bool
proto_tok_u32(const struct token *t, uint32_t *out)
{
    uint64_t v;

    if (t->len > TOK32_MAX_LEN || !tok_digits(t->p, t->len, UINT32_MAX, &v)) {
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

/* See proto_util.h. */
bool
proto_tok_u64(const struct token *t, uint64_t *out)
{
    return t->len <= TOK64_MAX_LEN && tok_digits(t->p, t->len, UINT64_MAX, out);
}

/* See proto_util.h. */
bool
proto_tok_i32(const struct token *t, int32_t *out)
{
    bool     neg = t->len > 0 && t->p[0] == '-';
    size_t   skip = neg ? 1 : 0;
    uint64_t v;

    if (t->len > TOK32_MAX_LEN ||
        !tok_digits(t->p + skip, t->len - skip, neg ? (uint64_t)INT32_MAX + 1 : INT32_MAX, &v)) {
        return false;
    }
    *out = neg ? (int32_t)(-(int64_t)v) : (int32_t)v;
    return true;
}

/* C's isspace() in the C locale. */
static bool
is_c_space(char ch)
{
    return ch == ' ' || (ch >= '\t' && ch <= '\r');
}

/*
 * strtoul/strtol's scan of [p, end): the magnitude (saturated past
 * UINT64_MAX, with *range set), the sign, and whether a digit was seen and
 * what follows the number is whitespace, a NUL or the end (the check of
 * memcached's safe_strto* functions).
 */
static bool
strto_scan(const char *p, const char *end, uint64_t *mag, bool *neg, bool *range)
{
    bool digits = false;

    *mag = 0;
    *neg = false;
    *range = false;
    while (p < end && is_c_space(*p)) {
        p++;
    }
    if (p < end && (*p == '+' || *p == '-')) {
        *neg = *p == '-';
        p++;
    }
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');

        digits = true;
        if (*mag > (UINT64_MAX - d) / 10) {
            *range = true;
        } else {
            *mag = *mag * 10 + d;
        }
    }
    return digits && (p == end || is_c_space(*p) || *p == '\0');
}

/* See proto_util.h. */
bool
proto_strtoul(const char *p, const char *end, uint64_t *out)
{
    uint64_t mag, v;
    bool     neg, range;

    if (!strto_scan(p, end, &mag, &neg, &range) || range) {
        return false;
    }
    v = neg ? (uint64_t)0 - mag : mag;
    /* safe_strtoul: a '-' that leaves the value negative as a long. */
    if (neg && v > (uint64_t)INT64_MAX) {
        return false;
    }
    *out = v;
    return true;
}

/* See proto_util.h. */
bool
proto_strtol(const char *p, const char *end, int64_t *out)
{
    uint64_t mag;
    bool     neg, range;

    if (!strto_scan(p, end, &mag, &neg, &range) || range ||
        mag > (uint64_t)INT64_MAX + (neg ? 1 : 0)) {
        return false;
    }
    *out = neg ? (int64_t)((uint64_t)0 - mag) : (int64_t)mag;
    return true;
}

/* See proto_util.h. */
bool
proto_block_ok(struct conn *c, struct store_item *it)
{
    const char *v = store_item_value(it);

    if (v[it->nbytes] == '\r' && v[it->nbytes + 1] == '\n') {
        return true;
    }
    REPLY(c, "CLIENT_ERROR bad data chunk");
    store_release(c->w->srv->store, it);
    return false;
}
