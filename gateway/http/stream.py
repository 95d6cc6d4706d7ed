"""The answer to one request: JSON if the final response comes first, else SSE.

``LazyStream(events)`` is an ASGI response. It waits for the first message from the relay:

- the final response (it has an ``id`` and no ``method``) → ``application/json``, one
  object: 200, or the status ``error_statuses`` maps its error code to;
- a notification → ``200 text/event-stream`` opened now (so every 4xx/503 was decided
  before a byte went out), then one ``data:`` event per message, the final response last;
  ``X-Accel-Buffering: no`` and ``Cache-Control: no-cache`` so proxies do not hold events
  back; a ``:`` comment every ``KEEPALIVE_SECONDS`` while the child is quiet.

A body over 64 KiB (a large JSON answer or SSE event) goes out in pieces, under the
process's budget for large replies (``gateway.http.replies``); a client that stops reading is
reset by the connection's write timeout (``gateway.http.connection``).

While it waits and while it streams it listens for ``http.disconnect``; a disconnect
closes the iterator. For a modern client that iterator is the relay's exchange itself, so
the child is sent ``notifications/cancelled``. A legacy client's disconnect is **not** a
cancellation (L-TR §Sending Messages: "SHOULD NOT"), so the HTTP edge hands legacy
exchanges to ``Detached``: the exchange runs in a background task and the response only
reads from it; when the reader goes away the exchange finishes and its result is dropped.

A request the client cancelled (a legacy ``notifications/cancelled``, or a modern one that
``cancel()`` names) gets no answer: its event stream ends without a final response, or,
when nothing was sent yet, the answer is an SSE stream that ends at once (a POSTed request
must be answered with JSON or SSE, and JSON would need a response object).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from typing import Any, Final

import anyio
import orjson
from starlette.types import Receive, Scope, Send

from gateway.errors import GatewayUnavailableError
from gateway.http import replies
from gateway.http.connection import WRITE_TIMED_OUT
from gateway.http.drain import SHUTTING_DOWN, Drain
from gateway.http.inflight import InFlight
from gateway.http.observe import note_answer, note_cancelled
from gateway.http.wire import gateway_error_response, rejection_response
from gateway.protocol.jsonrpc import JsonObject
from gateway.relay.exchange import Rejected
from gateway.relay.inbox import Inbox, progress_key
from gateway.relay.sessions import CancelHandle

log = logging.getLogger("gateway.http")

KEEPALIVE_SECONDS: Final = 15.0
"""Idle time after which an SSE stream gets a comment line, so proxies keep it open."""

SSE_HEADERS: Final = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def _is_final(message: JsonObject) -> bool:
    return "id" in message and "method" not in message


class LazyStream:
    def __init__(
        self,
        events: AsyncIterator[JsonObject],
        *,
        request_id: Any = None,
        headers: list[tuple[bytes, bytes]] | None = None,
        error_statuses: Mapping[int, int] | None = None,
        graceful_end: JsonObject | None = None,
        in_flight: InFlight | None = None,
        principal: str | None = None,
        on_stalled: Callable[[], None] | None = None,
    ) -> None:
        self._events = events
        # Where a POSTed notifications/cancelled finds this request (modern requests only).
        self._in_flight = in_flight
        self._principal = principal
        self._scope: anyio.CancelScope | None = None
        self._cancelled = False  # by the client's notifications/cancelled: no answer follows
        # The connection was aborted for not reading (``WRITE_TIMED_OUT``): a legacy exchange,
        # which a disconnect leaves running, is cancelled with this.
        self._on_stalled = on_stalled
        # A forwarded subscriptions/listen: when the gateway drains, the stream ends with this
        # (the graceful result) at once, instead of waiting out the drain budget.
        self._graceful_end = graceful_end
        self._ended_gracefully = False
        self._request_id = request_id
        self._started = False  # response headers sent
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
        if self._scope is not None:
            self._scope.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._in_flight is None:
            await self._call(scope, receive, send)
            return
        with self._in_flight.track(self._principal, self._request_id, self):
            await self._call(scope, receive, send)

    async def _call(self, scope: Scope, receive: Receive, send: Send) -> None:
        drain: Drain | None = scope.get("gateway.drain")
        async with anyio.create_task_group() as tg:
            self._scope = tg.cancel_scope

            async def watch_disconnect() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(watch_disconnect)
            if drain is not None and self._graceful_end is not None:

                async def watch_drain() -> None:
                    assert drain is not None
                    await drain.ending.wait()
                    self._ended_gracefully = True
                    tg.cancel_scope.cancel()

                tg.start_soon(watch_drain)
            # The drain cancels this scope when its budget runs out (no watcher task per request).
            if drain is not None:
                drain.scopes.add(tg.cancel_scope)
            try:
                await self._respond(scope, receive, send)
            finally:
                tg.cancel_scope.cancel()
                if drain is not None:
                    drain.scopes.discard(tg.cancel_scope)
        if self._on_stalled is not None and scope.get(WRITE_TIMED_OUT):
            self._on_stalled()
        shut_down = drain is not None and drain.cancel.is_set()
        with anyio.CancelScope(shield=True):
            await self._events.aclose()  # type: ignore[attr-defined]
            if self._ended_gracefully and self._started and not self._finished and self._graceful_end is not None:
                self._finished = True
                await self._send_event(send, self._graceful_end)
                await send({"type": "http.response.body", "body": b""})
            elif shut_down and not self._finished:
                await self._shutdown_answer(scope, receive, send)
            elif self._cancelled and not self._finished:
                note_cancelled(scope)  # by the client's notifications/cancelled: no answer
                self._finished = True
                if not self._started:
                    await send(
                        {"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *self._headers]}
                    )
                await send({"type": "http.response.body", "body": b""})
            elif not self._finished:
                note_cancelled(scope)  # the client left first (for a modern one, the child was told)

    async def _shutdown_answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The drain budget ran out: end this request with a clear error, not a dropped connection."""
        error = GatewayUnavailableError(SHUTTING_DOWN, retry_after=5)
        note_answer(scope, {"error": error.error_object()})
        if not self._started:
            await gateway_error_response(error, self._request_id)(scope, receive, send)
            return
        final = {"jsonrpc": "2.0", "id": self._request_id, "error": error.error_object()}
        await self._send_event(send, final)
        await send({"type": "http.response.body", "body": b""})

    async def _respond(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            first = await self._events.__anext__()
        except GatewayUnavailableError as exc:
            self._started = self._finished = True
            await gateway_error_response(exc, self._request_id)(scope, receive, send)
            return
        except Rejected as exc:
            self._started = self._finished = True
            await rejection_response(exc.rejection)(scope, receive, send)
            return
        except StopAsyncIteration:
            # Cancelled by the client before any answer: a cancelled request gets none, so
            # the answer is an event stream that ends at once, with no message in it.
            note_cancelled(scope)
            self._started = self._finished = True
            await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *self._headers]})
            await send({"type": "http.response.body", "body": b""})
            return
        if _is_final(first):
            note_answer(scope, first)
            body = orjson.dumps(first)
            self._started = self._finished = True
            if not replies.reserve(body):
                await gateway_error_response(replies.over_budget(), self._request_id)(scope, receive, send)
                return
            error = first.get("error")
            code = error.get("code") if isinstance(error, dict) else None
            start = {
                "type": "http.response.start",
                "status": self._error_statuses.get(code, 200) if type(code) is int else 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(body)),
                    *self._headers,
                ],
            }
            await replies.send_body(send, body, more_body=False, start=start)
            return
        self._started = True
        await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *self._headers]})
        await self._send_event(send, first)
        while True:
            with anyio.move_on_after(KEEPALIVE_SECONDS) as idle:
                try:
                    message = await self._events.__anext__()
                except StopAsyncIteration:
                    break
            if idle.cancelled_caught:
                await send({"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True})
                continue
            await self._send_event(send, message)
            if _is_final(message):
                note_answer(scope, message)
                self._finished = True
                break
        await send({"type": "http.response.body", "body": b""})
        self._finished = True

    async def _send_event(self, send: Send, message: JsonObject) -> None:
        # One ``data:`` line: orjson never writes a newline, so this is the whole SSE framing.
        frame = b"data: " + orjson.dumps(message) + b"\r\n\r\n"
        if not replies.reserve(frame):
            if not _is_final(message):
                log.warning("a %d-byte %s not sent: reply budget spent", len(frame), message.get("method"))
                return
            error = {"jsonrpc": "2.0", "id": self._request_id, "error": replies.over_budget().error_object()}
            frame = b"data: " + orjson.dumps(error) + b"\r\n\r\n"
        await replies.send_body(send, frame, more_body=True)


class Detached:
    """Runs an exchange in a background task; iterating reads what it produced.

    Used for legacy clients, whose disconnect must not cancel the child's work. ``handle``
    cancels the exchange itself: after the client's own ``notifications/cancelled`` the
    reader gets no final response (the stream just ends: a cancelled request is not
    answered); after a session DELETE it gets ``on_cancel()`` as the final response.
    """

    def __init__(self, events: AsyncIterator[JsonObject], on_cancel: Callable[[], JsonObject]) -> None:
        self.handle = CancelHandle()
        self._events = events
        self._on_cancel = on_cancel
        self._failure: GatewayUnavailableError | Rejected | None = None
        # What the exchange produced ahead of a slow reader: progress may be coalesced past a
        # bound, every other message (and the final answer) is kept (``gateway.stdio.inbox``).
        self._inbox: Inbox[JsonObject] = Inbox()

    async def run(self) -> None:
        try:
            await self._run()
        finally:  # also when the app's task group is cancelled (shutdown): the reader ends
            self._inbox.close()

    async def _run(self) -> None:
        final_sent = False
        try:
            with self.handle.scope:
                async with aclosing(self._events):  # type: ignore[type-var]
                    async for message in self._events:
                        final_sent = _is_final(message)
                        key = progress_key(message.get("method", ""), message.get("params"))
                        self._inbox.put(message, key, always=final_sent)
        except (GatewayUnavailableError, Rejected) as exc:
            # Raised before the exchange produced anything (saturated pool, a refused
            # request): the reader re-raises it, so the client gets its status (503, 400).
            self._failure = exc
            final_sent = True
        if not final_sent and self.handle.reply:
            self._inbox.put(self._on_cancel(), always=True)

    def __aiter__(self) -> Detached:
        return self

    async def __anext__(self) -> JsonObject:
        try:
            return await self._inbox.get()
        except anyio.EndOfStream:
            if self._failure is not None:
                raise self._failure from None
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._inbox.close_reader()  # the client left; the child's work goes on and its answer is dropped
