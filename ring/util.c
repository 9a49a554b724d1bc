/*
 * util: shared helpers; see util.h.
 */
#include "ring/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* See util.h. */
int64_t
util_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* See util.h. */
int64_t
util_coarse_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* See util.h. */
char *
util_fmt_u64(char *p, uint64_t v)
{
    char tmp[20];
    int  n = 0;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0) {
        *p++ = tmp[--n];
    }
    return p;
}

/* See util.h. */
bool
util_parse_u64n(const char *p, size_t len, uint64_t *out)
{
    uint64_t v = 0;
    size_t   i = 0;

    if (len > 1 && p[0] == '+') {
        i = 1;
    }
    if (len == 0 || len - i > 20) {
        return false;
    }
    for (; i < len; i++) {
        unsigned d = (unsigned char)p[i] - '0';

        if (d > 9 || v > (UINT64_MAX - d) / 10) {
            return false;
        }
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* See util.h. */
bool
util_parse_u64(const char *s, uint64_t *out)
{
    return util_parse_u64n(s, strlen(s), out);
}

/* See util.h. */
int
util_read_file(const char *path, size_t max, char **buf, size_t *len, char *err, size_t errlen)
{
    bool   in = strcmp(path, "-") == 0;
    FILE  *f = in ? stdin : fopen(path, "rb");
    char  *b = NULL;
    size_t n = 0, cap = 0;

    if (f == NULL) {
        if (errno == ENOENT) {
            return 1;
        }
        util_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    for (;;) {
        size_t got;

        if (cap - n < 4096) {
            char *nb;

            if (cap >= max) {
                util_set_err(err, errlen, "%s:1: file too large", path);
                goto fail;
            }
            cap = cap == 0 ? 8192 : cap * 2;
            nb = realloc(b, cap + 1);
            if (nb == NULL) {
                util_set_err(err, errlen, "%s: out of memory", path);
                goto fail;
            }
            b = nb;
        }
        got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            break;
        }
    }
    if (ferror(f)) {
        util_set_err(err, errlen, "%s: read error", path);
        goto fail;
    }
    if (!in) {
        fclose(f);
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return 0;
fail:
    if (!in) {
        fclose(f);
    }
    free(b);
    return -1;
}

/* See util.h. */
void
util_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t
util_b64_encode(const unsigned char *src, size_t n, char *out)
{
    size_t i, o = 0;

    for (i = 0; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8 | src[i + 2];

        out[o++] = b64_alphabet[v >> 18];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = b64_alphabet[(v >> 6) & 63];
        out[o++] = b64_alphabet[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)src[i] << 16 | (i + 1 < n ? (uint32_t)src[i + 1] << 8 : 0);

        out[o++] = b64_alphabet[v >> 18];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64_alphabet[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    return o;
}

/* The value of a base64 character, 64 for '=' (padding), -1 otherwise. */
static int
b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z') {
        return ch - 'A';
    }
    if (ch >= 'a' && ch <= 'z') {
        return ch - 'a' + 26;
    }
    if (ch >= '0' && ch <= '9') {
        return ch - '0' + 52;
    }
    if (ch == '+') {
        return 62;
    }
    if (ch == '/') {
        return 63;
    }
    return ch == '=' ? 64 : -1;
}

size_t
util_b64_decode(const char *src, size_t len, unsigned char *out)
{
    size_t   i, count = 0, o = 0;
    uint32_t block = 0;
    int      pad = 0;

    for (i = 0; i < len; i++) {
        count += b64_value((unsigned char)src[i]) >= 0;
    }
    if (count == 0 || count % 4 != 0) {
        return 0;
    }
    count = 0;
    for (i = 0; i < len; i++) {
        int v = b64_value((unsigned char)src[i]);

        if (v < 0) {
            continue;
        }
        if (v == 64) {
            pad++;
            v = 0;
        }
        block = block << 6 | (uint32_t)v;
        if (++count == 4) {
            out[o++] = (unsigned char)(block >> 16);
            out[o++] = (unsigned char)(block >> 8);
            out[o++] = (unsigned char)block;
            if (pad > 2) {
                return 0;
            }
            if (pad > 0) {
                return o - (size_t)pad;
            }
            count = 0;
            block = 0;
        }
    }
    return o;
}
