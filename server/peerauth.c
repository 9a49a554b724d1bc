/*
 * peerauth: the rc_peer challenge-response proof and the constant-time
 * comparison of secrets (server/peerauth.h), on libcrypto. Each field of
 * the proof is length-prefixed, so no two different (cluster, ids, nonce)
 * tuples feed the MAC the same bytes.
 */
#include "config.h"
#include "server/peerauth.h"

#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "lib/util.h"

#define PEERAUTH_DOMAIN  "ringcache rc_peer v2"
#define PEERAUTH_MAC_LEN 32 /* HMAC-SHA256 */

/* Feed one field to the MAC: its length (4 bytes, big-endian), its bytes. */
static bool
add_field(EVP_MAC_CTX *m, const char *s)
{
    size_t  n = s != NULL ? strlen(s) : 0;
    uint8_t len[4] = { (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n };

    return EVP_MAC_update(m, len, sizeof(len)) == 1 &&
           (n == 0 || EVP_MAC_update(m, (const unsigned char *)s, n) == 1);
}

/* The proof's MAC into mac; false when libcrypto fails. */
static bool
proof_mac(const uint8_t *token, size_t token_len, const char *const fields[4],
          unsigned char mac[PEERAUTH_MAC_LEN])
{
    static const unsigned char domain[] = PEERAUTH_DOMAIN, empty[1];
    char                       digest[] = "SHA256";
    OSSL_PARAM                 params[2];
    EVP_MAC                   *hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX               *m = hmac != NULL ? EVP_MAC_CTX_new(hmac) : NULL;
    size_t                     len = 0;
    bool                       ok = m != NULL;
    int                        i;

    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0);
    params[1] = OSSL_PARAM_construct_end();
    /* To EVP_MAC_init a NULL key is "the key set before": no token is an
     * empty key. */
    if (token == NULL) {
        token = empty;
        token_len = 0;
    }
    ok = ok && EVP_MAC_init(m, token, token_len, params) == 1;
    ok = ok && EVP_MAC_update(m, domain, sizeof(domain) - 1) == 1;
    for (i = 0; ok && i < 4; i++) {
        ok = add_field(m, fields[i]);
    }
    ok = ok && EVP_MAC_final(m, mac, &len, PEERAUTH_MAC_LEN) == 1 && len == PEERAUTH_MAC_LEN;
    EVP_MAC_CTX_free(m);
    EVP_MAC_free(hmac);
    return ok;
}

void
peerauth_proof(const uint8_t *token, size_t token_len, const char *cluster, const char *node_id,
               const char *nonce_hex, const char *peer_id, char out[PEERAUTH_PROOF_HEX + 1])
{
    const char   *fields[4] = { cluster, node_id, nonce_hex, peer_id };
    unsigned char mac[PEERAUTH_MAC_LEN];

    if (!proof_mac(token, token_len, fields, mac)) {
        out[0] = '\0';
        return;
    }
    util_hex(mac, sizeof(mac), out);
    OPENSSL_cleanse(mac, sizeof(mac));
}

bool
peerauth_check(const uint8_t *token, size_t token_len, const char *cluster, const char *node_id,
               const char *nonce_hex, const char *peer_id, const char *proof, size_t proof_len)
{
    char want[PEERAUTH_PROOF_HEX + 1];
    bool ok;

    peerauth_proof(token, token_len, cluster, node_id, nonce_hex, peer_id, want);
    ok = want[0] != '\0' && peerauth_equal(want, PEERAUTH_PROOF_HEX, proof, proof_len);
    OPENSSL_cleanse(want, sizeof(want));
    return ok;
}

bool
peerauth_equal(const void *a, size_t alen, const void *b, size_t blen)
{
    unsigned char da[EVP_MAX_MD_SIZE], db[EVP_MAX_MD_SIZE];
    unsigned int  na = 0, nb = 0;

    /* Comparing digests, the compare is always as long: one over
     * min(alen, blen) bytes would tell, by its time, the length of the
     * secret to whoever sends longer and longer guesses. Hashing a takes a
     * time that depends on alen only, b on blen only. */
    if (EVP_Digest(a, alen, da, &na, EVP_sha256(), NULL) != 1 ||
        EVP_Digest(b, blen, db, &nb, EVP_sha256(), NULL) != 1 || na != nb) {
        return false;
    }
    return (alen == blen) & (CRYPTO_memcmp(da, db, na) == 0);
}
