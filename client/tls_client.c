/*
 * tls_client: see tls_client.h.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>

#include "client/tls_client.h"
#include "client/ringcache.h"
#include "lib/util.h"
#include "proto/tlsctx.h"

/* Writes gather iov parts up to one TLS record's worth of plaintext. */
#define GATHER_MAX 16384

/*
 * The socket under a session. OpenSSL's own socket BIO writes with
 * write(2), which raises SIGPIPE when the node has gone: that would kill
 * the application (a library must not touch its signal handling). This
 * one sends with MSG_NOSIGNAL, as the plaintext path does.
 */

static BIO_METHOD    *sock_method;
static pthread_once_t sock_method_once = PTHREAD_ONCE_INIT;

static int
sock_write(BIO *b, const char *buf, int len)
{
    int     fd = (int)(intptr_t)BIO_get_data(b);
    ssize_t n;

    BIO_clear_retry_flags(b);
    do {
        n = send(fd, buf, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        BIO_set_retry_write(b);
    }
    return (int)n;
}

static int
sock_read(BIO *b, char *buf, int len)
{
    int     fd = (int)(intptr_t)BIO_get_data(b);
    ssize_t n;

    BIO_clear_retry_flags(b);
    do {
        n = recv(fd, buf, (size_t)len, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        BIO_set_retry_read(b);
    }
    return (int)n;
}

static long
sock_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b;
    (void)num;
    (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static void
sock_method_init(void)
{
    sock_method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "ringcache socket");
    if (sock_method != NULL) {
        BIO_meth_set_write(sock_method, sock_write);
        BIO_meth_set_read(sock_method, sock_read);
        BIO_meth_set_ctrl(sock_method, sock_ctrl);
    }
}

/* A BIO over fd (not closed with it), or NULL. */
static BIO *
sock_bio(int fd)
{
    BIO *b;

    pthread_once(&sock_method_once, sock_method_init);
    if (sock_method == NULL || (b = BIO_new(sock_method)) == NULL) {
        return NULL;
    }
    BIO_set_data(b, (void *)(intptr_t)fd);
    BIO_set_init(b, 1);
    return b;
}

SSL_CTX *
tls_client_ctx_new(const struct ringcache_options *o, char *err, size_t errlen)
{
    struct tlsctx_spec spec = {
        .role = TLSCTX_CLIENT,
        .chain = o->tls_cert_file,
        .key = o->tls_key_file,
        .ca = o->tls_ca_file,
        .system_ca = true,
        .verify = SSL_VERIFY_PEER,
        .min_version = TLS1_2_VERSION,
    };
    SSL_CTX *ctx;
    char     why[512];

    if ((o->tls_cert_file == NULL) != (o->tls_key_file == NULL)) {
        snprintf(err, errlen, "TLS: a client certificate needs both tls_cert_file and tls_key_file");
        return NULL;
    }
    ctx = tlsctx_new(&spec, why, sizeof(why));
    if (ctx == NULL) {
        snprintf(err, errlen, "TLS: %s", why);
        return NULL;
    }
    /* A write may take part of a record's plaintext and finish it from a
     * new gather buffer (the same bytes at a new address). */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* Read the socket in big chunks, not a record header then its body:
     * one recv per reply instead of two (tls_client_read stops once
     * nothing is left inside OpenSSL). */
    SSL_CTX_set_read_ahead(ctx, 1);
    /* A node that dies mid-stream is a closed connection (RINGCACHE_EIO,
     * retried on a fresh one), not a TLS failure: replies frame
     * themselves, so a cut cannot pass for a whole one. */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    return ctx;
}

/* tls_client_wait: see tls_client.h. poll waits at most a minute at a
 * time, and 0 ms (one last look) once the deadline has passed. */
int
tls_client_wait(int fd, short ev, int64_t deadline)
{
    struct pollfd p = { .fd = fd, .events = ev };
    int64_t       left;
    int           rc;

    for (;;) {
        left = deadline - util_now_ms();
        rc = poll(&p, 1, left <= 0 ? 0 : left > 60000 ? 60000 : (int)left);
        if (rc > 0) {
            return 0;
        }
        if (rc == 0) {
            return RINGCACHE_ETIMEDOUT;
        }
        if (errno != EINTR) {
            return RINGCACHE_EIO;
        }
    }
}

int
tls_client_handshake(SSL_CTX *ctx, int fd, const char *host, bool check_name, int64_t deadline,
                     SSL **out, char *why, size_t whylen)
{
    SSL *ssl = SSL_new(ctx);
    BIO *bio;
    int  rc, e;

    if (why != NULL && whylen > 0) {
        why[0] = '\0';
    }
    if (ssl == NULL || (bio = sock_bio(fd)) == NULL) {
        SSL_free(ssl);
        return RINGCACHE_ENOMEM;
    }
    SSL_set_bio(ssl, bio, bio);
    if (check_name && tlsctx_expect_name(ssl, host) != 0) {
        SSL_free(ssl);
        return RINGCACHE_ETLS;
    }
    for (;;) {
        ERR_clear_error();
        rc = SSL_connect(ssl);
        if (rc == 1) {
            *out = ssl;
            return 0;
        }
        e = SSL_get_error(ssl, rc);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            rc = tls_client_wait(fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline);
            if (rc == 0) {
                continue;
            }
        } else {
            /* A socket error or a close before any TLS reply is the
             * connection's failure; anything else is TLS's (a bad
             * certificate, a plaintext node answering garbage). */
            rc = (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) || e == SSL_ERROR_ZERO_RETURN
                     ? RINGCACHE_EIO
                     : RINGCACHE_ETLS;
            if (rc == RINGCACHE_ETLS && why != NULL && whylen > 0) {
                tlsctx_why(ssl, ERR_peek_last_error(), why, whylen);
            }
        }
        SSL_free(ssl);
        return rc;
    }
}

/* The outcome of an SSL_read or SSL_write that returned rc <= 0: 0 with
 * *want set when it only has to wait; RINGCACHE_ETLS when TLS itself
 * failed (an alert: under TLS 1.3 a node that refuses the client's
 * certificate says so only after the handshake, on the first read);
 * RINGCACHE_EIO when the connection closed or broke. */
static long
would_block(SSL *ssl, int rc, short *want)
{
    switch (SSL_get_error(ssl, rc)) {
    case SSL_ERROR_WANT_READ:
        *want = POLLIN;
        return 0;
    case SSL_ERROR_WANT_WRITE:
        *want = POLLOUT;
        return 0;
    case SSL_ERROR_SSL:
        return RINGCACHE_ETLS;
    default:
        return RINGCACHE_EIO;
    }
}

long
tls_client_read(SSL *ssl, char *buf, size_t len, short *want)
{
    size_t got = 0;
    int    rc;

    *want = POLLIN;
    while (got < len) {
        ERR_clear_error();
        rc = SSL_read(ssl, buf + got, len - got > INT32_MAX ? INT32_MAX : (int)(len - got));
        if (rc <= 0) {
            long r = would_block(ssl, rc, want);

            /* What arrived before a close is still the caller's. */
            return got > 0 ? (long)got : r;
        }
        got += (size_t)rc;
        /* Nothing read from the socket is left undecrypted or unread:
         * poll sees whatever comes next. Stop without another recv. */
        if (!SSL_has_pending(ssl)) {
            break;
        }
    }
    return (long)got;
}

long
tls_client_write(SSL *ssl, const struct iovec *iov, int iovcnt, short *want)
{
    char        gather[GATHER_MAX];
    const void *p;
    size_t      n = 0;
    int         i, rc;

    *want = POLLOUT;
    /* One part, or the first parts that fit in one record together. */
    if (iovcnt == 1 || iov[0].iov_len >= sizeof(gather)) {
        p = iov[0].iov_base;
        n = iov[0].iov_len;
    } else {
        for (i = 0; i < iovcnt && n < sizeof(gather); i++) {
            size_t take = iov[i].iov_len < sizeof(gather) - n ? iov[i].iov_len : sizeof(gather) - n;

            memcpy(gather + n, iov[i].iov_base, take);
            n += take;
        }
        p = gather;
    }
    if (n == 0) {
        return 0;
    }
    ERR_clear_error();
    rc = SSL_write(ssl, p, n > INT32_MAX ? INT32_MAX : (int)n);
    if (rc <= 0) {
        return would_block(ssl, rc, want);
    }
    return rc;
}

void
tls_client_close(SSL *ssl, bool notify)
{
    if (ssl == NULL) {
        return;
    }
    if (notify) {
        ERR_clear_error();
        (void)SSL_shutdown(ssl);
    }
    SSL_free(ssl);
}
