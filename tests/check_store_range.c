/*
 * store_range_suite: the item store's operations over many items
 * (server/store_range.c, server/store_track.c): the handoff primitives,
 * range walk, count, dirty tracking, import, purge, and a simulated copy
 * under concurrent writers that must converge; the expiry sweep's tcase
 * is tests/check_store_sweep.c. Time moves with store_clock_shift.
 */
#include "ring/ring.h"
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/store.h"
#include "tests/check_store.h"
#include "tests/suites.h"

/* ---- ranges: walk, tracking, import, purge (the handoff primitives) ---- */

/* A key range as the handoff sees it: an arc [lo, hi) of hash values. */
struct arc {
    uint64_t lo, hi;
};

static bool
in_arc(uint64_t hash, void *arg)
{
    const struct arc *a = arg;

    return hash >= a->lo && hash < a->hi;
}

/* A quarter of the ring. */
static struct arc quarter = { UINT64_C(1) << 62, UINT64_C(1) << 63 };

static void
keyname(char *buf, size_t n, const char *prefix, int i)
{
    snprintf(buf, n, "%s%06d", prefix, i);
}

/* Index of a "w%06d" key, or -1 for another key. */
static int
key_index(const char *key, size_t nkey, const char *prefix)
{
    size_t np = strlen(prefix);
    char   buf[16];

    if (nkey != np + 6 || memcmp(key, prefix, np) != 0) {
        return -1;
    }
    memcpy(buf, key + np, 6);
    buf[6] = '\0';
    return atoi(buf);
}

/* Walk callback state: how often each "w" key was visited, and visits of
 * items outside the range (must stay 0). */
struct visits {
    const char *prefix;
    int         n;
    unsigned   *seen;
    unsigned    outside, other, total;
    struct arc *arc;
};

static void
visit_fn(struct store_item *it, void *arg)
{
    struct visits *v = arg;
    int            i = key_index(store_item_key(it), it->nkey, v->prefix);

    v->total++;
    if (!in_arc(it->hash, v->arc)) {
        v->outside++;
    }
    if (i >= 0 && i < v->n) {
        v->seen[i]++;
    } else {
        v->other++;
    }
}

static int
fill_keys(struct store *s, const char *prefix, int from, int to)
{
    char key[32];
    int  i, matching = 0;

    for (i = from; i < to; i++) {
        keyname(key, sizeof(key), prefix, i);
        ck_assert_int_eq(set(s, key, key), STORE_STORED);
        matching += in_arc(h(key), &quarter);
    }
    return matching;
}

/* The most keys prefix<0..n-1> of the quarter one lock stripe holds:
 * what a walk or purge call may read past max_items on the compact
 * engine, which reads whole stripes. */
static unsigned
stripe_matching_max(const char *prefix, int n)
{
    unsigned *per = calloc(STORE_STRIPES, sizeof(unsigned)), max = 0;
    char      key[32];
    int       i;

    ck_assert_ptr_nonnull(per);
    for (i = 0; i < n; i++) {
        uint64_t hh;

        keyname(key, sizeof(key), prefix, i);
        hh = h(key);
        if (in_arc(hh, &quarter) && ++per[hh & (STORE_STRIPES - 1)] > max) {
            max = per[hh & (STORE_STRIPES - 1)];
        }
    }
    free(per);
    return max;
}

/* On a static table every matching item is visited exactly once and no
 * other one; batches stay within max_items (whole buckets, short chains
 * on the chained table; whole stripes on the compact engine). */
START_TEST(test_walk_static)
{
    enum {
        N = 20000
    };
    struct store       *s = mkstore(256 * MIB, false);
    struct visits       v = { "w", N, calloc(N, sizeof(unsigned)), 0, 0, 0, &quarter };
    struct store_cursor cur;
    uint64_t            items, bytes, all_items, all_bytes;
    struct store_stats  st;
    char                key[32];
    int                 i, matching = fill_keys(s, "w", 0, N), calls = 0, more;
    unsigned            bound = store_test_compact() ? 6 + stripe_matching_max("w", N) : 7 + 4;

    ck_assert_int_gt(matching, N / 5);
    store_cursor_init(&cur);
    do {
        unsigned before = v.total;

        more = store_walk(s, &cur, in_arc, &quarter, visit_fn, &v, 7);
        ck_assert_int_ge(more, 0);
        ck_assert_uint_le(v.total - before, bound);
        calls++;
    } while (more == 1);
    ck_assert_int_gt(calls, store_test_compact() ? matching / (int)bound : matching / 8);
    ck_assert_uint_eq(v.outside, 0);
    ck_assert_uint_eq(v.other, 0);
    ck_assert_uint_eq(v.total, (unsigned)matching);
    for (i = 0; i < N; i++) {
        keyname(key, sizeof(key), "w", i);
        ck_assert_uint_eq(v.seen[i], in_arc(h(key), &quarter) ? 1u : 0u);
    }
    /* a finished cursor stays finished */
    ck_assert_int_eq(store_walk(s, &cur, in_arc, &quarter, visit_fn, &v, 7), 0);
    ck_assert_uint_eq(v.total, (unsigned)matching);

    store_count(s, in_arc, &quarter, NULL, &items, &bytes);
    ck_assert_uint_eq(items, (uint64_t)matching);
    ck_assert_uint_eq(bytes, (uint64_t)matching * item_bytes(7, 7, 0));
    store_count(s, NULL, NULL, NULL, &all_items, &all_bytes);
    store_get_stats(s, &st);
    ck_assert_uint_eq(all_items, st.curr_items);
    ck_assert_uint_eq(all_bytes, st.bytes);

    /* the same count in slices of 100 items read: whole stripes, so a slice
     * may read more, and it takes several calls */
    {
        uint64_t sliced = 0, sliced_bytes = 0;
        uint32_t stripe = 0;
        int      steps = 1;

        while (store_count_step(s, &stripe, in_arc, &quarter, NULL, 100, &sliced, &sliced_bytes) ==
               1) {
            steps++;
        }
        ck_assert_int_gt(steps, 1);
        ck_assert_uint_eq(sliced, items);
        ck_assert_uint_eq(sliced_bytes, bytes);
        ck_assert_int_eq(
            store_count_step(s, &stripe, in_arc, &quarter, NULL, 100, &sliced, &sliced_bytes), 0);
        ck_assert_uint_eq(sliced, items);
    }

    /* expired and flushed items are not visited */
    memset(v.seen, 0, N * sizeof(unsigned));
    v.total = 0;
    ck_assert_int_eq(put(s, STORE_OP_SET, "w000000", "x", 0, 10, 0, NULL), STORE_STORED);
    store_clock_shift(s, 20);
    store_cursor_init(&cur);
    while (store_walk(s, &cur, in_arc, &quarter, visit_fn, &v, 1000) == 1)
        ;
    ck_assert_uint_eq(v.seen[0], 0);
    ck_assert_uint_eq(v.total, (unsigned)matching - in_arc(h("w000000"), &quarter));
    store_flush(s, 0);
    v.total = 0;
    store_cursor_init(&cur);
    while (store_walk(s, &cur, NULL, NULL, visit_fn, &v, 1000) == 1)
        ;
    ck_assert_uint_eq(v.total, 0);
    free(v.seen);
    store_free(s);
}
END_TEST

