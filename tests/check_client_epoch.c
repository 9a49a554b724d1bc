/*
 * client_epoch_suite: the epoch rules of libringcache (client/view.c,
 * node_io.c, mget.c) against a scripted fake node on loopback: adoption of
 * higher epochs only, the hop cap, the TRYAGAIN budget, epoch declaration
 * once per connection and never to plain memcached, the poll, ring swaps
 * under threads, and seeds that fetch config.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client/ringcache.h"
#include "tests/suites.h"

/*
 * A scripted fake node on loopback for the epoch rules: one thread, poll()
 * over the listening socket and its clients, one reply per request line.
 */

enum fake_mode {
    FAKE_SERVE,      /* keyed requests served: get -> END, set -> STORED */
    FAKE_MOVED,      /* keyed requests -> SERVER_ERROR MOVED <moved_epoch> <self> */
    FAKE_MOVED_ONCE, /* the first keyed request MOVED, then serve */
    FAKE_TRYAGAIN,   /* keyed requests -> SERVER_ERROR TRYAGAIN <moved_epoch> */
    FAKE_CHURN,      /* every 50th keyed request: MOVED with a new epoch, else serve */
};

struct fake {
    int       lfd;
    int       port;
    pthread_t th;
    int       stop; /* atomic */
    /* the script (set before the handle is made, or atomically) */
    int      mode;
    uint64_t epoch;       /* what EPOCH and CONFIG report (0: no membership) */
    uint64_t moved_epoch; /* what MOVED / TRYAGAIN carry */
    int      bump;        /* each MOVED raises epoch and moved_epoch by one */
    int      plain;       /* answer ERROR to epoch and config (plain memcached) */
    /* what it saw (atomic) */
    int      n_keyed;
    int      n_config;
    int      n_poll;
    int      n_declare;
    uint64_t declared; /* last declared epoch */
};

