#!/usr/bin/env bash
# local-cluster.sh: a ringcache cluster on loopback for trying things out.
# `up` starts three nodes (cache-a..c) with a state directory each, a shared
# admin token and a membership store in DIR, and publishes epoch 1 with
# `ringctl init`; `add` starts cache-d and joins it (copy, then activate);
# `remove` has cache-d leave again; `down` stops every node by the PIDs in
# DIR/*.pid and deletes the cluster state (a cache starts empty); `up` also
# starts `ringctl watch` (failover and stuck transitions); `status`
# shows each node; `demo` runs up, writes, a join, reads everything back,
# then kills a node: every key still reads, and the watch fails it over.
# Every key lives on --replicas nodes (default 2; 1 keeps one copy, and a
# dead node's keys become misses when the watch removes it).
#
#   deploy/local-cluster.sh up|add|remove|down|status|demo [--dir DIR] [--base-port P]
#       [--replicas R]
#
# Binaries: $RINGCACHED / $RINGCTL, else $RC_BUILDDIR/{server,client}, else
# the _build/ tree next to this script, else $PATH. $RC_NODE_ARGS adds flags.
set -u

die() { echo "local-cluster: $*" >&2; exit 1; }

usage() {
    echo "usage: $0 up|add|remove|down|status|demo [--dir DIR] [--base-port P] [--replicas R]" >&2
    exit 2
}

[ $# -ge 1 ] || usage
cmd=$1
shift
dir=./run
base=11311
replicas=2
while [ $# -gt 0 ]; do
    case $1 in
        --dir) [ $# -ge 2 ] || usage; dir=$2; shift 2 ;;
        --base-port) [ $# -ge 2 ] || usage; base=$2; shift 2 ;;
        --replicas) [ $# -ge 2 ] || usage; replicas=$2; shift 2 ;;
        -h|--help) usage ;;
        *) echo "local-cluster: unknown argument '$1'" >&2; usage ;;
    esac
done
case $base in
    ''|*[!0-9]*) die "--base-port: expected a port number, got '$base'" ;;
esac
[ "$base" -ge 1 ] && [ "$base" -le 55532 ] || die "--base-port: $base is out of range (cluster ports are +10000)"
case $replicas in
    1|2|3) ;;
    *) die "--replicas: expected 1, 2 or 3 (the cluster has three nodes), got '$replicas'" ;;
esac

ids=(cache-a cache-b cache-c cache-d)   # cache-d only after `add`
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
store=$dir/store
token=$dir/token

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

# start_watch: `ringctl watch` beside the nodes (it removes or repairs a
# member that stays down or recovering, and finishes a transition whose
# admin died: docs/guarantees.md). Its PID is in DIR/watch.pid.
start_watch() {
    local pid
    if pid=$(cat "$dir/watch.pid" 2>/dev/null) && [ -r "/proc/$pid/cmdline" ] &&
        tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q ' watch'; then
        return 0
    fi
    "$ringctl" --store "$store" --token-file "$token" watch >"$dir/watch.log" 2>&1 </dev/null &
    echo $! >"$dir/watch.pid"
    echo "ringctl watch running (pid $!, log $dir/watch.log)"
}

stop_watch() {
    local pid
    pid=$(cat "$dir/watch.pid" 2>/dev/null) || return 0
    case $pid in ''|*[!0-9]*) rm -f "$dir/watch.pid"; return 0 ;; esac
    if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q ' watch'; then
        kill -TERM "$pid" 2>/dev/null
        wait_until 5 gone "$pid" || kill -KILL "$pid" 2>/dev/null
        echo "ringctl watch stopped (pid $pid)"
    fi
    rm -f "$dir/watch.pid"
}

