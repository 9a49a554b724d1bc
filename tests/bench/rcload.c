/*
 * rcload: a memcached text-protocol load generator that measures latency as
 * well as throughput (issue 24), for request_bench.sh and by hand. Closed
 * loop (every connection keeps DEPTH requests in flight) or open loop at a
 * fixed total rate, where latency runs from each request's scheduled send
 * time so a stalled server cannot hide its queue (no coordinated omission).
 * Prints `figure value` lines; exits 1 when a reply was wrong or a
 * connection failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define KEY_PREFIX    "rcload:"
#define RBUF_MIN      65536
#define PREFILL_BATCH 64
#define MAX_EVENTS    256
#define MAX_CONNS     65536
#define MAX_DEPTH     4096
#define MAX_MULTIGET  100
/* Histogram: log-linear like HdrHistogram, values in nanoseconds, exact
 * below HIST_SUB, then 128 linear sub-buckets per power of two (under 0.8%
 * error) up to 2^62. */
#define HIST_SUB_BITS 8
#define HIST_SUB      (1 << HIST_SUB_BITS)
#define HIST_BUCKETS  (HIST_SUB / 2 * 64)

enum req_kind {
    REQ_GET,
    REQ_SET,
    REQ_MGET
};

/* Options, fixed before the threads start. */
static struct addrinfo *server_ai;
static const char      *server = "127.0.0.1:11211";
static int              nthreads = 2, nconns = 16, depth = 1, keylen = 64, vsize = 100;
static int              get_pct = 90, mget_keys; /* mget_keys > 0: multi-gets only */
static double           secs = 3.0, rate;        /* rate > 0: open loop, requests per second */
static uint32_t         nkeys = 100000;
static bool             prefill = true;

/* One request in flight: when it was due and what reply it expects. */
struct inflight {
    int64_t t0;
    uint8_t kind;
};

/* One connection, owned by one thread. */
struct conn {
    int              fd;
    bool             dead, want_out;
    char            *out;
    size_t           out_len, out_off;
    char            *in;
    size_t           in_len;
    struct inflight *q; /* ring of `depth` entries */
    uint32_t         q_head, q_n;
    uint32_t         hits_in_reply; /* VALUE blocks of the reply being read */
    int64_t          next_due;      /* open loop: the next scheduled send */
};

/* One client thread: its connections, event loop and counters. */
struct thread {
    pthread_t    tid;
    int          id, ep, nc;
    struct conn *c;
    uint64_t     rng;
    uint64_t     ops, hits, misses, sets, errors, behind, failed_conns;
    int64_t      max_ns;
    uint64_t    *hist;
};

static pthread_barrier_t start_barrier;
static int64_t           t_start, t_end;
static size_t            out_cap, in_cap;
static char             *value_block; /* vsize bytes of data + "\r\n" */

