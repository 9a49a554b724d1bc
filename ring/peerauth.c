/*
 * peerauth: the rc_peer challenge-response proof (ring/peerauth.h). Each
 * field is length-prefixed, so no two different (cluster, ids, nonce)
 * tuples feed the MAC the same bytes.
 */
#include "config.h"
#include "ring/peerauth.h"

#include <stdio.h>
#include <string.h>

#include "ring/sha256.h"

#define PEERAUTH_DOMAIN "ringcache rc_peer v2"

static void
add_field(struct hmac_sha256 *m, const char *s)
{
    size_t  n = s != NULL ? strlen(s) : 0;
    uint8_t len[4] = { (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n };

    hmac_sha256_update(m, len, sizeof(len));
    if (n > 0) {
        hmac_sha256_update(m, s, n);
    }
}

void
peerauth_proof(const uint8_t *token, size_t token_len, const char *cluster, const char *node_id,
               const char *nonce_hex, const char *peer_id, char out[PEERAUTH_PROOF_HEX + 1])
{
    static const char  digits[] = "0123456789abcdef";
    struct hmac_sha256 m;
    uint8_t            mac[SHA256_LEN];
    int                i;

    hmac_sha256_init(&m, token, token_len);
    hmac_sha256_update(&m, PEERAUTH_DOMAIN, sizeof(PEERAUTH_DOMAIN) - 1);
    add_field(&m, cluster);
    add_field(&m, node_id);
    add_field(&m, nonce_hex);
    add_field(&m, peer_id);
    hmac_sha256_final(&m, mac);
    for (i = 0; i < SHA256_LEN; i++) {
        out[2 * i] = digits[mac[i] >> 4];
        out[2 * i + 1] = digits[mac[i] & 15];
    }
    out[PEERAUTH_PROOF_HEX] = '\0';
}

bool
peerauth_check(const uint8_t *token, size_t token_len, const char *cluster, const char *node_id,
               const char *nonce_hex, const char *peer_id, const char *proof, size_t proof_len)
{
    char want[PEERAUTH_PROOF_HEX + 1];

    peerauth_proof(token, token_len, cluster, node_id, nonce_hex, peer_id, want);
    return sha256_ct_equal(want, PEERAUTH_PROOF_HEX, proof, proof_len);
}
