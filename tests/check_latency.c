/*
 * server/latency: the bucket of a duration at and around every bound,
 * recording and merging several workers' histograms (counts, cumulative
 * buckets, sums), the command words that are timed, and a connection's
 * commands timed once each: replies queued at once (counted at the end of
 * their batch, with one duration), one queued in a hold (timed when the
 * hold is filled, or at the end of the batch when that was earlier or the
 * hold is already written), a set whose data block comes later.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/conn.h"
#include "server/latency.h"
#include "server/proto_text.h"
#include "server/settings.h"
#include "server/thread.h"
#include "tests/suites.h"

START_TEST(test_bucket_bounds)
{
    static const struct {
        uint64_t ns;
        unsigned bucket;
    } CASES[] = {
        { 0, 0 },
        { 1, 0 },
        { 1000, 0 },
        { 1001, 1 },
        { 2000, 1 },
        { 2001, 2 },
        { 4000, 2 },
        { 4001, 3 },
        { 999999, 10 }, /* 999.999 us <= 1024 us */
        { 1024000, 10 },
        { 1024001, 11 },
        { 1048576000ull, 20 }, /* the last bound, 1.048576 s */
        { 1048576001ull, LATENCY_BUCKETS },
        { UINT64_MAX, LATENCY_BUCKETS },
    };
    size_t   i;
    unsigned b;

    for (i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
        ck_assert_msg(latency_bucket(CASES[i].ns) == CASES[i].bucket, "%llu ns: bucket %u, not %u",
                      (unsigned long long)CASES[i].ns, latency_bucket(CASES[i].ns),
                      CASES[i].bucket);
    }
    /* Every bound is the last duration of its bucket. */
    for (b = 0; b < LATENCY_BUCKETS; b++) {
        uint64_t ns = latency_bound_us(b) * 1000;

        ck_assert_uint_eq(latency_bucket(ns), b);
        ck_assert_uint_eq(latency_bucket(ns + 1), b + 1);
    }
}
END_TEST

/* Three workers' histograms fed known durations merge into one whose
 * buckets, count and sum are those of all the durations together. */
START_TEST(test_record_merge)
{
    struct latency_hist w[3], sum;
    uint64_t            expect[LATENCY_BUCKETS + 1] = { 0 }, expect_sum = 0, n = 0, cum = 0;
    unsigned            i, k;

    memset(w, 0, sizeof(w));
    memset(&sum, 0, sizeof(sum));
    for (i = 0; i < 3000; i++) {
        /* Spread over every bucket and past the last bound. */
        uint64_t ns = ((uint64_t)i * 7919u * 1000u) % 2000000000u + 1;

        latency_record(&w[i % 3], ns);
        expect[latency_bucket(ns)]++;
        expect_sum += ns;
    }
    for (k = 0; k < 3; k++) {
        latency_accumulate(&sum, &w[k]);
    }
    for (i = 0; i <= LATENCY_BUCKETS; i++) {
        ck_assert_uint_eq(sum.bucket[i], expect[i]);
        n += sum.bucket[i];
    }
    ck_assert_uint_eq(latency_count(&sum), 3000);
    ck_assert_uint_eq(n, 3000);
    ck_assert_uint_eq(sum.sum_ns, expect_sum);
    ck_assert_uint_gt(sum.bucket[0], 0);
    ck_assert_uint_gt(sum.bucket[LATENCY_BUCKETS], 0);
    /* Cumulative counts, as /metrics prints them, only go up. */
    for (i = 0; i <= LATENCY_BUCKETS; i++) {
        uint64_t next = cum + sum.bucket[i];

        ck_assert_uint_ge(next, cum);
        cum = next;
    }
    ck_assert_uint_eq(cum, latency_count(&sum));
}
END_TEST

START_TEST(test_classify)
{
    static const struct {
        const char      *word;
        enum latency_cmd k;
    } CASES[] = {
        { "get", LATENCY_GET },
        { "gets", LATENCY_GETS },
        { "gat", LATENCY_GAT },
        { "gats", LATENCY_GATS },
        { "set", LATENCY_SET },
        { "cas", LATENCY_CAS },
        { "prepend", LATENCY_PREPEND },
        { "delete", LATENCY_DELETE },
        { "incr", LATENCY_INCR },
        { "flush_all", LATENCY_FLUSH_ALL },
        { "mg", LATENCY_META_GET },
        { "ms", LATENCY_META_SET },
        { "md", LATENCY_META_DELETE },
        { "ma", LATENCY_META_ARITHMETIC },
        { "mn", LATENCY_META_NOOP },
        { "me", LATENCY_META_DEBUG },
        { "mx", LATENCY_NONE },
        { "meta_get", LATENCY_NONE }, /* a label, not a command */
        { "stats", LATENCY_NONE },
        { "version", LATENCY_NONE },
        { "rc_set", LATENCY_NONE },
        { "ge", LATENCY_NONE },
        { "", LATENCY_NONE },
    };
    size_t i;

    for (i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
        ck_assert_msg(latency_classify(CASES[i].word, strlen(CASES[i].word)) == CASES[i].k,
                      "%s", CASES[i].word);
    }
    ck_assert_str_eq(latency_cmd_name(LATENCY_META_GET), "meta_get");
    ck_assert_str_eq(latency_cmd_name(LATENCY_FLUSH_ALL), "flush_all");
}
END_TEST

