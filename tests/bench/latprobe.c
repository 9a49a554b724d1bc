/*
 * latprobe: an open-loop latency prober for tests/bench/handoff_bench.py.
 * It sends plain memcached `get`s at a fixed rate to given (address, key)
 * pairs, one request in flight at a time, and prints one line per request:
 * its scheduled time (CLOCK_MONOTONIC seconds, the clock of Python's
 * time.monotonic), its latency from that scheduled time (so a stall delays
 * and counts every request behind it: no coordinated omission), and what
 * the node answered, and how late it was sent (the prober's own wait for
 * the CPU, part of the latency). A C prober measures the node, not an
 * interpreter lock.
 */
#include "config.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ADDRS_MAX     16
#define KEYS_MAX      (1u << 20)
#define REPLY_MAX     (1u << 21) /* a value of up to 1 MiB plus framing */
#define OP_TIMEOUT_MS 2000

/* One probed key and the index of the address it is asked at. */
struct probe_key {
    char     key[251];
    uint32_t addr;
};

/* A connection to one address, reopened after an error. */
struct probe_conn {
    char addr[64];
    int  fd;
};

static volatile sig_atomic_t stop_flag;
static unsigned long         declare_epoch; /* --declare: `epoch N` on every connection */

static void
on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sleep until monotonic time t (or a signal). */
static void
sleep_until(double t)
{
    struct timespec ts;

    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    while (!stop_flag && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
        continue;
    }
}

/* Connect to host:port; the fd or -1. */
static int
dial(const char *addr)
{
    char            host[64];
    const char     *colon = strrchr(addr, ':');
    struct addrinfo hints, *res = NULL, *ai;
    int             fd = -1, one = 1;
    size_t          n;

    if (colon == NULL || (n = (size_t)(colon - addr)) == 0 || n >= sizeof(host)) {
        return -1;
    }
    memcpy(host, addr, n);
    host[n] = '\0';
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0) {
        return -1;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}

/* Write all of buf; 0 or -1. */
static int
write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Length of the complete get reply at the start of buf[0..len), 0 while
 * incomplete. A reply is VALUE blocks then END, or one error line. */
static size_t
reply_len(const char *buf, size_t len)
{
    size_t off = 0;

    for (;;) {
        const char *eol = memchr(buf + off, '\n', len - off);
        size_t      line;

        if (eol == NULL) {
            return 0;
        }
        line = (size_t)(eol - (buf + off)) + 1;
        if (line >= 5 && memcmp(buf + off, "VALUE", 5) == 0) {
            unsigned long bytes = 0;
            const char   *p = buf + off, *end = eol;
            int           field = 0;

            /* VALUE key flags bytes [cas] */
            while (p < end && field < 4) {
                while (p < end && *p == ' ') {
                    p++;
                }
                if (field == 3) {
                    bytes = strtoul(p, NULL, 10);
                }
                while (p < end && *p != ' ' && *p != '\r') {
                    p++;
                }
                field++;
            }
            off += line + bytes + 2;
            if (off > len) {
                return 0;
            }
            continue;
        }
        return off + line;
    }
}

/* Connect c and declare the epoch when asked to; 0 or -1. */
static int
conn_open(struct probe_conn *c)
{
    char   req[64], rep[64];
    size_t got = 0;
    int    n;

    if ((c->fd = dial(c->addr)) < 0) {
        return -1;
    }
    if (declare_epoch == 0) {
        return 0;
    }
    n = snprintf(req, sizeof(req), "epoch %lu\r\n", declare_epoch);
    if (write_all(c->fd, req, (size_t)n) < 0) {
        goto fail;
    }
    while (got < 4) {
        struct pollfd pfd = { c->fd, POLLIN, 0 };
        ssize_t       r;

        if (poll(&pfd, 1, OP_TIMEOUT_MS) <= 0) {
            goto fail;
        }
        r = recv(c->fd, rep + got, 4 - got, 0);
        if (r <= 0) {
            goto fail;
        }
        got += (size_t)r;
    }
    if (memcmp(rep, "OK\r\n", 4) == 0) {
        return 0;
    }
fail:
    close(c->fd);
    c->fd = -1;
    return -1;
}

