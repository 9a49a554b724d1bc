/*
 * proto_util: shared text-protocol helpers; see proto_util.h.
 */
#include "config.h"
#include "server/proto_util.h"

#include "ring/util.h"
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