/* Tables that double between walk calls: every item present the whole
 * time is visited, exactly once (a growing table never repeats). The keys
 * added are outside the range, so the walk has a fixed amount to do. */
static void
fill_outside(struct store *s, int *next, int count)
{
    char key[32];

    while (count > 0) {
        keyname(key, sizeof(key), "grow", (*next)++);
        if (in_arc(h(key), &quarter)) {
            continue;
        }
        ck_assert_int_eq(set(s, key, key), STORE_STORED);
        count--;
    }
}

START_TEST(test_walk_resize)
{
    enum {
        N = 3000,
        ADD = 1000
    };
    struct store       *s = mkstore(512 * MIB, false);
    struct visits       v = { "w", N, calloc(N, sizeof(unsigned)), 0, 0, 0, &quarter };
    struct store_cursor cur;
    struct store_stats  st0, st1;
    char                key[32];
    int                 i, next = 0;

    fill_keys(s, "w", 0, N);
    store_get_stats(s, &st0);
    store_cursor_init(&cur);
    while (store_walk(s, &cur, in_arc, &quarter, visit_fn, &v, 4) == 1) {
        fill_outside(s, &next, ADD);
    }
    store_get_stats(s, &st1);
    ck_assert_uint_ge(st1.hash_buckets, st0.hash_buckets * 8);
    ck_assert_uint_eq(v.outside, 0);
    for (i = 0; i < N; i++) {
        keyname(key, sizeof(key), "w", i);
        ck_assert_msg(v.seen[i] == (in_arc(h(key), &quarter) ? 1u : 0u), "%s visited %u times", key,
                      v.seen[i]);
    }
    free(v.seen);
    store_free(s);
}
END_TEST

/* Writers churn on other keys (sets, deletes, growth, evictions of
 * nothing: ample memory) while a walk runs: every untouched item is seen. */
struct churn {
    struct store *s;
    const char   *prefix;
    int           nkeys;
    unsigned      seed;
    int           stop; /* atomic */
    long          ops;
    bool          in_range_only; /* converge test: mutate any key of the key space */
};

