/*
 * peerauth: the proof a cluster peer gives on the client port before it
 * may send replica writes (docs/cluster.md, "Replication"; docs/security.md).
 * The node hands out a fresh random nonce per connection; the peer answers
 * HMAC-SHA256 keyed with the cluster token over the cluster name, both node
 * ids and the nonce. Pure: the caller draws the nonce.
 */
#ifndef RING_PEERAUTH_H
#define RING_PEERAUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PEERAUTH_NONCE_LEN 16 /* random bytes per challenge */
#define PEERAUTH_NONCE_HEX (2 * PEERAUTH_NONCE_LEN)
#define PEERAUTH_PROOF_HEX 64  /* HMAC-SHA256, lowercase hex */
#define PEERAUTH_ID_MAX    255 /* a node id on the wire */

/*
 * The proof for the challenge nonce_hex (PEERAUTH_NONCE_HEX hex digits)
 * that node node_id gave peer peer_id in cluster: lowercase hex of
 * HMAC-SHA256(token, "ringcache rc_peer v2" || each of cluster, node_id,
 * nonce_hex, peer_id as a 4-byte big-endian length and its bytes).
 */
void peerauth_proof(const uint8_t *token, size_t token_len, const char *cluster,
                    const char *node_id, const char *nonce_hex, const char *peer_id,
                    char out[PEERAUTH_PROOF_HEX + 1]);

/* Whether proof (proof_len bytes, not NUL-terminated) is that proof;
 * compared in constant time. */
bool peerauth_check(const uint8_t *token, size_t token_len, const char *cluster,
                    const char *node_id, const char *nonce_hex, const char *peer_id,
                    const char *proof, size_t proof_len);

#endif /* RING_PEERAUTH_H */
