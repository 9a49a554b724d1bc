/*
 * seg suite: the compact item engine (server/seg.c, seg_index.c,
 * seg_item.h). The record codec for every field combination and size;
 * put/get/delete/overwrite/touch/walk; index growth; eviction (counts
 * consistent with what reads back, S3-FIFO against a one-hit scan, expired
 * records reclaimed, all-hot segments); two threads at once.
 */
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "server/seg.h"
#include "tests/check_seg.h"
#include "tests/suites.h"

/* A clock the tests move; the flush floor. */
int64_t  fake_now = 1800000000; /* 2027: the CAS clock's time, as the node's */
uint64_t fake_floor;
uint64_t next_cas =
    ((uint64_t)(INT64_C(1800000000000) - STORE_CAS_EPOCH_MS) << STORE_CAS_LOGICAL_BITS);

int64_t
clock_now(void *arg)
{
    (void)arg;
    return __atomic_load_n(&fake_now, __ATOMIC_RELAXED);
}

uint64_t
clock_floor(void *arg)
{
    (void)arg;
    return __atomic_load_n(&fake_floor, __ATOMIC_RELAXED);
}

/* Removals the engine reported. */
static long dropped_evicted, dropped_expired;

static void
on_drop(void *arg, uint64_t hash, const struct seg_rec *r, bool expired)
{
    (void)arg;
    ck_assert_uint_eq(hash, XXH3_64bits(r->key, r->nkey));
    __atomic_fetch_add(expired ? &dropped_expired : &dropped_evicted, 1, __ATOMIC_RELAXED);
}

struct seg *
mkseg(size_t limit, uint32_t seg_size)
{
    struct seg_config cfg = { .mem_limit = limit,
                              .seg_size = seg_size,
                              .now = clock_now,
                              .floor = clock_floor,
                              .drop = on_drop };
    struct seg       *s = seg_new(&cfg);

    ck_assert_ptr_nonnull(s);
    dropped_evicted = dropped_expired = 0;
    fake_floor = 0;
    return s;
}

uint64_t
hk(const char *key)
{
    return XXH3_64bits(key, strlen(key));
}

int
put_full(struct seg *s, const char *key, const char *val, size_t nval, uint32_t exptime,
         uint32_t flags)
{
    struct seg_rec r = { .nkey = (uint8_t)strlen(key),
                         .nbytes = (uint32_t)nval,
                         .cas = __atomic_fetch_add(&next_cas, 1, __ATOMIC_RELAXED),
                         .atime = (uint32_t)clock_now(NULL),
                         .exptime = exptime,
                         .flags = flags,
                         .key = key,
                         .value = val };

    return seg_put(s, hk(key), &r, NULL, NULL);
}

int
put(struct seg *s, const char *key, const char *val)
{
    return put_full(s, key, val, strlen(val), 0, 0);
}

int
copy_out(void *arg, const struct seg_rec *r, uint64_t hash, unsigned freq)
{
    struct got *g = arg;

    (void)hash;
    ck_assert_uint_le(r->nbytes, sizeof(g->val) - 1);
    memcpy(g->val, r->value, r->nbytes);
    g->val[r->nbytes] = '\0';
    g->nbytes = r->nbytes;
    g->flags = r->flags;
    g->exptime = r->exptime;
    g->atime = r->atime;
    g->cas = r->cas;
    g->bits = r->bits;
    g->freq = freq;
    return 0;
}

int
get(struct seg *s, const char *key, struct got *g)
{
    return seg_get(s, key, strlen(key), hk(key), clock_now(NULL), clock_floor(NULL), SEG_GET_FETCH,
                   copy_out, g);
}

int
peek(struct seg *s, const char *key, struct got *g)
{
    return seg_get(s, key, strlen(key), hk(key), clock_now(NULL), clock_floor(NULL), 0, copy_out,
                   g);
}

void
expect(struct seg *s, const char *key, const char *val)
{
    struct got g;

    ck_assert_int_eq(get(s, key, &g), SEG_OK);
    ck_assert_str_eq(g.val, val);
}

/* Every has_ combination and state bit, keys of 1..250 bytes, values of 0
 * to a quarter segment (the varint's 1, 2 and 3-byte lengths). */
