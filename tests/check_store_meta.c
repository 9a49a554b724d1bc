/*
 * store_meta_suite: the store's meta-protocol operations (server/store.c
 * store_mget, store_mset, store_mdel, store_marith, store_mdebug) and the
 * meta state they keep in an item: the win token, the stale mark, a client
 * CAS (E), their life through replication images (store_put_import with the
 * state) and the base64 of binary keys (lib/util.c). memcached 1.6.45's
 * semantics; time moves with store_clock_shift.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "server/store.h"
#include "tests/check_store.h"
#include "tests/suites.h"

/* mg on key with q; returns the item (released here) state in *r. */
static bool
mget(struct store *s, const char *key, const struct store_mget *q, struct store_mget_res *r)
{
    int                err = 0;
    struct store_item *it = store_mget(s, key, strlen(key), h(key), q, r, &err);

    ck_assert_int_eq(err, 0);
    if (it == NULL) {
        return false;
    }
    store_release(s, it);
    return true;
}

static uint64_t
client_cas(struct store *s, const char *key)
{
    struct store_item *it = store_peek(s, key, strlen(key), h(key));
    uint64_t           c;

    ck_assert_ptr_nonnull(it);
    c = store_item_cas(it);
    store_release(s, it);
    return c;
}

static uint8_t
mflags_of(struct store *s, const char *key)
{
    struct store_item *it = store_peek(s, key, strlen(key), h(key));
    uint8_t            m;

    ck_assert_ptr_nonnull(it);
    m = store_item_mflags(it);
    store_release(s, it);
    return m;
}

/* Herd protection: N vivifies once and hands out one W; every later
 * reader sees Z until the item is replaced. */
START_TEST(test_vivify_one_winner)
{
    struct store         *s = mkstore(64 * MIB, false);
    struct store_mget     q = { .bump = true, .vivify = true };
    struct store_mget_res r;
    int                   i, wins = 0;

    q.viv_exptime = store_exptime(s, 30);
    for (i = 0; i < 50; i++) {
        ck_assert(mget(s, "herd", &q, &r));
        wins += r.won;
        if (i == 0) {
            ck_assert(r.created && r.won && r.changed && !r.token_sent);
        } else {
            ck_assert(!r.created && !r.won && r.token_sent && !r.changed);
        }
    }
    ck_assert_int_eq(wins, 1);
    ck_assert(mflags_of(s, "herd") & STORE_MF_WON);
    /* The winner recaches: a new item, no token, no Z. */
    ck_assert_int_eq(set(s, "herd", "fresh"), STORE_STORED);
    ck_assert(mget(s, "herd", &q, &r));
    ck_assert(!r.won && !r.token_sent && !r.created);
    store_free(s);
}
END_TEST

/* Stale-while-revalidate: md I marks stale and clears the token, with a
 * new CAS; the first reader wins, the others get X and Z; an ms I with an
 * older CAS stores but stays stale. */
START_TEST(test_invalidate)
{
    struct store         *s = mkstore(64 * MIB, false);
    struct store_mget     q = { .bump = true };
    struct store_mget_res r;
    struct store_mdel     d = { .stale = true };
    uint64_t              cas0, tomb;
    bool                  removed;
    int                   i;

    ck_assert_int_eq(set(s, "swr", "v1"), STORE_STORED);
    cas0 = client_cas(s, "swr");
    ck_assert_int_eq(store_mdel(s, "swr", 3, h("swr"), &d, &removed, &tomb), STORE_DELETED);
    ck_assert(!removed);
    ck_assert_uint_ne(client_cas(s, "swr"), cas0);
    expect(s, "swr", "v1"); /* the value stays, marked stale */
    for (i = 0; i < 5; i++) {
        ck_assert(mget(s, "swr", &q, &r));
        ck_assert(r.stale);
        ck_assert(r.won == (i == 0));
        ck_assert(r.token_sent == (i > 0));
    }
    /* A late recache with the CAS read before the invalidation: stored
     * (allow_stale), still stale, the token kept. */
    {
        struct store_mset  o = { .allow_stale = true };
        int                err = 0;
        struct store_item *it = store_alloc_meta(s, "swr", 3, h("swr"), 0, 0, 2, false, 0, &err);

        memcpy(store_item_value_mut(it), "v2", 2);
        ck_assert_int_eq(store_mset(s, it, STORE_OP_CAS, cas0, &o, NULL, NULL), STORE_STORED);
        store_release(s, it);
    }
    expect(s, "swr", "v2");
    ck_assert_uint_eq(mflags_of(s, "swr") & (STORE_MF_STALE | STORE_MF_WON),
                      STORE_MF_STALE | STORE_MF_WON);
    /* A CAS mismatch without I is EX; md C with a wrong CAS is EX too. */
    ck_assert_int_eq(put(s, STORE_OP_CAS, "swr", "v3", 0, 0, cas0, NULL), STORE_EXISTS);
    d.has_cas = true;
    d.cas = cas0;
    ck_assert_int_eq(store_mdel(s, "swr", 3, h("swr"), &d, &removed, &tomb), STORE_EXISTS);
    /* A plain md deletes and reports the tombstone's CAS. */
    memset(&d, 0, sizeof(d));
    ck_assert_int_eq(store_mdel(s, "swr", 3, h("swr"), &d, &removed, &tomb), STORE_DELETED);
    ck_assert(removed);
    ck_assert_uint_ne(tomb, 0);
    ck_assert_int_eq(store_mdel(s, "swr", 3, h("swr"), &d, &removed, &tomb), STORE_NOT_FOUND);
    store_free(s);
}
END_TEST

