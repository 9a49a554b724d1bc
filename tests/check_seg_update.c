/*
 * check_seg_update: the compact engine's read-modify-write (seg_update:
 * incr, append, prepend, CAS merges under one stripe lock) and its jumbo
 * segments (values over a quarter segment). Helpers: tests/check_seg.h.
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

/* ---- seg_update: read-modify-write under the stripe lock ---------------- */

/* What an update build does: incr (decimal), append, prepend, refuse,
 * delete, or a CAS merge (write only over an older CAS). */
enum upd_op {
    UPD_INCR,
    UPD_APPEND,
    UPD_PREPEND,
    UPD_KEEP,
    UPD_DELETE,
    UPD_MERGE,
    UPD_BOGUS, /* returns no enum seg_build value */
};

struct upd {
    enum upd_op op;
    const char *data; /* append/prepend: the bytes added; merge: the value */
    uint32_t    ndata;
    uint64_t    cas; /* merge: the incoming CAS */
    char       *buf; /* the new value is built here */
    size_t      nbuf;
    int         calls;
    bool        saw_old;
};

static int
upd_build(void *arg, const struct seg_rec *old, struct seg_rec *nr)
{
    struct upd *u = arg;
    uint32_t    n = 0;

    u->calls++;
    u->saw_old = old != NULL;
    switch (u->op) {
    case UPD_KEEP:
        return SEG_BUILD_KEEP;
    case UPD_DELETE:
        return SEG_BUILD_DELETE;
    case UPD_BOGUS:
        nr->value = "x";
        nr->nbytes = 1;
        return 7;
    case UPD_MERGE:
        if (old != NULL && old->cas >= u->cas) {
            return SEG_BUILD_KEEP;
        }
        nr->value = u->data;
        nr->nbytes = u->ndata;
        nr->cas = u->cas;
        return SEG_BUILD_WRITE;
    case UPD_INCR: {
        unsigned long long v = 0;

        if (old == NULL) {
            return SEG_BUILD_KEEP;
        }
        ck_assert_uint_lt(old->nbytes, 32);
        memcpy(u->buf, old->value, old->nbytes);
        u->buf[old->nbytes] = '\0';
        v = strtoull(u->buf, NULL, 10);
        n = (uint32_t)snprintf(u->buf, u->nbuf, "%llu", v + 1);
        break;
    }
    case UPD_APPEND:
    case UPD_PREPEND:
        if (old == NULL) {
            return SEG_BUILD_KEEP;
        }
        n = old->nbytes + u->ndata;
        if (n > u->nbuf) {
            /* Past what the caller can build: say so by a value the
             * engine must refuse (the too-large test uses a big buf). */
            return SEG_BUILD_KEEP;
        }
        if (u->op == UPD_APPEND) {
            memcpy(u->buf, old->value, old->nbytes);
            memcpy(u->buf + old->nbytes, u->data, u->ndata);
        } else {
            memcpy(u->buf, u->data, u->ndata);
            memcpy(u->buf + u->ndata, old->value, old->nbytes);
        }
        break;
    }
    nr->bits = old->bits;
    nr->flags = old->flags;
    nr->exptime = old->exptime;
    nr->cas = __atomic_fetch_add(&next_cas, 1, __ATOMIC_RELAXED);
    nr->atime = old->atime;
    nr->value = u->buf;
    nr->nbytes = n;
    return SEG_BUILD_WRITE;
}

/* A get's callback for large values: the length only. */
static int
size_out(void *arg, const struct seg_rec *r, uint64_t hash, unsigned freq)
{
    (void)hash;
    (void)freq;
    *(uint32_t *)arg = r->nbytes;
    return 0;
}

static int
update(struct seg *s, const char *key, struct upd *u)
{
    return seg_update(s, key, strlen(key), hk(key), clock_now(NULL), clock_floor(NULL), upd_build,
                      u);
}

