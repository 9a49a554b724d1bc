/*
 * store_suite: the node's item store (server/store.c). Store semantics
 * (add/replace/append/prepend, CAS, expiry, flush_all, incr/decr), memory
 * limit and LRU eviction, references outliving deletes, concurrency, table
 * growth. The sweep and the handoff primitives are store_range_suite's
 * (tests/check_store_range.c).
 * Time moves with store_clock_shift, never by sleeping.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/store.h"
#include "tests/check_store.h"
#include "tests/suites.h"

static uint64_t
cas_of(struct store *s, const char *key)
{
    struct store_item *it = get(s, key);
    uint64_t           c;

    ck_assert_ptr_nonnull(it);
    c = it->cas;
    store_release(s, it);
    return c;
}

START_TEST(test_roundtrip)
{
    struct store      *s = mkstore(64 * MIB, false);
    struct store_item *it;

    ck_assert_int_eq(put(s, STORE_OP_SET, "alpha", "hello world", 42, 0, 0, NULL), STORE_STORED);
    it = get(s, "alpha");
    ck_assert_ptr_nonnull(it);
    ck_assert_uint_eq(it->nkey, 5);
    ck_assert_mem_eq(store_item_key(it), "alpha", 5);
    ck_assert_uint_eq(it->nbytes, 11);
    ck_assert_mem_eq(store_item_value(it), "hello world\r\n", 13);
    ck_assert_uint_eq(it->flags, 42);
    ck_assert_uint_eq(it->hash, h("alpha"));
    ck_assert_uint_eq(it->exptime, 0);
    ck_assert_uint_ne(it->cas, 0);
    store_release(s, it);
    /* Empty values and keys that share a hash prefix are distinct. */
    ck_assert_int_eq(set(s, "e", ""), STORE_STORED);
    expect(s, "e", "");
    expect(s, "alph", NULL);
    expect(s, "alphaa", NULL);
    ck_assert_int_eq(store_delete(s, "alpha", 5, h("alpha")), STORE_DELETED);
    ck_assert_int_eq(store_delete(s, "alpha", 5, h("alpha")), STORE_NOT_FOUND);
    expect(s, "alpha", NULL);
    /* store_delete_cas reports the CAS of what it deleted (a tombstone's). */
    {
        uint64_t cas = 0, got = 7;

        ck_assert_int_eq(set(s, "t", "x"), STORE_STORED);
        it = store_get(s, "t", 1, h("t"));
        ck_assert_ptr_nonnull(it);
        cas = it->cas;
        store_release(s, it);
        ck_assert_int_eq(store_delete_cas(s, "t", 1, h("t"), &got), STORE_DELETED);
        ck_assert_uint_eq(got, cas);
        got = 7;
        ck_assert_int_eq(store_delete_cas(s, "t", 1, h("t"), &got), STORE_NOT_FOUND);
        ck_assert_uint_eq(got, 7);
    }
    store_free(s);
}
END_TEST

/* A script of store commands and the value each leaves behind. */
static const struct op_step {
    enum store_op op;
    const char   *key, *val;
    uint32_t      flags;
    int           rc;
    const char   *after; /* value under key afterwards, NULL = missing */
    uint32_t      after_flags;
} op_steps[] = {
    { STORE_OP_ADD, "a", "1", 3, STORE_STORED, "1", 3 },
    { STORE_OP_ADD, "a", "2", 4, STORE_NOT_STORED, "1", 3 },
    { STORE_OP_REPLACE, "b", "x", 0, STORE_NOT_STORED, NULL, 0 },
    { STORE_OP_REPLACE, "a", "3", 5, STORE_STORED, "3", 5 },
    { STORE_OP_APPEND, "a", "45", 9, STORE_STORED, "345", 5 },
    { STORE_OP_PREPEND, "a", "12", 9, STORE_STORED, "12345", 5 },
    { STORE_OP_APPEND, "c", "x", 0, STORE_NOT_STORED, NULL, 0 },
    { STORE_OP_PREPEND, "c", "x", 0, STORE_NOT_STORED, NULL, 0 },
    { STORE_OP_SET, "c", "v", 7, STORE_STORED, "v", 7 },
    { STORE_OP_APPEND, "c", "", 0, STORE_STORED, "v", 7 },
    { STORE_OP_PREPEND, "c", "u", 1, STORE_STORED, "uv", 7 },
    { STORE_OP_SET, "c", "w", 8, STORE_STORED, "w", 8 },
    { STORE_OP_ADD, "d", "", 0, STORE_STORED, "", 0 },
    { STORE_OP_APPEND, "d", "z", 0, STORE_STORED, "z", 0 },
};

START_TEST(test_op_table)
{
    struct store *s = mkstore(64 * MIB, false);
    size_t        i;

    for (i = 0; i < sizeof(op_steps) / sizeof(op_steps[0]); i++) {
        const struct op_step *t = &op_steps[i];
        struct store_item    *it;

        ck_assert_msg(put(s, t->op, t->key, t->val, t->flags, 0, 0, NULL) == t->rc,
                      "step %zu: wrong result", i);
        expect(s, t->key, t->after);
        if (t->after != NULL) {
            it = get(s, t->key);
            ck_assert_msg(it->flags == t->after_flags, "step %zu: flags %u", i, it->flags);
            store_release(s, it);
        }
    }
    store_free(s);
}
END_TEST

