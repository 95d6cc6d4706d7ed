#!/usr/bin/env bash
# The other Pythons we ship, from a fresh clone with nothing beside it (issue #41).
#
#   scripts/other-pythons.sh [VERSION …]     # default: 3.12 3.13
#
# For each version: a clone of HEAD in a temporary directory (no ../shared, no untracked
# file), a virtual environment of that interpreter, `pip install -e '.[dev]'` (every version's
# at once), then mypy for that version and the quick tier (unit + component, on xdist workers
# as pyproject's addopts say) plus the tests whose code branches per Python: TLS (CPython's
# sslproto callback order), the fences on library internals, the emitted-schema checks and
# the access-log records (ops/records.py). The full suite runs on
# the machine's python3 in .ci/run. The interpreter is found on PATH (python3.X) or under
# pyenv; without it the script fails when CI is set (a green run must not hide a missing
# interpreter) and says so otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.12 3.13)

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
git clone -q --no-hardlinks "$PWD" "$work/main"
cd "$work/main"

install() { # VERSION PYTHON: a virtual environment of PYTHON with the project and its dev extra
    "$2" -m venv "$work/venv-$1" && "$work/venv-$1/bin/python" -m pip install -q --disable-pip-version-check -e '.[dev]'
}

# Every version's install starts at once, side by side: an install mostly waits on the package
# index, so the later versions' installs overlap the earlier versions' checks.
status=0
declare -A installing
for version in "${versions[@]}"; do
    python=$(find_python "$version" || true)
    if [ -z "$python" ]; then
        echo "other-pythons: no Python $version on this machine" >&2
        [ -n "${CI:-}" ] && status=1
        continue
    fi
    install "$version" "$python" >"$work/install-$version.log" 2>&1 &
    installing[$version]="$! $python"
done

for version in "${versions[@]}"; do
    [ -n "${installing[$version]:-}" ] || continue
    read -r pid python <<<"${installing[$version]}"
    echo "== Python $version ($python), fresh clone at $(git rev-parse --short HEAD)"
    install_status=0
    wait "$pid" || install_status=$?
    cat "$work/install-$version.log"
    if [ "$install_status" -ne 0 ]; then
        echo "other-pythons: installing into a Python $version environment failed" >&2
        status=1
        continue
    fi
    venv="$work/venv-$version"
    "$venv/bin/python" -m mypy --python-version "$version" --cache-dir "$work/mypy-$version" || status=1
    "$venv/bin/python" -m pytest -q -p no:cacheprovider -m 'not npm and not container' \
        tests/unit tests/component \
        tests/integration/test_tls.py tests/integration/test_tls_limits.py \
        tests/integration/test_fences.py tests/integration/test_emitted_schemas.py \
        tests/integration/test_access_log.py || status=1
done
exit $status
