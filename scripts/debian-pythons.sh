#!/usr/bin/env bash
# Pythons this machine lacks, from Debian's packages, for scripts/other-pythons.sh.
#
#   scripts/debian-pythons.sh root DIR VERSION…   build DIR: a minbase Debian $SUITE (sid by
#                                                 default) with python3.X and python3.X-venv
#                                                 for each VERSION, the host's CA bundle and
#                                                 resolv.conf (pip reaches PyPI from inside)
#   scripts/debian-pythons.sh run DIR BIND CMD…   run CMD inside DIR as root, with /proc, /sys,
#                                                 /dev and the host directory BIND (at the same
#                                                 path) mounted, in a mount namespace of its own:
#                                                 nothing stays mounted when CMD ends
#
# Why: the machine has the Pythons pyenv installed (3.11 to 3.13), and no registry it reaches
# serves a CPython build but Debian's, whose newest Pythons are in sid (3.14 and 3.15 on
# 2026-12-07). A Debian sid binary needs sid's C library, so it runs in a root of its own.
# Needs root and mmdebstrap (scripts/ci-docker.sh engine installs it in CI). The mirror's
# sid Release file may be past its Valid-Until date (a snapshot), which apt is told to accept.
set -euo pipefail

SUITE=${DEBIAN_PYTHONS_SUITE:-sid}
MIRROR=${DEBIAN_PYTHONS_MIRROR:-http://deb.debian.org/debian}
HOST_CA=/etc/ssl/certs/ca-certificates.crt

say() { printf 'debian-pythons: %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

build_root() { # DIR VERSION…
    local dir=$1 packages=() version
    shift
    for version in "$@"; do packages+=("python$version" "python$version-venv"); done
    [[ $(id -u) -eq 0 ]] || fail "building a Debian root needs root"
    command -v mmdebstrap >/dev/null || fail "mmdebstrap is missing (apt-get install mmdebstrap)"
    say "building $dir (mmdebstrap $SUITE + ${packages[*]})"
    local IFS=,
    mmdebstrap --quiet --variant=minbase --include="${packages[*]}" \
        --aptopt='Acquire::Check-Valid-Until "false"' \
        --customize-hook='mkdir -p "$1/etc/ssl/certs"' \
        --customize-hook="copy-in $HOST_CA /etc/ssl/certs" \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
        "$SUITE" "$dir" "deb $MIRROR $SUITE main" || fail "mmdebstrap failed"
    cp /etc/resolv.conf "$dir/etc/resolv.conf"
}

run_in_root() { # DIR BIND CMD…
    local dir=$1 bind=$2
    shift 2
    [[ -d $dir/usr ]] || fail "$dir is no root (scripts/debian-pythons.sh root)"
    # The mounts live in this command's own mount namespace, so they go with it.
    unshare --mount --propagation private -- /bin/bash -c '
        set -e
        dir=$1 bind=$2
        shift 2
        mount -t proc proc "$dir/proc"
        mount --rbind /sys "$dir/sys"
        mount --rbind /dev "$dir/dev"
        mkdir -p "$dir$bind"
        mount --bind "$bind" "$dir$bind"
        exec chroot "$dir" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
            CI="${CI:-}" PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
            PIP_DEFAULT_TIMEOUT=180 "$@"
    ' run-in-root "$dir" "$bind" "$@"
}

case ${1:-} in
root)
    [[ $# -ge 3 ]] || fail "usage: $0 root DIR VERSION…"
    shift
    build_root "$@"
    ;;
run)
    [[ $# -ge 4 ]] || fail "usage: $0 run DIR BIND CMD…"
    shift
    run_in_root "$@"
    ;;
*) fail "usage: $0 root DIR VERSION… | run DIR BIND CMD…" ;;
esac
