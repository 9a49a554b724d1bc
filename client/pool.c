/*
 * pool: per-node connection pools, node up/down state with back-off, and
 * deadline-bounded non-blocking socket I/O (see pool.h). Every wait is a
 * poll(2) with a timeout computed from an absolute deadline, so no call
 * can outlive its deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "client/pool.h"
#include "client/ringcache.h"
#include "lib/util.h"

#define POOL_BUF_MIN  16384
#define POOL_BUF_KEEP (256 * 1024)

static bool pool_node_resolve(struct pool_node *n);

int
pool_node_init(struct pool_node *n, const char *addr, char *err, size_t errlen)
{
    char       *host = n->host;
    const char *colon, *port, *h;
    size_t      hlen;

    memset(n, 0, sizeof(*n));
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');

        if (close == NULL || close[1] != ':') {
            snprintf(err, errlen, "%s: expected [v6-address]:port", addr);
            return RINGCACHE_EMEMBERS;
        }
        h = addr + 1;
        hlen = (size_t)(close - h);
        port = close + 2;
    } else {
        colon = strrchr(addr, ':');
        if (colon == NULL) {
            snprintf(err, errlen, "%s: expected host:port", addr);
            return RINGCACHE_EMEMBERS;
        }
        h = addr;
        hlen = (size_t)(colon - addr);
        port = colon + 1;
    }
    if (hlen == 0 || hlen >= sizeof(n->host) || *port == '\0' || strlen(port) >= sizeof(n->port) ||
        strspn(port, "0123456789") != strlen(port)) {
        snprintf(err, errlen, "%s: expected host:port", addr);
        return RINGCACHE_EMEMBERS;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    memcpy(n->port, port, strlen(port) + 1);
    pthread_mutex_init(&n->lock, NULL);
    if (!pool_node_resolve(n)) {
        /* Down until a retry resolves it: the other members serve. */
        __atomic_store_n(&n->last_err, RINGCACHE_EIO, __ATOMIC_RELAXED);
        n->fails = 1;
        __atomic_store_n(&n->down, true, __ATOMIC_RELEASE);
    }
    return 0;
}

/* Look the node's host up now; true when it resolved (n->addr updated
 * under the lock). Blocks in getaddrinfo: called at creation and by the
 * one thread that probes a node after a failure, never on a healthy
 * node's requests. */
static bool
pool_node_resolve(struct pool_node *n)
{
    struct addrinfo hints, *res = NULL;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    if (getaddrinfo(n->host, n->port, &hints, &res) != 0 || res == NULL) {
        return false;
    }
    pthread_mutex_lock(&n->lock);
    memcpy(&n->addr, res->ai_addr, res->ai_addrlen);
    n->addr_len = res->ai_addrlen;
    n->resolved = true;
    pthread_mutex_unlock(&n->lock);
    freeaddrinfo(res);
    return true;
}

void
pool_conn_close(struct pool_conn *c)
{
    pool_conn_close_how(c, false);
}

/* See pool.h. A reset discards what the node has not read yet: a request
 * that timed out (the caller was told so) must not run later, after
 * writes the caller made since, when a stopped or cut-off node comes back
 * (a plain close still delivers it). */
void
pool_conn_close_how(struct pool_conn *c, bool reset)
{
    if (c == NULL) {
        return;
    }
    /* close_notify only on a clean close: a reset discards it anyway. */
    tls_client_close(c->ssl, !reset);
    if (c->fd >= 0) {
        if (reset) {
            struct linger lg = { 1, 0 };

            setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        }
        close(c->fd);
    }
    free(c->buf);
    free(c);
}

/* Detach the free list; the caller closes it outside the lock. Caller
 * holds n->lock. */
static struct pool_conn *
do_take_idle(struct pool_node *n)
{
    struct pool_conn *list = n->idle;

    n->idle = NULL;
    n->n_idle = 0;
    return list;
}