START_TEST(test_cas)
{
    struct store *s = mkstore(64 * MIB, false);
    uint64_t      c1 = 0, c2 = 0, c;

    ck_assert_int_eq(put(s, STORE_OP_SET, "k", "v1", 0, 0, 0, &c1), STORE_STORED);
    ck_assert_uint_eq(cas_of(s, "k"), c1);
    /* a hybrid logical clock: wall-clock ms above the low 22 bits */
    ck_assert_int_lt(
        llabs((long long)(c1 >> STORE_CAS_LOGICAL_BITS) -
              (long long)(store_cas_clock((int64_t)time(NULL) * 1000) >> STORE_CAS_LOGICAL_BITS)),
        5000);
    /* below 2^63 (signed 64-bit clients) until 2093-01-01 */
    ck_assert_uint_lt(store_cas_clock(INT64_C(3881606400000)), UINT64_C(1) << 63);
    ck_assert_int_eq(put(s, STORE_OP_CAS, "k", "v2", 0, 0, c1, &c2), STORE_STORED);
    ck_assert_uint_ne(c2, c1);
    expect(s, "k", "v2");
    ck_assert_int_eq(put(s, STORE_OP_CAS, "k", "v3", 0, 0, c1, NULL), STORE_EXISTS);
    ck_assert_int_eq(put(s, STORE_OP_CAS, "k", "v3", 0, 0, 0, NULL), STORE_EXISTS);
    expect(s, "k", "v2");
    ck_assert_int_eq(put(s, STORE_OP_CAS, "nokey", "v", 0, 0, c2, NULL), STORE_NOT_FOUND);
    expect(s, "nokey", NULL);
    /* cas on an expired item is a miss */
    ck_assert_int_eq(put(s, STORE_OP_SET, "x", "v", 0, -1, 0, &c), STORE_STORED);
    ck_assert_int_eq(put(s, STORE_OP_CAS, "x", "v", 0, 0, c, NULL), STORE_NOT_FOUND);
    store_free(s);
}
END_TEST

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

START_TEST(test_cas_unique)
{
    struct store *s = mkstore(64 * MIB, false);
    enum {
        N = 2000
    };
    uint64_t *cas = calloc(N, sizeof(*cas));
    char      key[32];
    int       i;

    ck_assert_ptr_nonnull(cas);
    for (i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "key:%d", i % (N / 2));
        ck_assert_int_eq(put(s, STORE_OP_SET, key, "v", 0, 0, 0, &cas[i]), STORE_STORED);
        ck_assert_uint_ne(cas[i], 0);
    }
    qsort(cas, N, sizeof(*cas), cmp_u64);
    for (i = 1; i < N; i++) {
        ck_assert_uint_ne(cas[i], cas[i - 1]);
    }
    free(cas);
    store_free(s);
}
END_TEST

/* Which commands mint a CAS: every mutation, never a read or a touch. */
/* A cluster flush is a CAS floor: items and imports below it are dead,
 * later writes above it; a delayed floor waits for its moment, a floor
 * given without one leaves it pending. */
START_TEST(test_flush_floor)
{
    struct store *s = mkstore(64 * MIB, false);
    uint64_t      c1 = 0, c2 = 0, floor, when_floor;
    int64_t       when;

    ck_assert_int_eq(put(s, STORE_OP_SET, "old", "v", 0, 0, 0, &c1), STORE_STORED);
    floor = store_cas_next(s) + 1000;
    store_flush_floor(s, floor);
    ck_assert_uint_eq(store_floor(s), floor);
    expect(s, "old", NULL);
    ck_assert_int_eq(put(s, STORE_OP_SET, "new", "v", 0, 0, 0, &c2), STORE_STORED);
    ck_assert_uint_ge(c2, floor);
    expect(s, "new", "v");
    /* an import from before the flush is dropped, one after it kept */
    ck_assert_int_eq(store_import(s, "imp", 3, h("imp"), 0, 0, floor - 1, "v", 1),
                     STORE_NOT_STORED);
    expect(s, "imp", NULL);
    ck_assert_int_eq(store_import(s, "imp", 3, h("imp"), 0, 0, floor, "w", 1), STORE_STORED);
    expect(s, "imp", "w");
    /* a lower floor changes nothing */
    store_flush_floor(s, floor - 5);
    ck_assert_uint_eq(store_floor(s), floor);
    expect(s, "new", "v");
    /* delayed: the floor of the moment, from the moment on */
    store_flush(s, store_exptime(s, 10));
    store_flush_state(s, &floor, &when_floor, &when);
    ck_assert_int_eq(when, store_exptime(s, 10));
    ck_assert_uint_eq(when_floor, store_cas_clock((int64_t)when * 1000));
    store_flush_floor(s, 1); /* stays pending */
    store_flush_state(s, &floor, &when_floor, &when);
    ck_assert_int_ne(when, 0);
    expect(s, "new", "v");
    store_clock_shift(s, 10);
    expect(s, "new", NULL);
    ck_assert_int_eq(put(s, STORE_OP_SET, "after", "v", 0, 0, 0, &c2), STORE_STORED);
    ck_assert_uint_ge(c2, when_floor);
    expect(s, "after", "v");
    store_free(s);
}
END_TEST

