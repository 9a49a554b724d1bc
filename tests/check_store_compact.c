/*
 * store_compact_suite: store.h on the compact engine (server/store_seg.c,
 * store_seg_range.c), built explicitly (store_config.compact), whatever
 * RC_TEST_STORE says: a handoff walk while another thread evicts, the
 * expiry of whole segments, values up to -I, cache_memlimit, and the
 * replica's CAS merge. Time moves with store_clock_shift.
 */
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

/* Records of keys of 6-7 bytes and 100-byte values a store holds. */
static int
records_of(struct store *s)
{
    struct store_stats st;

    store_get_stats(s, &st);
    return (int)(st.limit_maxbytes / seg_rec_size(0, 7, 100));
}

/* ---- (i) eviction during a handoff walk --------------------------------- */

/* A thread writing keys prefix<5 digits> of 100 bytes of fill living ttl
 * seconds (0: forever), count of them or, with count < 0, until told to
 * stop; hashes (when not NULL) gets their hashes. A thread's writes go to
 * segments of its own, sealed when it exits. */
struct writer {
    struct store *s;
    const char   *prefix;
    long          count;
    int64_t       ttl;
    char          fill;
    uint64_t     *hashes;
    int           stop;
    long          done;
    const char   *err;
};

static void *
writer_main(void *arg)
{
    struct writer *w = arg;
    char           key[32], val[101];
    long           i;

    memset(val, w->fill, 100);
    val[100] = '\0';
    for (i = 0; i != w->count && !__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE); i++) {
        snprintf(key, sizeof(key), "%s%05ld", w->prefix, i);
        if (w->hashes != NULL) {
            w->hashes[i] = h(key);
        }
        if (put(w->s, STORE_OP_SET, key, val, 0, w->ttl, 0, NULL) != STORE_STORED) {
            w->err = "set failed";
            break;
        }
        __atomic_store_n(&w->done, i + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* The walk's half of the arc: hashes with the top bit clear. */
static bool
low_half(uint64_t hash, void *arg)
{
    (void)arg;
    return (hash >> 63) == 0;
}

/* An original key "r<6 digits>" -> its index, else -1. */
static int
orig_index(const char *key, size_t nkey)
{
    char buf[8];

    if (nkey != 7 || key[0] != 'r') {
        return -1;
    }
    memcpy(buf, key + 1, 6);
    buf[6] = '\0';
    return atoi(buf);
}

/* What the walk and the drain saw of the originals. */
struct walk_log {
    int       n;
    unsigned *visited, *tombs, *images;
    unsigned  bad_value;
};

static void
walk_log_fn(struct store_item *it, void *arg)
{
    struct walk_log *w = arg;
    int              i = orig_index(store_item_key(it), it->nkey);
    char             want = i >= 0 ? (char)('a' + i % 26) : 'f';

    if (!low_half(it->hash, NULL) || it->nbytes != 100 || store_item_value(it)[0] != want ||
        store_item_value(it)[99] != want) {
        w->bad_value++;
    }
    if (i >= 0 && i < w->n) {
        w->visited[i]++;
    }
}

static void
drain_log_fn(const char *key, size_t nkey, uint64_t hash, struct store_item *it, void *arg)
{
    struct walk_log *w = arg;
    int              i = orig_index(key, nkey);

    (void)hash;
    if (i >= 0 && i < w->n) {
        (it == NULL ? w->tombs : w->images)[i]++;
    }
}

/* A walk of half the ring in small steps while another thread floods
 * twice the cache: every original key still present at the end (so
 * present and unchanged all along: nobody writes them, an evicted one
 * never comes back) was visited, every value visited is whole, and each
 * original of the range that was evicted drains once, as a tombstone. */
START_TEST(test_walk_while_evicting)
{
    struct store       *s = mkstore_on(4 * MIB, false, true);
    int                 cap = records_of(s), n = cap / 2, i, matching = 0, present = 0, gone = 0;
    struct walk_log     w = { n, calloc(n, sizeof(unsigned)), calloc(n, sizeof(unsigned)),
                              calloc(n, sizeof(unsigned)), 0 };
    struct writer       f = { .s = s, .prefix = "fl", .count = -1, .fill = 'f' };
    struct store_cursor cur;
    struct store_stats  st;
    struct store_item  *it;
    pthread_t           th;
    char                key[16], val[101];
    long                per_step;
    double              deadline = mono() + 40;
    int                 more;

    ck_assert_ptr_nonnull(w.visited);
    ck_assert_ptr_nonnull(w.tombs);
    ck_assert_ptr_nonnull(w.images);
    for (i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "r%06d", i);
        memset(val, 'a' + i % 26, 100);
        val[100] = '\0';
        ck_assert_int_eq(set(s, key, val), STORE_STORED);
        matching += low_half(h(key), NULL);
        if (i < 300) { /* read often: kept through the flood */
            expect(s, key, val);
            expect(s, key, val);
        }
    }
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.evictions, 0);
    per_step = 2L * cap / (matching / 50 + 1);
    ck_assert_int_eq(store_track_start(s, low_half, NULL), 0);
    ck_assert_int_eq(pthread_create(&th, NULL, writer_main, &f), 0);
    store_cursor_init(&cur);
    do {
        long target = __atomic_load_n(&f.done, __ATOMIC_ACQUIRE) + per_step;

        more = store_walk(s, &cur, low_half, NULL, walk_log_fn, &w, 50);
        while (__atomic_load_n(&f.done, __ATOMIC_ACQUIRE) < target && f.err == NULL &&
               mono() < deadline) {
            sched_yield();
        }
    } while (more == 1 && mono() < deadline);
    __atomic_store_n(&f.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    ck_assert_msg(f.err == NULL, "writer: %s", f.err);
    ck_assert_msg(more == 0, "the walk did not finish in 40 s");
    ck_assert_uint_eq(w.bad_value, 0);
    store_get_stats(s, &st);
    ck_assert_uint_gt(st.evictions, (uint64_t)n / 2);
    while (store_track_drain(s, drain_log_fn, &w, 1000) > 0) {
    }
    ck_assert(!store_track_lost(s));
    for (i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "r%06d", i);
        if (!low_half(h(key), NULL)) {
            ck_assert_uint_eq(w.visited[i] + w.tombs[i] + w.images[i], 0);
            continue;
        }
        it = store_peek(s, key, 7, h(key));
        if (it != NULL) {
            store_release(s, it);
            present++;
            ck_assert_msg(w.visited[i] == 1, "%s present all along, visited %u times", key,
                          w.visited[i]);
            ck_assert_uint_eq(w.tombs[i], 0);
        } else {
            gone++;
            ck_assert_msg(w.tombs[i] == 1, "%s evicted, drained %u tombstones", key, w.tombs[i]);
            ck_assert_uint_eq(w.images[i], 0);
        }
    }
    ck_assert_int_gt(present, 0);
    ck_assert_int_gt(gone, 0);
    store_track_stop(s);
    free(w.visited);
    free(w.tombs);
    free(w.images);
    store_free(s);
}
END_TEST