/* R: win when the item expires before the given time, once. */
START_TEST(test_recache)
{
    struct store         *s = mkstore(64 * MIB, false);
    struct store_mget     q = { .bump = true, .recache = true };
    struct store_mget_res r;

    ck_assert_int_eq(put(s, STORE_OP_SET, "rc", "v", 0, 100, 0, NULL), STORE_STORED);
    q.recache_at = store_exptime(s, 30);
    ck_assert(mget(s, "rc", &q, &r));
    ck_assert(!r.won); /* 100 s left: not below 30 */
    q.recache_at = store_exptime(s, 300);
    ck_assert(mget(s, "rc", &q, &r));
    ck_assert(r.won && r.changed);
    ck_assert(mget(s, "rc", &q, &r));
    ck_assert(!r.won && r.token_sent);
    /* An item that never expires never wins by R. */
    ck_assert_int_eq(set(s, "forever", "v"), STORE_STORED);
    ck_assert(mget(s, "forever", &q, &r));
    ck_assert(!r.won);
    store_free(s);
}
END_TEST

/* h and l report the state before the command; u leaves it alone. */
START_TEST(test_hit_and_last_access)
{
    struct store         *s = mkstore(64 * MIB, false);
    struct store_mget     q = { .bump = false };
    struct store_mget_res r;

    ck_assert_int_eq(set(s, "hl", "v"), STORE_STORED);
    ck_assert(mget(s, "hl", &q, &r)); /* u */
    ck_assert(!r.fetched_before);
    store_clock_shift(s, 5);
    q.bump = true;
    ck_assert(mget(s, "hl", &q, &r));
    ck_assert(!r.fetched_before);
    ck_assert_int_eq(store_now(s) - (int64_t)r.atime_before, 5);
    ck_assert(mget(s, "hl", &q, &r));
    ck_assert(r.fetched_before);
    store_free(s);
}
END_TEST

/* E: the CAS clients see is theirs, on a new item (ms, mg N), an
 * invalidated one (md I E) and an incremented one (ma E); the store's own
 * CAS still changes with every write (it orders replicas). */
START_TEST(test_client_cas)
{
    struct store           *s = mkstore(64 * MIB, false);
    struct store_mdel       d = { .stale = true, .has_ecas = true, .ecas = 777 };
    struct store_marith     a = { .incr = true, .delta = 2, .has_ecas = true, .ecas = 4242 };
    struct store_marith_res ar;
    struct store_item      *it;
    uint64_t                own, tomb;
    bool                    removed;
    int                     err = 0;

    it = store_alloc_meta(s, "e", 1, h("e"), 0, 0, 1, true, 12345, &err);
    ck_assert_ptr_nonnull(it);
    memcpy(store_item_value_mut(it), "5", 1);
    ck_assert_int_eq(store_mset(s, it, STORE_OP_SET, 0, NULL, NULL, NULL), STORE_STORED);
    own = it->cas;
    ck_assert_uint_ne(own, 12345);
    store_release(s, it);
    ck_assert_uint_eq(client_cas(s, "e"), 12345);
    /* A compare uses the client's CAS. */
    ck_assert_int_eq(put(s, STORE_OP_CAS, "e", "6", 0, 0, own, NULL), STORE_EXISTS);
    ck_assert_int_eq(store_mdel(s, "e", 1, h("e"), &d, &removed, &tomb), STORE_DELETED);
    ck_assert_uint_eq(client_cas(s, "e"), 777);
    ck_assert(mflags_of(s, "e") & STORE_MF_STALE);
    ck_assert_int_eq(store_marith(s, "e", 1, h("e"), &a, &ar), STORE_STORED);
    ck_assert_uint_eq(ar.value, 7);
    ck_assert_uint_eq(ar.cas, 4242);
    ck_assert_uint_eq(client_cas(s, "e"), 4242);
    /* The tail is charged: an E item costs 8 bytes more. */
    {
        struct store_mdebug dbg;

        ck_assert(store_mdebug(s, "e", 1, h("e"), &dbg));
        ck_assert_uint_eq(dbg.cas, 4242);
        ck_assert_uint_eq(dbg.size, item_bytes(1, 1, SEG_RB_ECAS));
    }
    store_free(s);
}
END_TEST

