/*
 * tlsctx: the one place an OpenSSL context is built from PEM files, for
 * the node's data port (-Z, server/tls.c), its cluster port and links to
 * peers (--cluster-tls, server/peer_tls.c) and the client library and
 * ringctl (client/tls_client.c). Each caller says what differs (role,
 * verify mode, minimum version) and adds its own options after; the
 * files, the key check and the one-line errors naming the file are here.
 */
#ifndef PROTO_TLSCTX_H
#define PROTO_TLSCTX_H

#include <stdbool.h>
#include <stddef.h>

#include <openssl/ssl.h>

enum tlsctx_role {
    TLSCTX_SERVER, /* accepts; sends the CA list (ca) as the client CAs */
    TLSCTX_CLIENT, /* dials */
};

struct tlsctx_spec {
    enum tlsctx_role role;
    const char      *chain; /* PEM certificate chain to show; NULL or "": none */
    const char      *key;   /* PEM key for chain; NULL or "": in the chain file */
    const char      *ca;    /* PEM CAs to verify the other side; NULL or "": see system_ca */
    bool             system_ca;   /* without ca, trust the system's CAs */
    int              verify;      /* SSL_VERIFY_* flags */
    int              min_version; /* TLS1_2_VERSION...; 0: OpenSSL's default */
};

/*
 * A context from spec; NULL with one line in err naming the file and why
 * (memcached's wording: "Error loading the certificate chain: FILE : why",
 * "Error loading the key: FILE : why", "Error validating the certificate:
 * why" for a key that does not match, "Error loading the CA certificate:
 * FILE : why"). OpenSSL's error queue is left empty.
 */
SSL_CTX *tlsctx_new(const struct tlsctx_spec *spec, char *err, size_t errlen);

/* The most specific entry of OpenSSL's error queue as text, or the
 * system's errno when the queue is empty; the queue is emptied. */
const char *tlsctx_reason(char *buf, size_t len);

/* Why ssl's handshake failed: the certificate check's verdict
 * ("certificate: ..."), else OpenSSL error e's reason (e.g. the queue's
 * ERR_peek_last_error; 0: none), else "". */
const char *tlsctx_why(const SSL *ssl, unsigned long e, char *buf, size_t len);

/* Ask that the other side's certificate names host: an IP address against
 * its IP entries, a name against its DNS entries (and sent as SNI). 0, or
 * -1 when OpenSSL refuses the name. */
int tlsctx_expect_name(SSL *ssl, const char *host);

#endif
