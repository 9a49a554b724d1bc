/*
 * store_sweep tcase (part of store_range_suite): how dead items leave the
 * store. The chained table sweeps them (store_sweep, the sweeper thread);
 * the compact engine has no sweep and reclaims a dead record when eviction
 * empties its segment, or when a read meets it. Time moves with
 * store_clock_shift.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/store.h"
#include "tests/check_store.h"

/* Set n "k" keys of value "v", all but every third with a 10 s TTL, with
 * their hashes in d. */
static void
set_k_keys(struct store *s, struct drops *d, int n)
{
    char key[16];
    int  i;

    d->n = n;
    for (i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        d->hashes[i] = h(key);
        ck_assert_int_eq(put(s, STORE_OP_SET, key, "v", 0, i % 3 == 0 ? 0 : 10, 0, NULL),
                         STORE_STORED);
    }
}

/* store_free returns within a second (no sweeper left waiting). */
static void
free_promptly(struct store *s)
{
    double t0 = mono();

    store_free(s);
    ck_assert(mono() - t0 < 1.0);
}

/* stats reset zeroes the counters the sweep tests read; then free s. */
static void
reset_and_free(struct store *s)
{
    struct store_stats st;

    store_reset_stats(s);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.reclaimed, 0);
    ck_assert_uint_eq(st.total_items, 0);
    store_free(s);
}

/* The chained table's sweep: expired items reclaimed in slices without
 * anyone touching them. The compact engine has no sweep (store_sweep
 * returns 0): test_sweep_compact. */
START_TEST(test_sweep)
{
    struct store      *s;
    struct store_stats st;
    uint64_t           hashes[300];
    unsigned           seen[300] = { 0 };
    struct drops       d = { .hashes = hashes, .seen = seen };
    char               key[16];
    size_t             got = 0;
    int                i;

    if (store_test_compact()) {
        return;
    }
    s = mkstore(64 * MIB, false);
    set_k_keys(s, &d, 300);
    ck_assert_uint_eq(store_sweep(s, 1u << 20), 0);
    store_clock_shift(s, 10);
    /* small slices cover the table too */
    for (i = 0; i < 200; i++) {
        got += store_sweep(s, 100);
    }
    ck_assert_uint_eq(got, 200);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.curr_items, 100);
    ck_assert_uint_eq(st.reclaimed, 200);
    ck_assert_uint_eq(st.expired_unfetched, 200);
    ck_assert_uint_eq(st.get_expired, 0);
    {
        uint64_t want = 0;

        for (i = 0; i < 300; i += 3) {
            snprintf(key, sizeof(key), "k%d", i);
            want += store_item_size(strlen(key), 1);
        }
        ck_assert_uint_eq(st.bytes, want);
    }
    /* flushed items are reclaimed too */
    store_flush(s, 0);
    ck_assert_uint_eq(store_sweep(s, 1u << 20), 100);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.curr_items, 0);
    ck_assert_uint_eq(st.bytes, 0);
    ck_assert_uint_eq(st.mem_used, 0);
    reset_and_free(s);
}
END_TEST

/* The background sweeper reclaims without anyone touching the keys, and
 * store_free stops it promptly with items still in the table. The
 * chained table's: the compact engine starts no sweeper
 * (test_sweeper_compact). */
START_TEST(test_sweeper_thread)
{
    struct store      *s;
    struct store_stats st;
    char               key[16];
    double             deadline;
    int                i;

    if (store_test_compact()) {
        return;
    }
    s = mkstore(64 * MIB, true);
    for (i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        ck_assert_int_eq(put(s, STORE_OP_SET, key, "v", 0, i < 500 ? 5 : 0, 0, NULL), STORE_STORED);
    }
    store_clock_shift(s, 5);
    deadline = mono() + 20;
    do {
        store_get_stats(s, &st);
        if (st.curr_items == 500) {
            break;
        }
        nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
    } while (mono() < deadline);
    ck_assert_uint_eq(st.curr_items, 500);
    ck_assert_uint_eq(st.reclaimed, 500);
    free_promptly(s);
}
END_TEST

