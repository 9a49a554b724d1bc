/*
 * One Check suite per module; tests/check_main.c runs them all.
 */
#ifndef TESTS_SUITES_H
#define TESTS_SUITES_H

#include <check.h>

Suite *ring_suite(void);
Suite *members_suite(void);
Suite *store_suite(void);
Suite *store_range_suite(void);
Suite *store_meta_suite(void);
Suite *store_compact_suite(void);
Suite *proto_text_suite(void);
Suite *conn_suite(void);
Suite *client_suite(void);
Suite *client_epoch_suite(void);
Suite *mcreply_suite(void);
Suite *proto_suite(void);
Suite *cluster_suite(void);
Suite *cport_suite(void);
Suite *mstore_suite(void);
Suite *forward_suite(void);
Suite *fwd_order_suite(void);
Suite *replicate_suite(void);
Suite *peerauth_suite(void);
Suite *util_suite(void);
Suite *hotkeys_suite(void);
Suite *latency_suite(void);
Suite *throttle_suite(void);
Suite *authfile_suite(void);
Suite *tlsctx_suite(void);
Suite *k8s_suite(void);
Suite *ready_suite(void);
Suite *ctl_out_suite(void);
Suite *seg_suite(void);
Suite *seg_update_suite(void);

/* Absolute path of the source tree (for test data such as the vectors). */
#ifndef RC_SRCDIR
#define RC_SRCDIR "."
#endif

#endif