/* One get on c; returns the answer's class, latency measured by caller. */
static const char *
probe_get(struct probe_conn *c, const char *key, char *buf)
{
    char   req[300];
    int    n = snprintf(req, sizeof(req), "get %s\r\n", key);
    size_t got = 0, rl;

    if (c->fd < 0 && conn_open(c) < 0) {
        return "connect_error";
    }
    if (write_all(c->fd, req, (size_t)n) < 0) {
        goto fail;
    }
    for (;;) {
        struct pollfd pfd = { c->fd, POLLIN, 0 };
        ssize_t       r;

        if (poll(&pfd, 1, OP_TIMEOUT_MS) <= 0) {
            goto fail;
        }
        r = recv(c->fd, buf + got, REPLY_MAX - got, 0);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            goto fail;
        }
        got += (size_t)r;
        rl = reply_len(buf, got);
        if (rl > 0) {
            break;
        }
        if (got == REPLY_MAX) {
            goto fail;
        }
    }
    if (rl != got) {
        goto fail; /* one request in flight: nothing may follow */
    }
    if (strncmp(buf, "VALUE", 5) == 0) {
        return "hit";
    }
    if (strncmp(buf, "END", 3) == 0) {
        return "miss";
    }
    if (strncmp(buf, "SERVER_ERROR TRYAGAIN", 21) == 0) {
        return "tryagain";
    }
    if (strncmp(buf, "SERVER_ERROR MOVED", 18) == 0) {
        return "moved";
    }
    return "error";
fail:
    close(c->fd);
    c->fd = -1;
    return "io_error";
}

static void
usage(void)
{
    fprintf(stderr,
            "usage: latprobe --rate OPS_PER_S --secs S [--declare EPOCH] < KEYS\n"
            "  KEYS: lines `host:port key`; output lines `t_sched_s latency_us answer late_us`\n"
            "  (answer: hit miss tryagain moved error io_error connect_error). Stops\n"
            "  after S seconds or on SIGTERM/SIGINT. --declare sends `epoch EPOCH` on\n"
            "  each connection (the node then answers MOVED instead of forwarding).\n");
}

int
main(int argc, char **argv)
{
    static struct probe_conn conns[ADDRS_MAX];
    struct probe_key        *keys = NULL;
    char                     line[400], *buf = NULL;
    double                   rate = 1000, secs = 60, t0, t, end;
    uint32_t                 nconns = 0, nkeys = 0, i;
    uint64_t                 k;
    int                      rc = 1;

    for (i = 1; i < (uint32_t)argc; i++) {
        if (strcmp(argv[i], "--rate") == 0 && i + 1 < (uint32_t)argc) {
            rate = atof(argv[++i]);
        } else if (strcmp(argv[i], "--secs") == 0 && i + 1 < (uint32_t)argc) {
            secs = atof(argv[++i]);
        } else if (strcmp(argv[i], "--declare") == 0 && i + 1 < (uint32_t)argc) {
            declare_epoch = strtoul(argv[++i], NULL, 10);
        } else {
            usage();
            return 2;
        }
    }
    if (rate <= 0 || secs <= 0) {
        usage();
        return 2;
    }
    keys = calloc(KEYS_MAX, sizeof(*keys));
    buf = malloc(REPLY_MAX);
    if (keys == NULL || buf == NULL) {
        fprintf(stderr, "latprobe: out of memory\n");
        goto out;
    }
    while (nkeys < KEYS_MAX && fgets(line, sizeof(line), stdin) != NULL) {
        char addr[64], key[251];

        if (sscanf(line, "%63s %250s", addr, key) != 2) {
            fprintf(stderr, "latprobe: stdin:%u: expected `host:port key`\n", nkeys + 1);
            goto out;
        }
        for (i = 0; i < nconns && strcmp(conns[i].addr, addr) != 0; i++) {
            continue;
        }
        if (i == nconns) {
            if (nconns == ADDRS_MAX) {
                fprintf(stderr, "latprobe: more than %d addresses\n", ADDRS_MAX);
                goto out;
            }
            snprintf(conns[i].addr, sizeof(conns[i].addr), "%s", addr);
            conns[i].fd = -1;
            nconns++;
        }
        snprintf(keys[nkeys].key, sizeof(keys[nkeys].key), "%s", key);
        keys[nkeys++].addr = i;
    }
    if (nkeys == 0) {
        fprintf(stderr, "latprobe: no keys on stdin\n");
        goto out;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);
    for (i = 0; i < nconns; i++) {
        conn_open(&conns[i]);
    }
    /* Announce readiness so the caller can start its clock windows. */
    fprintf(stderr, "latprobe: ready, %u keys on %u nodes\n", nkeys, nconns);
    t0 = now_s();
    end = t0 + secs;
    for (k = 0; !stop_flag; k++) {
        const struct probe_key *pk = &keys[k % nkeys];
        const char             *ans;
        double                  sent, done;

        t = t0 + (double)k / rate;
        if (t >= end) {
            break;
        }
        sleep_until(t);
        if (stop_flag) {
            break;
        }
        sent = now_s();
        ans = probe_get(&conns[pk->addr], pk->key, buf);
        done = now_s();
        printf("%.6f %.1f %s %.1f\n", t, (done - t) * 1e6, ans, (sent - t) * 1e6);
    }
    rc = 0;
out:
    fflush(stdout);
    for (i = 0; i < nconns; i++) {
        if (conns[i].fd >= 0) {
            close(conns[i].fd);
        }
    }
    free(keys);
    free(buf);
    return rc;
}