START_TEST(test_codec)
{
    static const uint32_t sizes[] = { 0, 1, 100, 127, 128, 1000, 16383, 16384, 65535, 262144 };
    size_t                cap = 2 + SEG_VARINT_MAX + 28 + 250 + 262144;
    uint8_t              *buf = malloc(cap + 16);
    char                 *val = malloc(262144);
    char                  key[251];
    unsigned              combo, k, v;

    ck_assert_ptr_nonnull(buf);
    ck_assert_ptr_nonnull(val);
    for (v = 0; v < 262144; v++) {
        val[v] = (char)(v * 7 + 3);
    }
    for (combo = 0; combo < 32; combo++) {
        for (k = 1; k <= 250; k += (k < 8 ? 1 : 31)) {
            for (v = 0; v < sizeof(sizes) / sizeof(sizes[0]); v++) {
                struct seg_rec in = { .bits = (uint8_t)(combo & 8 ? SEG_RB_STATE : 0),
                                      .nkey = (uint8_t)k,
                                      .nbytes = sizes[v],
                                      .cas = 0x0102030405060708ull + combo,
                                      .atime = combo & 16
                                                   ? store_cas_unix_s(0x0102030405060708ull) + 12345
                                                   : 0xa1b2c3d4u,
                                      .exptime = combo & 1 ? 1700000000u + k : 0,
                                      .flags = combo & 2 ? 0xdeadbeefu : 0,
                                      .ecas = combo & 4 ? 0x1122334455667788ull : 0,
                                      .key = key,
                                      .value = val },
                               out;
                size_t   n, nk;
                uint32_t na;

                memset(key, 'a' + (int)(k % 26), k);
                key[k - 1] = 'Z';
                memset(buf, 0xee, cap + 16);
                n = seg_rec_encode(buf, &in);
                ck_assert_uint_eq(n, seg_rec_size(seg_rec_has(&in), k, sizes[v]));
                ck_assert_uint_eq(buf[n], 0xee); /* wrote no further */
                ck_assert_uint_eq(seg_rec_decode(buf, &out), n);
                ck_assert_uint_eq(out.bits & SEG_RB_STATE, in.bits & SEG_RB_STATE);
                ck_assert_uint_eq(out.bits & SEG_RB_HAS,
                                  (combo & 7) | (combo & 16 ? 0 : SEG_RB_ATIME32));
                ck_assert_uint_eq(out.nkey, k);
                ck_assert_uint_eq(out.nbytes, sizes[v]);
                ck_assert_uint_eq(out.cas, in.cas);
                ck_assert_uint_eq(out.atime, in.atime);
                ck_assert_uint_eq(out.exptime, in.exptime);
                ck_assert_uint_eq(out.flags, in.flags);
                ck_assert_uint_eq(out.ecas, in.ecas);
                ck_assert_mem_eq(out.key, key, k);
                ck_assert_int_eq(memcmp(out.value, val, sizes[v]), 0);
                ck_assert_ptr_eq(seg_rec_key(buf, &nk), out.key);
                ck_assert_uint_eq(nk, k);
                /* In-place edits touch their field only. */
                na = combo & 16 ? store_cas_unix_s(in.cas) + 100 : 42;
                seg_rec_set_atime(buf, out.nbytes, na);
                seg_rec_set_bits(buf, SEG_RB_WON, SEG_RB_STALE);
                if (combo & 1) {
                    seg_rec_set_exptime(buf, out.nbytes, 77);
                }
                seg_rec_decode(buf, &out);
                ck_assert_uint_eq(out.atime, na);
                ck_assert(out.bits & SEG_RB_WON);
                ck_assert(!(out.bits & SEG_RB_STALE));
                ck_assert_uint_eq(out.exptime, combo & 1 ? 77 : 0);
                ck_assert_uint_eq(out.flags, in.flags);
                ck_assert_uint_eq(out.ecas, in.ecas);
                ck_assert_uint_eq(out.cas, in.cas);
            }
        }
    }
    /* 100-byte value, no flags or TTL, 11-byte key: 13 bytes of header. */
    ck_assert_uint_eq(seg_rec_size(0, 11, 100), 13 + 11 + 100);
    free(buf);
    free(val);
}
END_TEST

/* The last access kept as a 16-bit distance from the CAS's second: exact
 * below 2^15 s, then rounded down within 1/2048, codes in order and with no
 * gaps, the end saturated; a record whose atime does not fit is written
 * with a u32; a bump in place rounds down, never below the CAS's second. */
