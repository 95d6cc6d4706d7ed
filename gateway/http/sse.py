"""Server-Sent Events: the one writer of every event stream the gateway sends.

A request's answer streamed (``gateway.http.stream``), an emulated listen
(``gateway.http.listen``) and a legacy session's streams (``gateway.http.resume``) all go
out through this module:

- ``Watch`` tells a response's answer machine (``gateway.protocol.answer``) when its client
  leaves or the gateway drains, and the machine decides whether the body ends (every streamed
  response has one: a request's answer, ``LazyStream``; a listen, a GET stream, a resumed
  stream, ``gateway.http.longstream.LongStream``). The connection pushes its loss
  (``gateway.http.connection.Hangup``): the watch is registered there and no task waits on
  ``receive()``; only under a server without that hook (a test's fake ASGI server, another
  server) is a task started to wait for ``http.disconnect``. ``drain.scopes`` holds it so the
  drain can tell the machine when its budget is spent; a stream that ends at the drain's start
  (a listen, a GET stream) gets one task waiting for that.
- ``SseWriter`` writes the frames: ``data: <one JSON line>`` per event (orjson never writes
  a newline, so that is the whole framing), a ``: keep-alive`` comment while quiet.
- ``pump`` moves events from a source to the writer: it waits for one (a keep-alive comment
  every ``KEEPALIVE_SECONDS`` of quiet), takes what else is ready already, and writes them
  together: several events in one ``http.response.body`` send, up to ``REPLY_CHUNK_BYTES``
  a send.

A legacy session's streams (a request's SSE answer, the GET stream) carry event ids and can be
resumed: ``gateway.http.resume`` writes them, with the helpers here (``id_frame``,
``retry_field``).

A frame over ``REPLY_CHUNK_BYTES`` counts against the process's budget for large replies and
goes out in pieces (``gateway.http.replies``); ``SseWriter.frame`` says when it does not fit.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Final, TypeVar

import anyio
import orjson
from anyio._backends._asyncio import CancelScope as AsyncioCancelScope  # fenced: anyio.CancelScope
from anyio.streams.memory import MemoryObjectReceiveStream
from starlette.types import Receive, Scope, Send

from gateway.http import replies
from gateway.http.connection import HANGUP, Hangup
from gateway.http.drain import DRAIN, Drain
from gateway.protocol import answer
from gateway.protocol.jsonrpc import JsonObject

log = logging.getLogger("gateway.http")

T = TypeVar("T")
# Read on every answer, as module names: a member read from its class costs ~800 instructions
# on Python 3.11 (``gateway.protocol.versions.MODERN``).
_LEGACY, _BUDGET_SPENT = answer.Kind.LEGACY, answer.Event.BUDGET_SPENT
Feed = Callable[[answer.Event], None]
"""Where a watch tells a response's answer machine what happened (``LazyStream``, ``LongStream``)."""

KEEPALIVE_SECONDS: Final = 15.0
"""Idle time after which an event stream gets a comment line, so proxies keep it open."""
KEEPALIVE: Final = b": keep-alive\n\n"
SSE_HEADERS: Final = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
"""``no-cache`` and ``X-Accel-Buffering: no``: proxies must pass each event on as it comes."""
LEGACY_GET_HEADERS: Final = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]
"""A legacy session's GET stream: the headers it has always had."""


def frame(message: JsonObject) -> bytes:
    return b"data: " + orjson.dumps(message) + b"\r\n\r\n"


def id_frame(event_id: str, data: bytes) -> bytes:
    """An event with its id (a legacy session's resumable streams): ``data`` is one JSON line,
    or empty for a priming event (2025-11-25: an id and an empty ``data`` field)."""
    return b"id: " + event_id.encode("ascii") + b"\r\ndata: " + data + b"\r\n\r\n"


def retry_field(milliseconds: int) -> bytes:
    """The ``retry`` field alone: how long the client waits before it reconnects (2025-11-25
    polling streams: sent before the gateway closes the connection, the stream not ended)."""
    return b"retry: %d\r\n\r\n" % milliseconds


