/*
 * client_bench: libringcache against libmemcached (ketama over three
 * memcached) and against the same load through twemproxy, single-threaded:
 * get, set and a 100-key multi-get. Each pass runs a short burst of every
 * contender back to back (rotating who goes first), so all see the same
 * background load; a ratio is the median over passes of the per-pass
 * ratio, a rate the median of its bursts. client_bench.sh starts servers.
 *
 *   client_bench --ours MEMBERS --memcached H:P,H:P,H:P --proxy H:P
 *                 [--ours-mc MEMBERS] [--ours-tls MEMBERS --tls-ca FILE]
 *                 [--passes N] [--ops N]   (N ops per burst)
 *
 * --ours-mc (a membership naming the memcached servers) adds our library
 * against the very servers libmemcached uses, to separate client from node.
 * --ours-tls (a membership naming memcached -Z servers, their CA in
 * --tls-ca) adds our library over TLS: its ratio to --ours-mc is the cost
 * of TLS in the client (libmemcached and twemproxy have no TLS to race).
 */
#include <getopt.h>
#include <libmemcached/memcached.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/ringcache.h"

#define N_KEYS    10000
#define VALUE_LEN 100
#define MGET_N    100
#define MAX_PASS  200

enum op {
    OP_GET,
    OP_SET,
    OP_MGET,
    N_OPS
};
static const char *op_name[N_OPS] = { "get", "set", "mget100" };

/* A contender: one client set-up and how to run each op. */
struct contender {
    const char       *name;
    struct ringcache *rc; /* ours */
    memcached_st     *mc; /* libmemcached, direct or via the proxy */
    double            rate[N_OPS][MAX_PASS];
};

static char   keys[N_KEYS][32];
static size_t key_len[N_KEYS];
static char   value[VALUE_LEN];

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
die(const char *what, const char *why)
{
    fprintf(stderr, "client_bench: %s: %s\n", what, why);
    exit(1);
}

/* Deterministic key order so every contender does the same work. */
static uint32_t
next_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void
ours_set(struct contender *c, size_t k)
{
    int ret = ringcache_set(c->rc, keys[k], key_len[k], value, VALUE_LEN, 0, 0);

    if (ret != 0) {
        die("ringcache_set", ringcache_strerror(ret));
    }
}

static void
ours_get(struct contender *c, size_t k)
{
    struct ringcache_value v;
    int                    ret = ringcache_get(c->rc, keys[k], key_len[k], &v);

    if (ret != 0 || v.len != VALUE_LEN) {
        die("ringcache_get", ringcache_strerror(ret));
    }
    ringcache_value_clear(&v);
}

/* The mget callback: count hits (values are used in place, not copied,
 * like libmemcached's fetch_result into a reused result). */
static void
ours_count(void *arg, size_t index, int node, int status, const struct ringcache_value *v)
{
    (void)index;
    (void)node;
    if (status == 0 && v->len == VALUE_LEN) {
        (*(int *)arg)++;
    }
}

static void
ours_mget(struct contender *c, const char **ks, const size_t *ls)
{
    int hits = 0, ret;

    ret = ringcache_mget_cb(c->rc, ks, ls, MGET_N, 0, ours_count, &hits);
    if (ret != 0 || hits != MGET_N) {
        die("ringcache_mget_cb", ret != 0 ? ringcache_strerror(ret) : "missing keys");
    }
}

static void
mc_set(struct contender *c, size_t k)
{
    memcached_return_t r = memcached_set(c->mc, keys[k], key_len[k], value, VALUE_LEN, 0, 0);

    if (r != MEMCACHED_SUCCESS) {
        die("memcached_set", memcached_strerror(c->mc, r));
    }
}

static void
mc_get(struct contender *c, size_t k)
{
    memcached_return_t r;
    uint32_t           flags;
    size_t             len;
    char              *v = memcached_get(c->mc, keys[k], key_len[k], &len, &flags, &r);

    if (v == NULL || len != VALUE_LEN) {
        die("memcached_get", memcached_strerror(c->mc, r));
    }
    free(v);
}