static void *
churn_main(void *arg)
{
    struct churn *c = arg;
    char          key[32], val[48];
    uint64_t      v;

    while (!__atomic_load_n(&c->stop, __ATOMIC_RELAXED)) {
        unsigned r = rand_r(&c->seed);
        int      i = (int)(r % (unsigned)c->nkeys);
        int64_t  ttl = (r >> 20) % 3 == 0 ? 0 : 100 + (r >> 22) % 1000;

        keyname(key, sizeof(key), c->prefix, i);
        switch ((r >> 8) % 8) {
        case 0:
        case 1:
        case 2:
            snprintf(val, sizeof(val), "%u", r);
            put(c->s, STORE_OP_SET, key, val, r >> 16, ttl, 0, NULL);
            break;
        case 3:
            store_delete(c->s, key, strlen(key), h(key));
            break;
        case 4:
            store_arith(c->s, key, strlen(key), h(key), true, r % 5, &v, NULL);
            break;
        case 5:
            put(c->s, STORE_OP_APPEND, key, "a", 0, 0, 0, NULL);
            break;
        case 6:
            store_touch(c->s, key, strlen(key), h(key), store_exptime(c->s, ttl));
            break;
        default:
            put(c->s, STORE_OP_ADD, key, "7", r >> 16, ttl, 0, NULL);
            break;
        }
        __atomic_fetch_add(&c->ops, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* Poll (10 s deadline) until every writer has done at least min ops, so a
 * walk or drain really overlaps with writes on a loaded machine; with a
 * store, drain it meanwhile. */
static void
wait_ops(struct churn *c, int nc, long min, struct store *drain_src, store_dirty_fn fn, void *arg)
{
    double deadline = mono() + 10.0;
    int    k;

    for (k = 0; k < nc; k++) {
        while (__atomic_load_n(&c[k].ops, __ATOMIC_RELAXED) < min) {
            ck_assert_msg(mono() < deadline, "writer %d did only %ld ops in 10 s", k,
                          __atomic_load_n(&c[k].ops, __ATOMIC_RELAXED));
            if (drain_src != NULL) {
                store_track_drain(drain_src, fn, arg, 64);
            } else {
                sched_yield();
            }
        }
    }
}

START_TEST(test_walk_concurrent)
{
    enum {
        N = 20000,
        W = 2
    };
    struct store       *s = mkstore(512 * MIB, false);
    struct visits       v = { "w", N, calloc(N, sizeof(unsigned)), 0, 0, 0, &quarter };
    struct churn        c[W];
    pthread_t           th[W];
    struct store_cursor cur;
    char                key[32];
    int                 i, k;

    fill_keys(s, "w", 0, N);
    for (k = 0; k < W; k++) {
        c[k] = (struct churn){ .s = s, .prefix = "c", .nkeys = 50000, .seed = (unsigned)k + 7 };
        ck_assert_int_eq(pthread_create(&th[k], NULL, churn_main, &c[k]), 0);
    }
    wait_ops(c, W, 100, NULL, NULL, NULL);
    store_cursor_init(&cur);
    while (store_walk(s, &cur, in_arc, &quarter, visit_fn, &v, 16) == 1)
        ;
    for (k = 0; k < W; k++) {
        __atomic_store_n(&c[k].stop, 1, __ATOMIC_RELAXED);
        pthread_join(th[k], NULL);
        ck_assert_int_gt(c[k].ops, 0);
    }
    ck_assert_uint_eq(v.outside, 0);
    for (i = 0; i < N; i++) {
        keyname(key, sizeof(key), "w", i);
        if (in_arc(h(key), &quarter)) {
            ck_assert_msg(v.seen[i] >= 1, "%s not visited", key);
        } else {
            ck_assert_uint_eq(v.seen[i], 0);
        }
    }
    free(v.seen);
    store_free(s);
}
END_TEST

/* Drained records: the last state seen for each key. */
#define DR_MAX 64
struct drained {
    int n;
    struct {
        char     key[STORE_KEY_MAX + 1];
        char     val[64];
        bool     present;
        unsigned times;
    } r[DR_MAX];
};

static void
drain_fn(const char *key, size_t nkey, uint64_t hash, struct store_item *it, void *arg)
{
    struct drained *d = arg;
    int             i;

    ck_assert_uint_eq(hash, ring_hash(key, nkey));
    for (i = 0; i < d->n; i++) {
        if (strlen(d->r[i].key) == nkey && memcmp(d->r[i].key, key, nkey) == 0) {
            break;
        }
    }
    if (i == d->n) {
        ck_assert_int_lt(d->n, DR_MAX);
        memcpy(d->r[i].key, key, nkey);
        d->r[i].key[nkey] = '\0';
        d->n++;
    }
    d->r[i].times++;
    d->r[i].present = it != NULL;
    d->r[i].val[0] = '\0';
    if (it != NULL) {
        ck_assert_uint_lt(it->nbytes, sizeof(d->r[i].val));
        memcpy(d->r[i].val, store_item_value(it), it->nbytes);
        d->r[i].val[it->nbytes] = '\0';
    }
}

/* The record of key in a drain, NULL if it was not drained. */
static const char *
drained_state(struct drained *d, const char *key, bool *present, unsigned *times)
{
    int i;

    for (i = 0; i < d->n; i++) {
        if (strcmp(d->r[i].key, key) == 0) {
            *present = d->r[i].present;
            *times = d->r[i].times;
            return d->r[i].val;
        }
    }
    return NULL;
}

/* Key "<prefix><n>" inside (want = true) or outside the quarter. */
static void
key_in(char *buf, size_t n, const char *prefix, bool want)
{
    int i;

    for (i = 0;; i++) {
        snprintf(buf, n, "%s%d", prefix, i);
        if (in_arc(h(buf), &quarter) == want) {
            return;
        }
    }
}

static void
expect_drained(struct drained *d, const char *key, const char *val)
{
    bool        present = false;
    unsigned    times = 0;
    const char *got = drained_state(d, key, &present, &times);

    ck_assert_msg(got != NULL, "%s was not recorded", key);
    ck_assert_msg(times == 1, "%s drained %u times", key, times);
    if (val == NULL) {
        ck_assert_msg(!present, "%s: expected a tombstone, got '%s'", key, got);
    } else {
        ck_assert_msg(present, "%s: expected '%s', got a tombstone", key, val);
        ck_assert_str_eq(got, val);
    }
}

/* Every kind of change of a key in the range is recorded once, keys
 * outside are not, and the drain gives the state at drain time. */
START_TEST(test_track_ops)
{
    struct store *s = mkstore(256 * MIB, false);
    char kset[32], kdel[32], kincr[32], kapp[32], ktouch[32], kexp[32], kout[32], kquiet[32],
        kgat[32], kre[32];
    struct drained    *d = calloc(1, sizeof(*d));
    struct store_stats st;
    struct store_item *it;
    uint64_t           v;
    int                i;

    key_in(kset, sizeof(kset), "set", true);
    key_in(kdel, sizeof(kdel), "del", true);
    key_in(kincr, sizeof(kincr), "incr", true);
    key_in(kapp, sizeof(kapp), "app", true);
    key_in(ktouch, sizeof(ktouch), "touch", true);
    key_in(kexp, sizeof(kexp), "exp", true);
    key_in(kquiet, sizeof(kquiet), "quiet", true);
    key_in(kgat, sizeof(kgat), "gat", true);
    key_in(kre, sizeof(kre), "re", true);
    key_in(kout, sizeof(kout), "out", false);
    ck_assert_int_eq(set(s, kdel, "d"), STORE_STORED);
    ck_assert_int_eq(set(s, kincr, "41"), STORE_STORED);
    ck_assert_int_eq(set(s, kapp, "a"), STORE_STORED);
    ck_assert_int_eq(set(s, ktouch, "t"), STORE_STORED);
    ck_assert_int_eq(set(s, kquiet, "q"), STORE_STORED);
    ck_assert_int_eq(set(s, kgat, "g"), STORE_STORED);
    ck_assert_int_eq(set(s, kre, "r"), STORE_STORED);
    ck_assert_int_eq(put(s, STORE_OP_SET, kexp, "e", 0, 100, 0, NULL), STORE_STORED);
    ck_assert_int_eq(set(s, kout, "o"), STORE_STORED);

    ck_assert_int_eq(store_track_start(s, in_arc, &quarter), 0);
    ck_assert_int_eq(store_track_start(s, in_arc, &quarter), STORE_BUSY);
    ck_assert_uint_eq(store_track_pending(s), 0);

    for (i = 0; i < 5; i++) { /* dedup: one record for five sets */
        char val[8];

        snprintf(val, sizeof(val), "v%d", i);
        ck_assert_int_eq(set(s, kset, val), STORE_STORED);
    }
    ck_assert_uint_eq(store_track_pending(s), 1);
    ck_assert_int_eq(store_delete(s, kdel, strlen(kdel), h(kdel)), STORE_DELETED);
    ck_assert_int_eq(store_arith(s, kincr, strlen(kincr), h(kincr), true, 1, &v, NULL),
                     STORE_STORED);
    ck_assert_int_eq(put(s, STORE_OP_APPEND, kapp, "b", 0, 0, 0, NULL), STORE_STORED);
    ck_assert_int_eq(store_touch(s, ktouch, strlen(ktouch), h(ktouch), store_exptime(s, 500)),
                     STORE_TOUCHED);
    it = store_get_touch(s, kgat, strlen(kgat), h(kgat), store_exptime(s, 500));
    ck_assert_ptr_nonnull(it);
    store_release(s, it);
    ck_assert_int_eq(put(s, STORE_OP_REPLACE, kre, "r2", 0, 0, 0, NULL), STORE_STORED);
    expect(s, kquiet, "q"); /* a plain get is not a change */
    ck_assert_int_eq(set(s, kout, "o2"), STORE_STORED);
    ck_assert_int_eq(store_delete(s, kout, strlen(kout), h(kout)), STORE_DELETED);
    store_clock_shift(s, 200); /* kexp expires; the get reclaims it */
    expect(s, kexp, NULL);
    ck_assert_uint_eq(store_track_pending(s), 8);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.track_pending, 8);

    /* a change after recording and before the drain: the drain reads now */
    ck_assert_int_eq(set(s, kdel, "back"), STORE_STORED);
    ck_assert_uint_eq(store_track_pending(s), 8);

    ck_assert_uint_eq(store_track_drain(s, drain_fn, d, 3), 3);
    ck_assert_uint_eq(store_track_pending(s), 5);
    ck_assert_uint_eq(store_track_drain(s, drain_fn, d, SIZE_MAX), 5);
    ck_assert_uint_eq(store_track_pending(s), 0);
    ck_assert_uint_eq(store_track_drain(s, drain_fn, d, SIZE_MAX), 0);
    ck_assert_int_eq(d->n, 8);
    expect_drained(d, kset, "v4");
    expect_drained(d, kdel, "back");
    expect_drained(d, kincr, "42");
    expect_drained(d, kapp, "ab");
    expect_drained(d, ktouch, "t");
    expect_drained(d, kgat, "g");
    expect_drained(d, kre, "r2");
    expect_drained(d, kexp, NULL);

    /* recorded again after a drain; tombstone for a delete */
    memset(d, 0, sizeof(*d));
    ck_assert_int_eq(store_delete(s, kset, strlen(kset), h(kset)), STORE_DELETED);
    ck_assert_uint_eq(store_track_drain(s, drain_fn, d, SIZE_MAX), 1);
    expect_drained(d, kset, NULL);

    /* flush_all during tracking: every flushed key in range is recorded */
    memset(d, 0, sizeof(*d));
    store_flush(s, 0);
    ck_assert_uint_eq(store_track_drain(s, drain_fn, d, SIZE_MAX), 7);
    expect_drained(d, kquiet, NULL);
    expect_drained(d, kdel, NULL);
    ck_assert_ptr_null(drained_state(d, kout, &(bool){ false }, &(unsigned){ 0 }));

    /* stop drops the set; nothing is recorded after it */
    ck_assert_int_eq(set(s, kset, "x"), STORE_STORED);
    ck_assert_uint_eq(store_track_pending(s), 1);
    store_track_stop(s);
    ck_assert_uint_eq(store_track_pending(s), 0);
    ck_assert_int_eq(set(s, kset, "y"), STORE_STORED);
    ck_assert_uint_eq(store_track_pending(s), 0);
    ck_assert_uint_eq(store_track_drain(s, drain_fn, d, SIZE_MAX), 0);
    ck_assert(!store_track_lost(s));
    /* a new session can start */
    ck_assert_int_eq(store_track_start(s, in_arc, &quarter), 0);
    ck_assert_int_eq(set(s, kset, "z"), STORE_STORED);
    ck_assert_uint_eq(store_track_pending(s), 1);
    /* store_free with a live session: LeakSanitizer checks the set */
    free(d);
    store_free(s);
}
END_TEST

/* Evictions of keys in range are recorded and drain as tombstones; an
 * expiry the store finds by itself too (the sweep's on the chained
 * table, eviction's on the compact engine). */
static void
count_fn(const char *key, size_t nkey, uint64_t hash, struct store_item *it, void *arg)
{
    unsigned *n = arg;

    (void)key;
    (void)nkey;
    (void)hash;
    n[it != NULL ? 0 : 1]++;
}

START_TEST(test_track_evict_expire)
{
    struct store      *s = mkstore(200 * 1024, false);
    struct store_stats st;
    char               key[32], val[200];
    unsigned           n[2] = { 0, 0 };
    int                i, matching = 0;

    memset(val, 'v', sizeof(val) - 1);
    val[sizeof(val) - 1] = '\0';
    ck_assert_int_eq(store_track_start(s, in_arc, &quarter), 0);
    for (i = 0; i < 3000; i++) {
        snprintf(key, sizeof(key), "ev%d", i);
        ck_assert_int_eq(set(s, key, val), STORE_STORED);
        matching += in_arc(h(key), &quarter);
    }
    store_get_stats(s, &st);
    ck_assert_uint_gt(st.evictions, 1000);
    ck_assert_uint_eq(store_track_pending(s), (size_t)matching);
    ck_assert_uint_eq(store_track_drain(s, count_fn, n, SIZE_MAX), (size_t)matching);
    /* the evicted ones drain as tombstones, the rest as post-images */
    {
        uint64_t live_in, bytes;

        store_count(s, in_arc, &quarter, NULL, &live_in, &bytes);
        ck_assert_uint_eq(n[0], live_in);
        ck_assert_uint_eq(n[1], (unsigned)matching - live_in);
        ck_assert_uint_gt(n[1], 0);
    }
    /* expiry found by the sweep */
    n[0] = n[1] = 0;
    store_track_stop(s);
    store_flush(s, 0);
    store_sweep(s, 1 << 20);
    ck_assert_int_eq(put(s, STORE_OP_SET, "exp1", "x", 0, 10, 0, NULL), STORE_STORED);
    key_in(key, sizeof(key), "exp", true);
    ck_assert_int_eq(put(s, STORE_OP_SET, key, "x", 0, 10, 0, NULL), STORE_STORED);
    ck_assert_int_eq(store_track_start(s, in_arc, &quarter), 0);
    store_clock_shift(s, 11);
    if (store_test_compact()) {
        /* no sweep: a flood of keys outside the range, twice what the
         * segments hold, makes eviction meet it */
        for (i = 0; i < 2 * (int)store_capacity(s, 6, 199); i++) {
            snprintf(key, sizeof(key), "out%d", i);
            if (!in_arc(h(key), &quarter)) {
                ck_assert_int_eq(set(s, key, val), STORE_STORED);
            }
        }
        store_get_stats(s, &st);
        ck_assert_uint_gt(st.reclaimed, 0);
    } else {
        ck_assert_uint_gt(store_sweep(s, 1 << 20), 0);
    }
    ck_assert_uint_eq(store_track_drain(s, count_fn, n, SIZE_MAX), 1);
    ck_assert_uint_eq(n[1], 1);
    store_track_stop(s);
    store_free(s);
}
END_TEST

/* Drains concurrent with writers, then a final drain: the last state
 * drained for every key equals the store's. */
struct mirror {
    int n;
    char (*val)[48]; /* "" = absent */
};

static void
mirror_fn(const char *key, size_t nkey, uint64_t hash, struct store_item *it, void *arg)
{
    struct mirror *m = arg;
    int            i = key_index(key, nkey, "w");

    (void)hash;
    ck_assert_int_ge(i, 0);
    ck_assert_int_lt(i, m->n);
    ck_assert(in_arc(hash, &quarter));
    if (it == NULL) {
        m->val[i][0] = '\0';
    } else {
        ck_assert_uint_lt(it->nbytes, 48);
        memcpy(m->val[i], store_item_value(it), it->nbytes);
        m->val[i][it->nbytes] = '\0';
    }
}

START_TEST(test_track_drain_concurrent)
{
    enum {
        N = 2000,
        W = 2
    };
    struct store *s = mkstore(256 * MIB, false);
    struct mirror m = { N, calloc(N, 48) };
    struct churn  c[W];
    pthread_t     th[W];
    char          key[32];
    size_t        drained = 0;
    double        deadline;
    int           i, k, rounds = 0;

    ck_assert_int_eq(store_track_start(s, in_arc, &quarter), 0);
    for (k = 0; k < W; k++) {
        c[k] = (struct churn){ .s = s, .prefix = "w", .nkeys = N, .seed = (unsigned)k + 3 };
        ck_assert_int_eq(pthread_create(&th[k], NULL, churn_main, &c[k]), 0);
    }
    wait_ops(c, W, 100, NULL, NULL, NULL);
    deadline = mono() + 10.0;
    for (rounds = 0; rounds < 2000 || drained < 1000; rounds++) {
        ck_assert_msg(mono() < deadline, "only %zu keys drained in 10 s", drained);
        drained += store_track_drain(s, mirror_fn, &m, 50);
    }
    for (k = 0; k < W; k++) {
        __atomic_store_n(&c[k].stop, 1, __ATOMIC_RELAXED);
        pthread_join(th[k], NULL);
    }
    while (store_track_drain(s, mirror_fn, &m, 100) > 0)
        ;
    ck_assert_uint_eq(store_track_pending(s), 0);
    ck_assert(!store_track_lost(s));
    for (i = 0; i < N; i++) {
        struct store_item *it;

        keyname(key, sizeof(key), "w", i);
        if (!in_arc(h(key), &quarter)) {
            continue;
        }
        it = get(s, key);
        if (it == NULL) {
            ck_assert_msg(m.val[i][0] == '\0', "%s: drained '%s', store has none", key, m.val[i]);
        } else {
            ck_assert_msg(strlen(m.val[i]) == it->nbytes &&
                              memcmp(m.val[i], store_item_value(it), it->nbytes) == 0,
                          "%s: drained '%s' differs", key, m.val[i]);
            store_release(s, it);
        }
    }
    store_track_stop(s);
    free(m.val);
    store_free(s);
}
END_TEST

/* The copy: source -> destination through walk + drain + import. */
struct copy {
    struct store *src, *dst;
    unsigned      sent;
};

static void
copy_item(struct copy *cp, struct store_item *it)
{
    int64_t ttl = store_item_ttl_remaining(cp->src, it);
    int rc = store_import(cp->dst, store_item_key(it), it->nkey, it->hash, it->flags, ttl, it->cas,
                          store_item_value(it), it->nbytes);

    ck_assert_int_ge(rc, 0);
    cp->sent++;
}

static void
copy_walk_fn(struct store_item *it, void *arg)
{
    copy_item(arg, it);
}

static void
copy_dirty_fn(const char *key, size_t nkey, uint64_t hash, struct store_item *it, void *arg)
{
    struct copy *cp = arg;

    if (it != NULL) {
        copy_item(cp, it);
    } else {
        store_import_delete(cp->dst, key, nkey, hash);
        cp->sent++;
    }
}

/* Asserts two items are the same post-image. */
static void
same_item(struct store *a, struct store_item *x, struct store *b, struct store_item *y,
          const char *key)
{
    int64_t tx = store_item_ttl_remaining(a, x), ty = store_item_ttl_remaining(b, y);

    ck_assert_msg(x->nbytes == y->nbytes &&
                      memcmp(store_item_value(x), store_item_value(y), x->nbytes) == 0,
                  "%s: values differ", key);
    ck_assert_msg(x->flags == y->flags, "%s: flags %u vs %u", key, x->flags, y->flags);
    ck_assert_msg(x->cas == y->cas, "%s: cas differs", key);
    ck_assert_msg((tx == 0) == (ty == 0) && (tx - ty <= 1 && ty - tx <= 1), "%s: ttl %lld vs %lld",
                  key, (long long)tx, (long long)ty);
}

struct dst_check {
    struct store *src, *dst;
    unsigned      n;
};

static void
dst_check_fn(struct store_item *y, void *arg)
{
    struct dst_check  *dc = arg;
    char               key[STORE_KEY_MAX + 1];
    struct store_item *x;

    memcpy(key, store_item_key(y), y->nkey);
    key[y->nkey] = '\0';
    ck_assert_msg(in_arc(y->hash, &quarter), "%s imported from outside the range", key);
    x = store_get(dc->src, key, y->nkey, y->hash);
    ck_assert_msg(x != NULL, "%s: on the destination, not on the source", key);
    same_item(dc->src, x, dc->dst, y, key);
    store_release(dc->src, x);
    dc->n++;
}

START_TEST(test_handoff_converge)
{
    enum {
        N = 20000,
        W = 2
    };
    struct store_config dcfg = { .mem_limit = 512 * MIB, .item_size_max = MIB };
    struct store       *src = mkstore(512 * MIB, false), *dst = store_new(&dcfg);
    struct copy         cp = { src, dst, 0 };
    struct dst_check    dc = { src, dst, 0 };
    struct churn        c[W];
    pthread_t           th[W];
    struct store_cursor cur;
    struct store_stats  st;
    uint64_t            src_items, src_bytes;
    char                key[32];
    int                 i, k, more, matching = 0;

    ck_assert_ptr_nonnull(dst);
    for (i = 0; i < N; i++) {
        char val[32];

        keyname(key, sizeof(key), "w", i);
        snprintf(val, sizeof(val), "%d", i);
        ck_assert_int_eq(
            put(src, STORE_OP_SET, key, val, (uint32_t)i, i % 3 ? 0 : 300 + i % 500, 0, NULL),
            STORE_STORED);
    }
    /* PREPARE: tracking before the walk */
    ck_assert_int_eq(store_track_start(src, in_arc, &quarter), 0);
    for (k = 0; k < W; k++) {
        c[k] = (struct churn){ .s = src, .prefix = "w", .nkeys = N, .seed = (unsigned)k + 11 };
        ck_assert_int_eq(pthread_create(&th[k], NULL, churn_main, &c[k]), 0);
    }
    /* COPY: walk in batches, draining between them as the node does */
    store_cursor_init(&cur);
    do {
        more = store_walk(src, &cur, in_arc, &quarter, copy_walk_fn, &cp, 64);
        ck_assert_int_ge(more, 0);
        store_track_drain(src, copy_dirty_fn, &cp, 32);
    } while (more == 1);
    wait_ops(c, W, 5000, src, copy_dirty_fn, &cp);
    /* FENCE: writes stop, the dirty set drains to empty */
    for (k = 0; k < W; k++) {
        __atomic_store_n(&c[k].stop, 1, __ATOMIC_RELAXED);
        pthread_join(th[k], NULL);
        ck_assert_int_ge(c[k].ops, 5000);
    }
    while (store_track_drain(src, copy_dirty_fn, &cp, 256) > 0)
        ;
    ck_assert_uint_eq(store_track_pending(src), 0);
    ck_assert(!store_track_lost(src));
    store_track_stop(src);

    /* the destination's range equals the source's: every source item in
     * range is on the destination, the same, and nothing else is there */
    for (i = 0; i < N; i++) {
        struct store_item *x, *y;

        keyname(key, sizeof(key), "w", i);
        x = get(src, key);
        y = get(dst, key);
        if (!in_arc(h(key), &quarter) || x == NULL) {
            ck_assert_msg(y == NULL, "%s: on the destination only", key);
        } else {
            ck_assert_msg(y != NULL, "%s: missing on the destination", key);
            same_item(src, x, dst, y, key);
            matching++;
        }
        if (x != NULL) {
            store_release(src, x);
        }
        if (y != NULL) {
            store_release(dst, y);
        }
    }
    store_cursor_init(&cur);
    while (store_walk(dst, &cur, NULL, NULL, dst_check_fn, &dc, 256) == 1)
        ;
    ck_assert_uint_eq(dc.n, (unsigned)matching);
    store_count(src, in_arc, &quarter, NULL, &src_items, &src_bytes);
    ck_assert_uint_eq(src_items, (uint64_t)matching);
    store_get_stats(dst, &st);
    ck_assert_uint_eq(st.curr_items, (uint64_t)matching);
    ck_assert_uint_eq(st.import_evictions, 0);
    ck_assert_uint_gt(st.imported, (uint64_t)matching / 2);
    ck_assert_uint_ge(cp.sent, (unsigned)matching);
    store_free(src);
    store_free(dst);
}
END_TEST

/* Imported CAS values are kept; the counter is raised above them, so a
 * later local CAS is larger and never equal, even one far ahead of the
 * local clock (a peer with a clock ahead, or one that minted many). */
START_TEST(test_import_cas)
{
    struct store  *s = mkstore(64 * MIB, false);
    const uint64_t wall = store_cas_clock((int64_t)time(NULL) * 1000);
    const uint64_t imported[] = {
        wall - (UINT64_C(1000) << 22),
        wall + (UINT64_C(600000) << 22) + 5, /* ten minutes ahead */
        wall - (UINT64_C(1) << 22),
    };
    uint64_t           cas = 0, prev = 0;
    struct store_item *it;
    char               key[16];
    size_t             i;
    int                k;

    for (i = 0; i < sizeof(imported) / sizeof(imported[0]); i++) {
        snprintf(key, sizeof(key), "imp%zu", i);
        ck_assert_int_eq(store_import(s, key, strlen(key), h(key), 7, 0, imported[i], "val", 3),
                         STORE_STORED);
        it = get(s, key);
        ck_assert_ptr_nonnull(it);
        ck_assert_uint_eq(it->cas, imported[i]);
        ck_assert_uint_eq(it->flags, 7);
        store_release(s, it);
    }
    for (k = 0; k < 100; k++) {
        snprintf(key, sizeof(key), "loc%d", k);
        ck_assert_int_eq(put(s, STORE_OP_SET, key, "v", 0, 0, 0, &cas), STORE_STORED);
        ck_assert_uint_gt(cas, imported[1]);
        ck_assert_uint_gt(cas, prev);
        prev = cas;
    }
    /* a cas token from the source works on the destination */
    ck_assert_int_eq(put(s, STORE_OP_CAS, "imp0", "new", 0, 0, imported[0], &cas), STORE_STORED);
    ck_assert_uint_gt(cas, prev);
    /* a lower imported cas does not lower the counter */
    ck_assert_int_eq(store_import(s, "low", 3, h("low"), 0, 0, 5, "v", 1), STORE_STORED);
    ck_assert_int_eq(put(s, STORE_OP_SET, "after", "v", 0, 0, 0, &prev), STORE_STORED);
    ck_assert_uint_gt(prev, cas);
    /* cas 0 gets a local one; an import replaces a local item */
    ck_assert_int_eq(store_import(s, "after", 5, h("after"), 0, 0, 0, "w", 1), STORE_STORED);
    it = get(s, "after");
    ck_assert_ptr_nonnull(it);
    ck_assert_uint_gt(it->cas, prev);
    ck_assert_uint_eq(it->nbytes, 1);
    ck_assert_int_eq(store_item_value(it)[0], 'w');
    store_release(s, it);
    store_free(s);
}
END_TEST

/* Remaining TTL out, absolute expiry in; expired post-images are
 * tombstones; the chunked path. */
START_TEST(test_import_ttl)
{
    struct store      *s = mkstore(64 * MIB, false);
    struct store_item *it;
    struct store_stats st;
    int                err = 0;

    ck_assert_int_eq(store_import(s, "t100", 4, h("t100"), 0, 100, 77, "x", 1), STORE_STORED);
    ck_assert_int_eq(store_import(s, "never", 5, h("never"), 0, 0, 78, "x", 1), STORE_STORED);
    ck_assert_int_eq(store_import(s, "huge", 4, h("huge"), 0, INT64_MAX, 79, "x", 1), STORE_STORED);
    it = get(s, "t100");
    ck_assert_ptr_nonnull(it);
    ck_assert_int_eq((int64_t)it->exptime, store_now(s) + 100);
    ck_assert_int_le(store_item_ttl_remaining(s, it), 100);
    ck_assert_int_ge(store_item_ttl_remaining(s, it), 99);
    store_clock_shift(s, 100);
    ck_assert_int_eq(store_item_ttl_remaining(s, it), -1); /* a held item expires */
    store_release(s, it);
    expect(s, "t100", NULL);
    it = get(s, "never");
    ck_assert_ptr_nonnull(it);
    ck_assert_int_eq(store_item_ttl_remaining(s, it), 0);
    store_release(s, it);
    it = get(s, "huge");
    ck_assert_ptr_nonnull(it);
    ck_assert_int_gt(store_item_ttl_remaining(s, it), 100 * 365 * 86400LL / 2 / 100);
    store_release(s, it);

    /* an already expired post-image deletes what is there */
    ck_assert_int_eq(store_import(s, "never", 5, h("never"), 0, -1, 80, "y", 1), STORE_DELETED);
    expect(s, "never", NULL);
    ck_assert_int_eq(store_import(s, "never", 5, h("never"), 0, -1, 80, "y", 1), STORE_NOT_FOUND);
    ck_assert_int_eq(store_import_delete(s, "huge", 4, h("huge")), STORE_DELETED);
    ck_assert_int_eq(store_import_delete(s, "huge", 4, h("huge")), STORE_NOT_FOUND);

    /* chunked: alloc, fill in two parts, put */
    it = store_import_alloc(s, "big", 3, h("big"), 5, 60, 200000, &err);
    ck_assert_ptr_nonnull(it);
    memset(store_item_value_mut(it), 'a', 100000);
    memset(store_item_value_mut(it) + 100000, 'b', 100000);
    ck_assert_int_eq(store_put_import(s, it, 99), STORE_STORED);
    ck_assert_int_eq(store_put_import(s, it, 99), STORE_NOT_STORED);
    store_release(s, it);
    it = get(s, "big");
    ck_assert_ptr_nonnull(it);
    ck_assert_uint_eq(it->nbytes, 200000);
    ck_assert_uint_eq(it->cas, 99);
    ck_assert_uint_eq(it->flags, 5);
    ck_assert_int_eq(store_item_value(it)[199999], 'b');
    store_release(s, it);
    it = store_import_alloc(s, "big", 3, h("big"), 5, -1, 10, &err);
    ck_assert_ptr_nonnull(it);
    memset(store_item_value_mut(it), 'c', 10);
    ck_assert_int_eq(store_put_import(s, it, 100), STORE_DELETED);
    store_release(s, it);
    expect(s, "big", NULL);
    ck_assert_ptr_null(store_import_alloc(s, "big", 3, h("big"), 0, 0, 2 * MIB, &err));
    ck_assert_int_eq(err, STORE_TOO_LARGE);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.imported, 4);
    store_free(s);
}
END_TEST

/* Imports that push live items out are counted; plain sets are not. */
START_TEST(test_import_evictions)
{
    struct store      *s = mkstore(100 * 1024, false);
    struct store_stats st0, st1;
    char               key[32], val[200];
    int                i;

    memset(val, 'v', sizeof(val) - 1);
    val[sizeof(val) - 1] = '\0';
    for (i = 0; i < 2000; i++) {
        snprintf(key, sizeof(key), "loc%d", i);
        ck_assert_int_eq(set(s, key, val), STORE_STORED);
    }
    store_get_stats(s, &st0);
    ck_assert_uint_gt(st0.evictions, 0);
    ck_assert_uint_eq(st0.import_evictions, 0);
    for (i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "imp%d", i);
        ck_assert_int_eq(
            store_import(s, key, strlen(key), h(key), 0, 0, 1000 + (uint64_t)i, val, strlen(val)),
            STORE_STORED);
    }
    store_get_stats(s, &st1);
    ck_assert_uint_eq(st1.import_evictions, st1.evictions - st0.evictions);
    ck_assert_uint_ge(st1.import_evictions, 90);
    store_reset_stats(s);
    store_get_stats(s, &st1);
    ck_assert_uint_ge(st1.import_evictions, 90); /* not hidden by stats reset */
    store_free(s);
}
END_TEST

