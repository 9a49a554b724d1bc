/*
 * mstore_suite: the membership store's conformance tests, run against
 * each backend: conditional writes (create-if-absent, CAS, CAS-delete,
 * multi-op transactions), races between forked processes (exactly one
 * winner, no lost update) and revisions that never repeat. Case "dir": the
 * directory backend, plus its own malformed files (file:line) and crash
 * leftovers. Case "etcd" (only when RC_MSTORE_ETCD names a running etcd,
 * "etcd://HOST:PORT/PREFIX[?OPTIONS]": tests/it/test_mstore_etcd.sh starts
 * one): the same conformance tests, each under a prefix of its own, plus
 * endpoint failover and an etcd that is down.
 */
#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/mstore.h"
#include "lib/util.h"
#include "tests/suites.h"

#define RACERS 12

static char           tdir[256];  /* a scratch directory (the dir store itself for "dir") */
static char           spec[1024]; /* what the tests and their racers open */
static struct mstore *st;
static char           err[1024];
static unsigned       n_etcd_tests; /* makes each etcd test's prefix unique */

static int
rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void
setup(void)
{
    snprintf(tdir, sizeof(tdir), "/tmp/rc-mstore-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tdir));
    snprintf(spec, sizeof(spec), "%s", tdir);
    st = mstore_open(spec, err, sizeof(err));
    ck_assert_msg(st != NULL, "open: %s", err);
}

/* RC_MSTORE_ETCD with "/t<pid>-<n>" added to its prefix (before any
 * "?options"): every test starts from an empty store. */
static void
setup_etcd(void)
{
    const char *base = getenv("RC_MSTORE_ETCD");
    const char *q = strchr(base, '?');
    int         plen = q != NULL ? (int)(q - base) : (int)strlen(base);

    snprintf(tdir, sizeof(tdir), "/tmp/rc-mstore-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tdir));
    snprintf(spec, sizeof(spec), "%.*s/t%d-%u%s", plen, base, (int)getpid(), n_etcd_tests++,
             q != NULL ? q : "");
    st = mstore_open(spec, err, sizeof(err));
    ck_assert_msg(st != NULL, "open %s: %s", spec, err);
}

static void
teardown(void)
{
    mstore_close(st);
    st = NULL;
    nftw(tdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Write a raw file into the store directory (to plant corruption). */
static void
plant(const char *name, const char *text)
{
    char  path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", tdir, name);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_create_twice)
{
    struct mstore_record rec;
    uint64_t             r1 = 0, r2 = 0;

    ck_assert_int_eq(mstore_get(st, "pending.meta", &rec, err, sizeof(err)), MSTORE_ENOENT);
    ck_assert_int_eq(
        mstore_create_if_absent(st, "pending.meta", "token a\n", 8, &r1, err, sizeof(err)),
        MSTORE_OK);
    ck_assert_uint_gt(r1, 0);
    ck_assert_int_eq(
        mstore_create_if_absent(st, "pending.meta", "token b\n", 8, &r2, err, sizeof(err)),
        MSTORE_ECONFLICT);
    ck_assert_int_eq(mstore_get(st, "pending.meta", &rec, err, sizeof(err)), MSTORE_OK);
    ck_assert_uint_eq(rec.rev, r1);
    ck_assert_ptr_nonnull(strstr(rec.text, "token a\n"));
    ck_assert_ptr_null(strstr(rec.text, "token b"));
    ck_assert_msg(strncmp(rec.text, "# rev ", 6) == 0, "%s", rec.text);
    ck_assert_ptr_nonnull(strstr(rec.where, "/pending.meta"));
    mstore_record_clear(&rec);
}
END_TEST

START_TEST(test_cas_stale)
{
    struct mstore_record rec;
    uint64_t             r1 = 0, r2 = 0, r3 = 0;

    ck_assert_int_eq(
        mstore_create_if_absent(st, "active.members", "epoch 1\n", 8, &r1, err, sizeof(err)),
        MSTORE_OK);
    ck_assert_int_eq(mstore_cas(st, "active.members", r1, "epoch 2\n", 8, &r2, err, sizeof(err)),
                     MSTORE_OK);
    ck_assert_uint_gt(r2, r1);
    /* The stale revision loses and changes nothing. */
    ck_assert_int_eq(mstore_cas(st, "active.members", r1, "epoch 9\n", 8, &r3, err, sizeof(err)),
                     MSTORE_ECONFLICT);
    ck_assert_int_eq(mstore_get(st, "active.members", &rec, err, sizeof(err)), MSTORE_OK);
    ck_assert_uint_eq(rec.rev, r2);
    ck_assert_ptr_nonnull(strstr(rec.text, "epoch 2\n"));
    mstore_record_clear(&rec);
    /* CAS on an absent record is a conflict too, not a create. */
    ck_assert_int_eq(mstore_cas(st, "nothing", r2, "x", 1, NULL, err, sizeof(err)),
                     MSTORE_ECONFLICT);
    ck_assert_int_eq(mstore_get(st, "nothing", &rec, err, sizeof(err)), MSTORE_ENOENT);
}
END_TEST

START_TEST(test_delete_and_no_aba)
{
    struct mstore_record rec;
    uint64_t             r1 = 0, r2 = 0;

    ck_assert_int_eq(mstore_create_if_absent(st, "pending.meta", "a", 1, &r1, err, sizeof(err)),
                     MSTORE_OK);
    ck_assert_int_eq(mstore_delete(st, "pending.meta", r1 + 1, err, sizeof(err)), MSTORE_ECONFLICT);
    ck_assert_int_eq(mstore_delete(st, "pending.meta", r1, err, sizeof(err)), MSTORE_OK);
    ck_assert_int_eq(mstore_get(st, "pending.meta", &rec, err, sizeof(err)), MSTORE_ENOENT);
    /* Deleting again with the old revision conflicts; with ANY it is a no-op. */
    ck_assert_int_eq(mstore_delete(st, "pending.meta", r1, err, sizeof(err)), MSTORE_ECONFLICT);
    ck_assert_int_eq(mstore_delete(st, "pending.meta", MSTORE_ANY_REV, err, sizeof(err)),
                     MSTORE_OK);
    /* Re-created: a new revision, so a holder of r1 cannot act on it. */
    ck_assert_int_eq(mstore_create_if_absent(st, "pending.meta", "b", 1, &r2, err, sizeof(err)),
                     MSTORE_OK);
    ck_assert_uint_gt(r2, r1);
    ck_assert_int_eq(mstore_cas(st, "pending.meta", r1, "c", 1, NULL, err, sizeof(err)),
                     MSTORE_ECONFLICT);
}
END_TEST

/* The directory backend's counter file lost: revisions do not go back. */
START_TEST(test_counter_lost)
{
    uint64_t r1 = 0, r2 = 0;

    ck_assert_int_eq(mstore_create_if_absent(st, "pending.meta", "b", 1, &r2, err, sizeof(err)),
                     MSTORE_OK);
    ck_assert_int_eq(mstore_delete(st, "pending.meta", r2, err, sizeof(err)), MSTORE_OK);
    ck_assert_int_eq(mstore_create_if_absent(st, "active.members", "x", 1, &r1, err, sizeof(err)),
                     MSTORE_OK);
    {
        char path[512];

        snprintf(path, sizeof(path), "%s/revision", tdir);
        ck_assert_int_eq(unlink(path), 0);
    }
    ck_assert_int_eq(mstore_cas(st, "active.members", r1, "y", 1, &r2, err, sizeof(err)),
                     MSTORE_OK);
    ck_assert_uint_gt(r2, r1);
}
END_TEST

START_TEST(test_txn_all_or_nothing)
{
    struct mstore_record rec;
    struct mstore_op     ops[3];
    uint64_t             ra = 0, rp = 0, rn = 0;
    size_t               failed = 99;

    ck_assert_int_eq(
        mstore_create_if_absent(st, "active.members", "epoch 1\n", 8, &ra, err, sizeof(err)),
        MSTORE_OK);
    ck_assert_int_eq(
        mstore_create_if_absent(st, "pending.members", "epoch 2\n", 8, &rp, err, sizeof(err)),
        MSTORE_OK);
    /* Commit shape: put active, put history, delete pending; a stale
     * pending revision fails the whole thing. */
    ops[0] = (struct mstore_op){ MSTORE_PUT, "active.members", ra, "epoch 2\n", 8 };
    ops[1] = (struct mstore_op){ MSTORE_CREATE, "history/epoch-2.members", 0, "epoch 2\n", 8 };
    ops[2] = (struct mstore_op){ MSTORE_DELETE, "pending.members", rp + 100, NULL, 0 };
    ck_assert_int_eq(mstore_txn(st, ops, 3, &failed, NULL, err, sizeof(err)), MSTORE_ECONFLICT);
    ck_assert_uint_eq(failed, 2);
    ck_assert_int_eq(mstore_get(st, "active.members", &rec, err, sizeof(err)), MSTORE_OK);
    ck_assert_uint_eq(rec.rev, ra);
    mstore_record_clear(&rec);
    ck_assert_int_eq(mstore_get(st, "history/epoch-2.members", &rec, err, sizeof(err)),
                     MSTORE_ENOENT);
    ops[2].rev = rp;
    ck_assert_int_eq(mstore_txn(st, ops, 3, &failed, &rn, err, sizeof(err)), MSTORE_OK);
    ck_assert_int_eq(mstore_get(st, "history/epoch-2.members", &rec, err, sizeof(err)), MSTORE_OK);
    ck_assert_uint_eq(rec.rev, rn);
    mstore_record_clear(&rec);
    ck_assert_int_eq(mstore_get(st, "pending.members", &rec, err, sizeof(err)), MSTORE_ENOENT);
    /* A check of absence (rev 0) on a present record fails. */
    ops[0] = (struct mstore_op){ MSTORE_CHECK, "active.members", 0, NULL, 0 };
    ck_assert_int_eq(mstore_txn(st, ops, 1, &failed, NULL, err, sizeof(err)), MSTORE_ECONFLICT);
}
END_TEST

START_TEST(test_bad_names)
{
    static const char *bad[] = {
        "", "../x", "/abs", "a//b", "a/../b", "a/.", "sp ace", "a/", "x\n"
    };
    struct mstore_record rec;
    size_t               i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(mstore_get(st, bad[i], &rec, err, sizeof(err)) == MSTORE_EINVAL, "%s",
                      bad[i]);
        ck_assert_msg(mstore_create_if_absent(st, bad[i], "x", 1, NULL, err, sizeof(err)) ==
                          MSTORE_EINVAL,
                      "%s", bad[i]);
    }
}
END_TEST

START_TEST(test_corrupt)
{
    struct mstore_record rec;
    char                 want[512];

    plant("active.members", "epoch 1\nnode a 1.2.3.4:5\n");
    ck_assert_int_eq(mstore_get(st, "active.members", &rec, err, sizeof(err)), MSTORE_ECORRUPT);
    snprintf(want, sizeof(want), "%s/active.members:1: ", tdir);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
    /* Read with others at one revision: the same error, nothing to free. */
    {
        static const char *const two[] = { "pending.members", "active.members" };
        struct mstore_record     recs[2];

        plant("pending.members", "# rev 3\nepoch 1\n");
        ck_assert_int_eq(mstore_get_many(st, two, 2, recs, err, sizeof(err)), MSTORE_ECORRUPT);
        ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
        ck_assert_ptr_null(recs[0].text);
        ck_assert_ptr_null(recs[1].text);
    }
    /* A write touching a corrupt record is refused, not silently fixed. */
    ck_assert_int_eq(mstore_cas(st, "active.members", 1, "x", 1, NULL, err, sizeof(err)),
                     MSTORE_ECORRUPT);
    plant("active.members", "# rev 0\nepoch 1\n");
    ck_assert_int_eq(mstore_get(st, "active.members", &rec, err, sizeof(err)), MSTORE_ECORRUPT);
    plant("active.members", "# rev 12x\n");
    ck_assert_int_eq(mstore_get(st, "active.members", &rec, err, sizeof(err)), MSTORE_ECORRUPT);
    plant("active.members", "# rev 99999999999999999999999\n");
    ck_assert_int_eq(mstore_get(st, "active.members", &rec, err, sizeof(err)), MSTORE_ECORRUPT);
    plant("active.members", "# rev 7");
    ck_assert_int_eq(mstore_get(st, "active.members", &rec, err, sizeof(err)), MSTORE_ECORRUPT);
    plant("active.members", "# rev 7\n");
    ck_assert_int_eq(mstore_get(st, "active.members", &rec, err, sizeof(err)), MSTORE_OK);
    ck_assert_uint_eq(rec.rev, 7);
    mstore_record_clear(&rec);
    /* The revision counter file too. */
    plant("revision", "many\n");
    ck_assert_int_eq(mstore_create_if_absent(st, "x", "x", 1, NULL, err, sizeof(err)),
                     MSTORE_ECORRUPT);
    snprintf(want, sizeof(want), "%s/revision:1: ", tdir);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
}
END_TEST

START_TEST(test_leftover_tmp)
{
    uint64_t r = 0;

    /* A crash between writing the temp file and linking it leaves NAME.tmp;
     * it must not block or leak into the next create. */
    plant("pending.meta.tmp", "# rev 3\ngarbage");
    ck_assert_int_eq(mstore_create_if_absent(st, "pending.meta", "ok\n", 3, &r, err, sizeof(err)),
                     MSTORE_OK);
    {
        char path[512];

        snprintf(path, sizeof(path), "%s/pending.meta.tmp", tdir);
        ck_assert_int_eq(access(path, F_OK), -1);
    }
}
END_TEST

/* Malformed etcd specs are refused at open, with what is wrong. */
START_TEST(test_etcd_bad_specs)
{
    static const char *const bad[][2] = {
        { "etcd://", "HOST:PORT" },
        { "etcd://127.0.0.1/rc", "not HOST:PORT" },
        { "etcd://127.0.0.1:0/rc", "not HOST:PORT" },
        { "etcd://127.0.0.1:2379", "HOST:PORT" },
        { "etcd://127.0.0.1:2379/", "prefix is empty" },
        { "etcd://127.0.0.1:2379,/rc", "not HOST:PORT" },
        { "etcd://127.0.0.1:2379/rc?bogus=1", "bogus" },
        { "etcd://127.0.0.1:2379/rc?timeout=", "timeout=" },
        { "etcd://127.0.0.1:2379/rc?timeout=5", "100..600000" },
        { "etcd://127.0.0.1:2379/rc?cacert=/x", "etcds://" },
        { "etcds://127.0.0.1:2379/rc?cert=/x", "go together" },
        { "etcd://127.0.0.1:2379/rc?user=root", "go together" },
        { "etcd://127.0.0.1:2379/rc?user=root&password-file=/nonexistent/pw", "/nonexistent/pw" },
        { "zk://127.0.0.1:2181/rc", "unknown store" },
    };
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        ck_assert_msg(mstore_open(bad[i][0], err, sizeof(err)) == NULL, "%s opened", bad[i][0]);
        ck_assert_msg(strstr(err, bad[i][1]) != NULL, "%s: '%s' lacks '%s'", bad[i][0], err,
                      bad[i][1]);
    }
}
END_TEST

/* An etcd endpoint that refuses connections is skipped for the next. */
START_TEST(test_etcd_failover)
{
    const char          *base = getenv("RC_MSTORE_ETCD");
    char                 two[1200];
    struct mstore       *s2;
    struct mstore_record rec;
    uint64_t             r = 0;

    /* Port 1 on loopback: nobody listens (connection refused). */
    ck_assert(strncmp(base, "etcd://", 7) == 0 || strncmp(base, "etcds://", 8) == 0);
    snprintf(two, sizeof(two), "%.*s127.0.0.1:1,%s", (int)(strstr(base, "://") + 3 - base), base,
             spec + (strstr(spec, "://") + 3 - spec));
    s2 = mstore_open(two, err, sizeof(err));
    ck_assert_msg(s2 != NULL, "%s: %s", two, err);
    ck_assert_int_eq(
        mstore_create_if_absent(s2, "active.members", "epoch 1\n", 8, &r, err, sizeof(err)),
        MSTORE_OK);
    ck_assert_int_eq(mstore_get(s2, "active.members", &rec, err, sizeof(err)), MSTORE_OK);
    ck_assert_uint_eq(rec.rev, r);
    mstore_record_clear(&rec);
    mstore_close(s2);
    /* The same record through the single-endpoint handle. */
    ck_assert_int_eq(mstore_get(st, "active.members", &rec, err, sizeof(err)), MSTORE_OK);
    ck_assert_uint_eq(rec.rev, r);
    mstore_record_clear(&rec);
}
END_TEST

/* No endpoint answers: a clear I/O error naming the endpoint, no hang. */
START_TEST(test_etcd_down)
{
    struct mstore       *s2 = mstore_open("etcd://127.0.0.1:1,127.0.0.1:2/rc", err, sizeof(err));
    struct mstore_record rec;

    ck_assert_ptr_nonnull(s2);
    ck_assert_int_eq(mstore_get(s2, "active.members", &rec, err, sizeof(err)), MSTORE_EIO);
    ck_assert_msg(strstr(err, "etcd 127.0.0.1:") != NULL && strstr(err, "other endpoint"), "%s",
                  err);
    ck_assert_int_eq(mstore_create_if_absent(s2, "x", "x", 1, NULL, err, sizeof(err)), MSTORE_EIO);
    mstore_close(s2);
}
END_TEST

/* Fork n children running fn(i) and return how many exited 0. */
static int
race(int n, int (*fn)(int))
{
    pid_t pids[RACERS * 2];
    int   i, status, wins = 0;

    ck_assert_int_le(n, RACERS * 2);
    for (i = 0; i < n; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            _exit(fn(i));
        }
    }
    for (i = 0; i < n; i++) {
        ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
        ck_assert(WIFEXITED(status));
        ck_assert_msg(WEXITSTATUS(status) <= 1, "child %d failed: %d", i, WEXITSTATUS(status));
        wins += WEXITSTATUS(status) == 0;
    }
    return wins;
}

/* One racer: its own store handle (its own lock fd), one create. */
static int
racer_create(int i)
{
    struct mstore *s = mstore_open(spec, NULL, 0);
    char           body[64];
    int            rc, n;

    if (s == NULL) {
        return 2;
    }
    n = snprintf(body, sizeof(body), "winner %d\n", i);
    rc = mstore_create_if_absent(s, "pending.meta", body, (size_t)n, NULL, NULL, 0);
    mstore_close(s);
    return rc == MSTORE_OK ? 0 : rc == MSTORE_ECONFLICT ? 1 : 3;
}

START_TEST(test_race_create)
{
    struct mstore_record rec;
    int                  round, wins, who = -1;

    for (round = 0; round < 5; round++) {
        wins = race(RACERS, racer_create);
        ck_assert_int_eq(wins, 1);
        ck_assert_int_eq(mstore_get(st, "pending.meta", &rec, err, sizeof(err)), MSTORE_OK);
        ck_assert_msg(sscanf(strchr(rec.text, '\n') + 1, "winner %d", &who) == 1, "%s", rec.text);
        ck_assert(who >= 0 && who < RACERS);
        ck_assert_int_eq(mstore_delete(st, "pending.meta", rec.rev, err, sizeof(err)), MSTORE_OK);
        mstore_record_clear(&rec);
    }
}
END_TEST

#define CAS_ROUNDS 30

/* One racer: CAS_ROUNDS read-increment-CAS attempts on a counter record.
 * Exits 0 if any succeeded, 1 if none (both fine); the lost-update check
 * is the final count against the successes it appends to a log. */
static int
racer_cas(int i)
{
    struct mstore       *s = mstore_open(spec, NULL, 0);
    struct mstore_record rec;
    char                 body[64], path[512];
    int                  k, n, won = 0;
    long                 v;
    FILE                *log;

    (void)i;
    if (s == NULL) {
        return 2;
    }
    snprintf(path, sizeof(path), "%s/../%s.log", tdir, strrchr(tdir, '/') + 1);
    for (k = 0; k < CAS_ROUNDS; k++) {
        if (mstore_get(s, "counter", &rec, NULL, 0) != MSTORE_OK) {
            return 2;
        }
        v = strtol(strchr(rec.text, '\n') + 1, NULL, 10);
        n = snprintf(body, sizeof(body), "%ld\n", v + 1);
        if (mstore_cas(s, "counter", rec.rev, body, (size_t)n, NULL, NULL, 0) == MSTORE_OK) {
            log = fopen(path, "a");
            if (log == NULL) {
                return 2;
            }
            fprintf(log, "%" PRIu64 "\n", rec.rev);
            fclose(log);
            won++;
        }
        mstore_record_clear(&rec);
    }
    mstore_close(s);
    return won > 0 ? 0 : 1;
}

START_TEST(test_race_cas)
{
    struct mstore_record rec;
    char                 path[512];
    uint64_t             revs[RACERS * CAS_ROUNDS], r;
    size_t               n = 0, i, j;
    long                 final;
    FILE                *log;

    ck_assert_int_eq(mstore_create_if_absent(st, "counter", "0\n", 2, NULL, err, sizeof(err)),
                     MSTORE_OK);
    race(RACERS, racer_cas);
    snprintf(path, sizeof(path), "%s/../%s.log", tdir, strrchr(tdir, '/') + 1);
    log = fopen(path, "r");
    ck_assert_ptr_nonnull(log);
    while (n < RACERS * CAS_ROUNDS && fscanf(log, "%" SCNu64, &r) == 1) {
        revs[n++] = r;
    }
    fclose(log);
    unlink(path);
    /* Exactly one winner per revision, and no lost update. */
    for (i = 0; i < n; i++) {
        for (j = i + 1; j < n; j++) {
            ck_assert_msg(revs[i] != revs[j], "two CAS won from revision %" PRIu64, revs[i]);
        }
    }
    ck_assert_int_eq(mstore_get(st, "counter", &rec, err, sizeof(err)), MSTORE_OK);
    final = strtol(strchr(rec.text, '\n') + 1, NULL, 10);
    mstore_record_clear(&rec);
    ck_assert_int_eq(final, (long)n);
    ck_assert_int_ge(n, CAS_ROUNDS); /* progress: at least one win per round */
}
END_TEST

#define PAIR_WRITES 150

/* mstore_get_many reads at one revision: a writer process replaces two
 * records in one transaction each time (both hold the same counter),
 * while this process reads the pair (and an absent record) at once. Read
 * one after the other, the two would differ whenever a write landed in
 * between (a commit writes active and deletes pending together). */
START_TEST(test_read_at_once)
{
    static const char *const names[] = { "active.members", "absent.members", "pending.members" };
    struct mstore_record     recs[3];
    pid_t                    pid;
    int                      status, reads = 0, done = 0;
    long                     last = 0;

    ck_assert_int_eq(
        mstore_txn(st,
                   (struct mstore_op[]){ { MSTORE_CREATE, "active.members", 0, "0\n", 2 },
                                         { MSTORE_CREATE, "pending.members", 0, "0\n", 2 } },
                   2, NULL, NULL, err, sizeof(err)),
        MSTORE_OK);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct mstore *s2 = mstore_open(spec, NULL, 0);
        char           body[32];
        int            k, n;

        for (k = 1; s2 != NULL && k <= PAIR_WRITES; k++) {
            n = snprintf(body, sizeof(body), "%d\n", k);
            struct mstore_op ops[] = {
                { MSTORE_PUT, "active.members", MSTORE_ANY_REV, body, (size_t)n },
                { MSTORE_PUT, "pending.members", MSTORE_ANY_REV, body, (size_t)n },
            };
            if (mstore_txn(s2, ops, 2, NULL, NULL, NULL, 0) != MSTORE_OK) {
                _exit(1);
            }
        }
        _exit(s2 != NULL ? 0 : 1);
    }
    while (!done) {
        long a, b;

        done = waitpid(pid, &status, WNOHANG) == pid;
        ck_assert_int_eq(mstore_get_many(st, names, 3, recs, err, sizeof(err)), MSTORE_OK);
        ck_assert_ptr_nonnull(recs[0].text);
        ck_assert_ptr_nonnull(recs[2].text);
        ck_assert_uint_eq(recs[1].rev, 0);
        ck_assert_ptr_null(recs[1].text);
        a = strtol(strchr(recs[0].text, '\n') + 1, NULL, 10);
        b = strtol(strchr(recs[2].text, '\n') + 1, NULL, 10);
        ck_assert_msg(a == b, "read %ld and %ld: not at one revision", a, b);
        ck_assert_uint_eq(recs[0].rev, recs[2].rev); /* one txn stamps both */
        ck_assert_int_ge(a, last);                   /* and reads go forward */
        last = a;
        mstore_record_clear(&recs[0]);
        mstore_record_clear(&recs[2]);
        reads++;
    }
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_int_eq(last, PAIR_WRITES); /* the last read came after the last write */
    ck_assert_int_gt(reads, 1);
    /* A bad name fails the whole read. */
    ck_assert_int_eq(mstore_get_many(st, (const char *const[]){ "active.members", "../x" }, 2, recs,
                                     err, sizeof(err)),
                     MSTORE_EINVAL);
}
END_TEST

/* mstore_wait: a timeout when nothing is written, and a wake-up soon
 * after another process writes (a node's store watch). */
START_TEST(test_wait)
{
    uint64_t r1 = 0, r2 = 0, seen = 0;
    int64_t  t0;
    pid_t    pid;
    int      status;

    ck_assert_int_eq(
        mstore_create_if_absent(st, "active.members", "epoch 1\n", 8, &r1, err, sizeof(err)),
        MSTORE_OK);
    t0 = util_now_ms();
    ck_assert_int_eq(mstore_wait(st, r1, 300, &seen, err, sizeof(err)), MSTORE_ENOENT);
    ck_assert_int_ge(util_now_ms() - t0, 250);
    /* A write already there (above r1 - 1) is seen at once. */
    ck_assert_int_eq(mstore_wait(st, r1 - 1, 3000, &seen, err, sizeof(err)), MSTORE_OK);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct mstore  *s2 = mstore_open(spec, NULL, 0);
        struct timespec ts = { 0, 300 * 1000 * 1000 };

        nanosleep(&ts, NULL);
        _exit(s2 != NULL && mstore_cas(s2, "active.members", r1, "epoch 2\n", 8, NULL, NULL, 0) ==
                                MSTORE_OK
                  ? 0
                  : 1);
    }
    t0 = util_now_ms();
    ck_assert_int_eq(mstore_wait(st, r1, 10000, &seen, err, sizeof(err)), MSTORE_OK);
    ck_assert_int_lt(util_now_ms() - t0, 5000);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    {
        struct mstore_record rec;

        ck_assert_int_eq(mstore_get(st, "active.members", &rec, err, sizeof(err)), MSTORE_OK);
        r2 = rec.rev;
        mstore_record_clear(&rec);
    }
    ck_assert_uint_gt(r2, r1);
    ck_assert_msg(seen == 0 || seen >= r2, "seen %" PRIu64 ", record at %" PRIu64, seen, r2);
}
END_TEST

