# mcp-stdio-gateway: stdio MCP servers (npx …, uvx …, binaries) behind one Streamable HTTP
# endpoint. Python 3.12 runs the gateway; Node.js + npm run `npx` servers; uv runs `uvx`
# servers. Configure it with MCP_GATEWAY_* variables (every flag has one) or arguments:
#
#   docker build -t mcp-stdio-gateway .
#   docker run --rm -p 8000:8000 mcp-stdio-gateway -- npx -y @modelcontextprotocol/server-everything@2026.8.31
#   docker run --rm -p 8000:8000 -e MCP_GATEWAY_COMMAND='uvx mcp-server-time@2026.10.19' mcp-stdio-gateway
#
# Pin the server's version as above: an unpinned npx/uvx server changes under a restart.
#
# See docs/deployment.md.

# Base images by tag and digest, so a rebuild gets the same bytes (the tag says what it is;
# the digest, of the multi-platform index, is what Docker pulls). These are the published
# digests of python:3.12-slim-trixie (Python 3.12.13, built 2026-08-05) and node:22-slim
# (Node.js 22.23.2, built 2026-09-19), from docker-library/repo-info. To take a newer build:
#   docker buildx imagetools inspect python:3.12-slim-trixie   (the "Digest:" line)
# and update the ARG, or override it: docker build --build-arg PYTHON_IMAGE=python:3.12-slim-trixie@sha256:… .
ARG PYTHON_IMAGE=python:3.12-slim-trixie@sha256:229a2c5bfa27522db7815ea81f9bed70af17ccb9de9fc7ad142b1877b5830d36
ARG NODE_IMAGE=node:22-slim@sha256:48e4b67d85f87bd551df43704e24d252f56cc5f8e9718841aace50f19948f0f9

# --- node: the official Node.js build, copied into the runtime below --------------------
# Node's release binaries need only glibc (>= 2.28) and libstdc++, both in every Debian image,
# so the node image's own Debian release does not have to match the Python image's.
FROM ${NODE_IMAGE} AS node

# --- builder: the gateway and uv in a virtualenv; the build backend stays behind --------
FROM ${PYTHON_IMAGE} AS builder
ARG UV_VERSION=0.13.8
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# .dockerignore lets in only what the wheel needs: pyproject.toml, README.md, gateway/, and
# deploy/constraints.txt, which pins every runtime dependency to the versions the tests ran
# with (scripts/freeze-constraints.py writes it). pip compiles the bytecode here, since the
# runtime's root filesystem may be read-only.
COPY pyproject.toml README.md deploy/constraints.txt ./
COPY gateway ./gateway
RUN pip install --no-cache-dir --constraint constraints.txt . "uv==${UV_VERSION}"

# --- runtime -----------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime

# The release's identity (scripts/release.sh passes the package's version, the commit and the
# time; a plain `docker build` labels itself "dev").
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="mcp-stdio-gateway" \
      org.opencontainers.image.description="stdio MCP servers behind one Streamable HTTP endpoint" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"

# tini is PID 1: it forwards SIGTERM to the gateway (which then drains) and reaps zombies.
# (The base image already has ca-certificates, which npm and uv need for TLS.) The version
# glob takes Debian's rebuilds within the release that the base image tag pins. apt-get clean:
# the package caches (~80 MB) stay out of the layer on a base without Debian's docker-clean hook.
# tini is executable but not readable by the gateway's user: the kernel then runs it not
# dumpable, so children (same user) cannot read its /proc/1/environ, which holds every variable
# the container was started with (the gateway makes itself not dumpable; docs/security.md).
RUN apt-get update \
    && apt-get install -y --no-install-recommends "tini=0.19.*" \
    && chmod 0711 /usr/bin/tini \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*

# Node.js and npm (npx) exactly as the official node image lays them out.
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/npm
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
    && node --version && npm --version

COPY --from=builder /opt/venv /opt/venv

# A fixed numeric uid/gid, so Kubernetes' runAsNonRoot can verify it and volumes can be
# chowned to it (APP_UID, not UID, which bash reserves). HOME holds the npm and uv caches:
# writable; mount a volume there to keep them across restarts, or an emptyDir under a
# read-only root filesystem.
ARG APP_UID=10001
ARG APP_GID=10001
RUN groupadd --system --gid "${APP_GID}" gateway \
    && useradd --system --uid "${APP_UID}" --gid gateway --home-dir /home/gateway \
       --create-home --shell /usr/sbin/nologin gateway \
    && mkdir -p /home/gateway/.npm /home/gateway/.cache/uv /home/gateway/.local/share/uv \
    && chown -R gateway:gateway /home/gateway

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/gateway \
    NPM_CONFIG_CACHE=/home/gateway/.npm \
    NPM_CONFIG_UPDATE_NOTIFIER=false \
    NPM_CONFIG_FUND=false \
    NPM_CONFIG_AUDIT=false \
    UV_CACHE_DIR=/home/gateway/.cache/uv \
    UV_TOOL_DIR=/home/gateway/.local/share/uv/tools \
    UV_PYTHON_INSTALL_DIR=/home/gateway/.local/share/uv/python \
    UV_PYTHON_PREFERENCE=system \
    MCP_GATEWAY_HOST=0.0.0.0 \
    MCP_GATEWAY_PORT=8000 \
    MCP_GATEWAY_LOG_FORMAT=json

# The build fails here, not at the first start, if the gateway cannot run (a wheel built without
# its package, a missing shared library).
RUN mcp-stdio-gateway --version && python -c "import gateway.server" && uv --version

USER ${APP_UID}:${APP_GID}
WORKDIR /home/gateway
EXPOSE 8000

# Liveness of the process only; readiness (children started, not draining) is /readyz.
# No curl in the image: the gateway's own Python does the request.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('MCP_GATEWAY_PORT', '8000') + '/healthz', timeout=4)"]

# SIGTERM (docker stop, Kubernetes) starts the drain: readiness fails, in-flight requests
# get MCP_GATEWAY_DRAIN_TIMEOUT seconds, children stop, exit 0. Give the container a stop
# grace longer than the drain timeout plus ~5 s for the children.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "mcp-stdio-gateway"]
CMD []
