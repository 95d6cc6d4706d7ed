"""Graceful drain: stop admitting, let in-flight requests finish, then cancel the rest.

``Drain.begin()`` (on SIGTERM or SIGINT) makes ``/readyz`` fail at once and new MCP
requests get 503 + ``Retry-After`` (-31004, "shutting down"). ``wait_idle(budget)`` waits
until the requests in flight have finished, at most ``budget`` seconds; ``cancel_rest()``
then ends the others: each gets a clear JSON-RPC error (as JSON, or as the last event of
its SSE stream) instead of a dropped connection. Only then does the server stop and the
lifespan stop the children in the spec's order.

The refusal is sent before the request is parsed, routed or given to a child: nothing of it
has run anywhere, so a proxy may send it to another replica as it is (the compose nginx and
the chart's ingress annotations do, with ``http_503 non_idempotent``). Every other 503 of an
MCP endpoint is such a refusal too (no child free, a queue or a store full); what ends a
request that a child already had is never a 503 (``CUT_BY_DRAIN``: HTTP 200 with the error,
like a child's own failure), so that no proxy runs it twice.

Two kinds of POST are let in while draining (``admitted_while_draining``), marked
``DRAINING``, because they may finish work the drain waits for:

- a legacy session's: it may carry its client's answers to questions of calls still in
  flight, or notifications (a cancel). The endpoint refuses it as below once it finds a
  request in it. Refusing every POST before its body was read left such a call waiting on an
  answer the client had sent, until the drain budget ended it;
- a modern ``tools/call``, ``prompts/get`` or ``resources/read`` (by its ``Mcp-Method``),
  which may be the MRTR retry of a call parked here, and a modern ``notifications/cancelled``,
  which may end one. The endpoint lets a request in only when its ``requestState`` names a call
  this gateway holds (``Suspensions.holds``); any other gets the refusal below, before it has
  run anywhere. A parked call counts as in flight for the drain (``DrainedQuota``): the drain
  waits for its retry (or its client's cancel, or its round timeout) within its budget. Before,
  the drain did not wait for it, and its retry, which another replica forwards to the owner,
  was refused here as "retry on another replica", where no replica holds the call;
- a modern ``tasks/get``, ``tasks/update`` or ``tasks/cancel``: let in when its ``taskId``
  names a task held here (``TaskStore.holds``). The drain waits for the gateway's running
  tasks, and for the outcome of one that ends meanwhile to be read (``gateway.relay.tasks``).

Such a POST for another replica's parked call or task is forwarded there by owner routing,
as at any time.

What the refusal says depends on where the request can go: a request without a session may
be sent anywhere, and is told so; a legacy session's request (``Mcp-Session-Id``) cannot,
since its session lives in this process and ends with it: it is told to start a new one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import anyio
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import GatewayUnavailableError
from gateway.http.inflight import Cancellable
from gateway.http.limits import PrincipalQuotas
from gateway.http.wire import gateway_error_response
from gateway.protocol import tasks
from gateway.protocol.correlation import CANCELLED
from gateway.protocol.headers import MCP_METHOD, MCP_SESSION_ID
from gateway.protocol.inputs import MRTR_METHODS

SESSION_HEADER: Final = MCP_SESSION_ID.encode("latin-1")
METHOD_HEADER: Final = MCP_METHOD.encode("latin-1")
MAY_FINISH_WORK: Final = frozenset(method.encode("latin-1") for method in (*MRTR_METHODS, CANCELLED, *tasks.METHODS))
"""The ``Mcp-Method`` of a modern POST let in while draining: a retry of a parked call, a
cancel of one, or ``tasks/*`` for a task held here."""

SHUTTING_DOWN = "the gateway is shutting down; retry on another replica or later"
"""The refusal of a request that belongs to no session: any replica may answer it."""
SESSION_ENDING = (
    "the gateway that holds this session is shutting down and the session ends with it; "
    "a retry cannot reach it: start a new session (initialize)"
)
"""The refusal of a legacy session's request: its session cannot move to another replica."""
CUT_BY_DRAIN = (
    "the gateway is shutting down and ended this request at its drain budget, before the "
    "server answered; the server was told to cancel it"
)
"""The error of a request that was running when the drain budget ran out (sent with HTTP 200:
it reached a child, so no proxy may retry it as a refusal)."""
DRAIN: Final = "gateway.drain"
"""Scope key of the ``Drain``, for the responses that end with it (``gateway.http.sse.Watch``)."""
DRAINING: Final = "gateway.draining"
"""Scope key, true on a POST let in while draining (``admitted_while_draining``): the endpoint
refuses what it finds to be new work in it."""


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0
        self.held = 0  # of them, parked calls and tasks (``hold``): no request in flight
        self.cancel = anyio.Event()  # set when the drain budget is spent
        self.ending = anyio.Event()  # set when the drain starts waiting: listen streams end gracefully
        # Responses to end when it is: their cancel scopes, or what tells an answer's machine
        # (gateway.protocol.answer: BUDGET_SPENT).
        self.scopes: set[Cancellable] = set()
        self._idle = anyio.Event()

    def begin(self) -> None:
        self.draining = True
        if self.in_flight == 0:
            self._idle.set()

    async def wait_idle(self, budget: float) -> bool:
        """True if every request finished within ``budget`` seconds. Listen streams never finish
        on their own, so they are told to end (with their graceful result) now."""
        self.ending.set()
        with anyio.move_on_after(budget):
            await self._idle.wait()
            return True
        return False

    def cancel_rest(self) -> None:
        self.cancel.set()
        self.ending.set()
        for scope in list(self.scopes):
            scope.cancel()

    def enter(self) -> None:
        self.in_flight += 1

    def hold(self) -> Callable[[], None]:
        """Count work that is no request in flight (a parked MRTR call, a task) until the
        function returned is called; a second call of it changes nothing."""
        self.enter()
        self.held += 1
        held = True

        def let_go() -> None:
            nonlocal held
            if held:
                held = False
                self.held -= 1
                self.leave()

        return let_go

    def leave(self) -> None:
        self.in_flight -= 1
        if self.draining and self.in_flight == 0:
            self._idle.set()


def draining_refusal(scope: Scope) -> Response:
    """The 503 (-31004, ``Retry-After``) for a new MCP request while draining; its message says
    whether a retry can succeed elsewhere (``SESSION_ENDING`` for a session's request)."""
    message = SESSION_ENDING if _in_session(scope) else SHUTTING_DOWN
    return gateway_error_response(GatewayUnavailableError(message, retry_after=5))


def admitted_while_draining(scope: Scope) -> bool:
    """A POST of a legacy session, or a modern POST that may finish work held here (a parked
    call's retry or cancel, ``tasks/*``: ``MAY_FINISH_WORK``): let in while draining (marked
    ``DRAINING``), since the drain may wait for that work; the endpoint refuses what it finds
    to be new work."""
    if scope["method"] != "POST" or not _may_finish_work(scope):
        return False
    scope[DRAINING] = True
    return True


def _in_session(scope: Scope) -> bool:
    """The request names a legacy session (``Mcp-Session-Id``)."""
    return any(name.lower() == SESSION_HEADER for name, _ in scope["headers"])


def _may_finish_work(scope: Scope) -> bool:
    """The request names a legacy session, or its ``Mcp-Method`` is one of ``MAY_FINISH_WORK``."""
    for name, value in scope["headers"]:
        name = name.lower()
        if name == SESSION_HEADER or (name == METHOD_HEADER and value in MAY_FINISH_WORK):
            return True
    return False


class DrainedQuota:
    """The principals' quota as parked MRTR calls use it (``gateway.relay.suspensions.ParkedQuota``),
    with each parked call also counted in flight for the drain: a drain waits for it as for a
    request, within its budget (module docstring)."""

    def __init__(self, quota: PrincipalQuotas, drain: Drain) -> None:
        self.quota = quota
        self.drain = drain

    def hold(self, principal: str) -> Callable[[], None]:
        release, let_go = self.quota.hold(principal), self.drain.hold()

        def both() -> None:  # each stops counting once
            release()
            let_go()

        return both

    def over_limit(self, principal: str) -> str | None:
        return self.quota.over_limit(principal)


class DrainGuard:
    """Around each MCP endpoint: refuse while draining, count what is in flight.
    (``gateway.http.edge`` does the same inline for the endpoints' paths.)"""

    def __init__(self, app: ASGIApp, *, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.drain.draining and not admitted_while_draining(scope):
            await draining_refusal(scope)(scope, receive, send)
            return
        scope[DRAIN] = self.drain
        self.drain.enter()
        try:
            await self.app(scope, receive, send)
        finally:
            self.drain.leave()
