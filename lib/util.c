/*
 * util: shared helpers without I/O (util_read_file is util_io.c); see
 * util.h.
 */
#include "lib/util.h"

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

/* "00" .. "99": two digits per division when formatting. */
static const char digit_pairs[201] = "00010203040506070809101112131415161718192021222324"
                                     "25262728293031323334353637383940414243444546474849"
                                     "50515253545556575859606162636465666768697071727374"
                                     "75767778798081828384858687888990919293949596979899";

/* See util.h. The length first (from the bit length, corrected by one
 * comparison), then the digits from the end two at a time: a post-image
 * carries a 19-digit CAS, formatted once per replicated write. */
char *
util_fmt_u64(char *p, uint64_t v)
{
    static const uint64_t pow10[20] = {
        1ULL,
        10ULL,
        100ULL,
        1000ULL,
        10000ULL,
        100000ULL,
        1000000ULL,
        10000000ULL,
        100000000ULL,
        1000000000ULL,
        10000000000ULL,
        100000000000ULL,
        1000000000000ULL,
        10000000000000ULL,
        100000000000000ULL,
        1000000000000000ULL,
        10000000000000000ULL,
        100000000000000000ULL,
        1000000000000000000ULL,
        10000000000000000000ULL,
    };
    unsigned t, n;
    char    *q;

    if (v < 10) {
        *p = (char)('0' + v);
        return p + 1;
    }
    t = ((64u - (unsigned)__builtin_clzll(v)) * 1233u) >> 12; /* about log10(2^bits) */
    n = t + 1 - (v < pow10[t]);
    q = p + n;
    while (v >= 100) {
        unsigned i = (unsigned)(v % 100) * 2;

        v /= 100;
        q -= 2;
        memcpy(q, digit_pairs + i, 2);
    }
    if (v >= 10) {
        memcpy(q - 2, digit_pairs + v * 2, 2);
    } else {
        q[-1] = (char)('0' + v);
    }
    return p + n;
}

/* See util.h. */
bool
util_parse_u64n(const char *p, size_t len, uint64_t *out)
{
    uint64_t v = 0;
    size_t   i = 0;
    bool     may_overflow;

    if (len > 1 && p[0] == '+') {
        i = 1;
    }
    if (len == 0 || len - i > 20) {
        return false;
    }
    /* 19 digits cannot overflow (10^19 - 1 < 2^64): only a 20-digit
     * number needs the check on each digit. */
    may_overflow = len - i == 20;
    for (; i < len; i++) {
        unsigned d = (unsigned char)p[i] - '0';

        if (d > 9 || (may_overflow && v > (UINT64_MAX - d) / 10)) {
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

/* See util.h. */
bool
util_b64_decode_strict(const char *src, size_t len, unsigned char *out, size_t *outlen)
{
    uint32_t block = 0;
    size_t   i, o = 0;

    while (len > 0 && src[len - 1] == '=') {
        len--;
    }
    if (len % 4 == 1) {
        return false;
    }
    for (i = 0; i < len; i++) {
        int v = b64_value((unsigned char)src[i]);

        if (v < 0 || v == 64) {
            return false;
        }
        block = block << 6 | (uint32_t)v;
        if (i % 4 == 3) {
            out[o++] = (unsigned char)(block >> 16);
            out[o++] = (unsigned char)(block >> 8);
            out[o++] = (unsigned char)block;
            block = 0;
        }
    }
    /* A last group of 2 or 3 characters: 1 or 2 bytes. */
    if (len % 4 != 0) {
        block <<= 6 * (4 - len % 4);
        out[o++] = (unsigned char)(block >> 16);
        if (len % 4 == 3) {
            out[o++] = (unsigned char)(block >> 8);
        }
    }
    *outlen = o;
    return true;
}

/* See util.h. */
void
util_hex(const void *src, size_t n, char *out)
{
    static const char    digits[] = "0123456789abcdef";
    const unsigned char *p = src;
    size_t               i;

    for (i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}
