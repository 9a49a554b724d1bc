# Shared by the node benchmarks (node_bench.sh, meta_bench.sh), sourced
# after `set -euo pipefail`: a scratch directory ($work) removed at exit,
# the servers started ($pids) stopped by PID at exit (TERM, then KILL after
# 5 s), a free loopback port, and waiting for a port to accept.
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
