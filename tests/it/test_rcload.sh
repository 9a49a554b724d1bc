#!/bin/sh
# Smoke test of the request-path load tool (tests/bench/rcload, issue 24) so
# it cannot rot: against one ringcached, 1 s closed loop at depth 8 and 0.5 s
# open loop at a low rate must report throughput, no errors and ordered
# percentiles, a server stall shows in open-loop latency; a bad argument
# exits 2 with a message. TAP.
. "${RC_SRCDIR:-$(dirname "$0")/../..}/tests/it/lib.sh"

RCLOAD="$RC_BUILDDIR/tests/bench/rcload"
tmp=$(mktemp -d)
# SIGCONT first: a failure must not leave the node stopped.
trap '[ -n "${n_pid:-}" ] && kill -CONT "$n_pid" 2>/dev/null; rc_cleanup; rm -rf "$tmp"' EXIT

# figure FILE NAME: the value of the `NAME value` line of FILE.
figure() { awk -v n="$2" '$1 == n {print $2}' "$1"; }

# check_run FILE WHAT: nonzero throughput, 0 errors, p50 <= p99 <= p99.9.
check_run() {
    tap_diag "$(tr '\n' ' ' <"$1")"
    ops=$(figure "$1" ops_per_s)
    awk -v v="$ops" 'BEGIN {exit !(v > 0)}'
    tap_ok $? "$2: nonzero throughput ($ops ops/s)"
    [ "$(figure "$1" errors)" = 0 ] && [ "$(figure "$1" failed_conns)" = 0 ]
    tap_ok $? "$2: no errors and no failed connections"
    awk -v a="$(figure "$1" p50_us)" -v b="$(figure "$1" p99_us)" \
        -v c="$(figure "$1" p999_us)" 'BEGIN {exit !(a > 0 && a <= b && b <= c)}'
    tap_ok $? "$2: 0 < p50 <= p99 <= p99.9"
}

rc_start_node n -t 2 -m 64
tap_ok $? "node starts"

timeout 30 "$RCLOAD" -s "127.0.0.1:$n_port" -c 8 -T 2 -d 8 -t 1 -k 2000 >"$tmp/closed" 2>"$tmp/err"
tap_ok $? "closed loop exits 0 ($(cat "$tmp/err"))"
check_run "$tmp/closed" "closed loop depth 8"
[ "$(figure "$tmp/closed" misses)" = 0 ]
tap_ok $? "closed loop: every key was prefilled, so no get missed"

timeout 30 "$RCLOAD" -s "127.0.0.1:$n_port" -c 4 -T 1 -d 4 -t 0.5 -r 2000 -k 2000 -m 5 \
    >"$tmp/open" 2>"$tmp/err"
tap_ok $? "open loop multi-get exits 0 ($(cat "$tmp/err"))"
check_run "$tmp/open" "open loop 2000/s"
ops=$(figure "$tmp/open" ops)
# 0.5 s at 2000/s schedules 1000 requests; all of them are answered.
[ "$ops" -ge 950 ] && [ "$ops" -le 1001 ] && [ "$(figure "$tmp/open" behind)" -le 50 ]
tap_ok $? "open loop kept its rate ($ops requests in 0.5 s at 2000/s)"

# No coordinated omission: the server stopped for 0.3 s of a 1 s open-loop
# run at 2000/s leaves ~600 requests scheduled during the stall, of which
# only 2 x 4 (-c x -d) can be in flight; the rest are held back. Measured
# from their scheduled send times, more than 1% of them waited over 0.2 s;
# measured from when they went out, only those 8 (0.4%) would have.
timeout 30 "$RCLOAD" -s "127.0.0.1:$n_port" -c 2 -T 1 -d 4 -t 1 -r 2000 -k 2000 -n \
    >"$tmp/stall" 2>"$tmp/err" &
load_pid=$!
sleep 0.3 # into the run; the stall's length is what is measured, not awaited
kill -STOP "$n_pid"
sleep 0.3
kill -CONT "$n_pid"
wait "$load_pid"
tap_ok $? "open loop across a stall exits 0 ($(cat "$tmp/err"))"
tap_diag "$(tr '\n' ' ' <"$tmp/stall")"
awk -v v="$(figure "$tmp/stall" p99_us)" 'BEGIN {exit !(v >= 200000)}'
tap_ok $? "open loop charges the stall to the requests scheduled in it (p99 >= 200 ms)"

timeout 10 "$RCLOAD" -s "127.0.0.1:$n_port" -d 0 >"$tmp/out" 2>"$tmp/err"
st=$?
[ "$st" -eq 2 ] && grep -q -- '-d 0' "$tmp/err"
tap_ok $? "-d 0 exits 2 naming the bad option (got $st)"
rc_pid_alive "$n_pid"
tap_ok $? "node still serving"

tap_done
