/*
 * mcreply: the reader of memcached replies (see mcreply.h), classic and
 * meta. Strict where being wrong would put the reader out of step (where a
 * line ends, the size of a data block), neutral about the rest: a line of
 * no known shape is MCR_OTHER, and the caller decides what it accepts.
 */
#include <stdint.h>
#include <string.h>

#include "proto/mcreply.h"

/* Parse a decimal unsigned number of exactly [s, s+len) into *out, at most
 * max. -1 on an empty token, a non-digit or overflow. */
static int
parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    size_t   i;

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
 * returns the count, or -1 on an empty token (double or edge space) or
 * more than max tokens. */
static int
split(const char *line, size_t len, const char **tok, size_t *tlen, int max)
{
    size_t start = 0, i;
    int    n = 0;

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

/* True when line[0..len) starts with the n bytes of lit. */
static bool
starts(const char *line, size_t len, const char *lit, size_t n)
{
    return len >= n && memcmp(line, lit, n) == 0;
}

/* True when line[0..len) is exactly the n bytes of word. */
static bool
is_word(const char *line, size_t len, const char *word, size_t n)
{
    return len == n && memcmp(line, word, n) == 0;
}

/* True when line[0..len) is the n bytes of word alone or followed by a
 * space; the message after it goes into r->data. */
static bool
word_msg(const char *line, size_t len, const char *word, size_t n, struct mcr_reply *r)
{
    if (!starts(line, len, word, n) || (len > n && line[n] != ' ')) {
        return false;
    }
    r->data = len == n ? line + len : line + n + 1;
    r->data_len = len == n ? 0 : len - n - 1;
    return true;
}

/* The data block of r->data_len bytes plus "\r\n" after the head line at
 * buf (r->line_len bytes plus "\r\n"), avail bytes in all; see mcr_parse
 * for the return convention. r already describes the head. */
static long
data_block(const char *buf, size_t avail, enum mcr_kind kind, struct mcr_reply *r, size_t *need)
{
    size_t head = r->line_len + 2, bytes = r->data_len;

    r->kind = kind;
    if (avail < head + bytes + 2) {
        *need = head + bytes + 2;
        return 0;
    }
    if (buf[head + bytes] != '\r' || buf[head + bytes + 1] != '\n') {
        return MCR_EPROTO;
    }
    r->data = buf + head;
    return (long)(head + bytes + 2);
}

/* The decimal field at line[*at..len), up to the next space or the end,
 * into *out (at most max; 1..20 digits). *at moves past the field; 0, or
 * -1 when it is not such a number. */
static int
field_u64(const char *line, size_t len, size_t *at, uint64_t max, uint64_t *out)
{
    size_t start = *at, end = start;

    while (end < len && line[end] != ' ') {
        end++;
    }
    *at = end;
    return parse_u64(line + start, end - start, max, out);
}

/* "VALUE <key> <flags> <bytes>[ <cas>]" (r->line_len bytes at buf, single
 * spaces, the key any bytes but spaces) and its data block. One pass: the
 * node's forwarding reads every VALUE it relays. */
static long
parse_value(const char *buf, size_t avail, size_t max_value, struct mcr_reply *r, size_t *need)
{
    size_t      len = r->line_len, at = 6;
    const char *sp;
    uint64_t    v;

    sp = memchr(buf + at, ' ', len - at);
    if (sp == NULL || sp == buf + at) {
        return MCR_EPROTO;
    }
    r->key = buf + at;
    r->key_len = (size_t)(sp - r->key);
    at += r->key_len + 1;
    if (field_u64(buf, len, &at, UINT32_MAX, &v) != 0 || at == len) {
        return MCR_EPROTO;
    }
    r->flags = (uint32_t)v;
    at++;
    if (field_u64(buf, len, &at, max_value, &v) != 0) {
        return MCR_EPROTO;
    }
    r->data_len = (size_t)v;
    if (at < len) {
        at++;
        r->has_cas = true;
        if (field_u64(buf, len, &at, UINT64_MAX, &r->cas) != 0 || at != len) {
            return MCR_EPROTO;
        }
    }
    return data_block(buf, avail, MCR_VALUE, r, need);
}

/* "CONFIG <epoch> <bytes>" and its data block, like a VALUE. */
static long
parse_config(const char *buf, size_t avail, size_t max_value, struct mcr_reply *r, size_t *need)
{
    const char *tok[4];
    size_t      tlen[4];
    uint64_t    bytes;

    if (split(buf, r->line_len, tok, tlen, 4) != 3 ||
        parse_u64(tok[1], tlen[1], UINT64_MAX, &r->epoch) != 0 ||
        parse_u64(tok[2], tlen[2], max_value, &bytes) != 0) {
        return MCR_EPROTO;
    }
    r->data_len = (size_t)bytes;
    return data_block(buf, avail, MCR_CONFIG, r, need);
}

/* A SERVER_ERROR message of the cluster extension: "MOVED <epoch> <addr>"
 * or "TRYAGAIN <epoch>". Changes r only when it is one. */
static void
parse_redirect(struct mcr_reply *r)
{
    const char *tok[4];
    size_t      tlen[4];
    uint64_t    epoch;
    int         n;

    n = split(r->data, r->data_len, tok, tlen, 4);
    if (n == 3 && is_word(tok[0], tlen[0], "MOVED", 5) &&
        parse_u64(tok[1], tlen[1], UINT64_MAX, &epoch) == 0 && tlen[2] <= MCR_ADDR_MAX) {
        r->kind = MCR_MOVED;
        r->epoch = epoch;
        r->key = tok[2];
        r->key_len = tlen[2];
    } else if (n == 2 && is_word(tok[0], tlen[0], "TRYAGAIN", 8) &&
               parse_u64(tok[1], tlen[1], UINT64_MAX, &epoch) == 0) {
        r->kind = MCR_TRYAGAIN;
        r->epoch = epoch;
    }
}

/* Clear what meta flags left in r (a line whose flags did not read). */
static void
meta_reset(struct mcr_reply *r)
{
    r->key = NULL;
    r->key_len = 0;
    r->flags = 0;
    r->has_cas = false;
    r->cas = 0;
    r->mflags = NULL;
    r->mflags_len = 0;
    r->mseen = 0;
    r->ttl = 0;
    r->size = 0;
    r->last_access = 0;
    r->hit_before = false;
    r->opaque = NULL;
    r->opaque_len = 0;
}

/* One meta flag token t[0..n) (n >= 1) into r: 0, or -1 when a flag a
 * reply can carry has an argument it cannot have. Other flag bytes are
 * skipped. */
static int
meta_flag(const char *t, size_t n, struct mcr_reply *r)
{
    const char *a = t + 1;
    size_t      an = n - 1;
    uint64_t    v;

    switch (t[0]) {
    case 'b':
    case 'W':
    case 'X':
    case 'Z':
        if (an != 0) {
            return -1;
        }
        r->mseen |= t[0] == 'b'   ? MCR_MF_B
                    : t[0] == 'W' ? MCR_MF_W
                    : t[0] == 'X' ? MCR_MF_X
                                  : MCR_MF_Z;
        return 0;
    case 'c':
        r->mseen |= MCR_MF_C;
        r->has_cas = true;
        return parse_u64(a, an, UINT64_MAX, &r->cas);
    case 'f':
        r->mseen |= MCR_MF_F;
        if (parse_u64(a, an, UINT32_MAX, &v) != 0) {
            return -1;
        }
        r->flags = (uint32_t)v;
        return 0;
    case 'h':
        r->mseen |= MCR_MF_H;
        if (an != 1 || (a[0] != '0' && a[0] != '1')) {
            return -1;
        }
        r->hit_before = a[0] == '1';
        return 0;
    case 'k':
        r->mseen |= MCR_MF_K;
        r->key = a;
        r->key_len = an;
        return an > 0 ? 0 : -1;
    case 'l':
        r->mseen |= MCR_MF_L;
        return parse_u64(a, an, UINT64_MAX, &r->last_access);
    case 'O':
        r->mseen |= MCR_MF_O;
        r->opaque = a;
        r->opaque_len = an;
        return 0;
    case 's':
        r->mseen |= MCR_MF_S;
        return parse_u64(a, an, UINT64_MAX, &r->size);
    case 't':
        r->mseen |= MCR_MF_T;
        if (an == 2 && a[0] == '-' && a[1] == '1') {
            r->ttl = -1;
            return 0;
        }
        if (parse_u64(a, an, INT64_MAX, &v) != 0) {
            return -1;
        }
        r->ttl = (int64_t)v;
        return 0;
    default:
        return 0;
    }
}

/* The meta flags s[0..len) (after the code and one space; len 0: none)
 * into r. 0, or -1 (r's meta fields cleared) when they are not single
 * space separated flags that read (meta_flag). */
static int
parse_mflags(const char *s, size_t len, struct mcr_reply *r)
{
    size_t start = 0, i;

    r->mflags = s;
    r->mflags_len = len;
    for (i = 0; len > 0 && i <= len; i++) {
        if (i == len || s[i] == ' ') {
            if (i == start || meta_flag(s + start, i - start, r) != 0) {
                meta_reset(r);
                return -1;
            }
            start = i + 1;
        }
    }
    return 0;
}

/* True when line[0..len) is the two-letter code alone or followed by a
 * space and flags that read (parse_mflags fills r). */
static bool
meta_code(const char *line, size_t len, const char *code, struct mcr_reply *r)
{
    if (len < 2 || line[0] != code[0] || line[1] != code[1]) {
        return false;
    }
    if (len == 2) {
        r->mflags = line + 2;
        return true;
    }
    return line[2] == ' ' && len > 3 && parse_mflags(line + 3, len - 3, r) == 0;
}

/* "VA <size>[ <flags>]" (r->line_len bytes at buf) and its data block. */
static long
parse_va(const char *buf, size_t avail, size_t max_value, struct mcr_reply *r, size_t *need)
{
    size_t   len = r->line_len, at = 3;
    uint64_t v;

    if (field_u64(buf, len, &at, max_value, &v) != 0) {
        return MCR_EPROTO;
    }
    r->data_len = (size_t)v;
    if (at < len && (at + 1 == len || parse_mflags(buf + at + 1, len - at - 1, r) != 0)) {
        return MCR_EPROTO;
    }
    if (at == len) {
        r->mflags = buf + len;
    }
    return data_block(buf, avail, MCR_META_VA, r, need);
}

/* "ME <key>[ <k=v>...]": a non-empty key, the rest as data. */
static enum mcr_kind
parse_me(const char *line, size_t len, struct mcr_reply *r)
{
    const char *key = line + 3, *sp;
    size_t      rest = len - 3;

    sp = memchr(key, ' ', rest);
    r->key = key;
    r->key_len = sp != NULL ? (size_t)(sp - key) : rest;
    if (r->key_len == 0) {
        r->key = NULL;
        return MCR_OTHER;
    }
    r->data = sp != NULL ? sp + 1 : line + len;
    r->data_len = sp != NULL ? rest - r->key_len - 1 : 0;
    return MCR_META_ME;
}

/* "STAT <name> <value>": a non-empty name, the value is the rest. */
static enum mcr_kind
parse_stat(const char *line, size_t len, struct mcr_reply *r)
{
    const char *name = line + 5, *sp;
    size_t      rest = len - 5;

    sp = memchr(name, ' ', rest);
    if (sp == NULL || sp == name) {
        return MCR_OTHER;
    }
    r->key = name;
    r->key_len = (size_t)(sp - name);
    r->data = sp + 1;
    r->data_len = rest - r->key_len - 1;
    return MCR_STAT;
}

/* "EPOCH <active> <pending>". */
static enum mcr_kind
parse_epoch(const char *line, size_t len, struct mcr_reply *r)
{
    const char *tok[4];
    size_t      tlen[4];

    if (split(line, len, tok, tlen, 4) != 3 ||
        parse_u64(tok[1], tlen[1], UINT64_MAX, &r->epoch) != 0 ||
        parse_u64(tok[2], tlen[2], UINT64_MAX, &r->pending) != 0) {
        r->epoch = 0;
        r->pending = 0;
        return MCR_OTHER;
    }
    return MCR_EPOCH;
}

/* The kind of a line that is a unit by itself (not a VALUE or CONFIG
 * head), filling r's fields for it. Dispatched on the first byte: the
 * node's forwarding classifies every reply it relays. */
static enum mcr_kind
classify(const char *line, size_t len, struct mcr_reply *r)
{
#define WORD(w) is_word(line, len, w, sizeof(w) - 1)
    switch (len > 0 ? line[0] : '\0') {
    case 'C':
        if (word_msg(line, len, "CLIENT_ERROR", 12, r)) {
            return MCR_CLIENT_ERROR;
        }
        break;
    case 'D':
        if (WORD("DELETED")) {
            return MCR_DELETED;
        }
        break;
    case 'E':
        if (WORD("END")) {
            return MCR_END;
        }
        if (WORD("EXISTS")) {
            return MCR_EXISTS;
        }
        if (starts(line, len, "EPOCH ", 6)) {
            return parse_epoch(line, len, r);
        }
        if (word_msg(line, len, "ERROR", 5, r)) {
            return MCR_ERROR;
        }
        if (meta_code(line, len, "EN", r)) {
            return MCR_META_EN;
        }
        if (meta_code(line, len, "EX", r)) {
            return MCR_META_EX;
        }
        break;
    case 'H':
        if (meta_code(line, len, "HD", r)) {
            return MCR_META_HD;
        }
        break;
    case 'M':
        if (WORD("MN")) {
            return MCR_META_MN;
        }
        if (len > 3 && starts(line, len, "ME ", 3)) {
            return parse_me(line, len, r);
        }
        break;
    case 'N':
        if (WORD("NOT_FOUND")) {
            return MCR_NOT_FOUND;
        }
        if (WORD("NOT_STORED")) {
            return MCR_NOT_STORED;
        }
        if (meta_code(line, len, "NF", r)) {
            return MCR_META_NF;
        }
        if (meta_code(line, len, "NS", r)) {
            return MCR_META_NS;
        }
        break;
    case 'O':
        if (WORD("OK")) {
            return MCR_OK;
        }
        break;
    case 'S':
        if (WORD("STORED")) {
            return MCR_STORED;
        }
        if (len > 5 && starts(line, len, "STAT ", 5)) {
            return parse_stat(line, len, r);
        }
        if (word_msg(line, len, "SERVER_ERROR", 12, r)) {
            r->kind = MCR_SERVER_ERROR;
            parse_redirect(r);
            return r->kind;
        }
        break;
    case 'T':
        if (WORD("TOUCHED")) {
            return MCR_TOUCHED;
        }
        break;
    case '0':
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7':
    case '8':
    case '9':
        if (parse_u64(line, len, UINT64_MAX, &r->number) == 0) {
            return MCR_NUMBER;
        }
        break;
    default:
        break;
    }
#undef WORD
    return MCR_OTHER;
}

long
mcr_line(const char *buf, size_t len, size_t *need)
{
    const char *nl;

    if (len == 0) {
        /* buf may be NULL here (a connection that has read nothing yet). */
        *need = 1;
        return 0;
    }
    nl = memchr(buf, '\n', len < MCR_LINE_MAX ? len : MCR_LINE_MAX);
    if (nl == NULL) {
        if (len >= MCR_LINE_MAX) {
            return MCR_EPROTO;
        }
        *need = len + 1;
        return 0;
    }
    /* memcached always ends reply lines with \r\n. */
    if (nl == buf || nl[-1] != '\r') {
        return MCR_EPROTO;
    }
    return (long)(nl - buf) + 1;
}

long
mcr_parse(const char *buf, size_t len, size_t max_value, struct mcr_reply *r, size_t *need)
{
    long n;

    memset(r, 0, sizeof(*r));
    n = mcr_line(buf, len, need);
    if (n <= 0) {
        return n;
    }
    if (max_value > SIZE_MAX / 2) {
        max_value = SIZE_MAX / 2; /* head + block + 2 never wraps */
    }
    r->line_len = (size_t)n - 2;
    if (starts(buf, r->line_len, "VALUE ", 6)) {
        return parse_value(buf, len, max_value, r, need);
    }
    if (starts(buf, r->line_len, "CONFIG ", 7)) {
        return parse_config(buf, len, max_value, r, need);
    }
    if (starts(buf, r->line_len, "VA ", 3)) {
        return parse_va(buf, len, max_value, r, need);
    }
    r->kind = classify(buf, r->line_len, r);
    return n;
}
