"""One exchange between an HTTP request and a child.

``Relay.exchange(request, client)`` is an async iterator of JSON-RPC messages for the
client, in the client's era: request-scoped notifications (progress) as the child sends
them, then exactly one final response carrying the client's id with its exact JSON type.
Closing the iterator early (the HTTP client went away) leaves the child exchange, which
sends ``notifications/cancelled`` with the child-side id.

Failures of the child (``ChildError``) become the final response as JSON-RPC errors.
Two outcomes are raised before anything is yielded, so the HTTP edge can still answer
with their status: ``GatewayUnavailableError`` (503) and ``Rejected`` (a 400 from the
``Mcp-Param-*`` check, which needs the child's tool schemas and so cannot run in the pure
ingress ladder).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import ChildError
from gateway.protocol import bridge, xmcpheader
from gateway.protocol.handshake import ChildInfo
from gateway.protocol.jsonrpc import ErrorReply, JsonObject, Request, Result
from gateway.protocol.outcome import Rejection
from gateway.protocol.versions import Era
from gateway.router import Router
from gateway.stdio.catalog import ToolCatalog
from gateway.stdio.child import StdioChild


class Rejected(Exception):
    """The request is refused after all (raised before the exchange yields anything)."""

    def __init__(self, rejection: Rejection) -> None:
        super().__init__(rejection.error)
        self.rejection = rejection


@dataclass
class ClientContext:
    """Who is asking, in which era; for legacy clients, what their session negotiated.

    ``session`` (legacy only) pins the session to the child that served it first, so state
    the session set up there (``resources/subscribe``, ``logging/setLevel``) stays put.
    """

    era: Era
    version: str
    capabilities: JsonObject = field(default_factory=dict)
    client_info: JsonObject | None = None
    log_level: str | None = None
    session: Any = None  # a gateway.sessions.LegacySession; typed loosely to keep imports inward
    principal: str | None = None
    log: dict[str, Any] = field(default_factory=dict)  # what the access log should say
    trace: JsonObject = field(default_factory=dict)  # W3C traceparent/tracestate from the HTTP request

    @property
    def session_id(self) -> str | None:
        return getattr(self.session, "id", None)

    def affinity(self) -> StdioChild | None:
        child = getattr(self.session, "child", None)
        return child if isinstance(child, StdioChild) and child.is_alive() else None

    def bind(self, child: StdioChild) -> None:
        self.log["child_pid"] = child.pid
        if self.session is not None:
            self.session.child = child


def response(client_id: Any, *, result: JsonObject | None = None, error: JsonObject | None = None) -> JsonObject:
    if error is not None:
        return {"jsonrpc": "2.0", "id": client_id, "error": error}
    return {"jsonrpc": "2.0", "id": client_id, "result": result}


class Relay:
    def __init__(self, router: Router, *, gateway_version: str = "0") -> None:
        self.router = router
        self.catalog = ToolCatalog(gateway_version)

    async def exchange(
        self, request: Request, client: ClientContext, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[JsonObject]:
        """Run ``request`` on a child of the pool the router picks; for modern clients the
        ``Mcp-Param-*`` headers are checked against the tool's schema first."""
        try:
            pool = await self.router.pool_for(client.principal, client.session_id, headers or {})
            async with pool.lease(client.affinity()) as child:  # 503 and 400 propagate before any yield
                client.bind(child)
                async for message in self._exchange_on(child, request, client, headers):
                    yield message
        except ChildError as exc:  # the command cannot start or keeps dying: fail at once, with the reason
            yield response(request.id, error=exc.error_object())

    async def _exchange_on(
        self, child: StdioChild, request: Request, client: ClientContext, headers: Mapping[str, str] | None
    ) -> AsyncIterator[JsonObject]:
        info = child.info
        assert info is not None
        if client.era is Era.MODERN and info.era is Era.LEGACY and request.method == "server/discover":
            yield response(request.id, result=bridge.discover_result(info))
            return
        if headers is not None and client.era is Era.MODERN and request.method == "tools/call":
            await self._check_param_headers(child, request, headers)
        params = self._params_for_child(request.params, client, info)
        try:
            async with child.exchange(request.method, params) as ex:  # the server's request timeout applies
                async for note in ex:
                    yield note.to_dict()
                reply = ex.reply()
        except ChildError as exc:
            yield response(request.id, error=exc.error_object())
            return
        if request.method == "tools/list" and isinstance(reply, Result):
            reply = Result(reply.id, self.catalog.visible_tools(child, reply.result))
        yield self._reply_for_client(request, reply, client, info)

    async def _check_param_headers(self, child: StdioChild, request: Request, headers: Mapping[str, str]) -> None:
        params = request.params or {}
        name = params.get("name")
        if not isinstance(name, str):
            return  # the child answers a call without a tool name
        header_params = await self.catalog.header_params(child, name)
        arguments = params.get("arguments")
        rejection = xmcpheader.check_param_headers(
            header_params, arguments if isinstance(arguments, dict) else None, headers, request_id=request.id
        )
        if rejection is not None:
            raise Rejected(rejection)

    @staticmethod
    def _params_for_child(params: JsonObject | None, client: ClientContext, child: ChildInfo) -> JsonObject | None:
        params = bridge.with_trace(params, client.trace)
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
