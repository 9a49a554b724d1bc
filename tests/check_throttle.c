/*
 * server/throttle: the copy's adaptive rate fed with synthetic histograms:
 * the interpolated p99, a baseline from before the copy (or the first
 * window), rises when idle, cuts under latency (from the rate the copy
 * actually sent, over the window's real length), the hold after a cut,
 * the floor, the operator's cap, the workers' run-queue wait, and
 * windows with too few requests that never move the rate on their p99.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "server/throttle.h"
#include "tests/suites.h"

#define MIB (1ull << 20)

/* Count n requests of us microseconds each into the cumulative h. */
static void
add(struct latency_hist *h, uint64_t n, uint64_t us)
{
    latency_record_n(h, us * 1000, n);
}

/* The controller under test, the node's cumulative sample (histogram,
 * workers' waits) and the copy's byte count (each test runs in a process
 * of its own). */
static struct throttle        t;
static struct throttle_sample cum;
static uint64_t               sent;
static uint64_t               now_ms; /* a tick is THROTTLE_TICK_MS on it */

/* One tick of traffic: n requests at fast_us, of which slow at slow_us;
 * the copy sent `bytes` more. */
static enum throttle_verdict
tick(uint64_t n, uint64_t fast_us, uint64_t slow, uint64_t slow_us, uint64_t bytes)
{
    add(&cum.hist, n - slow, fast_us);
    add(&cum.hist, slow, slow_us);
    sent += bytes;
    now_ms += THROTTLE_TICK_MS;
    return throttle_tick(&t, &cum, sent, now_ms);
}

/* The workers ran `slices` more times, waiting wait_us on average. */
static void
runs(uint64_t slices, uint64_t wait_us)
{
    cum.slices += slices;
    cum.wait_ns += slices * wait_us * 1000;
}

/* A copy started after 2 s of 1000 requests a tick at 50 us. */
static void
start_loaded(uint64_t cap)
{
    int i;

    throttle_init(&t, THROTTLE_FLOOR);
    memset(&cum, 0, sizeof(cum));
    sent = 0;
    throttle_observe(&t, &cum);
    for (i = 0; i < THROTTLE_HISTORY; i++) {
        add(&cum.hist, 1000, 50);
        throttle_observe(&t, &cum);
    }
    throttle_start(&t, &cum, 0, cap, now_ms);
}

START_TEST(test_p99)
{
    struct latency_hist h;
    uint64_t            p;

    memset(&h, 0, sizeof(h));
    ck_assert_uint_eq(throttle_p99_ns(&h), 0);
    /* All in (4, 8] us: rank 99 of 100 is 0.99 of the way, log scale. */
    add(&h, 100, 8);
    p = throttle_p99_ns(&h);
    ck_assert_msg(p > 7900 && p <= 8000, "p99 %llu ns", (unsigned long long)p);
    /* 990 at 1 us, 10 at 1 ms: the 990th is the last of bucket 0. */
    memset(&h, 0, sizeof(h));
    add(&h, 990, 1);
    add(&h, 10, 1000);
    ck_assert_uint_eq(throttle_p99_ns(&h), 1000);
    /* One more slow one: rank 990 is the first of (512, 1024] us. */
    memset(&h, 0, sizeof(h));
    add(&h, 989, 1);
    add(&h, 11, 1000);
    p = throttle_p99_ns(&h);
    ck_assert_msg(p > 512000 && p < 560000, "p99 %llu ns", (unsigned long long)p);
    /* Beyond the last bound: its bound. */
    memset(&h, 0, sizeof(h));
    add(&h, 5, 5000000);
    ck_assert_uint_eq(throttle_p99_ns(&h), latency_bound_us(LATENCY_BUCKETS - 1) * 1000);
}
END_TEST

