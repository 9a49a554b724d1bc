#!/bin/sh
# ringcached's command line and signals: bad flags exit 2 with the usage,
# --help/--version exit 0, a busy port exits 1, -v prints exactly the
# listening line, SIGTERM and SIGINT exit 0. TAP.
. "${RC_SRCDIR:-$(dirname "$0")/../..}/tests/it/lib.sh"

tmp=$(mktemp -d)
trap 'rc_cleanup; rm -rf "$tmp"' EXIT

for args in "-x" "--bogus" "-p" "-p notaport" "-p 70000" "-t 0" "-m abc" "-c -1" \
            "-I 12q" "-I 512" "-I 2m -m 2" "stray-argument"; do
    # shellcheck disable=SC2086
    timeout 10 "$RINGCACHED" $args >"$tmp/out" 2>"$tmp/err"
    st=$?
    [ "$st" -eq 2 ] && grep -q '^Usage: ringcached' "$tmp/err"
    tap_ok $? "bad command line '$args' exits 2 with the usage (got $st)"
done

timeout 10 "$RINGCACHED" --help >"$tmp/out" 2>&1
st=$?
[ "$st" -eq 0 ] && grep -q -- '-p, --port' "$tmp/out"
tap_ok $? "--help exits 0 and lists the flags"
timeout 10 "$RINGCACHED" -V >"$tmp/out" 2>&1
st=$?
[ "$st" -eq 0 ] && grep -q '^ringcached 0\.1\.0' "$tmp/out"
tap_ok $? "-V prints the version and exits 0"

# -v: exactly one line, "listening on ..."; quiet by default.
rc_start_node quiet -t 1 2>"$tmp/quiet.err"
tap_ok $? "node starts quietly"
rc_start_node loud -t 1 -v 2>"$tmp/loud.err"
tap_ok $? "node starts with -v"

# The same port again: cannot listen, exit 1.
timeout 10 "$RINGCACHED" -l 127.0.0.1 -p "$quiet_port" -t 1 2>"$tmp/busy.err"
st=$?
[ "$st" -eq 1 ] && grep -q 'cannot listen' "$tmp/busy.err"
tap_ok $? "a port in use exits 1 with a message (got $st)"

rc_stop_pid "$quiet_pid"
tap_ok $RC_STATUS "SIGTERM exits 0"
[ ! -s "$tmp/quiet.err" ]
tap_ok $? "nothing printed without -v"

kill -INT "$loud_pid"
wait "$loud_pid"
st=$?
RC_PIDS=""
tap_ok $st "SIGINT exits 0"
[ "$(grep -c . "$tmp/loud.err")" -ge 1 ] &&
    head -1 "$tmp/loud.err" | grep -q "listening on 127.0.0.1:$loud_port"
tap_ok $? "-v prints the listening address"
tap_done
