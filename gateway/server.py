"""Composition root: settings → child spec → pool → ASGI app → uvicorn.

uvicorn owns the signals: on SIGTERM or SIGINT it stops accepting, finishes the lifespan
(sessions end, children are stopped in the spec's order: stdin close, SIGTERM, SIGKILL)
and exits 0.
"""

from __future__ import annotations

import logging

import uvicorn
from starlette.applications import Starlette

from gateway import __version__
from gateway.config import Settings
from gateway.http.app import create_app
from gateway.http.auth import TokenStore
from gateway.router import Router
from gateway.stdio.process import become_subreaper

log = logging.getLogger("gateway")


def build_app(settings: Settings) -> Starlette:
    routers = [Router(server, gateway_version=__version__) for server in settings.servers]
    return create_app(
        routers,
        principal_header=settings.principal_header,
        trusted_proxies=settings.trusted_proxies,
        tokens=TokenStore(settings.auth_tokens, settings.auth_token_file),
        cors_origins=settings.cors_origins,
        authorization_servers=settings.oauth_authorization_servers,
        public_url=settings.public_url,
        max_body_bytes=settings.max_body_bytes,
        loopback_only=settings.loopback_only,
        allowed_origins=settings.allowed_origins,
        allowed_hosts=settings.allowed_hosts,
    )


def run(settings: Settings) -> int:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    become_subreaper()
    if settings.is_demo:
        log.info("no command given: serving the built-in demo server (tools: echo, countdown, fail, crash)")
    for server in settings.servers:
        log.info("server %s: %s", server.name, " ".join(server.spec.argv))
    path = "/mcp" if len(settings.servers) == 1 else "/servers/NAME/mcp"
    log.info("MCP endpoint: http://%s:%d%s", settings.host, settings.port, path)
    uvicorn.run(
        build_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        lifespan="on",
        timeout_graceful_shutdown=10,
    )
    return 0