START_TEST(test_atime_codec)
{
    uint64_t       cas = next_cas;
    uint32_t       base = store_cas_unix_s(cas), d, prev = 0, code;
    uint8_t        buf[64];
    struct seg_rec in = { .nkey = 1, .key = "k", .value = "", .cas = cas }, out;

    ck_assert_uint_eq(base, (uint32_t)fake_now);
    for (code = 1; code <= UINT16_MAX; code++) {
        d = seg_atime_from_code((uint16_t)code);
        ck_assert_uint_gt(d, prev);
        ck_assert_uint_eq(seg_atime_to_code(d), code);         /* every code round-trips */
        ck_assert_uint_eq(seg_atime_to_code(d - 1), code - 1); /* no gap below it */
        if (code < SEG_ATIME_EXACT) {
            ck_assert_uint_eq(d, code);
        } else {
            ck_assert_uint_le((uint64_t)(d - prev) * 2048, d);
        }
        prev = d;
    }
    ck_assert_uint_gt(prev, 4u * 365 * 86400); /* reaches 4 years */
    ck_assert_uint_eq(seg_atime_to_code(UINT32_MAX), UINT16_MAX);
    /* Written: u16 when exact, else u32 (rounding would change it). */
    for (d = 0; d < 40000; d += 97) {
        in.atime = base + d;
        ck_assert_uint_eq(seg_rec_has(&in) & SEG_RB_ATIME32,
                          seg_atime_from_code(seg_atime_to_code(d)) == d ? 0 : SEG_RB_ATIME32);
        ck_assert_uint_eq(seg_rec_encode(buf, &in), seg_rec_size(seg_rec_has(&in), 1, 0));
        seg_rec_decode(buf, &out);
        ck_assert_uint_eq(out.atime, base + d);
    }
    in.atime = base - 1; /* older than the CAS (a peer's clock ahead) */
    ck_assert_uint_eq(seg_rec_has(&in), SEG_RB_ATIME32);
    in.atime = base + 10;
    ck_assert_uint_eq(seg_rec_encode(buf, &in), 2 + 1 + 8 + 2 + 1);
    /* In place: exact, rounded down, clamped to the CAS's second. */
    seg_rec_set_atime(buf, 0, base + 32767);
    seg_rec_decode(buf, &out);
    ck_assert_uint_eq(out.atime, base + 32767);
    seg_rec_set_atime(buf, 0, base + 100001);
    seg_rec_decode(buf, &out);
    ck_assert_uint_le(out.atime, base + 100001);
    ck_assert_uint_ge(out.atime, base + 100001 - 100001 / 2048);
    seg_rec_set_atime(buf, 0, base - 50);
    seg_rec_decode(buf, &out);
    ck_assert_uint_eq(out.atime, base);
}
END_TEST

static bool
cas_is(void *arg, const struct seg_rec *old)
{
    return old != NULL && old->cas == *(uint64_t *)arg;
}

static bool
absent(void *arg, const struct seg_rec *old)
{
    (void)arg;
    return old == NULL;
}

START_TEST(test_basic)
{
    struct seg      *s = mkseg(8 * MIB_SEG, 0);
    struct got       g;
    struct seg_rec   r = { .nkey = 1, .key = "k", .value = "", .cas = 99 };
    uint64_t         c;
    struct seg_stats st;
    static char      big[SEG_ITEM_MAX_DEFAULT + 1];

    ck_assert_int_eq(put(s, "alpha", "one"), SEG_OK);
    expect(s, "alpha", "one");
    ck_assert_int_eq(get(s, "beta", &g), SEG_MISS);
    /* Overwrite: the new value, the old bytes dead. */
    ck_assert_int_eq(put_full(s, "alpha", "two!", 4, 0, 7), SEG_OK);
    ck_assert_int_eq(get(s, "alpha", &g), SEG_OK);
    ck_assert_str_eq(g.val, "two!");
    ck_assert_uint_eq(g.flags, 7);
    seg_stats(s, &st);
    ck_assert_uint_eq(st.items, 1);
    ck_assert_uint_eq(st.live_bytes, seg_rec_size(SEG_RB_FLAGS, 5, 4));
    /* A CAS check: refused on a mismatch, stored on a match. */
    c = g.cas + 1000;
    r = (struct seg_rec){ .nkey = 5, .key = "alpha", .value = "x", .nbytes = 1, .cas = 5000 };
    ck_assert_int_eq(seg_put(s, hk("alpha"), &r, cas_is, &c), SEG_REFUSED);
    expect(s, "alpha", "two!");
    ck_assert_int_eq(seg_put(s, hk("alpha"), &r, cas_is, &g.cas), SEG_OK);
    expect(s, "alpha", "x");
    /* add-like: absent only. */
    ck_assert_int_eq(seg_put(s, hk("alpha"), &r, absent, NULL), SEG_REFUSED);
    /* Delete. */
    ck_assert_int_eq(seg_delete(s, "alpha", 5, hk("alpha"), fake_now, 0, NULL, NULL), SEG_OK);
    ck_assert_int_eq(get(s, "alpha", &g), SEG_MISS);
    ck_assert_int_eq(seg_delete(s, "alpha", 5, hk("alpha"), fake_now, 0, NULL, NULL), SEG_MISS);
    seg_stats(s, &st);
    ck_assert_uint_eq(st.items, 0);
    ck_assert_uint_eq(st.live_bytes, 0);
    /* Over the item maximum (1 MiB): a distinct error, nothing stored. */
    r = (struct seg_rec){ .nkey = 3,
                          .key = "big",
                          .value = big,
                          .nbytes = sizeof(big),
                          .cas = next_cas++,
                          .atime = (uint32_t)fake_now };
    ck_assert_int_eq(seg_put(s, hk("big"), &r, NULL, NULL), SEG_TOO_LARGE);
    r.nbytes = 256 * KIB - 3 - 15; /* header 15 + key 3: exactly a quarter segment */
    ck_assert_uint_eq(seg_rec_size(0, 3, r.nbytes), 256 * KIB);
    ck_assert_int_eq(seg_put(s, hk("big"), &r, NULL, NULL), SEG_OK);
    seg_stats(s, &st);
    ck_assert_uint_eq(st.jumbos, 0); /* in a segment */
    r.nbytes++;
    ck_assert_int_eq(seg_put(s, hk("big"), &r, NULL, NULL), SEG_OK);
    seg_stats(s, &st);
    ck_assert_uint_eq(st.jumbos, 1); /* a byte more: a jumbo */
    ck_assert_uint_eq(st.items, 1);
    r.nbytes = SEG_ITEM_MAX_DEFAULT;
    ck_assert_int_eq(seg_put(s, hk("big"), &r, NULL, NULL), SEG_OK);
    r.nbytes++;
    ck_assert_int_eq(seg_put(s, hk("big"), &r, NULL, NULL), SEG_TOO_LARGE);
    r.nkey = 0;
    ck_assert_int_eq(seg_put(s, hk(""), &r, NULL, NULL), SEG_BAD_ARGUMENT);
    seg_free(s);
}
END_TEST

