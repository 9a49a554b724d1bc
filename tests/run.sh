#!/usr/bin/env bash
# The test command (README, .ci/run): installs what is missing, builds, runs
# every unit and integration test, then the same tests in an ASan+UBSan
# build, then each fuzz target briefly. Exits non-zero on any failure.
#   tests/run.sh            everything
#   RC_FUZZ_SECONDS=0       skip fuzzing;  RC_SKIP_SAN=1  skip the sanitizer build
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
. tests/deps.sh
rc_install_deps

jobs=$(nproc 2>/dev/null || echo 2)
fuzz_seconds=${RC_FUZZ_SECONDS:-20}

step() { printf '\n=== %s\n' "$*"; }

check_in() {  # check_in DIR [configure args]: build and run make check in DIR
    local dir=$1; shift
    mkdir -p "$dir"
    (cd "$dir" && "$top/configure" -q "$@" && make -j"$jobs" >/dev/null &&
        make -j"$jobs" check) || {
        find "$dir" -name 'test-suite.log' -exec cat {} + 2>/dev/null | tail -200
        return 1
    }
}

step "autoreconf"
autoreconf -fi >/dev/null 2>&1 || autoreconf -fi

step "build and test"
check_in _build

if [ -z "${RC_SKIP_SAN:-}" ]; then
    step "sanitizer build (ASan + UBSan) and test"
    export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    check_in _san --enable-sanitizers
fi

if [ "$fuzz_seconds" -gt 0 ] && command -v clang >/dev/null; then
    step "fuzz targets, ${fuzz_seconds}s each"
    RC_FUZZ_BUILD="$top/_build" tests/fuzz/run.sh "$fuzz_seconds"
fi

step "all tests passed"