static int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t
rng_next(uint64_t *s)
{
    /* xorshift64*: cheap and good enough to pick keys and kinds */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* hist_index: the bucket of V nanoseconds. */
static int
hist_index(uint64_t v)
{
    if (v < HIST_SUB)
        return (int)v;
    int msb = 63 - __builtin_clzll(v);
    int shift = msb - (HIST_SUB_BITS - 1);
    int idx = shift * (HIST_SUB / 2) + (int)(v >> shift);
    return idx < HIST_BUCKETS ? idx : HIST_BUCKETS - 1;
}

/* hist_value: the highest value that falls into bucket IDX. */
static uint64_t
hist_value(int idx)
{
    if (idx < HIST_SUB)
        return (uint64_t)idx;
    int      shift = idx / (HIST_SUB / 2) - 1;
    uint64_t m = (uint64_t)(idx % (HIST_SUB / 2)) + HIST_SUB / 2;
    return ((m + 1) << shift) - 1;
}

/* hist_percentile: the value at or below which fraction P of COUNT lies. */
static uint64_t
hist_percentile(const uint64_t *h, uint64_t count, double p)
{
    uint64_t want = (uint64_t)(p * (double)count + 0.999999);
    uint64_t seen = 0;
    if (want == 0)
        want = 1;
    for (int i = 0; i < HIST_BUCKETS; i++) {
        seen += h[i];
        if (seen >= want)
            return hist_value(i);
    }
    return 0;
}

static void
record(struct thread *t, int64_t t0, int64_t now)
{
    int64_t d = now - t0;
    if (d < 0)
        d = 0;
    t->hist[hist_index((uint64_t)d)]++;
    if (d > t->max_ns)
        t->max_ns = d;
    t->ops++;
}

static size_t
put_key(char *p, uint32_t k)
{
    int pad = keylen - (int)strlen(KEY_PREFIX);
    return (size_t)sprintf(p, "%s%0*" PRIu32, KEY_PREFIX, pad, k);
}

/* queue_request: append one request of the configured mix to C's output,
 * due at T0. The caller checked that C has room (q_n < depth). */
static void
queue_request(struct thread *t, struct conn *c, int64_t t0)
{
    char   *p = c->out + c->out_len;
    uint8_t kind;
    if (mget_keys > 0) {
        kind = REQ_MGET;
        p += sprintf(p, "get");
        for (int i = 0; i < mget_keys; i++) {
            *p++ = ' ';
            p += put_key(p, (uint32_t)(rng_next(&t->rng) % nkeys));
        }
        p += sprintf(p, "\r\n");
    } else if ((int)(rng_next(&t->rng) % 100) < get_pct) {
        kind = REQ_GET;
        p += sprintf(p, "get ");
        p += put_key(p, (uint32_t)(rng_next(&t->rng) % nkeys));
        p += sprintf(p, "\r\n");
    } else {
        kind = REQ_SET;
        p += sprintf(p, "set ");
        p += put_key(p, (uint32_t)(rng_next(&t->rng) % nkeys));
        p += sprintf(p, " 0 0 %d\r\n", vsize);
        memcpy(p, value_block, (size_t)vsize + 2);
        p += vsize + 2;
    }
    c->out_len = (size_t)(p - c->out);
    uint32_t slot = (c->q_head + c->q_n) % (uint32_t)depth;
    c->q[slot].t0 = t0;
    c->q[slot].kind = kind;
    c->q_n++;
}

/* conn_fail: C broke (reset, EOF, or a reply out of sync): its requests in
 * flight count as errors and it leaves the run. */
static void
conn_fail(struct thread *t, struct conn *c, const char *why)
{
    if (c->dead)
        return;
    fprintf(stderr, "rcload: connection %d: %s\n", c->fd, why);
    t->errors += c->q_n;
    t->failed_conns++;
    c->dead = true;
    epoll_ctl(t->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
}

static void
set_out_interest(struct thread *t, struct conn *c, bool want)
{
    if (c->want_out == want)
        return;
    struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c };
    if (epoll_ctl(t->ep, EPOLL_CTL_MOD, c->fd, &ev) == 0)
        c->want_out = want;
}

/* conn_flush: send what C has queued, in one send when the socket takes it;
 * waits for EPOLLOUT when it does not. */
static void
conn_flush(struct thread *t, struct conn *c)
{
    while (!c->dead && c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            set_out_interest(t, c, true);
            return;
        } else {
            conn_fail(t, c, strerror(errno));
            return;
        }
    }
    if (c->dead)
        return;
    c->out_off = c->out_len = 0;
    set_out_interest(t, c, false);
}

/* complete: the head request of C got its whole reply at NOW. */
static void
complete(struct thread *t, struct conn *c, int64_t now, bool error)
{
    struct inflight *r = &c->q[c->q_head];
    if (error) {
        t->errors++;
    } else if (now <= t_end) { /* replies after the end do not count */
        if (r->kind == REQ_SET) {
            t->sets++;
        } else {
            int want = r->kind == REQ_MGET ? mget_keys : 1;
            t->hits += c->hits_in_reply;
            t->misses += (uint64_t)(want - (int)c->hits_in_reply);
        }
        record(t, r->t0, now);
    }
    c->hits_in_reply = 0;
    c->q_head = (c->q_head + 1) % (uint32_t)depth;
    c->q_n--;
}

