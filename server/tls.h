/*
 * tls: TLS on the client port (-Z, memcached 1.6's flags) through OpenSSL.
 * One server context built from the settings' files, swapped whole by
 * refresh_certs or SIGHUP; one SSL object per connection, driven by the
 * worker's event loop without blocking.
 *
 * Why SSL_read/SSL_write on the socket and not bufferevent_openssl: the
 * connection layer (conn.c) owns its buffers. It reads into the buffer
 * proto_text parses in place, or straight into an item's value, and
 * writes its reply chunks (item values by reference) with one writev per
 * batch; a bufferevent would put its own evbuffers in between and copy
 * every byte twice. So conn.c keeps its state machine and calls
 * conn_recv/conn_send, which come here for a TLS connection: the one
 * seam between plaintext and TLS.
 */
#ifndef SERVER_TLS_H
#define SERVER_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct settings;
struct tls_server;
struct tls_conn;

/* What tls_handshake needs before it can go on. */
enum tls_hs {
    TLS_HS_DONE = 0,
    TLS_HS_WANT_READ,
    TLS_HS_WANT_WRITE,
    TLS_HS_FAILED, /* counted in ssl_handshake_errors; close the connection */
};

/* Counters for `stats` (memcached's names). */
struct tls_stats {
    uint64_t handshake_errors; /* ssl_handshake_errors */
    uint64_t new_sessions;     /* ssl_new_sessions (with ssl_session_cache) */
    int64_t  last_refresh;     /* unix time the certificates were last loaded */
};

/*
 * The server context from s's ssl_* settings: certificate chain, key
 * (checked against the certificate), client CAs, verify mode, minimum
 * version. NULL on failure with a one-line reason in err (memcached's
 * wording: "Error loading the certificate chain: FILE : why").
 */
struct tls_server *tls_server_new(const struct settings *s, char *err, size_t errlen);

/*
 * refresh_certs: build a new context from the same files and make it the
 * one new connections use; connections already open keep theirs. On
 * failure (err set as above) the old context stays. 0 or -1. Any thread.
 */
int tls_server_refresh(struct tls_server *t, char *err, size_t errlen);

/* tls_server_refresh in two steps, for a refresh of several contexts that
 * installs none unless all were built (server_refresh_certs): a context
 * from the files as they are now (NULL, err set as above), then install
 * it (the old one is released). SSL_CTX_free discards an unused one. */
struct ssl_ctx_st; /* OpenSSL's SSL_CTX, without its headers here */
struct ssl_ctx_st *tls_server_build(struct tls_server *t, char *err, size_t errlen);
void               tls_server_install(struct tls_server *t, struct ssl_ctx_st *ctx);

/* Free the context (connections must be closed). NULL is fine. */
void tls_server_free(struct tls_server *t);

/* The counters; any thread. */
void tls_server_stats(struct tls_server *t, struct tls_stats *out);

/* A TLS connection on fd (server side) with the current context; NULL on
 * ENOMEM (logged). Does not take fd. */
struct tls_conn *tls_conn_new(struct tls_server *t, int fd);

/* Send a close_notify if possible (never waits) and free. NULL is fine. */
void tls_conn_free(struct tls_conn *tc);

/* Advance the handshake as far as the socket allows. */
enum tls_hs tls_handshake(struct tls_conn *tc);

/*
 * Read up to len plaintext bytes: bytes read, 0 when the client closed,
 * -1 on an error, -2 when it would block (waiting for the socket to be
 * readable, or writable: see tls_want_write).
 */
ssize_t tls_recv(struct tls_conn *tc, void *buf, size_t len);

/*
 * Write from iov (the connection's queued chunks): bytes taken (all of
 * them, or less), -1 on an error, -2 when the socket is full. After -2 the
 * next call must offer the same bytes again (the queue did not move), as
 * OpenSSL requires. Small chunks are gathered into one record.
 */
ssize_t tls_send(struct tls_conn *tc, const struct iovec *iov, int niov);

/* Plaintext (or a record) is buffered inside the SSL object, so the
 * socket may never become readable for it: read again without waiting. */
bool tls_pending(const struct tls_conn *tc);

/* The last tls_recv stopped because OpenSSL must write first: wait for
 * the socket to be writable, then read. */
bool tls_want_write(const struct tls_conn *tc);

#endif /* SERVER_TLS_H */
