/*
 * meta_load: the load generator of meta_bench.sh, for any server that speaks
 * memcached's meta protocol. Preloads the keys with ms, then keeps batches
 * of DEPTH meta requests in flight on every connection for SECS seconds and
 * checks every reply byte for byte (VA <n> and its block, EN, HD, MN; any
 * other reply fails the run). Prints one line:
 *   ops N secs S ops_per_s X errors E hit H flags F miss M quiet Q set S
 *   evicted V quiet_va A
 * and exits 1 when a reply was wrong or a connection failed.
 *
 *   meta_load [-s HOST:PORT] [-T THREADS] [-c CONNS_PER_THREAD] [-d DEPTH]
 *             [-t SECS] [-k KEYS] [-v VALUE_SIZE] [-K KEY_LEN] [-m MIX]
 *             [-n (no preload)]
 *
 * MIX is kind[:weight],... with the kinds
 *   hit    mg <key> v          -> VA <size>
 *   flags  mg <key> v t c f    -> VA <size> t<ttl> c<cas> f<flags>
 *   miss   mg <missing> v      -> EN
 *   quiet  mg <key> v q        -> VA <size> (nothing on a miss), then mn -> MN
 *   set    ms <key> <size> F7  -> HD
 * A batch sends its quiet requests last, followed by one mn, so each reply
 * has exactly one request it can belong to.
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FLAG_VALUE     7    /* the client flags every ms stores (F7) */
#define REPLY_LINE_MAX 1024 /* longer reply lines are errors */
#define PRELOAD_DEPTH  64

enum kind {
    K_HIT,
    K_FLAGS,
    K_MISS,
    K_QUIET,
    K_SET,
    K_NKINDS
};

static const char *const kind_name[K_NKINDS] = { "hit", "flags", "miss", "quiet", "set" };

/* Options, fixed before the threads start. */
static const char *server = "127.0.0.1:11211";
static int         nthreads = 2, nconns = 16, depth = 1, keylen = 32, vsize = 100;
static double      secs = 3.0;
static uint32_t    nkeys = 100000;
static bool        preload = true;
static unsigned    weight[K_NKINDS], weight_sum;
static char       *value; /* vsize bytes: every value stored and expected */

static struct sockaddr_storage addr;
static socklen_t               addrlen;
static pthread_barrier_t       start_barrier;
static double                  deadline;
static pthread_mutex_t         err_lock = PTHREAD_MUTEX_INITIALIZER;
static int                     err_reports; /* error samples printed so far */

/* One connection and the batch it has in flight. */
struct mconn {
    int       fd;
    char     *wbuf;
    size_t    wlen, woff, wcap;
    char     *rbuf;
    size_t    rlen, rpos, rcap;
    uint8_t  *kinds;  /* the replies expected, in order, before the quiet part */
    uint32_t *qkeys;  /* the keys of the quiet requests, while building */
    int       nplain; /* requests that each get exactly one reply */
    int       nquiet; /* quiet mg after them, then one mn (when > 0) */
    int       next;   /* index in kinds of the next reply; nplain: the quiet part */
    int       qseen;  /* VA replies read in the quiet part */
    bool      busy;   /* a batch is in flight */
    bool      dead;
};