static bool
starts(const char *line, size_t len, const char *word)
{
    size_t n = strlen(word);
    return len >= n && memcmp(line, word, n) == 0;
}

/* parse_value_len: the <bytes> of "VALUE <key> <flags> <bytes>[ <cas>]",
 * -1 when the line is malformed. */
static long
parse_value_len(const char *line, size_t len)
{
    char     tmp[512];
    char     key[256];
    unsigned flags;
    long     bytes;
    if (len >= sizeof(tmp))
        return -1;
    memcpy(tmp, line, len);
    tmp[len] = '\0';
    if (sscanf(tmp, "VALUE %255s %u %ld", key, &flags, &bytes) != 3 || bytes < 0)
        return -1;
    return bytes;
}

/* conn_parse: consume every whole reply in C's input, completing requests
 * in order. Returns false when the stream is out of sync (C then fails). */
static bool
conn_parse(struct thread *t, struct conn *c, int64_t now)
{
    size_t off = 0;
    while (off < c->in_len) {
        char *line = c->in + off;
        char *nl = memchr(line, '\n', c->in_len - off);
        if (nl == NULL)
            break;
        size_t llen = (size_t)(nl - line) + 1; /* with \r\n */
        if (llen < 2 || nl[-1] != '\r' || c->q_n == 0)
            return false;
        uint8_t kind = c->q[c->q_head].kind;
        if (kind == REQ_SET) {
            if (starts(line, llen, "STORED\r\n"))
                complete(t, c, now, false);
            else
                complete(t, c, now, true); /* NOT_STORED, SERVER_ERROR, ... */
            off += llen;
        } else if (starts(line, llen, "VALUE ")) {
            long bytes = parse_value_len(line, llen - 2);
            int  want = kind == REQ_MGET ? mget_keys : 1;
            if (bytes < 0 || (int)c->hits_in_reply >= want)
                return false;
            if (c->in_len - off - llen < (size_t)bytes + 2)
                break; /* the data block is not all here yet */
            if (memcmp(line + llen + bytes, "\r\n", 2) != 0)
                return false;
            if (bytes != vsize)
                t->errors++; /* someone else's value under our key */
            c->hits_in_reply++;
            off += llen + (size_t)bytes + 2;
        } else if (llen == 5 && memcmp(line, "END\r\n", 5) == 0) {
            complete(t, c, now, false);
            off += llen;
        } else if (starts(line, llen, "ERROR") || starts(line, llen, "CLIENT_ERROR") ||
                   starts(line, llen, "SERVER_ERROR")) {
            complete(t, c, now, true);
            off += llen;
        } else {
            return false;
        }
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
    return true;
}

/* conn_read: read what is there, answer it, and (closed loop) refill C to
 * DEPTH requests, flushed in one send. */
static void
conn_read(struct thread *t, struct conn *c)
{
    if (c->in_len == in_cap) {
        conn_fail(t, c, "reply larger than the input buffer");
        return;
    }
    ssize_t n = recv(c->fd, c->in + c->in_len, in_cap - c->in_len, 0);
    if (n == 0) {
        conn_fail(t, c, "server closed the connection");
        return;
    }
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            conn_fail(t, c, strerror(errno));
        return;
    }
    c->in_len += (size_t)n;
    int64_t now = now_ns();
    if (!conn_parse(t, c, now)) {
        conn_fail(t, c, "reply out of sync with the requests");
        return;
    }
    if (rate <= 0 && now < t_end) {
        while (c->q_n < (uint32_t)depth)
            queue_request(t, c, now);
        conn_flush(t, c);
    }
}

/* issue_due (open loop): queue every request whose scheduled time has come
 * on each of T's connections, as far as DEPTH allows; returns the earliest
 * time one more is due. A request held back by DEPTH keeps its scheduled
 * time, so the wait counts in its latency. */
