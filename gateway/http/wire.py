"""Every error the HTTP edge sends is written here, and nowhere else.

An error answer is a JSON-RPC error response (``id`` null when the request's id is not
known, as JSON-RPC requires) with the HTTP status the spec maps it to; 503 carries
``Retry-After``. ``json_response`` is the one JSON writer (orjson, compact).
"""

from __future__ import annotations

from typing import Any, Final

import orjson
from starlette.responses import Response
from starlette.types import Scope

from gateway.errors import GatewayError
from gateway.protocol.jsonrpc import JsonObject
from gateway.protocol.outcome import Rejection

MAX_REMEMBERED_NAMES: Final = 256
"""Distinct header names whose decoded, lower-cased form ``header_map`` keeps: a client sends the
same dozen names on every request, and each costs a decode and a ``lower()`` (about half of
``header_map``'s work). Past it, a new name is decoded every time, as before: names a client
makes up cannot grow the table."""
MAX_REMEMBERED_NAME_BYTES: Final = 64
"""A longer name is never kept (every header name MCP uses is far shorter)."""


class _HeaderNames(dict[bytes, str]):
    """Raw header name → its name as ``header_map`` keys it; a name not kept yet is decoded
    (``__missing__``), and kept while the table has room."""

    def __missing__(self, raw: bytes) -> str:
        name = raw.decode("latin-1").lower()
        if len(self) < MAX_REMEMBERED_NAMES and len(raw) <= MAX_REMEMBERED_NAME_BYTES:
            self[raw] = name
        return name


_NAMES: Final = _HeaderNames()


def header_map(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the last one wins on repeats): the one place
    the edge decodes them all."""
    names = _NAMES
    return {names[k]: v.decode("latin-1") for k, v in scope["headers"]}


def json_response(body: JsonObject, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def error_response(
    status: int,
    error: JsonObject,
    request_id: Any = None,
    *,
    retry_after: int | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    extra = dict(headers or {})
    if retry_after is not None:
        extra["retry-after"] = str(retry_after)
    # An unknown id is left out: the 2026-07-28 schema types id as string or integer.
    body: JsonObject = {"jsonrpc": "2.0", "error": error}
    if request_id is not None:
        body["id"] = request_id
    return json_response(body, status, extra)


def gateway_error_response(exc: GatewayError, request_id: Any = None) -> Response:
    retry_after = getattr(exc, "retry_after", None)
    return error_response(exc.status, exc.error_object(), request_id, retry_after=retry_after)


def accepted() -> Response:
    """202 with no body: an accepted notification or response."""
    return Response(status_code=202)


def rejection_response(rejection: Rejection) -> Response:
    """The answer to a request the ingress checks refused."""
    body = rejection.body()
    headers = dict(rejection.headers)
    if body is None:
        return Response(status_code=rejection.status, headers=headers)
    return json_response(body, rejection.status, headers)
