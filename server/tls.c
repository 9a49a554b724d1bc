/*
 * tls: the OpenSSL side of -Z. A context is built whole from the files
 * and swapped under a lock, so refresh_certs never leaves a half-loaded
 * one (a new certificate with the old key) behind, and connections that
 * took the old one keep it (an SSL holds a reference to its context).
 */
#include "config.h"
#include "server/tls.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "proto/tlsctx.h"
#include "server/log.h"
#include "server/settings.h"

#define TLS_RECORD 16384 /* largest TLS record payload: what one gather fills */

static const char SESSION_ID_CONTEXT[] = "ringcached";

/* -o ssl_min_version's 0-3, as OpenSSL's constants. */
static const int MIN_VERSIONS[] = { TLS1_VERSION, TLS1_1_VERSION, TLS1_2_VERSION,
                                    TLS1_3_VERSION };

struct tls_server {
    pthread_mutex_t lock; /* guards ctx (a leaf) */
    SSL_CTX        *ctx;  /* what new connections take */
    /* The settings it was built from (the node's are read-only). */
    char     chain_cert[1024], key[1024], ca_cert[1024], ciphers[1024];
    int      verify_mode, min_version;
    bool     session_cache;
    uint64_t handshake_errors; /* atomic */
    uint64_t new_sessions;     /* atomic */
    int64_t  last_refresh;     /* atomic */
};

struct tls_conn {
    SSL               *ssl;
    struct tls_server *srv;
    size_t             wpend;      /* length of a write OpenSSL must see again */
    bool               want_write; /* the last read waits for writability */
    bool               broken;     /* a fatal error: no close_notify */
};

/* memcached's new-session callback: count, let OpenSSL keep the session. */
static int
new_session_cb(SSL *ssl, SSL_SESSION *sess)
{
    struct tls_server *t = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));

    (void)sess;
    __atomic_add_fetch(&t->new_sessions, 1, __ATOMIC_RELAXED);
    return 0;
}

