/*
 * ring_bench: the ring core's figures (not a test). Prints one
 * `figure value` line per result, each the median of several passes:
 * lookup and preference-list cost, build time, memory per point, balance
 * and join movement (exact, from arcs). tests/bench/ring_bench.sh runs it
 * beside the libmemcached ketama baseline.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "ring/ring.h"

#define KEY_MIN 16
#define KEY_MAX 40

static uint32_t n_keys = 1000000;
static int      passes = 5;

/* Random 16..40 byte keys, generated before any timing. */
struct keys {
    char     *buf;
    uint32_t *off; /* n_keys + 1 offsets into buf */
};

static uint64_t rng_state = 0x243f6a8885a308d3ull;

/* SplitMix64, seeded: every run measures the same keys and memberships. */
static uint64_t
rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double
now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double
median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void
make_keys(struct keys *k)
{
    uint32_t i, j, total = 0;

    k->off = malloc(((size_t)n_keys + 1) * sizeof(*k->off));
    k->buf = malloc((size_t)n_keys * KEY_MAX);
    if (k->off == NULL || k->buf == NULL) {
        fprintf(stderr, "ring_bench: out of memory\n");
        exit(1);
    }
    for (i = 0; i < n_keys; i++) {
        uint32_t len = KEY_MIN + (uint32_t)(rnd() % (KEY_MAX - KEY_MIN + 1));

        k->off[i] = total;
        for (j = 0; j < len; j++) {
            k->buf[total++] = (char)('!' + rnd() % 94);
        }
    }
    k->off[n_keys] = total;
}

/* A membership of n equal nodes with v vnodes; aborts on failure. */
static struct ring_members *
make_members(uint32_t n, uint32_t v, uint32_t first)
{
    struct ring_members *m = ring_members_new();
    uint32_t             i;

    if (m == NULL) {
        exit(1);
    }
    m->epoch = 1;
    m->vnodes = v;
    m->replicas = 3;
    for (i = first; i < first + n; i++) {
        char id[32], addr[40];

        snprintf(id, sizeof(id), "cache-%05u", i);
        snprintf(addr, sizeof(addr), "10.%u.%u.%u:11211", (i >> 16) & 255, (i >> 8) & 255, i & 255);
        if (ring_members_add(m, id, addr, 1, NULL) != RING_OK) {
            fprintf(stderr, "ring_bench: cannot add %s\n", id);
            exit(1);
        }
    }
    return m;
}

static struct ring *
build_or_die(const struct ring_members *m)
{
    struct ring *r = ring_build(m);

    if (r == NULL) {
        fprintf(stderr, "ring_bench: ring_build failed\n");
        exit(1);
    }
    return r;
}

static volatile uint64_t sink;

/* ns per key: XXH3 of the key + primary (want 0) or preference list. */
static double
time_lookup(const struct ring *r, const struct keys *k, uint32_t want)
{
    double   t[16];
    uint32_t out[8];
    int      p;

    for (p = 0; p < passes; p++) {
        uint64_t acc = 0;
        uint32_t i;
        double   t0 = now_ns();

        if (want == 0) {
            for (i = 0; i < n_keys; i++) {
                acc += ring_primary(r, ring_hash(k->buf + k->off[i], k->off[i + 1] - k->off[i]));
            }
        } else {
            for (i = 0; i < n_keys; i++) {
                acc += ring_locate(r, ring_hash(k->buf + k->off[i], k->off[i + 1] - k->off[i]),
                                   want, out) +
                       out[want - 1];
            }
        }
        t[p] = (now_ns() - t0) / n_keys;
        sink += acc;
    }
    return median(t, passes);
}

/* Median ms of building the ring of m (the membership is ready). */
static double
time_build(const struct ring_members *m)
{
    double t[16];
    int    p;

    for (p = 0; p < passes; p++) {
        double       t0 = now_ns();
        struct ring *r = build_or_die(m);

        t[p] = (now_ns() - t0) / 1e6;
        ring_free(r);
    }
    return median(t, passes);
}

/* Peak/mean of the exact shares (equal weights: mean = 1/n). */
static double
peak_mean(const struct ring *r)
{
    const struct ring_members *m = ring_members(r);
    double                    *share = malloc(m->n_nodes * sizeof(*share)), peak = 0;
    uint32_t                   i;

    if (share == NULL) {
        exit(1);
    }
    ring_shares(r, share);
    for (i = 0; i < m->n_nodes; i++) {
        if (share[i] > peak) {
            peak = share[i];
        }
    }
    free(share);
    return peak * m->n_nodes;
}