START_TEST(test_cas_minting)
{
    struct store      *s = mkstore(64 * MIB, false);
    uint64_t           c, prev, v;
    struct store_item *it;

    ck_assert_int_eq(put(s, STORE_OP_SET, "n", "5", 0, 0, 0, &c), STORE_STORED);
    prev = c;
#define MINTS(expr)                                         \
    do {                                                    \
        ck_assert_int_eq((expr), STORE_STORED);             \
        c = cas_of(s, "n");                                 \
        ck_assert_msg(c != prev, "%s kept the CAS", #expr); \
        prev = c;                                           \
    } while (0)
    MINTS(put(s, STORE_OP_SET, "n", "6", 0, 0, 0, NULL));
    MINTS(put(s, STORE_OP_REPLACE, "n", "7", 0, 0, 0, NULL));
    MINTS(put(s, STORE_OP_APPEND, "n", "1", 0, 0, 0, NULL));
    MINTS(put(s, STORE_OP_PREPEND, "n", "1", 0, 0, 0, NULL));
    MINTS(put(s, STORE_OP_CAS, "n", "8", 0, 0, prev, NULL));
    MINTS(store_arith(s, "n", 1, h("n"), true, 1, &v, NULL));
    MINTS(store_arith(s, "n", 1, h("n"), false, 1, &v, NULL));
    /* same length in place, and a length change */
    MINTS(store_arith(s, "n", 1, h("n"), true, 10, &v, NULL));
    ck_assert_int_eq(store_delete(s, "n", 1, h("n")), STORE_DELETED);
    MINTS(put(s, STORE_OP_ADD, "n", "1", 0, 0, 0, NULL));
#undef MINTS
    ck_assert_int_eq(store_touch(s, "n", 1, h("n"), store_exptime(s, 100)), STORE_TOUCHED);
    ck_assert_uint_eq(cas_of(s, "n"), prev);
    it = store_get_touch(s, "n", 1, h("n"), store_exptime(s, 200));
    ck_assert_ptr_nonnull(it);
    ck_assert_uint_eq(it->cas, prev);
    store_release(s, it);
    ck_assert_uint_eq(cas_of(s, "n"), prev);
    store_free(s);
}
END_TEST

START_TEST(test_exptime_conversion)
{
    struct store *s = mkstore(MIB, false);
    int64_t       now = store_now(s), e;

    ck_assert_int_eq(store_exptime(s, 0), 0);
    e = store_exptime(s, -1);
    ck_assert(e != 0 && e <= store_now(s));
    e = store_exptime(s, -1000000);
    ck_assert(e != 0 && e <= store_now(s));
    e = store_exptime(s, 100);
    ck_assert(e >= now + 100 && e <= store_now(s) + 100);
    e = store_exptime(s, 2592000);
    ck_assert(e >= now + 2592000 && e <= store_now(s) + 2592000);
    ck_assert_int_eq(store_exptime(s, 2592001), 2592001);
    ck_assert_int_eq(store_exptime(s, now + 5000000), now + 5000000);
    store_clock_shift(s, 1000);
    ck_assert(store_now(s) >= now + 1000);
    store_free(s);
}
END_TEST

/* Protocol exptime, clock shift after the store, alive? */
static const struct exp_case {
    const char *name;
    int64_t     exptime; /* protocol value; ABS(n) = now + n as absolute */
    bool        absolute;
    int64_t     shift;
    bool        alive;
} exp_cases[] = {
    { "never", 0, false, 10 * 365 * 86400, true },
    { "rel-before", 10, false, 9, true },
    { "rel-at", 10, false, 10, false },
    { "rel-30d", 2592000, false, 2591990, true },
    { "rel-30d-after", 2592000, false, 2592000, false },
    { "abs-before", 100, true, 99, true },
    { "abs-at", 100, true, 100, false },
    { "abs-past", -100, true, 0, false },
    { "abs-1970", 2592001, false, 0, false },
    { "negative", -1, false, 0, false },
};

START_TEST(test_expiry_table)
{
    const struct exp_case *t = &exp_cases[_i];
    struct store          *s = mkstore(MIB, false);
    int64_t                e = t->absolute ? store_now(s) + t->exptime : t->exptime;

    ck_assert_int_eq(put(s, STORE_OP_SET, "k", "v", 0, e, 0, NULL), STORE_STORED);
    store_clock_shift(s, t->shift);
    expect(s, "k", t->alive ? "v" : NULL);
    if (!t->alive) {
        struct store_stats st;

        store_get_stats(s, &st);
        ck_assert_uint_eq(st.get_expired, 1);
        ck_assert_uint_eq(st.curr_items, 0);
        /* add succeeds over an expired item */
        ck_assert_int_eq(put(s, STORE_OP_ADD, "k", "w", 0, 0, 0, NULL), STORE_STORED);
    }
    store_free(s);
}
END_TEST

START_TEST(test_touch_gat)
{
    struct store      *s = mkstore(MIB, false);
    struct store_item *it;

    ck_assert_int_eq(set(s, "k", "val"), STORE_STORED);
    it = store_get_touch(s, "k", 1, h("k"), store_exptime(s, 10));
    ck_assert_ptr_nonnull(it);
    ck_assert_mem_eq(store_item_value(it), "val\r\n", 5);
    store_release(s, it);
    store_clock_shift(s, 9);
    expect(s, "k", "val");
    ck_assert_int_eq(store_touch(s, "k", 1, h("k"), store_exptime(s, 5)), STORE_TOUCHED);
    store_clock_shift(s, 4);
    expect(s, "k", "val");
    store_clock_shift(s, 1);
    expect(s, "k", NULL);
    ck_assert_int_eq(store_touch(s, "k", 1, h("k"), 0), STORE_NOT_FOUND);
    ck_assert_ptr_null(store_get_touch(s, "k", 1, h("k"), 0));

    /* gat with an exptime in the past still returns the value once */
    ck_assert_int_eq(set(s, "g", "gv"), STORE_STORED);
    it = store_get_touch(s, "g", 1, h("g"), store_exptime(s, -1));
    ck_assert_ptr_nonnull(it);
    ck_assert_mem_eq(store_item_value(it), "gv\r\n", 4);
    store_release(s, it);
    expect(s, "g", NULL);

    /* touch to 0 makes an expiring item permanent */
    ck_assert_int_eq(put(s, STORE_OP_SET, "p", "pv", 0, 5, 0, NULL), STORE_STORED);
    ck_assert_int_eq(store_touch(s, "p", 1, h("p"), 0), STORE_TOUCHED);
    store_clock_shift(s, 100);
    expect(s, "p", "pv");
    store_free(s);
}
END_TEST

START_TEST(test_flush_immediate)
{
    struct store      *s = mkstore(MIB, false);
    struct store_stats st;

    ck_assert_int_eq(set(s, "a", "1"), STORE_STORED);
    ck_assert_int_eq(set(s, "b", "2"), STORE_STORED);
    store_flush(s, store_exptime(s, 0));
    /* stored in the same second, after the flush: survives */
    ck_assert_int_eq(set(s, "c", "3"), STORE_STORED);
    expect(s, "a", NULL);
    expect(s, "b", NULL);
    expect(s, "c", "3");
    ck_assert_int_eq(put(s, STORE_OP_ADD, "a", "9", 0, 0, 0, NULL), STORE_STORED);
    expect(s, "a", "9");
    ck_assert_int_eq(store_delete(s, "b", 1, h("b")), STORE_NOT_FOUND);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.get_flushed, 2);
    ck_assert_uint_eq(st.curr_items, 2);
    /* a negative delay is "now" too */
    store_flush(s, store_exptime(s, -5));
    expect(s, "a", NULL);
    expect(s, "c", NULL);
    store_free(s);
}
END_TEST

