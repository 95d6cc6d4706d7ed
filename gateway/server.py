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
from gateway.router import Router, ServerConfig
from gateway.stdio.process import become_subreaper
from gateway.stdio.spec import ChildSpec

log = logging.getLogger("gateway")


def child_spec(settings: Settings) -> ChildSpec:
    return ChildSpec(
        command=settings.command[0],
        args=tuple(settings.command[1:]),
        max_line_bytes=settings.max_line_bytes,
        probe_timeout=settings.probe_timeout,
        handshake_timeout=settings.startup_timeout,
        request_timeout=settings.request_timeout,
        name="demo" if settings.is_demo else "",
    )


def server_config(settings: Settings) -> ServerConfig:
    return ServerConfig(
        name="demo" if settings.is_demo else "default",
        spec=child_spec(settings),
        pool=settings.pool,
        isolation=settings.isolation,
        env_from_headers=settings.env_from_headers,
    )


def build_app(settings: Settings) -> Starlette:
    router = Router(server_config(settings), gateway_version=__version__)
    return create_app(
        router,
        principal_header=settings.principal_header,
        request_timeout=settings.request_timeout,
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
    log.info("MCP endpoint: http://%s:%d/mcp", settings.host, settings.port)
    uvicorn.run(
        build_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        lifespan="on",
        timeout_graceful_shutdown=10,
    )
    return 0