struct lfix {
    struct server *srv;
    struct worker *w;
    struct conn   *c;
};

static void
lfix_open(struct lfix *f)
{
    struct settings st;

    settings_init(&st);
    st.num_threads = 1;
    f->srv = server_new(&st);
    ck_assert_ptr_nonnull(f->srv);
    f->w = &f->srv->workers[0];
    f->c = conn_new(f->w, -1);
    ck_assert_ptr_nonnull(f->c);
}

static void
lfix_close(struct lfix *f)
{
    conn_close(f->c);
    server_free(f->srv);
}

static uint64_t
count_of(struct lfix *f, enum latency_cmd k)
{
    struct latency_stats ls;

    latency_sum(f->srv, &ls);
    return latency_count(&ls.cmd[k]);
}

static void
feed(struct lfix *f, const char *s)
{
    ck_assert_int_eq(conn_feed(f->c, s, strlen(s)), 0);
    ck_assert_int_eq(proto_text_process(f->c), PROTO_MORE);
}

/* Pipelined commands are timed once each, untimed ones not at all, all
 * with the batch's one duration; a set is timed once its data block is
 * in. */
START_TEST(test_conn_commands)
{
    struct lfix          f;
    struct latency_stats ls;
    size_t               len;

    lfix_open(&f);
    feed(&f, "set a 0 0 1\r\nx\r\nget a\r\nget a b\r\nmn\r\nversion\r\nbogus\r\nset b 0 0 3\r\n");
    ck_assert_uint_eq(count_of(&f, LATENCY_SET), 1);
    ck_assert_uint_eq(count_of(&f, LATENCY_GET), 2);
    ck_assert_uint_eq(count_of(&f, LATENCY_META_NOOP), 1);
    latency_sum(f.srv, &ls);
    ck_assert_uint_eq(ls.cmd[LATENCY_GET].sum_ns, 2 * ls.cmd[LATENCY_SET].sum_ns);
    ck_assert_uint_eq(ls.cmd[LATENCY_META_NOOP].sum_ns, ls.cmd[LATENCY_SET].sum_ns);
    feed(&f, "xy");
    ck_assert_uint_eq(count_of(&f, LATENCY_SET), 1);
    feed(&f, "z\r\n");
    ck_assert_uint_eq(count_of(&f, LATENCY_SET), 2);
    latency_sum(f.srv, &ls);
    ck_assert_uint_eq(latency_count(&ls.cmd[LATENCY_NONE]), 0);
    ck_assert_uint_gt(ls.cmd[LATENCY_GET].sum_ns, 0);
    free(conn_out_take(f.c, &len));
    lfix_close(&f);
}
END_TEST

static void
gone(void *owner)
{
    (void)owner;
}

/* A command whose reply is held is timed when the hold is filled, not
 * when it is parsed; one whose hold was filled at once, at the end of its
 * batch. */
START_TEST(test_conn_hold)
{
    struct lfix       f;
    struct out_chunk *h;
    int               owner;
    size_t            len;

    lfix_open(&f);
    latency_batch(f.c);
    latency_begin(f.c, "get", 3);
    h = conn_out_hold(f.c, &owner, gone);
    latency_end(f.c);
    ck_assert_uint_eq(count_of(&f, LATENCY_GET), 0);
    conn_hold_add(f.c, h, "END\r\n", 5);
    conn_hold_done(f.c, h);
    ck_assert_uint_eq(count_of(&f, LATENCY_GET), 1);

    latency_batch(f.c);
    latency_begin(f.c, "delete", 6);
    h = conn_out_hold(f.c, &owner, gone);
    conn_hold_add(f.c, h, "DELETED\r\n", 9);
    conn_hold_done(f.c, h);
    ck_assert_uint_eq(count_of(&f, LATENCY_DELETE), 0);
    latency_end(f.c);
    ck_assert_uint_eq(count_of(&f, LATENCY_DELETE), 0); /* at the end of the batch */
    latency_batch_end(f.c);
    ck_assert_uint_eq(count_of(&f, LATENCY_DELETE), 1);
    ck_assert_uint_eq(count_of(&f, LATENCY_GET), 1);

    /* A paused get's hold filled and written (freed) before the get ends. */
    latency_batch(f.c);
    latency_begin(f.c, "gets", 4);
    h = conn_out_hold(f.c, &owner, gone);
    conn_hold_add(f.c, h, "END\r\n", 5);
    conn_hold_done(f.c, h);
    free(conn_out_take(f.c, &len));
    ck_assert_ptr_null(f.c->lat_hold);
    latency_end(f.c);
    latency_batch_end(f.c);
    ck_assert_uint_eq(count_of(&f, LATENCY_GETS), 1);
    lfix_close(&f);
}
END_TEST

Suite *
latency_suite(void)
{
    Suite *s = suite_create("latency");
    TCase *tc = tcase_create("histogram");
    TCase *tconn = tcase_create("conn");

    tcase_add_test(tc, test_bucket_bounds);
    tcase_add_test(tc, test_record_merge);
    tcase_add_test(tc, test_classify);
    suite_add_tcase(s, tc);
    tcase_add_test(tconn, test_conn_commands);
    tcase_add_test(tconn, test_conn_hold);
    suite_add_tcase(s, tconn);
    return s;
}
