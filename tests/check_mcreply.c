/*
 * mcreply_suite: proto/mcreply, the memcached reply reader the client and
 * the node's forwarding share, as the node sees it: where a unit ends,
 * what it is, lines of no known shape (MCR_OTHER) and keys of any bytes
 * but spaces, a VALUE head read before its block is there, the line
 * length limit. What a client accepts of it is client_suite's table.
 * The meta replies (VA HD EN NF NS EX MN ME and their flags) have a table
 * of their own, read whole and in pieces; the "meta_request" case checks
 * the meta request lines client/mcproto builds from the options struct.
 */
#include <stdlib.h>
#include <string.h>

#include "client/mcproto.h"
#include "client/ringcache.h"
#include "lib/util.h"
#include "proto/mcreply.h"
#include "tests/suites.h"

struct reply_case {
    const char   *bytes;
    size_t        len;       /* 0: strlen(bytes) */
    size_t        max_value; /* 0: 1 MiB */
    long          want;      /* bytes consumed, 0 = need more, < 0 error */
    enum mcr_kind kind;      /* also checked when want is 0 (0: line incomplete) */
    size_t        line_len;
    const char   *key; /* NULL: not checked */
    size_t        key_len;
    const char   *data; /* NULL: not checked */
    size_t        need; /* want 0: what it asks for */
};

