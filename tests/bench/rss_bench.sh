#!/usr/bin/env bash
# RSS after a flood (not a test): sets of never-repeated keys, FLOOD times
# the memory limit in bytes, into ringcached and Debian's memcached with
# the same -m and -t (tests/bench/hitratio_load -S 1 -V SIZE), then each
# server's VmRSS. Floods of one size each on a fresh server, and `mix`:
# every size in turn on one server (sizes that shift). Prints
#   rss/<size>/m<M> ours=<MB> memcached=<MB> ours_over_m=<RSS/M> bound=<1.1M+16>
# Environment: RC_BUILDDIR (./_build), MEM (-m, 64), THREADS (-t, 2),
# FLOOD (5), SIZES ("100 1024 8192 102400 1000000"), MEMCACHED.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${RC_BUILDDIR:-$top/_build}
ours_bin=$build/server/ringcached
load_bin=$build/tests/bench/hitratio_load
theirs_bin=${MEMCACHED:-/usr/bin/memcached}
mem=${MEM:-64}
threads=${THREADS:-2}
flood=${FLOOD:-5}
sizes=${SIZES:-100 1024 8192 102400 1000000}
for b in "$ours_bin" "$theirs_bin" "$load_bin"; do
    [ -x "$b" ] || { echo "missing $b (make bench builds hitratio_load)" >&2; exit 1; }
done
. "$here/bench_lib.sh"
mc_user=()
[ "$(id -u)" = 0 ] && mc_user=(-u nobody)
start_server() {
    SRV_PORT=$(free_port)
    if [ "$1" = ours ]; then
        # shellcheck disable=SC2086 # OURS_ARGS: extra options, word-split on purpose
        "$ours_bin" -l 127.0.0.1 -p "$SRV_PORT" -t "$threads" -m "$mem" ${OURS_ARGS:-} &
    else
        "$theirs_bin" "${mc_user[@]}" -l 127.0.0.1 -p "$SRV_PORT" -U 0 -t "$threads" -m "$mem" &
    fi
    SRV_PID=$!
    pids+=("$SRV_PID")
    wait_port "$SRV_PORT" || { echo "$1 did not start" >&2; exit 1; }
}
rss_mb() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
# flood PORT SIZE SEED: FLOOD x MEM MiB of sets of SIZE-byte values
flood() {
    local n=$((flood * mem * 1048576 / $2))
    "$load_bin" -s "127.0.0.1:$1" -S 1 -V "$2" -w 0 -n "$n" -x "$3" >/dev/null
}
run() { # NAME SIZES...
    local name=$1 seed=1 sz
    shift
    start_server ours; opid=$SRV_PID; oport=$SRV_PORT
    start_server memcached; tpid=$SRV_PID; tport=$SRV_PORT
    for sz in "$@"; do
        flood "$oport" "$sz" "$seed" &
        local lo=$!
        flood "$tport" "$sz" "$seed"
        wait "$lo"
        seed=$((seed + 1))
    done
    local a b
    a=$(rss_mb "$opid"); b=$(rss_mb "$tpid")
    SRV_PID=$opid; stop_server
    SRV_PID=$tpid; stop_server
    echo "rss/$name/m$mem ours=$a memcached=$b ours_over_m=$(ratio "$a" "$mem")" \
        "bound=$(awk -v m="$mem" 'BEGIN {print 1.1 * m + 16}')"
}
for sz in $sizes; do
    run "$sz" "$sz"
done
# shellcheck disable=SC2086 # sizes: one argument each
run mix $sizes $(echo $sizes | tr ' ' '\n' | tac | tr '\n' ' ')