/* A complete server context from t's settings; NULL with err set. */
static SSL_CTX *
ctx_build(struct tls_server *t, char *err, size_t errlen)
{
    static const int VERIFY[] = {
        SSL_VERIFY_NONE,
        SSL_VERIFY_PEER,
        SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
        SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT | SSL_VERIFY_CLIENT_ONCE,
    };
    struct tlsctx_spec spec = {
        .role = TLSCTX_SERVER,
        .chain = t->chain_cert,
        .key = t->key,
        .ca = t->ca_cert,
        .verify = VERIFY[t->verify_mode],
        .min_version = MIN_VERSIONS[t->min_version],
    };
    SSL_CTX *ctx = tlsctx_new(&spec, err, errlen);

    if (ctx == NULL) {
        return NULL;
    }
    if (t->ciphers[0] != '\0' && SSL_CTX_set_cipher_list(ctx, t->ciphers) != 1) {
        ERR_clear_error();
        snprintf(err, errlen, "Error setting the provided cipher(s): %s", t->ciphers);
        goto fail;
    }
    /* Resumption needs an id context whenever client certificates may be
     * asked for, cache or not. */
    SSL_CTX_set_session_id_context(ctx, (const unsigned char *)SESSION_ID_CONTEXT,
                                   sizeof(SESSION_ID_CONTEXT) - 1);
    if (t->session_cache) {
        SSL_CTX_set_app_data(ctx, t);
        SSL_CTX_sess_set_new_cb(ctx, new_session_cb);
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    } else {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    }
    /* No renegotiation (memcached's choice: a client could make the server
     * redo the expensive half at will); a peer that drops TCP without a
     * close_notify has closed, not failed. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* Writes come from conn.c's chunk queue: a record at a time, and a
     * retry may offer the same bytes from the gather buffer or the chunk. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

/* Build the first context; see tls.h. */
struct tls_server *
tls_server_new(const struct settings *s, char *err, size_t errlen)
{
    struct tls_server *t = calloc(1, sizeof(*t));

    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    OPENSSL_init_ssl(0, NULL);
    pthread_mutex_init(&t->lock, NULL);
    snprintf(t->chain_cert, sizeof(t->chain_cert), "%s", s->ssl_chain_cert);
    snprintf(t->key, sizeof(t->key), "%s", s->ssl_key);
    snprintf(t->ca_cert, sizeof(t->ca_cert), "%s", s->ssl_ca_cert);
    snprintf(t->ciphers, sizeof(t->ciphers), "%s", s->ssl_ciphers);
    t->verify_mode = s->ssl_verify_mode;
    t->min_version = s->ssl_min_version;
    t->session_cache = s->ssl_session_cache;
    t->ctx = ctx_build(t, err, errlen);
    if (t->ctx == NULL) {
        tls_server_free(t);
        return NULL;
    }
    t->last_refresh = (int64_t)time(NULL);
    return t;
}

/* A context from the files as they are now; see tls.h. */
SSL_CTX *
tls_server_build(struct tls_server *t, char *err, size_t errlen)
{
    return ctx_build(t, err, errlen);
}

/* Swap in a built context; see tls.h. */
void
tls_server_install(struct tls_server *t, SSL_CTX *ctx)
{
    SSL_CTX *old;

    pthread_mutex_lock(&t->lock);
    old = t->ctx;
    t->ctx = ctx;
    pthread_mutex_unlock(&t->lock);
    /* Open connections hold their own references to the old one. */
    SSL_CTX_free(old);
    __atomic_store_n(&t->last_refresh, (int64_t)time(NULL), __ATOMIC_RELAXED);
}

/* Swap in a context built from the files as they are now; see tls.h. */
int
tls_server_refresh(struct tls_server *t, char *err, size_t errlen)
{
    SSL_CTX *ctx = tls_server_build(t, err, errlen);

    if (ctx == NULL) {
        return -1;
    }
    tls_server_install(t, ctx);
    return 0;
}

/* Free; see tls.h. */
void
tls_server_free(struct tls_server *t)
{
    if (t == NULL) {
        return;
    }
    SSL_CTX_free(t->ctx);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

/* Counters; see tls.h. */
void
tls_server_stats(struct tls_server *t, struct tls_stats *out)
{
    out->handshake_errors = __atomic_load_n(&t->handshake_errors, __ATOMIC_RELAXED);
    out->new_sessions = __atomic_load_n(&t->new_sessions, __ATOMIC_RELAXED);
    out->last_refresh = __atomic_load_n(&t->last_refresh, __ATOMIC_RELAXED);
}

/* A server-side SSL on fd; see tls.h. */
struct tls_conn *
tls_conn_new(struct tls_server *t, int fd)
{
    struct tls_conn *tc = calloc(1, sizeof(*tc));

    if (tc == NULL) {
        log_msg(LOG_ERR, "out of memory for a TLS connection");
        return NULL;
    }
    pthread_mutex_lock(&t->lock);
    tc->ssl = SSL_new(t->ctx);
    pthread_mutex_unlock(&t->lock);
    if (tc->ssl == NULL || SSL_set_fd(tc->ssl, fd) != 1) {
        log_msg(LOG_ERR, "cannot create a TLS connection");
        ERR_clear_error();
        tls_conn_free(tc);
        return NULL;
    }
    tc->srv = t;
    SSL_set_accept_state(tc->ssl);
    return tc;
}

/* Close notify (best effort) and free; see tls.h. */
void
tls_conn_free(struct tls_conn *tc)
{
    if (tc == NULL) {
        return;
    }
    if (tc->ssl != NULL) {
        /* After a fatal error OpenSSL forbids SSL_shutdown; otherwise one
         * try, which queues the alert on the non-blocking socket or not. */
        if (!tc->broken && SSL_is_init_finished(tc->ssl)) {
            SSL_shutdown(tc->ssl);
        }
        ERR_clear_error();
        SSL_free(tc->ssl);
    }
    free(tc);
}

/* Drive the handshake; see tls.h. */
enum tls_hs
tls_handshake(struct tls_conn *tc)
{
    char why[256];
    int  r, e;

    ERR_clear_error();
    r = SSL_do_handshake(tc->ssl);
    if (r == 1) {
        return TLS_HS_DONE;
    }
    e = SSL_get_error(tc->ssl, r);
    if (e == SSL_ERROR_WANT_READ) {
        return TLS_HS_WANT_READ;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
        return TLS_HS_WANT_WRITE;
    }
    /* Plaintext on the TLS port, a certificate we do not accept, a client
     * that hung up: this connection's end, counted as memcached does. */
    tc->broken = true;
    tlsctx_reason(why, sizeof(why));
    log_msg(LOG_DEBUG, "connection %d: TLS handshake failed: %s", SSL_get_fd(tc->ssl), why);
    __atomic_add_fetch(&tc->srv->handshake_errors, 1, __ATOMIC_RELAXED);
    return TLS_HS_FAILED;
}

/* SSL_get_error after a read or write that did not move: -2 to wait
 * (want_write set when the socket must become writable), 0 for the
 * peer's close_notify, -1 (the connection is broken) otherwise. */
static ssize_t
io_error(struct tls_conn *tc, int r, bool reading)
{
    char why[256];
    int  e = SSL_get_error(tc->ssl, r);

    if (e == SSL_ERROR_WANT_READ) {
        return -2;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
        tc->want_write = reading;
        return -2;
    }
    if (e == SSL_ERROR_ZERO_RETURN) {
        return 0;
    }
    tc->broken = true;
    tlsctx_reason(why, sizeof(why));
    log_msg(LOG_DEBUG, "connection %d: TLS %s failed: %s", SSL_get_fd(tc->ssl),
            reading ? "read" : "write", why);
    return -1;
}

/* Read plaintext; see tls.h. */
ssize_t
tls_recv(struct tls_conn *tc, void *buf, size_t len)
{
    int n;

    tc->want_write = false;
    ERR_clear_error();
    n = SSL_read(tc->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
    if (n > 0) {
        return n;
    }
    return io_error(tc, n, true);
}

/* Encrypt and write; see tls.h. A head chunk of a record or more goes to
 * SSL_write in place; smaller ones are copied together into one record,
 * so a pipelined batch of short replies is not one record per reply. */
ssize_t
tls_send(struct tls_conn *tc, const struct iovec *iov, int niov)
{
    static __thread char gather[TLS_RECORD];
    const void          *p = iov[0].iov_base;
    size_t               len = iov[0].iov_len;
    size_t               want = tc->wpend != 0 ? tc->wpend : TLS_RECORD;
    int                  i, n;

    if (tc->wpend != 0 && len >= tc->wpend) {
        len = tc->wpend;
    } else if (len < want && niov > 1) {
        /* After a -2 the queue is unchanged, so the same bytes are
         * gathered again: exactly wpend of them. */
        size_t got = 0;

        for (i = 0; i < niov && got < want; i++) {
            size_t take = iov[i].iov_len < want - got ? iov[i].iov_len : want - got;

            memcpy(gather + got, iov[i].iov_base, take);
            got += take;
        }
        p = gather;
        len = got;
    }
    ERR_clear_error();
    n = SSL_write(tc->ssl, p, len > INT_MAX ? INT_MAX : (int)len);
    if (n > 0) {
        tc->wpend = 0;
        return n;
    }
    if (io_error(tc, n, false) == -2) {
        tc->wpend = len;
        return -2;
    }
    return -1;
}

/* Buffered input; see tls.h. */
bool
tls_pending(const struct tls_conn *tc)
{
    return SSL_has_pending(tc->ssl) == 1;
}

/* See tls.h. */
bool
tls_want_write(const struct tls_conn *tc)
{
    return tc->want_write;
}
