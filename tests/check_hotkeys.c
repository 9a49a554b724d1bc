/*
 * server/hotkeys: the space-saving sketch against exact counts. A Zipf
 * stream over many more keys than counters: the heavy keys are found, each
 * count overestimates by no more than its bound, and the bound holds after
 * counters are replaced; sampling scales counts; merging several sketches
 * keeps the bounds; decay halves.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/hotkeys.h"
#include "tests/suites.h"

#define NKEYS   5000
#define NEVENTS 200000

static void
key_of(unsigned k, char *buf, size_t *n)
{
    *n = (size_t)snprintf(buf, 32, "key:%u", k);
}

static void
feed(struct hotkeys *h, unsigned k)
{
    char   buf[32];
    size_t n;

    key_of(k, buf, &n);
    hotkeys_note(h, buf, n);
}

/* A Zipf(1.1) sampler over NKEYS keys: its cumulative weights. */
static double *
zipf_cdf(void)
{
    double *cdf = malloc(NKEYS * sizeof(*cdf));
    double  sum = 0;
    int     i;

    for (i = 0; i < NKEYS; i++) {
        sum += 1.0 / pow(i + 1, 1.1);
        cdf[i] = sum;
    }
    for (i = 0; i < NKEYS; i++) {
        cdf[i] /= sum;
    }
    return cdf;
}

