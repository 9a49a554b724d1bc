/*
 * sha256: SHA-256 as FIPS 180-4 section 6.2 describes it (big-endian
 * words, 64 rounds per 64-byte block, the length in bits in the last
 * block), HMAC as RFC 2104 section 2 does, and a constant-time compare.
 */
#include "config.h"
#include "ring/sha256.h"

#include <string.h>

/* The first 32 bits of the fractional parts of the cube roots of the
 * first 64 primes (FIPS 180-4 4.2.2). */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t
ror(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

/* One 64-byte block into the state (FIPS 180-4 6.2.2). */
static void
sha256_block(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[64], a, b, c, d, e, f, g, hh;
    int      i;

    for (i = 0; i < 16; i++) {
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    }
    for (i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);

        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = h[0];
    b = h[1];
    c = h[2];
    d = h[3];
    e = h[4];
    f = h[5];
    g = h[6];
    hh = h[7];
    for (i = 0; i < 64; i++) {
        uint32_t s1 = ror(e, 6) ^ ror(e, 11) ^ ror(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = hh + s1 + ch + K[i] + w[i];
        uint32_t s0 = ror(a, 2) ^ ror(a, 13) ^ ror(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = s0 + maj;

        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
}

void
sha256_init(struct sha256 *s)
{
    /* The first 32 bits of the fractional parts of the square roots of
     * the first 8 primes (FIPS 180-4 5.3.3). */
    static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };

    memcpy(s->h, iv, sizeof(iv));
    s->bytes = 0;
    s->nbuf = 0;
}

void
sha256_update(struct sha256 *s, const void *data, size_t len)
{
    const uint8_t *p = data;

    s->bytes += len;
    if (s->nbuf > 0) {
        size_t take = SHA256_BLOCK - s->nbuf < len ? SHA256_BLOCK - s->nbuf : len;

        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take;
        p += take;
        len -= take;
        if (s->nbuf < SHA256_BLOCK) {
            return;
        }
        sha256_block(s->h, s->buf);
        s->nbuf = 0;
    }
    while (len >= SHA256_BLOCK) {
        sha256_block(s->h, p);
        p += SHA256_BLOCK;
        len -= SHA256_BLOCK;
    }
    memcpy(s->buf, p, len);
    s->nbuf = len;
}

void
sha256_final(struct sha256 *s, uint8_t out[SHA256_LEN])
{
    uint64_t bits = s->bytes * 8;
    int      i;

    /* 0x80, zeros up to 56 mod 64, then the length in bits, big-endian. */
    s->buf[s->nbuf++] = 0x80;
    if (s->nbuf > SHA256_BLOCK - 8) {
        memset(s->buf + s->nbuf, 0, SHA256_BLOCK - s->nbuf);
        sha256_block(s->h, s->buf);
        s->nbuf = 0;
    }
    memset(s->buf + s->nbuf, 0, SHA256_BLOCK - 8 - s->nbuf);
    for (i = 0; i < 8; i++) {
        s->buf[SHA256_BLOCK - 1 - i] = (uint8_t)(bits >> (8 * i));
    }
    sha256_block(s->h, s->buf);
    for (i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

void
sha256(const void *data, size_t len, uint8_t out[SHA256_LEN])
{
    struct sha256 s;

    sha256_init(&s);
    sha256_update(&s, data, len);
    sha256_final(&s, out);
}

void
hmac_sha256_init(struct hmac_sha256 *m, const void *key, size_t keylen)
{
    uint8_t k[SHA256_BLOCK], ikey[SHA256_BLOCK];
    size_t  i;

    memset(k, 0, sizeof(k));
    if (keylen > SHA256_BLOCK) {
        sha256(key, keylen, k);
    } else if (keylen > 0) {
        memcpy(k, key, keylen);
    }
    for (i = 0; i < SHA256_BLOCK; i++) {
        ikey[i] = k[i] ^ 0x36;
        m->okey[i] = k[i] ^ 0x5c;
    }
    sha256_init(&m->inner);
    sha256_update(&m->inner, ikey, sizeof(ikey));
}

void
hmac_sha256_update(struct hmac_sha256 *m, const void *data, size_t len)
{
    sha256_update(&m->inner, data, len);
}

void
hmac_sha256_final(struct hmac_sha256 *m, uint8_t out[SHA256_LEN])
{
    uint8_t       ih[SHA256_LEN];
    struct sha256 outer;

    sha256_final(&m->inner, ih);
    sha256_init(&outer);
    sha256_update(&outer, m->okey, sizeof(m->okey));
    sha256_update(&outer, ih, sizeof(ih));
    sha256_final(&outer, out);
}

void
hmac_sha256(const void *key, size_t keylen, const void *data, size_t len, uint8_t out[SHA256_LEN])
{
    struct hmac_sha256 m;

    hmac_sha256_init(&m, key, keylen);
    hmac_sha256_update(&m, data, len);
    hmac_sha256_final(&m, out);
}

bool
sha256_ct_equal(const void *a, size_t alen, const void *b, size_t blen)
{
    uint8_t                 da[SHA256_LEN], db[SHA256_LEN];
    const volatile uint8_t *pa = da, *pb = db;
    uint64_t                diff = (uint64_t)(alen ^ blen);
    uint8_t                 acc = 0;
    size_t                  i;

    /* Comparing digests, the loop is always SHA256_LEN long: a loop over
     * min(alen, blen) would tell, by its time, the length of the secret
     * to whoever sends longer and longer guesses. Hashing a takes a time
     * that depends on alen only, b on blen only. */
    sha256(a, alen, da);
    sha256(b, blen, db);
    for (i = 0; i < SHA256_LEN; i++) {
        acc |= (uint8_t)(pa[i] ^ pb[i]);
    }
    diff |= acc;
    return diff == 0;
}
