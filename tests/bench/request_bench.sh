#!/usr/bin/env bash
# Request path benchmark (issue 24, not a test): tests/bench/rcload against
# ringcached and Debian's memcached with the same -t and -m, alternating
# ROUNDS times per row, medians. Rows: closed loop get90/set10 at pipeline
# depth 1/8/32 x 16 and 256 connections, multi-gets of 10, and an open loop
# at a fixed rate both sustain (RATE_FRAC of memcached's closed-loop depth-1
# throughput). Prints per row one `figure value` line per measure
#   req/ROW/tps ours=.. memcached=.. ratio=..   (requests/s, medians)
#   req/ROW/p50_us, p99_us, p999_us ours=.. memcached=..
#   req/ROW/cpu_us_per_op ours=.. memcached=.. (server user+system CPU)
#   req/ROW/errors ours=.. memcached=..         (sum over the rounds)
# then the same as a markdown table. memcaslap (node_bench.sh) stays the
# second, independent tool.
# Environment: RC_BUILDDIR (./_build), ROUNDS (5), SECS (3 per run), THREADS
# (server -t, 2), CLIENT_THREADS (rcload -T, 2), MEM (-m, 64), KEYS (100000),
# RATE_FRAC (0.6), OURS_ARGS (more ringcached options), MEMCACHED and THEIRS_ARGS
# (another peer, e.g. MEMCACHED=_build/server/ringcached THEIRS_ARGS="-o
# store_engine=classic": one engine against the other), QUICK=1 (1 round of
# 1 s: a smoke run).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${RC_BUILDDIR:-$top/_build}
ours_bin=$build/server/ringcached
theirs_bin=${MEMCACHED:-/usr/bin/memcached}
rcload=$build/tests/bench/rcload
if [ "${QUICK:-0}" = 1 ]; then
    rounds=${ROUNDS:-1}
    secs=${SECS:-1}
else
    rounds=${ROUNDS:-5}
    secs=${SECS:-3}
fi
threads=${THREADS:-2}
cthreads=${CLIENT_THREADS:-2}
mem=${MEM:-64}
keys=${KEYS:-100000}
rate_frac=${RATE_FRAC:-0.6}
for b in "$ours_bin" "$theirs_bin" "$rcload"; do
    [ -x "$b" ] || { echo "missing $b (run make in $build)" >&2; exit 1; }
done
. "$here/bench_lib.sh"


# run_load PID PORT RCLOAD_ARGS...: one rcload run against a running server;
# prints "TPS P50 P99 P999 CPU_US_PER_OP ERRORS".
run_load() {
    local pid=$1 port=$2 t0 t1 ops
    shift 2
    t0=$(cpu_ticks "$pid")
    timeout $((secs + 60)) "$rcload" -s "127.0.0.1:$port" -T "$cthreads" -t "$secs" \
        -k "$keys" "$@" >"$work/out" 2>"$work/err" || true
    t1=$(cpu_ticks "$pid")
    ops=$(awk '$1 == "ops" {print $2}' "$work/out")
    [ -n "$ops" ] || { cat "$work/err" >&2; echo "0 0 0 0 0 1"; return; }
    awk -v cpu="$(us_per_op "$t0" "$t1" "$ops")" '
        {v[$1] = $2}
        END {print v["ops_per_s"], v["p50_us"], v["p99_us"], v["p999_us"], cpu,
                   v["errors"] + v["failed_conns"]}' "$work/out"
}

table="| row | tps ringcached | tps memcached | ratio | p50 µs ours / mc | p99 µs ours / mc | p99.9 µs ours / mc | CPU µs/op ours / mc | errors |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
# row NAME RCLOAD_ARGS...: fresh servers side by side (an idle one costs
# nothing), the key space prefilled once, then ROUNDS alternating runs.
# Sets ROW_THEIRS_TPS to memcached's median throughput.
row() {
    local name=$1 which pid port line i
    shift
    local -A m=()
    start_server ours; local opid=$SRV_PID oport=$SRV_PORT
    start_server memcached; local tpid=$SRV_PID tport=$SRV_PORT
    for which in ours memcached; do
        if [ $which = ours ]; then port=$oport; else port=$tport; fi
        "$rcload" -s "127.0.0.1:$port" -k "$keys" -c 1 -T 1 -t 0.01 >/dev/null 2>&1 ||
            { echo "prefill of $which failed" >&2; exit 1; }
    done
    local ratios=""
    for _ in $(seq "$rounds"); do
        for which in ours memcached; do
            if [ $which = ours ]; then pid=$opid port=$oport; else pid=$tpid port=$tport; fi
            line=$(run_load "$pid" "$port" -n "$@")
            read -r -a v <<<"$line"
            for i in 0 1 2 3 4 5; do m[$which.$i]="${m[$which.$i]:-} ${v[$i]}"; done
        done
        ratios="$ratios $(ratio "${m[ours.0]##* }" "${v[0]}")"
    done
    SRV_PID=$opid; stop_server
    SRV_PID=$tpid; stop_server
    local -A med=()
    for which in ours memcached; do
        for i in 0 1 2 3 4; do med[$which.$i]=$(echo "${m[$which.$i]}" | median); done
        med[$which.5]=$(echo "${m[$which.5]}" | tr ' ' '\n' | awk '{s += $1} END {print s + 0}')
    done
    local rt
    rt=$(ratio "${med[ours.0]}" "${med[memcached.0]}")
    echo "req/$name/tps ours=${med[ours.0]} memcached=${med[memcached.0]} ratio=$rt   # paired:$ratios"
    local names=(tps p50_us p99_us p999_us cpu_us_per_op errors)
    for i in 1 2 3 4 5; do
        echo "req/$name/${names[$i]} ours=${med[ours.$i]} memcached=${med[memcached.$i]}"
    done
    table="$table
| $name | ${med[ours.0]} | ${med[memcached.0]} | $rt | ${med[ours.1]} / ${med[memcached.1]} | ${med[ours.2]} / ${med[memcached.2]} | ${med[ours.3]} / ${med[memcached.3]} | ${med[ours.4]} / ${med[memcached.4]} | ${med[ours.5]} / ${med[memcached.5]} |"
    ROW_THEIRS_TPS=${med[memcached.0]}
}

echo "# request_bench: rounds=$rounds secs=$secs server -t $threads -m $mem, rcload -T $cthreads, keys=$keys"
row closed_get90_set10_c16_d1 -c 16 -d 1
rate=$(awk -v t="$ROW_THEIRS_TPS" -v f="$rate_frac" 'BEGIN {printf "%d", t * f}')
for c in 16 256; do
    for d in 1 8 32; do
        [ "$c$d" = 161 ] && continue
        row "closed_get90_set10_c${c}_d$d" -c "$c" -d "$d"
    done
done
row closed_multiget10_c16_d1 -c 16 -d 1 -m 10
row closed_multiget10_c16_d8 -c 16 -d 8 -m 10
row "open_get90_set10_c16_r$rate" -c 16 -d 8 -r "$rate"
echo
echo "$table"
