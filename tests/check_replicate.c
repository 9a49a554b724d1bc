/*
 * replicate_suite: the replica side of server/replicate.c on a real store.
 * Post-images and tombstones of a key can arrive out of order; a delete is
 * never undone by a late post-image (its tombstone), nor is an eviction or
 * an expiry, within the tombstone lifetime and the table's bound.
 */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "server/replicate.h"
#include "server/store.h"
#include "tests/check_store.h"
#include "tests/suites.h"

/* The one primary every image of these tests comes from. */
#define ORIGIN 7

/* An rc_set as proto_peer applies it: key=val with the primary's cas,
 * hash given (tests pick hashes that share a tombstone bucket). */
static int
apply_put_h(struct store *s, const char *key, uint64_t hash, const char *val, uint64_t cas,
            int64_t exptime)
{
    int                err = 0, rc;
    size_t             n = strlen(val);
    struct store_item *it = store_alloc(s, key, strlen(key), hash, 0, exptime, n, &err);

    ck_assert_ptr_nonnull(it);
    memcpy(store_item_value_mut(it), val, n);
    rc = replicate_apply_put(s, it, cas, ORIGIN, NULL);
    store_release(s, it);
    return rc;
}

static int
apply_put(struct store *s, const char *key, const char *val, uint64_t cas)
{
    return apply_put_h(s, key, h(key), val, cas, 0);
}

static void
apply_del(struct store *s, const char *key, uint64_t cas)
{
    replicate_apply_del(s, key, strlen(key), h(key), cas, ORIGIN);
}

/* The value and CAS under key with an explicit hash (NULL val: a miss). */
static void
expect_h(struct store *s, const char *key, uint64_t hash, const char *val, uint64_t cas)
{
    struct store_item *it = store_get(s, key, strlen(key), hash);

    if (val == NULL) {
        ck_assert_msg(it == NULL, "%s: expected a miss, got a value", key);
        return;
    }
    ck_assert_msg(it != NULL, "%s: expected '%s', got a miss", key, val);
    ck_assert_uint_eq(it->nbytes, strlen(val));
    ck_assert_mem_eq(store_item_value(it), val, strlen(val));
    ck_assert_uint_eq(it->cas, cas);
    store_release(s, it);
}

/* The finding: set (cas 10) then delete (tombstone cas 10) on the primary;
 * the tombstone arrives first, the set's post-image after it. */
START_TEST(test_tomb_late_put)
{
    struct store *s = mkstore(64 * MIB, false);

    ck_assert_int_eq(apply_put(s, "k", "v9", 9), 0);
    apply_del(s, "k", 10); /* deletes the older copy */
    expect(s, "k", NULL);
    ck_assert_int_eq(apply_put(s, "k", "v10", 10), 0); /* late: answered OK */
    expect(s, "k", NULL);
    ck_assert_int_eq(apply_put(s, "k", "v8", 8), 0);
    expect(s, "k", NULL);
    /* A newer write applies and clears the tombstone. */
    ck_assert_int_eq(apply_put(s, "k", "v11", 11), 0);
    expect_h(s, "k", h("k"), "v11", 11);
    apply_del(s, "k", 11);
    expect(s, "k", NULL);
    ck_assert_int_eq(apply_put(s, "k", "v12", 12), 0);
    expect_h(s, "k", h("k"), "v12", 12);
    /* A present key is ordered by its CAS as before: an equal CAS applies
     * again (a touch keeps the CAS), an older one does not. */
    ck_assert_int_eq(apply_put(s, "k", "v12b", 12), 0);
    expect_h(s, "k", h("k"), "v12b", 12);
    ck_assert_int_eq(apply_put(s, "k", "v7", 7), 0);
    expect_h(s, "k", h("k"), "v12b", 12);
    /* A stale tombstone (older than the key) deletes nothing and leaves
     * nothing behind that could block the key later. */
    apply_del(s, "k", 5);
    expect_h(s, "k", h("k"), "v12b", 12);
    store_free(s);
}
END_TEST

/* A tombstone for a key the replica never had (its post-image is the one
 * still on the way) guards it too. */
