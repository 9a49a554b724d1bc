/*
 * tls_client: TLS to the nodes' data port (nodes started with -Z), for
 * libringcache. One SSL_CTX per handle, built from ringcache_options; one
 * SSL per pooled connection, over the connection's non-blocking socket.
 *
 * Every call here is non-blocking except the handshake, which pool.c runs
 * once per new connection, bounded by a deadline. Reads drain the TLS
 * layer whole (until it wants the socket again), so no decrypted byte ever
 * waits inside OpenSSL where poll() cannot see it: a caller that polls the
 * socket before reading again (node_io, mget) never misses a reply.
 * tls_client_wait, the deadline-bounded poll of a socket, serves plain
 * connections too.
 */
#ifndef CLIENT_TLS_CLIENT_H
#define CLIENT_TLS_CLIENT_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <openssl/ssl.h>

struct ringcache_options;

/* The handle's context: TLS 1.2 or later, the node's certificate verified
 * against o->tls_ca_file (the system's CAs when NULL), o->tls_cert_file and
 * o->tls_key_file as the client certificate when given. NULL with a reason
 * in err (a file that cannot be read, a key that does not match). */
SSL_CTX *tls_client_ctx_new(const struct ringcache_options *o, char *err, size_t errlen);

/* Handshake on the connected non-blocking socket fd, waiting at most until
 * deadline (monotonic ms). The node's certificate must name host (its DNS
 * name or IP address, as in its subjectAltName) unless check_name is
 * false. 0 with *out set, RINGCACHE_ETIMEDOUT, RINGCACHE_EIO (the socket
 * failed), RINGCACHE_ETLS (the handshake or the verification failed) or
 * RINGCACHE_ENOMEM. On RINGCACHE_ETLS, why (whylen bytes; may be NULL)
 * says why: the certificate check's verdict or OpenSSL's reason. */
int tls_client_handshake(SSL_CTX *ctx, int fd, const char *host, bool check_name, int64_t deadline,
                         SSL **out, char *why, size_t whylen);

/* Read what the TLS layer has and the socket gives now into buf, up to len
 * bytes: the bytes read (> 0), 0 when nothing is there yet, RINGCACHE_EIO
 * when the node closed or the stream broke, RINGCACHE_ETLS on a TLS alert.
 * *want is the poll event to wait for before calling again. It stops once
 * OpenSSL holds nothing more (SSL_has_pending false), so a caller that
 * gets a full buffer must call again before it polls. */
long tls_client_read(SSL *ssl, char *buf, size_t len, short *want);

/* Write from iov what the socket takes now. The bytes written (>= 0; 0:
 * wait for *want), RINGCACHE_EIO or RINGCACHE_ETLS. Small iov parts are gathered into one
 * record, so a request costs one record, not one per part. */
long tls_client_write(SSL *ssl, const struct iovec *iov, int iovcnt, short *want);

/* Wait until the non-blocking socket fd is ready for ev (POLLIN,
 * POLLOUT) or deadline (monotonic ms) passes, through EINTR; a deadline
 * already past still gets one look without waiting. 0 when ready,
 * RINGCACHE_ETIMEDOUT, or RINGCACHE_EIO (poll failed; errno says why).
 * Every blocking wait of the client's sockets (pool.c, cport_client.c,
 * the handshake here) is this one. */
int tls_client_wait(int fd, short ev, int64_t deadline);

/* Send close_notify if the socket takes it now, and free ssl (NULL: no-op).
 * The caller closes the socket. */
void tls_client_close(SSL *ssl, bool notify);

#endif