/* TTL, the flush floor, touch (in place and by a copy), state bits, the
 * fetched bit and atime. */
START_TEST(test_ttl_touch_state)
{
    struct seg *s = mkseg(8 * MIB_SEG, 0);
    struct got  g;
    int64_t     t0 = fake_now;

    ck_assert_int_eq(put_full(s, "ttl", "v", 1, (uint32_t)(t0 + 10), 0), SEG_OK);
    ck_assert_int_eq(put(s, "forever", "w"), SEG_OK);
    ck_assert_int_eq(peek(s, "ttl", &g), SEG_OK);
    ck_assert(!(g.bits & SEG_RB_FETCHED));
    ck_assert_uint_eq(g.freq, 0);
    fake_now = t0 + 5;
    ck_assert_int_eq(get(s, "ttl", &g), SEG_OK);
    ck_assert_int_eq(peek(s, "ttl", &g), SEG_OK);
    ck_assert(g.bits & SEG_RB_FETCHED);
    ck_assert_uint_eq(g.atime, (uint32_t)(t0 + 5));
    ck_assert_uint_eq(g.freq, 1);
    /* atime moves at most once a minute after the first fetch. */
    fake_now = t0 + 8;
    ck_assert_int_eq(get(s, "ttl", &g), SEG_OK);
    ck_assert_int_eq(peek(s, "ttl", &g), SEG_OK);
    ck_assert_uint_eq(g.atime, (uint32_t)(t0 + 5));
    /* touch in place (has the field), then past the old exptime. */
    ck_assert_int_eq(seg_touch(s, "ttl", 3, hk("ttl"), fake_now, 0, (uint32_t)(t0 + 100)), SEG_OK);
    fake_now = t0 + 50;
    ck_assert_int_eq(peek(s, "ttl", &g), SEG_OK);
    ck_assert_uint_eq(g.exptime, (uint32_t)(t0 + 100));
    /* touch of a record with no exptime field: a copy with one, same CAS,
     * same reads. */
    ck_assert_int_eq(peek(s, "forever", &g), SEG_OK);
    {
        uint64_t cas = g.cas;

        ck_assert_int_eq(get(s, "forever", &g), SEG_OK);
        ck_assert_int_eq(
            seg_touch(s, "forever", 7, hk("forever"), fake_now, 0, (uint32_t)(t0 + 60)), SEG_OK);
        ck_assert_int_eq(peek(s, "forever", &g), SEG_OK);
        ck_assert_uint_eq(g.cas, cas);
        ck_assert_uint_eq(g.exptime, (uint32_t)(t0 + 60));
        ck_assert_uint_eq(g.freq, 1);
        ck_assert_str_eq(g.val, "w");
    }
    ck_assert_int_eq(seg_touch(s, "nope", 4, hk("nope"), fake_now, 0, 5), SEG_MISS);
    /* State bits. */
    ck_assert_int_eq(seg_set_state(s, "ttl", 3, hk("ttl"), fake_now, 0, SEG_RB_STALE, 0), SEG_OK);
    ck_assert_int_eq(peek(s, "ttl", &g), SEG_OK);
    ck_assert(g.bits & SEG_RB_STALE);
    /* Expiry: a miss, reported as expired. */
    fake_now = t0 + 100;
    ck_assert_int_eq(get(s, "ttl", &g), SEG_MISS);
    ck_assert_int_eq(dropped_expired, 1);
    /* The flush floor: every CAS below it is dead. */
    ck_assert_int_eq(put(s, "after", "z"), SEG_OK);
    fake_now = t0;
    fake_floor = next_cas;
    ck_assert_int_eq(get(s, "after", &g), SEG_MISS);
    ck_assert_int_eq(dropped_expired, 1); /* a flush is not reported */
    ck_assert_int_eq(put(s, "after", "z2"), SEG_OK);
    expect(s, "after", "z2");
    seg_free(s);
}
END_TEST

static int
count_walk(void *arg, const struct seg_rec *r, uint64_t hash, unsigned freq)
{
    long *n = arg;

    (void)freq;
    ck_assert_uint_eq(hash, XXH3_64bits(r->key, r->nkey));
    (*n)++;
    return 0;
}