START_TEST(test_flush_delayed)
{
    struct store *s = mkstore(MIB, false);

    ck_assert_int_eq(set(s, "a", "1"), STORE_STORED);
    store_flush(s, store_exptime(s, 10));
    ck_assert_int_eq(set(s, "b", "2"), STORE_STORED);
    store_clock_shift(s, 9);
    expect(s, "a", "1");
    expect(s, "b", "2");
    store_clock_shift(s, 1);
    expect(s, "a", NULL);
    expect(s, "b", NULL);
    ck_assert_int_eq(set(s, "c", "3"), STORE_STORED);
    expect(s, "c", "3");
    store_clock_shift(s, 1000);
    expect(s, "c", "3");

    /* a later flush replaces a pending one */
    store_flush(s, store_exptime(s, 10));
    store_flush(s, store_exptime(s, 100));
    store_clock_shift(s, 50);
    expect(s, "c", "3");
    store_clock_shift(s, 50);
    expect(s, "c", NULL);

    /* and an immediate flush cancels a pending one */
    ck_assert_int_eq(set(s, "d", "4"), STORE_STORED);
    store_flush(s, store_exptime(s, 10));
    store_flush(s, store_exptime(s, 0));
    expect(s, "d", NULL);
    ck_assert_int_eq(set(s, "e", "5"), STORE_STORED);
    store_clock_shift(s, 20);
    expect(s, "e", "5");
    store_free(s);
}
END_TEST

/* 2^16 flush generations later a flushed item must stay dead. */
START_TEST(test_flush_generation_wrap)
{
    struct store *s = mkstore(MIB, false);
    int           i;

    ck_assert_int_eq(set(s, "a", "1"), STORE_STORED);
    store_flush(s, 0);
    ck_assert_int_eq(set(s, "b", "2"), STORE_STORED);
    for (i = 0; i < 65536; i++) {
        store_flush(s, 0);
    }
    expect(s, "a", NULL);
    expect(s, "b", NULL);
    ck_assert_int_eq(set(s, "c", "3"), STORE_STORED);
    expect(s, "c", "3");
    store_free(s);
}
END_TEST

static const struct arith_case {
    const char *initial;
    bool        incr;
    uint64_t    delta;
    int         rc;
    const char *after;
} arith_cases[] = {
    { "0", true, 1, STORE_STORED, "1" },
    { "18446744073709551615", true, 1, STORE_STORED, "0" },
    { "18446744073709551615", true, 2, STORE_STORED, "1" },
    { "18446744073709551614", true, 1, STORE_STORED, "18446744073709551615" },
    { "10", false, 3, STORE_STORED, "7" },
    { "5", false, 10, STORE_STORED, "0" },
    { "99", true, 1, STORE_STORED, "100" },
    { "100", false, 1, STORE_STORED, "99" },
    { "7  ", true, 1, STORE_STORED, "8" },
    { "00012", true, 0, STORE_STORED, "12" },
    { "1", true, UINT64_MAX, STORE_STORED, "0" },
    { "abc", true, 1, STORE_NON_NUMERIC, "abc" },
    { "", true, 1, STORE_NON_NUMERIC, "" },
    { "-1", false, 1, STORE_NON_NUMERIC, "-1" },
    { " 1", true, 1, STORE_NON_NUMERIC, " 1" },
    { "1x", true, 1, STORE_NON_NUMERIC, "1x" },
    { "18446744073709551616", true, 1, STORE_NON_NUMERIC, "18446744073709551616" },
    { "123456789012345678901", true, 1, STORE_NON_NUMERIC, "123456789012345678901" },
    { "000000000000000000001", true, 1, STORE_NON_NUMERIC, "000000000000000000001" },
};

START_TEST(test_arith_table)
{
    const struct arith_case *t = &arith_cases[_i];
    struct store            *s = mkstore(MIB, false);
    struct store_item       *it;
    uint64_t                 v = 12345, c = 0, c0 = 0, want;
    int                      rc;

    ck_assert_int_eq(put(s, STORE_OP_SET, "n", t->initial, 77, 1000, 0, &c0), STORE_STORED);
    rc = store_arith(s, "n", 1, h("n"), t->incr, t->delta, &v, &c);
    ck_assert_int_eq(rc, t->rc);
    expect(s, "n", t->after);
    if (rc == STORE_STORED) {
        want = strtoull(t->after, NULL, 10);
        ck_assert_uint_eq(v, want);
        it = get(s, "n");
        ck_assert_uint_eq(it->flags, 77);
        ck_assert_uint_eq(it->cas, c);
        ck_assert_uint_ne(c, c0);
        ck_assert_int_eq(it->exptime, store_now(s) + 1000);
        store_release(s, it);
    } else {
        ck_assert_uint_eq(cas_of(s, "n"), c0);
    }
    ck_assert_int_eq(store_arith(s, "m", 1, h("m"), true, 1, &v, NULL), STORE_NOT_FOUND);
    store_free(s);
}
END_TEST

