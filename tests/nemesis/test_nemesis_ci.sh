#!/bin/sh
# make check: the fixed short nemesis schedule (TAP), with a fixed seed so a
# CI failure replays with `tests/nemesis/run.sh --ci --seed 11` (set
# RC_NEMESIS_SEED to try another).
here=$(cd "$(dirname "$0")" && pwd)
exec "${PYTHON3:-python3}" "$here/nemesis.py" --ci --tap --seed "${RC_NEMESIS_SEED:-11}"