/* Close every connection of a detached list. */
static void
close_list(struct pool_conn *c)
{
    while (c != NULL) {
        struct pool_conn *next = c->next;

        pool_conn_close(c);
        c = next;
    }
}

void
pool_node_destroy(struct pool_node *n)
{
    close_list(do_take_idle(n));
    pthread_mutex_destroy(&n->lock);
}

bool
pool_node_usable(struct pool_node *n, int64_t now)
{
    bool ok;

    /* Fast path without the lock: most of the time the node is up. */
    if (!__atomic_load_n(&n->down, __ATOMIC_ACQUIRE)) {
        return true;
    }
    pthread_mutex_lock(&n->lock);
    if (!n->down) {
        ok = true;
    } else if (!n->probing && now >= n->down_until) {
        /* One thread tries the node again; the others keep treating it as
         * down, so a dead node costs one wait, not one per thread. */
        n->probing = true;
        ok = true;
    } else {
        ok = false;
    }
    pthread_mutex_unlock(&n->lock);
    return ok;
}

int
pool_node_error(struct pool_node *n)
{
    return __atomic_load_n(&n->last_err, __ATOMIC_RELAXED);
}

bool
pool_node_is_down(struct pool_node *n, int64_t now)
{
    (void)now;
    return __atomic_load_n(&n->down, __ATOMIC_ACQUIRE);
}

void
pool_node_ok(struct pool_node *n)
{
    if (!__atomic_load_n(&n->down, __ATOMIC_ACQUIRE)) {
        return;
    }
    pthread_mutex_lock(&n->lock);
    __atomic_store_n(&n->down, false, __ATOMIC_RELEASE);
    n->probing = false;
    n->fails = 0;
    pthread_mutex_unlock(&n->lock);
}

void
pool_node_failed(struct pool_node *n, const struct pool_config *cfg, int err)
{
    struct pool_conn *idle;
    int64_t           wait;
    unsigned          shift;

    if (err == RINGCACHE_EAUTH) {
        /* The node answered: it is up, it refused our credentials. No
         * back-off, no failover; the error says why. */
        pool_node_ok(n);
        __atomic_store_n(&n->last_err, err, __ATOMIC_RELAXED);
        return;
    }
    __atomic_store_n(&n->last_err, err, __ATOMIC_RELAXED);
    pthread_mutex_lock(&n->lock);
    if (n->down && !n->probing) {
        /* Another thread already marked this outage (requests that were
         * in flight fail together): one outage is one step of back-off. */
        idle = do_take_idle(n);
        pthread_mutex_unlock(&n->lock);
        close_list(idle);
        return;
    }
    if (n->fails < 31) {
        n->fails++;
    }
    shift = n->fails - 1 < 16 ? n->fails - 1 : 16;
    wait = (int64_t)cfg->retry_interval_ms << shift;
    if (wait > cfg->retry_max_ms) {
        wait = cfg->retry_max_ms;
    }
    if (wait < cfg->retry_interval_ms) {
        wait = cfg->retry_interval_ms;
    }
    __atomic_store_n(&n->down, true, __ATOMIC_RELEASE);
    n->probing = false;
    n->down_until = util_now_ms() + wait;
    idle = do_take_idle(n);
    pthread_mutex_unlock(&n->lock);
    close_list(idle);
}

void
pool_node_drop_idle(struct pool_node *n)
{
    struct pool_conn *idle;

    pthread_mutex_lock(&n->lock);
    idle = do_take_idle(n);
    pthread_mutex_unlock(&n->lock);
    close_list(idle);
}

/* A connect finished: from now on the socket blocks (every send passes
 * MSG_DONTWAIT and every wait is bounded), with a receive timeout of one
 * operation, so a reply can be awaited inside recv itself. Under TLS the
 * socket stays non-blocking (OpenSSL's reads take no MSG_DONTWAIT) and
 * the handshake runs now, bounded by one operation's timeout. */
