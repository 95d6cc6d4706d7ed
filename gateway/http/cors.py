"""CORS for browser-based MCP clients (pure ASGI).

Only origins named with ``--cors-origin`` get CORS headers (``*`` allows any origin, but is
answered by echoing the origin, never with credentials semantics changed). A preflight
``OPTIONS`` is answered here with 204. ``Mcp-Param-*`` is a header *prefix*, which CORS
cannot list, so requested headers are reflected when each one is a known MCP header, a
standard request header, or starts with ``mcp-param-``. ``Mcp-Session-Id`` and
``MCP-Protocol-Version`` are exposed so browser clients can read them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from starlette.datastructures import MutableHeaders
from starlette.responses import Response
from starlette.types import Message, Scope

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


class CorsPolicy:
    """The origins that get CORS headers, and the preflight answer."""

    def __init__(self, *, origins: Iterable[str], extra_headers: Iterable[str] = ()) -> None:
        self.origins = {o.rstrip("/").lower() for o in origins}
        self.any_origin = "*" in self.origins
        # Headers the servers map into children's environments (envFromHeaders) must be sendable too.
        self.extra_headers = frozenset(h.lower() for h in extra_headers)

    def _allowed(self, origin: str) -> bool:
        return self.any_origin or origin.rstrip("/").lower() in self.origins

    def allowed_origin(self, headers: Mapping[bytes, bytes]) -> str | None:
        """The request's ``Origin`` when it gets CORS headers, else None. ``headers``: the
        request's by name (the last of a repeated one, as ``wire.header_map``)."""
        origin = headers.get(b"origin")
        if origin is None:
            return None
        text = origin.decode("latin-1")
        return text if self._allowed(text) else None

    def preflight(self, scope: Scope, origin: str) -> Response | None:
        """The answer to a CORS preflight from an allowed ``origin``; None: not a preflight."""
        if scope["method"] != "OPTIONS":
            return None
        headers = header_map(scope)
        if "access-control-request-method" not in headers:
            return None
        reflected = allowed_request_headers(headers.get("access-control-request-headers", ""), self.extra_headers)
        if reflected is None:
            return Response(status_code=403)
        return Response(
            status_code=204,
            headers={
                "access-control-allow-origin": origin,
                "access-control-allow-methods": METHODS,
                "access-control-allow-headers": reflected,
                "access-control-max-age": MAX_AGE,
                "vary": "Origin",
            },
        )


def add_cors_headers(message: Message, origin: str) -> None:
    """Add the CORS response headers for ``origin`` to an ``http.response.start`` message."""
    response_headers = MutableHeaders(scope=message)
    response_headers["access-control-allow-origin"] = origin
    response_headers["access-control-expose-headers"] = EXPOSED_HEADERS
    response_headers.add_vary_header("Origin")