struct worker {
    pthread_t     tid;
    int           id;
    uint64_t      rng;
    struct mconn *conns;
    uint32_t      pre_next, pre_end; /* preload: the keys still to set */
    bool          preloading;
    uint64_t      ops[K_NKINDS];
    uint64_t      evicted; /* hit or flags answered EN */
    uint64_t      quiet_va;
    uint64_t      errors;
    double        end; /* when its last batch completed */
};

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t
rng_next(uint64_t *s)
{
    uint64_t x = *s;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

/* The key of index i into buf (keylen bytes, no terminator): "k" for the
 * stored keys, "m" for the ones never stored, zero-padded. */
static void
key_of(char *buf, char prefix, uint32_t i)
{
    char tmp[16];
    int  n = snprintf(tmp, sizeof(tmp), "%u", i);

    buf[0] = prefix;
    memset(buf + 1, '0', (size_t)keylen - 1 - (size_t)n);
    memcpy(buf + keylen - n, tmp, (size_t)n);
}

/* Report a wrong reply (the first few, with the bytes that were wrong),
 * count it and close the connection: after a wrong reply the stream
 * cannot be trusted. */
static void
conn_fail(struct worker *w, struct mconn *c, const char *why)
{
    w->errors++;
    pthread_mutex_lock(&err_lock);
    if (err_reports++ < 5) {
        size_t avail = c->rlen > c->rpos ? c->rlen - c->rpos : 0, n = avail < 80 ? avail : 80, i;

        fprintf(stderr, "meta_load: thread %d: %s; reply bytes: \"", w->id, why);
        for (i = 0; i < n; i++) {
            unsigned char ch = (unsigned char)c->rbuf[c->rpos + i];

            if (ch >= 32 && ch < 127 && ch != '"' && ch != '\\') {
                fputc(ch, stderr);
            } else {
                fprintf(stderr, "\\x%02x", ch);
            }
        }
        fprintf(stderr, "\"\n");
    }
    pthread_mutex_unlock(&err_lock);
    close(c->fd);
    c->fd = -1;
    c->dead = true;
    c->busy = false;
}

static void
put(struct mconn *c, const void *p, size_t n)
{
    memcpy(c->wbuf + c->wlen, p, n);
    c->wlen += n;
}

static void
put_mg(struct mconn *c, char prefix, uint32_t i, const char *flags)
{
    put(c, "mg ", 3);
    key_of(c->wbuf + c->wlen, prefix, i);
    c->wlen += (size_t)keylen;
    put(c, flags, strlen(flags));
}

static void
put_ms(struct mconn *c, uint32_t i)
{
    put(c, "ms ", 3);
    key_of(c->wbuf + c->wlen, 'k', i);
    c->wlen += (size_t)keylen;
    c->wlen += (size_t)sprintf(c->wbuf + c->wlen, " %d F%d\r\n", vsize, FLAG_VALUE);
    put(c, value, (size_t)vsize);
    put(c, "\r\n", 2);
}

static enum kind
pick_kind(struct worker *w)
{
    unsigned r = (unsigned)(rng_next(&w->rng) % weight_sum);
    int      k;

    for (k = 0; k < K_NKINDS - 1; k++) {
        if (r < weight[k]) {
            break;
        }
        r -= weight[k];
    }
    return (enum kind)k;
}

/* Fill c's write buffer with the next batch; false when there is none
 * (preload finished). */
static bool
batch_build(struct worker *w, struct mconn *c)
{
    int d, n = w->preloading ? PRELOAD_DEPTH : depth;

    c->wlen = c->woff = 0;
    c->nplain = c->nquiet = c->next = c->qseen = 0;
    if (w->preloading) {
        for (d = 0; d < n && w->pre_next < w->pre_end; d++) {
            put_ms(c, w->pre_next++);
            c->kinds[c->nplain++] = K_SET;
        }
        return c->nplain > 0;
    }
    for (d = 0; d < n; d++) {
        enum kind k = pick_kind(w);
        uint32_t  i = (uint32_t)(rng_next(&w->rng) % nkeys);

        switch (k) {
        case K_HIT:
            put_mg(c, 'k', i, " v\r\n");
            break;
        case K_FLAGS:
            put_mg(c, 'k', i, " v t c f\r\n");
            break;
        case K_MISS:
            put_mg(c, 'm', i, " v\r\n");
            break;
        case K_SET:
            put_ms(c, i);
            break;
        case K_QUIET:
        case K_NKINDS:
            c->qkeys[c->nquiet++] = i;
            continue;
        }
        c->kinds[c->nplain++] = (uint8_t)k;
    }
    for (d = 0; d < c->nquiet; d++) {
        put_mg(c, 'k', c->qkeys[d], " v q\r\n");
    }
    if (c->nquiet > 0) {
        put(c, "mn\r\n", 4);
    }
    return true;
}

/* Read an unsigned decimal from [*p, end) up to a space or '\r'. */
static bool
read_num(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    uint64_t    v = 0;

    while (s < end && *s >= '0' && *s <= '9' && v < UINT64_MAX / 10) {
        v = v * 10 + (uint64_t)(*s - '0');
        s++;
    }
    if (s == *p) {
        return false;
    }
    *p = s;
    *out = v;
    return true;
}

/* The return flags of an mg with "v t c f": exactly " t<ttl> c<cas> f7",
 * the TTL being -1 (the keys never expire). */
static bool
check_tcf(const char *p, const char *end)
{
    uint64_t v;

    if (end - p < 5 || memcmp(p, " t-1", 4) != 0) {
        return false;
    }
    p += 4;
    if (end - p < 3 || memcmp(p, " c", 2) != 0) {
        return false;
    }
    p += 2;
    if (!read_num(&p, end, &v)) {
        return false;
    }
    if (end - p < 3 || memcmp(p, " f", 2) != 0) {
        return false;
    }
    p += 2;
    return read_num(&p, end, &v) && v == FLAG_VALUE && p == end;
}

/*
 * Check the replies in c's read buffer against its batch. 1: the batch is
 * complete; 0: more bytes needed; -1: a wrong reply (the connection has
 * been failed).
 */
static int
conn_parse(struct worker *w, struct mconn *c)
{
    for (;;) {
        const char *p = c->rbuf + c->rpos, *nl, *le;
        size_t      avail = c->rlen - c->rpos, ll;
        bool        quiet_part = c->next >= c->nplain;
        enum kind   k;

        if (quiet_part && c->nquiet == 0) {
            return 1;
        }
        k = quiet_part ? K_QUIET : (enum kind)c->kinds[c->next];
        nl = memchr(p, '\n', avail);
        if (nl == NULL) {
            if (avail > REPLY_LINE_MAX) {
                conn_fail(w, c, "reply line too long");
                return -1;
            }
            return 0;
        }
        ll = (size_t)(nl + 1 - p);
        if (ll < 4 || nl[-1] != '\r') {
            conn_fail(w, c, "reply line not ended by \\r\\n");
            return -1;
        }
        le = nl - 1; /* the '\r' */
        if (memcmp(p, "VA ", 3) == 0) {
            const char *q = p + 3;
            uint64_t    n;

            if (k != K_HIT && k != K_FLAGS && k != K_QUIET) {
                conn_fail(w, c, k == K_MISS ? "VA for a key never stored" : "VA for an ms");
                return -1;
            }
            if (!read_num(&q, le, &n) || n != (uint64_t)vsize) {
                conn_fail(w, c, "VA with a wrong size");
                return -1;
            }
            if (k == K_FLAGS ? !check_tcf(q, le) : q != le) {
                conn_fail(w, c, "VA with wrong return flags");
                return -1;
            }
            if (avail < ll + n + 2) {
                if (ll + n + 2 > c->rcap) {
                    conn_fail(w, c, "VA larger than the read buffer");
                    return -1;
                }
                return 0;
            }
            if (memcmp(p + ll, value, n) != 0 || memcmp(p + ll + n, "\r\n", 2) != 0) {
                c->rpos += ll; /* show the block */
                conn_fail(w, c, "VA block differs from the value stored");
                return -1;
            }
            c->rpos += ll + n + 2;
            if (quiet_part) {
                if (++c->qseen > c->nquiet) {
                    conn_fail(w, c, "more VA than quiet requests");
                    return -1;
                }
                w->quiet_va++;
            } else {
                w->ops[k]++;
                c->next++;
            }
            continue;
        }
        if (ll == 4 && memcmp(p, "EN", 2) == 0 && !quiet_part &&
            (k == K_HIT || k == K_FLAGS || k == K_MISS)) {
            /* A stored key can be evicted: legal, but counted, as a hit
             * that misses measures a different path. */
            w->evicted += k != K_MISS;
            w->ops[k]++;
            c->next++;
            c->rpos += ll;
            continue;
        }
        if (ll == 4 && memcmp(p, "HD", 2) == 0 && k == K_SET) {
            w->ops[k]++;
            c->next++;
            c->rpos += ll;
            continue;
        }
        if (ll == 4 && memcmp(p, "MN", 2) == 0 && quiet_part) {
            w->ops[K_QUIET] += (uint64_t)c->nquiet;
            c->rpos += ll;
            return 1;
        }
        conn_fail(w, c, "unexpected reply");
        return -1;
    }
}

/* Send what is left of c's batch; -1 when the connection failed. */
static int
conn_write(struct worker *w, struct mconn *c)
{
    while (c->woff < c->wlen) {
        ssize_t n = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);

        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return 0;
            }
            if (errno == EINTR) {
                continue;
            }
            conn_fail(w, c, strerror(errno));
            return -1;
        }
        c->woff += (size_t)n;
    }
    return 0;
}

