/*
 * peerauth: how the node checks secrets, on libcrypto. The rc_peer proof a
 * cluster peer gives on the client port before it may send replica writes
 * (docs/cluster.md, "Replication"; docs/security.md), and the one
 * constant-time comparison of secrets (tokens, passwords).
 */
#ifndef SERVER_PEERAUTH_H
#define SERVER_PEERAUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PEERAUTH_NONCE_LEN 16 /* random bytes per challenge */
#define PEERAUTH_NONCE_HEX (2 * PEERAUTH_NONCE_LEN)
#define PEERAUTH_PROOF_HEX 64  /* HMAC-SHA256, lowercase hex */
#define PEERAUTH_ID_MAX    255 /* a node id on the wire */

/*
 * The node hands out a fresh random nonce per connection (the caller draws
 * it); the peer answers with the proof for the challenge nonce_hex
 * (PEERAUTH_NONCE_HEX hex digits) that node node_id gave peer peer_id in
 * cluster: lowercase hex of HMAC-SHA256(token, "ringcache rc_peer v2" ||
 * each of cluster, node_id, nonce_hex, peer_id as a 4-byte big-endian
 * length and its bytes). A NULL field counts as empty. Should libcrypto
 * fail (out of memory), out is the empty string, which no peerauth_check
 * accepts.
 */
void peerauth_proof(const uint8_t *token, size_t token_len, const char *cluster,
                    const char *node_id, const char *nonce_hex, const char *peer_id,
                    char out[PEERAUTH_PROOF_HEX + 1]);

/* Whether proof (proof_len bytes, not NUL-terminated) is that proof;
 * compared in constant time (peerauth_equal). */
bool peerauth_check(const uint8_t *token, size_t token_len, const char *cluster,
                    const char *node_id, const char *nonce_hex, const char *peer_id,
                    const char *proof, size_t proof_len);

/*
 * Whether a (alen bytes) and b (blen bytes) are equal, in a time that
 * tells neither where they differ nor how long either is: both are hashed
 * (SHA-256), then the digests compared with CRYPTO_memcmp. For secrets
 * against guesses: the cluster token, passwords, proofs.
 */
bool peerauth_equal(const void *a, size_t alen, const void *b, size_t blen);

#endif /* SERVER_PEERAUTH_H */
