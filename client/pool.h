/*
 * pool: one node as the client sees it: its resolved address, a small
 * mutex-protected free list of connected non-blocking sockets, and its
 * up/down state with the retry back-off. Also the deadline-bounded socket
 * I/O the operations use.
 */
#ifndef CLIENT_POOL_H
#define CLIENT_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "client/tls_client.h"
#include "lib/util.h"

struct pool_config;

/* One connection. Owned by the pool while idle, by one thread while in use. */
struct pool_conn {
    int               fd;
    bool              connecting;  /* non-blocking connect still in progress */
    bool              reused;      /* came from the free list */
    int               rcvtimeo_ms; /* SO_RCVTIMEO of the socket (op timeout) */
    uint64_t          declared;    /* epoch this connection declared (`epoch <n>`), 0 none */
    char             *buf;         /* received bytes not yet consumed */
    size_t            cap;
    size_t            start; /* first unconsumed byte */
    size_t            end;   /* one past the last received byte */
    struct pool_conn *next;  /* free list link */
    /* TLS (cfg->tls set): the session once the handshake is done, and the
     * poll event a read and a write that would block wait for (OpenSSL may
     * need to write to read, or read to write). */
    SSL                      *ssl;
    short                     tls_rwant, tls_wwant;
    const struct pool_config *cfg;  /* the handle's, for the handshake */
    const char               *host; /* the node's host, for the name check */
};

struct pool_node {
    pthread_mutex_t         lock; /* guards everything below but host and port */
    struct sockaddr_storage addr; /* the host's address as last resolved */
    socklen_t               addr_len;
    bool                    resolved;  /* addr holds an address */
    char                    host[256]; /* as in the address, for TLS's name check */
    char                    port[8];
    struct pool_conn       *idle;
    unsigned                n_idle;
    bool                    down;       /* written under lock, read atomically */
    bool                    probing;    /* one thread is trying it again */
    unsigned                fails;      /* consecutive failures */
    int64_t                 down_until; /* monotonic ms */
    int                     last_err;   /* why it was last marked down (atomic) */
};

/* Timing knobs shared by every node of a handle. */
struct pool_config {
    int      connect_timeout_ms;
    int      op_timeout_ms;
    int      retry_interval_ms;
    int      retry_max_ms;
    unsigned pool_size;
    SSL_CTX *tls;            /* non-NULL: every connection speaks TLS (tls_client.h) */
    bool     tls_check_name; /* the certificate must name the node's host */
    char    *login;          /* non-NULL: the -Y login every new connection sends first */
    size_t   login_len;
};

/* Parse addr ("host:port" or "[v6]:port"), resolve it and set the node
 * up. A name that does not resolve now leaves the node down (last error
 * RINGCACHE_EIO): it is resolved again at each retry, and so is a node's
 * name whenever a new connection follows a failure, so a member back on
 * another address is found. 0, or RINGCACHE_EMEMBERS (a malformed
 * address) with a reason in err. */
int pool_node_init(struct pool_node *n, const char *addr, char *err, size_t errlen);

/* Close the idle connections and free the node's resources. */
void pool_node_destroy(struct pool_node *n);

/* May this thread talk to the node now? False while it is marked down.
 * When the retry time has come, exactly one caller gets true (the probe);
 * it must report the outcome with pool_node_ok or pool_node_failed.
 * Takes the node lock. */
bool pool_node_usable(struct pool_node *n, int64_t now);

/* Nonzero while the node is marked down (no side effect). */
bool pool_node_is_down(struct pool_node *n, int64_t now);

/* The error the node was last marked down for (0: never). */
int pool_node_error(struct pool_node *n);

/* The node answered: clear the down state. Takes the node lock. */
void pool_node_ok(struct pool_node *n);

/* The node failed with err (a RINGCACHE_ code, kept for
 * ringcache_node_error): mark it down for retry_interval << (fails-1),
 * capped, and close its idle connections (they are likely dead too). */
void pool_node_failed(struct pool_node *n, const struct pool_config *cfg, int err);

/* Close the idle connections (one was found dead: the rest are likely
 * dead too, e.g. after the node restarted). Takes the node lock. */
void pool_node_drop_idle(struct pool_node *n);

/* Take an idle connection or start a new non-blocking connect (the
 * returned conn then has connecting set). 0, RINGCACHE_EIO, or
 * RINGCACHE_ENOMEM. The caller owns *out until pool_release. */
int pool_acquire(struct pool_node *n, const struct pool_config *cfg, struct pool_conn **out);

/* Wait until a connecting conn is connected (and its TLS handshake done),
 * at most until deadline. 0, RINGCACHE_ETIMEDOUT, RINGCACHE_EIO or
 * RINGCACHE_ETLS. */
int pool_conn_wait_connected(struct pool_conn *c, int64_t deadline);

/* Finish a connect that poll reported ready, with the TLS handshake when
 * the handle speaks TLS: 0, RINGCACHE_EIO, RINGCACHE_ETIMEDOUT or
 * RINGCACHE_ETLS. */
int pool_conn_finish_connect(struct pool_conn *c);

/* Give a connection back. A healthy one (in step with the protocol, no
 * unread bytes) goes to the free list if there is room; otherwise it is
 * closed. */
void pool_release(struct pool_node *n, struct pool_conn *c, bool healthy,
                  const struct pool_config *cfg);

/* Close and free a connection that is not in any list. */
void pool_conn_close(struct pool_conn *c);
/* Close c; reset: with a TCP reset (after a timeout: see pool.c). */
void pool_conn_close_how(struct pool_conn *c, bool reset);

/* The poll event to wait for before reading (reading) or writing on c
 * again: POLLIN or POLLOUT, or under TLS what OpenSSL asked for. */
short pool_conn_events(const struct pool_conn *c, bool reading);

/* Send all of iov, waiting for the socket at most until deadline. 0,
 * RINGCACHE_ETIMEDOUT or RINGCACHE_EIO. */
int pool_conn_send(struct pool_conn *c, struct iovec *iov, int iovcnt, int64_t deadline);

/* Send what the socket takes now without waiting: advances iov and iovcnt.
 * 0 (maybe partial), or RINGCACHE_EIO. */
int pool_conn_send_some(struct pool_conn *c, struct iovec **iov, int *iovcnt);

/* Make room for at least `want` bytes after c->end (compacting first).
 * 0 or RINGCACHE_ENOMEM. */
int pool_conn_reserve(struct pool_conn *c, size_t want);

/* Read what is available now into the buffer without waiting. Returns the
 * bytes read (> 0), 0 when nothing is available yet, RINGCACHE_EIO on EOF
 * or error, RINGCACHE_ENOMEM. */
long pool_conn_recv_some(struct pool_conn *c);

/* Read at least one more byte, waiting at most until deadline. 0,
 * RINGCACHE_ETIMEDOUT, RINGCACHE_EIO or RINGCACHE_ENOMEM. When the whole
 * op timeout is still ahead it waits inside recv (bounded by SO_RCVTIMEO)
 * instead of poll + recv: one system call less per request. */
int pool_conn_recv(struct pool_conn *c, int64_t deadline);

#endif