/* ---- (ii) a whole segment's TTL ------------------------------------------ */

/* Many items with the same short TTL, written first (so their segments
 * are the oldest), then live ones; past the TTL, new writes empty the
 * expired segments first: every expired item is reclaimed (counted,
 * told to the drop hook once, unfetched), and the room they leave takes
 * the new writes without evicting a live item. */
START_TEST(test_ttl_segments)
{
    enum {
        M = 2000,
        P = 500
    };
    struct store *s = mkstore_on(MIB, false, true);
    uint64_t     *hashes = calloc(M, sizeof(uint64_t));
    unsigned     *seen = calloc(M, sizeof(unsigned));
    struct drops  d = { .n = M, .hashes = hashes, .seen = seen };
    struct writer tw = {
        .s = s, .prefix = "t", .count = M, .ttl = 30, .fill = 't', .hashes = hashes
    };
    struct store_stats st;
    pthread_t          th;
    char               key[16], val[101];
    int                i, q;

    ck_assert_ptr_nonnull(hashes);
    ck_assert_ptr_nonnull(seen);
    memset(val, 'v', 100);
    val[100] = '\0';
    store_set_drop_hook(s, drops_fn, &d);
    /* by a thread of their own: its segments hold nothing else, and its
     * exit seals the last one */
    ck_assert_int_eq(pthread_create(&th, NULL, writer_main, &tw), 0);
    pthread_join(th, NULL);
    ck_assert_msg(tw.err == NULL, "writer: %s", tw.err);
    ck_assert_int_eq(tw.done, M);
    for (i = M; i < M + P; i++) {
        snprintf(key, sizeof(key), "p%05d", i);
        ck_assert_int_eq(set(s, key, val), STORE_STORED);
    }
    store_clock_shift(s, 31);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.curr_items, M + P); /* nothing reclaims them by itself */
    ck_assert_uint_eq(st.reclaimed, 0);
    for (q = 0; st.reclaimed < M && q < 2 * records_of(s); q++) {
        snprintf(key, sizeof(key), "n%05d", q);
        ck_assert_int_eq(set(s, key, val), STORE_STORED);
        store_get_stats(s, &st);
    }
    ck_assert_uint_eq(st.reclaimed, M);
    ck_assert_uint_eq(st.expired_unfetched, M);
    ck_assert_uint_eq(st.evictions, 0);
    ck_assert_uint_eq(st.curr_items, (uint64_t)(P + q));
    ck_assert_uint_eq(d.calls, M);
    for (i = 0; i < M; i++) {
        ck_assert_uint_eq(seen[i], 1);
    }
    for (i = M; i < M + P; i++) {
        snprintf(key, sizeof(key), "p%05d", i);
        expect(s, key, val);
    }
    snprintf(key, sizeof(key), "t%05d", 0);
    expect(s, key, NULL);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.get_expired, 0); /* gone before any read met it */
    free(hashes);
    free(seen);
    store_free(s);
}
END_TEST

