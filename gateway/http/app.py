"""The ASGI application: routes, lifespan, middleware.

``create_app(router, ...)`` builds a Starlette app serving the MCP endpoint at ``/mcp``,
``/healthz`` (the process and its event loop answer), ``/readyz`` (a child is ready and no
pool is failing; 503 with the reason otherwise) and ``/status`` (JSON for humans: pools,
children, their pids, eras, load and last errors). The lifespan starts the router (the
shared pool pre-warms its children before traffic), opens the task group that runs
detached legacy exchanges, and on shutdown ends sessions and stops every child in the
spec's order.
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
from gateway.http import wire
from gateway.http.endpoint import MAX_BODY_BYTES, McpEndpoint
from gateway.http.origin import OriginGuard
from gateway.relay import Relay
from gateway.router import Router
from gateway.sessions import SessionStore


def create_app(
    router: Router,
    *,
    request_timeout: float | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    loopback_only: bool = True,
    allowed_origins: Iterable[str] = (),
    allowed_hosts: Iterable[str] = (),
    principal_header: str | None = None,
) -> Starlette:
    sessions = SessionStore(on_end=router.end_session)
    endpoint = McpEndpoint(
        Relay(router, request_timeout=request_timeout, gateway_version=__version__),
        sessions,
        max_body_bytes=max_body_bytes,
        principal_header=principal_header,
    )
    router.add_listener(endpoint.on_child_notification)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with router, anyio.create_task_group() as tg:
            endpoint.task_group = tg
            try:
                yield
            finally:
                sessions.end_all()
                tg.cancel_scope.cancel()

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(request: Request) -> Response:
        problem = router.readiness_problem()
        if problem is None:
            return PlainTextResponse("ready\n")
        return PlainTextResponse(f"not ready: {problem}\n", status_code=503)

    async def status(request: Request) -> Response:
        return wire.json_response({"version": __version__, "sessions": len(sessions), "servers": [router.status()]})

    app = Starlette(
        routes=[
            Route("/mcp", endpoint.__call__, methods=["POST", "GET", "DELETE"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/status", status, methods=["GET"]),
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
    app.state.router = router
    app.state.sessions = sessions
    return app