/* Each op of its kind on the same key, M times. */
struct upd_worker {
    struct seg *s;
    enum upd_op op;
    const char *key, *data;
    int         m;
};

static void *
upd_worker_main(void *arg)
{
    struct upd_worker   *w = arg;
    static __thread char buf[64 * 1024];
    int                  i;

    for (i = 0; i < w->m; i++) {
        struct upd u = { .op = w->op,
                         .data = w->data,
                         .ndata = w->data != NULL ? (uint32_t)strlen(w->data) : 0,
                         .buf = buf,
                         .nbuf = sizeof(buf) };

        if (update(w->s, w->key, &u) != SEG_OK) {
            return (void *)1;
        }
    }
    seg_thread_done(w->s);
    return NULL;
}

static void
run_upd_threads(struct seg *s, struct upd_worker *w, int n)
{
    pthread_t th[4];
    int       k;

    ck_assert_int_le(n, 4);
    for (k = 0; k < n; k++) {
        ck_assert_int_eq(pthread_create(&th[k], NULL, upd_worker_main, &w[k]), 0);
    }
    for (k = 0; k < n; k++) {
        void *rc;

        ck_assert_int_eq(pthread_join(th[k], &rc), 0);
        ck_assert_ptr_null(rc);
    }
    (void)s;
}

/* incr from 4 threads, append and prepend from 2, on one key each: no
 * update lost (every build saw the record the previous one wrote), across
 * many segment changes (64 KiB segments). */
START_TEST(test_update_threads)
{
    enum {
        M = 20000,
        MA = 2000
    };
    struct seg       *s = mkseg(512 * 64 * KIB, 64 * KIB);
    struct upd_worker w[4];
    struct got        g;
    struct seg_stats  st;
    static char       want[2 * MA + 2];
    int               k;

    ck_assert_int_eq(put(s, "ctr", "0"), SEG_OK);
    for (k = 0; k < 4; k++) {
        w[k] = (struct upd_worker){ .s = s, .op = UPD_INCR, .key = "ctr", .m = M };
    }
    run_upd_threads(s, w, 4);
    ck_assert_int_eq(peek(s, "ctr", &g), SEG_OK);
    ck_assert_str_eq(g.val, "80000");

    ck_assert_int_eq(put(s, "list", "|"), SEG_OK);
    w[0] = (struct upd_worker){ .s = s, .op = UPD_APPEND, .key = "list", .data = "a", .m = MA };
    w[1] = (struct upd_worker){ .s = s, .op = UPD_PREPEND, .key = "list", .data = "b", .m = MA };
    run_upd_threads(s, w, 2);
    memset(want, 'b', MA);
    want[MA] = '|';
    memset(want + MA + 1, 'a', MA);
    ck_assert_int_eq(peek(s, "list", &g), SEG_OK);
    ck_assert_uint_eq(g.nbytes, 2 * MA + 1);
    ck_assert_str_eq(g.val, want);
    seg_stats(s, &st);
    ck_assert_uint_eq(st.items, 2);
    ck_assert_uint_eq(st.evictions, 0);
    ck_assert_uint_eq(st.live_bytes, seg_rec_size(0, 3, 5) + seg_rec_size(0, 4, 2 * MA + 1));
    seg_free(s);
}
END_TEST

/* Refusal, deletion, a missing key, a CAS merge, and a build that grows
 * the value past the largest record: the old record stays, and nothing
 * is written for a refused or too large build. */
