/*
 * ring/sha256: SHA-256 against the FIPS 180-2 examples (and the long
 * messages of its appendix), HMAC-SHA256 against RFC 4231's seven test
 * cases, the constant-time comparison's answers, and ring/peerauth's
 * proof built on them.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/peerauth.h"
#include "ring/sha256.h"
#include "tests/suites.h"

static void
hex(const uint8_t *p, size_t n, char *out)
{
    size_t i;

    for (i = 0; i < n; i++) {
        snprintf(out + 2 * i, 3, "%02x", p[i]);
    }
}

/* FIPS 180-2 appendix B (and the empty message). */
static const struct {
    const char *msg;
    const char *digest;
} sha_vectors[] = {
    { "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
    { "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
    { "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
    { "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmn"
      "opqrsmnopqrstnopqrstu",
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1" },
};

START_TEST(test_sha256_vectors)
{
    uint8_t d[SHA256_LEN];
    char    h[2 * SHA256_LEN + 1];

    sha256(sha_vectors[_i].msg, strlen(sha_vectors[_i].msg), d);
    hex(d, sizeof(d), h);
    ck_assert_str_eq(h, sha_vectors[_i].digest);
}
END_TEST

/* One million 'a', fed in uneven pieces (the buffering across blocks). */
START_TEST(test_sha256_million_a)
{
    static char   a[1000];
    struct sha256 s;
    uint8_t       d[SHA256_LEN];
    char          h[2 * SHA256_LEN + 1];
    size_t        left = 1000000, step = 1;

    memset(a, 'a', sizeof(a));
    sha256_init(&s);
    while (left > 0) {
        size_t n = step < left ? step : left;

        sha256_update(&s, a, n);
        left -= n;
        step = step % 983 + 7; /* 7 to 989 bytes, never past a */
    }
    sha256_final(&s, d);
    hex(d, sizeof(d), h);
    ck_assert_str_eq(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

/* RFC 4231 section 4: key and data built by hmac_case, the expected MAC
 * (case 5 truncated to 128 bits). */
static const char *hmac_expected[] = {
    "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
    "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
    "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
    "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
    "a3b6167473100ee06e0c796c2955552b",
    "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
    "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
};

static void
hmac_case(int i, uint8_t *key, size_t *klen, uint8_t *data, size_t *dlen)
{
    static const char *text[] = {
        "Hi There",
        "what do ya want for nothing?",
        NULL,
        NULL,
        "Test With Truncation",
        "Test Using Larger Than Block-Size Key - Hash Key First",
        "This is a test using a larger than block-size key and a larger than block-size data. "
        "The key needs to be hashed before being used by the HMAC algorithm.",
    };
    size_t k;

    switch (i) {
    case 0:
        memset(key, 0x0b, *klen = 20);
        break;
    case 1:
        memcpy(key, "Jefe", *klen = 4);
        break;
    case 2:
        memset(key, 0xaa, *klen = 20);
        memset(data, 0xdd, *dlen = 50);
        break;
    case 3:
        for (k = 0; k < 25; k++) {
            key[k] = (uint8_t)(k + 1);
        }
        *klen = 25;
        memset(data, 0xcd, *dlen = 50);
        break;
    case 4:
        memset(key, 0x0c, *klen = 20);
        break;
    default:
        memset(key, 0xaa, *klen = 131);
        break;
    }
    if (text[i] != NULL) {
        memcpy(data, text[i], *dlen = strlen(text[i]));
    }
}

START_TEST(test_hmac_rfc4231)
{
    uint8_t key[256], data[256], mac[SHA256_LEN];
    size_t  klen = 0, dlen = 0;
    char    h[2 * SHA256_LEN + 1];

    hmac_case(_i, key, &klen, data, &dlen);
    hmac_sha256(key, klen, data, dlen, mac);
    hex(mac, sizeof(mac), h);
    h[strlen(hmac_expected[_i])] = '\0';
    ck_assert_str_eq(h, hmac_expected[_i]);
}
END_TEST

/* The incremental form gives the one-call MAC, whatever the split. */
START_TEST(test_hmac_incremental)
{
    static const char  msg[] = "ringcache rc_peer v2\nnode-a\n0123456789abcdef\nnode-b\n";
    uint8_t            a[SHA256_LEN], b[SHA256_LEN];
    struct hmac_sha256 m;
    size_t             cut;

    hmac_sha256("secret", 6, msg, sizeof(msg) - 1, a);
    for (cut = 0; cut < sizeof(msg); cut++) {
        hmac_sha256_init(&m, "secret", 6);
        hmac_sha256_update(&m, msg, cut);
        hmac_sha256_update(&m, msg + cut, sizeof(msg) - 1 - cut);
        hmac_sha256_final(&m, b);
        ck_assert_mem_eq(a, b, SHA256_LEN);
    }
}
END_TEST

START_TEST(test_ct_equal)
{
    ck_assert(sha256_ct_equal("token", 5, "token", 5));
    ck_assert(sha256_ct_equal("", 0, "", 0));
    ck_assert(!sha256_ct_equal("token", 5, "tokeN", 5));
    ck_assert(!sha256_ct_equal("Token", 5, "token", 5));
    ck_assert(!sha256_ct_equal("token", 5, "token!", 6));
    ck_assert(!sha256_ct_equal("token!", 6, "token", 5));
    ck_assert(!sha256_ct_equal("", 0, "x", 1));
    /* Lengths that differ by a multiple of 256 still differ. */
    {
        static uint8_t z[512];

        ck_assert(!sha256_ct_equal(z, 256, z, 512));
    }
}
END_TEST

/* ring/peerauth: the rc_peer proof, a golden value (Python's hmac over
 * the same length-prefixed fields), and what changes it. */
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

Suite *
sha256_suite(void)
{
    Suite *s = suite_create("sha256");
    TCase *tc = tcase_create("core");

    tcase_add_loop_test(tc, test_sha256_vectors, 0,
                        (int)(sizeof(sha_vectors) / sizeof(sha_vectors[0])));
    tcase_add_test(tc, test_sha256_million_a);
    tcase_add_loop_test(tc, test_hmac_rfc4231, 0,
                        (int)(sizeof(hmac_expected) / sizeof(hmac_expected[0])));
    tcase_add_test(tc, test_hmac_incremental);
    tcase_add_test(tc, test_ct_equal);
    tcase_add_test(tc, test_peerauth);
    suite_add_tcase(s, tc);
    return s;
}
