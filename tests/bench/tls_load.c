/*
 * tls_load: the load generator of tls_bench.sh (memcaslap speaks no TLS).
 * Same load over TLS or plaintext, so the servers and the two transports
 * compare on equal terms: CONNS connections, one thread each, each keeping
 * batches of DEPTH requests in flight (one set in ten, the rest gets of
 * preloaded keys, all hits) for SECS seconds. A batch's replies have a
 * known length; it is read whole and its last reply checked. Prints:
 *   ops N secs S ops_per_s X errors E
 * With -H: a new connection per request instead (handshake, version,
 * close), printing  handshakes N secs S handshakes_per_s X errors E.
 *
 *   tls_load -p PORT [-Z (TLS)] [-c CONNS] [-d DEPTH] [-t SECS] [-k KEYS]
 *            [-v VALUE_SIZE] [-H]
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#define KEY_FMT "key:%08u" /* 12 bytes for any key below 10^8 */
#define KEY_LEN 12

static int      port, nconns = 8, depth = 10, vsize = 100;
static uint32_t nkeys = 10000;
static double   secs = 3.0;
static bool     use_tls, handshakes;
static SSL_CTX *ctx;
static char    *value; /* vsize bytes of 'v' */

struct link {
    int  fd;
    SSL *ssl;
};

struct worker {
    pthread_t tid;
    unsigned  id;
    uint64_t  ops, errors;
};