static int64_t
issue_due(struct thread *t, int64_t now)
{
    int64_t interval = (int64_t)((double)nconns * 1e9 / rate);
    int64_t next = t_end;
    if (interval < 1)
        interval = 1;
    for (int i = 0; i < t->nc; i++) {
        struct conn *c = &t->c[i];
        if (c->dead)
            continue;
        bool queued = false;
        while (c->next_due <= now && c->q_n < (uint32_t)depth) {
            queue_request(t, c, c->next_due);
            c->next_due += interval;
            queued = true;
        }
        if (queued)
            conn_flush(t, c);
        if (c->q_n < (uint32_t)depth && c->next_due < next)
            next = c->next_due;
    }
    return next;
}

static void *
thread_main(void *arg)
{
    struct thread     *t = arg;
    struct epoll_event evs[MAX_EVENTS];
    pthread_barrier_wait(&start_barrier);
    int64_t now = now_ns();
    while (now < t_start) {
        struct timespec ts = { 0, t_start - now };
        nanosleep(&ts, NULL);
        now = now_ns();
    }
    for (int i = 0; i < t->nc; i++) {
        struct conn *c = &t->c[i];
        if (rate > 0) {
            /* spread the connections' schedules evenly over one interval */
            int gi = i * nthreads + t->id;
            c->next_due = t_start + (int64_t)((double)gi * 1e9 / rate);
        } else {
            while (c->q_n < (uint32_t)depth)
                queue_request(t, c, now);
            conn_flush(t, c);
        }
    }
    for (;;) {
        now = now_ns();
        if (now >= t_end)
            break;
        int64_t wake = rate > 0 ? issue_due(t, now) : t_end;
        int64_t wait = wake - now_ns();
        if (wait < 0)
            wait = 0;
        struct timespec ts = { wait / 1000000000, wait % 1000000000 };
        int             n = epoll_pwait2(t->ep, evs, MAX_EVENTS, &ts, NULL);
        if (n < 0 && errno != EINTR) {
            perror("rcload: epoll_pwait2");
            break;
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (!c->dead && (evs[i].events & EPOLLOUT))
                conn_flush(t, c);
            if (!c->dead && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
                conn_read(t, c);
        }
    }
    if (rate > 0) {
        /* requests scheduled before the end that never went out: the
         * server did not keep up with the rate */
        int64_t interval = (int64_t)((double)nconns * 1e9 / rate);
        for (int i = 0; i < t->nc; i++)
            if (!t->c[i].dead && t->c[i].next_due < t_end && interval > 0)
                t->behind += (uint64_t)((t_end - t->c[i].next_due) / interval + 1);
    }
    return NULL;
}

static int
connect_one(void)
{
    int fd = socket(server_ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, server_ai->ai_addr, server_ai->ai_addrlen) < 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* do_prefill: set keys [FROM, TO) over the blocking socket FD, PREFILL_BATCH
 * at a time; 0, or -1 with a message when a reply is not STORED. */
static int
do_prefill(int fd, uint32_t from, uint32_t to)
{
    char  *buf = malloc(PREFILL_BATCH * (out_cap / (size_t)depth + 64));
    char   rb[4096];
    size_t rlen = 0;
    int    rc = -1;
    if (buf == NULL)
        return -1;
    for (uint32_t k = from; k < to; k += PREFILL_BATCH) {
        uint32_t n = to - k < PREFILL_BATCH ? to - k : PREFILL_BATCH;
        char    *p = buf;
        for (uint32_t i = 0; i < n; i++) {
            p += sprintf(p, "set ");
            p += put_key(p, k + i);
            p += sprintf(p, " 0 0 %d\r\n", vsize);
            memcpy(p, value_block, (size_t)vsize + 2);
            p += vsize + 2;
        }
        /* a blocking send returns once all of it is queued (no signals
         * here interrupt it) */
        if (send(fd, buf, (size_t)(p - buf), MSG_NOSIGNAL) != p - buf)
            goto out;
        for (uint32_t got = 0; got < n;) {
            char *nl = memchr(rb, '\n', rlen);
            if (nl == NULL) {
                ssize_t r = recv(fd, rb + rlen, sizeof(rb) - rlen, 0);
                if (r <= 0 || (rlen += (size_t)r) == sizeof(rb))
                    goto out;
                continue;
            }
            size_t llen = (size_t)(nl - rb) + 1;
            if (llen != 8 || memcmp(rb, "STORED\r\n", 8) != 0) {
                fprintf(stderr, "rcload: prefill: server answered %.*s", (int)llen, rb);
                goto out;
            }
            memmove(rb, rb + llen, rlen - llen);
            rlen -= llen;
            got++;
        }
    }
    rc = 0;
out:
    free(buf);
    return rc;
}

/* thread_free: close and free what thread_setup made (a dead
 * connection's fd is already closed: -1). */
static void
thread_free(struct thread *t)
{
    for (int i = 0; t->c != NULL && i < t->nc; i++) {
        struct conn *c = &t->c[i];

        if (c->fd >= 0)
            close(c->fd);
        free(c->out);
        free(c->in);
        free(c->q);
    }
    free(t->c);
    free(t->hist);
    if (t->ep >= 0)
        close(t->ep);
}

/* thread_setup: connect T's share of the connections, prefill its share
 * of the keys over the first, make them non-blocking and register them. */
static int
thread_setup(struct thread *t)
{
    t->ep = epoll_create1(EPOLL_CLOEXEC);
    t->hist = calloc(HIST_BUCKETS, sizeof(*t->hist));
    t->c = calloc((size_t)t->nc, sizeof(*t->c));
    t->rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(t->id + 1) ^ (uint64_t)now_ns();
    if (t->ep < 0 || t->hist == NULL || t->c == NULL)
        return -1;
    for (int i = 0; i < t->nc; i++) {
        struct conn *c = &t->c[i];
        c->fd = connect_one();
        c->out = malloc(out_cap);
        c->in = malloc(in_cap);
        c->q = calloc((size_t)depth, sizeof(*c->q));
        if (c->fd < 0) {
            fprintf(stderr, "rcload: connect to %s: %s\n", server, strerror(errno));
            return -1;
        }
        if (c->out == NULL || c->in == NULL || c->q == NULL)
            return -1;
    }
    if (prefill) {
        uint32_t from = (uint32_t)((uint64_t)nkeys * (uint64_t)t->id / (uint64_t)nthreads);
        uint32_t to = (uint32_t)((uint64_t)nkeys * (uint64_t)(t->id + 1) / (uint64_t)nthreads);
        if (do_prefill(t->c[0].fd, from, to) < 0) {
            fprintf(stderr, "rcload: prefill of keys %" PRIu32 "-%" PRIu32 " failed\n", from, to);
            return -1;
        }
    }
    for (int i = 0; i < t->nc; i++) {
        struct conn       *c = &t->c[i];
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
        if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) < 0 ||
            epoll_ctl(t->ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
            return -1;
    }
    return 0;
}

static void
usage(FILE *f)
{
    fprintf(f, "usage: rcload [-s HOST:PORT] [-c CONNS] [-T THREADS] [-d DEPTH] [-t SECS]\n"
               "              [-g GET_PERCENT | -m MULTIGET_KEYS] [-r RATE] [-k KEYS]\n"
               "              [-K KEY_LEN] [-v VALUE_SIZE] [-n]\n"
               "  -s  server (default 127.0.0.1:11211)\n"
               "  -c  connections in all, spread over the threads (16)\n"
               "  -T  client threads (2)\n"
               "  -d  requests in flight per connection (1); the cap in open loop\n"
               "  -t  seconds to run (3)\n"
               "  -g  percent of gets, the rest are sets (90)\n"
               "  -m  multi-gets of this many keys only (get k1 ... kK)\n"
               "  -r  open loop: this many requests per second in all; latency is\n"
               "      measured from each request's scheduled send time\n"
               "  -k  key space, prefilled with sets first (100000)\n"
               "  -K  key length in bytes (64)\n"
               "  -v  value size in bytes (100)\n"
               "  -n  do not prefill\n");
}

/* parse_num: a number in [LO, HI] from option OPT, or exit with an error. */
static double
parse_num(int opt, const char *s, double lo, double hi)
{
    char  *end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "rcload: -%c %s: want a number from %g to %g\n", opt, s, lo, hi);
        exit(2);
    }
    return v;
}