/* ---- (iii) values up to -I ----------------------------------------------- */

/* The bytes big_roundtrip stores under seed. */
static void
big_pattern(char *v, size_t n, unsigned seed)
{
    size_t i;

    for (i = 0; i < n; i++) {
        v[i] = (char)(seed + i * 131 + (i >> 9));
    }
}

/* Store key with a value of n bytes from seed, read it back byte-exact. */
static void
big_roundtrip(struct store *s, const char *key, size_t n, unsigned seed)
{
    struct store_item *it;
    char              *want = malloc(n + 1);
    size_t             i;
    int                err = 0;

    ck_assert_ptr_nonnull(want);
    big_pattern(want, n, seed);
    it = store_alloc(s, key, strlen(key), h(key), seed, 0, n, &err);
    ck_assert_msg(it != NULL, "%s: alloc of %zu bytes failed (%d)", key, n, err);
    memcpy(store_item_value_mut(it), want, n);
    ck_assert_int_eq(store_put(s, it, STORE_OP_SET, 0, NULL), STORE_STORED);
    store_release(s, it);
    it = get(s, key);
    ck_assert_msg(it != NULL, "%s: %zu bytes not read back", key, n);
    ck_assert_uint_eq(it->nbytes, n);
    ck_assert_uint_eq(it->flags, seed);
    if (memcmp(store_item_value(it), want, n) != 0) {
        for (i = 0; store_item_value(it)[i] == want[i]; i++) {
        }
        ck_abort_msg("%s: byte %zu of %zu differs", key, i, n);
    }
    ck_assert_mem_eq(store_item_value(it) + n, "\r\n", 2);
    store_release(s, it);
    free(want);
}

/* Values from 0 bytes to the largest -I allows, at a limit of 8 MiB
 * (segments of 128 KiB: over 32 KiB a value is a jumbo) and of 1.5 MiB
 * (segments of 16 KiB, 96 of them: a jumbo of 1 MiB takes 64); small over
 * large and back; an append across the jumbo threshold. */