/* Read what the socket has; -1 when the connection failed or closed. */
static int
conn_read(struct worker *w, struct mconn *c)
{
    ssize_t n;

    if (c->rpos == c->rlen) {
        c->rpos = c->rlen = 0;
    } else if (c->rpos > 0 && c->rcap - c->rlen < c->rcap / 2) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
    }
    n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            return 0;
        }
        conn_fail(w, c, strerror(errno));
        return -1;
    }
    if (n == 0) {
        conn_fail(w, c, "connection closed by the server");
        return -1;
    }
    c->rlen += (size_t)n;
    return 0;
}

/* Start c's next batch, unless the run (or the preload) is over. */
static void
conn_next(struct worker *w, struct mconn *c)
{
    if (c->rpos != c->rlen) {
        conn_fail(w, c, "reply bytes after the end of the batch");
        return;
    }
    c->busy = false;
    if (!w->preloading && now_s() >= deadline) {
        return;
    }
    if (!batch_build(w, c)) {
        return;
    }
    c->busy = true;
    conn_write(w, c);
}

/* Run every connection of w until none has a batch in flight. */
static void
worker_loop(struct worker *w)
{
    struct pollfd pfd[nconns];
    int           idx[nconns];
    int           i, n;

    for (i = 0; i < nconns; i++) {
        if (!w->conns[i].dead) {
            conn_next(w, &w->conns[i]);
        }
    }
    for (;;) {
        n = 0;
        for (i = 0; i < nconns; i++) {
            struct mconn *c = &w->conns[i];

            if (c->busy) {
                pfd[n].fd = c->fd;
                pfd[n].events = (short)(c->woff < c->wlen ? POLLIN | POLLOUT : POLLIN);
                pfd[n].revents = 0;
                idx[n++] = i;
            }
        }
        if (n == 0) {
            break;
        }
        if (poll(pfd, (nfds_t)n, 10000) <= 0) {
            for (i = 0; i < n; i++) {
                conn_fail(w, &w->conns[idx[i]], "no reply within 10 s");
            }
            continue;
        }
        for (i = 0; i < n; i++) {
            struct mconn *c = &w->conns[idx[i]];
            int           r;

            if (pfd[i].revents & POLLOUT && conn_write(w, c) < 0) {
                continue;
            }
            if (!(pfd[i].revents & (POLLIN | POLLERR | POLLHUP))) {
                continue;
            }
            if (conn_read(w, c) < 0) {
                continue;
            }
            r = conn_parse(w, c);
            if (r == 1) {
                conn_next(w, c);
            }
        }
    }
}