do_down() {
    local i
    stop_watch
    for i in 0 1 2 3; do
        stop_node "${ids[$i]}" $((base + i))
    done
    # A cache starts empty: a node restarted on its old state would come
    # back "recovering" (docs/cluster.md), so the cluster state goes too.
    rm -rf "$store" "$dir"/*.state "$members"
}

# admin ARGS...: ringctl against this cluster's store and token.
admin() {
    "$ringctl" --store "$store" --token-file "$token" "$@"
}

# start_node INDEX: start one node in cluster mode (no wait).
start_node() {
    local i=$1 id=${ids[$1]} port=$(($base + $1)) pid
    if pid=$(alive "$dir/$id.pid" "$port"); then
        echo "$id already running (pid $pid, port $port)"
        return 0
    fi
    if accepts "$port" || accepts $((port + 10000)); then
        echo "local-cluster: port $port or $((port + 10000)) is already in use" >&2
        return 1
    fi
    mkdir -p "$dir/$id.state"
    # shellcheck disable=SC2086
    "$ringcached" -p "$port" -l 127.0.0.1 -t 2 -m 64 --id "$id" \
        --state-dir "$dir/$id.state" --token-file "$token" ${RC_NODE_ARGS:-} \
        >"$dir/$id.log" 2>&1 </dev/null &
    echo $! >"$dir/$id.pid"
}

# wait_node INDEX: wait until the node accepts, or show its log and fail.
wait_node() {
    local id=${ids[$1]} port=$(($base + $1))
    if ! wait_until 5 accepts "$port"; then
        echo "local-cluster: $id did not start on port $port; its log:" >&2
        tail -n 5 "$dir/$id.log" >&2
        return 1
    fi
    echo "$id up on 127.0.0.1:$port (pid $(cat "$dir/$id.pid"))"
}

# publish: copy the store's active membership for clients and tools.
publish() {
    cp "$store/active.members" "$members.tmp" && mv "$members.tmp" "$members"
}

do_add() {
    [ -f "$store/active.members" ] || die "no cluster here: run '$0 up' first"
    start_node 3 && wait_node 3 || exit 1
    echo "# joining cache-d: copy its ranges, fence, commit"
    admin join cache-d "127.0.0.1:$((base + 3))" || exit 1
    publish
}

do_remove() {
    [ -f "$store/active.members" ] || die "no cluster here: run '$0 up' first"
    echo "# cache-d leaves: copy its ranges back, fence, commit"
    admin leave cache-d || exit 1
    publish
    stop_node cache-d $((base + 3))
}

do_up() {
    local i
    [ -n "$ringcached" ] && [ -x "$ringcached" ] || die "ringcached not found (build it, or set RINGCACHED)"
    [ -n "$ringctl" ] || die "ringctl not found (build it, or set RINGCTL)"
    mkdir -p "$dir" || die "cannot create $dir"
    if [ ! -s "$token" ]; then
        (umask 077 && od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$token" && echo >>"$token")
    fi
    for i in 0 1 2; do
        start_node "$i" || { do_down; exit 1; }
    done
    for i in 0 1 2; do
        wait_node "$i" || { do_down; exit 1; }
    done
    if [ ! -f "$store/active.members" ]; then
        mkdir -p "$store"
        {
            echo "# written by deploy/local-cluster.sh"
            echo "epoch 1"
            echo "vnodes $RING_VNODES"
            echo "replicas $replicas"
            for i in 0 1 2; do
                echo "node ${ids[$i]} 127.0.0.1:$((base + i))"
            done
        } >"$members.tmp"
        admin init --members "$members.tmp" >/dev/null || { rm -f "$members.tmp"; do_down; exit 1; }
        rm -f "$members.tmp"
    fi
    publish
    start_watch
    echo "membership (epoch $(awk '$1 == "epoch" { print $2 }' "$members")): $members"
}

do_status() {
    local i id port pid state items stats="" rc=0
    if [ -f "$members" ] && [ -n "$ringctl" ]; then
        stats=$("$ringctl" --members "$members" --timeout 500 stats 2>/dev/null)
    fi
    for i in 0 1 2 3; do
        id=${ids[$i]}
        port=$((base + i))
        # cache-d is listed only while it runs.
        [ "$i" -lt 3 ] || [ -f "$dir/$id.pid" ] || continue
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
    local r k n
    do_up || exit 1
    r=("$ringctl" --members "$members")
    echo
    echo "# write 200 keys: each goes straight to its owner"
    for k in $(seq 1 200); do
        "${r[@]}" set "user:$k" "name-$k" --ttl 3600 >/dev/null || exit 1
    done
    "${r[@]}" --human set user:1 name-1 --ttl 3600 || exit 1
    echo
    echo "# read two back"
    "${r[@]}" get user:1 user:2 || exit 1
    echo
    echo "# one multi-get, one request per node: key, node, value"
    seq 1 8 | sed 's/^/user:/' | "${r[@]}" --human mget || exit 1
    echo
    echo "# items per node"
    do_status
    echo
    do_add
    echo
    echo "# the same keys after the join: four owners now, every key still hits"
    seq 1 8 | sed 's/^/user:/' | "$ringctl" --members "$members" --human mget || exit 1
    n=$(seq 1 200 | sed 's/^/user:/' | "$ringctl" --members "$members" mget | wc -l)
    echo "hits after the join: $n of 200 (a ketama memcached cluster would lose about 1/4)"
    echo
    echo "# items per node"
    do_status
    echo
    demo_failover || exit 1
    echo
    admin --human status || true
    echo
    echo "stop the cluster with: $0 down --dir $dir --base-port $base"
}

# epoch_of: the store's active epoch.
epoch_of() {
    awk '$1 == "epoch" { print $2 }' "$store/active.members"
}

# epoch_above E: true once the store's active epoch is above E.
epoch_above() {
    [ "$(epoch_of)" -gt "$1" ]
}

# demo_failover: kill -9 cache-b under the demo's keys; reads go on (every
# key has a second copy), and `ringctl watch` removes cache-b once it has
# been down for its --down-after (1 s); then writes to its keys work again.
demo_failover() {
    local pid e0 n r=("$ringctl" --members "$members")
    [ "$replicas" -ge 2 ] || { echo "# (R = 1: no failover act; a dead node's keys would be misses)"; return 0; }
    pid=$(alive "$dir/cache-b.pid" $((base + 1))) || { echo "cache-b is not running" >&2; return 1; }
    e0=$(epoch_of)
    echo "# kill -9 cache-b (pid $pid): every key has a copy on another node"
    # (wait: the node is this shell's child; it reaps it without a "Killed" line)
    { kill -KILL "$pid" && wait "$pid"; } 2>/dev/null
    wait_until 5 gone "$pid" || return 1
    rm -f "$dir/cache-b.pid"
    n=$(seq 1 200 | sed 's/^/user:/' | "${r[@]}" mget | wc -l)
    echo "hits with cache-b dead: $n of 200"
    echo "# ringctl watch removes cache-b after 1 s down (its log: $dir/watch.log)"
    if ! wait_until 30 epoch_above "$e0"; then
        echo "local-cluster: the watch did not fail cache-b over; its log:" >&2
        tail -n 5 "$dir/watch.log" >&2
        return 1
    fi
    publish
    echo "epoch $(epoch_of): $(awk '$1 == "node" { printf "%s ", $2 }' "$members")"
    for n in $(seq 1 200); do
        "${r[@]}" set "user:$n" "name-$n-v2" --ttl 3600 >/dev/null || return 1
    done
    n=$(seq 1 200 | sed 's/^/user:/' | "${r[@]}" mget | grep -c -- '-v2$')
    echo "writes after the failover: $n of 200 written and read back"
}

case $cmd in
    up) do_up ;;
    add) do_add ;;
    remove) do_remove ;;
    down) do_down ;;
    status) do_status ;;
    demo) do_demo ;;
    *) usage ;;
esac
