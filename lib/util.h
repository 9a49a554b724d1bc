/*
 * util: the small helpers every part of ringcache shares (the node, the
 * client library, ringctl), one copy of each: monotonic time, decimal
 * numbers, base64 and hex, reading a whole file, error messages. lib/util.c
 * (libutil.la) does no I/O; util_read_file is lib/util_io.c (libutil_io.la),
 * which the node and ringctl link and the client library does not.
 */
#ifndef LIB_UTIL_H
#define LIB_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Milliseconds on the monotonic clock (deadlines, rates, timeouts). */
int64_t util_now_ms(void);

/* Milliseconds on the coarse monotonic clock: a few ms of resolution and
 * no system call, for checks on every request (the node's stall check
 * compares it with the health ticker's beats, which use it too). */
int64_t util_coarse_ms(void);

/* Decimal digits of v at p (room for 20 bytes, no NUL); returns the end. */
char *util_fmt_u64(char *p, uint64_t v);

/* An unsigned decimal in p[0..len): digits only, with one optional
 * leading '+' (as strtoull takes it), that fits in 64 bits. */
bool util_parse_u64n(const char *p, size_t len, uint64_t *out);

/* The same for a NUL-terminated string (a command-line option value). */
bool util_parse_u64(const char *s, uint64_t *out);

/* Base64 (RFC 4648 alphabet, '=' padding), as memcached's meta protocol
 * uses for binary keys (the b flag). Encode n bytes of src into out (room
 * for 4 * ((n + 2) / 3) bytes, no NUL written); returns the length.
 * Decode len bytes of src into out (room for len * 3 / 4 bytes): bytes
 * outside the alphabet are skipped, the rest must come in groups of four
 * and decoding ends after the first group with padding; returns the
 * length, or 0 when src does not decode (memcached's rules). */
size_t util_b64_encode(const unsigned char *src, size_t n, char *out);
size_t util_b64_decode(const char *src, size_t len, unsigned char *out);

/* Base64 the strict way, as etcd's JSON gateway carries bytes: every byte
 * of src[0..len) in the alphabet, '=' padding only at the end and
 * optional. Decodes into out (room for len * 3 / 4 bytes), the length in
 * *outlen; false, with nothing in *outlen, when src does not decode. */
bool util_b64_decode_strict(const char *src, size_t len, unsigned char *out, size_t *outlen);

/* Lowercase hex of n bytes of src into out (room for 2n + 1 bytes, NUL
 * terminated). */
void util_hex(const void *src, size_t n, char *out);

/*
 * (lib/util_io.c) Read the whole file at path ("-": standard input) into a malloc'd,
 * NUL-terminated buffer (*buf, *len bytes before the NUL). At most max
 * bytes: a larger file is an error "path:1: file too large". 0, 1 when
 * the file does not exist (nothing set), or -1 with "path: reason" in err.
 */
int util_read_file(const char *path, size_t max, char **buf, size_t *len, char *err, size_t errlen);

/* printf into err (nothing when err is NULL or errlen 0). */
void util_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* LIB_UTIL_H */