/* 100k keys: growth keeps every key findable; deletes (backward shift)
 * keep the rest findable; the walk sees each live key once. */
START_TEST(test_index_growth)
{
    enum {
        N = 100000
    };
    struct seg      *s = mkseg(64 * MIB_SEG, 0);
    struct seg_stats st;
    char             key[32], val[32];
    struct got       g;
    long             walked = 0;
    uint32_t         i;

    for (i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "key:%u", i);
        snprintf(val, sizeof(val), "v%u", i * 3);
        ck_assert_int_eq(put(s, key, val), SEG_OK);
    }
    seg_stats(s, &st);
    ck_assert_uint_eq(st.items, N);
    ck_assert_uint_eq(st.evictions, 0);
    /* Load between 0.5 and 0.85. */
    ck_assert_uint_ge(st.index_slots * 85, (uint64_t)N * 100);
    ck_assert_uint_le(st.index_slots, (uint64_t)N * 2);
    for (i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "key:%u", i);
        snprintf(val, sizeof(val), "v%u", i * 3);
        ck_assert_int_eq(peek(s, key, &g), SEG_OK);
        ck_assert_str_eq(g.val, val);
    }
    for (i = 0; i < N; i += 2) {
        snprintf(key, sizeof(key), "key:%u", i);
        ck_assert_int_eq(seg_delete(s, key, strlen(key), hk(key), fake_now, 0, NULL, NULL), SEG_OK);
    }
    for (i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "key:%u", i);
        ck_assert_int_eq(peek(s, key, &g), i % 2 ? SEG_OK : SEG_MISS);
    }
    for (i = 0; i < SEG_STRIPES; i++) {
        seg_walk(s, i, count_walk, &walked);
    }
    ck_assert_int_eq(walked, N / 2);
    seg_free(s);
}
END_TEST

/* Under a small limit: evictions happen; what reads back is exactly the
 * item count, its bytes the live bytes; evictions + items = keys. */
START_TEST(test_evict_consistent)
{
    enum {
        N = 40000
    };
    struct seg      *s = mkseg(16 * 64 * KIB, 64 * KIB);
    struct seg_stats st;
    char             key[32], val[128];
    struct got       g;
    uint64_t         found = 0, bytes = 0;
    uint32_t         i;

    for (i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "key:%u", i);
        snprintf(val, sizeof(val), "%0*u", (int)(20 + i % 80), i);
        ck_assert_int_eq(put(s, key, val), SEG_OK);
        if (i % 7 == 0) { /* some reads: some records move to MAIN */
            get(s, key, &g);
        }
    }
    seg_stats(s, &st);
    ck_assert_uint_gt(st.evictions, 0);
    ck_assert_uint_gt(st.moved, 0);
    ck_assert_uint_eq(st.reclaimed, 0);
    for (i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "key:%u", i);
        if (peek(s, key, &g) == SEG_OK) {
            snprintf(val, sizeof(val), "%0*u", (int)(20 + i % 80), i);
            ck_assert_str_eq(g.val, val);
            found++;
            bytes += seg_rec_size(0, strlen(key), g.nbytes);
        }
    }
    ck_assert_uint_eq(found, st.items);
    ck_assert_uint_eq(bytes, st.live_bytes);
    ck_assert_uint_eq(st.items + st.evictions, N);
    ck_assert_int_eq(dropped_evicted, (long)st.evictions);
    ck_assert_uint_le(st.live_bytes, 16 * 64 * KIB);
    ck_assert_uint_eq(st.segs_total, 16);
    seg_free(s);
}
END_TEST

/* Keys read twice survive a scan of one-hit keys ten times the cache;
 * keys written with them and never read (what FIFO or LRU would keep just
 * as long: nothing reads either during the scan) are gone. */
START_TEST(test_one_hit_scan)
{
    enum {
        HOT = 200,
        SCAN = 10 * 32 * 64 * KIB / 128
    };
    struct seg *s = mkseg(32 * 64 * KIB, 64 * KIB);
    char        key[32], val[101];
    struct got  g;
    int         i, hot_left = 0, cold_left = 0;

    memset(val, 'x', 100);
    val[100] = '\0';
    for (i = 0; i < HOT; i++) {
        snprintf(key, sizeof(key), "hot%05d", i);
        ck_assert_int_eq(put(s, key, val), SEG_OK);
        snprintf(key, sizeof(key), "cold%05d", i);
        ck_assert_int_eq(put(s, key, val), SEG_OK);
    }
    for (i = 0; i < HOT; i++) {
        snprintf(key, sizeof(key), "hot%05d", i);
        ck_assert_int_eq(get(s, key, &g), SEG_OK);
        ck_assert_int_eq(get(s, key, &g), SEG_OK);
    }
    for (i = 0; i < SCAN; i++) {
        snprintf(key, sizeof(key), "scan%07d", i);
        ck_assert_int_eq(put(s, key, val), SEG_OK);
    }
    for (i = 0; i < HOT; i++) {
        snprintf(key, sizeof(key), "hot%05d", i);
        hot_left += peek(s, key, &g) == SEG_OK;
        snprintf(key, sizeof(key), "cold%05d", i);
        cold_left += peek(s, key, &g) == SEG_OK;
    }
    ck_assert_int_eq(hot_left, HOT);
    ck_assert_int_eq(cold_left, 0);
    seg_free(s);
}
END_TEST

