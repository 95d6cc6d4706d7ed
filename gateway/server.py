"""Composition root: settings → child spec → pool → ASGI app → uvicorn.

uvicorn owns the signals: on SIGTERM or SIGINT it stops accepting, finishes the lifespan
(sessions end, children are stopped in the spec's order: stdin close, SIGTERM, SIGKILL)
and exits 0.
"""

from __future__ import annotations

import logging

import uvicorn

from gateway import __version__
from gateway.config import Settings
from gateway.http.app import create_app
from gateway.stdio.pool import Pool
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


def build_app(settings: Settings):  # type: ignore[no-untyped-def]
    pool = Pool(child_spec(settings), gateway_version=__version__)
    return create_app(
        pool,
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