static double
now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Connect (and handshake with -Z); -1 on failure. */
static int
link_open(struct link *l)
{
    struct sockaddr_in sa;
    struct timeval     tmo = { 10, 0 };
    int                one = 1;

    memset(l, 0, sizeof(*l));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    l->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (l->fd < 0 || connect(l->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        goto fail;
    }
    setsockopt(l->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* A server that stops answering fails the run instead of hanging it. */
    setsockopt(l->fd, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo));
    if (use_tls) {
        l->ssl = SSL_new(ctx);
        if (l->ssl == NULL || SSL_set_fd(l->ssl, l->fd) != 1 || SSL_connect(l->ssl) != 1) {
            goto fail;
        }
    }
    return 0;
fail:
    ERR_clear_error();
    if (l->ssl != NULL) {
        SSL_free(l->ssl);
    }
    if (l->fd >= 0) {
        close(l->fd);
    }
    return -1;
}

static void
link_close(struct link *l)
{
    if (l->ssl != NULL) {
        SSL_shutdown(l->ssl);
        SSL_free(l->ssl);
    }
    close(l->fd);
}

/* Write all of buf; 0 or -1. */
static int
link_write(struct link *l, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = l->ssl != NULL ? SSL_write(l->ssl, buf, (int)len) : write(l->fd, buf, len);

        if (n <= 0) {
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Read exactly len bytes; 0 or -1. */
static int
link_read(struct link *l, char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = l->ssl != NULL ? SSL_read(l->ssl, buf, (int)len) : read(l->fd, buf, len);

        if (n <= 0) {
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Append one request for key k to req (a set when set is true); returns
 * the bytes its reply will take. */
static size_t
add_request(char *req, size_t *rlen, uint32_t k, bool set)
{
    char key[KEY_LEN + 1];

    snprintf(key, sizeof(key), KEY_FMT, k);
    if (set) {
        *rlen += (size_t)sprintf(req + *rlen, "set %s 0 0 %d\r\n", key, vsize);
        memcpy(req + *rlen, value, (size_t)vsize);
        *rlen += (size_t)vsize;
        memcpy(req + *rlen, "\r\n", 2);
        *rlen += 2;
        return 8; /* STORED\r\n */
    }
    *rlen += (size_t)sprintf(req + *rlen, "get %s\r\n", key);
    return (size_t)snprintf(NULL, 0, "VALUE %s 0 %d\r\n", key, vsize) + (size_t)vsize + 7;
}

/* Preload every key (sets in batches on one connection); 0 or -1. */
static int
preload(void)
{
    size_t      cap = 64 * ((size_t)vsize + 64);
    char       *req = malloc(cap), *rep = malloc(64 * 8);
    struct link l;
    uint32_t    k;
    int         rc = -1;

    if (req == NULL || rep == NULL || link_open(&l) < 0) {
        goto out;
    }
    for (k = 0; k < nkeys;) {
        size_t   rlen = 0, want = 0;
        uint32_t i;

        for (i = 0; i < 64 && k < nkeys; i++, k++) {
            want += add_request(req, &rlen, k, true);
        }
        if (link_write(&l, req, rlen) < 0 || link_read(&l, rep, want) < 0) {
            link_close(&l);
            goto out;
        }
    }
    link_close(&l);
    rc = 0;
out:
    free(req);
    free(rep);
    return rc;
}

/* One connection's loop: batches of depth requests until the deadline. */
static void *
run_ops(void *arg)
{
    struct worker *w = arg;
    size_t         cap = (size_t)depth * ((size_t)vsize + 64);
    char          *req = malloc(cap), *rep = malloc(cap);
    uint32_t       k = w->id * 7919u;
    double         end = now() + secs;
    struct link    l;

    if (req == NULL || rep == NULL || link_open(&l) < 0) {
        w->errors++;
        goto out;
    }
    while (now() < end) {
        size_t rlen = 0, want = 0;
        int    i;

        for (i = 0; i < depth; i++, k++) {
            want += add_request(req, &rlen, k % nkeys, k % 10 == 0);
        }
        if (link_write(&l, req, rlen) < 0 || link_read(&l, rep, want) < 0 ||
            (memcmp(rep + want - 5, "END\r\n", 5) != 0 &&
             memcmp(rep + want - 8, "STORED\r\n", 8) != 0)) {
            w->errors++;
            break;
        }
        w->ops += (uint64_t)depth;
    }
    link_close(&l);
out:
    free(req);
    free(rep);
    return NULL;
}

/* -H: connect, version, close, as fast as it goes. */
static void *
run_handshakes(void *arg)
{
    struct worker *w = arg;
    double         end = now() + secs;
    char           buf[64];

    while (now() < end) {
        struct link l;
        ssize_t     n;

        if (link_open(&l) < 0) {
            w->errors++;
            continue;
        }
        n = link_write(&l, "version\r\n", 9) == 0
                ? (l.ssl != NULL ? SSL_read(l.ssl, buf, sizeof(buf)) : read(l.fd, buf, sizeof(buf)))
                : -1;
        if (n < 8 || memcmp(buf, "VERSION ", 8) != 0) {
            w->errors++;
        } else {
            w->ops++;
        }
        link_close(&l);
    }
    return NULL;
}

int
main(int argc, char **argv)
{
    struct worker *ws;
    uint64_t       ops = 0, errors = 0;
    double         t0, took;
    int            c, i;

    while ((c = getopt(argc, argv, "p:Zc:d:t:k:v:H")) != -1) {
        switch (c) {
        case 'p': port = atoi(optarg); break;
        case 'Z': use_tls = true; break;
        case 'c': nconns = atoi(optarg); break;
        case 'd': depth = atoi(optarg); break;
        case 't': secs = atof(optarg); break;
        case 'k': nkeys = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'v': vsize = atoi(optarg); break;
        case 'H': handshakes = true; break;
        default:
            fprintf(stderr, "usage: tls_load -p PORT [-Z] [-c CONNS] [-d DEPTH] [-t SECS] "
                            "[-k KEYS] [-v VALUE_SIZE] [-H]\n");
            return 2;
        }
    }
    if (port <= 0 || nconns < 1 || depth < 1 || vsize < 1 || nkeys < 1 || nkeys > 99999999) {
        fprintf(stderr, "tls_load: bad options\n");
        return 2;
    }
    value = malloc((size_t)vsize);
    ws = calloc((size_t)nconns, sizeof(*ws));
    if (value == NULL || ws == NULL) {
        return 1;
    }
    memset(value, 'v', (size_t)vsize);
    if (use_tls) {
        /* A benchmark: the certificate is throwaway, not checked. */
        ctx = SSL_CTX_new(TLS_client_method());
        if (ctx == NULL) {
            return 1;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        SSL_CTX_set_mode(ctx, SSL_MODE_AUTO_RETRY);
    }
    if (!handshakes && preload() < 0) {
        fprintf(stderr, "tls_load: preload failed\n");
        return 1;
    }
    t0 = now();
    for (i = 0; i < nconns; i++) {
        ws[i].id = (unsigned)i;
        pthread_create(&ws[i].tid, NULL, handshakes ? run_handshakes : run_ops, &ws[i]);
    }
    for (i = 0; i < nconns; i++) {
        pthread_join(ws[i].tid, NULL);
        ops += ws[i].ops;
        errors += ws[i].errors;
    }
    took = now() - t0;
    printf("%s %llu secs %.2f %s %.0f errors %llu\n", handshakes ? "handshakes" : "ops",
           (unsigned long long)ops, took, handshakes ? "handshakes_per_s" : "ops_per_s",
           (double)ops / took, (unsigned long long)errors);
    return errors > 0 ? 1 : 0;
}
