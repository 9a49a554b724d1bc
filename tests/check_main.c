/*
 * The one Check runner: a suite per module, fork mode (Check's default), TAP
 * output when CK_TAP_LOG_FILE_NAME is set (make check sets it to "-").
 * CK_RUN_SUITE / CK_RUN_CASE pick a subset, RC_CHECK_PART one of three
 * parts (below).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/suites.h"

/* RC_TEST_STORE=compact (tests/check_store_compact.sh): the store's suites
 * alone, on the compact engine (tests/check_store.h's mkstore), and the
 * compact engine's own (tests/check_store_compact.c). */
static int
run_store_only(void)
{
    SRunner *sr = srunner_create(store_suite());
    int      failed;

    srunner_add_suite(sr, store_range_suite());
    srunner_add_suite(sr, store_meta_suite());
    srunner_add_suite(sr, store_compact_suite());
    srunner_run_all(sr, CK_ENV);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/*
 * Every suite, in the order the whole runner runs them, and the part
 * (RC_CHECK_PART, tests/check_part.sh) it runs in: make check runs the
 * three parts side by side. Under ASan, LeakSanitizer's check at the exit
 * of every forked test made the whole runner the longest test of the
 * sanitizer pass by far (864 s of its 1635); the parts are balanced by
 * that run's cost per suite (its tests' time plus about 0.6 s a test).
 */
static const struct {
    Suite *(*fn)(void);
    unsigned part;
} all_suites[] = {
    { ring_suite, 3 },         { members_suite, 3 },    { store_suite, 2 },
    { store_range_suite, 1 },  { store_meta_suite, 2 }, { store_compact_suite, 1 },
    { proto_text_suite, 2 },   { conn_suite, 3 },       { client_suite, 3 },
    { client_epoch_suite, 2 }, { mcreply_suite, 1 },    { proto_suite, 3 },
    { cluster_suite, 1 },      { cport_suite, 2 },      { forward_suite, 1 },
    { fwd_order_suite, 1 },    { mstore_suite, 2 },     { replicate_suite, 2 },
    { peerauth_suite, 3 },     { util_suite, 3 },       { hotkeys_suite, 3 },
    { latency_suite, 1 },      { throttle_suite, 3 },   { authfile_suite, 3 },
    { tlsctx_suite, 3 },       { k8s_suite, 1 },        { ready_suite, 2 },
    { ctl_out_suite, 2 },      { seg_suite, 1 },        { seg_update_suite, 2 },
};

/* Whether suite i runs: all without RC_CHECK_PART, else those of its part
 * (1, 2 or 3). */
static bool
in_part(const char *part, size_t i)
{
    if (part == NULL) {
        return true;
    }
    if (strcmp(part, "1") != 0 && strcmp(part, "2") != 0 && strcmp(part, "3") != 0) {
        fprintf(stderr, "check_main: RC_CHECK_PART=%s: want 1, 2 or 3\n", part);
        exit(EXIT_FAILURE);
    }
    return all_suites[i].part == (unsigned)(part[0] - '0');
}

int
main(void)
{
    SRunner    *sr = NULL;
    int         failed;
    size_t      i;
    const char *engine = getenv("RC_TEST_STORE");
    const char *part = getenv("RC_CHECK_PART");

    if (engine != NULL && strcmp(engine, "compact") == 0) {
        return run_store_only();
    }
    for (i = 0; i < sizeof(all_suites) / sizeof(all_suites[0]); i++) {
        if (!in_part(part, i)) {
            continue;
        }
        if (sr == NULL) {
            sr = srunner_create(all_suites[i].fn());
        } else {
            srunner_add_suite(sr, all_suites[i].fn());
        }
    }
    if (sr == NULL) {
        return EXIT_SUCCESS;
    }
    srunner_run_all(sr, CK_ENV);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
