#!/bin/sh
# make check: the fixed short nemesis schedule with every port over TLS
# (-Z and --cluster-tls: workloads, relays, replica copies, heartbeats,
# handoff streams, ringctl). A failure replays with
# `tests/nemesis/run.sh --ci --tls --seed 12` (RC_NEMESIS_SEED: another).
here=$(cd "$(dirname "$0")" && pwd)
exec "${PYTHON3:-python3}" "$here/nemesis.py" --ci --tls --tap --seed "${RC_NEMESIS_SEED:-12}"