static unsigned
zipf_draw(const double *cdf, unsigned *seed)
{
    double   u = (double)rand_r(seed) / ((double)RAND_MAX + 1.0);
    unsigned lo = 0, hi = NKEYS - 1;

    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;

        if (cdf[mid] < u) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static long
find(const struct hotkeys_entry *e, size_t n, unsigned k)
{
    char   buf[32];
    size_t len, i;

    key_of(k, buf, &len);
    for (i = 0; i < n; i++) {
        if (e[i].nkey == len && memcmp(e[i].key, buf, len) == 0) {
            return (long)i;
        }
    }
    return -1;
}

/* Every key in the sketch: true count <= count <= true count + err; every
 * key with more than 1/K of the events is there. */
static void
check_bounds(const struct hotkeys_entry *e, size_t n, const uint64_t *truth, uint64_t events,
             uint64_t every)
{
    size_t   i;
    unsigned k;

    for (i = 0; i < n; i++) {
        unsigned key;

        ck_assert_int_eq(sscanf(e[i].key, "key:%u", &key), 1);
        /* Sampling: the scaled count is exact to within one period. */
        ck_assert_msg(e[i].count + every > truth[key], "key %u: count %llu below truth %llu", key,
                      (unsigned long long)e[i].count, (unsigned long long)truth[key]);
        ck_assert_msg(e[i].count <= truth[key] + e[i].err + every,
                      "key %u: count %llu over truth %llu + err %llu", key,
                      (unsigned long long)e[i].count, (unsigned long long)truth[key],
                      (unsigned long long)e[i].err);
    }
    for (k = 0; k < NKEYS; k++) {
        if (truth[k] > events / HOTKEYS_K + every) {
            ck_assert_msg(find(e, n, k) >= 0, "heavy key %u (%llu of %llu) missing", k,
                          (unsigned long long)truth[k], (unsigned long long)events);
        }
    }
}

START_TEST(test_zipf_exact_sampling)
{
    struct hotkeys       *h = hotkeys_new(1, 0);
    struct hotkeys_entry *e = calloc(HOTKEYS_K, sizeof(*e));
    uint64_t             *truth = calloc(NKEYS, sizeof(*truth)), min;
    double               *cdf = zipf_cdf();
    unsigned              seed = 7, i;
    size_t                n, j;

    for (i = 0; i < NEVENTS; i++) {
        unsigned k = zipf_draw(cdf, &seed);

        truth[k]++;
        feed(h, k);
    }
    n = hotkeys_snapshot(h, e, &min);
    ck_assert_uint_eq(n, HOTKEYS_K);
    ck_assert_uint_gt(min, 0);
    check_bounds(e, n, truth, NEVENTS, 1);
    /* The three heaviest keys come out, in order, after merging one. */
    {
        struct hotkeys_entry *snaps[1] = { e }, *top = calloc(HOTKEYS_K, sizeof(*top));
        size_t                counts[1] = { n };
        uint64_t              mins[1] = { 0 };

        ck_assert_uint_eq(hotkeys_merge(snaps, counts, mins, 1, top, 3), 3);
        for (j = 0; j < 3; j++) {
            ck_assert_int_eq(find(top, 3, (unsigned)j), (long)j);
        }
        free(top);
    }
    free(cdf);
    free(truth);
    free(e);
    hotkeys_free(h);
}
END_TEST

START_TEST(test_sampled_counts_scale)
{
    struct hotkeys       *h = hotkeys_new(10, 0);
    struct hotkeys_entry *e = calloc(HOTKEYS_K, sizeof(*e));
    uint64_t              min;
    unsigned              i;
    size_t                n;

    /* One request in three is for key:0; the 10th, 20th, ... are sampled,
     * which meets every residue mod 3 alike: a third of the samples. */
    for (i = 0; i < 100000; i++) {
        feed(h, i % 3 == 0 ? 0 : 1 + (i / 3) % 3);
    }
    n = hotkeys_snapshot(h, e, &min);
    ck_assert_uint_le(n, 4);
    ck_assert_uint_eq(min, 0); /* not full */
    ck_assert_int_ge(find(e, n, 0), 0);
    {
        const struct hotkeys_entry *k0 = &e[find(e, n, 0)];
        uint64_t                    total = 0;
        size_t                      j;

        for (j = 0; j < n; j++) {
            total += e[j].count;
            ck_assert_uint_eq(e[j].err, 0);
        }
        ck_assert_uint_eq(total, 100000); /* every 10th of 100000, times 10 */
        ck_assert_msg(k0->count >= 33300 && k0->count <= 33370, "key:0 counted %llu",
                      (unsigned long long)k0->count);
    }
    free(e);
    hotkeys_free(h);
}
END_TEST

/* Four sketches fed disjoint halves of streams: the merge bounds hold
 * against the whole stream's truth. */
START_TEST(test_merge_bounds)
{
    struct hotkeys       *h[4];
    struct hotkeys_entry *snaps[4], *top = calloc(HOTKEYS_K, sizeof(*top));
    size_t                counts[4], n;
    uint64_t              mins[4], *truth = calloc(NKEYS, sizeof(*truth));
    double               *cdf = zipf_cdf();
    unsigned              seed = 11, i;
    int                   j;

    for (j = 0; j < 4; j++) {
        h[j] = hotkeys_new(1, 0);
        snaps[j] = calloc(HOTKEYS_K, sizeof(*snaps[j]));
    }
    for (i = 0; i < NEVENTS; i++) {
        unsigned k = zipf_draw(cdf, &seed);

        truth[k]++;
        feed(h[rand_r(&seed) % 4], k);
    }
    for (j = 0; j < 4; j++) {
        counts[j] = hotkeys_snapshot(h[j], snaps[j], &mins[j]);
    }
    n = hotkeys_merge(snaps, counts, mins, 4, top, HOTKEYS_K);
    ck_assert_uint_eq(n, HOTKEYS_K);
    check_bounds(top, n, truth, NEVENTS, 1);
    for (i = 1; i < n; i++) {
        ck_assert_uint_ge(top[i - 1].count, top[i].count);
    }
    for (j = 0; j < 4; j++) {
        free(snaps[j]);
        hotkeys_free(h[j]);
    }
    free(cdf);
    free(truth);
    free(top);
}
END_TEST

/* A stream of only distinct keys churns every counter: memory stays the
 * sketch's, the table keeps finding keys (no lost slot), counts stay
 * bounded. */
START_TEST(test_churn)
{
    struct hotkeys       *h = hotkeys_new(1, 0);
    struct hotkeys_entry *e = calloc(HOTKEYS_K, sizeof(*e));
    uint64_t              min, total = 0;
    unsigned              i;
    size_t                n, j;

    for (i = 0; i < 100000; i++) {
        feed(h, 100000 + i);
        if (i % 7 == 0) {
            feed(h, 1); /* one key that stays */
        }
    }
    n = hotkeys_snapshot(h, e, &min);
    ck_assert_uint_eq(n, HOTKEYS_K);
    for (j = 0; j < n; j++) {
        total += e[j].count;
    }
    /* Space-saving's invariant: the counters sum to the events seen. */
    ck_assert_uint_eq(total, 100000 + (100000 + 6) / 7);
    /* The steady key was never replaced: its count is exact. */
    ck_assert_int_ge(find(e, n, 1), 0);
    ck_assert_uint_eq(e[find(e, n, 1)].count, (100000 + 6) / 7);
    ck_assert_uint_eq(e[find(e, n, 1)].err, 0);
    free(e);
    hotkeys_free(h);
}
END_TEST

START_TEST(test_binary_key_text)
{
    struct hotkeys_entry e = { .count = 1, .nkey = 3 };
    char                 out[HOTKEYS_TEXT_MAX];
    bool                 binary;

    memcpy(e.key, "a b", 3);
    ck_assert_uint_eq(hotkeys_key_text(&e, out, &binary), 4);
    ck_assert(binary);
    ck_assert_str_eq(out, "YSBi");
    memcpy(e.key, "abc", 3);
    ck_assert_uint_eq(hotkeys_key_text(&e, out, &binary), 3);
    ck_assert(!binary);
    ck_assert_str_eq(out, "abc");
}
END_TEST

Suite *
hotkeys_suite(void)
{
    Suite *s = suite_create("hotkeys");
    TCase *tc = tcase_create("sketch");

    tcase_add_test(tc, test_zipf_exact_sampling);
    tcase_add_test(tc, test_sampled_counts_scale);
    tcase_add_test(tc, test_merge_bounds);
    tcase_add_test(tc, test_churn);
    tcase_add_test(tc, test_binary_key_text);
    suite_add_tcase(s, tc);
    return s;
}
