#!/bin/sh
# libringcache as an application sees it: `make install` into a temporary
# DESTDIR, then `cc app.c $(pkg-config --cflags --libs ringcache)` against
# the shared library, a static link against libringcache.a, the header
# alone under -std=c99 -pedantic, and only ringcache_ symbols exported.
set -u
: "${RC_BUILDDIR:?}" "${RC_SRCDIR:?}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rc-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
n=0
fails=0
check() {  # check DESCRIPTION COMMAND...
    desc=$1
    shift
    n=$((n + 1))
    if "$@" >"$tmp/out" 2>&1; then
        echo "ok $n - $desc"
    else
        echo "not ok $n - $desc"
        sed 's/^/# /' "$tmp/out" | head -20
        fails=$((fails + 1))
    fi
}

echo "1..6"
dest=$tmp/dest
check "make install DESTDIR=..." make -C "$RC_BUILDDIR" -s install DESTDIR="$dest"

prefix=$(sed -n 's/^prefix=//p' "$RC_BUILDDIR/client/ringcache.pc")
libdir=$(sed -n 's/^libdir=//p' "$RC_BUILDDIR/client/ringcache.pc" | sed "s|\${exec_prefix}|$prefix|; s|\${prefix}|$prefix|")
PKG_CONFIG_PATH=$dest$libdir/pkgconfig
PKG_CONFIG_SYSROOT_DIR=$dest
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR

# A sanitizer build's library needs the sanitizer runtime in the app too.
san=""
grep -q 'define RC_SANITIZERS 1' "$RC_BUILDDIR/config.h" && san="-fsanitize=address,undefined"

cat >"$tmp/app.c" <<'APP'
#include <stdio.h>
#include <string.h>
#include <ringcache.h>

int
main(void)
{
    const char *seeds[] = { "127.0.0.1:1", "127.0.0.1:2" };
    struct ringcache *rc = NULL;
    size_t owner;
    char err[128];

    if (ringcache_new_seeds(&rc, seeds, 2, NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (ringcache_set(rc, "bad key", 7, "v", 1, 0, 0) != RINGCACHE_EKEY ||
        ringcache_locate(rc, "k", 1, &owner, 1) != 1 || ringcache_node_count(rc) != 2) {
        return 1;
    }
    printf("%s / %s\n", ringcache_strerror(RINGCACHE_EKEY), ringcache_node_id(rc, owner));
    ringcache_free(rc);
    return 0;
}
APP

build_shared() {
    # shellcheck disable=SC2046
    ${CC:-cc} $san -o "$tmp/app" "$tmp/app.c" $(pkg-config --cflags --libs ringcache) &&
        LD_LIBRARY_PATH=$dest$libdir "$tmp/app" | grep -q 'invalid key'
}
check "cc app.c \$(pkg-config --cflags --libs ringcache) links and runs" build_shared

build_static() {
    # shellcheck disable=SC2046
    ${CC:-cc} $san -o "$tmp/app_static" "$tmp/app.c" $(pkg-config --cflags ringcache) \
        "$dest$libdir/libringcache.a" $(pkg-config --static --libs-only-l ringcache | sed 's/-lringcache//') &&
        ! ldd "$tmp/app_static" | grep -q libringcache && "$tmp/app_static" | grep -q 'invalid key'
}
check "static link against libringcache.a (pkg-config --static)" build_static

header_alone() {
    # shellcheck disable=SC2046
    printf '#include <ringcache.h>\nint main(void) { return ringcache_strerror(0) == 0; }\n' >"$tmp/h.c" &&
        ${CC:-cc} -std=c99 -pedantic -Wall -Wextra -Werror -c -o "$tmp/h.o" "$tmp/h.c" $(pkg-config --cflags ringcache)
}
check "ringcache.h compiles alone under -std=c99 -pedantic -Werror" header_alone

exports_only_ringcache() {
    so=$(ls "$dest$libdir"/libringcache.so.* | head -1)
    nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRW]$/ { print $3 }' >"$tmp/syms"
    [ -s "$tmp/syms" ] && ! grep -v '^ringcache_' "$tmp/syms"
}
check "the shared library exports only ringcache_ symbols" exports_only_ringcache

installed_header() {
    incdir=$(pkg-config --variable=includedir ringcache)
    [ -f "$incdir/ringcache.h" ] && cmp "$incdir/ringcache.h" "$RC_SRCDIR/client/ringcache.h" &&
        ! ls "$incdir" | grep -E '^(mcproto|pool|route|ring)\.h$'
}
check "ringcache.h is installed and no internal header is" installed_header

exit $((fails > 0))