START_TEST(test_tomb_absent)
{
    struct store *s = mkstore(64 * MIB, false);

    apply_del(s, "a", 20);
    ck_assert_int_eq(apply_put(s, "a", "x", 20), 0);
    expect(s, "a", NULL);
    ck_assert_int_eq(apply_put(s, "a", "y", 21), 0);
    expect_h(s, "a", h("a"), "y", 21);
    /* The second of two tombstones keeps the higher CAS. */
    apply_del(s, "b", 30);
    apply_del(s, "b", 25);
    ck_assert_int_eq(apply_put(s, "b", "z", 28), 0);
    expect(s, "b", NULL);
    store_free(s);
}
END_TEST

/* A tombstone lasts the ttl and no longer. */
START_TEST(test_tomb_expiry)
{
    struct store *s = mkstore(64 * MIB, false);

    replicate_tomb_init(s, 5);
    apply_del(s, "e1", 10);
    apply_del(s, "e2", 10);
    store_clock_shift(s, 4);
    ck_assert_int_eq(apply_put(s, "e1", "late", 10), 0);
    expect(s, "e1", NULL); /* 4 s old: still in force */
    store_clock_shift(s, 1);
    ck_assert_int_eq(apply_put(s, "e2", "late", 10), 0);
    expect_h(s, "e2", h("e2"), "late", 10); /* 5 s old: expired, applies */
    store_free(s);
}
END_TEST

/* The default lifetime covers every retry of a forwarded request. */
START_TEST(test_tomb_default_ttl)
{
    struct store *s = mkstore(64 * MIB, false);

    ck_assert_int_ge(REPLICATE_TOMB_TTL_S, 3 * 1 + 1);
    apply_del(s, "d", 10);
    store_clock_shift(s, REPLICATE_TOMB_TTL_S - 1);
    ck_assert_int_eq(apply_put(s, "d", "late", 10), 0);
    expect(s, "d", NULL);
    store_clock_shift(s, 1);
    ck_assert_int_eq(apply_put(s, "d", "late", 10), 0);
    expect(s, "d", "late");
    store_free(s);
}
END_TEST

/* The bound: REPLICATE_TOMB_WAYS tombstones per bucket; hashes that differ
 * only in their top bits share one. One more replaces the oldest, whose
 * key a late image can then re-create (the documented loss past it). */
START_TEST(test_tomb_full)
{
    struct store *s = mkstore(64 * MIB, false);
    uint64_t      base = h("full") & ~(0xfull << 60), hs[REPLICATE_TOMB_WAYS + 1];
    char          keys[REPLICATE_TOMB_WAYS + 1][16];
    int           i;

    for (i = 0; i <= REPLICATE_TOMB_WAYS; i++) {
        hs[i] = base | ((uint64_t)i << 60);
        snprintf(keys[i], sizeof(keys[i]), "full-%d", i);
        replicate_apply_del(s, keys[i], strlen(keys[i]), hs[i], 100, ORIGIN);
        store_clock_shift(s, 1); /* so "oldest" is well defined */
    }
    ck_assert_int_eq(apply_put_h(s, keys[0], hs[0], "back", 100, 0), 0);
    expect_h(s, keys[0], hs[0], "back", 100); /* replaced: not guarded */
    for (i = 1; i <= REPLICATE_TOMB_WAYS; i++) {
        ck_assert_int_eq(apply_put_h(s, keys[i], hs[i], "back", 100, 0), 0);
        expect_h(s, keys[i], hs[i], NULL, 0);
    }
    store_free(s);
}
END_TEST

/* An eviction at the replica is a tombstone: the replica evicted cas 11,
 * a late cas 10 image of the key must not bring the older value back. */
START_TEST(test_tomb_eviction)
{
    struct store      *s = mkstore(1 * MIB, false);
    struct store_stats st;
    char               key[32], val[1024];
    int                i;

    replicate_tomb_init(s, REPLICATE_TOMB_TTL_S);
    memset(val, 'v', sizeof(val) - 1);
    val[sizeof(val) - 1] = '\0';
    ck_assert_int_eq(apply_put(s, "first", val, 11), 0);
    /* Fill until "first" is evicted (sampled eviction: which round is not
     * fixed; 20 MiB through a 1 MiB store is far more than enough). */
    for (i = 0; i < 20000; i++) {
        struct store_item *it;

        snprintf(key, sizeof(key), "fill-%d", i);
        ck_assert_int_eq(apply_put(s, key, val, 1000 + (uint64_t)i), 0);
        if (i % 64 != 63) {
            continue;
        }
        it = store_peek(s, "first", 5, h("first")); /* a peek: a read would keep it */
        if (it == NULL) {
            break;
        }
        store_release(s, it);
    }
    store_get_stats(s, &st);
    ck_assert_uint_gt(st.evictions, 0);
    expect(s, "first", NULL);
    /* Refused, not answered OK: an eviction's CAS says nothing of which
     * write is newer (the primary must not count this copy). */
    ck_assert_int_eq(apply_put(s, "first", "old", 10), REPLICATE_REMOVED);
    expect(s, "first", NULL);
    ck_assert_int_eq(apply_put(s, "first", "new", 12), 0);
    expect(s, "first", "new");
    store_free(s);
}
END_TEST

