"""The answer to one request: JSON if the final response comes first, else SSE.

``LazyStream(events)`` is an ASGI response over a relay exchange's typed events
(``gateway.relay.events``), or over ``Relay.begin``'s outcome (the ``Final`` at once, or those
events). It waits for the first:

- ``Final`` → ``application/json``, one object: 200, or the status ``error_statuses`` maps
  its error code to; one ``http.response.start`` and one ``http.response.body``;
- any other event → ``200 text/event-stream`` opened now (so every 4xx/503 was decided
  before a byte went out), then one ``data:`` event per message, the ``Final`` last, written
  by ``gateway.http.sse`` (keep-alive comments while the child is quiet; events ready
  together go out in one send).

A body over 64 KiB (a large JSON answer or SSE event) goes out in pieces, under the
process's budget for large replies (``gateway.http.replies``); a client that stops reading is
reset by the connection's write timeout (``gateway.http.connection``).

The exchange runs in the response's own task. A JSON answer adds no task, task group or queue;
an SSE answer adds one task group with one task that reads the exchange into a bounded buffer
(``PULLED_AHEAD``), so that the writer's keep-alive timeout never cancels the exchange
(``_stream``), and a legacy request's resumable stream delivers in a task of its own
(``gateway.http.resume``).
Who ends an answer and what the client then gets is decided by its machine
(``gateway.protocol.answer``, where the rules are): this module feeds it the exchange's
first event, its final and its end, and carries out the actions it returns. What happens to
the request from outside is fed to it where it happens: the connection's loss and the drain
by the ``Watch`` (``gateway.http.sse``), the session's cancel by its ``CancelHandle``, a
POSTed ``notifications/cancelled`` by ``cancel()``. A leading ``STOP`` cancels the response's
scope at once (a modern child is sent ``notifications/cancelled``), and a ``SEAL`` after it
seals a legacy request's stream at once (``Resumable.seal``); the rest is done here once the
exchange is over. A legacy client's disconnect is no cancellation (L-TR §Sending
Messages): its ``LegacyCall`` goes on, nothing more is sent, the access log says 499.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from types import CoroutineType
from typing import Any, TypeAlias, cast

import anyio
import orjson
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from gateway.errors import GatewayUnavailableError
from gateway.http import replies, sse
from gateway.http.connection import Hangup
from gateway.http.drain import CUT_BY_DRAIN
from gateway.http.inflight import InFlight
from gateway.http.observe import note_answer, note_cancelled
from gateway.http.resume import Resumable
from gateway.http.sse import SSE_HEADERS, SseWriter, Watch
from gateway.http.wire import error_response, gateway_error_response, rejection_response
from gateway.protocol.answer import AT_ONCE, DECIDED, LIVE, Action, Actions, Answer, Event, Kind, State
from gateway.protocol.jsonrpc import JsonObject
from gateway.relay import events
from gateway.relay.exchange import Answered, Begun, Rejected
from gateway.relay.sessions import CancelHandle

log = logging.getLogger("gateway.http")

PULLED_AHEAD = 64
"""Events read from a modern exchange ahead of the writer (written together when ready)."""

# The answer machine's members every plain answer reads, as module names: a member read from
# its class costs a request ~800 instructions on Python 3.11 (``gateway.protocol.versions.MODERN``).
_CALL, _LISTEN, _LEGACY = Kind.CALL, Kind.LISTEN, Kind.LEGACY
_WAITING = State.WAITING
_FIRST_FINAL, _FIRST_NOTE = Event.FIRST_FINAL, Event.FIRST_NOTE
_SEND_JSON = Action.SEND_JSON


Exchange: TypeAlias = AsyncGenerator[events.Emitted, None]
Opening: TypeAlias = Coroutine[Any, Any, Begun]
"""``Relay.begin(...)``, not awaited yet: awaited in the answer's task, under its watch."""


def _is_final(event: events.RelayEvent) -> bool:
    return type(event) is events.Final