START_TEST(test_large_values)
{
    static const size_t limits[] = { 8 * MIB, 3 * MIB / 2 };
    static const size_t sizes[] = { 0,          1,         100,        4000,      4200,
                                    16 * 1024,  40 * 1024, 200 * 1024, 300000,    700 * 1024,
                                    MIB - 1024, 100,       MIB - 1024, 50 * 1024, 0 };
    size_t              l, i;
    char                key[32];

    for (l = 0; l < sizeof(limits) / sizeof(limits[0]); l++) {
        struct store      *s = mkstore_on(limits[l], false, true);
        struct store_stats st;
        struct store_item *it;
        char               part[3001];

        store_get_stats(s, &st);
        ck_assert_uint_eq(st.limit_maxbytes, limits[l]);
        for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            snprintf(key, sizeof(key), "big%zu", i % 4); /* overwrites too */
            big_roundtrip(s, key, sizes[i], (unsigned)(i * 7 + l));
            store_get_stats(s, &st);
            ck_assert_uint_le(st.mem_used, st.limit_maxbytes);
        }
        /* 3000 bytes, then 3000 more: 6000 is a jumbo on 16 KiB segments */
        memset(part, 'a', 3000);
        part[3000] = '\0';
        ck_assert_int_eq(set(s, "grow", part), STORE_STORED);
        memset(part, 'b', 3000);
        ck_assert_int_eq(put(s, STORE_OP_APPEND, "grow", part, 0, 0, 0, NULL), STORE_STORED);
        it = get(s, "grow");
        ck_assert_ptr_nonnull(it);
        ck_assert_uint_eq(it->nbytes, 6000);
        ck_assert_int_eq(store_item_value(it)[2999], 'a');
        ck_assert_int_eq(store_item_value(it)[3000], 'b');
        ck_assert_int_eq(store_item_value(it)[5999], 'b');
        store_release(s, it);
        store_free(s);
    }
}
END_TEST

/* ---- (iv) cache_memlimit ------------------------------------------------- */

/* Write count values of 4000 bytes, checking after each that bytes stay
 * within max. */
static void
flood_4k(struct store *s, const char *prefix, int count, uint64_t max)
{
    struct store_stats st;
    char               key[32];
    static char        val[4001];
    int                i;

    memset(val, 'm', 4000);
    for (i = 0; i < count; i++) {
        snprintf(key, sizeof(key), "%s%d", prefix, i);
        ck_assert_int_eq(set(s, key, val), STORE_STORED);
        if (i % 16 == 0 || i == count - 1) {
            store_get_stats(s, &st);
            ck_assert_uint_le(st.bytes, max);
            ck_assert_uint_le(st.mem_used, max);
        }
    }
}

/* A lower limit at run time holds bytes under it from then on (the
 * engine gives segments back at once); raising it back lets the store
 * grow past the lower one again. */
START_TEST(test_mem_limit)
{
    struct store      *s = mkstore_on(32 * MIB, false, true);
    struct store_stats st;

    flood_4k(s, "a", 24 * 256, 32 * MIB); /* 24 MiB */
    store_get_stats(s, &st);
    ck_assert_uint_gt(st.bytes, 16 * MIB);
    store_set_mem_limit(s, 8 * MIB);
    store_get_stats(s, &st);
    ck_assert_uint_le(st.limit_maxbytes, 8 * MIB);
    ck_assert_uint_le(st.bytes, 8 * MIB);
    flood_4k(s, "b", 16 * 256, 8 * MIB);
    store_get_stats(s, &st);
    ck_assert_uint_gt(st.evictions, 0);
    ck_assert_uint_gt(st.bytes, 4 * MIB); /* still caching */
    store_set_mem_limit(s, 32 * MIB);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.limit_maxbytes, 32 * MIB);
    flood_4k(s, "c", 24 * 256, 32 * MIB);
    store_get_stats(s, &st);
    ck_assert_uint_gt(st.bytes, 16 * MIB);
    store_free(s);
}
END_TEST

/* ---- (vi) the last access, kept as a distance from the CAS ------------- */

static void
set1(struct store *s, const char *key)
{
    struct store_item *it = store_alloc(s, key, strlen(key), h(key), 0, 0, 1, NULL);

    ck_assert_ptr_nonnull(it);
    memcpy(store_item_value_mut(it), "v", 1);
    ck_assert_int_eq(store_put(s, it, STORE_OP_SET, 0, NULL), STORE_STORED);
    store_release(s, it);
}