/* A key evicted unread from SMALL and stored again goes to the main open
 * segment: it then survives a scan that evicts SMALL. (The ghost table of
 * a 1 MiB limit has 4096 slots, indexed by hash bits 10-21: the scans
 * skip keys that share the ghost key's slot, which would overwrite it.) */
START_TEST(test_ghost)
{
    enum {
        SCAN = 4 * 1024 * KIB / 128
    };
    struct seg      *s = mkseg(1024 * KIB, 4 * KIB);
    struct seg_stats st;
    char             key[32], val[101];
    struct got       g;
    uint64_t         gslot = (hk("ghostkey") >> 10) & 4095;
    int              i;

    memset(val, 'y', 100);
    val[100] = '\0';
    ck_assert_int_eq(put(s, "ghostkey", val), SEG_OK);
    for (i = 0; peek(s, "ghostkey", &g) == SEG_OK; i++) {
        ck_assert_int_lt(i, SCAN);
        snprintf(key, sizeof(key), "scan%07d", i);
        if (((hk(key) >> 10) & 4095) != gslot) {
            ck_assert_int_eq(put(s, key, val), SEG_OK);
        }
    }
    ck_assert_int_eq(put(s, "ghostkey", val), SEG_OK); /* a ghost: to MAIN */
    for (i = 0; i < SCAN; i++) {
        snprintf(key, sizeof(key), "scan2%07d", i);
        if (((hk(key) >> 10) & 4095) != gslot) {
            ck_assert_int_eq(put(s, key, val), SEG_OK);
        }
    }
    seg_stats(s, &st);
    ck_assert_uint_gt(st.evictions, SCAN / 2);
    ck_assert_int_eq(peek(s, "ghostkey", &g), SEG_OK);
    seg_free(s);
}
END_TEST

/* Records past their TTL are reclaimed, not evicted, when their segment
 * is emptied (the whole first segments expire); the drop hook hears of
 * them as expired. */
START_TEST(test_expired_reclaimed)
{
    enum {
        TTL_KEYS = 1000,
        MORE = 3 * 16 * 64 * KIB / 128
    };
    struct seg      *s = mkseg(16 * 64 * KIB, 64 * KIB);
    struct seg_stats st;
    char             key[32], val[101];
    int64_t          t0 = fake_now;
    int              i;

    memset(val, 'z', 100);
    val[100] = '\0';
    for (i = 0; i < TTL_KEYS; i++) {
        snprintf(key, sizeof(key), "ttl%05d", i);
        ck_assert_int_eq(put_full(s, key, val, 100, (uint32_t)(t0 + 30), 0), SEG_OK);
    }
    seg_thread_done(s); /* seal: the TTL keys' segments are the oldest */
    fake_now = t0 + 60;
    for (i = 0; i < MORE; i++) {
        snprintf(key, sizeof(key), "more%06d", i);
        ck_assert_int_eq(put(s, key, val), SEG_OK);
    }
    seg_stats(s, &st);
    ck_assert_uint_eq(st.reclaimed, TTL_KEYS);
    ck_assert_int_eq(dropped_expired, TTL_KEYS);
    ck_assert_uint_eq(st.evictions + st.items, MORE);
    ck_assert_int_eq(dropped_evicted, (long)st.evictions);
    fake_now = t0;
    seg_free(s);
}
END_TEST

/* A hot set of about 98% of the cache, read (or stored again on a miss)
 * between chunks of a flood of new keys: SMALL stays at one segment (2% is
 * 1.28), so eviction takes MAIN's oldest segment, all hot records. It still
 * terminates (each lap costs a record a read) and every put succeeds. */
START_TEST(test_all_hot)
{
    enum {
        SEGS = 64,
        HOT = 63 * 32, /* 63 segments of 32 records */
        CHUNK = 256,
        FLOOD = 40 * CHUNK
    };
    struct seg      *s = mkseg(SEGS * 4 * KIB, 4 * KIB);
    struct seg_stats st;
    char             key[32], val[101];
    struct got       g;
    int              i, c, r;

    memset(val, 'h', 100);
    val[100] = '\0';
    for (i = 0; i < HOT; i++) {
        snprintf(key, sizeof(key), "hot%06d", i);
        ck_assert_int_eq(put(s, key, val), SEG_OK);
    }
    for (c = 0; c < FLOOD / CHUNK; c++) {
        for (r = 0; r < 2; r++) {
            for (i = 0; i < HOT; i++) {
                snprintf(key, sizeof(key), "hot%06d", i);
                if (get(s, key, &g) != SEG_OK) {
                    ck_assert_int_eq(put(s, key, val), SEG_OK);
                }
            }
        }
        for (i = 0; i < CHUNK; i++) {
            snprintf(key, sizeof(key), "new%06d", c * CHUNK + i);
            ck_assert_int_eq(put(s, key, val), SEG_OK);
        }
    }
    seg_stats(s, &st);
    ck_assert_uint_gt(st.evictions, FLOOD / 2);
    /* Each hot key promoted from SMALL once, then lapped in MAIN. */
    ck_assert_uint_gt(st.moved, 2 * HOT);
    ck_assert_uint_le(st.segs_small, 2);
    seg_free(s);
}
END_TEST

