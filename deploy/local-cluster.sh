#!/usr/bin/env bash
# local-cluster.sh: a three-node ringcache cluster on loopback for trying
# things out. `up` starts the nodes and writes DIR/cluster.members, `down`
# stops them by the PIDs recorded in DIR/*.pid, `status` shows each node,
# `demo` brings the cluster up and runs a short ringctl session.
#
#   deploy/local-cluster.sh up|down|status|demo [--dir DIR] [--base-port P]
#
# Binaries: $RINGCACHED / $RINGCTL, else $RC_BUILDDIR/{server,client}, else
# the _build/ tree next to this script, else $PATH. $RC_NODE_ARGS adds flags.
set -u

die() { echo "local-cluster: $*" >&2; exit 1; }

usage() {
    echo "usage: $0 up|down|status|demo [--dir DIR] [--base-port P]" >&2
    exit 2
}

[ $# -ge 1 ] || usage
cmd=$1
shift
dir=./run
base=11311
while [ $# -gt 0 ]; do
    case $1 in
        --dir) [ $# -ge 2 ] || usage; dir=$2; shift 2 ;;
        --base-port) [ $# -ge 2 ] || usage; base=$2; shift 2 ;;
        -h|--help) usage ;;
        *) echo "local-cluster: unknown argument '$1'" >&2; usage ;;
    esac
done
case $base in
    ''|*[!0-9]*) die "--base-port: expected a port number, got '$base'" ;;
esac
[ "$base" -ge 1 ] && [ "$base" -le 65533 ] || die "--base-port: $base is out of range"

ids=(cache-a cache-b cache-c)
# Points per node: the library's default, RING_VNODES_DEFAULT (docs/vnodes.md).
RING_VNODES=320
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")

# find_bin NAME SUBDIR: the binary to run.
find_bin() {
    local name=$1 sub=$2 c
    for c in ${RC_BUILDDIR:+"$RC_BUILDDIR/$sub/$name"} "$top/_build/$sub/$name" "$top/$sub/$name"; do
        if [ -x "$c" ]; then echo "$c"; return 0; fi
    done
    command -v "$name" 2>/dev/null
}

ringcached=${RINGCACHED:-$(find_bin ringcached server)}
ringctl=${RINGCTL:-$(find_bin ringctl client)}
members=$dir/cluster.members

# accepts PORT: true when something accepts TCP on 127.0.0.1:PORT.
accepts() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# alive PIDFILE PORT: true when the recorded process runs and is our node
# (its command line names the port), so a recycled PID is never signalled.
alive() {
    local pid
    [ -f "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    case $pid in ''|*[!0-9]*) return 1 ;; esac
    [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "-p $2 " || return 1
    echo "$pid"
}

# wait_until SECONDS COMMAND...: poll COMMAND until it succeeds or the
# deadline passes.
wait_until() {
    local deadline=$(( $(date +%s%N) / 1000000 + $1 * 1000 ))
    shift
    while ! "$@"; do
        [ $(( $(date +%s%N) / 1000000 )) -lt "$deadline" ] || return 1
        sleep 0.05
    done
}

gone() { ! kill -0 "$1" 2>/dev/null; }

stop_node() {
    local id=$1 port=$2 pid
    if pid=$(alive "$dir/$id.pid" "$port"); then
        kill -TERM "$pid" 2>/dev/null
        if ! wait_until 5 gone "$pid"; then
            echo "local-cluster: $id (pid $pid) ignored SIGTERM; sending SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null
            wait_until 5 gone "$pid" || echo "local-cluster: $id (pid $pid) will not die" >&2
        fi
        echo "$id stopped (pid $pid)"
    fi
    rm -f "$dir/$id.pid"
}

do_down() {
    local i
    for i in 0 1 2; do
        stop_node "${ids[$i]}" $((base + i))
    done
}

do_up() {
    local i id port pid
    [ -n "$ringcached" ] && [ -x "$ringcached" ] || die "ringcached not found (build it, or set RINGCACHED)"
    mkdir -p "$dir" || die "cannot create $dir"
    for i in 0 1 2; do
        id=${ids[$i]}
        port=$((base + i))
        if pid=$(alive "$dir/$id.pid" "$port"); then
            echo "$id already running (pid $pid, port $port)"
            continue
        fi
        accepts "$port" && { do_down; die "port $port is already in use by another process"; }
        # shellcheck disable=SC2086
        "$ringcached" -p "$port" -l 127.0.0.1 -t 2 -m 64 ${RC_NODE_ARGS:-} \
            >"$dir/$id.log" 2>&1 </dev/null &
        echo $! >"$dir/$id.pid"
    done
    for i in 0 1 2; do
        id=${ids[$i]}
        port=$((base + i))
        if ! wait_until 5 accepts "$port"; then
            echo "local-cluster: $id did not start on port $port; its log:" >&2
            tail -n 5 "$dir/$id.log" >&2
            do_down
            exit 1
        fi
        echo "$id up on 127.0.0.1:$port (pid $(cat "$dir/$id.pid"))"
    done
    {
        echo "# written by deploy/local-cluster.sh"
        echo "epoch 1"
        echo "vnodes $RING_VNODES"
        echo "replicas 1"
        for i in 0 1 2; do
            echo "node ${ids[$i]} 127.0.0.1:$((base + i))"
        done
    } >"$members.tmp" && mv "$members.tmp" "$members"
    echo "membership: $members"
}

do_status() {
    local i id port pid state items stats="" rc=0
    if [ -f "$members" ] && [ -n "$ringctl" ]; then
        stats=$("$ringctl" --members "$members" --timeout 500 stats 2>/dev/null)
    fi
    for i in 0 1 2; do
        id=${ids[$i]}
        port=$((base + i))
        if pid=$(alive "$dir/$id.pid" "$port") && accepts "$port"; then
            state="up"
            # The stats table has a column per node, in membership order.
            items=$(printf '%s\n' "$stats" | awk -F'\t' -v c=$((i + 2)) '$1 == "curr_items" { print $c }')
            printf '%s\t127.0.0.1:%s\tup\tpid %s\titems %s\n' "$id" "$port" "$pid" "${items:--}"
        else
            printf '%s\t127.0.0.1:%s\tdown\n' "$id" "$port"
            rc=1
        fi
    done
    return $rc
}

do_demo() {
    local r k
    do_up || exit 1
    [ -n "$ringctl" ] || die "ringctl not found (build it, or set RINGCTL)"
    r=("$ringctl" --members "$members")
    echo
    echo "# write ten keys: each goes straight to its owner"
    for k in 1 2 3 4 5 6 7 8 9 10; do
        "${r[@]}" --human set "user:$k" "name-$k" --ttl 3600 || exit 1
    done
    echo
    echo "# read two back"
    "${r[@]}" get user:1 user:2 || exit 1
    echo
    echo "# one multi-get, one request per node: key, node, value"
    for k in 1 2 3 4 5 6 7 8 9 10; do echo "user:$k"; done | "${r[@]}" --human mget || exit 1
    echo
    echo "# items per node"
    do_status
    echo
    echo "stop the cluster with: $0 down --dir $dir --base-port $base"
}

case $cmd in
    up) do_up ;;
    down) do_down ;;
    status) do_status ;;
    demo) do_demo ;;
    *) usage ;;
esac