/* ma: auto-create with J and N, CAS compare, decr floors at 0, the TTL. */
START_TEST(test_arith)
{
    struct store           *s = mkstore(64 * MIB, false);
    struct store_marith     a = { .incr = true, .delta = 1 };
    struct store_marith_res r;

    ck_assert_int_eq(store_marith(s, "n", 1, h("n"), &a, &r), STORE_NOT_FOUND);
    a.vivify = true;
    a.initial = 10;
    a.viv_exptime = store_exptime(s, 60);
    ck_assert_int_eq(store_marith(s, "n", 1, h("n"), &a, &r), STORE_STORED);
    ck_assert(r.created);
    ck_assert_uint_eq(r.value, 10);
    ck_assert_uint_ne(r.exptime, 0);
    ck_assert_int_eq(store_marith(s, "n", 1, h("n"), &a, &r), STORE_STORED);
    ck_assert(!r.created);
    ck_assert_uint_eq(r.value, 11);
    a.incr = false;
    a.delta = 100;
    ck_assert_int_eq(store_marith(s, "n", 1, h("n"), &a, &r), STORE_STORED);
    ck_assert_uint_eq(r.value, 0);
    a.cas_in = r.cas + 1;
    ck_assert_int_eq(store_marith(s, "n", 1, h("n"), &a, &r), STORE_EXISTS);
    ck_assert_int_eq(set(s, "t", "text"), STORE_STORED);
    a.cas_in = 0;
    ck_assert_int_eq(store_marith(s, "t", 1, h("t"), &a, &r), STORE_NON_NUMERIC);
    store_free(s);
}
END_TEST

/* Text incr of an item stored with E: the value changes, so its client
 * CAS must too (a gets before it and a cas after it must not match). It
 * was rewritten in place, keeping the E value, before incr shared ma's
 * code. */
START_TEST(test_text_incr_client_cas)
{
    struct store      *s = mkstore(64 * MIB, false);
    struct store_item *it;
    uint64_t           v = 0, cas = 0;
    int                err = 0;

    it = store_alloc_meta(s, "e", 1, h("e"), 0, 0, 1, true, 12345, &err);
    ck_assert_ptr_nonnull(it);
    memcpy(store_item_value_mut(it), "5", 1);
    ck_assert_int_eq(store_mset(s, it, STORE_OP_SET, 0, NULL, NULL, NULL), STORE_STORED);
    store_release(s, it);
    ck_assert_int_eq(store_arith(s, "e", 1, h("e"), true, 1, &v, &cas), STORE_STORED);
    ck_assert_uint_eq(v, 6);
    ck_assert_uint_ne(client_cas(s, "e"), 12345);
    ck_assert_uint_eq(client_cas(s, "e"), cas);
    ck_assert_int_eq(put(s, STORE_OP_CAS, "e", "7", 0, 0, 12345, NULL), STORE_EXISTS);
    store_free(s);
}
END_TEST

/* md x: the value goes, the item (and its client CAS) stays. Append with
 * vivify creates on a miss. */
