"""The MCP endpoint: POST (both eras), GET and DELETE (legacy sessions only).

A POST goes: bounded body read → ingress ladder (pure) → by era:

- **modern** request → the relay's exchange, answered lazily as JSON or SSE; a client
  disconnect cancels it at the child, and so does a POSTed ``notifications/cancelled``
  naming exactly one request in flight of the same principal (``gateway.http.inflight``).
  Accepted notifications → 202.
- **legacy** ``initialize`` → answered by the gateway from the child's handshake, with a new
  ``Mcp-Session-Id``; other legacy requests run to their end even when the client hangs up
  (a disconnect is not a cancellation); ``notifications/cancelled`` cancels the named request of that session;
  ``ping`` is answered here, and so are ``resources/subscribe`` / ``unsubscribe`` when a
  modern child serves the session (``gateway.http.session_listen``: one child listen per
  session); a POSTed response answers the child's question it names
  (202). 2025-03-26 batches are answered with a JSON array. A request the client
  cancelled gets no answer (its stream ends; in a batch it is left out of the array).
  Each request in a 2025-03-26 batch counts against the principal's in-flight limit (429
  for the whole batch, before any runs).

A child's unattributable question reaches a legacy session's GET stream only when that
session is the only one its pool serves (``on_child_request``).
"""

from __future__ import annotations

import logging
from contextlib import aclosing
from typing import Any, Final

import anyio
import orjson
from anyio.abc import TaskGroup
from starlette.requests import Request as HttpRequest
from starlette.responses import Response
from starlette.types import Scope

from gateway.errors import CODE_CANCELLED, CODE_INPUT_TIMEOUT, GatewayError
from gateway.http import wire
from gateway.http.connection import BODY_RECEIVED
from gateway.http.inflight import InFlight
from gateway.http.limits import SLOTS, Slots
from gateway.http.listen import Listen, Listens, ListenStream
from gateway.http.observe import note_answer
from gateway.http.session_listen import SessionListens, is_served_by_modern_child
from gateway.http.sse import EventStream
from gateway.http.stream import LazyStream, LegacyCall
from gateway.http.wire import rejection_response
from gateway.protocol import bridge, ingress, inputs, loglevels, subscriptions, versions
from gateway.protocol.headers import MCP_SESSION_ID
from gateway.protocol.jsonrpc import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY,
    ErrorReply,
    JsonObject,
    Message,
    Notification,
    Reply,
    Request,
    Result,
    error_object,
)
from gateway.protocol.outcome import Accepted, Rejection
from gateway.protocol.versions import Era
from gateway.relay import events
from gateway.relay.exchange import ClientContext, Relay, response
from gateway.relay.router import ANONYMOUS
from gateway.relay.sessions import CancelHandle, LegacySession, SessionStore
from gateway.relay.shared_settings import SharedSettings
from gateway.stdio.ask import ChildAsk
from gateway.stdio.pool import Pool

log = logging.getLogger("gateway.http")

LIST_CHANGED: Final = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
    }
)
MODERN_ERROR_STATUSES: Final = {METHOD_NOT_FOUND: 404, MISSING_CLIENT_CAPABILITY: 400}
"""HTTP statuses of a modern final error sent as JSON: the spec maps these two (digest §0.2)."""
RESOURCE_UPDATED: Final = "notifications/resources/updated"
CANCELLED: Final = "notifications/cancelled"
MAX_STREAM_SECONDS: Final = 3600.0
"""A legacy GET stream ends after this long; clients reconnect (L-TR allows either side to close)."""
MAX_BODY_BYTES: Final = 4 * 1024 * 1024
"""Largest POST body accepted (413 above): tool arguments, not file uploads."""
BODY_TIMEOUT: Final = 30.0
"""Seconds to receive a whole POST body once the headers are in (408 after, and the connection
is closed): 4 MiB at ~1 Mbit/s. A body that trickles in holds a connection, never a request slot."""


def lower_headers(request: HttpRequest) -> dict[str, str]:
    return wire.header_map(request.scope)


