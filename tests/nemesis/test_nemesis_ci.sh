#!/bin/sh
# make check: the fixed short nemesis schedule (TAP).
here=$(cd "$(dirname "$0")" && pwd)
exec "${PYTHON3:-python3}" "$here/nemesis.py" --ci --tap
