/*
 * replication_load: the load generator of replication_bench.py. Pipelined
 * sets of fixed-size values, each sent to its key's primary (placement from
 * the membership file through libring, so nothing is forwarded) on
 * connections that declare the epoch, from several threads for a fixed
 * time. Prints `ops N errors E secs S`.
 *
 *   replication_load --members FILE [--secs S] [--threads T] [--depth D]
 *                    [--size BYTES] [--keys N]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ring/ring.h"

#define MAX_NODES 16

static struct ring               *ring;
static const struct ring_members *mem;
static double                     secs = 3.0;
static int                        depth = 32, vsize = 100, nkeys = 30000;
static char                     **keys_of[MAX_NODES]; /* keys whose primary is node i */
static int                        nkeys_of[MAX_NODES];

struct worker {
    pthread_t tid;
    int       seed;
    uint64_t  ops, errors;
};

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A connection to "host:port" (IPv4 literal), epoch declared; -1 on error. */
static int
connect_node(const char *addr)
{
    char               host[64], buf[16];
    const char        *colon = strrchr(addr, ':');
    struct sockaddr_in sa;
    int                fd, one = 1;
    size_t             n;

    if (colon == NULL || (size_t)(colon - addr) >= sizeof(host)) {
        return -1;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        return -1;
    }
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        goto fail;
    }
    n = (size_t)snprintf(buf, sizeof(buf), "epoch %u\r\n", (unsigned)mem->epoch);
    if (write(fd, buf, n) != (ssize_t)n || read(fd, buf, 4) != 4 || memcmp(buf, "OK\r\n", 4)) {
        goto fail;
    }
    return fd;
fail:
    close(fd);
    return -1;
}

static pthread_mutex_t sample_lock = PTHREAD_MUTEX_INITIALIZER;
static char            error_sample[128]; /* the first reply that was not STORED */

/*
 * Read the n reply lines of a batch (lines, not bytes: an error line is
 * longer than "STORED\r\n" and must not shift the next batch's replies);
 * count the ones that are not STORED and keep the first as a sample.
 */
