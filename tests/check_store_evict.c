/*
 * store_evict tcase (part of store_suite): the eviction policy of
 * server/store_evict.c. Keys read once are evicted before keys read
 * often; a key evicted unread and stored again enters the main FIFO (the
 * ghost); dead items are reclaimed, not evicted; a held item can be
 * evicted; eviction during a handoff walk with dirty tracking on.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store.h"
#include "server/store_internal.h"
#include "tests/check_store.h"

#define VAL100                                                                                     \
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" \
    "xxxxxxxx"
_Static_assert(sizeof(VAL100) == 101, "VAL100 is 100 bytes");

static void
key_of(char *buf, size_t n, const char *prefix, int i)
{
    snprintf(buf, n, "%s%05d", prefix, i);
}

static bool
present(struct store *s, const char *key)
{
    struct store_item *it = store_peek(s, key, strlen(key), h(key));

    if (it != NULL) {
        store_release(s, it);
    }
    return it != NULL;
}

/* A scan of one-hit keys ten times the cache does not push out keys read
 * twice (plain LRU would evict them all: nothing reads them during the
 * scan). The cache is N items on the chained table, what the compact
 * engine's segments hold on it. */
START_TEST(test_one_hit_scan)
{
    enum {
        N = 400,
        HOT = 100
    };
    struct store      *s = mkstore(store_item_size(8, 100) * N, false);
    struct store_stats st;
    char               key[16];
    int                i, hot_left = 0, scan = 10 * (int)store_capacity(s, 8, 100);

    for (i = 0; i < HOT; i++) {
        key_of(key, sizeof(key), "hot", i);
        ck_assert_int_eq(set(s, key, VAL100), STORE_STORED);
        expect(s, key, VAL100);
        expect(s, key, VAL100);
    }
    for (i = 0; i < scan; i++) {
        key_of(key, sizeof(key), "one", i);
        ck_assert_int_eq(set(s, key, VAL100), STORE_STORED);
    }
    for (i = 0; i < HOT; i++) {
        key_of(key, sizeof(key), "hot", i);
        hot_left += present(s, key);
    }
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.evictions + st.curr_items, HOT + scan);
    if (!store_test_compact()) {
        ck_assert_uint_eq(st.evictions, HOT + scan - N);
    }
    ck_assert_int_eq(hot_left, HOT);
    store_free(s);
}
END_TEST

static bool
in_main(struct store *s, const char *key)
{
    struct store_item *it = store_peek(s, key, strlen(key), h(key));
    bool               m;

    ck_assert_ptr_nonnull(it);
    m = (it->gen & IF_MAIN) != 0;
    store_release(s, it);
    return m;
}

/* A key evicted unread is remembered (the ghost): stored again, it goes
 * straight to the main FIFO, and outlives a second flood of new keys
 * that pushes out a key written with it that is not a ghost (a deleted
 * key is not one). On the chained table the item's queue is visible
 * (IF_MAIN) and an overwrite keeps the key's place; the compact engine
 * writes a ghost into its main open segment. */
START_TEST(test_ghost)
{
    enum {
        N = 20
    };
    struct store *s = mkstore(store_item_size(8, 100) * N, false);
    bool          classic = !store_test_compact();
    char          key[16];
    int           i, flood = 2 * (int)store_capacity(s, 8, 100);

    ck_assert_int_eq(set(s, "ghost000", VAL100), STORE_STORED);
    ck_assert_int_eq(set(s, "deleted0", VAL100), STORE_STORED);
    ck_assert(!classic || !in_main(s, "ghost000"));
    ck_assert_int_eq(store_delete(s, "deleted0", 8, h("deleted0")), STORE_DELETED);
    store_clock_shift(s, 10); /* the oldest: the first to go */
    for (i = 0; i < flood; i++) {
        key_of(key, sizeof(key), "fil", i);
        ck_assert_int_eq(set(s, key, VAL100), STORE_STORED);
    }
    ck_assert(!present(s, "ghost000"));
    ck_assert_int_eq(set(s, "ghost000", VAL100), STORE_STORED);
    ck_assert(!classic || in_main(s, "ghost000"));
    ck_assert_int_eq(set(s, "deleted0", VAL100), STORE_STORED);
    ck_assert(!classic || !in_main(s, "deleted0"));
    if (classic) {
        /* overwritten: still in the main FIFO */
        ck_assert_int_eq(set(s, "ghost000", "other"), STORE_STORED);
        ck_assert(in_main(s, "ghost000"));
    }
    for (i = 0; i < flood; i++) {
        key_of(key, sizeof(key), "two", i);
        ck_assert_int_eq(set(s, key, VAL100), STORE_STORED);
    }
    ck_assert(present(s, "ghost000"));
    ck_assert(!present(s, "deleted0"));
    store_free(s);
}
END_TEST