struct worker {
    struct seg *s;
    int         id;
    int         n;
    long        hits, misses;
};

/* Write then read back keys of its own; a hit must hold the value this
 * thread wrote. */
static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    char           key[32], val[64];
    struct got     g;
    int            i, r;

    for (r = 0; r < 2; r++) {
        for (i = 0; i < w->n; i++) {
            snprintf(key, sizeof(key), "t%d:%d", w->id, i);
            snprintf(val, sizeof(val), "value-%d-%d-%d", w->id, i, r);
            if (put(w->s, key, val) != SEG_OK) {
                return (void *)1;
            }
            if (i >= 10) {
                snprintf(key, sizeof(key), "t%d:%d", w->id, i - 10);
                snprintf(val, sizeof(val), "value-%d-%d-%d", w->id, i - 10, r);
                if (get(w->s, key, &g) == SEG_OK) {
                    if (strcmp(g.val, val) != 0) {
                        return (void *)2;
                    }
                    w->hits++;
                } else {
                    w->misses++;
                }
            }
        }
    }
    seg_thread_done(w->s);
    return NULL;
}

static void
run_threads(size_t limit, int n, bool expect_all)
{
    struct seg      *s = mkseg(limit, 64 * KIB);
    struct worker    w[2];
    pthread_t        th[2];
    struct seg_stats st;
    int              k;

    for (k = 0; k < 2; k++) {
        w[k] = (struct worker){ .s = s, .id = k, .n = n };
        ck_assert_int_eq(pthread_create(&th[k], NULL, worker_main, &w[k]), 0);
    }
    for (k = 0; k < 2; k++) {
        void *rc;

        ck_assert_int_eq(pthread_join(th[k], &rc), 0);
        ck_assert_ptr_null(rc);
        ck_assert_int_gt(w[k].hits, 0);
        if (expect_all) {
            ck_assert_int_eq(w[k].misses, 0);
        }
    }
    seg_stats(s, &st);
    ck_assert_uint_le(st.segs_open, 1); /* the main open segment */
    if (expect_all) {
        ck_assert_uint_eq(st.items, 2u * (unsigned)n);
    }
    seg_free(s);
}

/* Two threads, different keys: with room for all, and under eviction. */
START_TEST(test_two_threads)
{
    run_threads(64 * MIB_SEG, 50000, true);
    run_threads(16 * 64 * KIB, 50000, false);
}
END_TEST

/* A record that fills a segment to its last byte stays in it; the next
 * one seals it onto SMALL and opens another. */
START_TEST(test_segment_full)
{
    struct seg      *s = mkseg(8 * 4 * KIB, 4 * KIB);
    struct seg_stats st;
    static char      val[1024];
    char             key[16];
    struct got       g;
    uint32_t         nb = 1024 - 14 - 4; /* header 14 (2-byte length) + key 4 */
    int              i;

    ck_assert_uint_eq(seg_rec_size(0, 4, nb), 1024);
    memset(val, 'f', sizeof(val));
    for (i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "f%03d", i);
        ck_assert_int_eq(put_full(s, key, val, nb, 0, 0), SEG_OK);
    }
    seg_stats(s, &st);
    ck_assert_uint_eq(st.segs_small, 0);
    ck_assert_uint_eq(st.segs_open, 1);
    ck_assert_uint_eq(st.live_bytes, 4 * KIB);
    ck_assert_int_eq(put_full(s, "f004", val, nb, 0, 0), SEG_OK);
    seg_stats(s, &st);
    ck_assert_uint_eq(st.segs_small, 1);
    for (i = 0; i < 5; i++) {
        snprintf(key, sizeof(key), "f%03d", i);
        ck_assert_int_eq(peek(s, key, &g), SEG_OK);
        ck_assert_uint_eq(g.nbytes, nb);
    }
    seg_free(s);
}
END_TEST

struct churn {
    struct seg *s;
    int         stop;
};

/* Values are a function of the key: "v" + the key. */
static void *
churn_main(void *arg)
{
    struct churn *c = arg;
    char          key[32], val[128];
    int           i;

    for (i = 0; !__atomic_load_n(&c->stop, __ATOMIC_RELAXED); i++) {
        snprintf(key, sizeof(key), "w%d", i % 50000);
        snprintf(val, sizeof(val), "v%s-%080d", key, 0);
        if (put(c->s, key, val) != SEG_OK) {
            return (void *)1;
        }
    }
    seg_thread_done(c->s);
    return NULL;
}