/* la through the store (seg_item.h keeps atime in 2 bytes from the CAS's
 * second): exact over hours, and after a bump in place; an import whose
 * CAS a peer minted 50 s in our future (its atime is older than the CAS:
 * a u32 record) or an hour ago (a u16 one) keeps the access time it was
 * given; a bump while the clock reads before the CAS's second reads la 0,
 * not a wrap to 2^32 - 10. */
START_TEST(test_atime_la)
{
    struct store       *s = mkstore_on(64 * MIB, false, true);
    struct store_mdebug md;
    struct store_item  *it;
    int64_t             now = store_now(s);

    set1(s, "own");
    set1(s, "early");
    ck_assert_int_eq(
        store_import(s, "ahead", 5, h("ahead"), 0, 0, store_cas_clock((now + 50) * 1000), "a", 1),
        STORE_STORED);
    ck_assert_int_eq(store_import(s, "behind", 6, h("behind"), 0, 0,
                                  store_cas_clock((now - 3600) * 1000), "b", 1),
                     STORE_STORED);
    ck_assert(store_mdebug(s, "ahead", 5, h("ahead"), &md));
    ck_assert_uint_eq(md.la, 0);
    store_clock_shift(s, 3 * 3600);
    ck_assert(store_mdebug(s, "own", 3, h("own"), &md));
    ck_assert_uint_eq(md.la, 3 * 3600);
    it = store_get(s, "own", 3, h("own")); /* a bump: la 0 */
    ck_assert_ptr_nonnull(it);
    store_release(s, it);
    store_clock_shift(s, 7);
    ck_assert(store_mdebug(s, "own", 3, h("own"), &md));
    ck_assert_uint_eq(md.la, 7);
    ck_assert(store_mdebug(s, "behind", 6, h("behind"), &md));
    ck_assert_uint_eq(md.la, 3 * 3600 + 7);
    ck_assert(store_mdebug(s, "ahead", 5, h("ahead"), &md));
    ck_assert_uint_eq(md.la, 3 * 3600 + 7);
    store_clock_shift(s, -(3 * 3600 + 7) - 10); /* 10 s before "early" was written */
    it = store_get(s, "early", 5, h("early"));
    ck_assert_ptr_nonnull(it);
    store_release(s, it);
    ck_assert(store_mdebug(s, "early", 5, h("early"), &md));
    ck_assert_uint_eq(md.la, 0);
    store_free(s);
}
END_TEST

/* ---- (v) the replica's CAS merge ----------------------------------------- */

/* The removals a replica recorded (store_delete_older's hook) and the
 * question store_put_import_newer asks of an absent key: was it removed
 * at a CAS at least the image's? */
struct tomb_log {
    uint64_t hash, cas; /* the newest removal; cas 0: none */
    int      removed_calls;
};

static void
tomb_removed(uint64_t hash, uint64_t cas, int64_t now, void *arg)
{
    struct tomb_log *t = arg;

    (void)now;
    t->removed_calls++;
    if (cas > t->cas) {
        t->hash = hash;
        t->cas = cas;
    }
}

static bool
tomb_covers(uint64_t hash, uint64_t cas, int64_t now, void *arg)
{
    const struct tomb_log *t = arg;

    (void)now;
    return t->cas != 0 && t->hash == hash && t->cas >= cas;
}

