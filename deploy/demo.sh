#!/usr/bin/env bash
# The README's run command: installs what is missing, builds, starts a local
# three-node cluster (deploy/local-cluster.sh) and runs a short demo against
# it with ringctl. The cluster is stopped at the end unless --keep is given.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
. tests/deps.sh
rc_install_deps

keep=
[ "${1:-}" = "--keep" ] && keep=1

if [ ! -x _build/client/ringctl ] || [ ! -x _build/server/ringcached ]; then
    autoreconf -fi >/dev/null 2>&1
    mkdir -p _build
    (cd _build && "$top/configure" -q && make -j"$(nproc)" >/dev/null)
else
    make -C _build -j"$(nproc)" >/dev/null
fi
ringctl=_build/client/ringctl
export PATH="$top/_build/client:$top/_build/server:$PATH"

if [ ! -x deploy/local-cluster.sh ]; then
    echo "== the ring of deploy/examples/three.members"
    "$ringctl" --human ring --members deploy/examples/three.members
    echo "== where a few keys live (R=2)"
    printf 'user:1\nuser:2\nsession:abc\ncart:42\n' |
        "$ringctl" locate --members deploy/examples/three.members --replicas 2
    exit 0
fi

dir=$top/run
deploy/local-cluster.sh up --dir "$dir"
[ -n "$keep" ] || trap 'deploy/local-cluster.sh down --dir "$dir"' EXIT
members=$dir/cluster.members

echo "== the cluster"
cat "$members"
echo "== writes"
for i in 1 2 3 4 5 6; do
    "$ringctl" --members "$members" set "user:$i" "hello from user $i" --ttl 600
done
echo "== reads"
"$ringctl" --members "$members" get user:1 user:2 user:3
echo "== which node holds what"
printf 'user:%s\n' 1 2 3 4 5 6 | "$ringctl" locate --members "$members"
echo "== every node's stats (items)"
"$ringctl" --members "$members" --human stats | grep -E '^(stat|curr_items|cmd_set|cmd_get|get_hits)' || true
deploy/local-cluster.sh status --dir "$dir"
[ -n "$keep" ] && echo "cluster left running: deploy/local-cluster.sh down --dir $dir"
exit 0
