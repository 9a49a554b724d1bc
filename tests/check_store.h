/*
 * Helpers of the item store's suites (tests/check_store*.c): a store for a
 * test on either engine (RC_TEST_STORE), what an item is charged there,
 * set/get/expect of string values asserting as they go, a flood, a drop
 * hook's log.
 */
#ifndef TESTS_CHECK_STORE_H
#define TESTS_CHECK_STORE_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ring/ring.h"
#include "server/seg_item.h"
#include "server/store.h"

#define MIB (1024u * 1024u)

/* RC_TEST_STORE=compact runs the store's suites on the compact engine
 * (tests/check_store_compact.sh); the chained table otherwise. */
static inline bool
store_test_compact(void)
{
    const char *e = getenv("RC_TEST_STORE");

    return e != NULL && strcmp(e, "compact") == 0;
}

/*
 * Bytes the store charges to the bytes stat (and me's size) for an item
 * with this key and value and optional fields (SEG_RB_EXPTIME,
 * SEG_RB_FLAGS, SEG_RB_ECAS: a field that is 0 is not stored): the
 * record's size in a segment on the compact engine, the malloc'd item's
 * (store_item_size, the client CAS a tail of the value) on the chained
 * table.
 */
static inline size_t
item_bytes(size_t nkey, size_t nbytes, uint8_t has)
{
    if (store_test_compact()) {
        return seg_rec_size(has, nkey, (uint32_t)nbytes);
    }
    return store_item_size(nkey, nbytes + (has & SEG_RB_ECAS ? sizeof(uint64_t) : 0));
}

/* How many items of item_bytes(nkey, nbytes, 0) the store's limit holds
 * (limit_maxbytes: the compact engine's is whole segments, 256 KiB at
 * least, whatever the configured limit). */
static inline size_t
store_capacity(struct store *s, size_t nkey, size_t nbytes)
{
    struct store_stats st;

    store_get_stats(s, &st);
    return (size_t)(st.limit_maxbytes / item_bytes(nkey, nbytes, 0));
}

/* A store on the chained table or the compact engine. */
static inline struct store *
mkstore_on(size_t limit, bool sweeper, bool compact)
{
    struct store_config cfg = {
        .mem_limit = limit,
        .item_size_max = MIB,
        .sweeper = sweeper,
        .compact = compact,
    };
    struct store *s = store_new(&cfg);

    ck_assert_ptr_nonnull(s);
    return s;
}

/* A store on the engine the run is for (RC_TEST_STORE). */
static inline struct store *
mkstore(size_t limit, bool sweeper)
{
    return mkstore_on(limit, sweeper, store_test_compact());
}

static inline uint64_t
h(const char *key)
{
    return ring_hash(key, strlen(key));
}

/* Store key=val with op; returns the store result, *cas_out the new CAS. */
static inline int
put(struct store *s, enum store_op op, const char *key, const char *val, uint32_t flags,
    int64_t exptime, uint64_t cas_in, uint64_t *cas_out)
{
    int                err = 0, rc;
    size_t             n = strlen(val);
    struct store_item *it =
        store_alloc(s, key, strlen(key), h(key), flags, store_exptime(s, exptime), n, &err);

    if (it == NULL) {
        return err;
    }
    memcpy(store_item_value_mut(it), val, n);
    rc = store_put(s, it, op, cas_in, cas_out);
    store_release(s, it);
    return rc;
}

static inline int
set(struct store *s, const char *key, const char *val)
{
    return put(s, STORE_OP_SET, key, val, 0, 0, 0, NULL);
}

static inline struct store_item *
get(struct store *s, const char *key)
{
    return store_get(s, key, strlen(key), h(key));
}

/* Asserts the value under key (NULL = a miss). */
static inline void
expect(struct store *s, const char *key, const char *val)
{
    struct store_item *it = get(s, key);

    if (val == NULL) {
        ck_assert_msg(it == NULL, "%s: expected a miss, got a value", key);
        return;
    }
    ck_assert_msg(it != NULL, "%s: expected '%s', got a miss", key, val);
    ck_assert_uint_eq(it->nbytes, strlen(val));
    ck_assert_mem_eq(store_item_value(it), val, strlen(val));
    ck_assert_mem_eq(store_item_value(it) + it->nbytes, "\r\n", 2);
    store_release(s, it);
}

/* Write count keys prefix<i> of 100 bytes: eviction pressure. */
static inline void
flood(struct store *s, const char *prefix, int count)
{
    char key[32], val[101];
    int  i;

    memset(val, 'f', 100);
    val[100] = '\0';
    for (i = 0; i < count; i++) {
        snprintf(key, sizeof(key), "%s%d", prefix, i);
        ck_assert_int_eq(set(s, key, val), STORE_STORED);
    }
}

/* A drop hook's log (store_set_drop_hook(s, drops_fn, &d)): how often it
 * was told, and how often of each of n watched hashes (the caller's
 * arrays). */
struct drops {
    uint64_t  calls;
    int       n;
    uint64_t *hashes;
    unsigned *seen;
};

static inline void
drops_fn(uint64_t hash, uint64_t cas, int64_t now, void *arg)
{
    struct drops *d = arg;
    int           i;

    (void)cas;
    (void)now;
    d->calls++;
    for (i = 0; i < d->n; i++) {
        if (d->hashes[i] == hash) {
            d->seen[i]++;
        }
    }
}

/* Monotonic seconds, for a test's deadlines. */
static inline double
mono(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The eviction policy's cases (tests/check_store_evict.c), in store_suite. */
TCase *store_evict_tcase(void);
/* The expiry sweep's cases (tests/check_store_sweep.c), in store_range_suite. */
TCase *store_sweep_tcase(void);

#endif
