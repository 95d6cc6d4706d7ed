"""CORS for browser-based MCP clients (pure ASGI).

Only origins named with ``--cors-origin`` get CORS headers (``*`` allows any origin, but is
answered by echoing the origin, never with credentials semantics changed). A preflight
``OPTIONS`` is answered here with 204. ``Mcp-Param-*`` is a header *prefix*, which CORS
cannot list, so requested headers are reflected when each one is a known MCP header, a
standard request header, or starts with ``mcp-param-``. ``Mcp-Session-Id`` and
``MCP-Protocol-Version`` are exposed so browser clients can read them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from starlette.datastructures import MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.http.wire import header_map
from gateway.protocol.headers import MCP_SESSION_ID

ALLOWED_HEADERS: Final = frozenset(
    {
        "accept",
        "authorization",
        "content-type",
        "last-event-id",
        "mcp-method",
        "mcp-name",
        "mcp-protocol-version",
        MCP_SESSION_ID,
        "traceparent",
        "tracestate",
        "baggage",
    }
)
EXPOSED_HEADERS: Final = f"{MCP_SESSION_ID}, mcp-protocol-version, retry-after, www-authenticate"
METHODS: Final = "POST, GET, DELETE, OPTIONS"
MAX_AGE: Final = "600"


def allowed_request_headers(requested: str, extra: frozenset[str] = frozenset()) -> str | None:
    """The requested headers, if every one may be allowed; None refuses the preflight."""
    names = [h.strip().lower() for h in requested.split(",") if h.strip()]
    if all(name in ALLOWED_HEADERS or name in extra or name.startswith("mcp-param-") for name in names):
        return ", ".join(names)
    return None


class Cors:
    def __init__(self, app: ASGIApp, *, origins: Iterable[str], extra_headers: Iterable[str] = ()) -> None:
        self.app = app
        self.origins = {o.rstrip("/").lower() for o in origins}
        # Headers the servers map into children's environments (envFromHeaders) must be sendable too.
        self.extra_headers = frozenset(h.lower() for h in extra_headers)

    def _allowed(self, origin: str) -> bool:
        return "*" in self.origins or origin.rstrip("/").lower() in self.origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.origins:
            await self.app(scope, receive, send)
            return
        headers = header_map(scope)
        origin = headers.get("origin")
        if origin is None or not self._allowed(origin):
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            reflected = allowed_request_headers(headers.get("access-control-request-headers", ""), self.extra_headers)
            if reflected is None:
                await Response(status_code=403)(scope, receive, send)
                return
            response = Response(
                status_code=204,
                headers={
                    "access-control-allow-origin": origin,
                    "access-control-allow-methods": METHODS,
                    "access-control-allow-headers": reflected,
                    "access-control-max-age": MAX_AGE,
                    "vary": "Origin",
                },
            )
            await response(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                response_headers = MutableHeaders(scope=message)
                response_headers["access-control-allow-origin"] = origin
                response_headers["access-control-expose-headers"] = EXPOSED_HEADERS
                response_headers.add_vary_header("Origin")
            await send(message)

        await self.app(scope, receive, send_with_cors)