START_TEST(test_too_large)
{
    struct store      *s = mkstore(64 * MIB, false);
    char               key[251];
    struct store_item *it;
    int                err = 0;

    memset(key, 'k', 250);
    key[250] = '\0';
    it = store_alloc(s, key, 250, h(key), 0, 0, MIB - 1024, &err);
    ck_assert_ptr_nonnull(it);
    memset(store_item_value_mut(it), 'v', MIB - 1024);
    ck_assert_int_eq(store_put(s, it, STORE_OP_SET, 0, NULL), STORE_STORED);
    store_release(s, it);
    it = store_alloc(s, key, 250, h(key), 0, 0, MIB + 1024, &err);
    ck_assert_ptr_null(it);
    ck_assert_int_eq(err, STORE_TOO_LARGE);
    ck_assert_uint_gt(store_item_size(250, MIB), MIB);
    ck_assert_uint_le(store_item_size(250, MIB - 1024), MIB);

    /* an append past the limit fails and leaves the item as it was */
    it = store_alloc(s, key, 250, h(key), 0, 0, 2048, &err);
    ck_assert_ptr_nonnull(it);
    memset(store_item_value_mut(it), 'w', 2048);
    ck_assert_int_eq(store_put(s, it, STORE_OP_APPEND, 0, NULL), STORE_TOO_LARGE);
    store_release(s, it);
    it = get(s, key);
    ck_assert_ptr_nonnull(it);
    ck_assert_uint_eq(it->nbytes, MIB - 1024);
    store_release(s, it);
    store_free(s);
}
END_TEST

/* A flood of five times the limit: bytes stay under it, every set is
 * stored, and counted as an item or an eviction. The chained table holds
 * exactly N; the compact engine (whole segments, at least 256 KiB)
 * holds what its segments do. */
START_TEST(test_evict_limit)
{
    enum {
        N = 200
    };
    size_t             isz = item_bytes(8, 100, 0);
    size_t             limit = store_item_size(8, 100) * N;
    struct store      *s = mkstore(limit, false);
    struct store_stats st;
    char               key[16], val[101];
    int                i, present = 0, oldest = -1, total;

    total = (int)(5 * store_capacity(s, 8, 100));
    memset(val, 'x', 100);
    val[100] = '\0';
    for (i = 0; i < total; i++) {
        snprintf(key, sizeof(key), "key%05d", i);
        ck_assert_int_eq(set(s, key, val), STORE_STORED);
        store_get_stats(s, &st);
        ck_assert_uint_le(st.bytes, st.limit_maxbytes);
        ck_assert_uint_le(st.mem_used, st.limit_maxbytes);
        ck_assert_uint_eq(st.bytes, st.curr_items * isz);
    }
    store_get_stats(s, &st);
    ck_assert_uint_gt(st.evictions, 0);
    ck_assert_uint_eq(st.curr_items + st.evictions, total);
    ck_assert_uint_eq(st.total_items, total);
    if (!store_test_compact()) {
        ck_assert_uint_eq(st.limit_maxbytes, limit);
        ck_assert_uint_eq(st.curr_items, N);
        ck_assert_uint_eq(st.evictions, 4 * N);
    } else {
        /* the segments in use are mostly full of live items */
        ck_assert_uint_ge(st.bytes, st.limit_maxbytes / 2);
    }
    for (i = 0; i < total; i++) {
        struct store_item *it;

        snprintf(key, sizeof(key), "key%05d", i);
        it = get(s, key);
        if (it != NULL) {
            present++;
            oldest = oldest < 0 ? i : oldest;
            store_release(s, it);
        }
    }
    ck_assert_uint_eq(present, st.curr_items);
    if (store_test_compact()) {
        /* unread records leave in segment (FIFO) order: the newest stay */
        ck_assert_int_eq(oldest, total - present);
    }
    store_free(s);
}
END_TEST

/* Keys read after a while survive a flood that evicts older ones. The
 * chained table holds N and evicts exactly the flood's count; the
 * compact engine is filled to 60% of its segments (no eviction yet) and
 * flooded with as much again. */
START_TEST(test_evict_lru)
{
    enum {
        HOT = 10
    };
    size_t             limit = store_item_size(8, 100) * 300;
    struct store      *s = mkstore(limit, false);
    struct store_stats st;
    char               key[16], val[101];
    int                i, old_left = 0, n, flood;

    n = store_test_compact() ? (int)store_capacity(s, 8, 100) * 6 / 10 : 300;
    flood = store_test_compact() ? n : n / 2;
    memset(val, 'x', 100);
    val[100] = '\0';
    for (i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "key%05d", i);
        ck_assert_int_eq(set(s, key, val), STORE_STORED);
    }
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.evictions, 0);
    store_clock_shift(s, 100);
    for (i = 0; i < HOT; i++) {
        snprintf(key, sizeof(key), "key%05d", i);
        expect(s, key, val);
    }
    for (i = n; i < n + flood; i++) {
        snprintf(key, sizeof(key), "key%05d", i);
        ck_assert_int_eq(set(s, key, val), STORE_STORED);
    }
    for (i = 0; i < HOT; i++) {
        snprintf(key, sizeof(key), "key%05d", i);
        expect(s, key, val);
    }
    for (i = HOT; i < n; i++) {
        struct store_item *it;

        snprintf(key, sizeof(key), "key%05d", i);
        if ((it = get(s, key)) != NULL) {
            old_left++;
            store_release(s, it);
        }
    }
    store_get_stats(s, &st);
    ck_assert_uint_gt(st.evictions, 0);
    /* only old unread keys were evicted: the flood is all there */
    ck_assert_int_eq(old_left + (int)st.evictions, n - HOT);
    ck_assert_uint_eq(st.curr_items, (uint64_t)(old_left + HOT + flood));
    if (!store_test_compact()) {
        ck_assert_uint_eq(st.evictions, flood);
    }
    store_free(s);
}
END_TEST

