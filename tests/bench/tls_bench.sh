#!/usr/bin/env bash
# TLS benchmark (not a test): tls_load (built by `make bench`) with the same
# load against ringcached -Z, Debian's memcached -Z (when its build has TLS)
# and ringcached without TLS, side by side, runs alternating ROUNDS times.
# Prints `figure value` lines (medians):
#   tps_ratio/tls_get90_set10   ringcached -Z / memcached -Z
#   tps_ratio/tls_vs_plain      ringcached -Z / ringcached plaintext
#   handshake_ratio/tls         new TLS connections per second, ours / memcached
#   tps/..., handshakes_per_s/..., cpu_us_per_op/... per server
# Environment: RC_BUILDDIR (default ./_build), ROUNDS (5), SECS (3 per run),
# THREADS (server -t, 2), CONNS (tls_load connections, 16), DEPTH (requests
# per batch, 10), VSIZE (value bytes, 100).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${RC_BUILDDIR:-$top/_build}
ours_bin=$build/server/ringcached
theirs_bin=${MEMCACHED:-/usr/bin/memcached}
load_bin=$build/tests/bench/tls_load
rounds=${ROUNDS:-5}
secs=${SECS:-3}
threads=${THREADS:-2}
conns=${CONNS:-16}
depth=${DEPTH:-10}
vsize=${VSIZE:-100}
for b in "$ours_bin" "$load_bin" "$(command -v openssl)"; do
    [ -x "$b" ] || { echo "missing $b (make bench builds tls_load)" >&2; exit 1; }
done
. "$here/bench_lib.sh"
with_memcached=no
if [ -x "$theirs_bin" ] && "$theirs_bin" -h 2>/dev/null | grep -q -- --enable-ssl; then
    with_memcached=yes
fi

# A throwaway self-signed certificate (readable by memcached's -u nobody).
chmod 755 "$work"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 \
    -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
chmod 644 "$work/key.pem"
tls_opts="ssl_chain_cert=$work/cert.pem,ssl_key=$work/key.pem"

# start_server ours|ours_plain|memcached: sets SRV_PID, SRV_PORT
start_server() {
    SRV_PORT=$(free_port)
    case $1 in
    ours) "$ours_bin" -l 127.0.0.1 -p "$SRV_PORT" -t "$threads" -m 256 -c 4096 -Z -o "$tls_opts" & ;;
    ours_plain) "$ours_bin" -l 127.0.0.1 -p "$SRV_PORT" -t "$threads" -m 256 -c 4096 & ;;
    memcached) "$theirs_bin" -u nobody -l 127.0.0.1 -p "$SRV_PORT" -U 0 -t "$threads" -m 256 \
        -c 4096 -Z -o "$tls_opts" 2>/dev/null & ;;
    esac
    SRV_PID=$!
    pids+=("$SRV_PID")
    wait_port "$SRV_PORT" || { echo "$1 did not start" >&2; exit 1; }
}

# run_load PID PORT TLS(-Z or "") MODE(ops|handshakes): one run; prints
# "RATE CPU_US_PER_OP" (server user+system CPU per operation).
run_load() {
    local pid=$1 port=$2 tls=$3 mode=$4 extra=() t0 t1 n rate
    [ "$mode" = handshakes ] && extra=(-H)
    t0=$(cpu_ticks "$pid")
    # shellcheck disable=SC2086 # $tls: -Z or nothing
    if ! timeout $((secs + 60)) "$load_bin" -p "$port" $tls -c "$conns" -d "$depth" -t "$secs" \
        -v "$vsize" "${extra[@]+"${extra[@]}"}" >"$work/out" 2>&1; then
        echo "tls_load failed ($mode, port $port): $(cat "$work/out")" >&2
        echo "0 0"
        return
    fi
    t1=$(cpu_ticks "$pid")
    read -r n rate < <(awk '{print $2, $6}' "$work/out")
    echo "$rate $(us_per_op "$t0" "$t1" "$n")"
}

servers="ours ours_plain"
[ $with_memcached = yes ] && servers="ours memcached ours_plain"
declare -A pid port rate cpu
for s in $servers; do
    start_server "$s"
    pid[$s]=$SRV_PID
    port[$s]=$SRV_PORT
done
tls_of() { [ "$1" = ours_plain ] && echo "" || echo "-Z"; }
for mode in ops handshakes; do
    for s in $servers; do rate[$s]=""; cpu[$s]=""; done
    for s in $servers; do run_load "${pid[$s]}" "${port[$s]}" "$(tls_of "$s")" "$mode" >/dev/null; done
    for _ in $(seq "$rounds"); do
        for s in $servers; do
            read -r r c < <(run_load "${pid[$s]}" "${port[$s]}" "$(tls_of "$s")" "$mode")
            rate[$s]="${rate[$s]} $r"
            cpu[$s]="${cpu[$s]} $c"
        done
    done
    declare -A med
    for s in $servers; do med[$s]=$(echo "${rate[$s]}" | median); done
    if [ "$mode" = ops ]; then
        if [ $with_memcached = yes ]; then
            echo "tps_ratio/tls_get90_set10 $(ratio "${med[ours]}" "${med[memcached]}")   # ringcached -Z / memcached -Z"
        fi
        echo "tps_ratio/tls_vs_plain $(ratio "${med[ours]}" "${med[ours_plain]}")   # ringcached -Z / ringcached plaintext"
        for s in $servers; do
            echo "tps/$s $(printf %.0f "${med[$s]}")   # runs:${rate[$s]}"
            echo "cpu_us_per_op/$s $(echo "${cpu[$s]}" | median)"
        done
    else
        if [ $with_memcached = yes ]; then
            echo "handshake_ratio/tls $(ratio "${med[ours]}" "${med[memcached]}")   # new TLS connections/s, ringcached / memcached"
        fi
        for s in $servers; do
            echo "handshakes_per_s/$s $(printf %.0f "${med[$s]}")   # runs:${rate[$s]}"
        done
    fi
done
[ $with_memcached = yes ] || echo "# memcached at $theirs_bin has no TLS: ringcached -Z against plaintext only"
