#!/usr/bin/env bash
# Where the request path's time goes (issue 24, not a test): for ringcached
# and Debian's memcached side by side, under rcload get90/set10 with 16
# connections at pipeline DEPTHS (1 and 32), measures
#   syscalls per request (strace -c -f over one rcload run),
#   context switches and task-clock per request (perf stat),
#   the top perf symbols (perf record -g, perf report --no-children).
# Run as root (perf, strace attach). Prints `figure value` lines and the
# reports' tops; docs/request-path.md has a run of it.
# Environment: RC_BUILDDIR (./_build), SECS (3 per measurement), THREADS
# (server -t, 2), MEM (64), KEYS (100000), DEPTHS ("1 32"), TOP (10).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${RC_BUILDDIR:-$top/_build}
rcload=$build/tests/bench/rcload
secs=${SECS:-3}
threads=${THREADS:-2}
mem=${MEM:-64}
keys=${KEYS:-100000}
ntop=${TOP:-10}
for b in "$build/server/ringcached" /usr/bin/memcached "$rcload" "$(command -v perf)" \
    "$(command -v strace)"; do
    [ -x "$b" ] || { echo "missing $b" >&2; exit 1; }
done
. "$here/bench_lib.sh"

start_server() {
    SRV_PORT=$(free_port)
    if [ "$1" = ringcached ]; then
        "$build/server/ringcached" -l 127.0.0.1 -p "$SRV_PORT" -t "$threads" -m "$mem" -c 4096 &
    else
        /usr/bin/memcached -u nobody -l 127.0.0.1 -p "$SRV_PORT" -U 0 -t "$threads" -m "$mem" \
            -c 4096 &
    fi
    SRV_PID=$!
    pids+=("$SRV_PID")
    wait_port "$SRV_PORT" || { echo "$1 did not start" >&2; exit 1; }
}

# load DEPTH: one rcload run of SECS against $SRV_PORT; prints its ops.
load() {
    "$rcload" -s "127.0.0.1:$SRV_PORT" -c 16 -T 2 -d "$1" -t "$secs" -k "$keys" -n \
        >"$work/load" 2>&1 || { cat "$work/load" >&2; }
    awk '$1 == "ops" {print $2}' "$work/load"
}

# attach TOOL...: start a profiler on $SRV_PID in the background, wait
# until it is attached (its output file appears or 1 s), run the load, stop
# it with SIGINT by PID; prints the load's ops.
attach_run() {
    local depth=$1 ppid ops
    shift
    "$@" &
    ppid=$!
    sleep 1 # strace and perf attach within milliseconds; no readiness signal
    ops=$(load "$depth")
    kill -INT "$ppid"
    wait "$ppid" || true
    echo "$ops"
}

for server in ringcached memcached; do
    start_server "$server"
    "$rcload" -s "127.0.0.1:$SRV_PORT" -k "$keys" -c 1 -T 1 -t 0.01 >/dev/null
    for depth in ${DEPTHS:-1 32}; do
        tag=$server/get90_set10_c16_d$depth
        ops=$(attach_run "$depth" strace -c -f -q -o "$work/strace" -p "$SRV_PID")
        calls=$(awk '$NF == "total" {print $4}' "$work/strace")
        echo "syscalls_per_req/$tag $(awk -v c="$calls" -v n="$ops" 'BEGIN {printf "%.2f", c / n}')"
        echo "# strace -c -f (ops $ops):"
        awk -v n="$ops" 'NR > 2 && $1 !~ /^-/ && $NF != "total" && NF >= 5 {
            printf "#   %-16s %6.1f%% time %8.3f per request\n", $NF, $1, $4 / n}' \
            "$work/strace" | sed -n 1,8p
        ops=$(attach_run "$depth" perf stat -x, -e task-clock,context-switches \
            -o "$work/stat" -p "$SRV_PID")
        awk -F, -v n="$ops" -v tag="$tag" '
            $3 == "task-clock" {printf "cpu_us_per_req/%s %.2f\n", tag, $1 * 1000 / n}
            $3 == "context-switches" {printf "ctxsw_per_req/%s %.3f\n", tag, $1 / n}' \
            "$work/stat"
        ops=$(attach_run "$depth" perf record -g -q -o "$work/perf.data" -p "$SRV_PID")
        echo "# perf top $ntop symbols, self time (ops $ops):"
        perf report -i "$work/perf.data" --no-children --sort dso,symbol --stdio -q -g none \
            >"$work/report" 2>/dev/null
        grep -v '^$' "$work/report" | sed -n "1,${ntop}p" | sed 's/^/#   /; s/[ -]*$//'
    done
    stop_server
done
