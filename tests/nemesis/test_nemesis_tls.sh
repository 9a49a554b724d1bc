#!/bin/sh
# make check: the fixed short nemesis schedule with every port over TLS
# (-Z and --cluster-tls: workloads, relays, replica copies, heartbeats,
# handoff streams, ringctl) and two partitions more, one from the peers and
# one from everyone: as root the cluster runs in network namespaces with
# certificates naming their addresses (else the two are recorded as
# skipped, with a '#' line, on 127.0.0.1). A failure replays with
# `tests/nemesis/run.sh --ci --tls --seed 12` (RC_NEMESIS_SEED: another).
here=$(cd "$(dirname "$0")" && pwd)
exec "${PYTHON3:-python3}" "$here/nemesis.py" --ci --tls --tap --seed "${RC_NEMESIS_SEED:-12}"
