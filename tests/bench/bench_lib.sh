# Shared by the node benchmarks (node_bench.sh, meta_bench.sh,
# tls_bench.sh), sourced after `set -euo pipefail`: a scratch directory
# ($work) removed at exit, the servers started ($pids) stopped by PID at
# exit (TERM, then KILL after 5 s) or one by one (stop_server), a free
# loopback port, waiting for a port to accept, a server's CPU time, and
# the median and ratio of the figures.
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]+"${pids[@]}"}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${pids[@]+"${pids[@]}"}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
wait_port() {
    python3 - "$1" <<'PY'
import socket, sys, time
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.5).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.02)
sys.exit(1)
PY
}

# stop_server: stop the server $SRV_PID now (TERM, then KILL after 5 s).
stop_server() {
    local keep=() p
    for p in "${pids[@]}"; do [ "$p" = "$SRV_PID" ] || keep+=("$p"); done
    pids=("${keep[@]+"${keep[@]}"}")
    kill -TERM "$SRV_PID"
    for _ in $(seq 100); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$SRV_PID" 2>/dev/null || true
    wait "$SRV_PID" 2>/dev/null || true
}

# cpu_ticks PID: the process's user + system CPU so far, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# us_per_op T0 T1 N: microseconds of CPU per operation between two cpu_ticks.
us_per_op() {
    awk -v t=$(($2 - $1)) -v hz="$(getconf CLK_TCK)" -v n="$3" \
        'BEGIN {printf "%.2f", (n > 0) ? t * 1e6 / hz / n : 0}'
}
# median: of the numbers on standard input (space or newline separated).
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# ratio A B: A / B to three places (0 when B is 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", (b > 0) ? a / b : 0}'; }

# start_server ours|memcached [MEM]: ringcached ($ours_bin, with
# $OURS_ARGS) or memcached ($theirs_bin) on a free port with -t $threads
# and -m MEM (default $mem); sets SRV_PID, SRV_PORT. node_bench.sh and
# request_bench.sh.
start_server() {
    SRV_PORT=$(free_port)
    if [ "$1" = ours ]; then
        # shellcheck disable=SC2086 # OURS_ARGS: extra options, word-split on purpose
        "$ours_bin" -l 127.0.0.1 -p "$SRV_PORT" -t "$threads" -m "${2:-$mem}" -c 4096 ${OURS_ARGS:-} &
    else
        # shellcheck disable=SC2086 # THEIRS_ARGS: as OURS_ARGS, for the peer
        "$theirs_bin" -u nobody -l 127.0.0.1 -p "$SRV_PORT" -U 0 -t "$threads" -m "${2:-$mem}" -c 4096 ${THEIRS_ARGS:-} &
    fi
    SRV_PID=$!
    pids+=("$SRV_PID")
    wait_port "$SRV_PORT" || { echo "$1 did not start" >&2; exit 1; }
}
