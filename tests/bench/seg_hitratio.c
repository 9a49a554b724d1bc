/*
 * seg_hitratio: hit ratio of the compact engine (server/seg.c) against
 * today's store (server/store.c) at the same memory limit, in process (no
 * network): a cache-aside loop (get; on a miss, set) over Zipf keys with
 * values of 64-1024 bytes (a function of the key), the same request
 * sequence for both. Each engine runs in a child of its own, which also
 * reports its RSS growth. Prints `figure value` lines.
 * Usage: seg_hitratio [limit-MiB 64] [skew 0.99] [keys 1000000]
 *                     [requests 2000000] [warm-up 2000000]
 * Environment: SEG_SIZE (bytes, the compact engine's segment size).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "server/seg.h"
#include "server/store.h"
#include "tests/bench/bench_rss.h"
#include "tests/bench/zipf.h"

struct load {
    size_t      limit;
    struct zipf z;
    uint64_t    nreq, nwarm;
};

struct outcome {
    double   hit_ratio;
    double   rss_mb;
    uint64_t items, evictions;
};

static char val[1024];

/* The i-th request's key rank: the same sequence in both children. */
static uint32_t
rank_of(const struct load *l, uint64_t i)
{
    return zipf_rank(&l->z, (double)(mix64(i + 1) >> 11) / (double)(1ull << 53));
}

static uint32_t
size_of(uint32_t rank)
{
    return 64 + (uint32_t)(mix64(rank) % 961u);
}

/* One request to the compact engine: true on a hit. */
static bool
seg_req(struct seg *s, const char *key, size_t n, uint32_t rank, uint64_t i)
{
    uint64_t       h = XXH3_64bits(key, n);
    struct seg_rec r = {
        .nkey = (uint8_t)n, .nbytes = size_of(rank), .cas = i + 1, .key = key, .value = val
    };

    if (seg_get(s, key, n, h, 0, 0, SEG_GET_FETCH, NULL, NULL) == SEG_OK) {
        return true;
    }
    seg_put(s, h, &r, NULL, NULL);
    return false;
}

/* One request to the store: true on a hit. */
static bool
store_req(struct store *s, const char *key, size_t n, uint32_t rank)
{
    uint64_t           h = XXH3_64bits(key, n);
    struct store_item *it = store_get(s, key, n, h);
    int                err = 0;

    if (it != NULL) {
        store_release(s, it);
        return true;
    }
    it = store_alloc(s, key, n, h, 0, 0, size_of(rank), &err);
    if (it != NULL) {
        memcpy(store_item_value_mut(it), val, size_of(rank));
        store_put(s, it, STORE_OP_SET, 0, NULL);
        store_release(s, it);
    }
    return false;
}

static void
run(const struct load *l, bool use_seg, struct outcome *o)
{
    struct seg_config   scfg = { .mem_limit = l->limit };

    if (getenv("SEG_SIZE") != NULL) { /* exploring: segment size in bytes */
        scfg.seg_size = (uint32_t)strtoul(getenv("SEG_SIZE"), NULL, 10);
    }
    struct store_config tcfg = { .mem_limit = l->limit, .item_size_max = 1 << 20 };
    struct seg         *sg = use_seg ? seg_new(&scfg) : NULL;
    struct store       *st = use_seg ? NULL : store_new(&tcfg);
    uint64_t            i, hits = 0;
    long                rss0 = rss_bytes();
    char                key[32];

    for (i = 0; i < l->nwarm + l->nreq; i++) {
        uint32_t rank = rank_of(l, i);
        size_t   n = (size_t)snprintf(key, sizeof(key), "key:%u", rank);
        bool     hit = sg != NULL ? seg_req(sg, key, n, rank, i) : store_req(st, key, n, rank);

        hits += hit && i >= l->nwarm;
    }
    o->hit_ratio = (double)hits / (double)l->nreq;
    o->rss_mb = (double)(rss_bytes() - rss0) / 1e6;
    if (sg != NULL) {
        struct seg_stats ss;

        seg_stats(sg, &ss);
        o->items = ss.items;
        o->evictions = ss.evictions;
    } else {
        struct store_stats ts;

        store_get_stats(st, &ts);
        o->items = ts.curr_items;
        o->evictions = ts.evictions;
    }
}

/* run() in a child; false on failure. */
static bool
measure(const struct load *l, bool use_seg, struct outcome *o)
{
    int   fd[2], status;
    pid_t pid;
    bool  ok;

    if (pipe(fd) != 0 || (pid = fork()) < 0) {
        return false;
    }
    if (pid == 0) {
        close(fd[0]);
        run(l, use_seg, o);
        _exit(write(fd[1], o, sizeof(*o)) == (ssize_t)sizeof(*o) ? 0 : 1);
    }
    close(fd[1]);
    ok = read(fd[0], o, sizeof(*o)) == (ssize_t)sizeof(*o);
    close(fd[0]);
    waitpid(pid, &status, 0);
    return ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int
main(int argc, char **argv)
{
    struct load    l = { .limit = (size_t)(argc > 1 ? atol(argv[1]) : 64) << 20,
                         .nreq = argc > 4 ? strtoull(argv[4], NULL, 10) : 2000000,
                         .nwarm = argc > 5 ? strtoull(argv[5], NULL, 10) : 2000000 };
    double         skew = argc > 2 ? atof(argv[2]) : 0.99;
    long           keys = argc > 3 ? atol(argv[3]) : 1000000;
    struct outcome so, to;

    if (l.limit == 0 || keys <= 0 || l.nreq == 0 || skew <= 0) {
        fprintf(stderr, "usage: seg_hitratio [limit-MiB] [skew] [keys] [requests] [warm-up]\n");
        return 2;
    }
    memset(val, 'v', sizeof(val));
    if (zipf_init(&l.z, (uint32_t)keys, skew) != 0) {
        return 1;
    }
    if (!measure(&l, true, &so) || !measure(&l, false, &to)) {
        fprintf(stderr, "seg_hitratio: a run failed\n");
        return 1;
    }
    printf("seg_hit_ratio/z%.2f/m%zu %.4f\n", skew, l.limit >> 20, so.hit_ratio);
    printf("store_hit_ratio/z%.2f/m%zu %.4f\n", skew, l.limit >> 20, to.hit_ratio);
    printf("seg_minus_store/z%.2f/m%zu %+.4f\n", skew, l.limit >> 20, so.hit_ratio - to.hit_ratio);
    printf("seg_items/m%zu %llu\n", l.limit >> 20, (unsigned long long)so.items);
    printf("store_items/m%zu %llu\n", l.limit >> 20, (unsigned long long)to.items);
    printf("seg_rss_growth_mb/m%zu %.1f\n", l.limit >> 20, so.rss_mb);
    printf("store_rss_growth_mb/m%zu %.1f\n", l.limit >> 20, to.rss_mb);
    zipf_free(&l.z);
    return 0;
}
