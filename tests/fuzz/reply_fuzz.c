/*
 * libFuzzer target: arbitrary bytes as a node's replies to libringcache.
 * Parses reply units back to back with client/mcproto.c as a connection
 * does, checks what each unit claims against the buffer, that a shorter
 * read of the same bytes asks for more instead of failing, and feeds CONFIG
 * payloads to the membership parser as the client does.
 */
#include <stdlib.h>
#include <string.h>

#include "client/mcproto.h"
#include "client/ringcache.h"
#include "ring/ring.h"

#define MAX_VALUE 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A complete unit of n bytes: every strict prefix must be "need more"
 * (never an error, never a different unit), with need within the unit. */
static void
check_prefixes(const char *buf, long n)
{
    struct mcp_reply r;
    size_t need, cut[3] = { (size_t)n - 1, (size_t)n / 2, 1 };
    int i;

    for (i = 0; i < 3; i++) {
        char *p;
        long got;

        if (cut[i] == 0 || cut[i] >= (size_t)n) {
            continue;
        }
        p = malloc(cut[i]);
        memcpy(p, buf, cut[i]);
        need = 0;
        got = mcp_parse(p, cut[i], MAX_VALUE, &r, &need);
        if (got != 0 || need <= cut[i] || need > (size_t)n) {
            abort();
        }
        free(p);
    }
}

/* What a parsed unit says must hold in buf[0..n). */
static void
check_unit(const char *buf, long n, const struct mcp_reply *r)
{
    const char *end = buf + n;

    if (r->key != NULL && (r->key < buf || r->key + r->key_len > end)) {
        abort();
    }
    if (r->data != NULL && (r->data < buf || r->data + r->data_len > end)) {
        abort();
    }
    switch (r->kind) {
    case MCP_VALUE:
        if (mcp_check_key(r->key, r->key_len) != 0 || r->data_len > MAX_VALUE) {
            abort();
        }
        break;
    case MCP_MOVED:
        if (r->key_len == 0 || r->key_len > MCP_ADDR_MAX ||
            mcp_error_code(r) != RINGCACHE_EMOVED) {
            abort();
        }
        break;
    case MCP_TRYAGAIN:
        if (mcp_error_code(r) != RINGCACHE_ETRYAGAIN) {
            abort();
        }
        break;
    case MCP_CONFIG: {
        struct ring_members *m = NULL;
        struct ring *ring;
        char err[256];

        if (r->data_len > MAX_VALUE) {
            abort();
        }
        if (ring_members_parse(r->data, r->data_len, "fuzz", &m, err, sizeof(err)) == RING_OK) {
            ring = ring_build(m);
            ring_free(ring);
            ring_members_free(m);
        }
        break;
    }
    default:
        break;
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size > 0 ? size : 1);
    struct mcp_reply r;
    size_t off = 0, need;
    long n;

    /* An exact-size copy: a read past the end trips ASan. */
    memcpy(buf, data, size);
    while (off < size) {
        need = 0;
        n = mcp_parse(buf + off, size - off, MAX_VALUE, &r, &need);
        if (n < 0) {
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
        check_prefixes(buf + off, n);
        (void)mcp_error_code(&r);
        off += (size_t)n;
    }
    free(buf);
    return 0;
}
