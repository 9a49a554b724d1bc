/*
 * store_bench: the item store alone, no network. Prints `figure value`
 * lines: resident bytes per item after 1M sets of 100-byte values with
 * 14-byte keys (by default), get/set throughput from several threads, and
 * the time a handoff's walk (store_walk, a predicate taking a quarter of
 * the hashes, as a join's source walks) and count (store_count) take per
 * item in the store.
 * Usage: store_bench [items] [threads] [ops-per-thread] [key-length 6..20]
 * RC_BENCH_ENGINE=compact: the compact engine (the node's default); the
 * chained table otherwise.
 */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ring/ring.h"
#include "server/store.h"
#include "tests/bench/bench_rss.h"

static int key_width = 10; /* digits after "key:" */

struct worker {
    struct store *s;
    unsigned      seed;
    long          items, ops;
};

static double
mono(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A join's share of a source's keys: a quarter of the hash space. */
static bool
quarter(uint64_t hash, void *arg)
{
    (void)arg;
    return hash >> 62 == 0;
}

static void
walked(struct store_item *it, void *arg)
{
    *(long *)arg += (long)it->nbytes > 0;
}

/* The walk and the count of a quarter of the store, ns per stored item:
 * with the predicate alone, then with the quarter's prefix map as the
 * handoff gives it (the compact engine reads only the quarter's records). */
static void
bench_walk(struct store *s, long items)
{
    static uint64_t map[STORE_PREFIX_WORDS];
    int             pass;

    for (pass = 0; pass < (int)STORE_PREFIX_WORDS / 4; pass++) {
        map[pass] = UINT64_MAX; /* prefixes 0..2^14-1: hash >> 62 == 0 */
    }
    for (pass = 0; pass < 2; pass++) {
        const char         *how = pass == 0 ? "quarter" : "quarter_mapped";
        const uint64_t     *pm = pass == 0 ? NULL : map;
        struct store_cursor cur;
        uint64_t            n = 0, bytes = 0;
        long                got = 0;
        double              t0 = mono();

        store_cursor_init(&cur);
        cur.prefixes = pm;
        while (store_walk(s, &cur, quarter, NULL, walked, &got, 4096)) {
        }
        printf("store_walk_ns_per_item/%s %.1f (%ld walked)\n", how, (mono() - t0) * 1e9 / items,
               got);
        t0 = mono();
        store_count(s, quarter, NULL, pm, &n, &bytes);
        printf("store_count_ns_per_item/%s %.1f (%llu counted)\n", how, (mono() - t0) * 1e9 / items,
               (unsigned long long)n);
    }
}

/* One set of key number i with a 100-byte value; 0 or a store error. */
static int
set_one(struct store *s, long i)
{
    char               key[32];
    int                n = snprintf(key, sizeof(key), "key:%0*ld", key_width, i), err = 0;
    struct store_item *it =
        store_alloc(s, key, (size_t)n, ring_hash(key, (size_t)n), 0, 0, 100, &err);

    if (it == NULL) {
        return err;
    }
    memset(store_item_value_mut(it), 'v', 100);
    err = store_put(s, it, STORE_OP_SET, 0, NULL);
    store_release(s, it);
    return err;
}

/* 90% gets, 10% sets over the key space. */
static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    char           key[32];
    long           k;

    for (k = 0; k < w->ops; k++) {
        long i = (long)(rand_r(&w->seed) % (unsigned)w->items);

        if (k % 10 == 0) {
            set_one(w->s, i);
        } else {
            int                n = snprintf(key, sizeof(key), "key:%0*ld", key_width, i);
            struct store_item *it = store_get(w->s, key, (size_t)n, ring_hash(key, (size_t)n));

            if (it != NULL) {
                store_release(w->s, it);
            }
        }
    }
    return NULL;
}

int
main(int argc, char **argv)
{
    long                items = argc > 1 ? atol(argv[1]) : 1000000;
    int                 threads = argc > 2 ? atoi(argv[2]) : 2;
    long                ops = argc > 3 ? atol(argv[3]) : 2000000;
    const char         *engine = getenv("RC_BENCH_ENGINE");
    struct store_config cfg = { .mem_limit = (size_t)4 << 30,
                                .item_size_max = 1 << 20,
                                .compact = engine != NULL && strcmp(engine, "compact") == 0 };
    struct worker      *w;
    pthread_t          *th;
    struct store       *s;
    long                rss0, i;
    double              t0, t;
    int                 k;

    if (argc > 4) {
        key_width = atoi(argv[4]) - 4;
    }
    if (items <= 0 || threads <= 0 || ops <= 0 || key_width < 2 || key_width > 16) {
        fprintf(stderr,
                "usage: store_bench [items] [threads] [ops-per-thread] [key-length 6..20]\n");
        return 2;
    }
    rss0 = rss_bytes();
    s = store_new(&cfg);
    if (s == NULL) {
        return 1;
    }
    t0 = mono();
    for (i = 0; i < items; i++) {
        if (set_one(s, i) != STORE_STORED) {
            fprintf(stderr, "set %ld failed\n", i);
            return 1;
        }
    }
    t = mono() - t0;
    printf("store_bytes_per_item/100B/key%d %.1f\n", key_width + 4,
           (double)(rss_bytes() - rss0) / (double)items);
    printf("store_charged_per_item/100B/key%d %zu\n", key_width + 4,
           store_item_size((size_t)key_width + 4, 100));
    printf("store_fill_sets_per_sec %.0f\n", (double)items / t);
    bench_walk(s, items);

    w = calloc((size_t)threads, sizeof(*w));
    th = calloc((size_t)threads, sizeof(*th));
    if (w == NULL || th == NULL) {
        return 1;
    }
    t0 = mono();
    for (k = 0; k < threads; k++) {
        w[k] = (struct worker){ .s = s, .seed = (unsigned)k + 1, .items = items, .ops = ops };
        pthread_create(&th[k], NULL, worker_main, &w[k]);
    }
    for (k = 0; k < threads; k++) {
        pthread_join(th[k], NULL);
    }
    t = mono() - t0;
    printf("store_ops_per_sec/get90_set10/%dthreads %.0f\n", threads, (double)ops * threads / t);
    store_free(s);
    free(w);
    free(th);
    return 0;
}
