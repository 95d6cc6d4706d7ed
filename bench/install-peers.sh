#!/usr/bin/env bash
# Install the peer gateways the benchmark compares against into bench/.peers/ (git-ignored):
#   supergateway (npm)  -> bench/.peers/node_modules/.bin/supergateway
#   mcp-proxy    (npm, punkpeye's) -> bench/.peers/node_modules/.bin/mcp-proxy
#   mcp-proxy    (PyPI) -> bench/.peers/venv/bin/mcp-proxy  (its own venv: it needs mcp<2)
#   py-spy       (PyPI) -> bench/.peers/venv/bin/py-spy     (for `python -m bench --profile`)
#   granian      (PyPI) -> bench/.peers/granian/            (for `python -m bench --engine granian`)
#   ContextForge (PyPI mcp-contextforge-gateway, IBM) -> bench/.peers/contextforge/  (its own venv on
#                Python >= 3.12: its stdio bridge, `python -m mcpgateway.translate`)
# Versions are pinned so runs compare like with like; override with SUPERGATEWAY_VERSION /
# MCP_PROXY_NPM_VERSION / MCP_PROXY_VERSION / CONTEXTFORGE_VERSION. Needs node/npm, python3 >= 3.10 and, for
# ContextForge, a Python >= 3.12 (CONTEXTFORGE_PYTHON, else python3.12 / python3.13 on PATH, else pyenv's 3.12.*); a
# peer that cannot be installed is skipped with a message (the benchmark then runs without it).
set -uo pipefail
cd "$(dirname "$0")"
PEERS="$PWD/.peers"
SUPERGATEWAY_VERSION="${SUPERGATEWAY_VERSION:-4.0.0}"
MCP_PROXY_NPM_VERSION="${MCP_PROXY_NPM_VERSION:-6.7.19}"
MCP_PROXY_VERSION="${MCP_PROXY_VERSION:-0.13.0}"
GRANIAN_VERSION="${GRANIAN_VERSION:-2.8.9}"
CONTEXTFORGE_VERSION="${CONTEXTFORGE_VERSION:-1.1.0}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$PEERS"
status=0

if command -v npm >/dev/null; then
    for package in "supergateway@$SUPERGATEWAY_VERSION" "mcp-proxy@$MCP_PROXY_NPM_VERSION"; do
        echo "installing $package (npm) into $PEERS"
        if ! npm install --prefix "$PEERS" --no-audit --no-fund --loglevel=error "$package"; then
            echo "$package: install failed" >&2
            status=1
        fi
    done
else
    echo "npm not found: skipping supergateway and mcp-proxy (npm)" >&2
fi

echo "installing mcp-proxy==$MCP_PROXY_VERSION and py-spy into $PEERS/venv"
if "$PYTHON" -m venv "$PEERS/venv" \
    && "$PEERS/venv/bin/pip" install -q --disable-pip-version-check "mcp-proxy==$MCP_PROXY_VERSION" py-spy; then
    :
else
    echo "mcp-proxy: install failed" >&2
    status=1
fi

echo "installing granian==$GRANIAN_VERSION into $PEERS/granian (the engine comparison)"
if ! "$PYTHON" -m pip install -q --disable-pip-version-check --upgrade --target "$PEERS/granian" "granian==$GRANIAN_VERSION"; then
    echo "granian: install failed" >&2
    status=1
fi

contextforge_python() {
    if [ -n "${CONTEXTFORGE_PYTHON:-}" ]; then
        echo "$CONTEXTFORGE_PYTHON"
        return
    fi
    # A pyenv shim may exist and still refuse to run: ask each candidate its version.
    for candidate in python3.12 python3.13 "$HOME"/.pyenv/versions/3.12.*/bin/python3.12; do
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
            echo "$candidate"
            return
        fi
    done
}
CF_PYTHON="$(contextforge_python)"
if [ -n "$CF_PYTHON" ]; then
    echo "installing mcp-contextforge-gateway==$CONTEXTFORGE_VERSION into $PEERS/contextforge ($CF_PYTHON)"
    if "$CF_PYTHON" -m venv "$PEERS/contextforge" \
        && "$PEERS/contextforge/bin/pip" install -q --disable-pip-version-check \
            "mcp-contextforge-gateway==$CONTEXTFORGE_VERSION"; then
        :
    else
        echo "mcp-contextforge-gateway: install failed" >&2
        status=1
    fi
else
    echo "no Python >= 3.12 found (set CONTEXTFORGE_PYTHON): skipping ContextForge" >&2
fi

ls "$PEERS/node_modules/.bin/supergateway" "$PEERS/node_modules/.bin/mcp-proxy" "$PEERS/venv/bin/mcp-proxy" \
    "$PEERS/contextforge/bin/python" 2>/dev/null
exit $status
