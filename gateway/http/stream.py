"""The answer to one request: JSON if the final response comes first, else SSE.

``LazyStream(events)`` is an ASGI response. It waits for the first message from the relay:

- the final response (it has an ``id`` and no ``method``) → ``application/json``, one
  object: 200, or the status ``error_statuses`` maps its error code to;
- a notification → ``200 text/event-stream`` opened now (so every 4xx/503 was decided
  before a byte went out), then one ``data:`` event per message, the final response last;
  ``X-Accel-Buffering: no`` and ``Cache-Control: no-cache`` so proxies do not hold events
  back; a ``:`` comment every ``KEEPALIVE_SECONDS`` while the child is quiet.

While it waits and while it streams it listens for ``http.disconnect``; a disconnect
closes the iterator. For a modern client that iterator is the relay's exchange itself, so
the child is sent ``notifications/cancelled``. A legacy client's disconnect is **not** a
cancellation (L-TR §Sending Messages: "SHOULD NOT"), so the HTTP edge hands legacy
exchanges to ``Detached``: the exchange runs in a background task and the response only
reads from it; when the reader goes away the exchange finishes and its result is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from typing import Any, Final

import anyio
import orjson
from sse_starlette.event import ServerSentEvent
from starlette.types import Receive, Scope, Send

from gateway.errors import GatewayUnavailableError
from gateway.http.drain import SHUTTING_DOWN, Drain
from gateway.http.observe import note_answer, note_cancelled
from gateway.http.wire import gateway_error_response, rejection_response
from gateway.protocol.jsonrpc import JsonObject
from gateway.relay import Rejected

log = logging.getLogger("gateway.http")

DETACHED_BUFFER: Final = 256
"""Messages a background (legacy) exchange may queue ahead of a slow reader."""
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
    ) -> None:
        self._events = events
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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        drain: Drain | None = scope.get("gateway.drain")
        async with anyio.create_task_group() as tg:

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
        shut_down = drain is not None and drain.cancel.is_set()
        with anyio.CancelScope(shield=True):
            await self._events.aclose()  # type: ignore[attr-defined]
            if self._ended_gracefully and self._started and not self._finished and self._graceful_end is not None:
                self._finished = True
                await self._send_event(send, self._graceful_end)
                await send({"type": "http.response.body", "body": b""})
            elif shut_down and not self._finished:
                await self._shutdown_answer(scope, receive, send)
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
        except StopAsyncIteration:  # pragma: no cover - the relay always yields a final response
            log.error("relay ended without a response")
            return
        if _is_final(first):
            note_answer(scope, first)
            body = orjson.dumps(first)
            error = first.get("error")
            code = error.get("code") if isinstance(error, dict) else None
            self._started = self._finished = True
            await send(
                {
                    "type": "http.response.start",
                    "status": self._error_statuses.get(code, 200) if type(code) is int else 200,
                    "headers": [(b"content-type", b"application/json"), *self._headers],
                }
            )
            await send({"type": "http.response.body", "body": body})
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

    @staticmethod
    async def _send_event(send: Send, message: JsonObject) -> None:
        data = ServerSentEvent(data=orjson.dumps(message).decode()).encode()
        await send({"type": "http.response.body", "body": data, "more_body": True})


class Detached:
    """Runs an exchange in a background task; iterating reads what it produced.

    Used for legacy clients, whose disconnect must not cancel the child's work. ``scope``
    cancels the exchange itself (a POSTed ``notifications/cancelled`` or a session DELETE);
    the reader then gets ``on_cancel()`` as the final response, so every request still
    gets exactly one answer.
    """

    def __init__(self, events: AsyncIterator[JsonObject], on_cancel: Callable[[], JsonObject]) -> None:
        self.scope = anyio.CancelScope()
        self._events = events
        self._on_cancel = on_cancel
        self._failure: GatewayUnavailableError | Rejected | None = None
        self._send, self._receive = anyio.create_memory_object_stream[JsonObject](DETACHED_BUFFER)

    async def run(self) -> None:
        try:
            await self._run()
        finally:  # also when the app's task group is cancelled (shutdown): no unclosed stream
            self._send.close()

    async def _run(self) -> None:
        final_sent = False
        try:
            with self.scope:
                async with aclosing(self._events):  # type: ignore[type-var]
                    async for message in self._events:
                        final_sent = _is_final(message)
                        self._offer(message, final=final_sent)
        except (GatewayUnavailableError, Rejected) as exc:
            # Raised before the exchange produced anything (saturated pool, a refused
            # request): the reader re-raises it, so the client gets its status (503, 400).
            self._failure = exc
            final_sent = True
        if not final_sent:
            self._offer(self._on_cancel(), final=True)

    def _offer(self, message: JsonObject, *, final: bool) -> None:
        try:
            self._send.send_nowait(message)
        except anyio.WouldBlock:
            if final:  # a slow reader still gets its answer: make room by dropping progress
                while True:
                    try:
                        self._receive.receive_nowait()
                    except anyio.WouldBlock:
                        break
                self._send.send_nowait(message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the client left; the child's work goes on and its answer is dropped

    def __aiter__(self) -> Detached:
        return self

    async def __anext__(self) -> JsonObject:
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            if self._failure is not None:
                raise self._failure from None
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._receive.close()