/* Keys moved by `joins` single joins to an n-node ring, over the ideal
 * 1/(n+1): mean and worst, exact from ring_diff. */
static void
join_movement(uint32_t n, uint32_t v, int joins, double *mean, double *worst)
{
    struct ring_members *m = make_members(n, v, 0);
    struct ring         *r = build_or_die(m);
    int                  j;

    *mean = 0;
    *worst = 0;
    for (j = 0; j < joins; j++) {
        struct ring_members *mj = ring_members_dup(m);
        struct ring         *rj;
        struct ring_diff    *d;
        char                 id[32];
        double               ratio;

        snprintf(id, sizeof(id), "joiner-%d", j);
        if (mj == NULL || ring_members_add(mj, id, "10.255.0.1:11211", 1, NULL) != RING_OK) {
            exit(1);
        }
        rj = build_or_die(mj);
        d = ring_diff(r, rj);
        if (d == NULL) {
            exit(1);
        }
        ratio = d->primary_moved * (n + 1);
        *mean += ratio / joins;
        if (ratio > *worst) {
            *worst = ratio;
        }
        ring_diff_free(d);
        ring_free(rj);
        ring_members_free(mj);
    }
    ring_free(r);
    ring_members_free(m);
}

/* The figures of one n x v ring; `full` adds the lookup/locate timing. */
static void
figures(const struct keys *k, uint32_t n, uint32_t v, int lookup, int locate, int build, int detail)
{
    struct ring_members *m = make_members(n, v, 0);
    struct ring         *r = build_or_die(m);

    if (lookup) {
        printf("lookup_ns/%ux%u %.1f\n", n, v, time_lookup(r, k, 0));
    }
    if (locate) {
        printf("locate3_ns/%ux%u %.1f\n", n, v, time_lookup(r, k, 3));
    }
    if (build) {
        printf("build_ms/%ux%u %.3f\n", n, v, time_build(m));
    }
    if (detail) {
        printf("bytes_per_point/%ux%u %.2f\n", n, v, (double)ring_bytes(r) / ring_n_points(r));
        printf("peak_mean/%ux%u %.4f\n", n, v, peak_mean(r));
    }
    fflush(stdout);
    ring_free(r);
    ring_members_free(m);
}

int
main(int argc, char **argv)
{
    static const uint32_t vtable[] = { 40, 80, 160, 320, 640, 1000 };
    struct keys           k;
    double                mean, worst;
    int                   i, vt = 0, joins = 20;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--keys") == 0 && i + 1 < argc) {
            n_keys = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--passes") == 0 && i + 1 < argc) {
            passes = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--joins") == 0 && i + 1 < argc) {
            joins = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--vnodes-table") == 0) {
            vt = 1;
        } else {
            fprintf(stderr, "usage: ring_bench [--keys N] [--passes P] "
                            "[--joins J] [--vnodes-table]\n");
            return 2;
        }
    }
    if (n_keys < 1 || passes < 1 || passes > 16 || joins < 1) {
        fprintf(stderr, "ring_bench: bad --keys/--passes/--joins\n");
        return 2;
    }
    make_keys(&k);
    printf("# ring_bench: %u keys of %d..%d bytes, median of %d passes\n", n_keys, KEY_MIN, KEY_MAX,
           passes);
    figures(&k, 10, 160, 1, 0, 0, 0);
    figures(&k, 1000, 160, 1, 1, 1, 1);
    figures(&k, 10000, 160, 1, 0, 1, 0);
    figures(&k, 1000, 10, 0, 0, 1, 0);
    join_movement(1000, 160, joins, &mean, &worst);
    printf("join_moved_over_ideal/1000x160/mean %.4f\n", mean);
    printf("join_moved_over_ideal/1000x160/worst %.4f\n", worst);
    if (vt) {
        size_t j;

        for (j = 0; j < sizeof(vtable) / sizeof(vtable[0]); j++) {
            figures(&k, 1000, vtable[j], 1, 0, 1, 1);
            join_movement(1000, vtable[j], joins, &mean, &worst);
            printf("join_moved_over_ideal/1000x%u/worst %.4f\n", vtable[j], worst);
        }
    }
    free(k.buf);
    free(k.off);
    return sink == 42 ? 1 : 0;
}