static int
check_walked(void *arg, const struct seg_rec *r, uint64_t hash, unsigned freq)
{
    char want[128];
    int  n = snprintf(want, sizeof(want), "v%.*s-%080d", (int)r->nkey, r->key, 0);

    (void)freq;
    ck_assert_uint_eq(hash, XXH3_64bits(r->key, r->nkey));
    ck_assert_uint_eq(r->nbytes, (uint32_t)n);
    ck_assert_mem_eq(r->value, want, (size_t)n);
    (*(long *)arg)++;
    return 0;
}

/* Walks while another thread's writes evict whole segments: every record
 * a walk sees is whole (its value matches its key). */
START_TEST(test_walk_during_eviction)
{
    struct churn     c = { .s = mkseg(16 * 64 * KIB, 64 * KIB) };
    struct seg_stats st;
    pthread_t        th;
    void            *rc;
    long             seen = 0;
    int              round;
    uint32_t         i;

    ck_assert_int_eq(pthread_create(&th, NULL, churn_main, &c), 0);
    /* Walk until the writer has evicted the cache over a few times (a
     * deadline of 2000 rounds bounds it). */
    for (round = 0; round < 2000; round++) {
        for (i = 0; i < SEG_STRIPES; i++) {
            seg_walk(c.s, i, check_walked, &seen);
        }
        seg_stats(c.s, &st);
        if (st.evictions > 40000) {
            break;
        }
    }
    __atomic_store_n(&c.stop, 1, __ATOMIC_RELAXED);
    ck_assert_int_eq(pthread_join(th, &rc), 0);
    ck_assert_ptr_null(rc);
    ck_assert_uint_gt(st.evictions, 40000);
    ck_assert_int_gt(seen, 0);
    seg_free(c.s);
}
END_TEST

/* Resident set size in bytes. */
long
rss_now(void)
{
    long  size = 0, res = -1;
    FILE *f = fopen("/proc/self/statm", "r");

    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%ld %ld", &size, &res), 2);
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

/* RSS grown by no more than the segments, the index, the ghost table (4
 * bytes per 256 of the limit) and 512 KiB of the rest; not asserted under
 * the sanitizers (shadow memory). */
void
assert_rss_within(long grew, size_t limit, const struct seg_stats *st)
{
#ifndef RC_SANITIZERS
    ck_assert_int_le(grew, (long)(limit + st->index_bytes + limit / 256 * 4 + 512 * KIB));
#else
    (void)grew;
    (void)limit;
    (void)st;
#endif
}

/* A flood of 16 times the limit in sizes from 10 bytes to 60 KB: RSS grows
 * by at most the segments plus the index and the ghost table (and a
 * little slack for the test's own pages). Not asserted in the sanitizer
 * build, whose shadow memory and quarantine are RSS too. */
START_TEST(test_rss_bounded)
{
    enum {
        LIMIT = 8 * MIB_SEG
    };
    static char      val[60000];
    long             rss0 = rss_now(), grew;
    struct seg      *s = mkseg(LIMIT, 0);
    struct seg_stats st;
    char             key[32];
    uint64_t         bytes = 0;
    int              i;

    memset(val, 'r', sizeof(val));
    for (i = 0; bytes < 16ull * LIMIT; i++) {
        uint32_t nb = (uint32_t)(10 + ((uint64_t)i * 2654435761u) % (i % 4 == 0 ? 60000 : 1000));

        snprintf(key, sizeof(key), "flood%d", i);
        ck_assert_int_eq(put_full(s, key, val, nb, 0, 0), SEG_OK);
        bytes += nb;
    }
    seg_stats(s, &st);
    grew = rss_now() - rss0;
    ck_assert_uint_gt(st.evictions, 0);
    assert_rss_within(grew, LIMIT, &st);
    seg_free(s);
}
END_TEST

Suite *
seg_suite(void)
{
    Suite *s = suite_create("seg");
    TCase *tc = tcase_create("seg");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_codec);
    tcase_add_test(tc, test_atime_codec);
    tcase_add_test(tc, test_basic);
    tcase_add_test(tc, test_ttl_touch_state);
    tcase_add_test(tc, test_index_growth);
    tcase_add_test(tc, test_evict_consistent);
    tcase_add_test(tc, test_one_hit_scan);
    tcase_add_test(tc, test_ghost);
    tcase_add_test(tc, test_expired_reclaimed);
    tcase_add_test(tc, test_all_hot);
    tcase_add_test(tc, test_two_threads);
    tcase_add_test(tc, test_segment_full);
    tcase_add_test(tc, test_walk_during_eviction);
    tcase_add_test(tc, test_rss_bounded);
    suite_add_tcase(s, tc);
    return s;
}
