"""Every error the HTTP edge sends is written here, and nowhere else.

An error answer is a JSON-RPC error response (``id`` null when the request's id is not
known, as JSON-RPC requires) with the HTTP status the spec maps it to; 503 carries
``Retry-After``. ``json_response`` is the one JSON writer (orjson, compact).
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Scope

from gateway.errors import GatewayError
from gateway.protocol.jsonrpc import JsonObject
from gateway.protocol.outcome import Rejection


def header_map(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the last one wins on repeats): the one place
    the edge decodes them all."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


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