START_TEST(test_baseline)
{
    /* From the ring before the copy. */
    start_loaded(0);
    ck_assert_msg(t.base_ns > 40000 && t.base_ns <= 64000, "baseline %llu",
                  (unsigned long long)t.base_ns);
    ck_assert_uint_eq(throttle_rate(&t), 0); /* full speed: unlimited */
    /* Idle before the copy: the first judged window is the baseline. */
    throttle_init(&t, THROTTLE_FLOOR);
    memset(&cum, 0, sizeof(cum));
    throttle_observe(&t, &cum);
    throttle_start(&t, &cum, 0, 0, now_ms);
    ck_assert_uint_eq(t.base_ns, 0);
    ck_assert_int_eq(tick(300, 100, 0, 0, MIB), THROTTLE_BASELINE);
    ck_assert_msg(t.base_ns > 64000 && t.base_ns <= 128000, "baseline %llu",
                  (unsigned long long)t.base_ns);
    ck_assert_uint_eq(t.cuts, 0);
}
END_TEST

START_TEST(test_cut_hold_floor)
{
    uint64_t prev;
    int      i;

    start_loaded(0);
    /* Within bounds: stays at full speed. */
    ck_assert_int_eq(tick(300, 50, 0, 0, 10 * MIB), THROTTLE_RISE);
    ck_assert_uint_eq(throttle_rate(&t), 0);
    /* 2% at 2 ms: p99 way over. The copy sent 10 MiB in the 100 ms
     * window (100 MiB/s): the cut is 70% of that, not of "unlimited". */
    ck_assert_int_eq(tick(300, 50, 6, 2000, 10 * MIB), THROTTLE_CUT);
    ck_assert_uint_eq(t.cuts, 1);
    ck_assert_msg(throttle_rate(&t) > 69 * MIB && throttle_rate(&t) < 71 * MIB, "rate %llu",
                  (unsigned long long)throttle_rate(&t));
    /* The next two over windows wait for the cut to show. */
    prev = throttle_rate(&t);
    ck_assert_int_eq(tick(300, 50, 6, 2000, 7 * MIB), THROTTLE_HELD);
    ck_assert_int_eq(tick(300, 50, 6, 2000, 7 * MIB), THROTTLE_HELD);
    ck_assert_uint_eq(throttle_rate(&t), prev);
    ck_assert_int_eq(tick(300, 50, 6, 2000, 7 * MIB), THROTTLE_CUT);
    ck_assert_uint_lt(throttle_rate(&t), prev);
    /* Over and over: down to the floor, never below. */
    for (i = 0; i < 40; i++) {
        enum throttle_verdict v = tick(300, 50, 6, 2000, 7 * MIB);

        ck_assert_uint_ge(throttle_rate(&t), THROTTLE_FLOOR);
        ck_assert(v == THROTTLE_CUT || v == THROTTLE_HELD || v == THROTTLE_FLOOR_HIT);
    }
    ck_assert_uint_eq(throttle_rate(&t), THROTTLE_FLOOR);
    ck_assert_int_eq(tick(300, 50, 6, 2000, MIB), THROTTLE_FLOOR_HIT);
    ck_assert_uint_eq((uint64_t)t.rate_min, THROTTLE_FLOOR);
    /* Over, but the copy sent nothing in the window: not its doing. */
    prev = t.cuts;
    ck_assert_int_eq(tick(300, 50, 6, 2000, 0), THROTTLE_UNSENT);
    ck_assert_uint_eq(t.cuts, prev);
    /* Latency back to normal: the rate rises again. */
    ck_assert_int_eq(tick(300, 50, 0, 0, MIB), THROTTLE_RISE);
    ck_assert_uint_gt(throttle_rate(&t), THROTTLE_FLOOR);
}
END_TEST

/* A late timer: the window is 300 ms long, not one tick; 30 MiB in it
 * is 100 MiB/s, so the cut is to 70 MiB/s. */
START_TEST(test_late_tick)
{
    start_loaded(0);
    now_ms += 2 * THROTTLE_TICK_MS;
    ck_assert_int_eq(tick(300, 50, 6, 2000, 30 * MIB), THROTTLE_CUT);
    ck_assert_msg(throttle_rate(&t) > 69 * MIB && throttle_rate(&t) < 71 * MIB, "rate %llu",
                  (unsigned long long)throttle_rate(&t));
}
END_TEST

