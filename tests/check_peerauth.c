/*
 * server/peerauth: the rc_peer proof against golden values (computed by
 * the hand-written HMAC-SHA256 this build replaced with libcrypto's, and
 * by Python's hmac: nodes of either build must agree), what changes it,
 * and the constant-time comparison's answers.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "server/peerauth.h"
#include "tests/suites.h"

/* The rc_peer proof: a golden value, and what changes it. */
START_TEST(test_peerauth)
{
    static const uint8_t tok[] = "0123456789abcdef0123456789abcdef";
    static const char   *nonce = "00112233445566778899aabbccddeeff";
    char                 p[PEERAUTH_PROOF_HEX + 1], q[PEERAUTH_PROOF_HEX + 1];

    peerauth_proof(tok, 32, "ringcache", "node-a", nonce, "node-b", p);
    ck_assert_str_eq(p, "692df7004710d1dccc6e0dc016f04716674aa953faf865683a5b61ad7442acbe");
    ck_assert(peerauth_check(tok, 32, "ringcache", "node-a", nonce, "node-b", p, 64));
    ck_assert(!peerauth_check(tok, 32, "ringcache", "node-a", nonce, "node-b", p, 63));
    ck_assert(!peerauth_check(tok, 31, "ringcache", "node-a", nonce, "node-b", p, 64));
    /* Another nonce, either id, the cluster: another proof. */
    peerauth_proof(tok, 32, "ringcache", "node-a", "00112233445566778899aabbccddeefe", "node-b", q);
    ck_assert_str_ne(p, q);
    peerauth_proof(tok, 32, "ringcache", "node-b", nonce, "node-a", q);
    ck_assert_str_ne(p, q);
    /* The fields are length-prefixed: moving a byte between them counts. */
    peerauth_proof(tok, 32, "ringcache", "node-an", nonce, "ode-b", q);
    ck_assert_str_ne(p, q);
    peerauth_proof(tok, 32, "ringcach", "node-a", nonce, "node-b", q);
    ck_assert_str_ne(p, q);
}
END_TEST

/* Keys longer than SHA-256's block (hashed first), empty and NULL fields,
 * an empty key: the old build's answers. */
START_TEST(test_peerauth_edges)
{
    static const char *nonce = "0123456789abcdef0123456789abcdef";
    uint8_t            key[100];
    char               p[PEERAUTH_PROOF_HEX + 1];
    int                i;

    for (i = 0; i < 100; i++) {
        key[i] = (uint8_t)(i * 7 + 1);
    }
    peerauth_proof(key, 100, "c", "", "ffeeddccbbaa99887766554433221100", NULL, p);
    ck_assert_str_eq(p, "867bb14a8589cadaea4d360cf64924522d455c99f423bc256415800e7c50f257");
    peerauth_proof(key, 0, "", "x", "", "y", p);
    ck_assert_str_eq(p, "9984cd8c4ad6aaf1eea2b55be5c5e4326e2b5b2071fbf698357905ce966f8347");
    peerauth_proof(key, 64, "prod-cluster", "n1", nonce, "n22", p);
    ck_assert_str_eq(p, "e339e59b55df77678a97e8cc2fbaa29d6b59ecd1f8a64ec21c9093bcfda8706f");
    ck_assert(peerauth_check(key, 64, "prod-cluster", "n1", nonce, "n22", p, strlen(p)));
    ck_assert(!peerauth_check(key, 64, "prod-cluster", "n1", nonce, "n22", "", 0));
}
END_TEST

START_TEST(test_equal)
{
    ck_assert(peerauth_equal("token", 5, "token", 5));
    ck_assert(peerauth_equal("", 0, "", 0));
    ck_assert(!peerauth_equal("token", 5, "tokeN", 5));
    ck_assert(!peerauth_equal("Token", 5, "token", 5));
    ck_assert(!peerauth_equal("token", 5, "token!", 6));
    ck_assert(!peerauth_equal("token!", 6, "token", 5));
    ck_assert(!peerauth_equal("", 0, "x", 1));
    /* Lengths that differ by a multiple of 256 still differ. */
    {
        static uint8_t z[512];

        ck_assert(!peerauth_equal(z, 256, z, 512));
    }
}
END_TEST

Suite *
peerauth_suite(void)
{
    Suite *s = suite_create("peerauth");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_peerauth);
    tcase_add_test(tc, test_peerauth_edges);
    tcase_add_test(tc, test_equal);
    suite_add_tcase(s, tc);
    return s;
}
