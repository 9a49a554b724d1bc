/*
 * The one Check runner: a suite per module, fork mode (Check's default), TAP
 * output when CK_TAP_LOG_FILE_NAME is set (make check sets it to "-").
 * CK_RUN_SUITE / CK_RUN_CASE pick a subset.
 */
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

int
main(void)
{
    SRunner    *sr;
    int         failed;
    const char *engine = getenv("RC_TEST_STORE");

    if (engine != NULL && strcmp(engine, "compact") == 0) {
        return run_store_only();
    }
    sr = srunner_create(ring_suite());
    srunner_add_suite(sr, members_suite());
    srunner_add_suite(sr, store_suite());
    srunner_add_suite(sr, store_range_suite());
    srunner_add_suite(sr, store_meta_suite());
    srunner_add_suite(sr, store_compact_suite());
    srunner_add_suite(sr, proto_text_suite());
    srunner_add_suite(sr, conn_suite());
    srunner_add_suite(sr, client_suite());
    srunner_add_suite(sr, client_epoch_suite());
    srunner_add_suite(sr, mcreply_suite());
    srunner_add_suite(sr, proto_suite());
    srunner_add_suite(sr, cluster_suite());
    srunner_add_suite(sr, cport_suite());
    srunner_add_suite(sr, forward_suite());
    srunner_add_suite(sr, fwd_order_suite());
    srunner_add_suite(sr, mstore_suite());
    srunner_add_suite(sr, replicate_suite());
    srunner_add_suite(sr, peerauth_suite());
    srunner_add_suite(sr, util_suite());
    srunner_add_suite(sr, hotkeys_suite());
    srunner_add_suite(sr, latency_suite());
    srunner_add_suite(sr, throttle_suite());
    srunner_add_suite(sr, authfile_suite());
    srunner_add_suite(sr, tlsctx_suite());
    srunner_add_suite(sr, k8s_suite());
    srunner_add_suite(sr, ready_suite());
    srunner_add_suite(sr, ctl_out_suite());
    srunner_add_suite(sr, seg_suite());
    srunner_add_suite(sr, seg_update_suite());
    srunner_run_all(sr, CK_ENV);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
