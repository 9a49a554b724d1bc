/*
 * libFuzzer target: arbitrary bytes as a node's replies. Reads reply units
 * back to back with proto/mcreply.c as the node's forwarding and
 * libringcache do, checks what each unit claims against the buffer, that
 * a shorter read of the same bytes asks for more instead of failing, that
 * the client (client/mcproto.c) takes each unit whole or refuses it, and
 * feeds CONFIG payloads to the membership parser as the client does.
 */
#include <stdlib.h>
#include <string.h>

#include "client/mcproto.h"
#include "client/ringcache.h"
#include "proto/mcreply.h"
#include "ring/ring.h"

#define MAX_VALUE 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A complete unit of n bytes: every strict prefix must be "need more"
 * (never an error, never a different unit), with need within the unit;
 * the client may refuse a prefix only when it refuses the unit. */
static void
check_prefixes(const char *buf, long n, bool client_takes)
{
    struct mcr_reply r;
    size_t           need, cut[3] = { (size_t)n - 1, (size_t)n / 2, 1 };
    int              i;

    for (i = 0; i < 3; i++) {
        char *p;
        long  got;

        if (cut[i] == 0 || cut[i] >= (size_t)n) {
            continue;
        }
        p = malloc(cut[i]);
        memcpy(p, buf, cut[i]);
        need = 0;
        got = mcr_parse(p, cut[i], MAX_VALUE, &r, &need);
        if (got != 0 || need <= cut[i] || need > (size_t)n) {
            abort();
        }
        need = 0;
        got = mcp_parse(p, cut[i], MAX_VALUE, &r, &need);
        if (got == 0 ? need <= cut[i] || need > (size_t)n
                     : got != RINGCACHE_EPROTO || client_takes) {
            abort();
        }
        free(p);
    }
}

/* What a parsed unit says must hold in buf[0..n). */
static void
check_unit(const char *buf, long n, const struct mcr_reply *r)
{
    const char *end = buf + n;

    if (r->kind < MCR_VALUE || r->kind > MCR_OTHER || r->line_len + 2 > (size_t)n ||
        buf[r->line_len] != '\r' || buf[r->line_len + 1] != '\n' ||
        memchr(buf, '\n', r->line_len) != NULL) {
        abort();
    }
    if (r->key != NULL && (r->key < buf || r->key + r->key_len > end)) {
        abort();
    }
    if (r->data != NULL && (r->data < buf || r->data + r->data_len > end)) {
        abort();
    }
    switch (r->kind) {
    case MCR_VALUE:
    case MCR_META_VA:
    case MCR_CONFIG:
        /* The unit is the head, the block, "\r\n", and nothing else. */
        if (r->data != buf + r->line_len + 2 || r->data_len > MAX_VALUE ||
            (size_t)n != r->line_len + 2 + r->data_len + 2 ||
            (r->kind == MCR_VALUE && (r->key_len == 0 || memchr(r->key, ' ', r->key_len)))) {
            abort();
        }
        break;
    case MCR_MOVED:
        if (r->key_len == 0 || r->key_len > MCR_ADDR_MAX || mcp_error_code(r) != RINGCACHE_EMOVED) {
            abort();
        }
        break;
    case MCR_TRYAGAIN:
        if (mcp_error_code(r) != RINGCACHE_ETRYAGAIN) {
            abort();
        }
        break;
    default:
        /* Every other unit is its line alone. */
        if ((size_t)n != r->line_len + 2) {
            abort();
        }
        break;
    }
    if (r->kind == MCR_CONFIG) {
        struct ring_members *m = NULL;
        struct ring         *ring;
        char                 err[256];

        if (ring_members_parse(r->data, r->data_len, "fuzz", &m, err, sizeof(err)) == RING_OK) {
            ring = ring_build(m);
            ring_free(ring);
            ring_members_free(m);
        }
    }
}

/* The client takes the unit at buf exactly as mcreply read it (n bytes,
 * the same fields), or refuses it; true when it takes it. */
static bool
check_client(const char *buf, size_t avail, long n, const struct mcr_reply *want)
{
    struct mcr_reply r;
    size_t           need;
    long             got = mcp_parse(buf, avail, MAX_VALUE, &r, &need);

    if (got == RINGCACHE_EPROTO) {
        return false;
    }
    if (got != n || r.kind != want->kind || r.kind == MCR_OTHER || r.key != want->key ||
        r.key_len != want->key_len || r.data != want->data || r.data_len != want->data_len ||
        r.flags != want->flags || r.cas != want->cas || r.number != want->number ||
        r.epoch != want->epoch || r.pending != want->pending ||
        (r.kind == MCR_VALUE && mcp_check_key(r.key, r.key_len) != 0) ||
        memchr(buf, '\r', r.line_len) != NULL || memchr(buf, '\0', r.line_len) != NULL) {
        abort();
    }
    (void)mcp_error_code(&r);
    return true;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char            *buf = malloc(size > 0 ? size : 1);
    struct mcr_reply r;
    size_t           off = 0, need;
    long             n;

    /* An exact-size copy: a read past the end trips ASan. */
    memcpy(buf, data, size);
    while (off < size) {
        need = 0;
        n = mcr_parse(buf + off, size - off, MAX_VALUE, &r, &need);
        if (n < 0) {
            /* The client never takes what the reader refuses. */
            if (mcp_parse(buf + off, size - off, MAX_VALUE, &r, &need) != RINGCACHE_EPROTO) {
                abort();
            }
            break;
        }
        if (n == 0) {
            if (need <= size - off) {
                abort();
            }
            break;
        }
        if ((size_t)n > size - off) {
            abort();
        }
        check_unit(buf + off, n, &r);
        check_prefixes(buf + off, n, check_client(buf + off, size - off, n, &r));
        off += (size_t)n;
    }
    free(buf);
    return 0;
}