static int
parse_int(int opt, const char *s, long lo, long hi)
{
    double v = parse_num(opt, s, (double)lo, (double)hi);
    if (v != (double)(long)v) {
        fprintf(stderr, "rcload: -%c %s: want a whole number\n", opt, s);
        exit(2);
    }
    return (int)v;
}

static void
parse_args(int argc, char **argv)
{
    int opt;
    while ((opt = getopt(argc, argv, "s:c:T:d:t:g:m:r:k:K:v:nh")) != -1) {
        switch (opt) {
        case 's':
            server = optarg;
            break;
        case 'c':
            nconns = parse_int(opt, optarg, 1, MAX_CONNS);
            break;
        case 'T':
            nthreads = parse_int(opt, optarg, 1, 256);
            break;
        case 'd':
            depth = parse_int(opt, optarg, 1, MAX_DEPTH);
            break;
        case 't':
            secs = parse_num(opt, optarg, 0.01, 86400);
            break;
        case 'g':
            get_pct = parse_int(opt, optarg, 0, 100);
            break;
        case 'm':
            mget_keys = parse_int(opt, optarg, 1, MAX_MULTIGET);
            break;
        case 'r':
            rate = parse_num(opt, optarg, 1, 1e9);
            break;
        case 'k':
            nkeys = (uint32_t)parse_int(opt, optarg, 1, 100000000);
            break;
        case 'K':
            keylen = parse_int(opt, optarg, (long)strlen(KEY_PREFIX) + 8, 250);
            break;
        case 'v':
            vsize = parse_int(opt, optarg, 0, 1 << 20);
            break;
        case 'n':
            prefill = false;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            exit(2);
        }
    }
    if (optind != argc) {
        fprintf(stderr, "rcload: unexpected argument %s\n", argv[optind]);
        usage(stderr);
        exit(2);
    }
    if (nthreads > nconns) {
        fprintf(stderr, "rcload: -T %d is more threads than -c %d connections\n", nthreads, nconns);
        exit(2);
    }
    const char *colon = strrchr(server, ':');
    if (colon == NULL || colon == server || colon[1] == '\0') {
        fprintf(stderr, "rcload: -s %s: want HOST:PORT\n", server);
        exit(2);
    }
    char host[256];
    if ((size_t)(colon - server) >= sizeof(host)) {
        fprintf(stderr, "rcload: -s %s: host name too long\n", server);
        exit(2);
    }
    memcpy(host, server, (size_t)(colon - server));
    host[colon - server] = '\0';
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
    int             rc = getaddrinfo(host, colon + 1, &hints, &server_ai);
    if (rc != 0) {
        fprintf(stderr, "rcload: -s %s: %s\n", server, gai_strerror(rc));
        exit(2);
    }
}