class Watch:
    """Tells a response's answer machine (``gateway.protocol.answer``) what happens to it from
    outside while ``run`` runs its body (or, for a ``lean`` watch, within ``with watch:``): the
    connection's loss (``CLIENT_GONE``, or ``WRITE_STALLED`` for a reset for not reading), the
    drain's start (``DRAIN_BEGINS``, watched only for the kinds it ends:
    ``answer.ENDS_ON_DRAIN``) and the spent drain budget
    (``BUDGET_SPENT``). ``feed`` steps the machine and carries out what must be done at once:
    a ``STOP`` ends the body (``stop``: it cancels ``cancel_scope``, the body's scope). The
    watch decides nothing itself.

    While it watches, the watch itself is registered where a cancel scope would be, with the
    connection's ``Hangup`` and in the drain's ``scopes`` (one object for both, and no other made
    per answer): its ``cancel()`` tells the machine what happened. The connection's loss, the
    first time it is lost (it is marked lost before it tells): a reset for not reading
    (``WRITE_STALLED``) or a plain disconnect (``CLIENT_GONE``); else the drain's spent budget
    (``BUDGET_SPENT``), which the drain tells only once.

    A ``LEGACY`` answer outlives its client (L-TR §Sending Messages): without the connection's
    hook no task waits for ``http.disconnect`` for it (the machine would only note it)."""

    __slots__ = (
        "_ends_on_drain",
        "_feed",
        "_loss_told",
        "_receive",
        "_watches_receive",
        "cancel_scope",
        "drain",
        "hangup",
        "lean",
    )

    def __init__(self, scope: Scope, receive: Receive, kind: answer.Kind, feed: Feed) -> None:
        # What ``anyio.CancelScope()`` makes on asyncio, made directly: anyio's finding its
        # backend (through sniffio) for each answer costs ~10k instructions of ~870k a call.
        # Fenced: docs/architecture.md, "Library internals the gateway touches".
        self.cancel_scope: anyio.CancelScope = AsyncioCancelScope()
        drain = scope.get(DRAIN)
        self.drain: Drain | None = drain if isinstance(drain, Drain) else None
        hangup = scope.get(HANGUP)
        self.hangup: Hangup | None = hangup if isinstance(hangup, Hangup) else None
        self._receive = receive
        self._ends_on_drain = self.drain is not None and kind in answer.ENDS_ON_DRAIN
        self._watches_receive = self.hangup is None and kind is not _LEGACY
        self.lean = not (self._watches_receive or self._ends_on_drain)
        """Whether no task need run beside the body (``run`` without ``also``): then the body may
        be awaited in the caller's own frame, under the watch (``with watch:``)."""
        self._feed = feed
        self._loss_told = False

    @property
    def left(self) -> bool:
        """Whether the client's connection is gone (known only where the connection pushes it)."""
        return self.hangup is not None and self.hangup.is_lost

    def stop(self) -> None:
        """End the body (the machine's ``STOP``)."""
        self.cancel_scope.cancel()

    def cancel(self) -> None:
        """Told by the connection's ``Hangup`` or the drain (see the class docstring), as a
        cancel scope registered there would be cancelled: tell the machine what happened."""
        hangup = self.hangup
        if hangup is not None and hangup.is_lost and not self._loss_told:
            self._loss_told = True
            self._feed(answer.Event.WRITE_STALLED if hangup.stalled else answer.Event.CLIENT_GONE)
        else:
            self._feed(_BUDGET_SPENT)

    def __enter__(self) -> Watch:
        """The watch begins: its cancel scope entered, the watch registered with the drain (told
        when the budget is spent) and the connection's ``Hangup``. ``with watch:`` around a body
        awaited in the caller's own frame is ``run`` for a ``lean`` watch, without ``run``'s
        coroutine frame (one fewer on every step of every answer)."""
        scope = self.cancel_scope
        scope.__enter__()
        try:
            if self.drain is not None:
                self.drain.scopes.add(self)
            if self.hangup is not None:
                self.hangup.watch(self)  # a connection lost already tells the machine now
        except BaseException as exc:  # the scope entered here is left here, whatever broke
            if self.drain is not None:
                self.drain.scopes.discard(self)
            scope.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if self.drain is not None:
            self.drain.scopes.discard(self)
        if self.hangup is not None:
            self.hangup.unwatch(self)
        return self.cancel_scope.__exit__(exc_type, exc, tb)

    async def run(self, body: Callable[[], Awaitable[None]], *also: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """``body()`` under the watch; ``also`` run beside it and end with it."""
        with self:
            if self.lean and not also:  # no task: the connection tells the machine when it is lost
                await body()
                return
            drain = self.drain
            async with anyio.create_task_group() as tg:
                if self._watches_receive:
                    tg.start_soon(self._watch_disconnect)
                if self._ends_on_drain:
                    assert drain is not None
                    tg.start_soon(self._watch_drain, drain)
                for task in also:
                    tg.start_soon(task)
                await body()
                tg.cancel_scope.cancel()

    async def _watch_disconnect(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self._feed(answer.Event.CLIENT_GONE)

    async def _watch_drain(self, drain: Drain) -> None:
        await drain.ending.wait()
        self._feed(answer.Event.DRAIN_BEGINS)


class SseWriter:
    """One event stream's body on the wire."""

    __slots__ = ("_send", "ended", "started")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False  # the response's headers are out
        self.ended = False  # the response is complete (a polling stream ends before its call)

    async def start(self, headers: list[tuple[bytes, bytes]], status: int = 200) -> None:
        self.started = True
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    @staticmethod
    def frame(message: JsonObject) -> bytes | None:
        """``message`` as one event, or None when it is large and the budget for large replies
        is spent. A frame returned must be passed to ``write`` (which gives its budget back)."""
        data = frame(message)
        return data if replies.reserve(data) else None

    async def write(self, frames: list[bytes]) -> None:
        """``frames`` (from ``frame``: a large one is reserved) in as few sends as
        ``REPLY_CHUNK_BYTES`` allows, a large one in pieces."""
        if len(frames) == 1:  # the common case
            await replies.send_body(self._send, frames[0], more_body=True)
            return
        pending: list[bytes] = []
        size = 0
        sent = 0
        try:
            for sent, data in enumerate(frames, 1):  # noqa: B007 - read in finally
                if len(data) > replies.REPLY_CHUNK_BYTES:
                    if pending:
                        await self._body(b"".join(pending))
                        pending, size = [], 0
                    await replies.send_body(self._send, data, more_body=True)
                    continue
                pending.append(data)
                size += len(data)
                if size >= replies.REPLY_CHUNK_BYTES:
                    await self._body(b"".join(pending))
                    pending, size = [], 0
            if pending:
                await self._body(b"".join(pending))
        finally:  # cancelled mid-batch: what was reserved and not handed to send_body goes back
            for data in frames[sent:]:
                if len(data) > replies.REPLY_CHUNK_BYTES:
                    replies.BUDGET.give_back(len(data))

    async def write_message(self, message: JsonObject) -> None:
        """One event the gateway itself must send (an acknowledgement, a graceful or shutdown
        end): under the budget like any other, but sent whole when the budget is spent."""
        data = frame(message)
        if replies.reserve(data):
            await self.write([data])
        else:
            await self._body(data)

    async def keepalive(self) -> None:
        await self._body(KEEPALIVE)

    async def write_frame(self, data: bytes) -> None:
        """One frame already made: under the budget like any other, sent whole when it is spent."""
        if replies.reserve(data):
            await self.write([data])
        else:
            await self._body(data)

    async def end(self) -> None:
        if self.ended:
            return
        self.ended = True
        await self._send({"type": "http.response.body", "body": b""})

    async def _body(self, data: bytes) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": True})


async def pump(
    writer: SseWriter,
    next_event: Callable[[], Awaitable[T]],
    ready: Callable[[], list[T]] | None,
    encode: Callable[[T], bytes | None],
    is_last: Callable[[T], bool] | None = None,
    *,
    taken: Sequence[T] = (),
    keepalive: float = KEEPALIVE_SECONDS,
) -> T | None:
    """Write events from ``next_event()`` until it ends (``StopAsyncIteration`` or
    ``anyio.EndOfStream``: returns None) or an event ``is_last`` was written (returns it).
    ``taken``: events taken already, written first. ``ready()`` gives the events queued
    already, written in the same send; ``encode`` gives an event's frame (None: skip it)."""
    batch = list(taken)
    while True:
        if not batch:
            with anyio.move_on_after(keepalive) as idle:
                try:
                    batch.append(await next_event())
                except (StopAsyncIteration, anyio.EndOfStream):
                    return None
            if idle.cancelled_caught:
                await writer.keepalive()
                continue
        if ready is not None and not (is_last is not None and is_last(batch[-1])):
            batch.extend(ready())
        frames: list[bytes] = []
        last: T | None = None
        for event in batch:
            data = encode(event)
            if data is not None:
                frames.append(data)
            if is_last is not None and is_last(event):
                last = event
                break
        batch = []
        if frames:
            await writer.write(frames)
        if last is not None:
            return last


def ready_from(stream: MemoryObjectReceiveStream[T]) -> Callable[[], list[T]]:
    """What a memory stream holds already, without waiting."""

    def ready() -> list[T]:
        items: list[T] = []
        while True:
            try:
                items.append(stream.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                return items

    return ready


def json_frame(message: JsonObject) -> bytes | None:
    """A notification's frame; a large one over the budget is dropped (logged)."""
    data = SseWriter.frame(message)
    if data is None:
        log.warning("a %d-byte %s not sent: reply budget spent", len(frame(message)), message.get("method"))
    return data