static const struct reply_case reply_cases[] = {
    { "OK\r\nEND\r\n", 0, 0, 4, MCR_OK, 2, NULL, 0, NULL, 0 },
    { "42\r\n", 0, 0, 4, MCR_NUMBER, 2, NULL, 0, NULL, 0 },
    /* lines of no known shape: a relay passes them on */
    { "FOO\r\n", 0, 0, 5, MCR_OTHER, 3, NULL, 0, NULL, 0 },
    { "\r\n", 0, 0, 2, MCR_OTHER, 0, NULL, 0, NULL, 0 },
    { "12a\r\n", 0, 0, 5, MCR_OTHER, 3, NULL, 0, NULL, 0 },
    { "STAT x\r\n", 0, 0, 8, MCR_OTHER, 6, NULL, 0, NULL, 0 },
    { "EPOCH 3\r\n", 0, 0, 9, MCR_OTHER, 7, NULL, 0, NULL, 0 },
    { "ERRORS\r\n", 0, 0, 8, MCR_OTHER, 6, NULL, 0, NULL, 0 },
    { "STORED \r\n", 0, 0, 9, MCR_OTHER, 7, NULL, 0, NULL, 0 },
    { "EN\rD\r\n", 0, 0, 6, MCR_OTHER, 4, NULL, 0, NULL, 0 },
    { "END\0\r\n", 6, 0, 6, MCR_OTHER, 4, NULL, 0, NULL, 0 },
    /* keys the node stores: any bytes but spaces */
    { "VALUE a\x01"
      "b 0 1\r\nx\r\n",
      0, 0, 18, MCR_VALUE, 13,
      "a\x01"
      "b",
      3, "x", 0 },
    { "VALUE a\rb 0 1\r\nx\r\n", 0, 0, 18, MCR_VALUE, 13, "a\rb", 3, "x", 0 },
    { "VALUE a\0b 0 1\r\nx\r\n", 18, 0, 18, MCR_VALUE, 13, "a\0b", 3, "x", 0 },
    { "VALUE k 7 2 9\r\nhi\r\n", 0, 0, 19, MCR_VALUE, 13, "k", 1, "hi", 0 },
    /* a VALUE head before its block: described, and the unit's length asked for */
    { "VALUE k 0 3\r\n", 0, 0, 0, MCR_VALUE, 11, "k", 1, NULL, 18 },
    { "VALUE k 0 3\r\nab", 0, 0, 0, MCR_VALUE, 11, "k", 1, NULL, 18 },
    { "CONFIG 5 4\r\nab", 0, 0, 0, MCR_CONFIG, 10, NULL, 0, NULL, 18 },
    { "VALUE k 0", 0, 0, 0, 0, 0, NULL, 0, NULL, 10 },
    /* heads that announce a block of unknown size: out of step */
    { "VALUE k  0 1\r\n", 0, 0, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "VALUE \r\n", 0, 0, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "VALUE k 0 1 2 3\r\n", 0, 0, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "VALUE k 0 5\r\n", 0, 4, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "VALUE k 0 1\r\nxY\n", 0, 0, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "CONFIG \r\n", 0, 0, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "CONFIG 1 x\r\n", 0, 0, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    /* where a line ends: the first \n, after a \r */
    { "END\n", 0, 0, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "E\nND\r\n", 0, 0, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "\n", 0, 0, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "END\r", 0, 0, 0, 0, 0, NULL, 0, NULL, 5 },
    { "", 0, 0, 0, 0, 0, NULL, 0, NULL, 1 },
    /* the cluster extensions, and near misses that stay SERVER_ERROR */
    { "SERVER_ERROR MOVED 7 127.0.0.1:1\r\n", 0, 0, 34, MCR_MOVED, 32, "127.0.0.1:1", 11,
      "MOVED 7 127.0.0.1:1", 0 },
    { "SERVER_ERROR TRYAGAIN 9\r\n", 0, 0, 25, MCR_TRYAGAIN, 23, NULL, 0, "TRYAGAIN 9", 0 },
    { "SERVER_ERROR MOVED 7 a b\r\n", 0, 0, 26, MCR_SERVER_ERROR, 24, NULL, 0, "MOVED 7 a b", 0 },
    { "SERVER_ERROR TRYAGAIN\r\n", 0, 0, 23, MCR_SERVER_ERROR, 21, NULL, 0, "TRYAGAIN", 0 },
    { "SERVER_ERROR\r\n", 0, 0, 14, MCR_SERVER_ERROR, 12, NULL, 0, "", 0 },
    /* meta replies: the shapes (their flags have meta_cases) */
    { "VA 2 f1\r\nhi\r\n", 0, 0, 13, MCR_META_VA, 7, NULL, 0, "hi", 0 },
    { "VA 3 kfoo\r\nab", 0, 0, 0, MCR_META_VA, 9, "foo", 3, NULL, 16 },
    { "VA 3", 0, 0, 0, 0, 0, NULL, 0, NULL, 5 },
    { "VA 5\r\n", 0, 4, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "VA x\r\n", 0, 0, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "VA 1 \r\nx\r\n", 0, 0, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "VA 1  c1\r\nx\r\n", 0, 0, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "VA 1 cx\r\nx\r\n", 0, 0, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "VA 1\r\nxY\n", 0, 0, MCR_EPROTO, 0, 0, NULL, 0, NULL, 0 },
    { "VA\r\n", 0, 0, 4, MCR_OTHER, 2, NULL, 0, NULL, 0 },
    { "HD\r\n", 0, 0, 4, MCR_META_HD, 2, NULL, 0, NULL, 0 },
    { "HD c5 Oab\r\n", 0, 0, 11, MCR_META_HD, 9, NULL, 0, NULL, 0 },
    { "HD \r\n", 0, 0, 5, MCR_OTHER, 3, NULL, 0, NULL, 0 },
    { "HD c\r\n", 0, 0, 6, MCR_OTHER, 4, NULL, 0, NULL, 0 },
    { "HDX\r\n", 0, 0, 5, MCR_OTHER, 3, NULL, 0, NULL, 0 },
    { "EN\r\n", 0, 0, 4, MCR_META_EN, 2, NULL, 0, NULL, 0 },
    { "EN O7 kk\r\n", 0, 0, 10, MCR_META_EN, 8, "k", 1, NULL, 0 },
    { "END\r\n", 0, 0, 5, MCR_END, 3, NULL, 0, NULL, 0 },
    { "NF\r\n", 0, 0, 4, MCR_META_NF, 2, NULL, 0, NULL, 0 },
    { "NS\r\n", 0, 0, 4, MCR_META_NS, 2, NULL, 0, NULL, 0 },
    { "EX c0\r\n", 0, 0, 7, MCR_META_EX, 5, NULL, 0, NULL, 0 },
    { "MN\r\n", 0, 0, 4, MCR_META_MN, 2, NULL, 0, NULL, 0 },
    { "MN x\r\n", 0, 0, 6, MCR_OTHER, 4, NULL, 0, NULL, 0 },
    { "ME foo exp=-1 la=2\r\n", 0, 0, 20, MCR_META_ME, 18, "foo", 3, "exp=-1 la=2", 0 },
    { "ME foo\r\n", 0, 0, 8, MCR_META_ME, 6, "foo", 3, "", 0 },
    { "ME \r\n", 0, 0, 5, MCR_OTHER, 3, NULL, 0, NULL, 0 },
    { "ME\r\n", 0, 0, 4, MCR_OTHER, 2, NULL, 0, NULL, 0 },
};

START_TEST(test_reply_table)
{
    const struct reply_case *rc = &reply_cases[_i];
    size_t                   len = rc->len != 0 ? rc->len : strlen(rc->bytes), need = 0;
    struct mcr_reply         r;
    char                    *buf;
    long                     got;

    /* A private copy so a read past the end shows up under ASan. */
    buf = malloc(len + 1);
    memcpy(buf, rc->bytes, len);
    got = mcr_parse(len > 0 ? buf : NULL, len, rc->max_value != 0 ? rc->max_value : 1048576, &r,
                    &need);
    ck_assert_msg(got == rc->want, "case %d: got %ld want %ld", _i, got, rc->want);
    if (got >= 0) {
        ck_assert_msg(r.kind == rc->kind, "case %d: kind %d want %d", _i, r.kind, rc->kind);
    }
    if (got == 0) {
        ck_assert_msg(need == rc->need, "case %d: need %zu want %zu", _i, need, rc->need);
    }
    if (got >= 0 && r.kind != 0) {
        ck_assert_uint_eq(r.line_len, rc->line_len);
        if (rc->key != NULL) {
            ck_assert_uint_eq(r.key_len, rc->key_len);
            ck_assert(memcmp(r.key, rc->key, r.key_len) == 0);
        }
        if (rc->data != NULL) {
            ck_assert_uint_eq(r.data_len, strlen(rc->data));
            ck_assert(memcmp(r.data, rc->data, r.data_len) == 0);
        }
    }
    if (got == 0 && r.kind == MCR_VALUE) {
        ck_assert_ptr_null(r.data);
        ck_assert_uint_eq(rc->need, r.line_len + 2 + r.data_len + 2);
    }
    free(buf);
}
END_TEST

START_TEST(test_line_limit)
{
    char             buf[MCR_LINE_MAX + 8];
    struct mcr_reply r;
    size_t           need;

    /* The longest line, "\r\n" included, is MCR_LINE_MAX bytes. */
    memset(buf, 'A', sizeof(buf));
    memcpy(buf + MCR_LINE_MAX - 2, "\r\n", 2);
    ck_assert_int_eq(mcr_parse(buf, sizeof(buf), 10, &r, &need), MCR_LINE_MAX);
    ck_assert_int_eq(r.kind, MCR_OTHER);
    memset(buf, 'A', sizeof(buf));
    memcpy(buf + MCR_LINE_MAX - 1, "\r\n", 2);
    ck_assert_int_eq(mcr_parse(buf, sizeof(buf), 10, &r, &need), MCR_EPROTO);
    /* Without a line end: more is worth waiting for up to the limit. */
    memset(buf, 'A', sizeof(buf));
    ck_assert_int_eq(mcr_parse(buf, MCR_LINE_MAX - 1, 10, &r, &need), 0);
    ck_assert_uint_eq(need, MCR_LINE_MAX);
    ck_assert_int_eq(mcr_parse(buf, MCR_LINE_MAX, 10, &r, &need), MCR_EPROTO);
}
END_TEST

START_TEST(test_units_back_to_back)
{
    /* A forwarded multi-get part and what follows it, unit by unit. */
    static const char stream[] =
        "VALUE a 1 1\r\nx\r\nVALUE b\tc 2 3 9\r\ny\r\n\r\nEND\r\nSERVER_ERROR TRYAGAIN 4\r\n42\r\n";
    static const enum mcr_kind kinds[] = { MCR_VALUE, MCR_VALUE, MCR_END, MCR_TRYAGAIN,
                                           MCR_NUMBER };
    size_t                     off = 0, k = 0, need, len = sizeof(stream) - 1;
    struct mcr_reply           r;
    long                       got;

    while (off < len) {
        got = mcr_parse(stream + off, len - off, 100, &r, &need);
        ck_assert_int_gt(got, 0);
        ck_assert_uint_lt(k, 5);
        ck_assert_int_eq(r.kind, kinds[k]);
        k++;
        off += (size_t)got;
    }
    ck_assert_uint_eq(k, 5);
    ck_assert_uint_eq(r.number, 42);
}
END_TEST

/* Meta replies and what their flags read as. */
struct meta_case {
    const char   *bytes;
    long          want; /* bytes consumed (whole units only) */
    enum mcr_kind kind;
    uint32_t      mseen;
    uint64_t      cas;
    uint32_t      flags;
    int64_t       ttl;
    uint64_t      size;
    uint64_t      last_access;
    bool          hit_before;
    const char   *key;    /* the k token, NULL: none */
    const char   *opaque; /* NULL: none */
    const char   *data;   /* VA: the block */
    const char   *mflags; /* the flags text */
};

static const struct meta_case meta_cases[] = {
    { "VA 3 c2 f5 t60 s3 kfoo h0 l0 Oabc\r\nbar\r\n", 40, MCR_META_VA,
      MCR_MF_C | MCR_MF_F | MCR_MF_T | MCR_MF_S | MCR_MF_K | MCR_MF_H | MCR_MF_L | MCR_MF_O, 2, 5,
      60, 3, 0, false, "foo", "abc", "bar", "c2 f5 t60 s3 kfoo h0 l0 Oabc" },
    { "VA 0 c1 f0 t-1 s0 kfoo Oabc W\r\n\r\n", 33, MCR_META_VA,
      MCR_MF_C | MCR_MF_F | MCR_MF_T | MCR_MF_S | MCR_MF_K | MCR_MF_O | MCR_MF_W, 1, 0, -1, 0, 0,
      false, "foo", "abc", "", "c1 f0 t-1 s0 kfoo Oabc W" },
    { "VA 3 c3 t30 Z X\r\nbar\r\n", 22, MCR_META_VA, MCR_MF_C | MCR_MF_T | MCR_MF_Z | MCR_MF_X, 3,
      0, 30, 0, 0, false, NULL, NULL, "bar", "c3 t30 Z X" },
    { "VA 1\r\n5\r\n", 9, MCR_META_VA, 0, 0, 0, 0, 0, 0, false, NULL, NULL, "5", "" },
    { "HD c18446744073709551615 h1 l7\r\n", 32, MCR_META_HD, MCR_MF_C | MCR_MF_H | MCR_MF_L,
      UINT64_MAX, 0, 0, 0, 7, true, NULL, NULL, NULL, "c18446744073709551615 h1 l7" },
    { "HD f4294967295\r\n", 16, MCR_META_HD, MCR_MF_F, 0, UINT32_MAX, 0, 0, 0, false, NULL, NULL,
      NULL, "f4294967295" },
    /* unknown flags are skipped; b says the key is base64 */
    { "HD Q7 kYSBiCg== b\r\n", 19, MCR_META_HD, MCR_MF_K | MCR_MF_B, 0, 0, 0, 0, 0, false,
      "YSBiCg==", NULL, NULL, "Q7 kYSBiCg== b" },
    { "EN O12\r\n", 8, MCR_META_EN, MCR_MF_O, 0, 0, 0, 0, 0, false, NULL, "12", NULL, "O12" },
    { "NS O\r\n", 6, MCR_META_NS, MCR_MF_O, 0, 0, 0, 0, 0, false, NULL, "", NULL, "O" },
    { "NF kk\r\n", 7, MCR_META_NF, MCR_MF_K, 0, 0, 0, 0, 0, false, "k", NULL, NULL, "kk" },
    /* flags that do not read: the line is of no known shape */
    { "HD f4294967296\r\n", 16, MCR_OTHER, 0, 0, 0, 0, 0, 0, false, NULL, NULL, NULL, NULL },
    { "HD h2\r\n", 7, MCR_OTHER, 0, 0, 0, 0, 0, 0, false, NULL, NULL, NULL, NULL },
    { "HD t-2\r\n", 8, MCR_OTHER, 0, 0, 0, 0, 0, 0, false, NULL, NULL, NULL, NULL },
    { "HD Wx\r\n", 7, MCR_OTHER, 0, 0, 0, 0, 0, 0, false, NULL, NULL, NULL, NULL },
    { "NF k\r\n", 6, MCR_OTHER, 0, 0, 0, 0, 0, 0, false, NULL, NULL, NULL, NULL },
    { "EX c1 \r\n", 8, MCR_OTHER, 0, 0, 0, 0, 0, 0, false, NULL, NULL, NULL, NULL },
};

/* The fields of r against case mc. */
static void
check_meta_fields(const struct meta_case *mc, const struct mcr_reply *r, int i, const char *how)
{
    ck_assert_msg(r->kind == mc->kind, "meta case %d (%s): kind %d want %d", i, how, r->kind,
                  mc->kind);
    ck_assert_msg(r->mseen == mc->mseen, "meta case %d (%s): mseen %x want %x", i, how, r->mseen,
                  mc->mseen);
    ck_assert_uint_eq(r->cas, mc->cas);
    ck_assert(r->has_cas == ((mc->mseen & MCR_MF_C) != 0));
    ck_assert_uint_eq(r->flags, mc->flags);
    ck_assert_int_eq(r->ttl, mc->ttl);
    ck_assert_uint_eq(r->size, mc->size);
    ck_assert_uint_eq(r->last_access, mc->last_access);
    ck_assert(r->hit_before == mc->hit_before);
    if (mc->key != NULL) {
        ck_assert_uint_eq(r->key_len, strlen(mc->key));
        ck_assert(memcmp(r->key, mc->key, r->key_len) == 0);
    } else {
        ck_assert_ptr_null(r->key);
    }
    if (mc->opaque != NULL) {
        ck_assert_uint_eq(r->opaque_len, strlen(mc->opaque));
        ck_assert(memcmp(r->opaque, mc->opaque, r->opaque_len) == 0);
    } else {
        ck_assert_ptr_null(r->opaque);
    }
    if (mc->data != NULL) {
        ck_assert_uint_eq(r->data_len, strlen(mc->data));
        ck_assert(memcmp(r->data, mc->data, r->data_len) == 0);
    }
    if (mc->mflags != NULL) {
        ck_assert_uint_eq(r->mflags_len, strlen(mc->mflags));
        ck_assert(memcmp(r->mflags, mc->mflags, r->mflags_len) == 0);
    }
}

/* Whole, then followed by another unit (which must not be read into
 * this one). */
START_TEST(test_meta_table)
{
    const struct meta_case *mc = &meta_cases[_i];
    size_t                  len = strlen(mc->bytes), need = 0;
    struct mcr_reply        r;
    char                   *buf;
    long                    got;

    ck_assert_uint_eq(len, (size_t)mc->want);
    buf = malloc(len + 4);
    memcpy(buf, mc->bytes, len);
    got = mcr_parse(buf, len, 1048576, &r, &need);
    ck_assert_msg(got == mc->want, "meta case %d: got %ld want %ld", _i, got, mc->want);
    check_meta_fields(mc, &r, _i, "whole");
    memcpy(buf + len, "MN\r\n", 4);
    got = mcr_parse(buf, len + 4, 1048576, &r, &need);
    ck_assert_int_eq(got, mc->want);
    check_meta_fields(mc, &r, _i, "followed");
    got = mcr_parse(buf + len, 4, 1048576, &r, &need);
    ck_assert_int_eq(got, 4);
    ck_assert_int_eq(r.kind, MCR_META_MN);
    free(buf);
}
END_TEST

/* In pieces: every strict prefix asks for more (never an error, never
 * another unit), with a need that lies beyond it and within the unit;
 * a reader that grows its buffer to what need says gets the unit whole,
 * with the same fields. Covers the reply cases too. */
static void
check_pieces(const char *bytes, size_t len, long want, int i)
{
    struct mcr_reply r;
    size_t           cut, need, have = 0;
    char            *buf;
    long             got;
    int              steps = 0;

    for (cut = 0; cut < len; cut++) {
        buf = malloc(cut + 1);
        memcpy(buf, bytes, cut);
        need = 0;
        got = mcr_parse(cut > 0 ? buf : NULL, cut, 1048576, &r, &need);
        ck_assert_msg(got == 0, "case %d cut %zu: got %ld", i, cut, got);
        ck_assert_msg(need > cut && need <= (size_t)want, "case %d cut %zu: need %zu of %ld", i,
                      cut, need, want);
        free(buf);
    }
    /* The reader: start empty, grow to need each time. */
    for (;;) {
        buf = malloc(have + 1);
        memcpy(buf, bytes, have);
        got = mcr_parse(have > 0 ? buf : NULL, have, 1048576, &r, &need);
        free(buf);
        if (got != 0) {
            break;
        }
        ck_assert_uint_gt(need, have);
        have = need;
        ck_assert_int_lt(++steps, (int)len + 2);
    }
    ck_assert_int_eq(got, want);
    ck_assert_uint_eq(have, len);
}

START_TEST(test_meta_pieces)
{
    const struct meta_case *mc = &meta_cases[_i];
    struct mcr_reply        r;
    size_t                  need;

    check_pieces(mc->bytes, strlen(mc->bytes), mc->want, _i);
    ck_assert_int_eq(mcr_parse(mc->bytes, strlen(mc->bytes), 1048576, &r, &need), mc->want);
    check_meta_fields(mc, &r, _i, "pieces");
}
END_TEST

START_TEST(test_reply_pieces)
{
    const struct reply_case *rc = &reply_cases[_i];
    size_t                   len = rc->len != 0 ? rc->len : strlen(rc->bytes);

    /* Complete units read at the default block limit only. */
    if (rc->want > 0 && rc->max_value == 0 && (size_t)rc->want == len) {
        check_pieces(rc->bytes, len, rc->want, _i);
    }
}
END_TEST

/* A pipelined meta multi-get's replies, unit by unit. */
START_TEST(test_meta_stream)
{
    static const char stream[] = "VA 1 O0\r\na\r\nEN\r\nHD O2 X Z\r\nSERVER_ERROR MOVED 3 h:1\r\n"
                                 "VA 2 c9 O4\r\nbb\r\nMN\r\n";
    static const enum mcr_kind kinds[] = { MCR_META_VA, MCR_META_EN, MCR_META_HD,
                                           MCR_MOVED,   MCR_META_VA, MCR_META_MN };
    size_t                     off = 0, k = 0, need, len = sizeof(stream) - 1;
    struct mcr_reply           r;
    long                       got;

    while (off < len) {
        got = mcr_parse(stream + off, len - off, 100, &r, &need);
        ck_assert_int_gt(got, 0);
        ck_assert_uint_lt(k, 6);
        ck_assert_int_eq(r.kind, kinds[k]);
        if (k == 4) {
            ck_assert_uint_eq(r.cas, 9);
            ck_assert_uint_eq(r.opaque_len, 1);
            ck_assert_int_eq(r.opaque[0], '4');
            ck_assert_uint_eq(r.data_len, 2);
        }
        k++;
        off += (size_t)got;
    }
    ck_assert_uint_eq(k, 6);
}
END_TEST

/* What the client accepts of the meta replies (client/mcproto.c). */
START_TEST(test_meta_client)
{
    struct mcr_reply r;
    size_t           need;

    ck_assert_int_eq(mcp_parse("HD c1\r\n", 7, 100, &r, &need), 7);
    ck_assert_int_eq(r.kind, MCR_META_HD);
    ck_assert_int_eq(mcp_parse("VA 1 t-1\r\n7\r\n", 13, 100, &r, &need), 13);
    ck_assert_int_eq(mcp_parse("HD c\r\n", 6, 100, &r, &need), RINGCACHE_EPROTO);
    ck_assert_int_eq(mcp_parse("HD O\ra\r\n", 8, 100, &r, &need), RINGCACHE_EPROTO);
    ck_assert_int_eq(mcp_parse("VA 1 c", 6, 100, &r, &need), 0);
}
END_TEST

/*
 * Meta request lines (client/mcproto.c)
 */

struct request_case {
    enum mcp_meta_cmd cmd;
    const char       *key;
    size_t            key_len; /* 0: strlen */
    size_t            datalen;
    const char       *opaque;
    void (*set)(struct ringcache_meta_opts *o);
    const char *want; /* NULL: refused (length 0) */
};

static void
o_none(struct ringcache_meta_opts *o)
{
    (void)o;
}

static void
o_all_mg(struct ringcache_meta_opts *o)
{
    o->want = 0xff;
    o->no_bump = 1;
    o->ttl = 30;
    o->vivify_ttl = 10;
    o->recache_below = 5;
    o->cas = 7;
    o->new_cas = 9;
}

static void
o_ms_add(struct ringcache_meta_opts *o)
{
    o->want = RINGCACHE_WANT_CAS | RINGCACHE_WANT_SIZE | RINGCACHE_WANT_VALUE;
    o->mode = RINGCACHE_MS_ADD;
    o->ttl = -1;
    o->flags = 4294967295u;
}

static void
o_ms_append(struct ringcache_meta_opts *o)
{
    o->want = 0;
    o->mode = RINGCACHE_MS_APPEND;
    o->vivify_ttl = 0;
    o->cas = 18446744073709551615u;
    o->invalidate = 1;
}

static void
o_ms_bad_mode(struct ringcache_meta_opts *o)
{
    o->mode = 9;
}

static void
o_md_inval(struct ringcache_meta_opts *o)
{
    o->want = RINGCACHE_WANT_KEY | RINGCACHE_WANT_VALUE;
    o->invalidate = 1;
    o->ttl = 30;
    o->cas = 3;
}

static void
o_md_ttl_only(struct ringcache_meta_opts *o)
{
    o->ttl = 30;
}

static void
o_ma_decr(struct ringcache_meta_opts *o)
{
    o->want |= RINGCACHE_WANT_TTL;
    o->mode = RINGCACHE_MA_DECR;
    o->delta = 5;
    o->vivify_ttl = 0;
    o->initial = 10;
}

static void
o_ma_bad_mode(struct ringcache_meta_opts *o)
{
    o->mode = RINGCACHE_MA_DECR + 1;
}

static const struct request_case request_cases[] = {
    { MCP_MG, "foo", 0, 0, NULL, o_none, "mg foo v c f\r\n" },
    { MCP_MG, "foo", 0, 0, "12", o_all_mg, "mg foo v c f t s h l k u T30 N10 R5 C7 E9 O12\r\n" },
    /* binary keys: base64 and b; their k is not asked */
    { MCP_MG, "a b\n", 0, 0, NULL, o_all_mg, "mg YSBiCg== b v c f t s h l u T30 N10 R5 C7 E9\r\n" },
    { MCP_MG, "\0", 1, 0, NULL, o_none, "mg AA== b v c f\r\n" },
    { MCP_MD, "\xff\0 ", 3, 0, NULL, o_none, "md /wAg b\r\n" },
    { MCP_MS, "k", 0, 3, NULL, o_none, "ms k 3 c\r\n" },
    { MCP_MS, "k", 0, 0, "x", o_ms_add, "ms k 0 c s T-1 F4294967295 ME Ox\r\n" },
    { MCP_MS, "k", 0, 5, NULL, o_ms_append, "ms k 5 C18446744073709551615 I MA N0\r\n" },
    { MCP_MS, "k", 0, 5, NULL, o_ms_bad_mode, NULL },
    { MCP_MD, "k", 0, 0, NULL, o_none, "md k\r\n" },
    { MCP_MD, "k", 0, 0, NULL, o_md_inval, "md k k C3 I T30\r\n" },
    { MCP_MD, "k", 0, 0, NULL, o_md_ttl_only, "md k\r\n" },
    { MCP_MA, "n", 0, 0, NULL, o_none, "ma n v c\r\n" },
    { MCP_MA, "n", 0, 0, NULL, o_ma_decr, "ma n v c t MD D5 N0 J10\r\n" },
    { MCP_MA, "n", 0, 0, NULL, o_ma_bad_mode, NULL },
    /* keys and opaques that cannot be sent */
    { MCP_MG, "", 0, 0, NULL, o_none, NULL },
    { MCP_MG, "k", 0, 0, "a b", o_none, NULL },
    { MCP_MG, "k", 0, 0, "", o_none, NULL },
    { MCP_MG, "k", 0, 0, "123456789012345678901234567890123", o_none, NULL },
};

START_TEST(test_meta_request)
{
    const struct request_case *rq = &request_cases[_i];
    struct ringcache_meta_opts o;
    char                       buf[MCP_LINE_MAX];
    size_t                     n, kl = rq->key_len != 0 ? rq->key_len : strlen(rq->key);

    ringcache_meta_opts_init(&o);
    rq->set(&o);
    n = mcp_format_meta(buf, rq->cmd, rq->key, kl, rq->datalen, &o, rq->opaque);
    if (rq->want == NULL) {
        ck_assert_msg(n == 0, "request case %d: %.*s", _i, (int)n, buf);
        return;
    }
    ck_assert_msg(n == strlen(rq->want) && memcmp(buf, rq->want, n) == 0,
                  "request case %d: got '%.*s' want '%s'", _i, (int)n, buf, rq->want);
}
END_TEST

START_TEST(test_meta_keys)
{
    char          key[RINGCACHE_KEY_MAX + 2], enc[256];
    unsigned char dec[256], bin[RINGCACHE_META_BINARY_KEY_MAX];
    size_t        i, n;

    memset(key, 'a', sizeof(key));
    ck_assert_int_eq(mcp_meta_key(key, RINGCACHE_KEY_MAX), 0);
    ck_assert_int_eq(mcp_meta_key(key, RINGCACHE_KEY_MAX + 1), RINGCACHE_EKEY);
    key[0] = ' ';
    ck_assert_int_eq(mcp_meta_key(key, RINGCACHE_META_BINARY_KEY_MAX), 1);
    ck_assert_int_eq(mcp_meta_key(key, RINGCACHE_META_BINARY_KEY_MAX + 1), RINGCACHE_EKEY);
    ck_assert_int_eq(mcp_meta_key(NULL, 1), RINGCACHE_EKEY);
    /* The longest binary key still makes a key of at most 250 bytes
     * (lib/util's base64, as the node decodes it). */
    for (i = 0; i < sizeof(bin); i++) {
        bin[i] = (unsigned char)(i * 7);
    }
    n = util_b64_encode(bin, sizeof(bin), enc);
    ck_assert_uint_le(n, RINGCACHE_KEY_MAX);
    ck_assert_int_eq(mcp_check_key(enc, n), 0);
    ck_assert_uint_eq(util_b64_decode(enc, n, dec), sizeof(bin));
    ck_assert(memcmp(dec, bin, sizeof(bin)) == 0);
    /* RFC 4648's vectors. */
    ck_assert_uint_eq(util_b64_encode((const unsigned char *)"fooba", 5, enc), 8);
    ck_assert(memcmp(enc, "Zm9vYmE=", 8) == 0);
    ck_assert_uint_eq(util_b64_decode("Zm9vYmFy", 8, dec), 6);
    ck_assert(memcmp(dec, "foobar", 6) == 0);
    ck_assert_uint_eq(util_b64_decode("Zm9", 3, dec), 0);
}
END_TEST

START_TEST(test_meta_writes)
{
    struct ringcache_meta_opts o;

    ringcache_meta_opts_init(&o);
    ck_assert(!mcp_meta_writes(MCP_MG, &o));
    ck_assert(mcp_meta_writes(MCP_MS, &o));
    ck_assert(mcp_meta_writes(MCP_MD, &o));
    ck_assert(mcp_meta_writes(MCP_MA, &o));
    o.no_bump = 1;
    o.cas = 5;
    ck_assert(!mcp_meta_writes(MCP_MG, &o));
    o.vivify_ttl = 0;
    ck_assert(mcp_meta_writes(MCP_MG, &o));
    ringcache_meta_opts_init(&o);
    o.recache_below = 3;
    ck_assert(mcp_meta_writes(MCP_MG, &o));
    ringcache_meta_opts_init(&o);
    o.ttl = 3;
    ck_assert(mcp_meta_writes(MCP_MG, &o));
}
END_TEST

Suite *
mcreply_suite(void)
{
    Suite *s = suite_create("mcreply");
    TCase *tc = tcase_create("parse");

    tcase_add_loop_test(tc, test_reply_table, 0,
                        (int)(sizeof(reply_cases) / sizeof(reply_cases[0])));
    tcase_add_test(tc, test_line_limit);
    tcase_add_test(tc, test_units_back_to_back);
    tcase_add_loop_test(tc, test_reply_pieces, 0,
                        (int)(sizeof(reply_cases) / sizeof(reply_cases[0])));
    suite_add_tcase(s, tc);
    tc = tcase_create("meta");
    tcase_add_loop_test(tc, test_meta_table, 0, (int)(sizeof(meta_cases) / sizeof(meta_cases[0])));
    tcase_add_loop_test(tc, test_meta_pieces, 0, (int)(sizeof(meta_cases) / sizeof(meta_cases[0])));
    tcase_add_test(tc, test_meta_stream);
    tcase_add_test(tc, test_meta_client);
    suite_add_tcase(s, tc);
    tc = tcase_create("meta_request");
    tcase_add_loop_test(tc, test_meta_request, 0,
                        (int)(sizeof(request_cases) / sizeof(request_cases[0])));
    tcase_add_test(tc, test_meta_keys);
    tcase_add_test(tc, test_meta_writes);
    suite_add_tcase(s, tc);
    return s;
}