static const char *
workload_name(char *buf, size_t n)
{
    if (mget_keys > 0)
        snprintf(buf, n, "multiget%d", mget_keys);
    else
        snprintf(buf, n, "get%d_set%d", get_pct, 100 - get_pct);
    return buf;
}

int
main(int argc, char **argv)
{
    parse_args(argc, argv);
    size_t set_len = 4 + (size_t)keylen + 24 + (size_t)vsize + 2;
    size_t mget_len = 5 + (size_t)mget_keys * ((size_t)keylen + 1) + 2;
    out_cap = (size_t)depth * (set_len > mget_len ? set_len : mget_len);
    in_cap = RBUF_MIN +
             4 * ((size_t)(mget_keys > 0 ? mget_keys : 1) * ((size_t)vsize + 64 + (size_t)keylen));
    value_block = malloc((size_t)vsize + 2);
    struct thread *th = calloc((size_t)nthreads, sizeof(*th));
    if (value_block == NULL || th == NULL) {
        fprintf(stderr, "rcload: out of memory\n");
        return 1;
    }
    for (int i = 0; i < vsize; i++)
        value_block[i] = (char)('a' + i % 26);
    memcpy(value_block + vsize, "\r\n", 2);

    pthread_barrier_init(&start_barrier, NULL, (unsigned)nthreads + 1);
    for (int i = 0; i < nthreads; i++) {
        th[i].id = i;
        th[i].nc = nconns / nthreads + (i < nconns % nthreads);
    }
    /* Connect and prefill before any thread starts its clock. */
    for (int i = 0; i < nthreads; i++)
        if (thread_setup(&th[i]) < 0) {
            fprintf(stderr, "rcload: setup failed (%s)\n", strerror(errno));
            return 1;
        }
    for (int i = 0; i < nthreads; i++)
        if (pthread_create(&th[i].tid, NULL, thread_main, &th[i]) != 0) {
            fprintf(stderr, "rcload: cannot start a thread\n");
            return 1;
        }
    t_start = now_ns() + 10000000; /* 10 ms: every thread is waiting by then */
    t_end = t_start + (int64_t)(secs * 1e9);
    pthread_barrier_wait(&start_barrier);
    struct thread sum = { 0 };
    uint64_t     *hist = calloc(HIST_BUCKETS, sizeof(*hist));
    if (hist == NULL)
        return 1;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i].tid, NULL);
        sum.ops += th[i].ops;
        sum.hits += th[i].hits;
        sum.misses += th[i].misses;
        sum.sets += th[i].sets;
        sum.errors += th[i].errors;
        sum.behind += th[i].behind;
        sum.failed_conns += th[i].failed_conns;
        if (th[i].max_ns > sum.max_ns)
            sum.max_ns = th[i].max_ns;
        for (int b = 0; b < HIST_BUCKETS; b++)
            hist[b] += th[i].hist[b];
    }
    double dur = (double)(t_end - t_start) / 1e9;
    char   wl[32];
    printf("mode %s\n", rate > 0 ? "open" : "closed");
    printf("workload %s\n", workload_name(wl, sizeof(wl)));
    printf("conns %d\nthreads %d\ndepth %d\n", nconns, nthreads, depth);
    if (rate > 0)
        printf("rate_target %.0f\n", rate);
    printf("duration_s %.3f\n", dur);
    printf("ops %" PRIu64 "\n", sum.ops);
    printf("ops_per_s %.0f\n", (double)sum.ops / dur);
    printf("p50_us %.1f\n", (double)hist_percentile(hist, sum.ops, 0.50) / 1e3);
    printf("p99_us %.1f\n", (double)hist_percentile(hist, sum.ops, 0.99) / 1e3);
    printf("p999_us %.1f\n", (double)hist_percentile(hist, sum.ops, 0.999) / 1e3);
    printf("max_us %.1f\n", (double)sum.max_ns / 1e3);
    printf("hits %" PRIu64 "\nmisses %" PRIu64 "\nsets %" PRIu64 "\n", sum.hits, sum.misses,
           sum.sets);
    if (rate > 0)
        printf("behind %" PRIu64 "\n", sum.behind);
    printf("errors %" PRIu64 "\n", sum.errors);
    printf("failed_conns %" PRIu64 "\n", sum.failed_conns);
    freeaddrinfo(server_ai);
    for (int i = 0; i < nthreads; i++)
        thread_free(&th[i]);
    free(th);
    free(hist);
    free(value_block);
    return sum.errors > 0 || sum.failed_conns > 0 || sum.ops == 0 ? 1 : 0;
}
