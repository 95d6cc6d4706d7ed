#!/usr/bin/env bash
# Install headless Chromium (the Debian package `chromium`) for the integration test of the
# operator's page (tests/integration/test_ui.py), which skips, saying why, without it.
#
# Idempotent: when chromium is on PATH it exits at once without touching the network. As
# root with apt-get (CI, the Docker build) it installs the package; elsewhere it prints how
# and exits 0, so a developer's machine is never changed behind their back.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-chromium: chromium is not installed; as root: apt-get install -y chromium" \
        "(tests/integration/test_ui.py skips without it)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends chromium
command -v chromium >/dev/null
