/*
 * mcreply_suite: proto/mcreply, the memcached reply reader the client and
 * the node's forwarding share, as the node sees it: where a unit ends,
 * what it is, lines of no known shape (MCR_OTHER) and keys of any bytes
 * but spaces, a VALUE head read before its block is there, the line
 * length limit. What a client accepts of it is client_suite's table.
 */
#include <stdlib.h>
#include <string.h>

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

Suite *
mcreply_suite(void)
{
    Suite *s = suite_create("mcreply");
    TCase *tc = tcase_create("parse");

    tcase_add_loop_test(tc, test_reply_table, 0,
                        (int)(sizeof(reply_cases) / sizeof(reply_cases[0])));
    tcase_add_test(tc, test_line_limit);
    tcase_add_test(tc, test_units_back_to_back);
    suite_add_tcase(s, tc);
    return s;
}
