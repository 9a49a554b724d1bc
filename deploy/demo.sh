#!/usr/bin/env bash
# The README's run command: installs what is missing, builds into _build/,
# then starts a local three-node cluster and runs a short demo against it
# (deploy/local-cluster.sh demo). The cluster keeps running afterwards;
# `deploy/local-cluster.sh down` stops it.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
. tests/deps.sh
rc_install_deps

if [ ! -f _build/Makefile ]; then
    autoreconf -fi >/dev/null 2>&1
    mkdir -p _build
    (cd _build && "$top/configure" -q)
fi
make -C _build -j"$(nproc)" >/dev/null
exec deploy/local-cluster.sh demo "$@"