/* Eviction that meets a dead item (expired, flushed) reclaims it instead
 * (counted in reclaimed, not evictions, and never reported as an
 * eviction). On the chained table one removal makes room for one item of
 * the same size; on the compact engine a flood that cycles the whole
 * cache meets every expired record, read or not. */
START_TEST(test_dead_reclaimed)
{
    enum {
        N = 200
    };
    struct store      *s = mkstore(store_item_size(8, 100) * N, false);
    bool               compact = store_test_compact();
    int                cap = (int)store_capacity(s, 8, 100);
    int                n = compact ? cap * 6 / 10 : N, flood = compact ? 2 * cap : N / 2;
    struct store_stats st;
    char               key[16];
    int                i;

    for (i = 0; i < n / 2; i++) {
        key_of(key, sizeof(key), "ttl", i);
        ck_assert_int_eq(put(s, STORE_OP_SET, key, VAL100, 0, 10, 0, NULL), STORE_STORED);
        expect(s, key, VAL100); /* read: promoted on its way out */
        key_of(key, sizeof(key), "liv", i);
        ck_assert_int_eq(set(s, key, VAL100), STORE_STORED);
    }
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.evictions, 0);
    store_clock_shift(s, 20);
    for (i = 0; i < flood; i++) {
        key_of(key, sizeof(key), "new", i);
        ck_assert_int_eq(set(s, key, VAL100), STORE_STORED);
    }
    store_get_stats(s, &st);
    ck_assert_uint_gt(st.reclaimed, 0);
    ck_assert_uint_eq(st.curr_items + st.evictions + st.reclaimed, n / 2 * 2 + flood);
    if (compact) {
        ck_assert_uint_eq(st.reclaimed, n / 2);
    } else {
        ck_assert_uint_eq(st.evictions + st.reclaimed, N / 2);
        ck_assert_uint_eq(st.curr_items, N);
    }
    for (i = 0; i < n / 2; i++) {
        key_of(key, sizeof(key), "ttl", i);
        expect(s, key, NULL);
    }

    /* a flush: every item is dead, reclaimed as the flood meets it */
    store_reset_stats(s);
    store_flush(s, 0);
    store_clock_shift(s, 10);
    for (i = 0; i < n; i++) {
        key_of(key, sizeof(key), "aft", i);
        ck_assert_int_eq(set(s, key, VAL100), STORE_STORED);
    }
    store_get_stats(s, &st);
    ck_assert_uint_gt(st.reclaimed, compact ? 0 : N / 2);
    if (compact) {
        /* the oldest segments are all dead: nothing live goes; flushed
         * records not met yet are still linked (and misses) */
        ck_assert_uint_eq(st.evictions, 0);
        ck_assert_uint_ge(st.curr_items, n);
        for (i = 0; i < n; i++) {
            key_of(key, sizeof(key), "aft", i);
            ck_assert(present(s, key));
        }
    } else {
        ck_assert_uint_eq(st.curr_items, n);
    }
    store_free(s);
}
END_TEST

/* A held item (a reply being written) is evicted like any other: its
 * bytes stay readable. On the chained table they stay charged and come
 * back with the last reference; a compact store's holder has a copy of
 * its own, never charged against the segments. */
START_TEST(test_evict_held)
{
    enum {
        N = 10
    };
    size_t             isz = store_item_size(8, 100);
    struct store      *s = mkstore(isz * N, false);
    bool               compact = store_test_compact();
    struct store_stats st;
    struct store_item *held;
    char               key[16];
    int                i, flood = 4 * (int)store_capacity(s, 8, 100);
    uint64_t           used;

    ck_assert_int_eq(set(s, "held0000", VAL100), STORE_STORED);
    held = store_peek(s, "held0000", 8, h("held0000"));
    ck_assert_ptr_nonnull(held);
    for (i = 0; i < flood; i++) {
        key_of(key, sizeof(key), "fil", i);
        ck_assert_int_eq(set(s, key, VAL100), STORE_STORED);
        store_get_stats(s, &st);
        ck_assert_uint_le(st.mem_used, compact ? st.limit_maxbytes : isz * N);
    }
    ck_assert(!present(s, "held0000"));
    ck_assert_mem_eq(store_item_value(held), VAL100 "\r\n", 102);
    store_get_stats(s, &st);
    used = st.mem_used;
    if (!compact) {
        ck_assert_uint_eq(st.curr_items, N - 1); /* the held bytes are still charged */
    }
    store_release(s, held);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.mem_used, compact ? used : isz * (N - 1));
    store_free(s);
}
END_TEST