static int
conn_open(struct mconn *c)
{
    int one = 1;

    memset(c, 0, sizeof(*c));
    c->fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c->fd < 0) {
        return -1;
    }
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(c->fd, (struct sockaddr *)&addr, addrlen) < 0 && errno != EINPROGRESS) {
        close(c->fd);
        return -1;
    }
    {
        struct pollfd p = { .fd = c->fd, .events = POLLOUT };
        int           err = 0;
        socklen_t     el = sizeof(err);

        if (poll(&p, 1, 5000) != 1 || getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 ||
            err != 0) {
            close(c->fd);
            errno = err != 0 ? err : ETIMEDOUT;
            return -1;
        }
    }
    {
        int    d = depth > PRELOAD_DEPTH ? depth : PRELOAD_DEPTH;
        size_t per = 3 + (size_t)keylen + 32 + (size_t)vsize + 2;

        c->wcap = (size_t)d * per + 8;
        c->rcap = 65536 > 2 * ((size_t)vsize + REPLY_LINE_MAX)
                      ? 65536
                      : 2 * ((size_t)vsize + REPLY_LINE_MAX);
        c->wbuf = malloc(c->wcap);
        c->rbuf = malloc(c->rcap);
        c->kinds = malloc((size_t)d);
        c->qkeys = malloc((size_t)d * sizeof(uint32_t));
    }
    if (c->wbuf == NULL || c->rbuf == NULL || c->kinds == NULL || c->qkeys == NULL) {
        return -1;
    }
    return 0;
}

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    int            i;

    if (preload) {
        w->preloading = true;
        worker_loop(w);
        w->preloading = false;
        memset(w->ops, 0, sizeof(w->ops));
    }
    pthread_barrier_wait(&start_barrier); /* preload done everywhere */
    pthread_barrier_wait(&start_barrier); /* main has set the deadline */
    worker_loop(w);
    w->end = now_s();
    for (i = 0; i < nconns; i++) {
        if (!w->conns[i].dead) {
            close(w->conns[i].fd);
        }
    }
    return NULL;
}

