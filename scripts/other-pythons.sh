#!/usr/bin/env bash
# The other Pythons we ship, from a fresh clone with nothing beside it (issue #41).
#
#   scripts/other-pythons.sh [VERSION …]     # default: 3.12 3.13 3.14 3.15
#
# For each version: a clone of HEAD in a temporary directory (no ../shared, no untracked
# file), a virtual environment of that interpreter, `pip install -e '.[dev]'` (every version's
# at once), then mypy for that version and the quick tier (unit + component, on two xdist
# workers) plus the tests whose code branches per Python: TLS (CPython's sslproto callback
# order; on two workers of their own, beside the rest), the fences on library internals, the
# emitted-schema checks and the access-log records (ops/records.py). The full suite runs on
# the machine's python3 in .ci/run. The interpreter is found on PATH (python3.X) or under
# pyenv; a version found in neither runs in a Debian sid root built for it
# (scripts/debian-pythons.sh: Debian's python3.X, as root, with mmdebstrap). A version that
# cannot be had either way fails the script when CI is set (a green run must not hide a
# missing interpreter), and is only reported otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.12 3.13 3.14 3.15)

find_python() {
    # python3.X on PATH (a pyenv shim there fails unless that version is selected), else pyenv's.
    local version=$1 candidate
    for candidate in "$(command -v "python$version" 2>/dev/null)" \
        $(command -v pyenv >/dev/null 2>&1 && ls -d "$(pyenv root)"/versions/"$version".*/bin/python"$version" 2>/dev/null | sort -V -r); do
        if [ -n "$candidate" ] && "$candidate" -c 'import sys' >/dev/null 2>&1; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 143' TERM # stopped (.ci/run stops it when a step fails): the directory goes all the same
git clone -q --no-hardlinks "$PWD" "$work/main"
cd "$work/main"

debian_root=$work/debian-root
in_env() { # VERSION CMD…: CMD for VERSION, in the Debian root when that is where VERSION is
    local version=$1
    shift
    if [ "${where[$version]}" = debian ]; then
        scripts/debian-pythons.sh run "$debian_root" "$work" /bin/bash -c 'cd "$0" && exec "$@"' "$PWD" "$@"
    else
        "$@"
    fi
}

install() { # VERSION PYTHON: a virtual environment of PYTHON with the project and its dev extra
    in_env "$1" "$2" -m venv "$work/venv-$1" &&
        in_env "$1" "$work/venv-$1/bin/python" -m pip install -q --disable-pip-version-check -e '.[dev]'
}

start_install() { # VERSION: in the background; its pid and interpreter in installing[VERSION]
    install "$1" "${python_of[$1]}" >"$work/install-$1.log" 2>&1 &
    installing[$1]="$! ${python_of[$1]}"
}

# Every version's install starts at once, side by side: an install mostly waits on the package
# index, so the later versions' installs overlap the earlier versions' checks (and the
# machine's own overlap the Debian root's build).
status=0
declare -A installing where python_of
missing=()
for version in "${versions[@]}"; do
    python=$(find_python "$version" || true)
    if [ -n "$python" ]; then
        where[$version]=here python_of[$version]=$python
        start_install "$version"
    else
        missing+=("$version")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then # Debian's, in a root of their own (one root for all of them)
    if scripts/debian-pythons.sh root "$debian_root" "${missing[@]}" >"$work/debian-root.log" 2>&1; then
        echo "other-pythons: the Debian root for ${missing[*]} was ready at $SECONDS s"
        for version in "${missing[@]}"; do
            where[$version]=debian python_of[$version]=/usr/bin/python$version
            start_install "$version"
        done
    else
        cat "$work/debian-root.log" >&2
        echo "other-pythons: no Python ${missing[*]} on this machine, nor from Debian" >&2
        [ -n "${CI:-}" ] && status=1
    fi
fi

for version in "${versions[@]}"; do
    [ -n "${installing[$version]:-}" ] || continue
    read -r pid python <<<"${installing[$version]}"
    from=""
    [ "${where[$version]}" = debian ] && from=" from Debian $(cat "$debian_root/etc/debian_version")"
    echo "== Python $version ($python$from), fresh clone at $(git rev-parse --short HEAD)"
    install_status=0
    wait "$pid" || install_status=$?
    echo "other-pythons: installed at $SECONDS s"
    cat "$work/install-$version.log"
    if [ "$install_status" -ne 0 ]; then
        echo "other-pythons: installing into a Python $version environment failed" >&2
        status=1
        continue
    fi
    venv="$work/venv-$version"
    # Three processes at once (their reports in this order): the tests on two workers, the TLS
    # tests on two more, and mypy. The TLS tests mostly wait on real timeouts (39 tests: 51 s
    # alone, 10 s of it CPU), so they run beside the others rather than after them, where two
    # workers would wait on them with the cores idle (80 s a version before, 57 s so).
    in_env "$version" "$venv/bin/python" -m mypy --python-version "$version" --cache-dir "$work/mypy-$version" \
        >"$work/mypy-$version.log" 2>&1 &
    typing=$!
    in_env "$version" "$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 \
        tests/integration/test_tls.py tests/integration/test_tls_limits.py >"$work/tls-$version.log" 2>&1 &
    tls=$!
    in_env "$version" "$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 -m 'not npm and not container' \
        tests/unit tests/component \
        tests/integration/test_fences.py tests/integration/test_emitted_schemas.py \
        tests/integration/test_access_log.py || status=1
    wait "$tls" || status=1
    echo "TLS tests, Python $version:"
    cat "$work/tls-$version.log"
    wait "$typing" || status=1
    echo "mypy, Python $version:"
    cat "$work/mypy-$version.log"
    echo "other-pythons: Python $version checked at $SECONDS s"
done
exit $status
