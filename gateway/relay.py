"""One exchange between an HTTP request and a child.

``Relay.exchange(request, client)`` is an async iterator of JSON-RPC messages for the
client, in the client's era: request-scoped notifications (progress) as the child sends
them, then exactly one final response carrying the client's id with its exact JSON type.
Closing the iterator early (the HTTP client went away) leaves the child exchange, which
sends ``notifications/cancelled`` with the child-side id.

Failures of the child (``ChildError``) become the final response as JSON-RPC errors;
``GatewayUnavailableError`` is raised before anything is yielded, so the HTTP edge can
still answer 503.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import ChildError
from gateway.protocol import bridge
from gateway.protocol.handshake import ChildInfo
from gateway.protocol.jsonrpc import ErrorReply, JsonObject, Request, Result
from gateway.protocol.versions import Era
from gateway.stdio.pool import Pool


@dataclass(frozen=True)
class ClientContext:
    """Who is asking, in which era; for legacy clients, what their session negotiated."""

    era: Era
    version: str
    capabilities: JsonObject = field(default_factory=dict)
    client_info: JsonObject | None = None
    log_level: str | None = None


def response(client_id: Any, *, result: JsonObject | None = None, error: JsonObject | None = None) -> JsonObject:
    if error is not None:
        return {"jsonrpc": "2.0", "id": client_id, "error": error}
    return {"jsonrpc": "2.0", "id": client_id, "result": result}


class Relay:
    def __init__(self, pool: Pool, *, request_timeout: float | None = None) -> None:
        self.pool = pool
        self.request_timeout = request_timeout

    async def exchange(self, request: Request, client: ClientContext) -> AsyncIterator[JsonObject]:
        try:
            child = await self.pool.wait_ready()  # GatewayUnavailableError propagates: the edge answers 503
        except ChildError as exc:  # the command cannot start: fail at once, with the reason
            yield response(request.id, error=exc.error_object())
            return
        info = child.info
        assert info is not None
        if client.era is Era.MODERN and info.era is Era.LEGACY and request.method == "server/discover":
            yield response(request.id, result=bridge.discover_result(info))
            return
        params = self._params_for_child(request.params, client, info)
        try:
            async with child.exchange(request.method, params, timeout=self.request_timeout) as ex:
                async for note in ex:
                    yield note.to_dict()
                reply = ex.reply()
        except ChildError as exc:
            yield response(request.id, error=exc.error_object())
            return
        yield self._reply_for_client(request, reply, client, info)

    @staticmethod
    def _params_for_child(params: JsonObject | None, client: ClientContext, child: ChildInfo) -> JsonObject | None:
        if child.era is Era.LEGACY:
            return bridge.strip_modern_meta(params) if client.era is Era.MODERN else params
        if client.era is Era.LEGACY:
            return bridge.add_modern_meta(
                params,
                version=child.version,
                capabilities=client.capabilities,
                client_info=client.client_info,
                log_level=client.log_level,
            )
        return params

    @staticmethod
    def _reply_for_client(
        request: Request, reply: Result | ErrorReply, client: ClientContext, child: ChildInfo
    ) -> JsonObject:
        if isinstance(reply, ErrorReply):
            error = bridge.modernize_error(reply.error) if client.era is Era.MODERN else reply.error
            return response(request.id, error=error)
        result = reply.result
        if client.era is Era.MODERN and child.era is Era.LEGACY:
            result = bridge.modernize_result(request.method, result, child)
        elif client.era is Era.LEGACY and child.era is Era.MODERN:
            result = bridge.legacy_result(result)
        return response(request.id, result=result)