/* Purge removes exactly the items of the range, incrementally. */
START_TEST(test_purge)
{
    enum {
        N = 10000
    };
    struct store       *s = mkstore(256 * MIB, false);
    struct store_cursor cur;
    struct store_stats  st;
    uint64_t            items, bytes;
    char                key[32];
    int                 i, matching = fill_keys(s, "w", 0, N), calls = 0, more;
    unsigned            bound = store_test_compact() ? 9 + stripe_matching_max("w", N) : 10;

    ck_assert_int_eq(put(s, STORE_OP_SET, "w000001", "x", 0, 5, 0, NULL), STORE_STORED);
    store_clock_shift(s, 10); /* dead items of the range go too */
    store_cursor_init(&cur);
    do {
        /* 10 items a call; whole stripes on the compact engine */
        uint64_t before = 0;

        store_get_stats(s, &st);
        before = st.purged;
        more = store_purge(s, in_arc, &quarter, 10, &cur);
        store_get_stats(s, &st);
        ck_assert_uint_le(st.purged - before, bound);
        calls += more;
    } while (more == 1);
    ck_assert_int_gt(calls, matching / (int)bound - 1);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.purged, (uint64_t)matching);
    ck_assert_uint_eq(st.curr_items, (uint64_t)(N - matching));
    store_count(s, in_arc, &quarter, NULL, &items, &bytes);
    ck_assert_uint_eq(items, 0);
    for (i = 0; i < N; i++) {
        keyname(key, sizeof(key), "w", i);
        if (i == 1) {
            continue;
        }
        expect(s, key, in_arc(h(key), &quarter) ? NULL : key);
    }
    /* purge everything, the expired w000001 too (store.h: "every item
     * (live or dead)"; the compact store's purge once walked live records
     * only and left it linked: this failed there before seg_walk_below) */
    store_cursor_init(&cur);
    while (store_purge(s, NULL, NULL, 1000, &cur) == 1)
        ;
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.curr_items, 0);
    store_free(s);
}
END_TEST

