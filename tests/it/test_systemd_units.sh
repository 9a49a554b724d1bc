#!/bin/sh
# The systemd units in deploy/systemd/ as `make` generates them, with the
# binaries of this build, checked by `systemd-analyze verify`: no error and
# no warning (an unknown or misspelt key is only a warning to systemd, so
# any output fails the test). A unit broken on purpose must be caught.
. "${RC_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/it/lib.sh"

if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "ok 1 # SKIP systemd-analyze not installed (Debian package systemd)"
    echo "1..1"
    exit 0
fi
tmp=$(mktemp -d /tmp/rc-units-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
gen() {  # gen NAME: the unit with @bindir@ pointing at this build
    sed "s|@bindir[@]/ringcached|$RC_BUILDDIR/server/ringcached|g; \
         s|@bindir[@]/ringctl|$RC_BUILDDIR/client/ringctl|g" \
        "$RC_SRCDIR/deploy/systemd/$1.in" > "$tmp/$2"
}
gen ringcached@.service ringcached@cache-a.service
gen ringctl-watch.service ringctl-watch.service
for u in ringcached@cache-a.service ringctl-watch.service; do
    out=$(cd "$tmp" && systemd-analyze verify --man=no "./$u" 2>&1)
    st=$?
    [ "$st" -eq 0 ] && [ -z "$out" ]
    tap_ok $? "systemd-analyze verify $u: no error, no warning"
    [ -n "$out" ] && tap_diag "$out"
done
grep -q -- '--state-dir /var/lib/ringcache/%i' "$RC_SRCDIR/deploy/systemd/ringcached@.service.in" &&
    grep -q '^Restart=on-failure' "$RC_SRCDIR/deploy/systemd/ringcached@.service.in" &&
    grep -q '^EnvironmentFile=/etc/ringcache/%i.env' "$RC_SRCDIR/deploy/systemd/ringcached@.service.in"
tap_ok $? "ringcached@: one instance per node id, its state directory, an environment file, restart on failure"
u="$RC_SRCDIR/deploy/systemd/ringcached@.service.in"
grep -q '^Type=notify$' "$u" && grep -q '^NotifyAccess=main$' "$u" &&
    grep -q '^ExecReload=/bin/kill -HUP \$MAINPID$' "$u"
tap_ok $? "ringcached@: Type=notify (sd_notify READY/RELOADING/STOPPING), ExecReload sends SIGHUP"
grep -q '^Environment=METRICS=127.0.0.1:9150$' "$u" && grep -q -- '--metrics \${METRICS} ' "$u" &&
    [ "$(grep -n '^Environment=METRICS' "$u" | cut -d: -f1)" -lt \
      "$(grep -n '^EnvironmentFile=' "$u" | cut -d: -f1)" ]
tap_ok $? "ringcached@: metrics on 127.0.0.1:9150 by default (METRICS in the environment file overrides it)"
if grep -q '^#define HAVE_LIBSYSTEMD 1' "$RC_BUILDDIR/config.h"; then
    ldd "$RC_BUILDDIR/server/.libs/ringcached" "$RC_BUILDDIR/server/ringcached" 2>/dev/null |
        grep -q 'libsystemd\.so'
    tap_ok $? "ringcached links libsystemd (Type=notify needs its sd_notify)"
else
    echo "ok $((TAP_N += 1)) # SKIP built without libsystemd (Type=notify would time out)"
fi
sed 's/^ProtectHome=yes/ProtectHom=yes/' "$tmp/ringcached@cache-a.service" > "$tmp/bad@cache-a.service"
out=$(cd "$tmp" && systemd-analyze verify --man=no ./bad@cache-a.service 2>&1)
echo "$out" | grep -q "Unknown key"
tap_ok $? "a misspelt key is reported (the check can fail)"
tap_done
