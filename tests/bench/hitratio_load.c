/*
 * hitratio_load: the load of hitratio_bench.sh. A cache-aside client (get;
 * on a miss, set) over the text protocol, on one connection, with
 * Zipf-distributed keys, value sizes a fixed function of the key, an
 * optional TTL mix and an optional share of never-repeated (scan) keys.
 * The request sequence depends only on the options and the seed, so two
 * servers given the same options see the same requests. Prints one line:
 *   requests N hits H hit_ratio R curr_items I evictions E
 *
 *   hitratio_load [-s HOST:PORT] [-z SKEW] [-k KEYS] [-n REQUESTS]
 *                 [-w WARMUP] [-S SCAN_FRACTION] [-T (TTL mix)] [-x SEED]
 *                 [-V VALUE_SIZE]
 *
 * -V gives every value that size instead of 64-1024 bytes; with -S 1
 * (every key new) the load is a flood of sets (rss_bench.sh).
 *
 * Requests go in batches: one multi-key get of up to BATCH distinct keys,
 * then one noreply set per miss sent ahead of the next batch's get. A batch
 * ends before a key it already holds, so every request sees the state a
 * strictly sequential client would (its key's set, if any, came first).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/bench/zipf.h"

#define BATCH     32
#define KEY_MAX   24
#define VALUE_MIN 64
#define VALUE_MAX 1024

struct req {
    bool     scan; /* a never-repeated key: id is its sequence number */
    uint64_t id;
    char     key[KEY_MAX];
    size_t   nkey;
    bool     hit;
};

static const char *server = "127.0.0.1:11211";
static double      skew = 0.99, scan_frac = 0.0;
static uint32_t    nkeys = 1000000;
static uint64_t    nreq = 1000000, nwarm = 1000000, seed = 1;
static bool        ttl_mix;
static size_t      fixed_size; /* -V: every value this size (0: by key) */
static struct zipf zipf;
static char        rbuf[1 << 16];
static size_t      rlen, rpos;
static int         fd = -1;

static double
uniform(uint64_t *state)
{
    *state += 1;
    return (double)(mix64(*state ^ seed << 40) >> 11) / (double)(1ull << 53);
}

/* A key's value size and TTL: functions of the key alone. */
static size_t
value_size(const struct req *r)
{
    uint64_t h = mix64(r->id ^ (r->scan ? 0x5ca9ull << 48 : 0));

    if (fixed_size > 0) {
        return fixed_size;
    }
    return VALUE_MIN + (size_t)(h % (VALUE_MAX - VALUE_MIN + 1));
}

static unsigned
ttl_of(const struct req *r)
{
    uint64_t h = mix64(r->id * 31 + 7);

    if (!ttl_mix || (h & 1) == 0) {
        return 0; /* half the keys never expire */
    }
    return 5 + (unsigned)((h >> 8) % 56); /* the others: 5-60 s */
}

static void
die(const char *what)
{
    fprintf(stderr, "hitratio_load: %s: %s\n", what, errno ? strerror(errno) : "protocol error");
    exit(1);
}

static void
send_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);

        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            die("write");
        }
        p += w;
        n -= (size_t)w;
    }
}

/* The next reply line (without CRLF), NUL-terminated in rbuf. */
static char *
read_line(size_t *len)
{
    for (;;) {
        char *nl = memchr(rbuf + rpos, '\n', rlen - rpos);

        if (nl != NULL) {
            char *line = rbuf + rpos;

            *len = (size_t)(nl - line);
            if (*len > 0 && line[*len - 1] == '\r') {
                (*len)--;
            }
            line[*len] = '\0';
            rpos = (size_t)(nl - rbuf) + 1;
            return line;
        }
        if (rpos > 0) {
            memmove(rbuf, rbuf + rpos, rlen - rpos);
            rlen -= rpos;
            rpos = 0;
        }
        if (rlen == sizeof(rbuf)) {
            die("reply line too long");
        }
        ssize_t r = read(fd, rbuf + rlen, sizeof(rbuf) - rlen);

        if (r <= 0) {
            if (r < 0 && errno == EINTR) {
                continue;
            }
            die("read");
        }
        rlen += (size_t)r;
    }
}

/* Skip n bytes of a value block plus its CRLF. */
static void
skip_bytes(size_t n)
{
    n += 2;
    while (n > 0) {
        size_t have = rlen - rpos;

        if (have == 0) {
            ssize_t r = read(fd, rbuf, sizeof(rbuf));

            if (r <= 0) {
                if (r < 0 && errno == EINTR) {
                    continue;
                }
                die("read");
            }
            rlen = (size_t)r;
            rpos = 0;
            continue;
        }
        have = have < n ? have : n;
        rpos += have;
        n -= have;
    }
}

static void
connect_server(void)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
    char            host[256];
    const char     *colon = strrchr(server, ':');
    int             one = 1;

    if (colon == NULL || (size_t)(colon - server) >= sizeof(host)) {
        die("server must be HOST:PORT");
    }
    memcpy(host, server, (size_t)(colon - server));
    host[colon - server] = '\0';
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0) {
        die("getaddrinfo");
    }
    fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        die("connect");
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    freeaddrinfo(ai);
}

/* Append the noreply sets of a batch's misses to out. */
static size_t
build_sets(const struct req *b, size_t n, char *out, const char *value)
{
    size_t len = 0, i;

    for (i = 0; i < n; i++) {
        size_t vs;

        if (b[i].hit) {
            continue;
        }
        vs = value_size(&b[i]);
        len +=
            (size_t)sprintf(out + len, "set %s 0 %u %zu noreply\r\n", b[i].key, ttl_of(&b[i]), vs);
        memcpy(out + len, value, vs);
        len += vs;
        memcpy(out + len, "\r\n", 2);
        len += 2;
    }
    return len;
}