static int conn_login(struct pool_conn *c);

static int
conn_connected(struct pool_conn *c)
{
    struct timeval tv;
    int            fl;

    c->connecting = false;
    if (c->cfg->tls != NULL) {
        int rc;

        c->tls_rwant = POLLIN;
        c->tls_wwant = POLLOUT;
        rc = tls_client_handshake(c->cfg->tls, c->fd, c->host, c->cfg->tls_check_name,
                                  util_now_ms() + c->rcvtimeo_ms, &c->ssl, NULL, 0);
        return rc != 0 || c->cfg->login == NULL ? rc : conn_login(c);
    }
    tv.tv_sec = c->rcvtimeo_ms / 1000;
    tv.tv_usec = (c->rcvtimeo_ms % 1000) * 1000;
    fl = fcntl(c->fd, F_GETFL);
    if (fl < 0 || fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK) != 0 ||
        setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) {
        return RINGCACHE_EIO;
    }
    return c->cfg->login == NULL ? 0 : conn_login(c);
}

/*
 * memcached's -Y login on c's new connection (cfg->login): STORED lets
 * the requests in; anything else (CLIENT_ERROR authentication failure,
 * or a node without -Y refusing the over-long key) is RINGCACHE_EAUTH.
 * Bounded by one operation's timeout.
 */
static int
conn_login(struct pool_conn *c)
{
    static const char STORED[] = "STORED";
    struct iovec      v = { c->cfg->login, c->cfg->login_len };
    int64_t           deadline = util_now_ms() + c->rcvtimeo_ms;
    const char       *line, *eol = NULL;
    int               rc;

    rc = pool_conn_send(c, &v, 1, deadline);
    /* Nothing read yet is no line (and c->buf may still be NULL, which
     * memmem must not be given). */
    while (rc == 0 && (c->end == c->start ||
                       (eol = memmem(c->buf + c->start, c->end - c->start, "\r\n", 2)) == NULL)) {
        rc = pool_conn_recv(c, deadline);
    }
    if (rc != 0) {
        return rc;
    }
    line = c->buf + c->start;
    c->start = (size_t)(eol + 2 - c->buf);
    if ((size_t)(eol - line) != sizeof(STORED) - 1 ||
        memcmp(line, STORED, sizeof(STORED) - 1) != 0) {
        return RINGCACHE_EAUTH;
    }
    return c->start == c->end ? 0 : RINGCACHE_EPROTO;
}

