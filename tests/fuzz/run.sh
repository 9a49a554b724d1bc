#!/usr/bin/env bash
# Run every libFuzzer target (tests/fuzz/*_fuzz.c) for SECONDS each, one
# after the other, over its seed corpus; print per target the executions,
# exec/s, coverage (cov:/ft: of libFuzzer's last line) and any crash file.
# Exits non-zero when a target crashed, leaked or hit undefined behaviour.
#   tests/fuzz/run.sh [SECONDS [TARGET...]]      default 20 s, every target
#   RC_FUZZ_BUILD=DIR  the build dir (default _build; configured if needed)
# New inputs go to DIR/tests/fuzz/corpus-work/NAME (never into the repo's
# corpus: add a finding there by hand, with its regression test).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-20}
[ $# -gt 0 ] && shift
build=${RC_FUZZ_BUILD:-$top/_build}
jobs=$(nproc 2>/dev/null || echo 2)

command -v clang >/dev/null || { echo "fuzz: no clang, nothing to run" >&2; exit 0; }
if [ ! -f "$build/Makefile" ]; then
    [ -x "$top/configure" ] || (cd "$top" && autoreconf -fi >/dev/null)
    mkdir -p "$build"
    (cd "$build" && "$top/configure" -q)
fi
make -C "$build" -j"$jobs" fuzz >/dev/null

if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for src in "$top"/tests/fuzz/*_fuzz.c; do
        targets+=("$(basename "$src" _fuzz.c)")
    done
fi

failed=0
printf '%-8s %10s %8s %6s %6s  %s\n' target execs exec/s cov ft result
for name in "${targets[@]}"; do
    bin=$build/tests/fuzz/${name}_fuzz
    work=$build/tests/fuzz/corpus-work/$name
    log=$work.log
    [ -x "$bin" ] || { echo "fuzz: $bin was not built" >&2; failed=1; continue; }
    mkdir -p "$work"
    dirs=("$work")
    [ -d "$top/tests/fuzz/corpus/$name" ] && dirs+=("$top/tests/fuzz/corpus/$name")
    rc=0
    # A crash file is written as $work/crash-<sha1> (leak-, timeout-, oom-).
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$work/" "${dirs[@]}" >"$log" 2>&1 || rc=$?
    final() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
    last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    if [ "$rc" -ne 0 ]; then
        failed=1
        result="FAILED (exit $rc) ${artifact:-no crash file}; log $log"
    else
        result=ok
    fi
    printf '%-8s %10s %8s %6s %6s  %s\n' "$name" "$(final number_of_executed_units)" \
        "$(final average_exec_per_sec)" "${cov:-?}" "${ft:-?}" "$result"
    if [ "$rc" -ne 0 ]; then
        grep -E -A30 '^==[0-9]+==ERROR|runtime error|deadly signal' "$log" | head -40 || tail -40 "$log"
    fi
done
exit "$failed"