static void
mc_mget(struct contender *c, const char **ks, const size_t *ls)
{
    memcached_result_st res, *rp;
    memcached_return_t  r;
    int                 hits = 0;

    r = memcached_mget(c->mc, ks, ls, MGET_N);
    if (r != MEMCACHED_SUCCESS) {
        die("memcached_mget", memcached_strerror(c->mc, r));
    }
    memcached_result_create(c->mc, &res);
    while ((rp = memcached_fetch_result(c->mc, &res, &r)) != NULL) {
        hits += memcached_result_length(rp) == VALUE_LEN;
    }
    memcached_result_free(&res);
    if (hits != MGET_N) {
        die("memcached_mget", "missing keys");
    }
}

/* Run `ops` operations of one kind; returns operations per second. */
static double
run_op(struct contender *c, enum op op, int ops, uint32_t seed)
{
    const char *ks[MGET_N];
    size_t      ls[MGET_N];
    double      t0;
    int         i, j;

    t0 = now_s();
    for (i = 0; i < ops; i++) {
        size_t k = next_rand(&seed) % N_KEYS;

        switch (op) {
        case OP_GET:
            c->rc != NULL ? ours_get(c, k) : mc_get(c, k);
            break;
        case OP_SET:
            c->rc != NULL ? ours_set(c, k) : mc_set(c, k);
            break;
        case OP_MGET:
            for (j = 0; j < MGET_N; j++) {
                size_t m = next_rand(&seed) % N_KEYS;

                ks[j] = keys[m];
                ls[j] = key_len[m];
            }
            c->rc != NULL ? ours_mget(c, ks, ls) : mc_mget(c, ks, ls);
            break;
        default:
            break;
        }
    }
    return ops / (now_s() - t0);
}

static memcached_st *
mc_new(const char *list, bool ketama)
{
    memcached_st *mc = memcached_create(NULL);
    char         *copy = strdup(list), *tok, *save = NULL;

    if (ketama) {
        memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_DISTRIBUTION,
                               MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA);
    }
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
    for (tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(tok, ':');

        if (colon == NULL) {
            die(tok, "expected host:port");
        }
        *colon = '\0';
        if (memcached_server_add(mc, tok, (in_port_t)atoi(colon + 1)) != MEMCACHED_SUCCESS) {
            die(tok, "memcached_server_add failed");
        }
    }
    free(copy);
    return mc;
}

