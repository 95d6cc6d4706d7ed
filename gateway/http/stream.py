"""The answer to one request: JSON if the final response comes first, else SSE.

``LazyStream(events)`` is an ASGI response over a relay exchange's typed events
(``gateway.relay.events``). It waits for the first:

- ``Final`` → ``application/json``, one object: 200, or the status ``error_statuses`` maps
  its error code to; one ``http.response.start`` and one ``http.response.body``;
- any other event → ``200 text/event-stream`` opened now (so every 4xx/503 was decided
  before a byte went out), then one ``data:`` event per message, the ``Final`` last, written
  by ``gateway.http.sse`` (keep-alive comments while the child is quiet; events ready
  together go out in one send).

A body over 64 KiB (a large JSON answer or SSE event) goes out in pieces, under the
process's budget for large replies (``gateway.http.replies``); a client that stops reading is
reset by the connection's write timeout (``gateway.http.connection``).

The exchange runs in the response's own task: no task group, no queue, no background task.
A modern client's disconnect cancels it (``gateway.http.sse.Watch``: the connection cancels
the response's scope, no task waits for it) and closes the iterator, so the child is sent
``notifications/cancelled``. A legacy client's disconnect is **not** a cancellation (L-TR
§Sending Messages: "SHOULD NOT"): its exchange (``LegacyCall``) goes on to its end, nothing
more is sent, and the access log says the client left (499); only a connection reset for
not reading (``gateway.http.connection``) cancels it. The session cancels it through its
``CancelHandle``: without an answer after the client's own ``notifications/cancelled``, with
``on_cancel()`` as the final answer after a ``DELETE`` or expiry.

A request the client cancelled (a legacy ``notifications/cancelled``, or a modern one that
``cancel()`` names) gets no answer: its event stream ends without a final response, or,
when nothing was sent yet, the answer is an SSE stream that ends at once (a POSTed request
must be answered with JSON or SSE, and JSON would need a response object).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
from starlette.types import Message, Receive, Scope, Send

from gateway.errors import GatewayUnavailableError
from gateway.http import replies, sse
from gateway.http.drain import SHUTTING_DOWN
from gateway.http.inflight import InFlight
from gateway.http.observe import note_answer, note_cancelled
from gateway.http.resume import Resumable
from gateway.http.sse import SSE_HEADERS, SseWriter, Watch
from gateway.http.wire import gateway_error_response, rejection_response
from gateway.protocol.jsonrpc import JsonObject
from gateway.relay import events
from gateway.relay.exchange import Rejected
from gateway.relay.sessions import CancelHandle

log = logging.getLogger("gateway.http")

PULLED_AHEAD = 64
"""Events read from a modern exchange ahead of the writer (written together when ready)."""


def _is_final(event: events.Event) -> bool:
    return type(event) is events.Final


def _unless_gone(watch: Watch, send: Send) -> Send:
    """``send``, until the client has gone: then nothing (so the access log says 499)."""

    async def sender(message: Message) -> None:
        if not watch.left:
            await send(message)

    return sender


class Unbatched:
    """A relay exchange's events one at a time; the rest of a ``Batch`` is ``ready()``."""

    __slots__ = ("_exchange", "_pending")

    def __init__(self, exchange: AsyncIterator[events.Emitted]) -> None:
        self._exchange = exchange
        self._pending: list[events.Event] = []

    async def __anext__(self) -> events.Event:
        if self._pending:
            return self._pending.pop(0)
        emitted = await self._exchange.__anext__()
        if isinstance(emitted, events.Batch):
            self._pending.extend(emitted.notes[1:])
            return emitted.notes[0]
        return emitted

    def ready(self) -> list[events.Event]:
        pending, self._pending = self._pending, []
        return pending


@dataclass(frozen=True, slots=True)
class LegacyCall:
    """A legacy request's hooks: ``handle`` (the session cancels it), ``on_cancel`` (the final
    answer when the gateway ended it), ``on_end`` (the session forgets it)."""

    handle: CancelHandle
    on_cancel: Callable[[], JsonObject]
    on_end: Callable[[], None]