/* mstore_list: the records under a directory, without its name. */
START_TEST(test_list)
{
    char **names;
    size_t n, i;
    bool   a = false, b = false;

    ck_assert_int_eq(mstore_create_if_absent(st, "alive/a", "x", 1, NULL, err, sizeof(err)),
                     MSTORE_OK);
    ck_assert_int_eq(mstore_create_if_absent(st, "alive/b", "y", 1, NULL, err, sizeof(err)),
                     MSTORE_OK);
    ck_assert_int_eq(mstore_create_if_absent(st, "alivez", "z", 1, NULL, err, sizeof(err)),
                     MSTORE_OK);
    ck_assert_int_eq(mstore_list(st, "alive", &names, &n, err, sizeof(err)), MSTORE_OK);
    ck_assert_uint_eq(n, 2);
    for (i = 0; i < n; i++) {
        a = a || strcmp(names[i], "a") == 0;
        b = b || strcmp(names[i], "b") == 0;
    }
    ck_assert(a && b);
    mstore_names_free(names, n);
    ck_assert_int_eq(mstore_list(st, "nothing", &names, &n, err, sizeof(err)), MSTORE_OK);
    ck_assert_uint_eq(n, 0);
    mstore_names_free(names, n);
}
END_TEST

/* The directory store has no leases, and says so. */
START_TEST(test_dir_no_leases)
{
    uint64_t lease = 0;

    ck_assert(!mstore_has_leases(st));
    ck_assert_int_eq(mstore_lease(st, &lease, 3, err, sizeof(err)), MSTORE_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "no leases"));
    ck_assert_int_eq(mstore_put_leased(st, "alive/a", "x", 1, 1, err, sizeof(err)), MSTORE_EINVAL);
    ck_assert_int_eq(mstore_create_leased(st, "role/watch", "x", 1, 1, err, sizeof(err)),
                     MSTORE_EINVAL);
}
END_TEST