/* Our handle on members; over TLS (verified against tls_ca) when given. */
static struct ringcache *
ours_new(const char *members, const char *tls_ca)
{
    struct ringcache        *rc = NULL;
    struct ringcache_options o;
    char                     err[256];

    ringcache_options_init(&o);
    o.tls = tls_ca != NULL;
    o.tls_ca_file = tls_ca;
    if (ringcache_new_members_file(&rc, members, &o, err, sizeof(err)) != 0) {
        die(members, err);
    }
    return rc;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double
median(const double *v, int n)
{
    double s[MAX_PASS];

    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = { { "ours", required_argument, NULL, 'o' },
                                          { "ours-mc", required_argument, NULL, 'O' },
                                          { "memcached", required_argument, NULL, 'm' },
                                          { "proxy", required_argument, NULL, 'p' },
                                          { "passes", required_argument, NULL, 'n' },
                                          { "ops", required_argument, NULL, 'k' },
                                          { "ours-tls", required_argument, NULL, 'T' },
                                          { "tls-ca", required_argument, NULL, 'C' },
                                          { NULL, 0, NULL, 0 } };
    struct contender           cs[5];
    const char                *ours = NULL, *ours_mc = NULL, *mcs = NULL, *proxy = NULL;
    const char                *ours_tls = NULL, *tls_ca = NULL;
    int                        i_mc = -1, i_tls = -1;
    int                        passes = 40, ops = 1000, nc = 0, c, p, o, i;
    int                        ops_for[N_OPS];
    size_t                     k;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            ours = optarg;
            break;
        case 'O':
            ours_mc = optarg;
            break;
        case 'm':
            mcs = optarg;
            break;
        case 'p':
            proxy = optarg;
            break;
        case 'n':
            passes = atoi(optarg);
            break;
        case 'k':
            ops = atoi(optarg);
            break;
        case 'T':
            ours_tls = optarg;
            break;
        case 'C':
            tls_ca = optarg;
            break;
        default:
            return 2;
        }
    }
    if (ours == NULL || mcs == NULL || proxy == NULL || passes < 1 || passes > MAX_PASS ||
        ops < 10 || (ours_tls != NULL) != (tls_ca != NULL) ||
        (ours_tls != NULL && ours_mc == NULL)) {
        fprintf(stderr,
                "usage: client_bench --ours MEMBERS --memcached H:P,... --proxy H:P "
                "[--ours-mc MEMBERS [--ours-tls MEMBERS --tls-ca FILE]] [--passes 1..%d] "
                "[--ops N]\n",
                MAX_PASS);
        return 2;
    }
    for (k = 0; k < N_KEYS; k++) {
        key_len[k] = (size_t)snprintf(keys[k], sizeof(keys[k]), "bench:key:%zu", k);
    }
    memset(value, 'v', sizeof(value));
    memset(cs, 0, sizeof(cs));
    cs[nc].name = "ours";
    cs[nc++].rc = ours_new(ours, NULL);
    cs[nc].name = "libmemcached";
    cs[nc++].mc = mc_new(mcs, true);
    cs[nc].name = "twemproxy";
    cs[nc++].mc = mc_new(proxy, false);
    if (ours_mc != NULL) {
        i_mc = nc;
        cs[nc].name = "ours_on_memcached";
        cs[nc++].rc = ours_new(ours_mc, NULL);
    }
    if (ours_tls != NULL) {
        i_tls = nc;
        cs[nc].name = "ours_tls_on_memcached";
        cs[nc++].rc = ours_new(ours_tls, tls_ca);
    }
    /* Every contender's servers hold every key before any timing. */
    for (i = 0; i < nc; i++) {
        for (k = 0; k < N_KEYS; k++) {
            cs[i].rc != NULL ? ours_set(&cs[i], k) : mc_set(&cs[i], k);
        }
    }
    ops_for[OP_GET] = ops;
    ops_for[OP_SET] = ops;
    ops_for[OP_MGET] = ops / 10;
    for (p = 0; p < passes; p++) {
        for (o = 0; o < N_OPS; o++) {
            /* Alternate who goes first so drift hurts nobody in particular. */
            for (i = 0; i < nc; i++) {
                struct contender *ct = &cs[(i + p) % nc];

                ct->rate[o][p] = run_op(ct, (enum op)o, ops_for[o], 0x9e3779b9u + (uint32_t)p);
            }
        }
    }
    for (o = 0; o < N_OPS; o++) {
        double m[5], r[MAX_PASS];

        for (i = 0; i < nc; i++) {
            m[i] = median(cs[i].rate[o], passes);
            printf("client_ops/%s/%s %.0f\n", cs[i].name, op_name[o], m[i]);
        }
        /* Ratios of the same pass: the background load cancels out. */
        for (p = 0; p < passes; p++) {
            r[p] = cs[0].rate[o][p] / cs[1].rate[o][p];
        }
        printf("client_ratio/libmemcached/%s %.3f\n", op_name[o], median(r, passes));
        for (p = 0; p < passes; p++) {
            r[p] = cs[0].rate[o][p] / cs[2].rate[o][p];
        }
        printf("client_ratio/twemproxy/%s %.3f\n", op_name[o], median(r, passes));
        if (i_tls >= 0) {
            for (p = 0; p < passes; p++) {
                r[p] = cs[i_tls].rate[o][p] / cs[i_mc].rate[o][p];
            }
            printf("client_ratio_tls/ours_on_memcached/%s %.3f\n", op_name[o], median(r, passes));
        }
        if (i_mc >= 0) {
            for (p = 0; p < passes; p++) {
                r[p] = cs[i_mc].rate[o][p] / cs[1].rate[o][p];
            }
            printf("client_ratio_same_server/libmemcached/%s %.3f\n", op_name[o],
                   median(r, passes));
            for (p = 0; p < passes; p++) {
                r[p] = cs[i_mc].rate[o][p] / cs[2].rate[o][p];
            }
            printf("client_ratio_same_server/twemproxy/%s %.3f\n", op_name[o], median(r, passes));
        }
    }
    for (i = 0; i < nc; i++) {
        ringcache_free(cs[i].rc);
        if (cs[i].mc != NULL) {
            memcached_free(cs[i].mc);
        }
    }
    return 0;
}