int
pool_acquire(struct pool_node *n, const struct pool_config *cfg, struct pool_conn **out)
{
    struct pool_conn       *c;
    struct sockaddr_storage sa;
    socklen_t               sa_len;
    bool                    again;
    int                     fd, rc, one = 1;

    pthread_mutex_lock(&n->lock);
    c = n->idle;
    if (c != NULL) {
        n->idle = c->next;
        n->n_idle--;
    }
    /* A new connection after a failure: the member may be back on another
     * address (a rescheduled pod), so its name is looked up again. */
    again = c == NULL && (!n->resolved || n->fails > 0);
    pthread_mutex_unlock(&n->lock);
    if (c != NULL) {
        c->next = NULL;
        c->reused = true;
        *out = c;
        return 0;
    }
    if (again) {
        pool_node_resolve(n);
    }
    pthread_mutex_lock(&n->lock);
    sa = n->addr;
    sa_len = n->addr_len;
    again = !n->resolved;
    pthread_mutex_unlock(&n->lock);
    if (again) {
        return RINGCACHE_EIO; /* the name does not resolve (yet) */
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return RINGCACHE_ENOMEM;
    }
    fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        free(c);
        return RINGCACHE_EIO;
    }
    c->fd = fd;
    c->rcvtimeo_ms = cfg->op_timeout_ms;
    c->cfg = cfg;
    c->host = n->host;
    /* Requests are small and latency-bound: never wait for Nagle. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&sa, sa_len) != 0) {
        if (errno != EINPROGRESS) {
            pool_conn_close(c);
            return RINGCACHE_EIO;
        }
        c->connecting = true;
    } else if ((rc = conn_connected(c)) != 0) {
        pool_conn_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

int
pool_conn_finish_connect(struct pool_conn *c)
{
    int       soerr = 0;
    socklen_t len = sizeof(soerr);

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0) {
        return RINGCACHE_EIO;
    }
    return conn_connected(c);
}

int
pool_conn_wait_connected(struct pool_conn *c, int64_t deadline)
{
    int rc;

    if (!c->connecting) {
        return 0;
    }
    rc = tls_client_wait(c->fd, POLLOUT, deadline);
    if (rc != 0) {
        return rc;
    }
    return pool_conn_finish_connect(c);
}

void
pool_release(struct pool_node *n, struct pool_conn *c, bool healthy, const struct pool_config *cfg)
{
    if (healthy && !c->connecting && c->start == c->end) {
        c->start = c->end = 0;
        /* A big value grew the buffer: do not park megabytes in the pool. */
        if (c->cap > POOL_BUF_KEEP) {
            free(c->buf);
            c->buf = NULL;
            c->cap = 0;
        }
        pthread_mutex_lock(&n->lock);
        if (n->n_idle < cfg->pool_size) {
            c->next = n->idle;
            n->idle = c;
            n->n_idle++;
            c = NULL;
        }
        pthread_mutex_unlock(&n->lock);
    }
    pool_conn_close(c);
}

short
pool_conn_events(const struct pool_conn *c, bool reading)
{
    if (c->ssl != NULL) {
        return reading ? c->tls_rwant : c->tls_wwant;
    }
    return reading ? POLLIN : POLLOUT;
}

/*
 * A write on c's TLS session failed. Under TLS 1.3 a node that refuses
 * the client's certificate judges it after the client's handshake is
 * done: it sends its alert and closes, and the request written meanwhile
 * meets a reset. The alert came in before the reset, so it is read now
 * (without waiting): RINGCACHE_ETLS when it is there, else RINGCACHE_EIO.
 */
static int
tls_write_broke(struct pool_conn *c)
{
    char  buf[512];
    short want;
    long  got;

    do {
        got = tls_client_read(c->ssl, buf, sizeof(buf), &want);
    } while (got > 0);
    return got == RINGCACHE_ETLS ? RINGCACHE_ETLS : RINGCACHE_EIO;
}

int
pool_conn_send_some(struct pool_conn *c, struct iovec **iov, int *iovcnt)
{
    struct msghdr msg;
    ssize_t       n;

    while (*iovcnt > 0) {
        if (c->ssl != NULL) {
            if ((*iov)->iov_len == 0) {
                n = 0; /* an empty part: dropped below */
            } else if ((n = tls_client_write(c->ssl, *iov, *iovcnt, &c->tls_wwant)) <= 0) {
                return n == RINGCACHE_EIO ? tls_write_broke(c) : (int)n;
            }
            goto sent;
        }
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov = *iov;
        msg.msg_iovlen = (size_t)*iovcnt;
        n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return 0;
            }
            return RINGCACHE_EIO;
        }
    sent:
        /* Drop what was sent from the front of the vector. */
        while (*iovcnt > 0 && (size_t)n >= (*iov)->iov_len) {
            n -= (ssize_t)(*iov)->iov_len;
            (*iov)++;
            (*iovcnt)--;
        }
        if (*iovcnt > 0) {
            (*iov)->iov_base = (char *)(*iov)->iov_base + n;
            (*iov)->iov_len -= (size_t)n;
        }
    }
    return 0;
}

int
pool_conn_send(struct pool_conn *c, struct iovec *iov, int iovcnt, int64_t deadline)
{
    int rc;

    for (;;) {
        rc = pool_conn_send_some(c, &iov, &iovcnt);
        if (rc != 0 || iovcnt == 0) {
            return rc;
        }
        rc = tls_client_wait(c->fd, pool_conn_events(c, false), deadline);
        if (rc != 0) {
            return rc;
        }
    }
}

