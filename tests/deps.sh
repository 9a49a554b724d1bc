#!/usr/bin/env bash
# Installs, from Debian's archive, the packages ringcache needs that this
# machine lacks (and only those). Sourced by tests/run.sh and deploy/demo.sh.
# Usage: rc_install_deps [extra package...]
#        rc_install_netns_deps     only what the network-namespace tests need
#                                  (tests/it/netns.py calls it when ip or nft is
#                                  missing)

RC_DEPS="gcc make autoconf automake libtool pkg-config libevent-dev
libprotobuf-c-dev protobuf-c-compiler libxxhash-dev check python3
python3-pymemcache python3-pylibmc libmemcached-tools libmemcached-dev memcached clang
libclang-rt-14-dev procps iproute2 nftables libcurl4-openssl-dev libssl-dev libjson-c-dev
etcd-server etcd-client openssl python3-kubernetes python3-yaml systemd prometheus
librsvg2-bin tmux python3-pytest python3-dev golang-go libsystemd-dev
golang-github-bradfitz-gomemcache-dev libnss-wrapper strace linux-perf valgrind"

# tests/it/netns.py (partitions between network namespaces): ip, nft.
RC_NETNS_DEPS="iproute2 nftables"

rc_install_deps() {
    local missing=() p sudo=
    for p in $RC_DEPS "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || {
            echo "missing packages: ${missing[*]} (run as root or install them)" >&2
            return 1
        }
        sudo=sudo
    fi
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # The memcached package would start a system daemon on 11211; we start our
    # own instances on free ports, so keep the package from starting it.
    if [ ! -e /usr/sbin/policy-rc.d ] && [ -z "$sudo" ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        RC_REMOVE_POLICY=1
    fi
    $sudo apt-get update -qq &&
        $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    local rc=$?
    [ -n "${RC_REMOVE_POLICY:-}" ] && rm -f /usr/sbin/policy-rc.d
    return $rc
}

# Only RC_NETNS_DEPS (not the whole RC_DEPS list), each only if missing.
rc_install_netns_deps() {
    local RC_DEPS=
    rc_install_deps $RC_NETNS_DEPS "$@"
}
