"""Forwards into this instance, as the owner (DESIGN "Scale-out: any replica, any request"):
``AcceptForwards``, and the body and header helpers owner routing shares
(``gateway.http.forward`` routes requests out to their owners; its docstring has the whole
design).

``AcceptForwards`` (outermost in the edge but for the header limits) lets a request that
carries ``x-mcp-gateway-forward`` in only when the signature verifies over the headers alone
(``gateway.protocol.owner.check_forward``) and its nonce is new, **before a byte of the body is
read**: a request that merely carries the header costs nothing (403; 503 when the nonce
memory is full). The body is then read as the endpoint reads it (408 after the body timeout,
413 over ``--max-body-bytes``) and must match the signed digest (403). The request goes on
with the signed headers only.
"""

from __future__ import annotations

import logging
import time
from typing import Final

import anyio
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import GatewayUnavailableError
from gateway.http.connection import BODY_RECEIVED
from gateway.http.edge_settings import BODY_TIMEOUT
from gateway.http.endpoint import read_body
from gateway.http.limits import CLIENT_KEY
from gateway.http.wire import error_response, gateway_error_response
from gateway.protocol import owner as owners
from gateway.protocol.jsonrpc import INVALID_REQUEST, error_object
from gateway.protocol.owner import Forward, Owner, OwnerError
from gateway.relay.owner import OwnerRouting

log = logging.getLogger("gateway.forward")

BUSY_RETRY_AFTER: Final = 1
"""Retry-After of the 503 when the nonce memory (``FORWARD_REPLAY_MEMORY``) is full."""
KEPT_UNSIGNED: Final = frozenset({b"host", b"content-length", b"transfer-encoding"})
"""The only headers of a forward the owner keeps without a signature: how it was carried."""


def header(scope: Scope, name: bytes) -> str | None:
    """The last value of header ``name`` (as ``wire.header_map``, which the endpoint reads)."""
    found = None
    for key, value in scope["headers"]:
        if key == name:
            found = value
    return None if found is None else str(found.decode("latin-1"))


def target(scope: Scope) -> str:
    query = scope.get("query_string", b"")
    return str(scope["path"]) + ("?" + query.decode("latin-1") if query else "")


async def read_whole_body(scope: Scope, receive: Receive, limit: int, timeout: float) -> bytes | ASGIApp | None:
    """The request body as the endpoint reads it: the answer when it is over ``limit`` (413) or
    not in within ``timeout`` (408); None when the client left before it was in."""
    headers = {"content-length": value} if (value := header(scope, b"content-length")) is not None else {}
    try:
        if scope.get(BODY_RECEIVED):  # all in already: no timer needed
            body = await read_body(headers, receive, limit)
        else:
            body = b""
            with anyio.move_on_after(timeout) as reading:
                body = await read_body(headers, receive, limit)
            if reading.cancelled_caught:
                return error_response(
                    408,
                    error_object(INVALID_REQUEST, f"request body not received within {timeout:g} s"),
                    headers={"connection": "close"},  # the rest of the body would be read as the next request
                )
    except ClientDisconnect:
        return None
    if body is None:
        return error_response(413, error_object(INVALID_REQUEST, f"request body over the {limit}-byte limit"))
    return body


def replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` that hands the inner app ``body`` first, then the client's own messages."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


class AcceptForwards:
    def __init__(self, app: ASGIApp, *, routing: OwnerRouting, body_timeout: float = BODY_TIMEOUT) -> None:
        self.app = app
        self.routing = routing
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        value = header(scope, owners.FORWARD_HEADER.encode()) if scope["type"] == "http" else None
        if value is None:
            await self.app(scope, receive, send)
            return
        try:
            forward, principal = self._verify(value, scope)
        except OwnerError as exc:
            log.warning("refused a forwarded request: %s", exc.message)
            if exc.kind == "busy":
                busy = GatewayUnavailableError(exc.message, retry_after=BUSY_RETRY_AFTER)
                await gateway_error_response(busy)(scope, receive, send)
                return
            await error_response(403, error_object(INVALID_REQUEST, exc.message))(scope, receive, send)
            return
        body = await read_whole_body(scope, receive, self.routing.max_body_bytes, self.body_timeout)
        if body is None:
            return  # the entry instance went away before the body was in
        if not isinstance(body, bytes):
            await body(scope, receive, send)
            return
        if not owners.body_matches(forward, body):
            log.warning("refused a forwarded request: its body is not the one signed")
            message = "the forwarded request failed verification (its body was altered)"
            await error_response(403, error_object(INVALID_REQUEST, message))(scope, receive, send)
            return
        # The owner acts on what the signature covers, and on nothing a hop could have added.
        carried = [(k, v) for k, v in scope["headers"] if k in KEPT_UNSIGNED]
        signed = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in forward.headers if k != owners.CLIENT_HEADER]
        scope["headers"] = carried + signed
        for name, value in forward.headers:
            if name == owners.CLIENT_HEADER:  # whom the entry instance counted it for
                scope[CLIENT_KEY] = value
        scope["gateway.forwarded"] = True
        scope["gateway.principal"] = principal
        await self.app(scope, replay(body, receive), send)

    def _verify(self, value: str, scope: Scope) -> tuple[Forward, str | None]:
        """The forward and its principal, from the headers alone; ``OwnerError`` when it fails."""
        meant_for = Owner.from_key(header(scope, owners.TARGET_HEADER.encode()) or "")
        raw = header(scope, owners.PRINCIPAL_HEADER.encode())
        principal = owners.decode_principal(raw) if raw is not None else None
        now = time.time()
        forward = owners.check_forward(
            value,
            self.routing.forward_keys(),
            now=now,
            method=scope["method"],
            path=target(scope),
            principal=principal,
            owner=meant_for,
            names=header(scope, owners.SIGNED_HEADER.encode()) or "",
            received=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
        )
        if not meant_for.same_address(self.routing.me):
            raise OwnerError("forged", "the forwarded request was meant for another instance")
        self.routing.seen.admit(forward, now)  # before the body: a replay costs no read
        return forward, principal
