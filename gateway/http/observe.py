"""One access-log line and one metrics observation per request (pure ASGI, the outermost layer).

``Observed`` wraps the whole app, so requests the middleware refuses (403 Origin/Host, 431,
401, 429) are logged and counted like the rest. Every request to an MCP endpoint is
observed; on other paths (probes, ``/metrics``, ``/status``) only refusals and errors are,
so probes and scrapes do not flood the log.

The endpoint fills ``scope["gateway.log"]`` as it learns things (JSON-RPC method, client
era, the child's pid); the answer's writer (``gateway.http.stream``) notes the outcome with
``note_answer``; this wrapper adds the HTTP status and the duration when the answer ends —
for SSE, when the stream ends. What a line says:

- ``status``: the HTTP status sent; ``499`` (nginx's "client closed request") when the
  client went away before any was.
- ``outcome``: ``ok``; ``error`` when the answer is a JSON-RPC error (a 4xx/5xx, or a 200
  whose final message is an error, such as -31001 from a child that died); ``cancelled``
  when the client left before the answer, or cancelled the request (-31005).
- ``code``: the JSON-RPC error code of an ``error`` or ``cancelled`` answer, else ``-``.

Client-chosen text (method, path, principal) is cut at ``MAX_LOGGED_CHARS``; control
characters are escaped by the log formatters (``gateway.ops.logs``). The line carries the
principal, never a credential.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

import anyio
import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import CODE_CANCELLED
from gateway.ops.metrics import GatewayMetrics
from gateway.relay.router import ANONYMOUS

log = logging.getLogger("gateway.access")

MAX_LOGGED_CHARS: Final = 200
"""Client-chosen values (a JSON-RPC method, a path) longer than this are cut in the access log."""
CLIENT_CLOSED: Final = 499
"""The status logged when the client left before the gateway sent one (nginx's convention)."""
_MAX_PARSED_ERROR_BYTES: Final = 65536
"""Error bodies read for their JSON-RPC code; ours are a few hundred bytes."""


def note_answer(scope: Scope, message: Mapping[str, Any]) -> None:
    """Record the final JSON-RPC message a request was answered with (its outcome and code)."""
    fields: dict[str, Any] = scope.setdefault("gateway.log", {})
    error = message.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        fields["code"] = code if type(code) is int else None
        fields["outcome"] = "cancelled" if code == CODE_CANCELLED else "error"
    else:
        fields["outcome"] = "ok"


def note_cancelled(scope: Scope) -> None:
    """The client went away before its answer."""
    scope.setdefault("gateway.log", {})["outcome"] = "cancelled"


def cut(text: str) -> str:
    return text if len(text) <= MAX_LOGGED_CHARS else text[:MAX_LOGGED_CHARS] + f"…({len(text)} chars)"


def _error_code(body: bytes) -> int | None:
    try:
        error = orjson.loads(body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    code = error.get("code") if isinstance(error, dict) else None
    return code if type(code) is int else None


class Observed:
    def __init__(self, app: ASGIApp, *, servers: Mapping[str, str], metrics: GatewayMetrics | None) -> None:
        self.app = app
        self.servers = dict(servers)  # MCP endpoint path → server name
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = anyio.current_time()
        server = self.servers.get(scope["path"])
        fields: dict[str, Any] = scope.setdefault("gateway.log", {})
        status = 0
        error_code: int | None = None

        async def send_observed(message: Message) -> None:
            nonlocal status, error_code
            if message["type"] == "http.response.start":
                status = message["status"]
            elif status >= 400 and error_code is None and "outcome" not in fields:
                # Refusals are written by wire.py as small JSON-RPC errors: read their code.
                body = message.get("body", b"")
                if 0 < len(body) <= _MAX_PARSED_ERROR_BYTES:
                    error_code = _error_code(body)
            await send(message)

        if server is not None and self.metrics is not None:
            self.metrics.in_flight.labels(server).inc()
        raised = False
        try:
            await self.app(scope, receive, send_observed)
        except Exception:  # a bug: Starlette answers 500 outside this layer
            raised = True
            raise
        finally:
            if server is not None and self.metrics is not None:
                self.metrics.in_flight.labels(server).dec()
            if server is not None or status >= 400 or (raised and status == 0):
                self._observe(scope, fields, server, status, error_code, raised, anyio.current_time() - started)

    def _observe(
        self,
        scope: Scope,
        fields: dict[str, Any],
        server: str | None,
        status: int,
        error_code: int | None,
        raised: bool,
        seconds: float,
    ) -> None:
        outcome = fields.get("outcome")
        code = fields.get("code", error_code)
        if status == 0:
            status, outcome = (500, "error") if raised else (CLIENT_CLOSED, "cancelled")
        elif outcome is None:
            outcome = "error" if status >= 400 else "ok"
        method = fields.get("method") or scope["method"]
        era = fields.get("era") or "-"
        if self.metrics is not None:
            self.metrics.observe(server or "-", method, era, status, outcome, seconds)
        if not log.isEnabledFor(logging.INFO):  # --log-level warning: skip building the line
            return
        log.info(
            "%s %s %s %d %.1fms era=%s outcome=%s code=%s principal=%s child=%s",
            cut(scope["method"]),
            cut(scope["path"]),
            cut(method),
            status,
            seconds * 1000,
            era,
            outcome,
            "-" if code is None else code,
            cut(scope.get("gateway.principal") or ANONYMOUS),  # as /status and the pool labels say
            fields.get("child_pid") or "-",
            extra={
                "event": "request",
                "server": server,
                "rpc_method": cut(method),
                "era": era,
                "status": status,
                "outcome": outcome,
                "code": code,
                "duration_ms": round(seconds * 1000, 3),
                "principal": scope.get("gateway.principal") or ANONYMOUS,
                "child_pid": fields.get("child_pid"),
                "session": fields.get("session"),
            },
        )
