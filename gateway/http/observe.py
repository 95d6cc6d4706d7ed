"""One log line and one metrics observation per MCP request (pure ASGI, around each endpoint).

The endpoint fills ``scope["gateway.log"]`` as it learns things (JSON-RPC method, client
era, the child's pid); this wrapper adds the HTTP status and the duration when the answer
ends — for SSE, when the stream ends. The line carries the principal, never a credential.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.metrics import GatewayMetrics
from gateway.router import ANONYMOUS

log = logging.getLogger("gateway.access")


class Observed:
    def __init__(self, app: ASGIApp, *, server: str, metrics: GatewayMetrics | None) -> None:
        self.app = app
        self.server = server
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = anyio.current_time()
        fields: dict[str, Any] = scope.setdefault("gateway.log", {})
        status = 500

        async def send_observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        if self.metrics is not None:
            self.metrics.in_flight.labels(self.server).inc()
        try:
            await self.app(scope, receive, send_observed)
        finally:
            seconds = anyio.current_time() - started
            method = fields.get("method") or scope["method"]
            era = fields.get("era") or "-"
            if self.metrics is not None:
                self.metrics.in_flight.labels(self.server).dec()
                self.metrics.observe(self.server, method, era, status, seconds)
            log.info(
                "%s %s %s %d %.1fms era=%s principal=%s child=%s",
                scope["method"],
                scope["path"],
                method,
                status,
                seconds * 1000,
                era,
                scope.get("gateway.principal") or ANONYMOUS,  # as /status and the pool labels say
                fields.get("child_pid") or "-",
                extra={
                    "event": "request",
                    "server": self.server,
                    "rpc_method": method,
                    "era": era,
                    "status": status,
                    "duration_ms": round(seconds * 1000, 3),
                    "principal": scope.get("gateway.principal") or ANONYMOUS,
                    "child_pid": fields.get("child_pid"),
                    "session": fields.get("session"),
                },
            )
