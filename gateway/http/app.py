"""The ASGI application: routes, lifespan, middleware.

``create_app(pool, ...)`` builds a Starlette app serving the MCP endpoint at ``/mcp``.
Its lifespan starts the pool (children spawn and handshake before traffic), opens the task
group that runs detached legacy exchanges, and on shutdown ends sessions and stops every
child in the spec's order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from gateway import __version__
from gateway.http.endpoint import MAX_BODY_BYTES, McpEndpoint
from gateway.http.origin import OriginGuard
from gateway.relay import Relay
from gateway.sessions import SessionStore
from gateway.stdio.pool import Pool


def create_app(
    pool: Pool,
    *,
    request_timeout: float | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    loopback_only: bool = True,
    allowed_origins: Iterable[str] = (),
    allowed_hosts: Iterable[str] = (),
) -> Starlette:
    sessions = SessionStore()
    endpoint = McpEndpoint(
        Relay(pool, request_timeout=request_timeout, gateway_version=__version__),
        sessions,
        max_body_bytes=max_body_bytes,
    )
    pool.add_listener(endpoint.on_child_notification)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with pool, anyio.create_task_group() as tg:
            endpoint.task_group = tg
            try:
                yield
            finally:
                sessions.end_all()
                tg.cancel_scope.cancel()

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    app = Starlette(
        routes=[
            Route("/mcp", endpoint.__call__, methods=["POST", "GET", "DELETE"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        middleware=[
            Middleware(
                OriginGuard,
                loopback_only=loopback_only,
                allowed_origins=list(allowed_origins),
                allowed_hosts=list(allowed_hosts),
            )
        ],
        lifespan=lifespan,
    )
    app.state.pool = pool
    app.state.sessions = sessions
    return app