def _unless_gone(hangup: Hangup | None, send: Send) -> Send:
    """``send``, until the client has gone (``Watch.left``): then nothing (so the access log
    says 499). Only the connection knows that it has."""
    if hangup is None:
        return send

    def sender(message: Message) -> Awaitable[None]:
        # Not a coroutine of its own (one more frame on every send of every legacy answer):
        # the send's own, or once the client has gone one that sends nothing.
        return _nothing(message) if hangup.is_lost else send(message)

    return sender


async def _nothing(message: Message) -> None:
    """A send to a client that has gone."""


class Unbatched:
    """A relay exchange's events one at a time; the rest of a ``Batch`` is ``ready()``."""

    __slots__ = ("_pending", "exchange")

    def __init__(self, exchange: AsyncIterator[events.Emitted]) -> None:
        self.exchange = exchange
        self._pending: list[events.RelayEvent] = []

    async def __anext__(self) -> events.RelayEvent:
        if self._pending:
            return self._pending.pop(0)
        return self.take(await self.exchange.__anext__())

    def take(self, emitted: events.Emitted) -> events.RelayEvent:
        """``emitted``'s first event (read from the exchange by the caller); the rest of a
        ``Batch`` is ``ready()``."""
        if isinstance(emitted, events.Batch):
            self._pending.extend(emitted.notes[1:])
            return emitted.notes[0]
        return emitted

    def ready(self) -> list[events.RelayEvent]:
        pending, self._pending = self._pending, []
        return pending


class _PolledWriter(SseWriter):
    """A legacy answer's writer: when a polling stream's connection is closed (its response
    ended while the call goes on, ``gateway.http.resume``), the answer's machine is told. It
    holds the machine, not the ``LazyStream`` (no cycle to leave to the garbage collector)."""

    __slots__ = ("_machine",)

    def __init__(self, send: Send, machine: Answer) -> None:
        super().__init__(send)
        self._machine = machine

    async def end(self) -> None:
        if not self.ended:
            actions = self._machine.step(Event.POLL_CLOSED)
            assert not actions, actions  # the answer's own event: it only changes the state
        await super().end()


def _shutting_down() -> GatewayUnavailableError:
    return GatewayUnavailableError(CUT_BY_DRAIN, retry_after=5)


def _after_admission(exc: GatewayUnavailableError, request_id: Any) -> Response:
    """``exc`` for a request that was admitted (it may have reached a child): HTTP 200 with the
    error, as a child's own failure is, never 503. A proxy retries a 503 on another replica
    (``gateway.http.drain``), and this request must not run twice."""
    return error_response(200, exc.error_object(), request_id)


@dataclass(slots=True)  # not frozen: one per legacy request (a frozen __init__ sets fields one call each)
class LegacyCall:
    """A legacy request's hooks: ``handle`` (the session cancels it), ``on_cancel`` (the final
    answer when the gateway ended it), ``on_end`` (the session forgets it)."""

    handle: CancelHandle
    on_cancel: Callable[[], JsonObject]
    on_end: Callable[[], None]