/* Store k1 and k2 with val (100 x's, filled here) and hold both. */
static void
hold_two(struct store *s, char val[101], struct store_item **a, struct store_item **b)
{
    memset(val, 'x', 100);
    val[100] = '\0';
    ck_assert_int_eq(set(s, "k1", val), STORE_STORED);
    ck_assert_int_eq(set(s, "k2", val), STORE_STORED);
    *a = get(s, "k1");
    *b = get(s, "k2");
    ck_assert_ptr_nonnull(*a);
    ck_assert_ptr_nonnull(*b);
}

/* An item nothing can evict: everything else is held by readers. The
 * chained table's contract (held items stay charged); the compact
 * engine's is test_no_memory_compact. */
START_TEST(test_no_memory)
{
    size_t             isz = store_item_size(2, 100);
    struct store      *s;
    struct store_item *a, *b, *c;
    char               val[101];
    int                err = 0;

    if (store_test_compact()) {
        return;
    }
    s = mkstore(isz * 2, false);
    hold_two(s, val, &a, &b);
    c = store_alloc(s, "k3", 2, h("k3"), 0, 0, 100, &err);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(err, STORE_NO_MEMORY);
    /* both were unlinked for room, but their bytes are still readable */
    ck_assert_mem_eq(store_item_value(a), val, 100);
    ck_assert_mem_eq(store_item_value(b), val, 100);
    store_release(s, a);
    store_release(s, b);
    ck_assert_int_eq(set(s, "k3", val), STORE_STORED);
    /* bigger than the whole limit */
    c = store_alloc(s, "k4", 2, h("k4"), 0, 0, 1000, &err);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(err, STORE_NO_MEMORY);
    store_free(s);
}
END_TEST

/* The compact engine's no-memory cases: held copies cost it nothing (a
 * store still finds room), an item over the configured limit fails at
 * store_alloc, and a value whose jumbo the segments cannot hold (256 KiB
 * of them, 4 the engine keeps) is refused at store_put without evicting
 * anything. */
START_TEST(test_no_memory_compact)
{
    struct store      *s = mkstore_on(256 * 1024, false, true);
    struct store_item *a, *b, *c;
    struct store_stats st;
    char               val[101];
    int                err = 0;

    hold_two(s, val, &a, &b);
    ck_assert_int_eq(set(s, "k3", val), STORE_STORED);
    ck_assert_mem_eq(store_item_value(a), val, 100);
    store_release(s, a);
    store_release(s, b);
    /* bigger than the whole limit */
    c = store_alloc(s, "k4", 2, h("k4"), 0, 0, 300 * 1024, &err);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(err, STORE_NO_MEMORY);
    /* under the limit, over what the segments can give one jumbo */
    c = store_alloc(s, "k5", 2, h("k5"), 0, 0, 250 * 1024, &err);
    ck_assert_ptr_nonnull(c);
    memset(store_item_value_mut(c), 'j', 250 * 1024);
    ck_assert_int_eq(store_put(s, c, STORE_OP_SET, 0, NULL), STORE_NO_MEMORY);
    store_release(s, c);
    expect(s, "k5", NULL);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.evictions, 0);
    ck_assert_uint_eq(st.curr_items, 3);
    expect(s, "k1", val);
    expect(s, "k2", val);
    expect(s, "k3", val);
    store_free(s);
}
END_TEST

/* References outlive overwrites and deletes. On the chained table the
 * held items stay charged in mem_used until released; the compact
 * engine's copies are the holder's own, outside its segments. */
START_TEST(test_held_item)
{
    struct store      *s = mkstore(MIB, false);
    struct store_item *a, *b;
    struct store_stats st;
    uint64_t           v, used;

    ck_assert_int_eq(set(s, "k", "first"), STORE_STORED);
    a = get(s, "k");
    ck_assert_int_eq(set(s, "k", "second"), STORE_STORED);
    b = get(s, "k");
    ck_assert_int_eq(store_delete(s, "k", 1, h("k")), STORE_DELETED);
    ck_assert_mem_eq(store_item_value(a), "first\r\n", 7);
    ck_assert_mem_eq(store_item_value(b), "second\r\n", 8);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.bytes, 0);
    ck_assert_uint_eq(st.curr_items, 0);
    used = st.mem_used;
    if (!store_test_compact()) {
        ck_assert_uint_eq(used, store_item_size(1, 5) + store_item_size(1, 6));
    }
    store_release(s, a);
    store_release(s, b);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.mem_used, store_test_compact() ? used : 0);

    /* incr never rewrites a value someone is reading */
    ck_assert_int_eq(set(s, "n", "41"), STORE_STORED);
    a = get(s, "n");
    ck_assert_int_eq(store_arith(s, "n", 1, h("n"), true, 1, &v, NULL), STORE_STORED);
    ck_assert_uint_eq(v, 42);
    ck_assert_mem_eq(store_item_value(a), "41\r\n", 4);
    expect(s, "n", "42");
    store_get_stats(s, &st);
    used = st.mem_used;
    store_release(s, a);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.bytes, item_bytes(1, 2, 0));
    ck_assert_uint_eq(st.mem_used, store_test_compact() ? used : store_item_size(1, 2));
    store_free(s);
}
END_TEST