/* Write all of buf to fd (blocking socket). */
static void
fake_write(int fd, const char *buf, size_t len)
{
    ssize_t n;

    while (len > 0) {
        n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n <= 0) {
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

/* Answer one keyed request as the mode says. */
static void
fake_keyed(struct fake *f, int fd, const char *ok)
{
    char out[128];
    int  mode = __atomic_load_n(&f->mode, __ATOMIC_ACQUIRE);
    int  n;

    __atomic_add_fetch(&f->n_keyed, 1, __ATOMIC_RELAXED);
    if (mode == FAKE_MOVED_ONCE) {
        __atomic_store_n(&f->mode, FAKE_SERVE, __ATOMIC_RELEASE);
        mode = FAKE_MOVED;
    }
    if (mode == FAKE_CHURN) {
        mode = __atomic_load_n(&f->n_keyed, __ATOMIC_RELAXED) % 50 == 0 ? FAKE_MOVED : FAKE_SERVE;
    }
    if (mode == FAKE_SERVE) {
        fake_write(fd, ok, strlen(ok));
        return;
    }
    if (mode == FAKE_MOVED) {
        n = snprintf(out, sizeof(out), "SERVER_ERROR MOVED %llu 127.0.0.1:%d\r\n",
                     (unsigned long long)__atomic_load_n(&f->moved_epoch, __ATOMIC_ACQUIRE),
                     f->port);
        if (__atomic_load_n(&f->bump, __ATOMIC_ACQUIRE)) {
            __atomic_add_fetch(&f->epoch, 1, __ATOMIC_RELEASE);
            __atomic_add_fetch(&f->moved_epoch, 1, __ATOMIC_RELEASE);
        }
    } else {
        n = snprintf(out, sizeof(out), "SERVER_ERROR TRYAGAIN %llu\r\n",
                     (unsigned long long)__atomic_load_n(&f->moved_epoch, __ATOMIC_ACQUIRE));
    }
    fake_write(fd, out, (size_t)n);
}

/* Handle one request line [line, line+len); *skip gets the data block
 * length of a storage command. */
static void
fake_line(struct fake *f, int fd, const char *line, size_t len, size_t *skip)
{
    char               buf[512], text[256];
    unsigned long long e = __atomic_load_n(&f->epoch, __ATOMIC_ACQUIRE);
    unsigned           flags;
    long               ttl;
    size_t             bytes;
    int                n, t;

    snprintf(buf, sizeof(buf), "%.*s", (int)len, line);
    if (strcmp(buf, "epoch") == 0 || strncmp(buf, "epoch ", 6) == 0 || strcmp(buf, "config") == 0) {
        if (f->plain) {
            fake_write(fd, "ERROR\r\n", 7);
        } else if (strcmp(buf, "epoch") == 0) {
            __atomic_add_fetch(&f->n_poll, 1, __ATOMIC_RELAXED);
            n = snprintf(buf, sizeof(buf), "EPOCH %llu 0\r\n", e);
            fake_write(fd, buf, (size_t)n);
        } else if (buf[0] == 'e') {
            __atomic_add_fetch(&f->n_declare, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&f->declared, strtoull(buf + 6, NULL, 10), __ATOMIC_RELEASE);
            fake_write(fd, "OK\r\n", 4);
        } else {
            __atomic_add_fetch(&f->n_config, 1, __ATOMIC_RELAXED);
            t = e == 0 ? 0
                       : snprintf(text, sizeof(text),
                                  "epoch %llu\nvnodes 160\nreplicas 1\n"
                                  "node fake 127.0.0.1:%d\n",
                                  e, f->port);
            n = snprintf(buf, sizeof(buf), "CONFIG %llu %d\r\n%s\r\nEND\r\n", e, t,
                         e == 0 ? "" : text);
            fake_write(fd, buf, (size_t)n);
        }
    } else if (strncmp(buf, "get ", 4) == 0 || strncmp(buf, "gets ", 5) == 0) {
        fake_keyed(f, fd, "END\r\n");
    } else if (sscanf(buf, "set %*s %u %ld %zu", &flags, &ttl, &bytes) == 3) {
        *skip = bytes + 2;
        fake_keyed(f, fd, "STORED\r\n");
    } else if (strncmp(buf, "delete ", 7) == 0) {
        fake_keyed(f, fd, "DELETED\r\n");
    } else {
        fake_write(fd, "ERROR\r\n", 7);
    }
}

/* The fake's thread: accept, read lines, answer; until stop. */
static void *
fake_run(void *arg)
{
    struct fake  *f = arg;
    struct pollfd p[17];
    char          buf[16][4096];
    size_t        have[16] = { 0 }, skip[16] = { 0 };
    int           n = 1, i;

    p[0].fd = f->lfd;
    p[0].events = POLLIN;
    while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
        if (poll(p, (nfds_t)n, 20) <= 0) {
            continue;
        }
        if ((p[0].revents & POLLIN) && n < 17) {
            int c = accept(f->lfd, NULL, NULL);

            if (c >= 0) {
                p[n].fd = c;
                p[n].events = POLLIN;
                p[n].revents = 0;
                have[n - 1] = skip[n - 1] = 0;
                n++;
            }
        }
        for (i = 1; i < n; i++) {
            size_t  k = (size_t)(i - 1);
            ssize_t got;
            char   *nl;

            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                continue;
            }
            got = recv(p[i].fd, buf[k] + have[k], sizeof(buf[k]) - have[k], 0);
            if (got <= 0) {
                close(p[i].fd);
                p[i].fd = -1; /* poll ignores negative fds */
                continue;
            }
            have[k] += (size_t)got;
            for (;;) {
                size_t used;

                if (skip[k] > 0) {
                    used = skip[k] < have[k] ? skip[k] : have[k];
                    skip[k] -= used;
                } else {
                    nl = memchr(buf[k], '\n', have[k]);
                    if (nl == NULL) {
                        break;
                    }
                    used = (size_t)(nl - buf[k]) + 1;
                    fake_line(f, p[i].fd, buf[k], used - 2, &skip[k]);
                }
                memmove(buf[k], buf[k] + used, have[k] - used);
                have[k] -= used;
                if (have[k] == 0 && skip[k] == 0) {
                    break;
                }
            }
        }
    }
    for (i = 1; i < n; i++) {
        if (p[i].fd >= 0) {
            close(p[i].fd);
        }
    }
    return NULL;
}

/* Start a fake node on a free loopback port. */
static void
fake_start(struct fake *f, int mode, uint64_t epoch, uint64_t moved_epoch)
{
    struct sockaddr_in a;
    socklen_t          al = sizeof(a);
    int                one = 1;

    memset(f, 0, sizeof(*f));
    f->mode = mode;
    f->epoch = epoch;
    f->moved_epoch = moved_epoch;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(f->lfd, 0);
    setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(f->lfd, 16), 0);
    ck_assert_int_eq(getsockname(f->lfd, (struct sockaddr *)&a, &al), 0);
    f->port = ntohs(a.sin_port);
    ck_assert_int_eq(pthread_create(&f->th, NULL, fake_run, f), 0);
}

static void
fake_stop(struct fake *f)
{
    __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
    pthread_join(f->th, NULL);
    close(f->lfd);
}

/* A handle from a one-node membership of epoch `epoch` naming the fake
 * (id "fake", the id its CONFIG uses too). */