/* An expiry too: the replica's copy (cas 11) expired, a late image of an
 * older write (cas 10, a longer TTL) must not re-create the key. */
START_TEST(test_tomb_expired)
{
    struct store *s = mkstore(64 * MIB, false);

    replicate_tomb_init(s, REPLICATE_TOMB_TTL_S);
    ck_assert_int_eq(apply_put_h(s, "x", h("x"), "short", 11, store_now(s) + 2), 0);
    store_clock_shift(s, 3);
    ck_assert_int_eq(apply_put_h(s, "x", h("x"), "long", 10, store_now(s) + 100),
                     REPLICATE_REMOVED);
    expect(s, "x", NULL);
    store_free(s);
}
END_TEST

/* A tombstone from another origin (another primary, or the same node in
 * another epoch) drops an older image but refuses it, naming its CAS; one
 * from the image's own origin drops it with OK (a later delete of that
 * primary overtook it). Origins are tags of (epoch, sender). */
START_TEST(test_tomb_origin)
{
    struct store *s = mkstore(64 * MIB, false);
    uint64_t      tcas = 0;
    int           err = 0;
    uint8_t       a1 = replicate_origin(1, "a"), b2 = replicate_origin(2, "b");
    uint8_t       a2 = replicate_origin(2, "a");

    ck_assert_uint_ne(a1, 0);
    ck_assert_uint_ne(a1, b2);
    ck_assert_uint_ne(a1, a2);
    replicate_tomb_init(s, REPLICATE_TOMB_TTL_S);
    replicate_apply_del(s, "k", 1, h("k"), 50, b2);
    {
        struct store_item *it = store_alloc(s, "k", 1, h("k"), 0, 0, 2, &err);

        ck_assert_ptr_nonnull(it);
        memcpy(store_item_value_mut(it), "v1", 2);
        ck_assert_int_eq(replicate_apply_put(s, it, 40, a1, &tcas), REPLICATE_REMOVED);
        ck_assert_uint_eq(tcas, 50);
        ck_assert_int_eq(replicate_apply_put(s, it, 45, b2, &tcas), 0);
        store_release(s, it);
    }
    expect(s, "k", NULL);
    store_free(s);
}
END_TEST

/* What a hook of store_put_import_newer / store_delete_older saw. */
struct hook_seen {
    int      calls;
    uint64_t hash, cas;
    bool     answer; /* covered's answer */
};

static bool
hook_cover(uint64_t hash, uint64_t cas, int64_t now, void *arg)
{
    struct hook_seen *hs = arg;

    (void)now;
    hs->calls++;
    hs->hash = hash;
    hs->cas = cas;
    return hs->answer;
}

static void
hook_removed(uint64_t hash, uint64_t cas, int64_t now, void *arg)
{
    (void)hook_cover(hash, cas, now, arg);
}

/* An image of key=val with the primary's cas through the one-lookup entry
 * point; mflags set on the item before it goes in. */
static int
import_newer(struct store *s, const char *key, const char *val, uint64_t cas, int64_t exptime,
             uint8_t mflags, struct hook_seen *hs)
{
    int                err = 0, rc;
    size_t             n = strlen(val);
    struct store_item *it =
        store_import_alloc_meta(s, key, strlen(key), h(key), 0, exptime, n, mflags, 0, &err);

    ck_assert_ptr_nonnull(it);
    memcpy(store_item_value_mut(it), val, n);
    rc = store_put_import_newer(s, it, cas, hook_cover, hs);
    store_release(s, it);
    return rc;
}

/* The replica's store step: decide by the held CAS (the hook is asked only
 * for an absent key), keep a win token of the same CAS, drop what a flush
 * covers, take an expired image as a delete, raise the CAS counter past
 * every image; the tombstone step deletes only what is not newer and calls
 * its hook exactly then. */