START_TEST(test_update_refuse)
{
    struct seg      *s = mkseg(8 * MIB_SEG, 0);
    struct seg_stats st0, st;
    struct got       g;
    static char      buf[2 * MIB_SEG], big[MIB_SEG];
    struct upd       u = { .op = UPD_KEEP, .buf = buf, .nbuf = sizeof(buf) };
    uint32_t         n = 0;

    ck_assert_int_eq(put_full(s, "k", "v1", 2, 0, 3), SEG_OK);
    seg_stats(s, &st0);
    ck_assert_int_eq(update(s, "k", &u), SEG_REFUSED);
    ck_assert(u.saw_old);
    ck_assert_int_eq(u.calls, 1);
    ck_assert_int_eq(peek(s, "k", &g), SEG_OK);
    ck_assert_str_eq(g.val, "v1");
    ck_assert_uint_eq(g.flags, 3);
    seg_stats(s, &st);
    ck_assert_uint_eq(st.items, st0.items);
    ck_assert_uint_eq(st.live_bytes, st0.live_bytes);
    /* A CAS merge: an older CAS is refused, a newer one written. */
    u = (struct upd){ .op = UPD_MERGE, .data = "old", .ndata = 3, .cas = g.cas };
    ck_assert_int_eq(update(s, "k", &u), SEG_REFUSED);
    expect(s, "k", "v1");
    u = (struct upd){ .op = UPD_MERGE, .data = "newer", .ndata = 5, .cas = g.cas + 1 };
    ck_assert_int_eq(update(s, "k", &u), SEG_OK);
    ck_assert_int_eq(peek(s, "k", &g), SEG_OK);
    ck_assert_str_eq(g.val, "newer");
    ck_assert_uint_eq(g.cas, u.cas);
    ck_assert_uint_eq(g.freq, 1); /* kept the read count of "v1" (expect read it) */
    /* A build that returns nonsense: an error, nothing written. */
    u = (struct upd){ .op = UPD_BOGUS };
    ck_assert_int_eq(update(s, "k", &u), SEG_BAD_ARGUMENT);
    expect(s, "k", "newer");
    /* A merge into a missing key: the build sees NULL, writes. */
    u = (struct upd){ .op = UPD_MERGE, .data = "fresh", .ndata = 5, .cas = 7 };
    ck_assert_int_eq(update(s, "m", &u), SEG_OK);
    ck_assert(!u.saw_old);
    expect(s, "m", "fresh");
    /* incr of a missing key: refused, nothing created. */
    u = (struct upd){ .op = UPD_INCR, .buf = buf, .nbuf = sizeof(buf) };
    ck_assert_int_eq(update(s, "nope", &u), SEG_REFUSED);
    ck_assert_int_eq(peek(s, "nope", &g), SEG_MISS);
    /* Delete: the record goes; again: a miss. */
    u = (struct upd){ .op = UPD_DELETE };
    ck_assert_int_eq(update(s, "m", &u), SEG_OK);
    ck_assert_int_eq(peek(s, "m", &g), SEG_MISS);
    ck_assert_int_eq(update(s, "m", &u), SEG_MISS);
    /* Append past a quarter segment (a jumbo), then past the item
     * maximum: SEG_TOO_LARGE, and the last record that fitted stays. */
    memset(big, 'z', sizeof(big));
    ck_assert_int_eq(put_full(s, "grow", big, 200 * KIB, 0, 0), SEG_OK);
    u = (struct upd){
        .op = UPD_APPEND, .data = big, .ndata = 100 * KIB, .buf = buf, .nbuf = sizeof(buf)
    };
    ck_assert_int_eq(update(s, "grow", &u), SEG_OK);
    ck_assert_int_eq(u.calls, 2); /* the second after the jumbo was mapped */
    seg_stats(s, &st0);
    ck_assert_uint_eq(st0.jumbos, 1);
    u = (struct upd){
        .op = UPD_APPEND, .data = big, .ndata = 800 * KIB, .buf = buf, .nbuf = sizeof(buf)
    };
    ck_assert_int_eq(update(s, "grow", &u), SEG_TOO_LARGE);
    ck_assert_int_eq(seg_get(s, "grow", 4, hk("grow"), fake_now, 0, 0, size_out, &n), SEG_OK);
    ck_assert_uint_eq(n, 300 * KIB);
    seg_stats(s, &st);
    ck_assert_uint_eq(st.items, st0.items);
    ck_assert_uint_eq(st.live_bytes, st0.live_bytes);
    ck_assert_uint_eq(st.jumbos, 1);
    /* A bad key. */
    ck_assert_int_eq(seg_update(s, "", 0, hk(""), fake_now, 0, upd_build, &u), SEG_BAD_ARGUMENT);
    seg_free(s);
}
END_TEST

