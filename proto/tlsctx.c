/*
 * tlsctx: see tlsctx.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "proto/tlsctx.h"

static bool
given(const char *s)
{
    return s != NULL && s[0] != '\0';
}

const char *
tlsctx_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    const char   *r = e != 0 ? ERR_reason_error_string(e) : NULL;

    snprintf(buf, len, "%s", r != NULL ? r : e != 0 ? "unknown error" : strerror(errno));
    ERR_clear_error();
    return buf;
}

const char *
tlsctx_why(const SSL *ssl, unsigned long e, char *buf, size_t len)
{
    long        v = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;
    const char *r;

    buf[0] = '\0';
    if (v != X509_V_OK) {
        snprintf(buf, len, "certificate: %s", X509_verify_cert_error_string(v));
    } else if (e != 0) {
        r = ERR_reason_error_string(e);
        snprintf(buf, len, "%s", r != NULL ? r : "unknown error");
    }
    return buf;
}

int
tlsctx_expect_name(SSL *ssl, const char *host)
{
    unsigned char ip[sizeof(struct in6_addr)];

    if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1) {
        return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1 ? 0 : -1;
    }
    return SSL_set_tlsext_host_name(ssl, host) == 1 && SSL_set1_host(ssl, host) == 1 ? 0 : -1;
}

/* A file the context needs must be readable; say why it is not (OpenSSL
 * would only say "system lib"). 0 or -1 with err set. */
static int
check_file(const char *what, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");

    if (f == NULL) {
        snprintf(err, errlen, "Error loading the %s: %s : %s", what, path, strerror(errno));
        return -1;
    }
    fclose(f);
    return 0;
}

/* The certificate chain and its key, checked against each other. */
static int
load_identity(SSL_CTX *ctx, const char *chain, const char *key, char *err, size_t errlen)
{
    char why[256];

    if (check_file("certificate chain", chain, err, errlen) < 0) {
        return -1;
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, chain) != 1) {
        snprintf(err, errlen, "Error loading the certificate chain: %s : %s", chain,
                 tlsctx_reason(why, sizeof(why)));
        return -1;
    }
    if (check_file("key", key, err, errlen) < 0) {
        return -1;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        snprintf(err, errlen, "Error loading the key: %s : %s", key,
                 tlsctx_reason(why, sizeof(why)));
        return -1;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        snprintf(err, errlen, "Error validating the certificate: %s",
                 tlsctx_reason(why, sizeof(why)));
        return -1;
    }
    return 0;
}

/* The CAs that verify the other side (and, accepting, the names of those
 * a client should show a certificate of). */
static int
load_cas(SSL_CTX *ctx, const struct tlsctx_spec *spec, char *err, size_t errlen)
{
    STACK_OF(X509_NAME) *names = NULL;
    char                 why[256];

    if (!given(spec->ca)) {
        if (spec->system_ca && SSL_CTX_set_default_verify_paths(ctx) != 1) {
            snprintf(err, errlen, "Error loading the system's CA certificates: %s",
                     tlsctx_reason(why, sizeof(why)));
            return -1;
        }
        return 0;
    }
    if (check_file("CA certificate", spec->ca, err, errlen) < 0) {
        return -1;
    }
    if (SSL_CTX_load_verify_locations(ctx, spec->ca, NULL) != 1 ||
        (spec->role == TLSCTX_SERVER && (names = SSL_load_client_CA_file(spec->ca)) == NULL)) {
        snprintf(err, errlen, "Error loading the CA certificate: %s : %s", spec->ca,
                 tlsctx_reason(why, sizeof(why)));
        return -1;
    }
    if (names != NULL) {
        SSL_CTX_set_client_CA_list(ctx, names);
    }
    return 0;
}

SSL_CTX *
tlsctx_new(const struct tlsctx_spec *spec, char *err, size_t errlen)
{
    SSL_CTX *ctx;
    char     why[256];

    OPENSSL_init_ssl(0, NULL);
    ERR_clear_error();
    ctx = SSL_CTX_new(spec->role == TLSCTX_SERVER ? TLS_server_method() : TLS_client_method());
    if (ctx == NULL) {
        snprintf(err, errlen, "Error creating the TLS context: %s", tlsctx_reason(why, sizeof(why)));
        return NULL;
    }
    if (spec->min_version != 0 && SSL_CTX_set_min_proto_version(ctx, spec->min_version) != 1) {
        snprintf(err, errlen, "Error setting the minimum TLS version: %s",
                 tlsctx_reason(why, sizeof(why)));
        goto fail;
    }
    SSL_CTX_set_verify(ctx, spec->verify, NULL);
    if (given(spec->chain) &&
        load_identity(ctx, spec->chain, given(spec->key) ? spec->key : spec->chain, err, errlen) < 0) {
        goto fail;
    }
    if (load_cas(ctx, spec, err, errlen) < 0) {
        goto fail;
    }
    ERR_clear_error();
    return ctx;

fail:
    ERR_clear_error();
    SSL_CTX_free(ctx);
    return NULL;
}
