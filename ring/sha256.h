/*
 * sha256: SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the peer
 * proof on the client port (server/peerauth.c), and a constant-time
 * comparison for secrets. Pure: no I/O, no allocation. Checked against the
 * FIPS 180-2 and RFC 4231 vectors in tests/check_sha256.c.
 */
#ifndef RING_SHA256_H
#define RING_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN   32
#define SHA256_BLOCK 64

/* An incremental SHA-256; every field is private. */
struct sha256 {
    uint32_t h[8];
    uint64_t bytes; /* message length so far */
    uint8_t  buf[SHA256_BLOCK];
    size_t   nbuf;
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
/* Write the digest to out; s must be initialised again before reuse. */
void sha256_final(struct sha256 *s, uint8_t out[SHA256_LEN]);

/* SHA-256 of data in one call. */
void sha256(const void *data, size_t len, uint8_t out[SHA256_LEN]);

/* An incremental HMAC-SHA256 with key (any length: a longer key than a
 * block is hashed first, as RFC 2104 says). */
struct hmac_sha256 {
    struct sha256 inner;
    uint8_t       okey[SHA256_BLOCK];
};

void hmac_sha256_init(struct hmac_sha256 *m, const void *key, size_t keylen);
void hmac_sha256_update(struct hmac_sha256 *m, const void *data, size_t len);
void hmac_sha256_final(struct hmac_sha256 *m, uint8_t out[SHA256_LEN]);

/* HMAC-SHA256 of data under key in one call. */
void hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                 uint8_t out[SHA256_LEN]);

/*
 * Whether a (alen bytes) equals b (blen bytes), in a time that never
 * depends on where they differ nor on how long the other one is: the
 * SHA-256 of each (its time depends on its own length only) is compared
 * over all 32 bytes with no early exit, and the lengths are folded into
 * the same result. For secrets (the cluster token, a peer proof).
 */
bool sha256_ct_equal(const void *a, size_t alen, const void *b, size_t blen);

#endif /* RING_SHA256_H */