/* ---- jumbo segments: values over a quarter segment -------------------- */

#define RC_UNUSED __attribute__((unused))

/* A large value's bytes: a pattern by key and position, so a record that
 * read back whole is told from a mix of two. */
static void
fill_pattern(char *buf, size_t n, unsigned seed)
{
    size_t i;

    for (i = 0; i < n; i++) {
        buf[i] = (char)('a' + (i * 7 + seed) % 26);
    }
}

/* What check_pattern expects and found. */
struct big_check {
    uint32_t want_len;
    unsigned want_seed;
    bool     ok;
};

/* A get's callback: ok when the value is the pattern of want_seed and
 * want_len bytes long. */
static int
check_pattern(void *arg, const struct seg_rec *r, uint64_t hash RC_UNUSED, unsigned freq RC_UNUSED)
{
    struct big_check *c = arg;

    c->ok = r->nbytes == c->want_len;
    for (uint32_t i = 0; c->ok && i < r->nbytes; i++) {
        c->ok = r->value[i] == (char)('a' + (i * 7 + c->want_seed) % 26);
    }
    return 0;
}

static bool
big_is(struct seg *s, const char *key, uint32_t len, unsigned seed, unsigned how)
{
    struct big_check c = { len, seed, false };

    return seg_get(s, key, strlen(key), hk(key), clock_now(NULL), clock_floor(NULL), how,
                   check_pattern, &c) == SEG_OK &&
           c.ok;
}

/* put/get/delete/overwrite of 300 KiB and 1 MiB values, small over large
 * and large over small; the segments a jumbo is charged as come back when
 * its record goes; a custom item maximum. */