/* One replication record for key "m" and what the key holds after it. */
static const struct merge_step {
    bool        tomb;  /* a tombstone (store_delete_older), else an image */
    uint64_t    cas;   /* above the base */
    const char *val;   /* the image's value */
    size_t      large; /* > 0: a value of that many bytes instead */
    int         rc;
    uint64_t    held_cas; /* 0: absent after */
} merge_steps[] = {
    { false, 10, "a", 0, STORE_STORED, 10 },
    { false, 9, "older", 0, STORE_EXISTS, 10 },      /* the higher CAS stays */
    { false, 20, NULL, 300000, STORE_STORED, 20 },   /* a jumbo image */
    { false, 15, "late", 0, STORE_EXISTS, 20 },      /* older than the jumbo */
    { true, 19, NULL, 0, STORE_EXISTS, 20 },         /* an older tombstone is refused */
    { false, 20, "same", 0, STORE_STORED, 20 },      /* the same write again */
    { true, 25, NULL, 0, STORE_DELETED, 0 },         /* a newer one deletes */
    { false, 24, "before", 0, STORE_NOT_STORED, 0 }, /* covered by it */
    { true, 30, NULL, 0, STORE_NOT_FOUND, 0 },       /* absent: still recorded */
    { false, 31, "b", 0, STORE_STORED, 31 },
};

/* The value a stored merge step wrote, into it. */
static void
merge_value(const struct merge_step *m, struct store_item *it)
{
    size_t n = m->large > 0 ? m->large : strlen(m->val);

    memset(store_item_value_mut(it), 'J', n);
    if (m->large == 0) {
        memcpy(store_item_value_mut(it), m->val, n);
    }
}

/* Is it what step m stored? */
static bool
merge_holds(const struct merge_step *m, const struct store_item *it)
{
    size_t n = m->large > 0 ? m->large : strlen(m->val), i;

    if (it->nbytes != n) {
        return false;
    }
    for (i = 0; m->large > 0 && i < n; i++) {
        if (store_item_value(it)[i] != 'J') {
            return false;
        }
    }
    return m->large > 0 || memcmp(store_item_value(it), m->val, n) == 0;
}

/* The merge on the compact engine, step by step: the result, what the key
 * holds (the CAS and value of the last image stored), the removals
 * recorded, and the CAS counter past every CAS seen. */
START_TEST(test_cas_merge)
{
    struct store            *s = mkstore_on(8 * MIB, false, true);
    struct tomb_log          t = { 0 };
    const uint64_t           base = store_cas_next(s) + 1000;
    const struct merge_step *held = NULL;
    size_t                   i;
    int                      removals = 0;

    for (i = 0; i < sizeof(merge_steps) / sizeof(merge_steps[0]); i++) {
        const struct merge_step *m = &merge_steps[i];
        struct store_item       *it;
        int                      rc, err = 0;

        if (m->tomb) {
            rc = store_delete_older(s, "m", 1, h("m"), base + m->cas, tomb_removed, &t);
            removals += rc != STORE_EXISTS;
        } else {
            it = store_import_alloc(s, "m", 1, h("m"), 0, 0,
                                    m->large > 0 ? m->large : strlen(m->val), &err);
            ck_assert_ptr_nonnull(it);
            merge_value(m, it);
            rc = store_put_import_newer(s, it, base + m->cas, tomb_covers, &t);
            store_release(s, it);
        }
        ck_assert_msg(rc == m->rc, "step %zu: %d, want %d", i, rc, m->rc);
        held = rc == STORE_STORED ? m : m->held_cas == 0 ? NULL : held;
        ck_assert_int_eq(t.removed_calls, removals);
        ck_assert_uint_gt(store_cas_next(s), base + m->cas);
        it = store_peek(s, "m", 1, h("m"));
        if (m->held_cas == 0) {
            ck_assert_msg(it == NULL, "step %zu: the key should be absent", i);
            continue;
        }
        ck_assert_msg(it != NULL, "step %zu: the key should be held", i);
        ck_assert_uint_eq(it->cas, base + m->held_cas);
        ck_assert_ptr_nonnull(held);
        ck_assert_msg(merge_holds(held, it), "step %zu: not the value of the last image stored", i);
        store_release(s, it);
    }
    store_free(s);
}
END_TEST

Suite *
store_compact_suite(void)
{
    Suite *s = suite_create("store_compact");
    TCase *tc = tcase_create("store_compact");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_walk_while_evicting);
    tcase_add_test(tc, test_ttl_segments);
    tcase_add_test(tc, test_large_values);
    tcase_add_test(tc, test_mem_limit);
    tcase_add_test(tc, test_cas_merge);
    tcase_add_test(tc, test_atime_la);
    suite_add_tcase(s, tc);
    return s;
}