/* A prefix map narrows a walk, a count and a purge to its prefixes: the
 * quarter's predicate with a map of the quarter's first half selects that
 * half only (the compact engine skips the rest unread), each key once. */
START_TEST(test_prefix_map)
{
    enum {
        N = 20000
    };
    struct store       *s = mkstore(256 * MIB, false);
    struct arc          half = { quarter.lo, quarter.lo + (quarter.hi - quarter.lo) / 2 };
    struct visits       v = { "w", N, calloc(N, sizeof(unsigned)), 0, 0, 0, &half };
    uint64_t            map[STORE_PREFIX_WORDS] = { 0 }, items, bytes;
    struct store_cursor cur;
    struct store_stats  st;
    char                key[32];
    int                 i, in_half = 0;
    uint32_t            p;

    fill_keys(s, "w", 0, N);
    for (p = (uint32_t)(half.lo >> 48); p < (uint32_t)(half.hi >> 48); p++) {
        map[p / 64] |= (uint64_t)1 << (p % 64);
    }
    store_cursor_init(&cur);
    cur.prefixes = map;
    while (store_walk(s, &cur, in_arc, &quarter, visit_fn, &v, 100) == 1)
        ;
    for (i = 0; i < N; i++) {
        keyname(key, sizeof(key), "w", i);
        in_half += in_arc(h(key), &half);
        ck_assert_uint_eq(v.seen[i], in_arc(h(key), &half) ? 1u : 0u);
    }
    ck_assert_int_gt(in_half, N / 10);
    ck_assert_uint_eq(v.outside, 0);
    ck_assert_uint_eq(v.total, (unsigned)in_half);
    store_count(s, in_arc, &quarter, map, &items, &bytes);
    ck_assert_uint_eq(items, (uint64_t)in_half);
    store_cursor_init(&cur);
    cur.prefixes = map;
    while (store_purge(s, in_arc, &quarter, 1000, &cur) == 1)
        ;
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.purged, (uint64_t)in_half);
    for (i = 0; i < N; i++) {
        keyname(key, sizeof(key), "w", i);
        expect(s, key, in_arc(h(key), &half) ? NULL : key);
    }
    free(v.seen);
    store_free(s);
}
END_TEST

Suite *
store_range_suite(void)
{
    Suite *s = suite_create("store_range");
    TCase *tc = tcase_create("store_range");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_walk_static);
    tcase_add_test(tc, test_walk_resize);
    tcase_add_test(tc, test_walk_concurrent);
    tcase_add_test(tc, test_track_ops);
    tcase_add_test(tc, test_track_evict_expire);
    tcase_add_test(tc, test_track_drain_concurrent);
    tcase_add_test(tc, test_handoff_converge);
    tcase_add_test(tc, test_import_cas);
    tcase_add_test(tc, test_import_ttl);
    tcase_add_test(tc, test_import_evictions);
    tcase_add_test(tc, test_purge);
    tcase_add_test(tc, test_prefix_map);
    suite_add_tcase(s, tc);
    suite_add_tcase(s, store_sweep_tcase());
    return s;
}