int
pool_conn_reserve(struct pool_conn *c, size_t want)
{
    char  *nbuf;
    size_t ncap;

    if (c->cap - c->end >= want) {
        return 0;
    }
    if (c->start > 0) {
        memmove(c->buf, c->buf + c->start, c->end - c->start);
        c->end -= c->start;
        c->start = 0;
        if (c->cap - c->end >= want) {
            return 0;
        }
    }
    ncap = c->cap == 0 ? POOL_BUF_MIN : c->cap;
    while (ncap - c->end < want) {
        ncap *= 2;
    }
    nbuf = realloc(c->buf, ncap);
    if (nbuf == NULL) {
        return RINGCACHE_ENOMEM;
    }
    c->buf = nbuf;
    c->cap = ncap;
    return 0;
}

/* Under TLS: read until OpenSSL holds nothing more, growing the buffer as
 * it fills, so nothing decrypted stays behind where poll cannot see it
 * (tls_client.h). */
static long
tls_recv_all(struct pool_conn *c)
{
    long total = 0, n;

    for (;;) {
        if (pool_conn_reserve(c, 16384) != 0) {
            return total > 0 ? total : RINGCACHE_ENOMEM;
        }
        n = tls_client_read(c->ssl, c->buf + c->end, c->cap - c->end, &c->tls_rwant);
        if (n <= 0) {
            return total > 0 ? total : n;
        }
        c->end += (size_t)n;
        total += n;
        if (!SSL_has_pending(c->ssl)) {
            return total;
        }
    }
}

long
pool_conn_recv_some(struct pool_conn *c)
{
    ssize_t n;

    if (pool_conn_reserve(c, 4096) != 0) {
        return RINGCACHE_ENOMEM;
    }
    if (c->ssl != NULL) {
        return tls_recv_all(c);
    }
    for (;;) {
        n = recv(c->fd, c->buf + c->end, c->cap - c->end, MSG_DONTWAIT);
        if (n > 0) {
            c->end += (size_t)n;
            return (long)n;
        }
        if (n == 0) {
            return RINGCACHE_EIO;
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return 0;
        }
        return RINGCACHE_EIO;
    }
}

int
pool_conn_recv(struct pool_conn *c, int64_t deadline)
{
    ssize_t got;
    short   ev = POLLIN;
    long    n;
    int     rc;

    /* The whole op timeout is still ahead (the usual case: the request
     * was just sent; the 1 ms slack covers a tick of the ms clock): wait
     * in recv, which SO_RCVTIMEO bounds by that timeout. */
    if (c->ssl == NULL && deadline - util_now_ms() >= c->rcvtimeo_ms - 1) {
        if (pool_conn_reserve(c, 4096) != 0) {
            return RINGCACHE_ENOMEM;
        }
        do {
            got = recv(c->fd, c->buf + c->end, c->cap - c->end, 0);
        } while (got < 0 && errno == EINTR);
        if (got > 0) {
            c->end += (size_t)got;
            return 0;
        }
        if (got == 0) {
            return RINGCACHE_EIO;
        }
        return errno == EAGAIN || errno == EWOULDBLOCK ? RINGCACHE_ETIMEDOUT : RINGCACHE_EIO;
    }
    /* Part of the time is spent: wait with poll for what is left, then
     * read without blocking. */
    for (;;) {
        rc = tls_client_wait(c->fd, ev, deadline);
        if (rc != 0) {
            return rc;
        }
        n = pool_conn_recv_some(c);
        if (n != 0) {
            return n > 0 ? 0 : (int)n;
        }
        /* Only TLS records (say a session ticket) came, or OpenSSL wants
         * to write first. */
        ev = pool_conn_events(c, true);
    }
}