/* The workers' mean wait for a CPU: its baseline from before the copy,
 * a cut when it is over bounds while the p99 is not, nothing from a
 * window with too few runs, and nothing at all without the figures. */
START_TEST(test_wait)
{
    int i;

    throttle_init(&t, THROTTLE_FLOOR);
    throttle_observe(&t, &cum);
    for (i = 0; i < THROTTLE_HISTORY; i++) {
        add(&cum.hist, 1000, 50);
        runs(500, 20);
        throttle_observe(&t, &cum);
    }
    throttle_start(&t, &cum, 0, 64 * MIB, now_ms);
    ck_assert(t.wait_based);
    ck_assert_uint_eq(t.wait_base_ns, 20000);
    runs(100, 25);
    ck_assert_int_eq(tick(300, 50, 0, 0, MIB), THROTTLE_RISE);
    /* 40 more runs only: too few to judge their wait of 1 ms. */
    runs(40, 1000);
    ck_assert_int_eq(tick(300, 50, 0, 0, MIB), THROTTLE_RISE);
    ck_assert_uint_eq(t.cuts, 0);
    /* Enough of them, at 45 us: over 1.3x and 20 us above: a cut for the
     * wait alone. */
    runs(100, 45);
    ck_assert_int_eq(tick(300, 50, 0, 0, MIB), THROTTLE_CUT);
    ck_assert_uint_eq(t.cuts, 1);
    ck_assert_uint_eq(t.cuts_wait, 1);
    ck_assert_uint_eq(t.wait_ns, 45000);
    /* Without figures (no schedstat), only the p99 counts. */
    memset(&cum, 0, sizeof(cum));
    throttle_init(&t, THROTTLE_FLOOR);
    throttle_observe(&t, &cum);
    for (i = 0; i < THROTTLE_HISTORY; i++) {
        add(&cum.hist, 1000, 50);
        throttle_observe(&t, &cum);
    }
    throttle_start(&t, &cum, 0, 64 * MIB, now_ms);
    ck_assert(!t.wait_based);
    for (i = 0; i < 5; i++) {
        ck_assert_int_eq(tick(300, 50, 0, 0, MIB), THROTTLE_RISE);
    }
    ck_assert_uint_eq(t.cuts, 0);
}
END_TEST

START_TEST(test_rises_when_idle)
{
    uint64_t prev;
    int      i, rounds = 0;

    start_loaded(0);
    for (i = 0; i < 8; i++) {
        tick(300, 50, 6, 2000, 2 * MIB);
    }
    prev = throttle_rate(&t);
    ck_assert_uint_lt(prev, 30 * MIB);
    /* No requests at all: a window waits THROTTLE_MAX_TICKS ticks, then
     * is quiet and the rate doubles, up to full speed. */
    while (throttle_rate(&t) != 0 && rounds < 20) {
        for (i = 1; i < THROTTLE_MAX_TICKS; i++) {
            ck_assert_int_eq(tick(0, 0, 0, 0, MIB), THROTTLE_WAIT);
            ck_assert_uint_eq(throttle_rate(&t), prev);
        }
        ck_assert_int_eq(tick(0, 0, 0, 0, MIB), THROTTLE_QUIET);
        ck_assert(throttle_rate(&t) == 0 || throttle_rate(&t) == 2 * prev);
        prev = throttle_rate(&t);
        rounds++;
    }
    ck_assert_uint_eq(throttle_rate(&t), 0);
    ck_assert_int_lt(rounds, 20);
}
END_TEST

