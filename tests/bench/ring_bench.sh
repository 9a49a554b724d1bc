#!/bin/bash
# ring_bench.sh: run the ring benchmark pinned to one core and, when the
# libmemcached ketama baseline can be built, print its figures beside ours
# as ketama/... lines. Usage: tests/bench/ring_bench.sh [ring_bench args]
#   RC_BUILDDIR  build dir holding tests/bench/ring_bench (default _build)
#   KETAMA_SRC   ketama_baseline.c (default ../shared/bench/ketama_baseline.c)
#   RC_CPU       core to pin to (default 1)
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${RC_BUILDDIR:-$top/_build}
src=${KETAMA_SRC:-$top/../shared/bench/ketama_baseline.c}
cpu=${RC_CPU:-1}
pin=()
command -v taskset >/dev/null && pin=(taskset -c "$cpu")

if [ ! -x "$build/tests/bench/ring_bench" ]; then
    make -C "$build" tests/bench/ring_bench >/dev/null || exit 1
fi
"${pin[@]}" "$build/tests/bench/ring_bench" "$@" || exit 1

if [ ! -f "$src" ]; then
    echo "# ketama baseline skipped: $src not found (set KETAMA_SRC)"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! gcc -O2 -o "$tmp/ketama_baseline" "$src" -lmemcached -lhashkit -lm 2>"$tmp/cc.log"; then
    echo "# ketama baseline skipped: it does not build (libmemcached-dev?)"
    exit 0
fi
"${pin[@]}" "$tmp/ketama_baseline" > "$tmp/out.md" 2>/dev/null || {
    echo "# ketama baseline failed to run"; exit 0; }
# Its markdown tables -> figure lines: ketama/ for the library itself
# (<= 100 servers), ketama-reimpl/ for the same algorithm rebuilt on
# libhashkit (the only way to reach 1000/10000 servers). Medians
# are the second number of "min / med" cells.
awk -F'|' '
    /^### libmemcached, mode ketama-md5/ { t = "lib" ; next }
    /^### Same algorithm re-implemented on libhashkit \(MD5\)/ { t = "re" ; next }
    /^##/ { t = "" }
    function med(s,  a) { split(s, a, "/"); gsub(/ /, "", a[2]); return a[2] }
    t == "lib" && $2 ~ /^ *[0-9]+ *$/ {
        n = $2 + 0; pts = $3 + 0
        printf "ketama/lookup_ns/%dx%d %s\n", n, pts, med($10)
        printf "ketama/build_ms/%dx%d %s\n", n, pts, med($6)
        printf "ketama/peak_mean/%dx%d %s\n", n, pts, $12 + 0
    }
    t == "re" && $2 ~ /^ *[0-9]+ *$/ {
        n = $2 + 0; pts = ($3 + 0) / n
        printf "ketama-reimpl/lookup_ns/%dx%d %s\n", n, pts, med($6)
        printf "ketama-reimpl/build_ms/%dx%d %s\n", n, pts, med($4)
        printf "ketama-reimpl/peak_mean/%dx%d %s\n", n, pts, $7 + 0
    }' "$tmp/out.md"
