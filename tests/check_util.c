/*
 * lib/util: hex, and the strict base64 decoder the etcd store reads its
 * values with (the old private decoder's rules: every byte in the
 * alphabet, '=' padding optional and only at the end). The memcached-rule
 * decoder is tested with the meta protocol (check_store_meta.c). And the
 * decimal formatter and parser of post-images: every length and boundary
 * against snprintf, and what the parser refuses.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lib/util.h"
#include "tests/suites.h"

START_TEST(test_hex)
{
    static const unsigned char b[] = { 0x00, 0x01, 0x7f, 0x80, 0xab, 0xff };
    char                       out[2 * sizeof(b) + 1];

    util_hex(b, sizeof(b), out);
    ck_assert_str_eq(out, "00017f80abff");
    util_hex(b, 0, out);
    ck_assert_str_eq(out, "");
}
END_TEST

static const struct {
    const char *in;
    const char *out; /* NULL: does not decode */
    size_t      len;
} strict_cases[] = {
    { "", "", 0 },
    { "Zm9vYmFy", "foobar", 6 },
    { "Zm9vYg==", "foob", 4 },
    { "Zm9vYg", "foob", 4 }, /* padding is optional */
    { "Zm9vYmE=", "fooba", 5 },
    { "Zm9vYmE", "fooba", 5 },
    { "Zg=====", "f", 1 }, /* any run of trailing padding */
    { "Zh==", "f", 1 },    /* the unused bits are not checked */
    { "+/+/", "\xfb\xff\xbf", 3 },
    { "Z", NULL, 0 }, /* one character is not a byte */
    { "Zm9vY", NULL, 0 },
    { "Zm9v!", NULL, 0 }, /* not skipped, unlike memcached's rule */
    { "Zm 9v", NULL, 0 },
    { "Zg==Zg==", NULL, 0 }, /* padding inside */
    { "Zm9v\n", NULL, 0 },
    { "-_8=", NULL, 0 }, /* the URL alphabet is not this one */
};

START_TEST(test_b64_strict)
{
    const char   *in = strict_cases[_i].in;
    unsigned char out[16];
    size_t        n = 99;
    bool          ok = util_b64_decode_strict(in, strlen(in), out, &n);

    if (strict_cases[_i].out == NULL) {
        ck_assert_msg(!ok, "'%s' decoded", in);
        ck_assert_uint_eq(n, 99);
    } else {
        ck_assert_msg(ok, "'%s' did not decode", in);
        ck_assert_uint_eq(n, strict_cases[_i].len);
        ck_assert_mem_eq(out, strict_cases[_i].out, n);
    }
}
END_TEST

/* What util_b64_encode writes, the strict decoder reads back. */
START_TEST(test_b64_round_trip)
{
    unsigned char in[64], back[64];
    char          enc[4 * sizeof(in) / 3 + 4];
    size_t        len, n, e;

    for (len = 0; len <= sizeof(in); len++) {
        for (n = 0; n < len; n++) {
            in[n] = (unsigned char)(n * 37 + len);
        }
        e = util_b64_encode(in, len, enc);
        ck_assert(util_b64_decode_strict(enc, e, back, &n));
        ck_assert_uint_eq(n, len);
        ck_assert_mem_eq(back, in, len);
    }
}
END_TEST

/* One value both ways: formatted as snprintf does, parsed back. */
static void
u64_round_trip(uint64_t v)
{
    char     got[24], want[24], *end = util_fmt_u64(got, v);
    int      n = snprintf(want, sizeof(want), "%" PRIu64, v);
    uint64_t back = 0;

    ck_assert_int_eq((int)(end - got), n);
    ck_assert_mem_eq(got, want, (size_t)n);
    ck_assert_msg(util_parse_u64n(got, (size_t)n, &back), "%s did not parse", want);
    ck_assert_uint_eq(back, v);
}

/* Every power of ten and its neighbours, every power of two and its
 * neighbours, the extremes, and a walk of values of every length. */
START_TEST(test_u64_decimal)
{
    uint64_t v = 1, x = 0x9e3779b97f4a7c15ULL;
    int      i;

    u64_round_trip(0);
    u64_round_trip(UINT64_MAX);
    u64_round_trip(UINT64_MAX - 1);
    for (i = 0; i < 20; i++, v *= 10) {
        u64_round_trip(v - 1);
        u64_round_trip(v);
        u64_round_trip(v + 1);
    }
    for (i = 0; i < 64; i++) {
        u64_round_trip((1ULL << i) - 1);
        u64_round_trip(1ULL << i);
        u64_round_trip((1ULL << i) + 1);
    }
    for (i = 0; i < 100000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        u64_round_trip(x >> (i % 64));
    }
}
END_TEST

/* What the parser refuses, and the '+' it takes. */
START_TEST(test_u64_parse_refuses)
{
    static const char *bad[] = { "",
                                 "+",
                                 "-1",
                                 "1x",
                                 " 1",
                                 "18446744073709551616",
                                 "99999999999999999999",
                                 "000000000000000000001",
                                 "++1" };
    uint64_t           v = 0;
    size_t             i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(!util_parse_u64n(bad[i], strlen(bad[i]), &v), "'%s' parsed", bad[i]);
    }
    ck_assert(util_parse_u64n("+18446744073709551615", 21, &v));
    ck_assert_uint_eq(v, UINT64_MAX);
    ck_assert(util_parse_u64n("00000000000000000001", 20, &v));
    ck_assert_uint_eq(v, 1);
    ck_assert(util_parse_u64n("0000000000000000000", 19, &v));
    ck_assert_uint_eq(v, 0);
}
END_TEST

Suite *
util_suite(void)
{
    Suite *s = suite_create("util");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_hex);
    tcase_add_loop_test(tc, test_b64_strict, 0,
                        (int)(sizeof(strict_cases) / sizeof(strict_cases[0])));
    tcase_add_test(tc, test_b64_round_trip);
    tcase_add_test(tc, test_u64_decimal);
    tcase_add_test(tc, test_u64_parse_refuses);
    suite_add_tcase(s, tc);
    return s;
}
