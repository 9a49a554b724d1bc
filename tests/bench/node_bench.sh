#!/usr/bin/env bash
# node benchmark (not a test): memcaslap against ringcached and Debian's
# memcached with the same -t and -m, alternating ROUNDS times, then RSS per
# item after 1M sets of 100-byte values. Prints `figure value` lines:
#   tps_ratio/get90_set10, tps_ratio/multiget10 (ours / memcached, medians),
#   tps/... for each server, cpu_us_per_op/... (server CPU per operation),
#   bytes_per_item/100B ours=... memcached=...
# Environment: RC_BUILDDIR (default ./_build), ROUNDS (7), SECS (3 per run),
# THREADS (server -t, 2), MEM (-m for the load runs, 64), CONC (memcaslap -c, 32),
# OURS_ARGS (more ringcached options, e.g. "--hotkeys-sample 0").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${RC_BUILDDIR:-$top/_build}
ours_bin=$build/server/ringcached
theirs_bin=${MEMCACHED:-/usr/bin/memcached}
rounds=${ROUNDS:-7}
secs=${SECS:-3}
threads=${THREADS:-2}
mem=${MEM:-64}
conc=${CONC:-32}
items=${ITEMS:-1000000}
for b in "$ours_bin" "$theirs_bin" "$(command -v memcaslap)"; do
    [ -x "$b" ] || { echo "missing $b" >&2; exit 1; }
done
. "$here/bench_lib.sh"

cat > "$work/get90_set10.cfg" <<'CFG'
key
64 64 1
value
100 100 1
cmd
0 0.1
1 0.9
CFG

# run_load PID PORT LOAD: one memcaslap run against a running server;
# prints "TPS CPU_US_PER_OP" (server user+system CPU per operation, which
# stays meaningful when other processes share the CPUs).
run_load() {
    local extra=() t0 t1 tps ops
    [ "$3" = multiget10 ] && extra=(-d 10)
    t0=$(cpu_ticks "$1")
    timeout $((secs + 30)) memcaslap -s "127.0.0.1:$2" -F "$work/get90_set10.cfg" \
        -t "${secs}s" -T 2 -c "$conc" "${extra[@]}" >"$work/out" 2>&1 || true
    t1=$(cpu_ticks "$1")
    tps=$(sed -n 's/.*TPS: \([0-9]*\).*/\1/p' "$work/out" | tail -1)
    ops=$(sed -n 's/.*Ops: \([0-9]*\).*/\1/p' "$work/out" | tail -1)
    [ -n "$tps" ] && [ -n "$ops" ] || { cat "$work/out" >&2; echo "0 0"; return; }
    echo "$tps $(us_per_op "$t0" "$t1" "$ops")"
}

# Both servers run side by side (an idle one costs nothing) and the runs
# alternate, so a noisy neighbour hits both alike; fresh servers per load.
for load in get90_set10 multiget10; do
    start_server ours "$mem"; opid=$SRV_PID; oport=$SRV_PORT
    start_server memcached "$mem"; tpid=$SRV_PID; tport=$SRV_PORT
    ours=""; theirs=""; ours_cpu=""; theirs_cpu=""; ratios=""
    for r in $(seq "$rounds"); do
        read -r a ca < <(run_load "$opid" "$oport" "$load")
        read -r b cb < <(run_load "$tpid" "$tport" "$load")
        ours="$ours $a"; ours_cpu="$ours_cpu $ca"
        theirs="$theirs $b"; theirs_cpu="$theirs_cpu $cb"
        ratios="$ratios $(ratio "$a" "$b")"
    done
    SRV_PID=$opid; stop_server
    SRV_PID=$tpid; stop_server
    mo=$(echo "$ours" | median)
    mt=$(echo "$theirs" | median)
    echo "tps/$load/ringcached $mo   # runs:$ours"
    echo "tps/$load/memcached $mt   # runs:$theirs"
    echo "tps_ratio/$load $(ratio "$mo" "$mt")   # paired:$ratios"
    echo "cpu_us_per_op/$load ours=$(echo "$ours_cpu" | median) memcached=$(echo "$theirs_cpu" | median)"
done

# Memory per item: 1M sets of 100-byte values, -m large enough for no eviction.
declare -A bpi
for which in ours memcached; do
    start_server "$which" 1024
    read -r _ n _ kb < <(python3 "$here/node_load.py" "$SRV_PORT" "$SRV_PID" "$items" 100)
    stop_server
    bpi[$which]=$(awk -v kb="$kb" -v n="$n" 'BEGIN {printf "%.1f", (n > 0) ? kb * 1024 / n : 0}')
done
echo "bytes_per_item/100B ours=${bpi[ours]} memcached=${bpi[memcached]}"