/* The compact engine's counterpart of the sweep: store_sweep does
 * nothing, an expired record stays linked (curr_items) until eviction
 * pressure empties its segment, and is then reclaimed, counted in
 * reclaimed (and expired_unfetched: never read) and told to the drop
 * hook; flushed records are reclaimed the same way and not told. */
START_TEST(test_sweep_compact)
{
    struct store      *s = mkstore_on(MIB, false, true);
    uint64_t           hashes[300];
    unsigned           seen[300] = { 0 };
    struct drops       d = { .hashes = hashes, .seen = seen };
    struct store_stats st;
    uint64_t           items, bytes;
    int                i, cycle;

    store_set_drop_hook(s, drops_fn, &d);
    set_k_keys(s, &d, 300);
    store_get_stats(s, &st);
    cycle = 2 * (int)(st.limit_maxbytes / seg_rec_size(0, 6, 100));
    ck_assert_uint_eq(store_sweep(s, 1u << 20), 0);
    store_clock_shift(s, 10);
    ck_assert_uint_eq(store_sweep(s, 1u << 20), 0);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.curr_items, 300);
    ck_assert_uint_eq(st.reclaimed, 0);
    ck_assert_uint_eq(d.calls, 0);
    flood(s, "f", cycle);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.reclaimed, 200);
    ck_assert_uint_eq(st.expired_unfetched, 200);
    ck_assert_uint_eq(st.get_expired, 0);
    ck_assert_uint_gt(st.evictions, 100);
    ck_assert_uint_eq(d.calls, st.reclaimed + st.evictions);
    for (i = 0; i < 300; i++) {
        ck_assert_uint_eq(d.seen[i], 1); /* expired or evicted, once */
    }
    ck_assert_uint_eq(st.curr_items + st.evictions + st.reclaimed, 300 + (uint64_t)cycle);
    store_count(s, NULL, NULL, NULL, &items, &bytes);
    ck_assert_uint_eq(items, st.curr_items);
    ck_assert_uint_eq(bytes, st.bytes);

    /* flushed records are reclaimed too, silently */
    store_reset_stats(s);
    d.calls = 0;
    store_flush(s, 0);
    flood(s, "g", cycle);
    store_get_stats(s, &st);
    ck_assert_uint_gt(st.reclaimed, 0);
    ck_assert_uint_eq(d.calls, st.evictions);
    reset_and_free(s);
}
END_TEST

/* The compact engine's counterpart of the sweeper thread: asked for one,
 * it starts none; an expired record a read meets is unlinked there (a
 * miss counted in get_expired, told to the drop hook as it is dropped);
 * store_free is prompt with items in the engine. */
START_TEST(test_sweeper_compact)
{
    struct store      *s = mkstore_on(64 * MIB, true, true);
    uint64_t           hashes[300];
    unsigned           seen[300] = { 0 };
    struct drops       d = { .hashes = hashes, .seen = seen };
    struct store_stats st;
    char               key[16];
    int                i;

    store_set_drop_hook(s, drops_fn, &d);
    set_k_keys(s, &d, 300);
    store_clock_shift(s, 10);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.curr_items, 300); /* nobody reclaimed them */
    for (i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        expect(s, key, i % 3 == 0 ? "v" : NULL);
        ck_assert_uint_eq(d.seen[i], i % 3 == 0 ? 0 : 1);
    }
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.curr_items, 100);
    ck_assert_uint_eq(st.get_expired, 200);
    ck_assert_uint_eq(d.calls, 200);
    ck_assert_uint_eq(st.evictions, 0);
    free_promptly(s);
}
END_TEST

/* See tests/check_store.h. */
TCase *
store_sweep_tcase(void)
{
    TCase *tc = tcase_create("store_sweep");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sweep);
    tcase_add_test(tc, test_sweeper_thread);
    tcase_add_test(tc, test_sweep_compact);
    tcase_add_test(tc, test_sweeper_compact);
    return tc;
}
