#!/usr/bin/env bash
# client_bench.sh: start three ringcached nodes, three Debian memcached and
# a twemproxy (nutcracker, ketama + md5) in front of those memcached, all
# on free loopback ports; run client_bench; stop everything by PID.
#   RC_BUILDDIR=_build tests/bench/client_bench.sh [client_bench options]
set -u
builddir=${RC_BUILDDIR:-$(pwd)}
bench=$builddir/tests/bench/client_bench
ringcached=$builddir/server/ringcached
[ -x "$bench" ] || { echo "client_bench.sh: build it first: make -C $builddir bench" >&2; exit 2; }
[ -x "$ringcached" ] || { echo "client_bench.sh: $ringcached not built" >&2; exit 2; }
command -v memcached >/dev/null || { echo "client_bench.sh: apt-get install memcached" >&2; exit 2; }
command -v nutcracker >/dev/null || { echo "client_bench.sh: apt-get install nutcracker" >&2; exit 2; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/rc-client-bench.XXXXXX") || exit 1
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

# A free port below the ephemeral range (outgoing connections use that).
used=" "
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 12000))
        case $used in *" $p "*) continue ;; esac
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            used="$used$p "
            echo "$p"
            return
        fi
    done
}

wait_accept() {
    local deadline=$((SECONDS + 5))
    until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
        [ $SECONDS -lt $deadline ] || { echo "client_bench.sh: port $1 never accepted" >&2; exit 1; }
        sleep 0.05
    done
}

user=()
[ "$(id -u)" = 0 ] && user=(-u root)
rc_members=$dir/ringcached.members
mc_members=$dir/memcached.members
printf 'epoch 1\nvnodes 160\nreplicas 1\n' >"$rc_members"
printf 'epoch 1\nvnodes 160\nreplicas 1\n' >"$mc_members"
mc_list=""
servers=""
for id in a b c; do
    p=$(free_port)
    "$ringcached" -p "$p" -l 127.0.0.1 -t 1 -m 256 >"$dir/rc-$id.log" 2>&1 &
    pids+=($!)
    echo "node cache-$id 127.0.0.1:$p" >>"$rc_members"
    wait_accept "$p"
    p=$(free_port)
    memcached "${user[@]}" -p "$p" -l 127.0.0.1 -U 0 -t 1 -m 256 >"$dir/mc-$id.log" 2>&1 &
    pids+=($!)
    echo "node mc-$id 127.0.0.1:$p" >>"$mc_members"
    mc_list="$mc_list${mc_list:+,}127.0.0.1:$p"
    servers="$servers   - 127.0.0.1:$p:1 mc-$id
"
    wait_accept "$p"
done
proxy=$(free_port)
cat >"$dir/nutcracker.yml" <<YML
bench:
  listen: 127.0.0.1:$proxy
  hash: md5
  distribution: ketama
  auto_eject_hosts: false
  timeout: 2000
  servers:
$servers
YML
stats_port=$(free_port)
nutcracker -c "$dir/nutcracker.yml" -s "$stats_port" -a 127.0.0.1 -o "$dir/nutcracker.log" &
pids+=($!)
wait_accept "$proxy"

"$bench" --ours "$rc_members" --ours-mc "$mc_members" --memcached "$mc_list" \
    --proxy "127.0.0.1:$proxy" "$@"