START_TEST(test_empty_and_append_vivify)
{
    struct store      *s = mkstore(64 * MIB, false);
    struct store_mdel  d = { .empty = true, .flags = 3 };
    struct store_mset  o = { .vivify = true };
    struct store_item *it;
    uint64_t           cas0, tomb;
    uint32_t           nb = 0;
    bool               removed;
    int                err = 0;

    ck_assert_int_eq(set(s, "x", "value"), STORE_STORED);
    cas0 = client_cas(s, "x");
    ck_assert_int_eq(store_mdel(s, "x", 1, h("x"), &d, &removed, &tomb), STORE_DELETED);
    ck_assert(!removed);
    expect(s, "x", "");
    ck_assert_uint_eq(client_cas(s, "x"), cas0);
    o.viv_exptime = store_exptime(s, 30);
    it = store_alloc_meta(s, "ap", 2, h("ap"), 0, 0, 2, false, 0, &err);
    memcpy(store_item_value_mut(it), "ab", 2);
    ck_assert_int_eq(store_mset(s, it, STORE_OP_APPEND, 0, &o, NULL, &nb), STORE_STORED);
    store_release(s, it);
    ck_assert_uint_eq(nb, 2);
    it = store_alloc_meta(s, "ap", 2, h("ap"), 0, 0, 2, false, 0, &err);
    memcpy(store_item_value_mut(it), "cd", 2);
    ck_assert_int_eq(store_mset(s, it, STORE_OP_APPEND, 0, &o, NULL, &nb), STORE_STORED);
    store_release(s, it);
    ck_assert_uint_eq(nb, 4);
    expect(s, "ap", "abcd");
    /* Without vivify an append to a missing key is NS. */
    it = store_alloc_meta(s, "none", 4, h("none"), 0, 0, 1, false, 0, &err);
    memcpy(store_item_value_mut(it), "z", 1);
    ck_assert_int_eq(store_mset(s, it, STORE_OP_APPEND, 0, NULL, NULL, NULL), STORE_NOT_STORED);
    store_release(s, it);
    store_free(s);
}
END_TEST

/* A replica's copy carries the state: an imported image with the win
 * token and a client CAS answers as the primary did. */
START_TEST(test_import_state)
{
    struct store         *s = mkstore(64 * MIB, false);
    struct store_mget     q = { .bump = true };
    struct store_mget_res r;
    struct store_item    *it;
    int                   err = 0;

    it = store_import_alloc_meta(s, "rep", 3, h("rep"), 7, 0, 1,
                                 STORE_MF_WON | STORE_MF_STALE | STORE_MF_ECAS, 99, &err);
    ck_assert_ptr_nonnull(it);
    memcpy(store_item_value_mut(it), "v", 1);
    ck_assert_int_eq(store_put_import(s, it, 0x1234000000000042ull), STORE_STORED);
    store_release(s, it);
    ck_assert_uint_eq(client_cas(s, "rep"), 99);
    ck_assert(mget(s, "rep", &q, &r));
    ck_assert(r.stale && r.token_sent && !r.won); /* X and Z: the token was handed out */
    store_free(s);
}
END_TEST

/* memcached's base64 rules for b keys. */
START_TEST(test_base64)
{
    unsigned char out[64];
    char          enc[64];

    ck_assert_uint_eq(util_b64_decode("Zm9v", 4, out), 3);
    ck_assert_mem_eq(out, "foo", 3);
    ck_assert_uint_eq(util_b64_decode("Zm8=", 4, out), 2);
    ck_assert_mem_eq(out, "fo", 2);
    ck_assert_uint_eq(util_b64_decode("Zg==", 4, out), 1);
    ck_assert_uint_eq(util_b64_decode("Zm9", 3, out), 0);   /* not a multiple of 4 */
    ck_assert_uint_eq(util_b64_decode("!!!!", 4, out), 0);  /* nothing to decode */
    ck_assert_uint_eq(util_b64_decode("Zm!9v", 5, out), 3); /* skipped, as memcached */
    ck_assert_uint_eq(util_b64_decode("====", 4, out), 0);  /* bad padding */
    ck_assert_uint_eq(util_b64_encode((const unsigned char *)"foo", 3, enc), 4);
    ck_assert_mem_eq(enc, "Zm9v", 4);
    ck_assert_uint_eq(util_b64_encode((const unsigned char *)"\x00\xfe", 2, enc), 4);
    ck_assert_mem_eq(enc, "AP4=", 4);
}
END_TEST

Suite *
store_meta_suite(void)
{
    Suite *s = suite_create("store_meta");
    TCase *tc = tcase_create("meta");

    tcase_add_test(tc, test_vivify_one_winner);
    tcase_add_test(tc, test_invalidate);
    tcase_add_test(tc, test_recache);
    tcase_add_test(tc, test_hit_and_last_access);
    tcase_add_test(tc, test_client_cas);
    tcase_add_test(tc, test_arith);
    tcase_add_test(tc, test_text_incr_client_cas);
    tcase_add_test(tc, test_empty_and_append_vivify);
    tcase_add_test(tc, test_import_state);
    tcase_add_test(tc, test_base64);
    suite_add_tcase(s, tc);
    return s;
}
