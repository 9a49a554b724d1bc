/*
 * peer_tls: see peer_tls.h.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "server/peer_tls.h"

/* OpenSSL's most recent error as text. */
static const char *
last_error(void)
{
    unsigned long e = ERR_peek_last_error();

    return e != 0 ? ERR_reason_error_string(e) : "unknown error";
}

/* A context showing chain/key and verifying the other side against ca
 * ("" or NULL: the system's CAs); require: the other side must show a
 * certificate (the accepting side of mutual TLS). */
static SSL_CTX *
ctx_new(const SSL_METHOD *method, const char *chain, const char *key, const char *ca, bool require,
        char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(method);

    if (ctx == NULL) {
        snprintf(err, errlen, "TLS: cannot create a context: %s", last_error());
        return NULL;
    }
    ERR_clear_error();
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (require ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
                       NULL);
    if (SSL_CTX_use_certificate_chain_file(ctx, chain) != 1) {
        snprintf(err, errlen, "ssl_chain_cert %s: %s", chain, last_error());
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key != NULL && key[0] != '\0' ? key : chain,
                                    SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        snprintf(err, errlen, "ssl_key %s: %s", key != NULL && key[0] != '\0' ? key : chain,
                 last_error());
        goto fail;
    }
    if (ca != NULL && ca[0] != '\0') {
        if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
            snprintf(err, errlen, "ssl_ca_cert %s: %s", ca, last_error());
            goto fail;
        }
        if (require) {
            /* Tell clients which CA to show a certificate of. */
            STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca);

            if (names != NULL) {
                SSL_CTX_set_client_CA_list(ctx, names);
            }
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        snprintf(err, errlen, "TLS: cannot load the system's CA certificates: %s", last_error());
        goto fail;
    }
    return ctx;

fail:
    SSL_CTX_free(ctx);
    return NULL;
}

/* A copy of path ("" for NULL); NULL when out of memory. */
static char *
path_dup(const char *path)
{
    return strdup(path != NULL ? path : "");
}

struct peer_tls *
peer_tls_new(const char *chain, const char *key, const char *ca, bool cport, bool data, char *err,
             size_t errlen)
{
    struct peer_tls *t = calloc(1, sizeof(*t));

    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    t->cport = cport;
    t->data = data;
    t->chain = path_dup(chain);
    t->key = path_dup(key);
    t->ca = path_dup(ca);
    if (t->chain == NULL || t->key == NULL || t->ca == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (peer_tls_build(t, &t->accept, &t->connect, err, errlen) < 0) {
        goto fail;
    }
    return t;

fail:
    peer_tls_free(t);
    return NULL;
}

int
peer_tls_build(struct peer_tls *t, SSL_CTX **accept, SSL_CTX **connect, char *err, size_t errlen)
{
    *accept = NULL;
    *connect = NULL;
    if (t->cport && t->ca[0] == '\0') {
        snprintf(err, errlen, "--cluster-tls needs -o ssl_ca_cert (the CA of the cluster's "
                              "certificates: peers and ringctl must show one it signed)");
        return -1;
    }
    *connect = ctx_new(TLS_client_method(), t->chain, t->key, t->ca, false, err, errlen);
    if (*connect == NULL) {
        return -1;
    }
    if (t->cport) {
        *accept = ctx_new(TLS_server_method(), t->chain, t->key, t->ca, true, err, errlen);
        if (*accept == NULL) {
            SSL_CTX_free(*connect);
            *connect = NULL;
            return -1;
        }
    }
    return 0;
}

void
peer_tls_install(struct peer_tls *t, SSL_CTX *accept, SSL_CTX *connect)
{
    SSL_CTX *old_accept, *old_connect;

    pthread_mutex_lock(&t->lock);
    old_accept = t->accept;
    old_connect = t->connect;
    t->accept = accept;
    t->connect = connect;
    pthread_mutex_unlock(&t->lock);
    /* Open connections hold their own references to the old ones. */
    peer_tls_discard(old_accept, old_connect);
}

void
peer_tls_discard(SSL_CTX *accept, SSL_CTX *connect)
{
    SSL_CTX_free(accept);
    SSL_CTX_free(connect);
}

int
peer_tls_refresh(struct peer_tls *t, char *err, size_t errlen)
{
    SSL_CTX *accept, *connect;

    if (peer_tls_build(t, &accept, &connect, err, errlen) < 0) {
        return -1;
    }
    peer_tls_install(t, accept, connect);
    return 0;
}

void
peer_tls_free(struct peer_tls *t)
{
    if (t != NULL) {
        SSL_CTX_free(t->accept);
        SSL_CTX_free(t->connect);
        pthread_mutex_destroy(&t->lock);
        free(t->chain);
        free(t->key);
        free(t->ca);
        free(t);
    }
}

/* A new SSL of *ctx, taken under t's lock (a refresh may be swapping it). */
static SSL *
ssl_new(struct peer_tls *t, SSL_CTX *const *ctx)
{
    SSL *ssl;

    pthread_mutex_lock(&t->lock);
    ssl = SSL_new(*ctx);
    pthread_mutex_unlock(&t->lock);
    return ssl;
}

struct bufferevent *
peer_tls_accept(struct peer_tls *t, struct event_base *base, int fd)
{
    struct bufferevent *bev;
    SSL                *ssl;

    if (t == NULL || !t->cport) {
        bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (bev == NULL) {
            close(fd);
        }
        return bev;
    }
    ssl = ssl_new(t, &t->accept);
    if (ssl == NULL) {
        close(fd);
        return NULL;
    }
    /* On failure libevent frees ssl (BEV_OPT_CLOSE_ON_FREE) but not fd. */
    bev = bufferevent_openssl_socket_new(base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                         BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        close(fd);
        return NULL;
    }
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

/* Ask that the peer's certificate names host (an IP address or DNS name). */
static int
expect_name(SSL *ssl, const char *host)
{
    unsigned char ip[sizeof(struct in6_addr)];

    if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1) {
        return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1 ? 0 : -1;
    }
    return SSL_set_tlsext_host_name(ssl, host) == 1 && SSL_set1_host(ssl, host) == 1 ? 0 : -1;
}

struct bufferevent *
peer_tls_dial(struct peer_tls *t, struct event_base *base, const char *host, bool cport)
{
    struct bufferevent *bev;
    SSL                *ssl;

    if (t == NULL || !(cport ? t->cport : t->data)) {
        return bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    ssl = ssl_new(t, &t->connect);
    if (ssl == NULL) {
        return NULL;
    }
    if (expect_name(ssl, host) != 0) {
        SSL_free(ssl);
        return NULL;
    }
    bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                         BEV_OPT_CLOSE_ON_FREE);
    if (bev != NULL) {
        bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    }
    return bev;
}

const char *
peer_tls_error(struct bufferevent *bev, char *buf, size_t len)
{
    SSL          *ssl = bufferevent_openssl_get_ssl(bev);
    unsigned long e;
    long          v;

    buf[0] = '\0';
    if (ssl == NULL) {
        return buf;
    }
    v = SSL_get_verify_result(ssl);
    if (v != X509_V_OK) {
        snprintf(buf, len, "certificate: %s", X509_verify_cert_error_string(v));
    } else if ((e = bufferevent_get_openssl_error(bev)) != 0) {
        snprintf(buf, len, "TLS: %s", ERR_reason_error_string(e));
    }
    return buf;
}