struct hammer {
    struct store *s;
    unsigned      seed;
    int           incrs; /* incr per counter */
    int           appends;
};

#define NCOUNTERS 4
#define NKEYS     16

static void *
hammer_main(void *arg)
{
    struct hammer *hm = arg;
    struct store  *s = hm->s;
    char           key[16], val[64];
    uint64_t       v;
    int            i, c;

    for (i = 0; i < hm->incrs; i++) {
        for (c = 0; c < NCOUNTERS; c++) {
            snprintf(key, sizeof(key), "ctr%d", c);
            if (store_arith(s, key, strlen(key), h(key), true, 1, &v, NULL) != STORE_STORED) {
                return (void *)"incr failed";
            }
        }
        if (i < hm->appends && put(s, STORE_OP_APPEND, "log", "x", 0, 0, 0, NULL) != STORE_STORED) {
            return (void *)"append failed";
        }
        /* churn on shared keys: set, get (value must be whole), delete, incr */
        {
            unsigned           r = rand_r(&hm->seed);
            struct store_item *it;

            snprintf(key, sizeof(key), "k%u", r % NKEYS);
            switch ((r >> 8) % 4) {
            case 0:
                snprintf(val, sizeof(val), "%u", r);
                if (set(s, key, val) != STORE_STORED) {
                    return (void *)"set failed";
                }
                break;
            case 1:
                it = get(s, key);
                if (it != NULL) {
                    const char *p = store_item_value(it);

                    if (p[it->nbytes] != '\r' || p[it->nbytes + 1] != '\n' || it->nbytes == 0 ||
                        it->nbytes > 20) {
                        return (void *)"torn value";
                    }
                    store_release(s, it);
                }
                break;
            case 2:
                store_delete(s, key, strlen(key), h(key));
                break;
            default:
                store_arith(s, key, strlen(key), h(key), (r >> 16) & 1, r % 7, &v, NULL);
                break;
            }
        }
    }
    return NULL;
}

START_TEST(test_concurrency)
{
    enum {
        THREADS = 4,
        INCRS = 20000,
        APPENDS = 2000
    };
    struct store      *s = mkstore(64 * MIB, true);
    pthread_t          th[THREADS];
    struct hammer      hm[THREADS];
    char               key[16];
    struct store_item *it;
    struct store_stats st;
    int                i, c;

    for (c = 0; c < NCOUNTERS; c++) {
        snprintf(key, sizeof(key), "ctr%d", c);
        /* counter 0 starts one short of a digit change to take the slow path */
        ck_assert_int_eq(set(s, key, c == 0 ? "9" : "1000000"), STORE_STORED);
    }
    ck_assert_int_eq(set(s, "log", ""), STORE_STORED);
    for (i = 0; i < THREADS; i++) {
        hm[i] = (struct hammer){
            .s = s, .seed = (unsigned)i * 7919u + 1, .incrs = INCRS, .appends = APPENDS
        };
        ck_assert_int_eq(pthread_create(&th[i], NULL, hammer_main, &hm[i]), 0);
    }
    for (i = 0; i < THREADS; i++) {
        void *ret;

        pthread_join(th[i], &ret);
        ck_assert_msg(ret == NULL, "thread %d: %s", i, (const char *)ret);
    }
    for (c = 0; c < NCOUNTERS; c++) {
        char want[32];

        snprintf(key, sizeof(key), "ctr%d", c);
        snprintf(want, sizeof(want), "%d", (c == 0 ? 9 : 1000000) + THREADS * INCRS);
        expect(s, key, want);
    }
    it = get(s, "log");
    ck_assert_ptr_nonnull(it);
    ck_assert_uint_eq(it->nbytes, THREADS * APPENDS);
    store_release(s, it);
    /* gauges agree with the table */
    store_get_stats(s, &st);
    {
        uint64_t n = 0, bytes = 0;

        for (i = 0; i < NKEYS; i++) {
            snprintf(key, sizeof(key), "k%d", i);
            if ((it = get(s, key)) != NULL) {
                n++;
                bytes += item_bytes(it->nkey, it->nbytes, 0);
                store_release(s, it);
            }
        }
        for (c = 0; c < NCOUNTERS; c++) {
            snprintf(key, sizeof(key), "ctr%d", c);
            it = get(s, key);
            n++;
            bytes += item_bytes(it->nkey, it->nbytes, 0);
            store_release(s, it);
        }
        it = get(s, "log");
        n++;
        bytes += item_bytes(it->nkey, it->nbytes, 0);
        store_release(s, it);
        ck_assert_uint_eq(st.curr_items, n);
        ck_assert_uint_eq(st.bytes, bytes);
        if (!store_test_compact()) {
            ck_assert_uint_eq(st.mem_used, bytes);
        }
    }
    store_free(s);
}
END_TEST

/* Two racing cas with the same value: exactly one wins. */
struct cas_race {
    struct store      *s;
    uint64_t           cas;
    int                wins;
    pthread_barrier_t *bar;
};

static void *
cas_race_main(void *arg)
{
    struct cas_race *cr = arg;

    pthread_barrier_wait(cr->bar);
    cr->wins = put(cr->s, STORE_OP_CAS, "c", "mine", 0, 0, cr->cas, NULL) == STORE_STORED;
    return NULL;
}