START_TEST(test_jumbo_basic)
{
    struct seg      *s = mkseg(16 * MIB_SEG, 0);
    static char      big[MIB_SEG];
    struct seg_stats st, st0;
    struct got       g;

    seg_stats(s, &st0);
    fill_pattern(big, 300 * KIB, 1);
    ck_assert_int_eq(put_full(s, "j1", big, 300 * KIB, 0, 5), SEG_OK);
    fill_pattern(big, MIB_SEG, 2);
    ck_assert_int_eq(put_full(s, "j2", big, MIB_SEG, 0, 0), SEG_OK);
    ck_assert_int_eq(put(s, "small", "s"), SEG_OK);
    ck_assert(big_is(s, "j1", 300 * KIB, 1, SEG_GET_FETCH));
    ck_assert(big_is(s, "j2", MIB_SEG, 2, SEG_GET_FETCH));
    expect(s, "small", "s");
    seg_stats(s, &st);
    ck_assert_uint_eq(st.items, 3);
    ck_assert_uint_eq(st.jumbos, 2);
    ck_assert_uint_eq(st.segs_held, 1 + 2); /* 300 KiB: one segment; 1 MiB + header: two */
    ck_assert_uint_eq(st.live_bytes, seg_rec_size(SEG_RB_FLAGS, 2, 300 * KIB) +
                                         seg_rec_size(0, 2, MIB_SEG) + seg_rec_size(0, 5, 1));
    /* Overwrite the 300 KiB one with 1 MiB: the old jumbo goes at once. */
    ck_assert_int_eq(put_full(s, "j1", big, MIB_SEG, 0, 0), SEG_OK);
    ck_assert(big_is(s, "j1", MIB_SEG, 2, 0));
    seg_stats(s, &st);
    ck_assert_uint_eq(st.jumbos, 2);
    ck_assert_uint_eq(st.segs_held, 4);
    /* Small over large, large over small. */
    ck_assert_int_eq(put(s, "j1", "tiny"), SEG_OK);
    expect(s, "j1", "tiny");
    fill_pattern(big, 400 * KIB, 3);
    ck_assert_int_eq(put_full(s, "small", big, 400 * KIB, 0, 0), SEG_OK);
    ck_assert(big_is(s, "small", 400 * KIB, 3, 0));
    seg_stats(s, &st);
    ck_assert_uint_eq(st.jumbos, 2);
    ck_assert_uint_eq(st.segs_held, 2 + 1);
    ck_assert_uint_eq(st.items, 3);
    /* Delete both jumbos: every segment back in the pool. */
    ck_assert_int_eq(seg_delete(s, "j2", 2, hk("j2"), fake_now, 0, NULL, NULL), SEG_OK);
    ck_assert_int_eq(seg_delete(s, "small", 5, hk("small"), fake_now, 0, NULL, NULL), SEG_OK);
    ck_assert_int_eq(get(s, "j2", &g), SEG_MISS);
    seg_stats(s, &st);
    ck_assert_uint_eq(st.jumbos, 0);
    ck_assert_uint_eq(st.segs_held, 0);
    ck_assert_uint_eq(st.items, 1);
    ck_assert_uint_eq(st.segs_free + st.segs_open, st0.segs_free + st0.segs_open);
    /* An expired jumbo reads as a miss and gives its segments back. */
    ck_assert_int_eq(put_full(s, "ttl", big, 400 * KIB, (uint32_t)(fake_now + 10), 0), SEG_OK);
    fake_now += 11;
    ck_assert_int_eq(get(s, "ttl", &g), SEG_MISS);
    seg_stats(s, &st);
    ck_assert_uint_eq(st.jumbos, 0);
    seg_free(s);

    /* A smaller item maximum; a limit too small for a jumbo. */
    {
        struct seg_config cfg = { .mem_limit = 16 * MIB_SEG, .item_max = 512 * KIB };

        s = seg_new(&cfg);
        ck_assert_ptr_nonnull(s);
        ck_assert_int_eq(put_full(s, "a", big, 512 * KIB, 0, 0), SEG_OK);
        ck_assert_int_eq(put_full(s, "b", big, 512 * KIB + 1, 0, 0), SEG_TOO_LARGE);
        ck_assert_int_eq(peek(s, "b", &g), SEG_MISS);
        seg_free(s);
    }
    s = mkseg(8 * 64 * KIB, 64 * KIB); /* a 1 MiB value would need 17 of 8 */
    ck_assert_int_eq(put(s, "keep", "me"), SEG_OK);
    ck_assert_int_eq(put_full(s, "huge", big, MIB_SEG, 0, 0), SEG_NO_MEMORY);
    expect(s, "keep", "me"); /* nothing evicted for it */
    ck_assert_int_eq(put_full(s, "fits", big, 100 * KIB, 0, 0), SEG_OK);
    seg_free(s);
}
END_TEST

/* A flood writer: FLOOD_KEYS keys of its own, one in 8 large (260 KiB to
 * 1 MiB), the rest 10 B to 1000 B, reading its hot jumbo after each 64. */
enum {
    FLOOD_KEYS = 3000
};

struct flood {
    struct seg *s;
    int         id;
    long        hot_hits;
};

static void *
flood_main(void *arg)
{
    struct flood *f = arg;
    static char   big[2][MIB_SEG];
    char          key[32], hot[32];
    int           i;

    fill_pattern(big[f->id], MIB_SEG, (unsigned)f->id);
    snprintf(hot, sizeof(hot), "hot%d", f->id);
    if (put_full(f->s, hot, big[f->id], 700 * KIB, 0, 0) != SEG_OK) {
        return (void *)1;
    }
    for (i = 0; i < FLOOD_KEYS; i++) {
        uint32_t h = (uint32_t)i * 2654435761u;
        uint32_t nb = i % 8 == 0 ? 260 * KIB + h % (MIB_SEG - 260 * KIB) : 10 + h % 990;

        snprintf(key, sizeof(key), "f%d:%d", f->id, i);
        if (put_full(f->s, key, big[f->id], nb, 0, 0) != SEG_OK) {
            return (void *)2;
        }
        if (i % 64 == 0) {
            if (big_is(f->s, hot, 700 * KIB, (unsigned)f->id, SEG_GET_FETCH)) {
                f->hot_hits++;
            } else if (put_full(f->s, hot, big[f->id], 700 * KIB, 0, 0) != SEG_OK) {
                return (void *)3;
            }
        }
    }
    seg_thread_done(f->s);
    return NULL;
}

