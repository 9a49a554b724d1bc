#!/usr/bin/env bash
# Bytes per item (not a test): N (1M) sets of 12-byte keys with 100-byte,
# 1000-byte and mixed (64-1024) values into a fresh ringcached on its compact
# engine (the default), ringcached -o store_engine=classic, and Debian's
# memcached, each with -m large enough for no eviction; RSS growth per item
# (RSS after the load over RSS after the start; tests/bench/node_load.py),
# as issue 22 measures it. Prints
#   bytes_per_item/<size> ours=... classic=... memcached=... ours/memcached=...
# Environment: RC_BUILDDIR (./_build), ITEMS (1000000), SIZES ("100 1000 mix"),
# THREADS (-t, 2), MEMCACHED (/usr/bin/memcached).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${RC_BUILDDIR:-$top/_build}
ours_bin=$build/server/ringcached
theirs_bin=${MEMCACHED:-/usr/bin/memcached}
threads=${THREADS:-2}
items=${ITEMS:-1000000}
sizes=${SIZES:-100 1000 mix}
for b in "$ours_bin" "$theirs_bin"; do
    [ -x "$b" ] || { echo "missing $b" >&2; exit 1; }
done
. "$here/bench_lib.sh"

for size in $sizes; do
    declare -A bpi=()
    for which in ours classic memcached; do
        if [ "$which" = classic ]; then
            OURS_ARGS="-o store_engine=classic" start_server ours 2048
        else
            OURS_ARGS="" start_server "$which" 2048
        fi
        kb0=$(awk '/^VmRSS:/ {print $2}' "/proc/$SRV_PID/status")
        read -r _ n _ kb < <(python3 "$here/node_load.py" "$SRV_PORT" "$SRV_PID" "$items" "$size")
        stop_server
        bpi[$which]=$(awk -v kb="$((kb - kb0))" -v n="$n" 'BEGIN {printf "%.1f", (n > 0) ? kb * 1024 / n : 0}')
    done
    echo "bytes_per_item/$size ours=${bpi[ours]} classic=${bpi[classic]} memcached=${bpi[memcached]}" \
        "ours/memcached=$(awk -v a="${bpi[ours]}" -v b="${bpi[memcached]}" 'BEGIN {printf "%.3f", (b > 0) ? a / b : 0}')"
done
