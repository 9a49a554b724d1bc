#!/bin/sh
# The item store's unit suites (check_store.c, check_store_range.c,
# check_store_meta.c) again, on the compact engine the node runs by
# default; tests/check_part_*.sh run them on the chained table.
RC_TEST_STORE=compact
export RC_TEST_STORE
exec "${RC_BUILDDIR:-.}/tests/check_main"
