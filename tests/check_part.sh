#!/bin/sh
# One of the Check runner's three parts (tests/check_main.c, RC_CHECK_PART):
# make check runs tests/check_part_1.sh .. _3.sh, links to this script, side
# by side. The part is the number in the name this script is run by.
k=${0##*check_part_}
k=${k%.sh}
case $k in
1 | 2 | 3) ;;
*)
    echo "check_part.sh: run me as check_part_1.sh, _2.sh or _3.sh" >&2
    exit 99
    ;;
esac
RC_CHECK_PART=$k
export RC_CHECK_PART
exec "${RC_BUILDDIR:-.}/tests/check_main"