static int
parse_mix(const char *spec)
{
    char *copy = strdup(spec), *save = NULL, *tok;
    int   k;

    memset(weight, 0, sizeof(weight));
    weight_sum = 0;
    for (tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        char    *colon = strchr(tok, ':');
        unsigned wt = 1;

        if (colon != NULL) {
            *colon = '\0';
            wt = (unsigned)strtoul(colon + 1, NULL, 10);
        }
        for (k = 0; k < K_NKINDS && strcmp(tok, kind_name[k]) != 0; k++) {
        }
        if (k == K_NKINDS) {
            fprintf(stderr, "meta_load: unknown kind '%s' in the mix\n", tok);
            free(copy);
            return -1;
        }
        weight[k] += wt;
        weight_sum += wt;
    }
    free(copy);
    return weight_sum > 0 ? 0 : -1;
}

static int
resolve(const char *hostport)
{
    char            host[256];
    const char     *colon = strrchr(hostport, ':');
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
    size_t          hl;

    if (colon == NULL || (hl = (size_t)(colon - hostport)) >= sizeof(host)) {
        return -1;
    }
    memcpy(host, hostport, hl);
    host[hl] = '\0';
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0) {
        return -1;
    }
    memcpy(&addr, res->ai_addr, res->ai_addrlen);
    addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static void