async def read_body(request: HttpRequest, limit: int) -> bytes | None:
    """The body, or None when it exceeds ``limit`` (never buffered past the limit)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


class McpEndpoint:
    def __init__(
        self,
        relay: Relay,
        sessions: SessionStore,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_stream_seconds: float = MAX_STREAM_SECONDS,
        body_timeout: float = BODY_TIMEOUT,
        max_batch_size: int = ingress.MAX_BATCH_MESSAGES,
    ) -> None:
        self.relay = relay
        self.sessions = sessions
        relay.settings = SharedSettings(sessions.on_child)  # per-client settings on shared children
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self.max_batch_size = max_batch_size
        self.max_stream_seconds = max_stream_seconds
        self.task_group: TaskGroup | None = None  # set by the app's lifespan; runs session listens
        self.listens = Listens()  # emulated subscriptions/listen streams (legacy children)
        self.in_flight = InFlight()  # modern requests being answered: a POSTed cancelled names one
        self.session_listens = SessionListens()  # legacy sessions' resource subscriptions on modern children

    @staticmethod
    def principal(request: HttpRequest) -> str | None:
        """Who is asking, as the auth middleware (``gateway.http.auth``) established it."""
        principal = request.scope.get("gateway.principal")
        return principal if isinstance(principal, str) else None

    async def __call__(self, request: HttpRequest) -> Response | LazyStream | ListenStream | EventStream:
        headers = lower_headers(request)
        principal = self.principal(request)
        if request.method == "GET":
            request.scope.setdefault("gateway.log", {}).update(method="GET stream", era="legacy")
            return self._get(headers, principal)
        if request.method == "DELETE":
            request.scope.setdefault("gateway.log", {}).update(method="DELETE session", era="legacy")
            return self._delete(headers, principal)
        if request.method != "POST":
            return wire.error_response(
                405,
                error_object(-32600, f"{request.method} is not used by MCP here; POST a JSON-RPC message"),
                headers={"allow": "POST, GET, DELETE"},
            )
        if request.scope.get(BODY_RECEIVED):  # all in already (the usual case): no timer needed
            body = await read_body(request, self.max_body_bytes)
        else:
            body = b""
            with anyio.move_on_after(self.body_timeout) as reading:
                body = await read_body(request, self.max_body_bytes)
            if reading.cancelled_caught:
                return wire.error_response(
                    408,
                    error_object(-32600, f"request body not received within {self.body_timeout:g} s"),
                    headers={"connection": "close"},  # the rest of the body would be read as the next request
                )
        if body is None:
            return wire.error_response(
                413, error_object(-32600, f"request body over the {self.max_body_bytes}-byte limit")
            )
        slots = request.scope.get(SLOTS)  # absent for a forward from another instance
        refusal = slots.admit() if isinstance(slots, Slots) else None
        if refusal is not None:
            return refusal
        return await self._post(request, headers, principal, body)

    async def _post(
        self, request: HttpRequest, headers: dict[str, str], principal: str | None, body: bytes
    ) -> Response | LazyStream | ListenStream:
        outcome = ingress.check_post(
            headers,
            body,
            max_body_bytes=self.max_body_bytes,
            session_version=self.sessions.version_of,
            max_batch=self.max_batch_size,
        )
        if isinstance(outcome, Rejection):
            return rejection_response(outcome)
        log = request.scope.setdefault("gateway.log", {})
        first = outcome.messages[0] if outcome.messages else None
        log.update(era=outcome.era.value, method=getattr(first, "method", None) or "response")
        if outcome.era is Era.MODERN:
            first_message = outcome.messages[0]
            if isinstance(first_message, Request) and first_message.method == subscriptions.LISTEN:
                return await self._listen(outcome, first_message, headers, principal, log)
            return self._modern(outcome, headers, principal, log)
        if outcome.session_id:
            log["session"] = outcome.session_id[:8]
        return await self._legacy(outcome, headers, principal, request.scope)

    # -- modern -------------------------------------------------------------------------

    def _modern(
        self,
        accepted: Accepted,
        headers: dict[str, str],
        principal: str | None,
        log: dict[str, Any],
        *,
        graceful_end: JsonObject | None = None,
    ) -> Response | LazyStream:
        message = accepted.messages[0]
        if not isinstance(message, Request):
            # Only notifications get here (the ladder refuses modern responses). Modern
            # cancellation is a disconnect, but a POSTed cancelled is taken leniently: it
            # cancels the one request of this principal it names (``gateway.http.inflight``).
            if isinstance(message, Notification) and message.method == CANCELLED and message.params:
                self.in_flight.cancel(principal, message.params.get("requestId"))
            return wire.accepted()
        meta = (message.params or {}).get("_meta")
        capabilities = meta.get(ingress.CLIENT_CAPABILITIES_KEY) if isinstance(meta, dict) else None
        client = ClientContext(
            Era.MODERN,
            accepted.version,
            capabilities if isinstance(capabilities, dict) else {},  # this request's, never an earlier one's
            principal=principal,
            log=log,
            trace=bridge.trace_context(headers),
        )
        return LazyStream(
            self.relay.exchange(message, client, headers),
            request_id=message.id,
            error_statuses=MODERN_ERROR_STATUSES,
            graceful_end=graceful_end,
            in_flight=self.in_flight,
            principal=principal,
        )

    async def _listen(
        self, accepted: Accepted, message: Request, headers: dict[str, str], principal: str | None, log: dict[str, Any]
    ) -> Response | LazyStream | ListenStream:
        """``subscriptions/listen``: emulated for a legacy child (``gateway.http.listen``);
        a modern child's own listen is forwarded like any request."""
        try:
            pool = await self.relay.router.pool_for(principal, None, headers)
            async with pool.lease(principal=principal or ANONYMOUS) as child:  # which era serves it, what it can do
                info = child.info
        except GatewayError as exc:
            return wire.gateway_error_response(exc, message.id)
        assert info is not None
        if info.era is Era.MODERN:  # forwarded; the relay rewrites subscriptionId both ways
            return self._modern(accepted, headers, principal, log, graceful_end=subscriptions.graceful_end(message.id))
        requested = (message.params or {}).get("notifications")
        if not isinstance(requested, dict):
            return wire.error_response(
                400, error_object(INVALID_PARAMS, "subscriptions/listen needs params.notifications"), message.id
            )
        listen = Listen(
            message.id,
            pool,
            subscriptions.honoured(requested, info.capabilities),
            child,
            subscriptions.requested_uris(requested, info.capabilities),
        )
        return ListenStream(listen, self.listens)

    # -- legacy -------------------------------------------------------------------------

    async def _legacy(
        self, accepted: Accepted, headers: dict[str, str], principal: str | None, scope: Scope
    ) -> Response | LazyStream:
        if accepted.session_id is None:
            message = accepted.messages[0]
            assert isinstance(message, Request)  # the ladder only lets initialize in without a session
            return await self._initialize(message, headers, principal)
        session = self.sessions.get(accepted.session_id)
        # A session belongs to whoever opened it: another principal's id is unknown to this one.
        if session is None or session.principal != principal:
            return rejection_response(ingress.unknown_session())
        if accepted.is_batch:
            refusal = self._batch_slots(accepted.messages, scope.get(SLOTS))
            if refusal is not None:
                return refusal
            return await self._batch(session, accepted.messages, headers)
        message = accepted.messages[0]
        if isinstance(message, Request):
            local = await self._local_legacy_answer(session, message)
            if local is not None:
                note_answer(scope, local)
                return wire.json_response(local)
            session.note_subscription(message.method, message.params)
            return self._legacy_stream(session, message, headers)
        self._legacy_notification(session, message)
        return wire.accepted()

    async def _initialize(self, message: Request, headers: dict[str, str], principal: str | None) -> Response:
        """Open a legacy session, answered from the handshake of the child that will serve it."""
        params = message.params or {}
        requested = params.get("protocolVersion")
        capabilities = params.get("capabilities")
        client_info = params.get("clientInfo")
        try:  # the session limits (429 / 503) are checked before any child is leased or started
            session = self.sessions.create(
                versions.negotiate_legacy(requested if isinstance(requested, str) else ""),
                capabilities if isinstance(capabilities, dict) else {},
                client_info if isinstance(client_info, dict) else None,
                principal,
            )
        except GatewayError as exc:
            return wire.gateway_error_response(exc, message.id)
        try:
            pool = await self.relay.router.pool_for(
                principal, session.id, headers, era=Era.LEGACY, capabilities=session.capabilities
            )
            async with pool.lease(principal=principal or ANONYMOUS) as child:
                session.child, session.pool = child, pool
                assert child.info is not None
                result = bridge.initialize_result(session.version, child.info)
        except GatewayError as exc:
            self.sessions.end(session.id)
            return wire.gateway_error_response(exc, message.id)
        log.info("legacy session %s… opened (protocol %s)", session.id[:8], session.version)
        return wire.json_response(response(message.id, result=result), headers={MCP_SESSION_ID: session.id})

    async def _local_legacy_answer(self, session: LegacySession, message: Request) -> JsonObject | None:
        if message.method in subscriptions.SUBSCRIBE_METHODS and is_served_by_modern_child(session):
            assert self.task_group is not None
            return await self.session_listens.handle(session, message, self.task_group)
        if message.method == "ping":
            return response(message.id, result={})
        if message.method == loglevels.SET_LEVEL:
            level = (message.params or {}).get("level")
            if not loglevels.is_level(level):
                return response(
                    message.id, error=error_object(INVALID_PARAMS, f"unknown log level {level!r}", {"level": level})
                )
            # The session's minimum for notifications/message; a legacy child is also told
            # (the relay forwards it; a modern child gets it as logLevel on each request).
            session.log_level = level
            return None
        if message.method == "initialize":
            return response(
                message.id, error=error_object(-32600, "this session is already initialized; start a new one")
            )
        return None

    @staticmethod
    def _legacy_notification(session: LegacySession, message: Message) -> None:
        if isinstance(message, Notification):
            if message.method == "notifications/initialized":
                session.initialized = True
            elif message.method == CANCELLED and message.params:
                session.cancel(message.params.get("requestId"))
        elif isinstance(message, (Result, ErrorReply)):
            session.answer_ask(message)  # the client's answer to a child's question: to the child

    def _client(
        self, session: LegacySession, headers: dict[str, str] | None = None, *, streamed: bool = True
    ) -> ClientContext:
        return ClientContext(
            Era.LEGACY,
            session.version,
            session.capabilities,
            session.client_info,
            session.log_level,
            session,
            session.principal,
            trace=bridge.trace_context(headers or {}),
            accepts_requests=streamed,
        )

    def _legacy_stream(self, session: LegacySession, message: Request, headers: dict[str, str]) -> LazyStream:
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

        exchange = self.relay.exchange(message, self._client(session, headers), headers)
        return LazyStream(exchange, request_id=message.id, legacy=LegacyCall(handle, cancelled, forget))

    @staticmethod
    def _batch_slots(messages: tuple[Message, ...], slots: object) -> Response | None:
        """Each request of a batch is a call in flight: the batch takes a slot per request
        beyond the one its HTTP request holds, or is refused (429) before any of it runs."""
        extra = sum(isinstance(message, Request) for message in messages) - 1
        if extra <= 0 or not isinstance(slots, Slots) or slots.take(extra):
            return None
        return wire.error_response(
            429,
            error_object(
                -32600,
                f"a batch of {extra + 1} requests needs as many of this client's {slots.limit} requests "
                f"in flight; {slots.in_use()} are in use",
            ),
            retry_after=1,
        )

    async def _batch(self, session: LegacySession, messages: tuple[Message, ...], headers: dict[str, str]) -> Response:
        """2025-03-26 batches: notifications and responses are taken, requests answered in one array."""
        answers: list[JsonObject] = []

        async def answer(message: Request) -> None:
            local = await self._local_legacy_answer(session, message)
            if local is not None:
                answers.append(local)
                return
            session.note_subscription(message.method, message.params)
            client = self._client(session, headers, streamed=False)  # a JSON array cannot carry requests
            handle = CancelHandle()  # a later notifications/cancelled may name it, as for single requests
            session.in_flight.setdefault(message.id, handle)
            answered = False
            try:
                with handle.scope:
                    exchange = self.relay.exchange(message, client, headers)
                    async with aclosing(exchange):  # type: ignore[type-var]
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
                    self._legacy_notification(session, message)
        if not answers:
            return wire.accepted()
        return Response(orjson.dumps(answers), media_type="application/json")

    # -- GET / DELETE -------------------------------------------------------------------

    def _get(self, headers: dict[str, str], principal: str | None) -> Response | EventStream:
        """A legacy session's stream of unsolicited messages (``list_changed``)."""
        outcome = ingress.check_get(headers, session_version=self.sessions.version_of)
        if isinstance(outcome, Rejection):
            return rejection_response(outcome)
        assert outcome.session_id is not None
        session = self.sessions.get(outcome.session_id)
        if session is None or session.principal != principal:
            return rejection_response(ingress.unknown_session())
        # Bounded: after max_stream_seconds the stream ends and the client reconnects (a
        # stream that lives forever would pin memory and a connection per forgotten tab).
        return EventStream(session.open_stream(), max_seconds=self.max_stream_seconds)

    def on_child_notification(self, pool: Pool, notification: Notification) -> None:
        """Unsolicited child notifications: ``list_changed`` goes to the GET streams of the legacy
        sessions that pool serves (never across principals, sessions or credentials)."""
        self.listens.offer(pool, notification)  # modern listeners take what they opted into
        if notification.method in LIST_CHANGED:
            self.sessions.broadcast(notification.to_dict(), lambda session: session.pool is pool)
        elif notification.method == RESOURCE_UPDATED and notification.params:
            # Only to the sessions of this pool that subscribed to the resource (or a parent of it).
            uri = notification.params.get("uri")
            if isinstance(uri, str):
                self.sessions.broadcast(
                    notification.to_dict(), lambda session: session.pool is pool and session.is_subscribed(uri)
                )
        else:
            log.debug("unsolicited %s from the child not forwarded", notification.method)

    async def on_child_request(self, pool: Pool, request: Request) -> Reply | None:
        """A child's question that no client exchange carries (unattributable): sent on the GET
        stream of the one legacy session the child serves, when there is exactly one (the pool
        is that session's own, ``isolation: session``), its GET stream is open and it declared
        the capability; the client's POSTed answer (or, after ``input_timeout``, -31007) is the
        reply. A ``roots/list`` a roots refresh waits for goes to that refresh's client
        (``SharedSettings.refresh_roots``). None otherwise: the gateway answers it locally."""
        assert self.relay.settings is not None
        refreshed = await self.relay.settings.on_child_request(pool, request)
        if refreshed is not None:
            return refreshed
        if request.method not in inputs.INPUT_METHODS or pool.session_id is None:
            return None
        served = self.sessions.serving(pool)
        if len(served) != 1 or served[0].id != pool.session_id:
            return None
        [session] = served
        if not inputs.is_declared(session.capabilities, request.method, request.params):
            return None
        ask = ChildAsk(request)
        gateway_id = session.track_ask(ask)
        if not session.offer(Request(gateway_id, request.method, request.params).to_dict()):
            session.asks.pop(gateway_id, None)  # no GET stream open (or it is full)
            return None
        timeout = pool.spec.input_timeout
        try:
            with anyio.move_on_after(timeout):
                await ask.wait()
        finally:  # a no-op when answered; else the timeout (or the child's end) answers it
            ask.answer_error(
                CODE_INPUT_TIMEOUT,
                f"the client did not answer {ask.method} within {timeout:g} s",
                timeout_seconds=timeout,
            )
        assert ask.reply is not None
        return ask.reply

    def _delete(self, headers: dict[str, str], principal: str | None) -> Response:
        outcome = ingress.check_delete(headers, session_version=self.sessions.version_of)
        if isinstance(outcome, Rejection):
            return rejection_response(outcome)
        assert outcome.session_id is not None
        session = self.sessions.get(outcome.session_id)
        if session is None or session.principal != principal:
            return rejection_response(ingress.unknown_session())
        self.sessions.end(session.id)
        return Response(status_code=204)