/* An etcd lease: a record on it lives while it is kept alive and is gone
 * once it expires; keeping an expired lease alive says so. */
START_TEST(test_etcd_lease)
{
    uint64_t lease = 0, kept;
    char   **names;
    size_t   n = 1;
    int64_t  deadline;

    ck_assert(mstore_has_leases(st));
    ck_assert_int_eq(mstore_lease(st, &lease, 2, err, sizeof(err)), MSTORE_OK);
    ck_assert_uint_ne(lease, 0);
    ck_assert_int_eq(mstore_put_leased(st, "alive/n1", "boot 1\n", 7, lease, err, sizeof(err)),
                     MSTORE_OK);
    kept = lease;
    ck_assert_int_eq(mstore_lease(st, &kept, 2, err, sizeof(err)), MSTORE_OK);
    ck_assert_uint_eq(kept, lease);
    ck_assert_int_eq(mstore_list(st, "alive", &names, &n, err, sizeof(err)), MSTORE_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(names[0], "n1");
    mstore_names_free(names, n);
    /* No more keepalives: etcd deletes the record within the TTL (+1 s). */
    deadline = util_now_ms() + 8000;
    while (n != 0 && util_now_ms() < deadline) {
        struct timespec ts = { 0, 200 * 1000 * 1000 };

        nanosleep(&ts, NULL);
        ck_assert_int_eq(mstore_list(st, "alive", &names, &n, err, sizeof(err)), MSTORE_OK);
        mstore_names_free(names, n);
    }
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(mstore_lease(st, &kept, 2, err, sizeof(err)), MSTORE_ENOENT);
    ck_assert_uint_eq(kept, 0);
}
END_TEST

/* An election on a leased record: the first create wins, a second (any
 * lease) is refused while the first lease lives, and wins once it ran
 * out. */
START_TEST(test_etcd_role)
{
    struct mstore_record rec;
    uint64_t             l1 = 0, l2 = 0;
    int64_t              deadline;
    int                  rc = MSTORE_ECONFLICT;

    ck_assert_int_eq(mstore_lease(st, &l1, 2, err, sizeof(err)), MSTORE_OK);
    ck_assert_int_eq(mstore_lease(st, &l2, 30, err, sizeof(err)), MSTORE_OK);
    ck_assert_int_eq(mstore_create_leased(st, "role/watch", "one\n", 4, l1, err, sizeof(err)),
                     MSTORE_OK);
    ck_assert_int_eq(mstore_create_leased(st, "role/watch", "two\n", 4, l2, err, sizeof(err)),
                     MSTORE_ECONFLICT);
    ck_assert_int_eq(mstore_create_leased(st, "role/watch", "one\n", 4, l1, err, sizeof(err)),
                     MSTORE_ECONFLICT); /* even for the holder: create means absent */
    ck_assert_int_eq(mstore_get(st, "role/watch", &rec, err, sizeof(err)), MSTORE_OK);
    ck_assert_str_eq(strchr(rec.text, '\n') + 1, "one\n");
    mstore_record_clear(&rec);
    deadline = util_now_ms() + 8000;
    while (rc == MSTORE_ECONFLICT && util_now_ms() < deadline) {
        struct timespec ts = { 0, 200 * 1000 * 1000 };

        nanosleep(&ts, NULL);
        rc = mstore_create_leased(st, "role/watch", "two\n", 4, l2, err, sizeof(err));
    }
    ck_assert_int_eq(rc, MSTORE_OK);
    ck_assert_int_eq(mstore_get(st, "role/watch", &rec, err, sizeof(err)), MSTORE_OK);
    ck_assert_str_eq(strchr(rec.text, '\n') + 1, "two\n");
    mstore_record_clear(&rec);
}
END_TEST

/*
 * Crash atomicity of the directory backend (issue 26, f01): a forked
 * child runs one transaction with RC_MSTORE_CRASH_AT=N (it exits 137 just
 * before its Nth file operation), N = 1, 2, ... until it completes. After
 * each crash a fresh handle reads every record involved: the state before
 * the whole transaction or after it, never a mix, and it moves from before
 * to after once (at the commit point) and stays there; a later write gets
 * a higher revision. Once per multi-write case, a reader that applies the
 * journal of the dead writer is itself killed at each of its operations.
 */
#define CRASH_RECS 5

struct crash_case {
    const char      *label;
    const char      *names[CRASH_RECS];  /* every record involved */
    const char      *before[CRASH_RECS]; /* their bodies before (NULL: absent) */
    const char      *after[CRASH_RECS];  /* and after the transaction */
    struct mstore_op ops[CRASH_RECS];
    size_t           n_ops;
};

static const struct crash_case crash_cases[] = {
    { "commit",
      { "active.members", "history/epoch-2.members", "pending.members", "pending.meta",
        "committed.meta" },
      { "epoch 1\n", NULL, "epoch 2\n", "rec 2\n", "rec 1\n" },
      { "epoch 2\n", "epoch 2\n", NULL, NULL, "rec 2\n" },
      { { MSTORE_PUT, "active.members", 1, "epoch 2\n", 8 },
        { MSTORE_PUT, "history/epoch-2.members", MSTORE_ANY_REV, "epoch 2\n", 8 },
        { MSTORE_DELETE, "pending.members", 1, NULL, 0 },
        { MSTORE_DELETE, "pending.meta", 1, NULL, 0 },
        { MSTORE_PUT, "committed.meta", MSTORE_ANY_REV, "rec 2\n", 6 } },
      5 },
    { "prepare",
      { "active.members", "pending.members", "pending.meta" },
      { "epoch 1\n", NULL, NULL },
      { "epoch 1\n", "epoch 2\n", "rec 2\n" },
      { { MSTORE_CHECK, "active.members", 1, NULL, 0 },
        { MSTORE_CREATE, "pending.members", 0, "epoch 2\n", 8 },
        { MSTORE_CREATE, "pending.meta", 0, "rec 2\n", 6 } },
      3 },
    { "cas",
      { "pending.meta", "active.members" },
      { "rec 1\n", "epoch 1\n" },
      { "rec 2\n", "epoch 1\n" },
      { { MSTORE_PUT, "pending.meta", 1, "rec 2\n", 6 } },
      1 },
    { "delete",
      { "pending.meta", "active.members" },
      { "rec 1\n", "epoch 1\n" },
      { NULL, "epoch 1\n" },
      { { MSTORE_DELETE, "pending.meta", 1, NULL, 0 } },
      1 },
};

/* Run fn(dir) in a child with RC_MSTORE_CRASH_AT=n: its exit status
 * (137: it crashed at operation n). */
static int
crash_child(const char *dir, unsigned n, int (*fn)(struct mstore *s, const struct crash_case *c),
            const struct crash_case *c)
{
    char  at[16];
    pid_t pid;
    int   status;

    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct mstore *s = mstore_open(dir, NULL, 0);

        snprintf(at, sizeof(at), "%u", n);
        setenv("RC_MSTORE_CRASH_AT", at, 1);
        unsetenv("RC_MSTORE_CRASH_TXN");
        _exit(s != NULL && fn(s, c) == MSTORE_OK ? 0 : 1);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static int
run_case_txn(struct mstore *s, const struct crash_case *c)
{
    return mstore_txn(s, c->ops, c->n_ops, NULL, NULL, NULL, 0);
}

static int
run_case_read(struct mstore *s, const struct crash_case *c)
{
    struct mstore_record rec;
    int                  rc = mstore_get(s, c->names[0], &rec, NULL, 0);

    mstore_record_clear(&rec);
    return rc == MSTORE_ENOENT ? MSTORE_OK : rc;
}

/* Which state the store at dir reads as: 0 before, 1 after, -1 neither.
 * *max_rev: the highest revision read. */
static int
crash_state(const char *dir, const struct crash_case *c, uint64_t *max_rev)
{
    struct mstore       *s = mstore_open(dir, err, sizeof(err));
    struct mstore_record recs[CRASH_RECS];
    size_t               n = 0, i;
    bool                 is[2] = { true, true };
    int                  k;

    ck_assert_msg(s != NULL, "%s", err);
    while (n < CRASH_RECS && c->names[n] != NULL) {
        n++;
    }
    ck_assert_int_eq(mstore_get_many(s, c->names, n, recs, err, sizeof(err)), MSTORE_OK);
    *max_rev = 0;
    for (i = 0; i < n; i++) {
        const char *body = recs[i].text != NULL ? strchr(recs[i].text, '\n') + 1 : NULL;

        for (k = 0; k < 2; k++) {
            const char *want = k == 0 ? c->before[i] : c->after[i];

            is[k] =
                is[k] && (want == NULL ? body == NULL : body != NULL && strcmp(body, want) == 0);
        }
        *max_rev = recs[i].rev > *max_rev ? recs[i].rev : *max_rev;
        mstore_record_clear(&recs[i]);
    }
    mstore_close(s);
    return is[0] ? 0 : is[1] ? 1 : -1;
}

/* A fresh store at dir holding c's before state, at revision 1. */
static void
crash_seed(const char *dir, const struct crash_case *c)
{
    struct mstore   *s = mstore_open(dir, err, sizeof(err));
    struct mstore_op ops[CRASH_RECS];
    size_t           i, n = 0;

    ck_assert_msg(s != NULL, "%s", err);
    for (i = 0; i < CRASH_RECS && c->names[i] != NULL; i++) {
        if (c->before[i] != NULL) {
            ops[n++] = (struct mstore_op){ MSTORE_CREATE, c->names[i], 0, c->before[i],
                                           strlen(c->before[i]) };
        }
    }
    ck_assert_int_eq(mstore_txn(s, ops, n, NULL, NULL, err, sizeof(err)), MSTORE_OK);
    mstore_close(s);
}

START_TEST(test_crash_atomic)
{
    const struct crash_case *c = &crash_cases[_i];
    char                     dir[512], path[600];
    unsigned                 n, m, crashes = 0;
    bool                     replayed = false;
    int                      state, last = 0, rc;
    uint64_t                 rev, rev2;

    for (n = 1;; n++) {
        snprintf(dir, sizeof(dir), "%s/%s-%u", tdir, c->label, n);
        crash_seed(dir, c);
        rc = crash_child(dir, n, run_case_txn, c);
        ck_assert_msg(rc == 137 || rc == 0, "%s N=%u: the child exited %d", c->label, n, rc);
        snprintf(path, sizeof(path), "%s/txn.journal", dir);
        if (rc == 137 && !replayed && access(path, F_OK) == 0) {
            /* The journal is in place: kill its replay at each step. */
            for (m = 1; crash_child(dir, m, run_case_read, c) == 137; m++) {
                ck_assert_uint_lt(m, 100);
            }
            ck_assert_msg(m > 1, "%s: the reader applied nothing", c->label);
            ck_assert_int_eq(access(path, F_OK), -1);
            replayed = true;
        }
        state = crash_state(dir, c, &rev);
        ck_assert_msg(state >= 0, "%s N=%u: a transaction half applied", c->label, n);
        ck_assert_msg(state >= last, "%s N=%u: before again after a later crash point", c->label,
                      n);
        ck_assert_msg(rc == 137 || state == 1, "%s N=%u: completed, not applied", c->label, n);
        last = state;
        {
            struct mstore *s = mstore_open(dir, err, sizeof(err));

            ck_assert_int_eq(
                mstore_cas(s, "later", MSTORE_ANY_REV, "x\n", 2, &rev2, err, sizeof(err)),
                MSTORE_OK);
            ck_assert_msg(rev2 > rev, "%s N=%u: revision %" PRIu64 " after %" PRIu64, c->label, n,
                          rev2, rev);
            mstore_close(s);
        }
        if (rc == 0) {
            break;
        }
        crashes++;
        ck_assert_uint_lt(n, 100);
    }
    ck_assert_uint_gt(crashes, 3);
    ck_assert_msg(c->n_ops == 1 || replayed, "%s: no crash left the journal in place", c->label);
}
END_TEST

/* The conformance tests: every backend passes them. */
static void
add_conformance(TCase *tc)
{
    tcase_add_test(tc, test_create_twice);
    tcase_add_test(tc, test_cas_stale);
    tcase_add_test(tc, test_delete_and_no_aba);
    tcase_add_test(tc, test_txn_all_or_nothing);
    tcase_add_test(tc, test_bad_names);
    tcase_add_test(tc, test_race_create);
    tcase_add_test(tc, test_race_cas);
    tcase_add_test(tc, test_wait);
    tcase_add_test(tc, test_read_at_once);
    tcase_add_test(tc, test_list);
}

Suite *
mstore_suite(void)
{
    Suite *s = suite_create("mstore");
    TCase *tc = tcase_create("dir");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    add_conformance(tc);
    tcase_add_test(tc, test_counter_lost);
    tcase_add_test(tc, test_corrupt);
    tcase_add_test(tc, test_leftover_tmp);
    tcase_add_test(tc, test_etcd_bad_specs);
    tcase_add_test(tc, test_dir_no_leases);
    tcase_add_loop_test(tc, test_crash_atomic, 0,
                        (int)(sizeof(crash_cases) / sizeof(crash_cases[0])));
    suite_add_tcase(s, tc);
    if (getenv("RC_MSTORE_ETCD") != NULL) {
        tc = tcase_create("etcd");
        tcase_add_checked_fixture(tc, setup_etcd, teardown);
        tcase_set_timeout(tc, 60);
        add_conformance(tc);
        tcase_add_test(tc, test_etcd_failover);
        tcase_add_test(tc, test_etcd_down);
        tcase_add_test(tc, test_etcd_lease);
        tcase_add_test(tc, test_etcd_role);
        suite_add_tcase(s, tc);
    }
    return s;
}