START_TEST(test_cas_race)
{
    enum {
        T = 4,
        ROUNDS = 200
    };
    struct store     *s = mkstore(MIB, false);
    pthread_barrier_t bar;
    pthread_t         th[T];
    struct cas_race   cr[T];
    int               r, i, wins;
    uint64_t          c;

    pthread_barrier_init(&bar, NULL, T);
    for (r = 0; r < ROUNDS; r++) {
        ck_assert_int_eq(put(s, STORE_OP_SET, "c", "base", 0, 0, 0, &c), STORE_STORED);
        for (i = 0; i < T; i++) {
            cr[i] = (struct cas_race){ .s = s, .cas = c, .bar = &bar };
            pthread_create(&th[i], NULL, cas_race_main, &cr[i]);
        }
        wins = 0;
        for (i = 0; i < T; i++) {
            pthread_join(th[i], NULL);
            wins += cr[i].wins;
        }
        ck_assert_int_eq(wins, 1);
    }
    pthread_barrier_destroy(&bar);
    store_free(s);
}
END_TEST

START_TEST(test_table_growth)
{
    enum {
        N = 50000
    };
    struct store      *s = mkstore(256 * MIB, false);
    struct store_stats st, st0;
    char               key[16];
    int                i;

    store_get_stats(s, &st0);
    for (i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "g%d", i);
        ck_assert_int_eq(set(s, key, key), STORE_STORED);
    }
    store_get_stats(s, &st);
    ck_assert_uint_gt(st.hash_buckets, st0.hash_buckets);
    ck_assert_uint_ge(st.hash_buckets * 3, (uint64_t)N * 2 * 3 / 4);
    ck_assert_uint_eq(st.curr_items, N);
    for (i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "g%d", i);
        expect(s, key, key);
    }
    ck_assert_uint_eq(st.limit_maxbytes, 256 * MIB);
    /* store_free with every item still linked: LeakSanitizer checks it */
    store_free(s);
}
END_TEST

/* The dirty sets grow with the item table's routine: keys of one stripe
 * (the low hash bits pick it) outgrow its set of 4 buckets several times
 * over, and still each is recorded once however often it changes, and
 * drains once. */
struct one_stripe {
    int n;
    char (*keys)[16];
    unsigned *seen;
};

static bool
any_key(uint64_t hash, void *arg)
{
    (void)hash;
    (void)arg;
    return true;
}

static void
one_stripe_fn(const char *key, size_t nkey, uint64_t hash, struct store_item *it, void *arg)
{
    struct one_stripe *o = arg;
    int                i;

    for (i = 0; i < o->n; i++) {
        if (strlen(o->keys[i]) == nkey && memcmp(o->keys[i], key, nkey) == 0) {
            break;
        }
    }
    ck_assert_msg(i < o->n, "drained a key that was not set");
    ck_assert_uint_eq(hash, h(o->keys[i]));
    ck_assert_ptr_nonnull(it);
    o->seen[i]++;
}

START_TEST(test_dirty_growth)
{
    enum {
        N = 200
    };
    struct store     *s = mkstore(64 * MIB, false);
    struct one_stripe o = { N, calloc(N, 16), calloc(N, sizeof(unsigned)) };
    int               i, n = 0, round;

    ck_assert_ptr_nonnull(o.keys);
    ck_assert_ptr_nonnull(o.seen);
    for (i = 0; n < N; i++) {
        snprintf(o.keys[n], 16, "d%d", i);
        if ((h(o.keys[n]) & (STORE_STRIPES - 1)) == 0) {
            n++;
        }
    }
    ck_assert_int_eq(store_track_start(s, any_key, NULL), 0);
    for (round = 0; round < 3; round++) {
        for (i = 0; i < N; i++) {
            ck_assert_int_eq(set(s, o.keys[i], "v"), STORE_STORED);
        }
        ck_assert_uint_eq(store_track_pending(s), N);
    }
    ck_assert_uint_eq(store_track_drain(s, one_stripe_fn, &o, SIZE_MAX), N);
    ck_assert_uint_eq(store_track_pending(s), 0);
    for (i = 0; i < N; i++) {
        ck_assert_uint_eq(o.seen[i], 1);
        expect(s, o.keys[i], "v");
    }
    ck_assert(!store_track_lost(s));
    store_track_stop(s);
    free(o.keys);
    free(o.seen);
    store_free(s);
}
END_TEST

Suite *
store_suite(void)
{
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("store");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_op_table);
    tcase_add_test(tc, test_cas);
    tcase_add_test(tc, test_cas_unique);
    tcase_add_test(tc, test_cas_minting);
    tcase_add_test(tc, test_flush_floor);
    tcase_add_test(tc, test_exptime_conversion);
    tcase_add_loop_test(tc, test_expiry_table, 0, sizeof(exp_cases) / sizeof(exp_cases[0]));
    tcase_add_test(tc, test_touch_gat);
    tcase_add_test(tc, test_flush_immediate);
    tcase_add_test(tc, test_flush_delayed);
    tcase_add_test(tc, test_flush_generation_wrap);
    tcase_add_loop_test(tc, test_arith_table, 0, sizeof(arith_cases) / sizeof(arith_cases[0]));
    tcase_add_test(tc, test_too_large);
    tcase_add_test(tc, test_evict_limit);
    tcase_add_test(tc, test_evict_lru);
    tcase_add_test(tc, test_no_memory);
    tcase_add_test(tc, test_no_memory_compact);
    tcase_add_test(tc, test_held_item);
    tcase_add_test(tc, test_concurrency);
    tcase_add_test(tc, test_cas_race);
    tcase_add_test(tc, test_table_growth);
    tcase_add_test(tc, test_dirty_growth);
    suite_add_tcase(s, tc);
    suite_add_tcase(s, store_evict_tcase());
    return s;
}