START_TEST(test_import_newer)
{
    struct store      *s = mkstore(64 * MIB, false);
    struct hook_seen   hs = { 0 };
    struct store_stats st;
    struct store_item *it;
    uint64_t           floor;

    /* Absent: the hook decides. */
    hs.answer = true;
    ck_assert_int_eq(import_newer(s, "k", "v1", 100, 0, 0, &hs), STORE_NOT_STORED);
    ck_assert_int_eq(hs.calls, 1);
    ck_assert_uint_eq(hs.hash, h("k"));
    ck_assert_uint_eq(hs.cas, 100);
    expect(s, "k", NULL);
    ck_assert_uint_gt(store_cas_next(s), 100); /* raised though dropped */
    hs.answer = false;
    ck_assert_int_eq(import_newer(s, "k", "v1", 100, 0, STORE_MF_WON, &hs), STORE_STORED);
    ck_assert_int_eq(hs.calls, 2);
    expect_h(s, "k", h("k"), "v1", 100);
    /* Present: ordered by its CAS, the hook not asked. */
    ck_assert_int_eq(import_newer(s, "k", "v0", 99, 0, 0, &hs), STORE_EXISTS);
    expect_h(s, "k", h("k"), "v1", 100);
    ck_assert_int_eq(import_newer(s, "k", "v1b", 100, 0, 0, &hs), STORE_STORED);
    ck_assert_int_eq(hs.calls, 2);
    it = store_peek(s, "k", 1, h("k"));
    ck_assert_ptr_nonnull(it);
    ck_assert_uint_eq(store_item_mflags(it) & STORE_MF_WON, STORE_MF_WON); /* kept */
    store_release(s, it);
    ck_assert_int_eq(import_newer(s, "k", "v2", 101, 0, 0, &hs), STORE_STORED);
    it = store_peek(s, "k", 1, h("k"));
    ck_assert_uint_eq(store_item_mflags(it) & STORE_MF_WON, 0); /* a newer write's own */
    store_release(s, it);
    /* An expired image deletes the key. */
    ck_assert_int_eq(import_newer(s, "k", "gone", 102, -1, 0, &hs), STORE_DELETED);
    expect(s, "k", NULL);
    /* A flush covers older images. */
    ck_assert_int_eq(import_newer(s, "f", "old", 103, 0, 0, &hs), STORE_STORED);
    store_flush(s, 0);
    floor = store_floor(s);
    ck_assert_int_eq(import_newer(s, "f", "older", floor - 1, 0, 0, &hs), STORE_NOT_STORED);
    expect(s, "f", NULL);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.imported, 4);

    /* Tombstones: a newer item stays and nothing is recorded. */
    ck_assert_int_eq(import_newer(s, "d", "v", floor + 10, 0, 0, &hs), STORE_STORED);
    hs.calls = 0;
    ck_assert_int_eq(store_delete_older(s, "d", 1, h("d"), floor + 9, hook_removed, &hs),
                     STORE_EXISTS);
    ck_assert_int_eq(hs.calls, 0);
    expect(s, "d", "v");
    ck_assert_int_eq(store_delete_older(s, "d", 1, h("d"), floor + 10, hook_removed, &hs),
                     STORE_DELETED);
    ck_assert_int_eq(hs.calls, 1);
    ck_assert_uint_eq(hs.cas, floor + 10);
    expect(s, "d", NULL);
    ck_assert_int_eq(store_delete_older(s, "d", 1, h("d"), floor + 500, hook_removed, &hs),
                     STORE_NOT_FOUND);
    ck_assert_int_eq(hs.calls, 2); /* an absent key's tombstone is recorded too */
    ck_assert_uint_gt(store_cas_next(s), floor + 500);
    store_free(s);
}
END_TEST

Suite *
replicate_suite(void)
{
    Suite *s = suite_create("replicate");
    TCase *tc = tcase_create("tombstones");

    tcase_add_test(tc, test_tomb_late_put);
    tcase_add_test(tc, test_tomb_absent);
    tcase_add_test(tc, test_tomb_expiry);
    tcase_add_test(tc, test_tomb_default_ttl);
    tcase_add_test(tc, test_tomb_full);
    tcase_add_test(tc, test_tomb_eviction);
    tcase_add_test(tc, test_tomb_expired);
    tcase_add_test(tc, test_tomb_origin);
    suite_add_tcase(s, tc);
    tc = tcase_create("import");
    tcase_add_test(tc, test_import_newer);
    suite_add_tcase(s, tc);
    return s;
}
