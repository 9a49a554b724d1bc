# Shared helpers for ringcache integration tests in sh (POSIX sh + python3).
# Source it:  . "$RC_SRCDIR/tests/it/lib.sh"
# TAP:        tap_ok COND_STATUS "description"; tap_done at the end.
# Nodes:      rc_start_node VAR [args...] sets VAR_pid and VAR_port;
#             rc_stop_pid PID [timeout] (SIGTERM, then SIGKILL);
#             rc_cleanup (trap'd on EXIT) stops every node started here.

: "${RC_BUILDDIR:=$(pwd)}"
: "${RC_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
RINGCACHED="$RC_BUILDDIR/server/ringcached"
RC_PIDS=""
TAP_N=0
TAP_FAILED=0

tap_ok() {
    # tap_ok STATUS DESCRIPTION: STATUS 0 = pass
    TAP_N=$((TAP_N + 1))
    if [ "$1" -eq 0 ]; then
        echo "ok $TAP_N - $2"
    else
        TAP_FAILED=$((TAP_FAILED + 1))
        echo "not ok $TAP_N - $2"
    fi
}

tap_diag() {
    printf '%s\n' "$@" | sed 's/^/# /'
}

tap_done() {
    echo "1..$TAP_N"
    [ "$TAP_FAILED" -eq 0 ]
    exit $?
}

rc_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# rc_wait_port PORT PID SECONDS: poll until PORT accepts (0), PID died or
# the deadline passed (1).
rc_wait_port() {
    python3 - "$1" "$2" "$3" <<'PY'
import os, socket, sys, time
port, pid, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + secs
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit(1)
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.02)
sys.exit(1)
PY
}

# rc_pid_alive PID: 0 if the process exists and is not a zombie we reaped.
rc_pid_alive() {
    kill -0 "$1" 2>/dev/null
}

# rc_stop_pid PID [SECONDS]: SIGTERM, wait up to SECONDS (default 10),
# then SIGKILL. Sets RC_STATUS to the exit status (from wait).
rc_stop_pid() {
    _pid=$1
    _secs=${2:-10}
    kill -TERM "$_pid" 2>/dev/null
    _i=0
    while rc_pid_alive "$_pid" && [ "$_i" -lt $((_secs * 20)) ]; do
        # A zombie child still answers kill -0: reap it via wait below.
        if ! ps -o stat= -p "$_pid" 2>/dev/null | grep -qv Z; then
            break
        fi
        sleep 0.05
        _i=$((_i + 1))
    done
    if ps -o stat= -p "$_pid" 2>/dev/null | grep -qv Z; then
        kill -KILL "$_pid" 2>/dev/null
    fi
    wait "$_pid" 2>/dev/null
    RC_STATUS=$?
    RC_PIDS=$(echo "$RC_PIDS" | tr ' ' '\n' | grep -vx "$_pid" | tr '\n' ' ')
}

# rc_start_node NAME [ringcached args...]: start a node on a free port,
# wait until it accepts; sets ${NAME}_pid and ${NAME}_port. Retries a few
# ports in case another process took the free one first.
rc_start_node() {
    _name=$1
    shift
    for _try in 1 2 3 4 5; do
        _port=$(rc_free_port)
        "$RINGCACHED" -l 127.0.0.1 -p "$_port" "$@" </dev/null &
        _pid=$!
        if rc_wait_port "$_port" "$_pid" 10; then
            RC_PIDS="$RC_PIDS $_pid"
            eval "${_name}_pid=$_pid; ${_name}_port=$_port"
            return 0
        fi
        rc_stop_pid "$_pid" 2
    done
    return 1
}

rc_cleanup() {
    for _p in $RC_PIDS; do
        rc_stop_pid "$_p" 5
    done
}
trap rc_cleanup EXIT
trap 'exit 130' INT TERM