struct walk_seen {
    char (*keys)[16];
    int n, cap;
};

static void
walk_fn(struct store_item *it, void *arg)
{
    struct walk_seen *w = arg;

    if (w->n < w->cap) {
        memcpy(w->keys[w->n], store_item_key(it), it->nkey);
        w->keys[w->n][it->nkey] = '\0';
        w->n++;
    }
}

static bool
every_hash(uint64_t hash, void *arg)
{
    (void)hash;
    (void)arg;
    return true;
}

struct drained {
    int tombstones, images;
};

static void
drain_fn(const char *key, size_t nkey, uint64_t hash, struct store_item *it, void *arg)
{
    struct drained *d = arg;

    (void)key;
    (void)nkey;
    (void)hash;
    if (it == NULL) {
        d->tombstones++;
    } else {
        d->images++;
    }
}

/* Evictions between the steps of a handoff walk: the walk completes, every
 * item it returns was live, every key present from start to end is
 * visited, and each evicted key is recorded by dirty tracking and drained
 * as a tombstone. The store starts 300 items full on the chained table,
 * 60% full on the compact engine, and each walk step writes 10 more. */
START_TEST(test_evict_during_walk)
{
    enum {
        N = 300
    };
    struct store       *s = mkstore(store_item_size(8, 100) * N, false);
    int                 n = store_test_compact() ? (int)store_capacity(s, 8, 100) * 6 / 10 : N;
    struct store_cursor cur;
    struct walk_seen    w = { .cap = 4 * n };
    struct drained      d = { 0 };
    struct store_stats  st;
    char                key[16];
    int                 i, more, step = 0, kept_seen = 0, old_gone = 0;

    w.keys = calloc((size_t)w.cap, sizeof(*w.keys));
    ck_assert_ptr_nonnull(w.keys);
    for (i = 0; i < n; i++) {
        key_of(key, sizeof(key), "old", i);
        ck_assert_int_eq(set(s, key, VAL100), STORE_STORED);
        if (i < 50) {
            expect(s, key, VAL100); /* read: kept through the flood */
        }
    }
    ck_assert_int_eq(store_track_start(s, every_hash, NULL), 0);
    store_cursor_init(&cur);
    do {
        more = store_walk(s, &cur, NULL, NULL, walk_fn, &w, 10);
        for (i = 0; i < 10; i++) {
            key_of(key, sizeof(key), "new", step * 10 + i);
            ck_assert_int_eq(set(s, key, VAL100), STORE_STORED);
        }
        step++;
    } while (more == 1);
    store_get_stats(s, &st);
    ck_assert_uint_gt(st.evictions, 0);
    for (i = 0; i < 50; i++) {
        int j;

        key_of(key, sizeof(key), "old", i);
        ck_assert(present(s, key));
        for (j = 0; j < w.n; j++) {
            if (strcmp(w.keys[j], key) == 0) {
                kept_seen++;
                break;
            }
        }
    }
    ck_assert_int_eq(kept_seen, 50);
    for (i = 50; i < n; i++) {
        key_of(key, sizeof(key), "old", i);
        old_gone += !present(s, key);
    }
    ck_assert_int_gt(old_gone, 0);
    while (store_track_drain(s, drain_fn, &d, 64) > 0) {
    }
    /* each evicted old key is a tombstone; each new key is a post-image
     * or, evicted since, a tombstone too */
    ck_assert_int_ge(d.tombstones, old_gone);
    ck_assert_int_eq(d.tombstones + d.images, old_gone + step * 10);
    ck_assert(!store_track_lost(s));
    store_track_stop(s);
    free(w.keys);
    store_free(s);
}
END_TEST

/* See tests/check_store.h. */
TCase *
store_evict_tcase(void)
{
    TCase *tc = tcase_create("store_evict");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_one_hit_scan);
    tcase_add_test(tc, test_ghost);
    tcase_add_test(tc, test_dead_reclaimed);
    tcase_add_test(tc, test_evict_held);
    tcase_add_test(tc, test_evict_during_walk);
    return tc;
}
