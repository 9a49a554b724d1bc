/*
 * peer_tls: see peer_tls.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>

#include "proto/tlsctx.h"
#include "server/peer_tls.h"

/* A context showing chain/key and verifying the other side against ca;
 * require: the other side must show a certificate (the accepting side of
 * mutual TLS). */
static SSL_CTX *
ctx_new(enum tlsctx_role role, const char *chain, const char *key, const char *ca, bool require,
        char *err, size_t errlen)
{
    struct tlsctx_spec spec = {
        .role = role,
        .chain = chain,
        .key = key,
        .ca = ca,
        .system_ca = true,
        .verify = SSL_VERIFY_PEER | (require ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
        .min_version = TLS1_2_VERSION,
    };

    return tlsctx_new(&spec, err, errlen);
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
    *connect = ctx_new(TLSCTX_CLIENT, t->chain, t->key, t->ca, false, err, errlen);
    if (*connect == NULL) {
        return -1;
    }
    if (t->cport) {
        *accept = ctx_new(TLSCTX_SERVER, t->chain, t->key, t->ca, true, err, errlen);
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
    if (tlsctx_expect_name(ssl, host) != 0) {
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
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    char why[256];

    buf[0] = '\0';
    if (ssl != NULL && tlsctx_why(ssl, bufferevent_get_openssl_error(bev), why, sizeof(why))[0] != '\0') {
        /* The verification's verdict says "certificate: ..." itself. */
        snprintf(buf, len, "%s%s", SSL_get_verify_result(ssl) != X509_V_OK ? "" : "TLS: ", why);
    }
    return buf;
}
