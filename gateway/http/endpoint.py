"""The MCP endpoint: POST (both eras), GET and DELETE (legacy sessions only).

A POST goes: bounded body read → ingress ladder (pure) → by era:

- **modern** request → the relay's exchange, answered lazily as JSON or SSE; a client
  disconnect cancels it at the child, and so does a POSTed ``notifications/cancelled``
  naming exactly one request in flight of the same principal (``gateway.http.inflight``).
  Accepted notifications → 202.
- **legacy** ``initialize`` → answered by the gateway from the child's handshake, with a new
  ``Mcp-Session-Id``; other legacy requests run to their end even when the client hangs up
  (a disconnect is not a cancellation); ``notifications/cancelled`` cancels the named request of that session;
  ``ping`` is answered by the gateway, and so are ``resources/subscribe`` / ``unsubscribe``
  when a modern child serves the session (``gateway.relay.legacy``); a POSTed response
  answers the child's question it names (202). 2025-03-26 batches are answered with a JSON
  array. A request the client cancelled gets no answer (its stream ends; in a batch it is
  left out of the array).
  Each request in a 2025-03-26 batch counts against the principal's in-flight limit (429
  for the whole batch, before any runs).

What the children send unasked reaches the GET streams and listens through
``gateway.relay.unsolicited``.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from contextlib import aclosing
from dataclasses import replace
from typing import Any, Final, Literal, TypeAlias

import anyio
import orjson
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Message as AsgiMessage
from starlette.types import Receive, Scope, Send

from gateway.errors import CODE_CANCELLED, GatewayError
from gateway.http import session_requests, wire
from gateway.http.connection import BODY_RECEIVED
from gateway.http.drain import DRAINING, draining_refusal
from gateway.http.edge_settings import BODY_TIMEOUT, MAX_BODY_BYTES, MAX_STREAM_SECONDS, SSE_POLL_SECONDS
from gateway.http.inflight import InFlight
from gateway.http.limits import SLOTS, Slots, client_key
from gateway.http.listen import ListenStream
from gateway.http.observe import SPAN, note_answer, note_request
from gateway.http.resume import EventStream, LostStream, Resumable, ResumedStream
from gateway.http.stream import LazyStream, LegacyCall
from gateway.http.tasklisten import TaskListenStream
from gateway.http.wire import rejection_response
from gateway.protocol import eventlog, ingress, subscriptions
from gateway.protocol import tasks as task_rules
from gateway.protocol.headers import MCP_SESSION_ID
from gateway.protocol.jsonrpc import (
    METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY,
    JsonObject,
    Message,
    Notification,
    Request,
    error_object,
)
from gateway.protocol.outcome import Accepted, Rejection
from gateway.protocol.versions import MODERN
from gateway.relay import events
from gateway.relay.client import ClientContext
from gateway.relay.exchange import response
from gateway.relay.legacy import local_answer, open_session
from gateway.relay.listens import open_listen
from gateway.relay.service import Served
from gateway.relay.sessions import CancelHandle, LegacySession
from gateway.relay.spans import RequestSpan

log = logging.getLogger("gateway.http")

EndpointResponse: TypeAlias = (
    Response | LazyStream | ListenStream | TaskListenStream | EventStream | ResumedStream | LostStream
)
"""What the endpoint answers with: an ASGI response of one of these kinds."""

MODERN_ERROR_STATUSES: Final = {METHOD_NOT_FOUND: 404, MISSING_CLIENT_CAPABILITY: 400}
"""HTTP statuses of a modern final error sent as JSON: the spec maps these two (digest §0.2)."""
CANCELLED: Final = "notifications/cancelled"


def whole_body(message: AsgiMessage, limit: int) -> bytes | Literal[False] | None:
    """The body of a message that holds a request's whole body (its only ``http.request``), or
    None when it exceeds ``limit``; False when it is not such a message (more follows, or the
    client left)."""
    if message["type"] != "http.request" or message.get("more_body", False):
        return False
    body: bytes = message.get("body", b"")
    return body if len(body) <= limit else None


async def read_body(
    headers: dict[str, str], receive: Receive, limit: int, first: AsgiMessage | None = None
) -> bytes | None:
    """The body, or None when it exceeds ``limit`` (never buffered past the limit). A client
    that leaves before the whole body is in raises ``ClientDisconnect``. ``first``: the first
    message, when the caller has received it already (the whole body was in, so its length,
    not Content-Length, is weighed)."""
    if first is None:
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return None
        message = await receive()
    else:
        message = first
    whole = whole_body(message, limit)  # the usual case: the whole body in one message
    if whole is not False:
        return whole
    buffer = bytearray()
    while True:
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        buffer += message.get("body", b"")
        if len(buffer) > limit:
            return None
        if not message.get("more_body", False):
            return bytes(buffer)
        message = await receive()


class McpEndpoint:
    def __init__(
        self,
        served: Served,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_stream_seconds: float = MAX_STREAM_SECONDS,
        body_timeout: float = BODY_TIMEOUT,
        max_batch_size: int = ingress.MAX_BATCH_MESSAGES,
        sse_poll_seconds: float = SSE_POLL_SECONDS,
    ) -> None:
        """``served``: the server's relay and sessions, finished (``gateway.relay.service``)."""
        self.relay = served.relay
        self.sse_poll_seconds = sse_poll_seconds
        self.sessions = served.sessions
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self.max_batch_size = max_batch_size
        self.max_stream_seconds = max_stream_seconds
        self.listens = served.listens  # emulated subscriptions/listen streams (legacy children)
        self.in_flight = InFlight()  # modern requests being answered: a POSTed cancelled names one
        self.session_listens = served.session_listens  # legacy sessions' resource subscriptions on modern children

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The endpoint as a pure ASGI app (no ``Request`` object, no exception wrapper: it
        answers every refusal itself, and what it raises reaches the edge's 500; a client that
        leaves before its whole body is in gets nothing, which the edge logs as 499). One coroutine
        frame for a modern call: its answer is found by plain calls (``_post``); only reading a
        body that is not in yet, and a legacy or listen request, await more."""
        headers = wire.header_map(scope)
        # Who is asking, as the edge's authentication (``gateway.http.auth``) established it.
        principal = scope.get("gateway.principal")
        if not isinstance(principal, str):
            principal = None
        method = scope["method"]
        owner = client_key(scope)  # whose limits, crash strikes and cancels (the principal, or the peer)
        response: EndpointResponse
        if method != "POST":
            response = self._not_post(scope, method, headers, principal, owner)
        else:
            body: bytes | Response | None
            try:
                if scope.get(BODY_RECEIVED):  # all in already (the usual case): no timer, one message
                    message = await receive()  # read here: ``read_body``'s coroutine costs ~3k instructions
                    whole = whole_body(message, self.max_body_bytes)
                    body = (
                        whole if whole is not False else await read_body(headers, receive, self.max_body_bytes, message)
                    )
                else:
                    body = await self._read_in_time(headers, receive)
            except ClientDisconnect:  # the client left before its whole body was in: nobody to answer
                return  # nothing sent: the edge's access line and metrics say 499 (client closed)
            if isinstance(body, Response):
                response = body
            else:
                posted = self._post(scope, headers, principal, owner, body)
                response = posted if isinstance(posted, (Response, LazyStream)) else await posted
        await response(scope, receive, send)

    def _not_post(
        self, scope: Scope, method: str, headers: dict[str, str], principal: str | None, owner: str
    ) -> Response | EventStream | ResumedStream | LostStream:
        """A legacy session's GET stream or DELETE; 405 for any other method."""
        if method == "GET":
            fields = scope.setdefault("gateway.log", {})
            fields.update(method="GET stream", era="legacy")
            if session_id := headers.get(MCP_SESSION_ID):  # whose GETs: a reconnect loop shows in the log
                fields["session"] = session_id[:8]
            return session_requests.stream(
                headers,
                principal,
                owner,
                self.sessions,
                max_stream_seconds=self.max_stream_seconds,
                sse_poll_seconds=self.sse_poll_seconds,
            )
        if method == "DELETE":
            scope.setdefault("gateway.log", {}).update(method="DELETE session", era="legacy")
            return session_requests.end(headers, principal, owner, self.sessions)
        return wire.error_response(
            405,
            error_object(-32600, f"{method} is not used by MCP here; POST a JSON-RPC message"),
            headers={"allow": "POST, GET, DELETE"},
        )

    async def _read_in_time(self, headers: dict[str, str], receive: Receive) -> bytes | Response | None:
        """A body not all in yet: read within the body timeout (else the 408 to answer)."""
        body: bytes | None = b""
        with anyio.move_on_after(self.body_timeout) as reading:
            body = await read_body(headers, receive, self.max_body_bytes)
        if reading.cancelled_caught:
            return wire.error_response(
                408,
                error_object(-32600, f"request body not received within {self.body_timeout:g} s"),
                headers={"connection": "close"},  # the rest of the body would be read as the next request
            )
        return body

    def _post(
        self, scope: Scope, headers: dict[str, str], principal: str | None, owner: str, body: bytes | None
    ) -> Response | LazyStream | Coroutine[Any, Any, Response | LazyStream | ListenStream | TaskListenStream]:
        """A POST's answer once its body is read (None: over the limit): a modern request's at
        once; a listen's or a legacy request's is a coroutine to await."""
        if body is None:
            return wire.error_response(
                413, error_object(-32600, f"request body over the {self.max_body_bytes}-byte limit")
            )
        slots = scope.get(SLOTS)  # absent for a forward from another instance
        refusal = slots.admit() if isinstance(slots, Slots) else None
        if refusal is not None:
            return refusal
        outcome = ingress.check_post(
            headers,
            body,
            max_body_bytes=self.max_body_bytes,
            session_version=self.sessions.version_of,
            max_batch=self.max_batch_size,
        )
        if isinstance(outcome, Rejection):
            return rejection_response(outcome)
        if DRAINING in scope and self._new_work(outcome):
            return draining_refusal(scope)  # let in to finish work the drain waits for only
        log = scope.setdefault("gateway.log", {})
        first = outcome.messages[0] if outcome.messages else None
        log["era"] = str(outcome.era)  # not .value: a property
        log["method"] = getattr(first, "method", None) or "response"
        if isinstance(first, Request):
            note_request(log, first.id, first.params)
        if outcome.era is MODERN:
            if isinstance(first, Request) and first.method == subscriptions.LISTEN:
                # A listen is a stream: it counts as one, not as a request in flight.
                refusal = slots.as_stream() if isinstance(slots, Slots) else None
                if refusal is not None:
                    return refusal
                return self._listen(outcome, first, headers, principal, owner, log, scope.get(SPAN))
            return self._modern(outcome, headers, principal, owner, log, span=scope.get(SPAN))
        if outcome.session_id:
            log["session"] = outcome.session_id[:8]
        return self._legacy(outcome, headers, principal, owner, scope)

    def _new_work(self, outcome: Accepted) -> bool:
        """While draining: whether a POST let in (``gateway.http.drain``) holds a request that
        would start work here. A modern request is let through only as the retry of a call
        parked here (its ``requestState`` held: ``Suspensions.holds``) or as ``tasks/*`` for a
        task held here (``TaskStore.holds``); a legacy session's POST only with answers and
        notifications."""
        if outcome.era is not MODERN:
            return any(isinstance(m, Request) for m in outcome.messages)
        [message] = outcome.messages
        if not isinstance(message, Request):
            return False  # a cancel: it may end a parked call
        if message.method in task_rules.METHODS:
            task_id = task_rules.task_id_of(message.params)
            return not (task_id is not None and self.relay.tasks.holds(task_id))
        token = (message.params or {}).get("requestState")
        return not (isinstance(token, str) and self.relay.suspensions.holds(token))

    # -- modern -------------------------------------------------------------------------

    def _modern(
        self,
        accepted: Accepted,
        headers: dict[str, str],
        principal: str | None,
        owner: str,
        log: dict[str, Any],
        *,
        graceful_end: JsonObject | None = None,
        max_seconds: float | None = None,
        span: RequestSpan | None = None,
    ) -> Response | LazyStream:
        message = accepted.messages[0]
        if not isinstance(message, Request):
            # Only notifications get here (the ladder refuses modern responses). Modern
            # cancellation is a disconnect, but a POSTed cancelled is taken leniently: it
            # cancels the one request of this client it names (``gateway.http.inflight``): of
            # its principal, or for an anonymous client of its peer address; or, when none is
            # in flight, the call parked for that request's round (``Suspensions.cancel``).
            if isinstance(message, Notification) and message.method == CANCELLED and message.params:
                named = message.params.get("requestId")
                if not self.in_flight.cancel(owner, named):
                    self.relay.suspensions.cancel(owner, named)  # a round it abandoned (issue #36)
            return wire.accepted()
        client = ClientContext.of_request(message, accepted.version, principal, headers, log, owner=owner, span=span)
        return LazyStream(
            self.relay.begin(message, client, headers),
            request_id=message.id,
            error_statuses=MODERN_ERROR_STATUSES,
            graceful_end=graceful_end,
            in_flight=self.in_flight,
            principal=owner,
            max_seconds=max_seconds,
        )

    async def _listen(
        self,
        accepted: Accepted,
        message: Request,
        headers: dict[str, str],
        principal: str | None,
        owner: str,
        log: dict[str, Any],
        span: RequestSpan | None,
    ) -> Response | LazyStream | ListenStream | TaskListenStream:
        """``subscriptions/listen``: emulated for a legacy child (``gateway.relay.listens``);
        a modern child's own listen is forwarded like any request. Either ends after
        ``max_stream_seconds`` with its graceful result (the client listens again). One for
        task status only is the gateway's own (``gateway.http.tasklisten``); elsewhere
        ``taskIds`` is left out."""
        task_ids = task_rules.listen_task_ids(message.params)
        if task_ids is not None:
            client = ClientContext.of_request(message, accepted.version, principal, headers, log, owner=owner)
            if not task_rules.opted_in(client.capabilities):
                return wire.error_response(400, task_rules.missing_extension_error(message.method), message.id)
            if task_rules.listens_only_for_tasks(message.params):
                store = self.relay.tasks
                return TaskListenStream(store, message.id, task_ids, client, max_seconds=self.max_stream_seconds)
            message = Request(message.id, message.method, task_rules.without_task_ids(message.params or {}))
            accepted = replace(accepted, messages=(message,))
        try:
            listen = await open_listen(self.relay.router, message, principal, headers, owner)
        except GatewayError as exc:
            return wire.gateway_error_response(exc, message.id)
        if listen is None:  # a modern child: forwarded; the relay rewrites subscriptionId both ways
            end, lifetime = subscriptions.graceful_end(message.id), self.max_stream_seconds
            return self._modern(
                accepted, headers, principal, owner, log, graceful_end=end, max_seconds=lifetime, span=span
            )
        if isinstance(listen, Rejection):
            return rejection_response(listen)
        return ListenStream(listen, self.listens, max_seconds=self.max_stream_seconds)

    # -- legacy -------------------------------------------------------------------------

    async def _legacy(
        self, accepted: Accepted, headers: dict[str, str], principal: str | None, owner: str, scope: Scope
    ) -> Response | LazyStream:
        if accepted.session_id is None:
            message = accepted.messages[0]
            assert isinstance(message, Request)  # the ladder only lets initialize in without a session
            return await self._initialize(message, headers, principal, owner, scope.setdefault("gateway.log", {}))
        session = self.sessions.get(accepted.session_id)
        # A session belongs to whoever opened it: another principal's (or, for an anonymous
        # client, another address's) id is unknown to this one.
        if session is None or not session.belongs_to(principal, owner):
            return rejection_response(ingress.unknown_session())
        if accepted.is_batch:
            refusal = session_requests.batch_slots(accepted.messages, scope.get(SLOTS))
            if refusal is not None:
                return refusal
            return await self._batch(session, accepted.messages, headers, scope.get(SPAN))
        message = accepted.messages[0]
        if isinstance(message, Request):
            local = await local_answer(session, message, self.session_listens)
            if local is not None:
                note_answer(scope, local)
                return wire.json_response(local)
            return self._legacy_stream(session, message, headers, scope.setdefault("gateway.log", {}), scope.get(SPAN))
        session.take(message)
        return wire.accepted()

    async def _initialize(
        self, message: Request, headers: dict[str, str], principal: str | None, owner: str, log_fields: dict[str, Any]
    ) -> Response:
        """Open a legacy session, answered from the handshake of the child that will serve it."""
        try:
            session, result = await open_session(self.sessions, self.relay.router, message, principal, headers, owner)
        except GatewayError as exc:
            return wire.gateway_error_response(exc, message.id)
        if session.child is not None:
            log_fields.update(child_pid=session.child.pid, session=session.id[:8])
        log.info("legacy session %s… opened (protocol %s)", session.id[:8], session.version)
        return wire.json_response(response(message.id, result=result), headers={MCP_SESSION_ID: session.id})

    def _legacy_stream(
        self,
        session: LegacySession,
        message: Request,
        headers: dict[str, str],
        log: dict[str, Any],
        span: RequestSpan | None,
    ) -> LazyStream:
        """The exchange runs in the response's task; a client that hangs up does not end it
        (a client that stops reading is cut off after the write timeout, and that does), nor
        does it free the request's slot before the work ends. The session's ``CancelHandle``
        ends it (``notifications/cancelled``, ``DELETE``, expiry)."""
        handle = CancelHandle()
        session.in_flight[message.id] = handle

        def cancelled() -> JsonObject:
            return response(message.id, error=error_object(CODE_CANCELLED, "the request was cancelled"))

        def forget() -> None:
            if session.in_flight.get(message.id) is handle:
                del session.in_flight[message.id]

        exchange = self.relay.begin(message, ClientContext.of_session(session, headers, log=log, span=span), headers)
        # Its SSE answer carries event ids and is kept for a resume (gateway.http.resume).
        resumable = Resumable(
            session.streams, message.id, eventlog.primes(session.version), poll_seconds=self.sse_poll_seconds
        )
        return LazyStream(
            exchange, request_id=message.id, legacy=LegacyCall(handle, cancelled, forget), resumable=resumable
        )

    async def _batch(
        self, session: LegacySession, messages: tuple[Message, ...], headers: dict[str, str], span: RequestSpan | None
    ) -> Response:
        """2025-03-26 batches: notifications and responses are taken, requests answered in one array."""
        answers: list[JsonObject] = []

        async def answer(message: Request) -> None:
            local = await local_answer(session, message, self.session_listens)
            if local is not None:
                answers.append(local)
                return
            # A JSON array cannot carry requests; each request's spans are children of the batch's.
            client = ClientContext.of_session(session, headers, streamed=False, span=span)
            handle = CancelHandle()  # a later notifications/cancelled may name it, as for single requests
            session.in_flight.setdefault(message.id, handle)
            answered = False
            try:
                with handle.scope:
                    exchange = self.relay.exchange(message, client, headers)
                    async with aclosing(exchange):
                        async for event in exchange:
                            if type(event) is events.Final:
                                answers.append(event.message)
                                answered = True
            except GatewayError as exc:  # saturated: this request's answer says so; the others go on
                answers.append(response(message.id, error=exc.error_object()))
                answered = True
            finally:
                if session.in_flight.get(message.id) is handle:
                    del session.in_flight[message.id]
            if not answered and handle.reply:  # ended by the gateway (DELETE), not by the client
                answers.append(response(message.id, error=error_object(CODE_CANCELLED, "the request was cancelled")))

        async with anyio.create_task_group() as tg:
            for message in messages:
                if isinstance(message, Request):
                    tg.start_soon(answer, message)
                else:
                    session.take(message)
        if not answers:
            return wire.accepted()
        return Response(orjson.dumps(answers), media_type="application/json")
