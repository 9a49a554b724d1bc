#!/usr/bin/env bash
# hit ratio benchmark (not a test): tests/bench/hitratio_load, a cache-aside
# client (get; on a miss, set), against ringcached and Debian's memcached
# with the same -m and -t, both loaded at once with the same request
# sequence (fresh servers per cell). Keys: Zipf over KEYS keys; values
# 64-1024 bytes, a function of the key. Workloads:
#   z0.7, z0.99, z1.2       Zipf skew s
#   z0.99+ttl               half the keys with a TTL of 5-60 s
#   z0.99+scan20            20% of requests to never-repeated keys
# Prints `figure value` lines per workload and -m:
#   hit_ratio/<workload>/m<M> ours=... memcached=... diff=...
#   items/<workload>/m<M> ours=... memcached=...   (curr_items at the end)
# Hit ratio depends on the request sequence, not on timing (except the TTL
# workload, whose expiries follow the clock). Environment: RC_BUILDDIR
# (./_build), THREADS (-t, 2), MEMS ("32 64 128"), KEYS (1000000), WARMUP
# and REQUESTS (2000000 each: the first WARMUP requests are not counted),
# WORKLOADS (all five), QUICK=1 (-m 64, z0.99 and z0.99+scan20, 1M + 1M),
# OURS_ARGS (more ringcached options), MEMCACHED (/usr/bin/memcached).
#
# `hitratio_bench.sh rss`: RSS after a flood instead. Sets of never-repeated
# keys, FLOOD (5) times the limit in bytes, into both servers at -m MEM
# (64): one flood per size of SIZES ("100 1024 8192 102400 1000000") on a
# fresh server, then `mix`, every size in turn and back on one server.
# Prints, in MB,
#   rss/<size>/m<M> ours=... ours_settled=... memcached=... bound=<1.1M+16>
# (ours_settled: 3 s later, after the sweeper's malloc_trim.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${RC_BUILDDIR:-$top/_build}
ours_bin=$build/server/ringcached
load_bin=$build/tests/bench/hitratio_load
theirs_bin=${MEMCACHED:-/usr/bin/memcached}
threads=${THREADS:-2}
keys=${KEYS:-1000000}
mode=${1:-hitratio}
if [ "${QUICK:-0}" = 1 ]; then
    mems=${MEMS:-64}
    workloads=${WORKLOADS:-z0.99 z0.99+scan20}
    warmup=${WARMUP:-1000000}
    requests=${REQUESTS:-1000000}
else
    mems=${MEMS:-32 64 128}
    workloads=${WORKLOADS:-z0.7 z0.99 z1.2 z0.99+ttl z0.99+scan20}
    warmup=${WARMUP:-2000000}
    requests=${REQUESTS:-2000000}
fi
for b in "$ours_bin" "$theirs_bin" "$load_bin"; do
    [ -x "$b" ] || { echo "missing $b (make bench builds hitratio_load)" >&2; exit 1; }
done
. "$here/bench_lib.sh"
mc_user=()
[ "$(id -u)" = 0 ] && mc_user=(-u nobody)
# start_server WHICH MEM: sets SRV_PID, SRV_PORT
start_server() {
    SRV_PORT=$(free_port)
    if [ "$1" = ours ]; then
        # shellcheck disable=SC2086 # OURS_ARGS: extra options, word-split on purpose
        "$ours_bin" -l 127.0.0.1 -p "$SRV_PORT" -t "$threads" -m "$2" -c 1024 ${OURS_ARGS:-} &
    else
        "$theirs_bin" "${mc_user[@]}" -l 127.0.0.1 -p "$SRV_PORT" -U 0 -t "$threads" -m "$2" \
            -c 1024 &
    fi
    SRV_PID=$!
    pids+=("$SRV_PID")
    wait_port "$SRV_PORT" || { echo "$1 did not start" >&2; exit 1; }
}
# load_args WORKLOAD: hitratio_load's options for it
load_args() {
    local w=$1 args=()
    args=(-k "$keys" -w "$warmup" -n "$requests" -z "${w%%+*}")
    args[7]=${args[7]#z}
    case $w in
    *+ttl) args+=(-T) ;;
    *+scan20) args+=(-S 0.2) ;;
    esac
    echo "${args[@]}"
}

# ---- rss mode ----
rss_mb() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
# flood PORT SIZE SEED: FLOOD x MEM MiB of sets of SIZE-byte values
flood() {
    local n=$((${FLOOD:-5} * ${MEM:-64} * 1048576 / $2))
    "$load_bin" -s "127.0.0.1:$1" -S 1 -V "$2" -w 0 -n "$n" -x "$3" >/dev/null
}
rss_run() { # NAME SIZES...
    local name=$1 m=${MEM:-64} seed=1 sz lo a a2 b
    shift
    start_server ours "$m"; opid=$SRV_PID; oport=$SRV_PORT
    start_server memcached "$m"; tpid=$SRV_PID; tport=$SRV_PORT
    for sz in "$@"; do
        flood "$oport" "$sz" "$seed" &
        lo=$!
        flood "$tport" "$sz" "$seed"
        wait "$lo"
        seed=$((seed + 1))
    done
    a=$(rss_mb "$opid"); b=$(rss_mb "$tpid")
    sleep 3 # the sweeper's trim (TRIM_SECONDS), not a wait for an event
    a2=$(rss_mb "$opid")
    SRV_PID=$opid; stop_server
    SRV_PID=$tpid; stop_server
    echo "rss/$name/m$m ours=$a ours_settled=$a2 memcached=$b" \
        "bound=$(awk -v m="$m" 'BEGIN {print 1.1 * m + 16}')"
}
if [ "$mode" = rss ]; then
    sizes=${SIZES:-100 1024 8192 102400 1000000}
    for sz in $sizes; do
        rss_run "$sz" "$sz"
    done
    # shellcheck disable=SC2086 # sizes: one argument each
    rss_run mix $sizes $(echo $sizes | tr ' ' '\n' | tac | tr '\n' ' ')
    exit 0
fi
field() { sed -n "s/.* $1 \([0-9.]*\).*/\1/p" "$2"; }

for w in $workloads; do
    for m in $mems; do
        start_server ours "$m"; opid=$SRV_PID; oport=$SRV_PORT
        start_server memcached "$m"; tpid=$SRV_PID; tport=$SRV_PORT
        # shellcheck disable=SC2046 # load_args: options, word-split on purpose
        "$load_bin" -s "127.0.0.1:$oport" $(load_args "$w") >"$work/ours" &
        lo=$!
        # shellcheck disable=SC2046
        "$load_bin" -s "127.0.0.1:$tport" $(load_args "$w") >"$work/theirs" &
        lt=$!
        wait "$lo" || { echo "load against ringcached failed" >&2; exit 1; }
        wait "$lt" || { echo "load against memcached failed" >&2; exit 1; }
        SRV_PID=$opid; stop_server
        SRV_PID=$tpid; stop_server
        a=$(field hit_ratio "$work/ours"); b=$(field hit_ratio "$work/theirs")
        echo "hit_ratio/$w/m$m ours=$a memcached=$b diff=$(awk -v a="$a" -v b="$b" \
            'BEGIN {printf "%+.4f", a - b}')"
        echo "items/$w/m$m ours=$(field curr_items "$work/ours")" \
            "memcached=$(field curr_items "$work/theirs")"
    done
done