usage(void)
{
    fprintf(stderr, "usage: meta_load [-s HOST:PORT] [-T THREADS] [-c CONNS_PER_THREAD] "
                    "[-d DEPTH] [-t SECS] [-k KEYS] [-v VALUE_SIZE] [-K KEY_LEN] "
                    "[-m kind[:weight],...] [-n]\n"
                    "  kinds: hit flags miss quiet set\n");
    exit(2);
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "server", required_argument, NULL, 's' }, { "threads", required_argument, NULL, 'T' },
        { "conns", required_argument, NULL, 'c' },  { "depth", required_argument, NULL, 'd' },
        { "secs", required_argument, NULL, 't' },   { "keys", required_argument, NULL, 'k' },
        { "size", required_argument, NULL, 'v' },   { "key-len", required_argument, NULL, 'K' },
        { "mix", required_argument, NULL, 'm' },    { "no-preload", no_argument, NULL, 'n' },
        { "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 }
    };
    const char    *mix = "hit";
    struct worker *w;
    uint64_t       ops = 0, errors = 0, evicted = 0, quiet_va = 0, per[K_NKINDS] = { 0 };
    double         start, end = 0;
    int            opt, i, j, k;

    while ((opt = getopt_long(argc, argv, "s:T:c:d:t:k:v:K:m:nh", longopts, NULL)) != -1) {
        switch (opt) {
        case 's':
            server = optarg;
            break;
        case 'T':
            nthreads = atoi(optarg);
            break;
        case 'c':
            nconns = atoi(optarg);
            break;
        case 'd':
            depth = atoi(optarg);
            break;
        case 't':
            secs = atof(optarg);
            break;
        case 'k':
            nkeys = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'v':
            vsize = atoi(optarg);
            break;
        case 'K':
            keylen = atoi(optarg);
            break;
        case 'm':
            mix = optarg;
            break;
        case 'n':
            preload = false;
            break;
        default:
            usage();
        }
    }
    if (optind != argc || nthreads < 1 || nconns < 1 || depth < 1 || depth > 100000 || secs <= 0 ||
        nkeys < 1 || vsize < 0 || vsize > (1 << 20) || keylen < 12 || keylen > 250 ||
        parse_mix(mix) < 0) {
        usage();
    }
    if (resolve(server) < 0) {
        fprintf(stderr, "meta_load: cannot resolve %s\n", server);
        return 1;
    }
    value = malloc((size_t)vsize + 1);
    for (i = 0; i < vsize; i++) {
        value[i] = (char)('a' + i % 26);
    }
    w = calloc((size_t)nthreads, sizeof(*w));
    pthread_barrier_init(&start_barrier, NULL, (unsigned)nthreads + 1);
    for (i = 0; i < nthreads; i++) {
        w[i].id = i;
        w[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        w[i].pre_next = (uint32_t)((uint64_t)nkeys * (uint64_t)i / (uint64_t)nthreads);
        w[i].pre_end = (uint32_t)((uint64_t)nkeys * (uint64_t)(i + 1) / (uint64_t)nthreads);
        w[i].conns = calloc((size_t)nconns, sizeof(struct mconn));
        for (j = 0; j < nconns; j++) {
            if (conn_open(&w[i].conns[j]) < 0) {
                fprintf(stderr, "meta_load: cannot connect to %s: %s\n", server, strerror(errno));
                return 1;
            }
        }
    }
    for (i = 0; i < nthreads; i++) {
        pthread_create(&w[i].tid, NULL, worker_main, &w[i]);
    }
    pthread_barrier_wait(&start_barrier);
    start = now_s();
    deadline = start + secs;
    pthread_barrier_wait(&start_barrier);
    for (i = 0; i < nthreads; i++) {
        pthread_join(w[i].tid, NULL);
        for (k = 0; k < K_NKINDS; k++) {
            per[k] += w[i].ops[k];
            ops += w[i].ops[k];
        }
        errors += w[i].errors;
        evicted += w[i].evicted;
        quiet_va += w[i].quiet_va;
        end = w[i].end > end ? w[i].end : end;
    }
    printf("ops %llu secs %.3f ops_per_s %.0f errors %llu", (unsigned long long)ops, end - start,
           (double)ops / (end - start), (unsigned long long)errors);
    for (k = 0; k < K_NKINDS; k++) {
        printf(" %s %llu", kind_name[k], (unsigned long long)per[k]);
    }
    printf(" evicted %llu quiet_va %llu\n", (unsigned long long)evicted,
           (unsigned long long)quiet_va);
    return errors > 0 ? 1 : 0;
}
