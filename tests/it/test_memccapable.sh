#!/bin/sh
# libmemcached-tools' memccapable -a (ASCII protocol conformance) against a
# real ringcached: every test it runs must pass. One TAP line per test.
. "${RC_SRCDIR:-$(dirname "$0")/../..}/tests/it/lib.sh"

if ! command -v memccapable >/dev/null 2>&1; then
    echo "1..0 # SKIP memccapable not installed (libmemcached-tools)"
    exit 0
fi
rc_start_node node -t 2 -m 64 || { tap_ok 1 "ringcached starts"; tap_done; }
tap_ok 0 "ringcached starts on port $node_port"

out=$(timeout 120 memccapable -h 127.0.0.1 -p "$node_port" -a 2>&1)
status=$?
# memccapable prints "ascii <name>   [pass]" per test (a failure may print
# the unexpected reply in between).
tests=$(printf '%s\n' "$out" | grep -c '^ascii ')
passes=$(printf '%s\n' "$out" | grep -c '^ascii .*\[pass\]$')
printf '%s\n' "$out" | awk -v n="$TAP_N" '/^ascii / {
    name = $0; sub(/ *\[.*$/, "", name); n++
    if ($0 ~ /\[pass\]$/) print "ok " n " - memccapable " name
    else print "not ok " n " - memccapable " name "\n# " $0 }'
TAP_N=$((TAP_N + tests))
TAP_FAILED=$((TAP_FAILED + tests - passes))
[ "$tests" -ge 20 ]
tap_ok $? "memccapable ran its ASCII tests ($tests)"
tap_ok $status "memccapable exits 0"
[ "$status" -eq 0 ] || tap_diag "$out"
rc_pid_alive "$node_pid"
tap_ok $? "node still running"
rc_stop_pid "$node_pid"
tap_ok $RC_STATUS "SIGTERM exits 0"
tap_done
