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
# Three memcached -Z for our library over TLS, with a throwaway CA.
tls=()
if command -v openssl >/dev/null; then
    tls_members=$dir/memcached-tls.members
    printf 'epoch 1\nvnodes 160\nreplicas 1\n' >"$tls_members"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/ca.key" -out "$dir/ca.crt" \
        -days 1 -subj /CN=bench-ca 2>/dev/null &&
        openssl req -newkey rsa:2048 -nodes -keyout "$dir/node.key" -out "$dir/node.csr" \
            -subj /CN=node 2>/dev/null &&
        printf 'subjectAltName=IP:127.0.0.1\n' >"$dir/node.ext" &&
        openssl x509 -req -in "$dir/node.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
            -CAcreateserial -out "$dir/node.crt" -days 1 -extfile "$dir/node.ext" 2>/dev/null ||
        { echo "client_bench.sh: openssl could not make certificates" >&2; exit 1; }
    chmod 644 "$dir/node.key"
    for id in a b c; do
        p=$(free_port)
        memcached "${user[@]}" -p "$p" -l 127.0.0.1 -U 0 -t 1 -m 256 -Z \
            -o "ssl_chain_cert=$dir/node.crt,ssl_key=$dir/node.key" >"$dir/mct-$id.log" 2>&1 &
        pids+=($!)
        echo "node mct-$id 127.0.0.1:$p" >>"$tls_members"
        wait_accept "$p"
    done
    tls=(--ours-tls "$tls_members" --tls-ca "$dir/ca.crt")
fi

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

"$bench" --ours "$rc_members" --ours-mc "$mc_members" "${tls[@]}" --memcached "$mc_list" \
    --proxy "127.0.0.1:$proxy" "$@"