START_TEST(test_few_samples_ignored)
{
    int i;

    start_loaded(64 * MIB);
    ck_assert_uint_eq(throttle_rate(&t), 64 * MIB);
    /* 15 requests a tick, every one slow: 150 in a whole window, too few
     * to judge: never a cut. */
    for (i = 1; i < THROTTLE_MAX_TICKS; i++) {
        ck_assert_int_eq(tick(15, 50, 15, 5000, MIB), THROTTLE_WAIT);
    }
    ck_assert_int_eq(tick(15, 50, 15, 5000, MIB), THROTTLE_QUIET);
    ck_assert_uint_eq(t.cuts, 0);
    ck_assert_uint_eq(throttle_rate(&t), 64 * MIB);
    /* 60 a tick: pooled until the window has 200, then judged. */
    ck_assert_int_eq(tick(60, 50, 3, 5000, MIB), THROTTLE_WAIT);
    ck_assert_int_eq(tick(60, 50, 3, 5000, MIB), THROTTLE_WAIT);
    ck_assert_int_eq(tick(60, 50, 3, 5000, MIB), THROTTLE_WAIT);
    ck_assert_int_eq(tick(60, 50, 3, 5000, MIB), THROTTLE_CUT);
    /* 4 MiB over 400 ms = 10 MiB/s sent: 7 MiB/s, under the floor. */
    ck_assert_uint_eq(throttle_rate(&t), THROTTLE_FLOOR);
}
END_TEST

START_TEST(test_cap)
{
    int i;

    start_loaded(20 * MIB);
    ck_assert_uint_eq(throttle_rate(&t), 20 * MIB);
    for (i = 0; i < 30; i++) {
        tick(300, 50, 0, 0, 2 * MIB);
        ck_assert_uint_eq(throttle_rate(&t), 20 * MIB);
    }
    tick(300, 50, 6, 2000, 2 * MIB);
    ck_assert_uint_lt(throttle_rate(&t), 20 * MIB);
    /* A cap under the floor wins over it, cuts included. */
    throttle_set_cap(&t, 2 * MIB);
    ck_assert_uint_eq(throttle_rate(&t), 2 * MIB);
    for (i = 0; i < 10; i++) {
        tick(300, 50, 6, 2000, MIB / 10);
        ck_assert_uint_eq(throttle_rate(&t), 2 * MIB);
    }
    /* A higher cap: the rate starts over from it; none: unlimited. */
    throttle_set_cap(&t, 100 * MIB);
    ck_assert_uint_eq(throttle_rate(&t), 100 * MIB);
    throttle_set_cap(&t, 0);
    ck_assert_uint_eq(throttle_rate(&t), 0);
    /* A stopped controller decides nothing. */
    throttle_stop(&t);
    ck_assert_int_eq(tick(300, 50, 6, 2000, MIB), THROTTLE_WAIT);
}
END_TEST

START_TEST(test_publish)
{
    struct throttle_pub pub, out;

    memset(&pub, 0, sizeof(pub));
    throttle_init(&t, THROTTLE_FLOOR);
    t.cap = 30 * MIB;
    t.rate = 12 * MIB;
    t.rate_min = 9 * MIB;
    t.cuts = 3;
    t.p99_ns = 123456;
    t.base_ns = 45678;
    throttle_publish(&t, true, &pub);
    throttle_pub_read(&pub, &out);
    ck_assert_uint_eq(out.on, 1);
    ck_assert_uint_eq(out.rate, 12 * MIB);
    ck_assert_uint_eq(out.rate_min, 9 * MIB);
    ck_assert_uint_eq(out.cuts, 3);
    ck_assert_uint_eq(out.p99_us, 123);
    ck_assert_uint_eq(out.base_us, 45);
}
END_TEST

Suite *
throttle_suite(void)
{
    Suite *s = suite_create("throttle");
    TCase *tc = tcase_create("controller");

    tcase_add_test(tc, test_p99);
    tcase_add_test(tc, test_baseline);
    tcase_add_test(tc, test_cut_hold_floor);
    tcase_add_test(tc, test_late_tick);
    tcase_add_test(tc, test_wait);
    tcase_add_test(tc, test_rises_when_idle);
    tcase_add_test(tc, test_few_samples_ignored);
    tcase_add_test(tc, test_cap);
    tcase_add_test(tc, test_publish);
    suite_add_tcase(s, tc);
    return s;
}