class LazyStream:
    __slots__ = (
        "__weakref__",
        "_closing",
        "_error_statuses",
        "_events",
        "_exchange",
        "_graceful_end",
        "_headers",
        "_in_flight",
        "_keepalive",
        "_legacy",
        "_machine",
        "_max_seconds",
        "_opening",
        "_principal",
        "_receive",
        "_request_id",
        "_resumable",
        "_scope",
        "_send",
        "_watch",
        "_writer",
    )

    def __init__(
        self,
        exchange: Exchange | Opening,
        *,
        request_id: Any = None,
        headers: list[tuple[bytes, bytes]] | None = None,
        error_statuses: Mapping[int, int] | None = None,
        graceful_end: JsonObject | None = None,
        in_flight: InFlight | None = None,
        principal: str | None = None,
        legacy: LegacyCall | None = None,
        resumable: Resumable | None = None,
        keepalive: float = sse.KEEPALIVE_SECONDS,
        max_seconds: float | None = None,
    ) -> None:
        self._keepalive = keepalive
        # An opening (``Relay.begin``) is awaited first; what it gives, if not the ``Final``, is
        # the exchange. None: none (yet, or left).
        self._opening: Opening | None = None
        self._exchange: Exchange | Answered | None = None
        # The exchange's events one at a time, the rest of a Batch ready to be written with the
        # first: made once there is an exchange (an opening's common ``Answered`` needs none).
        self._events: Unbatched | None = None
        if isinstance(exchange, CoroutineType):
            self._opening = exchange
        else:
            self._exchange = cast(Exchange, exchange)
            self._events = Unbatched(self._exchange)
        # Where a POSTed notifications/cancelled finds this request (modern requests only).
        self._in_flight = in_flight
        self._principal = principal
        self._legacy = legacy
        # A legacy session's SSE answer: event ids, kept for a resume (gateway.http.resume).
        self._resumable = resumable
        # A forwarded subscriptions/listen (a modern answer): when the gateway drains, the stream
        # ends with this (the graceful result) at once, instead of waiting out the drain budget;
        # so it does after its lifetime (--max-stream-seconds, ``max_seconds``).
        self._graceful_end = graceful_end
        self._max_seconds = max_seconds
        kind = _LEGACY if legacy is not None else _CALL if graceful_end is None else _LISTEN
        self._machine = Answer(kind)
        self._closing: Actions = ()  # actions of events from outside, done once the exchange is over
        self._watch: Watch | None = None
        self._request_id = request_id
        # Modern Streamable HTTP maps some errors to statuses: "method not implemented" is 404 with
        # -32601, so a client can tell it from a legacy HTTP+SSE host's bare 404 (SHTTP §Protocol
        # Version Header); a missing client capability is 400 with -32021 (basic/index §_meta).
        self._error_statuses = error_statuses or {}
        self._headers = headers or []
        self._writer: SseWriter | None = None  # made by ``_sse`` when the answer is an event stream

    def cancel(self) -> None:
        """The client cancelled this request (a POSTed ``notifications/cancelled``)."""
        self._feed(Event.POSTED_CANCEL)

    def _feed(self, event: Event) -> None:
        """What happened to the request, from outside its task: the leading actions that need
        no I/O (``AT_ONCE``) are done now, the rest once the exchange is over."""
        actions = self._machine.step(event)
        while actions and actions[0] in AT_ONCE:
            self._at_once(actions[0])
            actions = actions[1:]
        if actions:
            self._closing += actions

    def _at_once(self, action: Action) -> None:
        if action is Action.STOP:
            if self._watch is not None:
                self._watch.stop()
        elif self._resumable is not None:  # SEAL: before the stream's end reaches the client
            self._resumable.seal()

    def _session_cancelled(self, reply: bool) -> None:
        self._feed(Event.SESSION_CANCEL_REPLY if reply else Event.SESSION_CANCEL)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The answer, in the request's task (one frame: each resumption of the call passes it)."""
        in_flight, legacy, machine = self._in_flight, self._legacy, self._machine
        # Where a POSTed notifications/cancelled finds it, while it is answered (modern requests).
        key = in_flight.add(self._principal, self._request_id, self) if in_flight is not None else None
        try:
            watch = self._watch = Watch(scope, receive, machine.kind, self._feed)
            if legacy is None:
                if self._max_seconds is not None:
                    watch.cancel_scope.deadline = anyio.current_time() + self._max_seconds
            else:
                send = _unless_gone(watch.hangup, send)
                legacy.handle.attach(watch.cancel_scope, self._session_cancelled)  # may decide it at once
            self._scope, self._receive, self._send = scope, receive, send
            if machine.state is _WAITING:  # not cancelled before it began
                if watch.lean:  # nothing runs beside the answer: awaited in this frame, under the watch
                    with watch:
                        await self._respond()
                else:
                    await watch.run(self._respond)
            if machine.state in DECIDED and not self._closing:
                # The usual end: nothing cancels this task here (the watch's scope is closed, the
                # drain cancels only that), so closing the exchange (its lease) needs no shield.
                exchange = self._leave_exchange()
                if exchange is not None:
                    await exchange.aclose()
                return
            with anyio.CancelScope(shield=True):
                exchange = self._leave_exchange()
                if exchange is not None:
                    await exchange.aclose()
                closing, self._closing = self._closing, ()
                if machine.state in LIVE:  # stopped, and the machine was not told why
                    expired = watch.cancel_scope.deadline <= anyio.current_time()
                    closing += machine.step(Event.DEADLINE if expired else Event.STOPPED)
                await self._do(closing)
        finally:
            if type(self._exchange) is Answered:  # not left above (something raised): no finalizer would
                with anyio.CancelScope(shield=True):
                    await self._exchange.aclose()
            # What told the machine (the watch, the session's handle) refers back to this
            # object: let go of it, so no cycle is left to the garbage collector.
            self._watch = None
            if legacy is not None:
                legacy.handle.detach()
                legacy.on_end()
            if key is not None:
                assert in_flight is not None
                in_flight.discard(key, self)

    def _sse(self) -> SseWriter:
        """The event stream's writer, made when first needed: a JSON answer makes none."""
        writer = self._writer
        if writer is None:
            send = self._send
            writer = self._writer = SseWriter(send) if self._resumable is None else _PolledWriter(send, self._machine)
        return writer

    def _leave_exchange(self) -> Exchange | Answered | None:
        """Let go of the exchange: what the caller must ``aclose()`` (its lease and child
        exchange, if it still holds them), or None. Not a coroutine of its own: one frame
        fewer on every answer."""
        if self._opening is not None:
            self._opening.close()  # never awaited (the answer ended before it began), or done: nothing held
        exchange, self._exchange = self._exchange, None
        return exchange

    async def _respond(self) -> None:
        step = self._machine.step
        try:
            opening = self._opening
            if opening is None:
                unbatched = self._events
                assert unbatched is not None
                # The exchange's first event read straight from it (nothing is pending before it).
                first = unbatched.take(await unbatched.exchange.__anext__())
            else:
                opened = await opening
                if type(opened) is Answered:  # the common shape: its holdings left once it is written
                    self._exchange = opened
                    first = opened.final
                elif type(opened) is events.Final:  # known without the child's reply: nothing held
                    first = opened
                else:
                    exchange = self._exchange = cast(Exchange, opened)
                    unbatched = self._events = Unbatched(exchange)
                    first = unbatched.take(await exchange.__anext__())
        except GatewayUnavailableError as exc:
            await self._do(step(Event.REFUSED), refusal=gateway_error_response(exc, self._request_id))
            return
        except Rejected as exc:
            await self._do(step(Event.REFUSED), refusal=rejection_response(exc.rejection))
            return
        except StopAsyncIteration:  # ended before any answer (cancelled): none is given
            await self._do(step(Event.EXHAUSTED))
            return
        await self._do(step(_FIRST_FINAL if type(first) is events.Final else _FIRST_NOTE), first)

    async def _do(
        self, actions: Actions, event: events.RelayEvent | None = None, refusal: Response | None = None
    ) -> None:
        """Carry out the machine's ``actions`` in order (``event``: the exchange's, they are about)."""
        for action in actions:
            if action is _SEND_JSON:
                assert isinstance(event, events.Final)
                await self._json(event)
            elif action is Action.STREAM:
                assert event is not None
                last = await self._stream_answer(event)
                await self._do(self._machine.step(Event.EXHAUSTED if last is None else Event.FINAL), last)
            elif action is Action.END_SSE:
                await self._sse().end()
            elif action is Action.NOTE_ANSWER:
                assert event is not None
                note_answer(self._scope, event.message)
            elif action is Action.NOTE_CANCELLED:
                note_cancelled(self._scope)
            elif action is Action.START_SSE:
                await self._sse().start([*SSE_HEADERS, *self._headers])
            elif action is Action.SEND_REFUSAL:
                assert refusal is not None
                await refusal(self._scope, self._receive, self._send)
            elif action is Action.WRITE_GRACEFUL:
                assert self._graceful_end is not None
                await self._sse().write_message(self._graceful_end)
            elif action is Action.NOTE_SHUTDOWN:
                note_answer(self._scope, {"error": _shutting_down().error_object()})
            elif action is Action.SHUTDOWN_JSON:
                await _after_admission(_shutting_down(), self._request_id)(self._scope, self._receive, self._send)
            elif action is Action.SHUTDOWN_EVENT:
                error = _shutting_down().error_object()
                await self._sse().write_message({"jsonrpc": "2.0", "id": self._request_id, "error": error})
            elif action is Action.REPLY_JSON:
                assert self._legacy is not None
                await self._json(events.Final(self._legacy.on_cancel()))
            elif action is Action.REPLY_EVENT:
                assert self._legacy is not None
                final = self._legacy.on_cancel()
                note_answer(self._scope, final)
                await self._sse().write_message(final)
            else:  # pragma: no cover - STOP and SEAL are done where the event came from (_feed)
                raise AssertionError(action)

    async def _stream_answer(self, first: events.RelayEvent) -> events.RelayEvent | None:
        """``Action.STREAM``: open the event stream, write up to the ``Final`` (returned; None: none came)."""
        headers = [*SSE_HEADERS, *self._headers]
        if self._resumable is not None:
            assert self._watch is not None
            assert self._events is not None  # an answer streams only from an exchange's events
            return await self._resumable.run(self._sse(), self._events, first, self._watch, headers)
        writer = self._sse()
        await writer.start(headers)
        return await self._stream(writer, first)

    async def _stream(self, writer: SseWriter, first: events.RelayEvent) -> events.RelayEvent | None:
        """The events after ``first`` as they come, up to the ``Final`` (returned; None: none came).

        A task reads the exchange into a bounded buffer, and the writer waits on that: its
        keep-alive timeout must never cancel the exchange itself, an async generator, which a
        cancelled ``__anext__`` ends (a call quiet for ``KEEPALIVE_SECONDS`` lost its answer)."""
        unbatched = self._events
        assert unbatched is not None  # an answer streams only from an exchange's events
        taken = [first, *unbatched.ready()]  # the rest of a Batch goes out with it
        send, receive = anyio.create_memory_object_stream[events.RelayEvent](PULLED_AHEAD)

        async def pull() -> None:
            with send:
                while True:
                    try:
                        event = await unbatched.__anext__()
                    except StopAsyncIteration:
                        return
                    for item in (event, *unbatched.ready()):
                        try:  # no checkpoint per event: the writer then takes what is queued in one send
                            send.send_nowait(item)
                        except anyio.WouldBlock:
                            await send.send(item)
                    if type(event) is events.Final:
                        return

        with receive:
            async with anyio.create_task_group() as tg:
                tg.start_soon(pull)
                last = await sse.pump(
                    writer,
                    receive.receive,
                    sse.ready_from(receive),
                    self._frame,
                    _is_final,
                    taken=taken,
                    keepalive=self._keepalive,
                )
                tg.cancel_scope.cancel()
        return last

    def _json(self, final: events.Final) -> Awaitable[None]:
        """The JSON answer's sends, to be awaited (not a coroutine of its own: one frame fewer
        on every JSON answer)."""
        scope, send = self._scope, self._send
        note_answer(scope, final.message)
        body = orjson.dumps(final.message)
        if not replies.reserve(body):
            return _after_admission(replies.over_budget(), self._request_id)(scope, self._receive, send)
        code = final.error_code
        start = {
            "type": "http.response.start",
            "status": 200 if code is None else self._error_statuses.get(code, 200),
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
                *self._headers,
            ],
        }
        return replies.send_body(send, body, more_body=False, start=start)

    def _frame(self, event: events.RelayEvent) -> bytes | None:
        data = SseWriter.frame(event.message)
        if data is not None:
            return data
        if type(event) is not events.Final:
            log.warning(
                "a %d-byte %s not sent: reply budget spent", len(sse.frame(event.message)), event.message.get("method")
            )
            return None
        error = {"jsonrpc": "2.0", "id": self._request_id, "error": replies.over_budget().error_object()}
        return sse.frame(error)
