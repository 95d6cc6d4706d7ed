"""The HTTP edge: every check a request meets before its route, in one pure-ASGI layer.

``Edge`` is the app's outermost layer (``create_app`` puts it around Starlette's own stack)
and, for every HTTP request, in this order:

1. **observes** it: the access line and the request metrics when the answer ends
   (``gateway.http.observe``; every request, so refusals below are logged and counted too),
   and with tracing on an MCP request's span (``gateway.ops.tracing``, ended with the answer);
2. bounds its **headers** → 431 (``gateway.http.limits.header_problem``);
3. lets a signed **forward** from another instance in (``gateway.http.forward.AcceptForwards``,
   only with owner routing), which then skips 4–7: the entry instance applied them;
4. **CORS** (``gateway.http.cors``, when ``--cors-origin`` is given): a preflight is answered
   here; an allowed origin's answer gets the CORS headers;
5. **Origin / Host** → 400 / 403 (``gateway.http.origin``; on ``/status``, ``/ui`` and
   ``/ui/login`` an ``Origin`` naming this very host is allowed too: the login form);
6. **authentication** → 401 / 403 / 503, and the principal (``gateway.http.auth``, when
   tokens, OAuth, a principal header or client certificates are configured); on
   ``/status`` and ``/ui`` the operator's credential instead (``gateway.http.operator``);
7. the principal's **slots** on MCP paths → 429 (``gateway.http.limits.PrincipalQuotas``);
8. the **route**: an MCP endpoint's path goes straight to its endpoint app, after the drain
   check (``gateway.http.drain``: 503 while draining, else counted in flight); any other
   path goes to Starlette's own stack.

An exception nothing answered is answered 500 ``Internal Server Error`` here when no
response had started (what Starlette's ``ServerErrorMiddleware`` did as the outermost layer;
it still does for the other paths, inside this one), and logged as a 500.

One frame, one ``send`` wrapper and one look at the headers (``dict(headers)``: the last of a
repeated header wins, as everywhere at the edge) instead of a layer each: the MCP hot path
is the same checks with the same answers, without eight coroutine frames, five ``send``
wrappers and Starlette's route matching on every call.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Mapping
from typing import Any

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.http.auth import OPERATOR_PATHS, Authentication
from gateway.http.cors import CorsPolicy, add_cors_headers
from gateway.http.drain import Drain, admitted_while_draining, draining_refusal
from gateway.http.edge_settings import BODY_TIMEOUT
from gateway.http.forward_accept import AcceptForwards
from gateway.http.lanes import Lane
from gateway.http.limits import HEAD_BYTES, PrincipalQuotas, Slots, header_problem, header_refusal
from gateway.http.observe import MAX_PARSED_ERROR_BYTES, PROBE_PATHS, SPAN, ProbeAnswers, error_code_of, observe
from gateway.http.operator import OperatorAccess
from gateway.http.origin import OriginPolicy
from gateway.ops.metrics import GatewayMetrics
from gateway.ops.tracing import RequestTrace, Tracer
from gateway.protocol.owner import FORWARD_HEADER
from gateway.relay.owner import OwnerRouting

_FORWARD_HEADER = FORWARD_HEADER.encode("latin-1")


class Edge:
    def __init__(
        self,
        app: ASGIApp,
        *,
        lanes: Mapping[str, Lane],
        origins: OriginPolicy,
        quotas: PrincipalQuotas,
        drain: Drain,
        metrics: GatewayMetrics | None = None,
        cors: CorsPolicy | None = None,
        auth: Authentication | None = None,
        routing: OwnerRouting | None = None,
        body_timeout: float = BODY_TIMEOUT,
        operator: OperatorAccess | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        """``app``: Starlette's own stack (its error and exception middleware, its router).
        ``lanes``: MCP endpoint path → its server's lane (``gateway.http.lanes``: the server's
        name, and its endpoint's app, which the drain check here guards). ``tracer``: a span
        per MCP request, when tracing is on (``gateway.ops.tracing``)."""
        self.app = app
        self.lanes = dict(lanes)
        self.origins = origins
        self.quotas = quotas
        self.drain = drain
        self.metrics = metrics
        self.cors = cors
        self.auth = auth
        self.operator = operator
        self.tracer = tracer
        self.forwards = (
            AcceptForwards(self.route, routing=routing, body_timeout=body_timeout) if routing is not None else None
        )
        self.probes = ProbeAnswers()

    async def route(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An MCP endpoint's app for its path (after the drain check), else Starlette's stack."""
        lane = self.lanes.get(scope["path"])
        if lane is None:
            await self.app(scope, receive, send)
            return
        if self.drain.draining and not admitted_while_draining(scope):
            await draining_refusal(scope)(scope, receive, send)
            return
        scope["gateway.drain"] = self.drain
        self.drain.enter()
        try:
            await lane.app(scope, receive, send)
        finally:
            self.drain.leave()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()  # the event loop's clock (anyio.current_time), read directly
        lane = self.lanes.get(scope["path"])
        server = lane.server if lane is not None else None
        fields: dict[str, Any] = scope.setdefault("gateway.log", {})
        status = 0
        error_code: int | None = None
        cors_origin: str | None = None  # set once CORS applies: the answer gets its headers

        def send_edge(message: Message) -> Awaitable[None]:
            # Not a coroutine of its own (one more frame on every send of every answer): what
            # it notes is noted before ``send``'s own coroutine is handed back to be awaited.
            nonlocal status, error_code
            if message["type"] == "http.response.start":
                status = message["status"]
                if cors_origin is not None:
                    add_cors_headers(message, cors_origin)
            elif status >= 400 and error_code is None and "outcome" not in fields:
                # Refusals are written by wire.py as small JSON-RPC errors: read their code.
                body = message.get("body", b"")
                if 0 < len(body) <= MAX_PARSED_ERROR_BYTES:
                    error_code = error_code_of(body)
            return send(message)

        metrics = self.metrics
        if metrics is not None and server is not None:  # in flight: MCP endpoints only
            metrics.enter(server)
        slots: Slots | None = None
        raised = False
        traced: RequestTrace | None = None  # the request's trace, when tracing is on (MCP endpoints only)
        if self.tracer is not None and server is not None:
            traced = scope[SPAN] = self.tracer.request(scope)
        headers = scope["headers"]
        named: dict[bytes, bytes] | None = None  # dict(headers), once they are bounded
        try:
            # Bound the headers before anything reads them all.
            problem = header_problem(headers, scope.get(HEAD_BYTES))
            if problem is not None:
                await header_refusal(problem)(scope, receive, send_edge)
                return
            named = dict(headers)
            if self.forwards is not None and _FORWARD_HEADER in named:
                await self.forwards(scope, receive, send_edge)
                return
            if self.cors is not None:
                origin = self.cors.allowed_origin(named)
                if origin is not None:
                    preflight = self.cors.preflight(scope, origin)
                    if preflight is not None:
                        await preflight(scope, receive, send_edge)
                        return
                    cors_origin = origin
            operator = self.operator if scope["path"] in OPERATOR_PATHS else None
            refusal = self.origins.refusal(named, headers, own_origin=operator is not None)
            if refusal is not None:
                await refusal(scope, receive, send_edge)
                return
            if operator is not None:
                answer = await operator.refusal(scope, named)
                if answer is not None:
                    await answer(scope, receive, send_edge)
                    return
            auth = self.auth
            if auth is not None and auth.guards(scope) and not await auth.admit(scope, receive, send_edge, named):
                return
            if self.quotas.applies(scope):
                slots = self.quotas.open(scope)
                if scope["method"] != "POST":  # a POST counts once its body is in (``McpEndpoint``)
                    refusal = slots.admit()
                    if refusal is not None:
                        await refusal(scope, receive, send_edge)
                        return
            if lane is None:
                await self.app(scope, receive, send_edge)
            elif self.drain.draining and not admitted_while_draining(scope):
                await draining_refusal(scope)(scope, receive, send_edge)
            else:  # ``route``, inline: one coroutine frame less on every resumption of the call
                drain = scope["gateway.drain"] = self.drain
                drain.enter()
                try:
                    await lane.app(scope, receive, send_edge)
                finally:
                    drain.leave()
        except Exception:  # a bug
            raised = True
            if status == 0:  # nothing sent yet: answer as Starlette's ServerErrorMiddleware did
                await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, send)
            raise
        finally:
            if slots is not None:
                slots.close()
            if metrics is not None and server is not None:
                metrics.leave(server)
            if server is not None or status >= 400 or (raised and status == 0) or scope["path"] in PROBE_PATHS:
                seconds = time.monotonic() - started  # traced: only for a server, so always observed
                if named is not None and scope["headers"] is not headers:
                    named = None  # replaced on the way (an owner's forwarded request): the line reads them anew
                observe(metrics, scope, fields, server, status, error_code, raised, seconds, self.probes, traced, named)