static struct ringcache *
fake_handle(struct fake *f, uint64_t epoch, int op_timeout_ms)
{
    struct ringcache_options o;
    struct ringcache        *rc = NULL;
    char                     text[256], err[256] = "";

    ringcache_options_init(&o);
    o.op_timeout_ms = op_timeout_ms;
    snprintf(text, sizeof(text), "epoch %llu\nvnodes 160\nreplicas 1\nnode fake 127.0.0.1:%d\n",
             (unsigned long long)epoch, f->port);
    ck_assert_msg(
        ringcache_new_members_text(&rc, text, strlen(text), "fake", &o, err, sizeof(err)) == 0,
        "%s", err);
    return rc;
}

static double
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

START_TEST(test_epoch_higher_adopted)
{
    struct fake            f;
    struct ringcache      *rc;
    struct ringcache_value v;

    /* The fake moved on to epoch 7 and says MOVED once. */
    fake_start(&f, FAKE_MOVED_ONCE, 7, 7);
    rc = fake_handle(&f, 5, 1000);
    ck_assert_uint_eq(ringcache_epoch(rc), 5);
    ck_assert_int_eq(ringcache_set_poll_interval(rc, 0), 0);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
    ck_assert_uint_eq(ringcache_epoch(rc), 7);
    ck_assert_int_eq(__atomic_load_n(&f.n_config, __ATOMIC_ACQUIRE), 1);
    ck_assert_int_eq(__atomic_load_n(&f.n_keyed, __ATOMIC_ACQUIRE), 2);
    /* MOVED made the handle declare: the retry declared epoch 7. */
    ck_assert_uint_eq(__atomic_load_n(&f.declared, __ATOMIC_ACQUIRE), 7);
    ck_assert_int_eq(ringcache_get(rc, "k", 1, &v), RINGCACHE_ENOTFOUND);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_epoch_lower_or_equal_ignored)
{
    /* _i = 0: the node reports a lower epoch (3 < 5), 1: the same (5). */
    uint64_t               theirs = _i == 0 ? 3 : 5;
    struct fake            f;
    struct ringcache      *rc;
    struct ringcache_value v;

    fake_start(&f, FAKE_MOVED, theirs, theirs);
    rc = fake_handle(&f, 5, 3000);
    ck_assert_int_eq(ringcache_set_poll_interval(rc, 0), 0);
    ck_assert_int_eq(ringcache_get(rc, "k", 1, &v), RINGCACHE_ENOTFOUND);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), RINGCACHE_EMOVED);
    ck_assert_uint_eq(ringcache_epoch(rc), 5);
    /* Never fetched config from a node that is not ahead; 1 + 3 hops each. */
    ck_assert_int_eq(__atomic_load_n(&f.n_config, __ATOMIC_ACQUIRE), 0);
    ck_assert_int_eq(__atomic_load_n(&f.n_keyed, __ATOMIC_ACQUIRE), 8);
    /* An explicit refresh does not go back (or sideways) either. */
    ck_assert_int_eq(ringcache_refresh(rc), 0);
    ck_assert_int_eq(__atomic_load_n(&f.n_config, __ATOMIC_ACQUIRE), 1);
    ck_assert_uint_eq(ringcache_epoch(rc), 5);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_epoch_hop_cap)
{
    struct fake            f;
    struct ringcache      *rc;
    struct ringcache_value v;
    const char            *keys[] = { "a", "b", "c" };
    int                    status[3];
    struct ringcache_value vals[3];

    /* Every MOVED carries a newer epoch and config has it: a client that
     * followed redirects forever would never stop. */
    fake_start(&f, FAKE_MOVED, 2, 2);
    f.bump = 1;
    rc = fake_handle(&f, 1, 1000);
    ck_assert_int_eq(ringcache_set_poll_interval(rc, 0), 0);
    ck_assert_int_eq(ringcache_get(rc, "k", 1, &v), RINGCACHE_ENOTFOUND);
    /* The first try and 3 redirects, each teaching a newer epoch (3, 4,
     * 5); the 4th MOVED is not followed. */
    ck_assert_int_eq(__atomic_load_n(&f.n_keyed, __ATOMIC_ACQUIRE), 4);
    ck_assert_uint_eq(ringcache_epoch(rc), 5);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), RINGCACHE_EMOVED);
    ck_assert_int_eq(__atomic_load_n(&f.n_keyed, __ATOMIC_ACQUIRE), 8);
    ck_assert_int_eq(ringcache_mget(rc, keys, NULL, 3, vals, status), 0);
    ck_assert(status[0] == RINGCACHE_ENOTFOUND && status[1] == RINGCACHE_ENOTFOUND &&
              status[2] == RINGCACHE_ENOTFOUND);
    ck_assert_int_eq(__atomic_load_n(&f.n_keyed, __ATOMIC_ACQUIRE), 12);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_tryagain_budget)
{
    struct fake            f;
    struct ringcache      *rc;
    struct ringcache_value v;
    double                 t0, dt;
    int                    tries;

    fake_start(&f, FAKE_TRYAGAIN, 1, 1);
    rc = fake_handle(&f, 1, 400);
    ck_assert_int_eq(ringcache_set_poll_interval(rc, 0), 0);
    t0 = mono_ms();
    ck_assert_int_eq(ringcache_get(rc, "k", 1, &v), RINGCACHE_ENOTFOUND);
    dt = mono_ms() - t0;
    tries = __atomic_load_n(&f.n_keyed, __ATOMIC_ACQUIRE);
    /* Back-offs of 1, 2, 4, ... 128 ms (255 in all) fit in 400 ms, 256
     * more do not: at most 9 tries; fewer when a loaded machine made the
     * round trips slow, but at least one retry after backing off. */
    ck_assert_msg(tries >= 2 && tries <= 9, "tries %d", tries);
    /* Retries stop at the op timeout: no back-off sleeps past it; the
     * last request may then take up to one more op timeout of its own
     * (ringcache.h), so the bound is 2 x 400 ms plus scheduling slack. */
    ck_assert_msg(dt >= 100 && dt < 2 * 400 + 300, "took %.1f ms", dt);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), RINGCACHE_ETRYAGAIN);
    ck_assert_int_eq(ringcache_delete(rc, "k", 1), RINGCACHE_ETRYAGAIN);
    /* The range unfenced: served again. */
    __atomic_store_n(&f.mode, FAKE_SERVE, __ATOMIC_RELEASE);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_epoch_declared_once_per_connection)
{
    struct fake       f;
    struct ringcache *rc;
    int               i;

    fake_start(&f, FAKE_SERVE, 5, 5);
    rc = fake_handle(&f, 5, 1000);
    /* The first call polls (EPOCH 5: the node speaks epochs), then every
     * request goes out on the one pooled connection: one declaration. */
    for (i = 0; i < 5; i++) {
        ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
    }
    ck_assert_int_eq(__atomic_load_n(&f.n_poll, __ATOMIC_ACQUIRE), 1);
    ck_assert_int_eq(__atomic_load_n(&f.n_declare, __ATOMIC_ACQUIRE), 1);
    ck_assert_uint_eq(__atomic_load_n(&f.declared, __ATOMIC_ACQUIRE), 5);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_epoch_never_declared_to_plain_nodes)
{
    /* _i = 0: a plain memcached (ERROR to epoch), 1: a node at epoch 0. */
    struct fake       f;
    struct ringcache *rc;
    int               i;

    fake_start(&f, FAKE_SERVE, 0, 0);
    f.plain = _i == 0;
    rc = fake_handle(&f, 1, 1000);
    for (i = 0; i < 3; i++) {
        ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
    }
    ck_assert_int_eq(__atomic_load_n(&f.n_declare, __ATOMIC_ACQUIRE), 0);
    ck_assert_uint_eq(ringcache_epoch(rc), 1);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_poll_learns_higher_epoch)
{
    struct fake       f;
    struct ringcache *rc;
    double            deadline;

    fake_start(&f, FAKE_SERVE, 3, 3);
    rc = fake_handle(&f, 3, 1000);
    ck_assert_int_eq(ringcache_set_poll_interval(rc, 20), 0);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
    __atomic_store_n(&f.epoch, 4, __ATOMIC_RELEASE);
    /* Calls keep going; within a few intervals one of them polls. */
    deadline = mono_ms() + 2000;
    while (ringcache_epoch(rc) != 4 && mono_ms() < deadline) {
        ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
        usleep(5000);
    }
    ck_assert_uint_eq(ringcache_epoch(rc), 4);
    ck_assert_int_ge(__atomic_load_n(&f.n_poll, __ATOMIC_ACQUIRE), 1);
    ck_assert_int_eq(__atomic_load_n(&f.n_config, __ATOMIC_ACQUIRE), 1);
    ck_assert_int_eq(ringcache_set_poll_interval(rc, -1), RINGCACHE_EINVAL);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

struct churn_arg {
    struct ringcache *rc;
    int               errors;
};

/* A thread of test_ring_swap_under_threads: writes, reads and looks at
 * node names while other threads' MOVED replies swap the ring. */
static void *
churn_thread(void *arg)
{
    struct churn_arg      *a = arg;
    struct ringcache_value v;
    const char            *keys[] = { "m1", "m2" };
    struct ringcache_value vals[2];
    int                    status[2], i, ret;

    for (i = 0; i < 150; i++) {
        a->errors += ringcache_set(a->rc, "k", 1, "v", 1, 0, 0) != 0;
        ret = ringcache_get(a->rc, "k", 1, &v);
        a->errors += ret != RINGCACHE_ENOTFOUND;
        a->errors += ringcache_mget(a->rc, keys, NULL, 2, vals, status) != 0;
        a->errors +=
            ringcache_node_id(a->rc, 0) == NULL || strcmp(ringcache_node_id(a->rc, 0), "fake") != 0;
    }
    return NULL;
}

START_TEST(test_ring_swap_under_threads)
{
    struct fake       f;
    struct ringcache *rc;
    struct churn_arg  a[6];
    pthread_t         th[6];
    int               i, errors = 0;

    /* Every 50th request is MOVED with a newer epoch: the ring is swapped
     * dozens of times under six threads; no call may fail (4 MOVED in a
     * row for one call, the hop cap, has odds of 1 in 6 million) and the
     * snapshots must be freed exactly once (ASan watches). */
    fake_start(&f, FAKE_CHURN, 2, 2);
    f.bump = 1;
    rc = fake_handle(&f, 1, 5000);
    ck_assert_int_eq(ringcache_set_poll_interval(rc, 0), 0);
    for (i = 0; i < 6; i++) {
        a[i].rc = rc;
        a[i].errors = 0;
        ck_assert_int_eq(pthread_create(&th[i], NULL, churn_thread, &a[i]), 0);
    }
    for (i = 0; i < 6; i++) {
        pthread_join(th[i], NULL);
        errors += a[i].errors;
    }
    ck_assert_int_eq(errors, 0);
    ck_assert_uint_gt(ringcache_epoch(rc), 20);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_seeds_fetch_config)
{
    struct fake       f;
    struct ringcache *rc = NULL;
    char              seed[32], err[256] = "";
    const char       *seeds[2];

    /* The first seed is dead; the second has epoch 9. */
    fake_start(&f, FAKE_SERVE, 9, 9);
    snprintf(seed, sizeof(seed), "127.0.0.1:%d", f.port);
    seeds[0] = "127.0.0.1:1";
    seeds[1] = seed;
    ck_assert_msg(ringcache_new_seeds(&rc, seeds, 2, NULL, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(ringcache_epoch(rc), 9);
    ck_assert_uint_eq(ringcache_node_count(rc), 1);
    ck_assert_str_eq(ringcache_node_id(rc, 0), "fake");
    ck_assert_str_eq(ringcache_node_addr(rc, 0), seed);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
    ck_assert_uint_eq(__atomic_load_n(&f.declared, __ATOMIC_ACQUIRE), 9);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_seeds_without_membership)
{
    struct fake       f;
    struct ringcache *rc = NULL;
    char              seed[32];
    const char       *seeds[1];

    fake_start(&f, FAKE_SERVE, 0, 0);
    snprintf(seed, sizeof(seed), "127.0.0.1:%d", f.port);
    seeds[0] = seed;
    ck_assert_int_eq(ringcache_new_seeds(&rc, seeds, 1, NULL, NULL, 0), 0);
    ck_assert_uint_eq(ringcache_epoch(rc), 0);
    ck_assert_str_eq(ringcache_node_id(rc, 0), seed);
    ck_assert_int_eq(__atomic_load_n(&f.n_config, __ATOMIC_ACQUIRE), 1);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
    ck_assert_int_eq(__atomic_load_n(&f.n_declare, __ATOMIC_ACQUIRE), 0);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

Suite *
client_epoch_suite(void)
{
    Suite *s = suite_create("client_epoch");
    TCase *tc;

    tc = tcase_create("epoch");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_epoch_higher_adopted);
    tcase_add_loop_test(tc, test_epoch_lower_or_equal_ignored, 0, 2);
    tcase_add_test(tc, test_epoch_hop_cap);
    tcase_add_test(tc, test_tryagain_budget);
    tcase_add_test(tc, test_epoch_declared_once_per_connection);
    tcase_add_loop_test(tc, test_epoch_never_declared_to_plain_nodes, 0, 2);
    tcase_add_test(tc, test_poll_learns_higher_epoch);
    tcase_add_test(tc, test_ring_swap_under_threads);
    tcase_add_test(tc, test_seeds_fetch_config);
    tcase_add_test(tc, test_seeds_without_membership);
    suite_add_tcase(s, tc);
    return s;
}