static int
read_replies(int fd, int n, uint64_t *errors)
{
    static __thread char   buf[1 << 16];
    static __thread size_t have;
    char                   line[sizeof(error_sample)];
    size_t                 llen = 0;
    bool                   trunc = false;

    while (n > 0) {
        char *p = buf, *nl;

        if (have == 0) {
            ssize_t r = read(fd, buf, sizeof(buf));

            if (r <= 0) {
                return -1;
            }
            have = (size_t)r;
        }
        while (n > 0 && (nl = memchr(p, '\n', have - (size_t)(p - buf))) != NULL) {
            size_t k = (size_t)(nl + 1 - p);

            if (!trunc && llen + k < sizeof(line)) {
                memcpy(line + llen, p, k);
                llen += k;
            } else {
                trunc = true;
            }
            if (trunc || llen != 8 || memcmp(line, "STORED\r\n", 8) != 0) {
                (*errors)++;
                pthread_mutex_lock(&sample_lock);
                if (error_sample[0] == '\0') {
                    snprintf(error_sample, sizeof(error_sample), "%.*s", (int)llen, line);
                }
                pthread_mutex_unlock(&sample_lock);
            }
            llen = 0;
            trunc = false;
            p = nl + 1;
            n--;
        }
        /* Keep the unfinished line (or a next batch's bytes: none, the
         * client waits for a batch before sending the next). */
        {
            size_t rest = have - (size_t)(p - buf);

            if (n > 0 && rest > 0) {
                if (!trunc && llen + rest < sizeof(line)) {
                    memcpy(line + llen, p, rest);
                    llen += rest;
                } else {
                    trunc = true;
                }
                rest = 0;
            }
            memmove(buf, p, rest);
            have = rest;
        }
    }
    return 0;
}

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    int            fds[MAX_NODES];
    size_t         cap = (size_t)depth * (64 + (size_t)vsize), i;
    char          *req = malloc(cap), *val = malloc((size_t)vsize);
    uint32_t       k = (uint32_t)w->seed * 7919u;
    double         end;

    memset(val, 'v', (size_t)vsize);
    for (i = 0; i < mem->n_nodes; i++) {
        fds[i] = connect_node(mem->nodes[i].addr);
        if (fds[i] < 0) {
            fprintf(stderr, "cannot connect to %s\n", mem->nodes[i].addr);
            exit(1);
        }
    }
    end = now_s() + secs;
    while (now_s() < end) {
        for (i = 0; i < mem->n_nodes; i++) {
            size_t len = 0;
            int    d;

            if (nkeys_of[i] == 0) {
                continue;
            }
            for (d = 0; d < depth; d++) {
                const char *key = keys_of[i][k++ % (uint32_t)nkeys_of[i]];

                len += (size_t)snprintf(req + len, cap - len, "set %s 0 0 %d\r\n", key, vsize);
                memcpy(req + len, val, (size_t)vsize);
                len += (size_t)vsize;
                memcpy(req + len, "\r\n", 2);
                len += 2;
            }
            if (write(fds[i], req, len) != (ssize_t)len) {
                fprintf(stderr, "write: %s\n", strerror(errno));
                exit(1);
            }
        }
        for (i = 0; i < mem->n_nodes; i++) {
            if (nkeys_of[i] == 0) {
                continue;
            }
            if (read_replies(fds[i], depth, &w->errors) < 0) {
                fprintf(stderr, "read failed\n");
                exit(1);
            }
            w->ops += (uint64_t)depth;
        }
    }
    for (i = 0; i < mem->n_nodes; i++) {
        close(fds[i]);
    }
    free(req);
    free(val);
    return NULL;
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "members", required_argument, NULL, 'm' },
        { "secs", required_argument, NULL, 's' },
        { "threads", required_argument, NULL, 't' },
        { "depth", required_argument, NULL, 'd' },
        { "size", required_argument, NULL, 'b' },
        { "keys", required_argument, NULL, 'k' },
        { NULL, 0, NULL, 0 },
    };
    struct ring_members *m = NULL;
    struct worker       *ws;
    const char          *path = NULL;
    char                 text[65536], err[256];
    uint64_t             ops = 0, errors = 0;
    int                  threads = 2, c, i;
    double               t0, t1;
    FILE                *f;
    size_t               n;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            path = optarg;
            break;
        case 's':
            secs = atof(optarg);
            break;
        case 't':
            threads = atoi(optarg);
            break;
        case 'd':
            depth = atoi(optarg);
            break;
        case 'b':
            vsize = atoi(optarg);
            break;
        case 'k':
            nkeys = atoi(optarg);
            break;
        default:
            return 2;
        }
    }
    if (path == NULL || threads < 1 || depth < 1 || vsize < 1 || nkeys < 1) {
        fprintf(stderr, "usage: replication_load --members FILE [--secs S] [--threads T] "
                        "[--depth D] [--size B] [--keys N]\n");
        return 2;
    }
    f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        return 2;
    }
    n = fread(text, 1, sizeof(text), f);
    fclose(f);
    if (ring_members_parse(text, n, path, &m, err, sizeof(err)) != RING_OK ||
        (ring = ring_build(m)) == NULL || m->n_nodes > MAX_NODES) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    mem = ring_members(ring);
    for (i = 0; i < (int)mem->n_nodes; i++) {
        keys_of[i] = calloc((size_t)nkeys, sizeof(char *));
    }
    for (i = 0; i < nkeys; i++) {
        char     key[32];
        uint32_t p;

        snprintf(key, sizeof(key), "rb-%d", i);
        p = ring_primary(ring, ring_hash(key, strlen(key)));
        keys_of[p][nkeys_of[p]++] = strdup(key);
    }
    ws = calloc((size_t)threads, sizeof(*ws));
    t0 = now_s();
    for (i = 0; i < threads; i++) {
        ws[i].seed = i + 1;
        pthread_create(&ws[i].tid, NULL, worker_main, &ws[i]);
    }
    for (i = 0; i < threads; i++) {
        pthread_join(ws[i].tid, NULL);
        ops += ws[i].ops;
        errors += ws[i].errors;
    }
    t1 = now_s();
    printf("ops %llu errors %llu secs %.3f\n", (unsigned long long)ops, (unsigned long long)errors,
           t1 - t0);
    if (errors > 0) {
        fprintf(stderr, "first error reply: %s", error_sample);
    }
    ring_members_free(m);
    return 0;
}
