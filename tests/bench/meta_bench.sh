#!/usr/bin/env bash
# meta protocol benchmark (not a test): tests/bench/meta_load against
# ringcached and Debian's memcached with the same -t and -m, alternating
# ROUNDS times per workload, fresh servers per workload. Prints `figure value`
# lines:
#   tps_ratio/mg_hit, mg_flags, mg_miss, mg_quiet_pipeline, mg90_ms10
#     (ours / memcached, the ratio of the medians; the paired ratios of
#     each round and their median follow)
#   tps/<workload> ours=... memcached=...  (medians, ops/s)
#   cpu_us_per_op/<workload> ours=... memcached=...  (server user+system CPU)
# Workloads: mg <key> v (hit), mg <key> v t c f (flags), mg <never stored> v
# (miss), QDEPTH x mg <key> v q then mn (quiet_pipeline), 90% mg v + 10% ms.
# meta_load checks every reply; a wrong one fails the benchmark.
# Environment: RC_BUILDDIR (default ./_build), ROUNDS (7), SECS (3 per run),
# THREADS (server -t, 2), MEM (-m, 64), LOAD_THREADS (2), CONNS (16 per load
# thread), DEPTH (requests in flight per connection, 1), QDEPTH (quiet mg per
# mn, 16), KEYS (100000), VSIZE (100), KEYLEN (32), MEMCACHED (/usr/bin/memcached),
# WORKLOADS (a space-separated subset of the five, all by default).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${RC_BUILDDIR:-$top/_build}
ours_bin=$build/server/ringcached
load_bin=$build/tests/bench/meta_load
theirs_bin=${MEMCACHED:-/usr/bin/memcached}
rounds=${ROUNDS:-7}
secs=${SECS:-3}
threads=${THREADS:-2}
mem=${MEM:-64}
load_threads=${LOAD_THREADS:-2}
conns=${CONNS:-16}
depth=${DEPTH:-1}
qdepth=${QDEPTH:-16}
keys=${KEYS:-100000}
vsize=${VSIZE:-100}
keylen=${KEYLEN:-32}
for b in "$ours_bin" "$theirs_bin" "$load_bin"; do
    [ -x "$b" ] || { echo "missing $b (make bench builds meta_load)" >&2; exit 1; }
done
. "$here/bench_lib.sh"
# memcached refuses to run as root without -u.
mc_user=()
[ "$(id -u)" = 0 ] && mc_user=(-u nobody)
# start_server WHICH: sets SRV_PID, SRV_PORT
start_server() {
    SRV_PORT=$(free_port)
    if [ "$1" = ours ]; then
        "$ours_bin" -l 127.0.0.1 -p "$SRV_PORT" -t "$threads" -m "$mem" -c 4096 &
    else
        "$theirs_bin" "${mc_user[@]}" -l 127.0.0.1 -p "$SRV_PORT" -U 0 -t "$threads" \
            -m "$mem" -c 4096 &
    fi
    SRV_PID=$!
    pids+=("$SRV_PID")
    wait_port "$SRV_PORT" || { echo "$1 did not start" >&2; exit 1; }
}

# mix_of WORKLOAD: meta_load's -m and -d
mix_of() {
    case $1 in
    mg_hit) echo "hit $depth" ;;
    mg_flags) echo "flags $depth" ;;
    mg_miss) echo "miss $depth" ;;
    mg_quiet_pipeline) echo "quiet $qdepth" ;;
    mg90_ms10) echo "hit:9,set:1 $depth" ;;
    esac
}

# run_load PID PORT WORKLOAD SECS [meta_load options]: one run against a
# running server; prints "OPS_PER_S CPU_US_PER_OP" (server user+system CPU
# per operation, which stays meaningful when other processes share the CPUs).
run_load() {
    local pid=$1 port=$2 wl=$3 s=$4 mix d t0 t1 ops rate
    shift 4
    read -r mix d < <(mix_of "$wl")
    t0=$(cpu_ticks "$pid")
    if ! timeout $((${s%.*} + 60)) "$load_bin" -s "127.0.0.1:$port" -T "$load_threads" \
        -c "$conns" -d "$d" -t "$s" -k "$keys" -v "$vsize" -K "$keylen" -m "$mix" "$@" \
        >"$work/out" 2>"$work/err"; then
        echo "meta_load failed on $wl against port $port:" >&2
        cat "$work/out" "$work/err" >&2
        return 1
    fi
    t1=$(cpu_ticks "$pid")
    read -r ops rate < <(awk '{for (i = 1; i < NF; i++) {if ($i == "ops") o = $(i + 1);
        if ($i == "ops_per_s") r = $(i + 1)}} END {print o, r}' "$work/out")
    if grep -q ' evicted [1-9]' "$work/out"; then
        echo "warning: $wl on port $port: hits answered EN: $(cat "$work/out")" >&2
    fi
    echo "$rate $(us_per_op "$t0" "$t1" "$ops")"
}

# Both servers run side by side (an idle one costs nothing) and the runs
# alternate, so a noisy neighbour hits both alike. The first run on each
# server preloads the keys and warms it up; it is not counted.
for wl in ${WORKLOADS:-mg_hit mg_flags mg_miss mg_quiet_pipeline mg90_ms10}; do
    [ -n "$(mix_of "$wl")" ] || { echo "unknown workload $wl" >&2; exit 1; }
    start_server ours; opid=$SRV_PID; oport=$SRV_PORT
    start_server memcached; tpid=$SRV_PID; tport=$SRV_PORT
    run_load "$opid" "$oport" "$wl" 1 >/dev/null
    run_load "$tpid" "$tport" "$wl" 1 >/dev/null
    ours=""; theirs=""; ours_cpu=""; theirs_cpu=""; ratios=""
    for r in $(seq "$rounds"); do
        read -r a ca < <(run_load "$opid" "$oport" "$wl" "$secs" -n) || exit 1
        read -r b cb < <(run_load "$tpid" "$tport" "$wl" "$secs" -n) || exit 1
        [ -n "$a" ] && [ -n "$b" ] || exit 1
        ours="$ours $a"; ours_cpu="$ours_cpu $ca"
        theirs="$theirs $b"; theirs_cpu="$theirs_cpu $cb"
        ratios="$ratios $(ratio "$a" "$b")"
    done
    SRV_PID=$opid; stop_server
    SRV_PID=$tpid; stop_server
    mo=$(echo "$ours" | median)
    mt=$(echo "$theirs" | median)
    echo "tps_ratio/$wl $(ratio "$mo" "$mt")   # paired:$ratios (median $(echo "$ratios" | median))"
    echo "tps/$wl ours=$mo memcached=$mt   # runs ours:$ours memcached:$theirs"
    echo "cpu_us_per_op/$wl ours=$(echo "$ours_cpu" | median) memcached=$(echo "$theirs_cpu" | median)"
done