static uint64_t
stat_of(const char *name)
{
    uint64_t v = 0;
    size_t   len, nlen = strlen(name);
    char    *line;

    send_all("stats\r\n", 7);
    while (strcmp((line = read_line(&len)), "END") != 0) {
        if (strncmp(line, "STAT ", 5) == 0 && strncmp(line + 5, name, nlen) == 0 &&
            line[5 + nlen] == ' ') {
            v = strtoull(line + 6 + nlen, NULL, 10);
        }
    }
    return v;
}

int
main(int argc, char **argv)
{
    char      *out, *value;
    size_t     vmax;
    struct req b[BATCH + 1];
    uint64_t   rng = 0, scan_seq = 0, done = 0, hits = 0, total = nwarm + nreq;
    size_t     nb = 0, olen = 0;
    bool       have_next = false;
    int        opt;

    while ((opt = getopt(argc, argv, "s:z:k:n:w:S:Tx:V:")) != -1) {
        switch (opt) {
        case 's':
            server = optarg;
            break;
        case 'z':
            skew = atof(optarg);
            break;
        case 'k':
            nkeys = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'n':
            nreq = strtoull(optarg, NULL, 10);
            break;
        case 'w':
            nwarm = strtoull(optarg, NULL, 10);
            break;
        case 'S':
            scan_frac = atof(optarg);
            break;
        case 'T':
            ttl_mix = true;
            break;
        case 'x':
            seed = strtoull(optarg, NULL, 10);
            break;
        case 'V':
            fixed_size = strtoull(optarg, NULL, 10);
            break;
        default:
            fprintf(stderr,
                    "usage: hitratio_load [-s HOST:PORT] [-z SKEW] [-k KEYS] "
                    "[-n REQUESTS] [-w WARMUP] [-S SCAN_FRACTION] [-T] [-x SEED] [-V SIZE]\n");
            return 2;
        }
    }
    if (nkeys == 0 || skew <= 0 || scan_frac < 0 || scan_frac > 1 || fixed_size > (64u << 20)) {
        fprintf(stderr, "hitratio_load: bad options\n");
        return 2;
    }
    total = nwarm + nreq;
    vmax = fixed_size > VALUE_MAX ? fixed_size : VALUE_MAX;
    value = malloc(vmax);
    out = malloc(BATCH * (vmax + 64) + BATCH * (KEY_MAX + 1) + 16);
    if (value == NULL || out == NULL) {
        die("malloc");
    }
    memset(value, 'v', vmax);
    if (zipf_init(&zipf, nkeys, skew) != 0) {
        die("malloc");
    }
    connect_server();
    while (done < total) {
        struct req *r = &b[nb];
        size_t      i, len, glen;
        char        get[BATCH * (KEY_MAX + 1) + 8];

        /* Draw the next request (unless one was held over from a batch
         * that ended at its key). */
        if (!have_next) {
            r->scan = scan_frac >= 1 || (scan_frac > 0 && uniform(&rng) < scan_frac);
            r->id = r->scan ? scan_seq++ : zipf_rank(&zipf, uniform(&rng));
            r->nkey = (size_t)snprintf(r->key, KEY_MAX, r->scan ? "hs%llu" : "hr%llu",
                                       (unsigned long long)r->id);
        }
        have_next = false;
        for (i = 0; i < nb; i++) {
            if (b[i].scan == r->scan && b[i].id == r->id) {
                break;
            }
        }
        if (i == nb && nb + 1 < BATCH && done + nb + 1 < total) {
            nb++;
            continue;
        }
        if (i == nb) {
            nb++; /* a full batch with this one */
        } else {
            have_next = true; /* a repeat: it starts the next batch */
        }
        /* One multi-get after the previous batch's sets. */
        glen = 0;
        memcpy(get, "get", 3);
        glen = 3;
        for (i = 0; i < nb; i++) {
            get[glen++] = ' ';
            memcpy(get + glen, b[i].key, b[i].nkey);
            glen += b[i].nkey;
            b[i].hit = false;
        }
        memcpy(get + glen, "\r\n", 2);
        glen += 2;
        memcpy(out + olen, get, glen);
        send_all(out, olen + glen);
        for (;;) {
            char *line = read_line(&len), *k, *sp;

            if (strcmp(line, "END") == 0) {
                break;
            }
            if (strncmp(line, "VALUE ", 6) != 0) {
                die(line);
            }
            k = line + 6;
            sp = strchr(k, ' ');
            if (sp == NULL) {
                die("bad VALUE line");
            }
            *sp = '\0';
            for (i = 0; i < nb; i++) {
                if (strcmp(b[i].key, k) == 0) {
                    b[i].hit = true;
                }
            }
            sp = strrchr(sp + 1, ' ');
            skip_bytes(strtoull(sp + 1, NULL, 10));
        }
        for (i = 0; i < nb; i++) {
            if (done + i >= nwarm && b[i].hit) {
                hits++;
            }
        }
        done += nb;
        olen = build_sets(b, nb, out, value);
        if (have_next) {
            b[0] = b[nb];
        }
        nb = 0;
    }
    send_all(out, olen);
    printf("requests %llu hits %llu hit_ratio %.4f curr_items %llu evictions %llu\n",
           (unsigned long long)nreq, (unsigned long long)hits,
           nreq > 0 ? (double)hits / (double)nreq : 0.0, (unsigned long long)stat_of("curr_items"),
           (unsigned long long)stat_of("evictions"));
    close(fd);
    zipf_free(&zipf);
    free(value);
    free(out);
    return 0;
}