/* Count what reads back, and check each large value whole. */
struct tally {
    uint64_t items, bytes;
};

static int
tally_cb(void *arg, const struct seg_rec *r, uint64_t hash RC_UNUSED, unsigned freq RC_UNUSED)
{
    ((struct tally *)arg)->items++;
    ((struct tally *)arg)->bytes += seg_rec_size(seg_rec_has(r), r->nkey, r->nbytes);
    return 0;
}

/* Two threads flood large and small values at a 16 MiB limit (about 20
 * times it): every write succeeds, the counts add up (items + evictions =
 * keys written), what walks back matches items and live bytes, the held
 * segments stay within the limit, a jumbo read between floods keeps its
 * place (requeued, not evicted), and RSS grows by no more than the limit
 * plus the index and ghost table. */
START_TEST(test_jumbo_flood)
{
    enum {
        LIMIT = 16 * MIB_SEG
    };
    long             rss0 = rss_now(), grew;
    struct seg      *s = mkseg(LIMIT, 0);
    struct flood     f[2];
    pthread_t        th[2];
    struct seg_stats st;
    struct tally     t = { 0, 0 };
    uint32_t         i;
    int              k;

    for (k = 0; k < 2; k++) {
        f[k] = (struct flood){ .s = s, .id = k };
        ck_assert_int_eq(pthread_create(&th[k], NULL, flood_main, &f[k]), 0);
    }
    for (k = 0; k < 2; k++) {
        void *rc;

        ck_assert_int_eq(pthread_join(th[k], &rc), 0);
        ck_assert_ptr_null(rc);
        ck_assert_int_gt(f[k].hot_hits, FLOOD_KEYS / 64 / 2);
    }
    seg_stats(s, &st);
    grew = rss_now() - rss0;
    ck_assert_uint_gt(st.evictions, FLOOD_KEYS);
    ck_assert_uint_gt(st.jumbos, 0);
    ck_assert_uint_le(st.segs_held, st.segs_total);
    ck_assert_uint_le(st.segs_held + st.segs_free + st.segs_open, st.segs_total);
    for (i = 0; i < SEG_STRIPES; i++) {
        seg_walk(s, i, tally_cb, &t);
    }
    ck_assert_uint_eq(t.items, st.items);
    ck_assert_uint_eq(t.bytes, st.live_bytes);
    /* Each key written once (a hot key rewritten only after it was
     * evicted), nothing expired: every key is either here or evicted. */
    ck_assert_uint_eq(st.reclaimed, 0);
    ck_assert_uint_ge(st.items + st.evictions, 2 * FLOOD_KEYS + 2);
    ck_assert_uint_le(st.items + st.evictions, 2 * (FLOOD_KEYS + FLOOD_KEYS / 64 + 2));
    ck_assert_uint_le(st.live_bytes, (uint64_t)LIMIT);
    assert_rss_within(grew, LIMIT, &st);
    seg_free(s);
}
END_TEST

Suite *
seg_update_suite(void)
{
    Suite *s = suite_create("seg_update");
    TCase *tc = tcase_create("seg_update");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_update_threads);
    tcase_add_test(tc, test_update_refuse);
    tcase_add_test(tc, test_jumbo_basic);
    tcase_add_test(tc, test_jumbo_flood);
    suite_add_tcase(s, tc);
    return s;
}