class LazyStream:
    def __init__(
        self,
        exchange: AsyncIterator[events.Emitted],
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
        self._exchange = exchange
        # One event at a time; the rest of a Batch is ready to be written with the first.
        self._events = Unbatched(exchange)
        # Where a POSTed notifications/cancelled finds this request (modern requests only).
        self._in_flight = in_flight
        self._principal = principal
        self._watch: Watch | None = None
        self._cancelled = False  # by the client's notifications/cancelled: no answer follows
        self._legacy = legacy
        # A legacy session's SSE answer: event ids, kept for a resume (gateway.http.resume).
        self._resumable = resumable
        # A forwarded subscriptions/listen: when the gateway drains, the stream ends with this
        # (the graceful result) at once, instead of waiting out the drain budget.
        self._graceful_end = graceful_end
        # A forwarded subscriptions/listen's lifetime (--max-stream-seconds): then it ends the same way.
        self._max_seconds = max_seconds
        self._request_id = request_id
        self._finished = False  # the final answer sent
        # Modern Streamable HTTP maps some errors to statuses: "method not implemented" is 404 with
        # -32601, so a client can tell it from a legacy HTTP+SSE host's bare 404 (SHTTP §Protocol
        # Version Header); a missing client capability is 400 with -32021 (basic/index §_meta).
        self._error_statuses = error_statuses or {}
        self._headers = headers or []

    def cancel(self) -> None:
        """The client cancelled this request: stop the exchange (the child is told, with
        its own id) and end the answer without a final message."""
        self._cancelled = True
        if self._watch is not None:
            self._watch.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        in_flight, legacy = self._in_flight, self._legacy
        # Where a POSTed notifications/cancelled finds it, while it is answered (modern requests).
        key = in_flight.add(self._principal, self._request_id, self) if in_flight is not None else None
        try:
            await self._answer(scope, receive, send)
        finally:
            if legacy is not None:
                legacy.on_end()
            if key is not None:
                assert in_flight is not None
                in_flight.discard(key, self)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        legacy = self._legacy
        watch = self._watch = Watch(
            scope, receive, end_on_drain=self._graceful_end is not None, outlives_client=legacy is not None
        )
        if self._cancelled:
            watch.cancel()
        expired = False
        if legacy is None:
            writer = SseWriter(send)
            if self._max_seconds is not None:
                watch.cancel_scope.deadline = anyio.current_time() + self._max_seconds
            await watch.run(lambda: self._respond(scope, receive, send, writer))
            expired = (
                self._max_seconds is not None
                and watch.cancel_scope.cancelled_caught
                and anyio.current_time() >= watch.cancel_scope.deadline
            )
        else:
            send = _unless_gone(watch, send)
            writer = SseWriter(send)
            handle = legacy.handle
            handle.attach(watch.cancel_scope)  # the session cancels it through the watch's scope
            await watch.run(lambda: self._respond(scope, receive, send, writer))
            if handle.cancelled and not self._finished:
                await self._legacy_cancelled(scope, receive, send, writer, legacy)
            if watch.left:
                note_cancelled(scope)  # its work went on to the end; the client was not there for it
        if self._finished:
            # The usual end: nothing cancels this task here (the watch's scope is closed, the
            # drain cancels only that), so closing the exchange (its lease) needs no shield.
            await self._exchange.aclose()  # type: ignore[attr-defined]
            return
        drain = watch.drain
        shut_down = drain is not None and drain.cancel.is_set()
        with anyio.CancelScope(shield=True):
            await self._exchange.aclose()  # type: ignore[attr-defined]
            if (watch.drained or expired) and self._graceful_end is not None and (writer.started or expired):
                self._finished = True
                if not writer.started:
                    await writer.start([*SSE_HEADERS, *self._headers])
                await writer.write_message(self._graceful_end)
                await writer.end()
            elif shut_down:
                await self._shutdown_answer(scope, receive, send, writer)
            elif self._cancelled:
                note_cancelled(scope)  # by the client's notifications/cancelled: no answer
                self._finished = True
                if not writer.started:
                    await writer.start([*SSE_HEADERS, *self._headers])
                await writer.end()
            else:
                note_cancelled(scope)  # the client left first (for a modern one, the child was told)

    async def _legacy_cancelled(
        self, scope: Scope, receive: Receive, send: Send, writer: SseWriter, legacy: LegacyCall
    ) -> None:
        """The session cancelled the request before its answer: none after the client's own
        ``notifications/cancelled``; ``on_cancel()`` after a ``DELETE`` or expiry."""
        if not legacy.handle.reply:  # the client's own notifications/cancelled: no answer
            self._cancelled = True
            return
        self._finished = True  # ended by the gateway (DELETE, expiry): the client is told
        final = legacy.on_cancel()
        if writer.ended:  # a polling stream's connection was closed already
            return
        if writer.started:
            note_answer(scope, final)
            await writer.write_message(final)
            await writer.end()
        else:
            await self._json(scope, receive, send, events.Final(final))

    async def _shutdown_answer(self, scope: Scope, receive: Receive, send: Send, writer: SseWriter) -> None:
        """The drain budget ran out: end this request with a clear error, not a dropped connection."""
        error = GatewayUnavailableError(SHUTTING_DOWN, retry_after=5)
        note_answer(scope, {"error": error.error_object()})
        if writer.ended:
            return
        if not writer.started:
            await gateway_error_response(error, self._request_id)(scope, receive, send)
            return
        final = {"jsonrpc": "2.0", "id": self._request_id, "error": error.error_object()}
        await writer.write_message(final)
        await writer.end()

    async def _respond(self, scope: Scope, receive: Receive, send: Send, writer: SseWriter) -> None:
        try:
            first = await self._events.__anext__()
        except GatewayUnavailableError as exc:
            self._finished = True
            await gateway_error_response(exc, self._request_id)(scope, receive, send)
            return
        except Rejected as exc:
            self._finished = True
            await rejection_response(exc.rejection)(scope, receive, send)
            return
        except StopAsyncIteration:
            # Cancelled by the client before any answer: a cancelled request gets none, so
            # the answer is an event stream that ends at once, with no message in it.
            note_cancelled(scope)
            self._finished = True
            await writer.start([*SSE_HEADERS, *self._headers])
            await writer.end()
            return
        if type(first) is events.Final:
            self._finished = True
            await self._json(scope, receive, send, first)
            return
        if self._resumable is not None and self._watch is not None:
            headers = [*SSE_HEADERS, *self._headers]
            last = await self._resumable.run(writer, self._events, first, self._watch, headers)
        else:
            await writer.start([*SSE_HEADERS, *self._headers])
            last = await self._stream(writer, first)
        if last is not None:
            note_answer(scope, last.message)
            self._finished = True
        await writer.end()
        self._finished = True

    async def _stream(self, writer: SseWriter, first: events.Event) -> events.Event | None:
        """The events after ``first`` as they come, up to the ``Final`` (returned; None: none came).

        A task reads the exchange into a bounded buffer, and the writer waits on that: its
        keep-alive timeout must never cancel the exchange itself, an async generator, which a
        cancelled ``__anext__`` ends (a call quiet for ``KEEPALIVE_SECONDS`` lost its answer)."""
        taken = [first, *self._events.ready()]  # the rest of a Batch goes out with it
        send, receive = anyio.create_memory_object_stream[events.Event](PULLED_AHEAD)

        async def pull() -> None:
            with send:
                while True:
                    try:
                        event = await self._events.__anext__()
                    except StopAsyncIteration:
                        return
                    for item in (event, *self._events.ready()):
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

    async def _json(self, scope: Scope, receive: Receive, send: Send, final: events.Final) -> None:
        note_answer(scope, final.message)
        body = orjson.dumps(final.message)
        if not replies.reserve(body):
            await gateway_error_response(replies.over_budget(), self._request_id)(scope, receive, send)
            return
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
        await replies.send_body(send, body, more_body=False, start=start)

    def _frame(self, event: events.Event) -> bytes | None:
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
