/*
 * basic: the common calls of libringcache in one small program. Usage:
 *   basic MEMBERS-FILE
 * Creates a handle, writes, reads, multi-gets and deletes a few keys, and
 * shows how errors come back. Exit 0 when every step behaved as expected.
 */
#include <stdio.h>
#include <string.h>

#include <ringcache.h>

#define N_KEYS 10

/* Print a failed step and return 1 (for main's error count). */
static int
fail(const char *what, int code)
{
    fprintf(stderr, "basic: %s: %s\n", what, ringcache_strerror(code));
    return 1;
}

int
main(int argc, char **argv)
{
    struct ringcache_options opt;
    struct ringcache        *rc = NULL;
    struct ringcache_value   v = { 0 };
    struct ringcache_value   values[N_KEYS];
    const char              *keys[N_KEYS];
    char                     names[N_KEYS][32];
    int                      status[N_KEYS];
    char                     err[256];
    size_t                   owner;
    int                      i, ret, errors = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: basic MEMBERS-FILE\n");
        return 2;
    }
    /* 1. Options (defaults are fine; shown here for the timeouts) and a
     * handle from a membership file. One handle serves every thread. */
    ringcache_options_init(&opt);
    opt.op_timeout_ms = 500;
    ret = ringcache_new_members_file(&rc, argv[1], &opt, err, sizeof(err));
    if (ret != 0) {
        fprintf(stderr, "basic: %s\n", err);
        return 1;
    }

    /* 2. set then get: the key goes straight to its owner. */
    ret = ringcache_set(rc, "greeting", 8, "hello", 5, 42, 0);
    if (ret != 0) {
        errors += fail("set greeting", ret);
    }
    ret = ringcache_get(rc, "greeting", 8, &v);
    if (ret != 0) {
        errors += fail("get greeting", ret);
    } else {
        ringcache_locate(rc, "greeting", 8, &owner, 1);
        printf("greeting = %s (flags %u) from %s\n", v.data, v.flags, ringcache_node_id(rc, owner));
        if (v.len != 5 || memcmp(v.data, "hello", 5) != 0 || v.flags != 42) {
            errors += fail("get greeting: wrong value", RINGCACHE_EPROTO);
        }
        ringcache_value_clear(&v);
    }

    /* 3. Multi-get: one request per node, all nodes at once. */
    for (i = 0; i < N_KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "basic:%d", i);
        keys[i] = names[i];
        if (i % 2 == 0 && (ret = ringcache_set(rc, keys[i], strlen(keys[i]), keys[i],
                                               strlen(keys[i]), 0, 60)) != 0) {
            errors += fail("set", ret);
        }
    }
    ret = ringcache_mget(rc, keys, NULL, N_KEYS, values, status);
    if (ret != 0) {
        errors += fail("mget", ret);
    } else {
        for (i = 0; i < N_KEYS; i++) {
            if ((i % 2 == 0) != (status[i] == 0)) {
                errors += fail(keys[i], status[i]);
            }
            printf("%s: %s\n", keys[i], status[i] == 0 ? values[i].data : "(miss)");
            ringcache_value_clear(&values[i]);
        }
    }

    /* 4. Conditional writes report why they did not happen. */
    ret = ringcache_add(rc, "greeting", 8, "again", 5, 0, 0);
    if (ret != RINGCACHE_ENOTSTORED) {
        errors += fail("add on a present key should be ENOTSTORED", ret);
    }

    /* 5. Counters. */
    uint64_t n = 0;
    ringcache_set(rc, "counter", 7, "41", 2, 0, 0);
    ret = ringcache_incr(rc, "counter", 7, 1, &n);
    if (ret != 0 || n != 42) {
        errors += fail("incr counter", ret);
    }

    /* 6. delete, then the key is a miss. */
    ret = ringcache_delete(rc, "greeting", 8);
    if (ret != 0) {
        errors += fail("delete greeting", ret);
    }
    ret = ringcache_get(rc, "greeting", 8, &v);
    if (ret != RINGCACHE_ENOTFOUND) {
        errors += fail("get after delete should miss", ret);
        ringcache_value_clear(&v);
    }

    /* 7. Bad input never leaves the process. */
    ret = ringcache_set(rc, "has space", 9, "x", 1, 0, 0);
    printf("set \"has space\": %s\n", ringcache_strerror(ret));
    if (ret != RINGCACHE_EKEY) {
        errors += fail("a key with a space should be EKEY", ret);
    }

    for (i = 0; i < N_KEYS; i++) {
        ringcache_delete(rc, keys[i], strlen(keys[i]));
    }
    ringcache_delete(rc, "counter", 7);
    ringcache_free(rc);
    printf("%s\n", errors == 0 ? "basic: ok" : "basic: FAILED");
    return errors == 0 ? 0 : 1;
}
