"""A legacy session's resumable SSE streams on the wire (L-TR §Resumability and Redelivery;
what is kept and for how long: ``gateway.protocol.eventlog``, the live side:
``gateway.relay.streams``).

- ``Resumable.run``: a legacy request answered on SSE. Its exchange's events are *produced*
  into the session's stream by the POST's own task (``produce``: each kept, with its id, and
  handed to the connection that reads the stream now), and *delivered* by a second task to
  the POST's connection (``deliver``). The two are apart so that the call goes on when that
  connection is gone (a disconnect is not a cancellation), when a resume (``GET`` +
  ``Last-Event-ID``) reads the stream instead, and when the gateway closes the connection of
  a polling stream. A 2025-11-25 stream starts with its priming event (an id, empty data).
- ``deliver``: one connection's share of a stream: the events it missed first (a resume),
  then the live ones, ``: keep-alive`` while quiet, until the stream ends, another
  connection takes it, the client leaves, or (polling, ``poll_seconds``) the gateway closes
  it after a ``retry`` field, the stream not ended.
- ``EventStream``: a legacy session's GET stream (its unsolicited messages), new or resumed;
  a new one of a 2025-11-25 session opens with a priming event.
- ``ResumedStream``: the answer to a resume of a request stream (200 ``text/event-stream``).
  It and the GET stream are ``gateway.http.longstream.LongStream``s: their answer machine
  (``gateway.protocol.answer``, kinds ``RESUMED`` and ``GET_STREAM``) decides their end.
  ``LostStream``: the answer to a resume of a request stream whose events were not kept,
  or whose call was cancelled for want of a client: one event, the request's error
  response (-31005, ``data.stream = "lost"``), so the client's request ends clearly.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

import anyio
import orjson
from starlette.types import Receive, Scope, Send

from gateway.errors import CODE_CANCELLED
from gateway.http import replies
from gateway.http.longstream import LongStream
from gateway.http.sse import (
    KEEPALIVE_SECONDS,
    LEGACY_GET_HEADERS,
    SSE_HEADERS,
    SseWriter,
    Watch,
    id_frame,
    retry_field,
)
from gateway.protocol.answer import Kind
from gateway.protocol.eventlog import PRIMING
from gateway.protocol.jsonrpc import JsonId, error_object
from gateway.relay import events
from gateway.relay.streams import SEALED, Lost, Reader, SessionStreams, Stream

log = logging.getLogger("gateway.http")

POLL_RETRY_MS: Final = 500
"""The ``retry`` hint sent before the gateway closes a polling stream's connection: the client
waits this long before it resumes (the call's events wait in its stream meanwhile)."""
ABANDONED: Final = "nobody resumed its stream in time, so the call was cancelled at the server"
CANCELLED: Final = "the call was cancelled before its result"


async def deliver(
    writer: SseWriter,
    reader: Reader,
    is_over: Callable[[], bool],
    *,
    poll_seconds: float = 0.0,
    keepalive: float = KEEPALIVE_SECONDS,
) -> None:
    """Write ``reader``'s events to this connection (see the module docstring) until
    ``is_over()`` (the connection's end is decided: its client left, the drain ended it); it
    lets the stream go when it returns, so the stream waits for a resume."""
    stream = reader.stream
    closes_at = anyio.current_time() + poll_seconds if poll_seconds > 0 else math.inf
    try:
        while True:
            batch = reader.ready()  # what is waiting already: no timer needed
            idle = False
            if not batch:
                wait = min(keepalive, closes_at - anyio.current_time())
                with anyio.move_on_after(max(wait, 0.0)) as timer:
                    got = await reader.next()  # a memory stream: a timeout loses nothing
                    if got is None:
                        return  # ended, or another connection reads it now
                    batch = [got, *reader.ready()]
                idle = timer.cancelled_caught
            if is_over():
                return  # what it took is kept: the client resumes from the last event it had
            if batch and not idle:
                await _write(writer, [id_frame(stream.event_id(n), data) for n, data in batch])
            if anyio.current_time() >= closes_at:  # a polling stream: the connection closes, not the stream
                await writer.write_frame(retry_field(POLL_RETRY_MS))
                await writer.end()
                return
            if idle:
                await writer.keepalive()
    finally:
        reader.detach()


async def _write(writer: SseWriter, frames: list[bytes]) -> None:
    """``frames`` in as few sends as they allow; a large one over the reply budget goes whole."""
    pending: list[bytes] = []
    for data in frames:
        if replies.reserve(data):
            pending.append(data)
            continue
        if pending:
            await writer.write(pending)
            pending = []
        await writer.write_frame(data)
    if pending:
        await writer.write(pending)


class Producer(Protocol):
    """What ``produce`` reads: ``gateway.http.stream.Unbatched``."""

    async def __anext__(self) -> events.RelayEvent: ...

    def ready(self) -> list[events.RelayEvent]: ...


async def produce(exchange: Producer, first: events.RelayEvent, stream: Stream) -> events.RelayEvent | None:
    """Keep and hand on the exchange's events up to its ``Final`` (returned; None: none came)."""
    event = first
    while True:
        for item in (event, *exchange.ready()):
            await stream.put(orjson.dumps(item.message))
            if type(item) is events.Final:
                stream.finish()
                return item
        try:
            event = await exchange.__anext__()
        except StopAsyncIteration:
            return None


@dataclass(slots=True)
class Resumable:
    """A legacy request whose SSE answer can be resumed: its session's streams, whether it
    opens with a priming event (2025-11-25), and the polling setting (0: off)."""

    streams: SessionStreams
    request_id: JsonId
    priming: bool
    poll_seconds: float = 0.0
    keepalive: float = KEEPALIVE_SECONDS
    stream: Stream | None = field(default=None, init=False)  # once ``run`` opened it

    def seal(self) -> None:
        """The client cancelled the request: a resume of its stream gets nothing (405)."""
        if self.stream is not None:
            self.stream.seal(SEALED)

    async def run(
        self,
        writer: SseWriter,
        exchange: Producer,
        first: events.RelayEvent,
        watch: Watch,
        headers: list[tuple[bytes, bytes]],
    ) -> events.RelayEvent | None:
        """Open the stream (headers, the priming event), then produce and deliver; the ``Final``
        (None: the call ended without one)."""
        stream = self.stream = self.streams.open_request(self.request_id, priming=self.priming)
        stream.producer = watch.cancel_scope  # the resume window becomes its deadline when nobody reads
        reader = stream.attach([])
        final: events.RelayEvent | None = None
        try:
            await writer.start(headers)
            if self.priming:
                await writer.write_frame(id_frame(stream.event_id(PRIMING), b""))
            poll = self.poll_seconds if self.priming else 0.0  # polling streams exist from 2025-11-25
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._deliver, writer, reader, watch, poll)
                final = await produce(exchange, first, stream)
        finally:
            reader.detach()  # if deliver never ran
            if final is not None:
                stream.end()
            else:
                abandoned = watch.cancel_scope.deadline <= anyio.current_time()
                if abandoned:
                    log.info("a legacy call's stream was not resumed in time: the call was cancelled")
                stream.end(ABANDONED if abandoned else CANCELLED)
        return final

    async def _deliver(self, writer: SseWriter, reader: Reader, watch: Watch, poll: float) -> None:
        """Deliver to the POST's own connection; its loss ends this delivery at once (the
        connection pushes it), so the resume window starts then, not at the next event."""
        hangup = watch.hangup
        with anyio.CancelScope() as scope:
            if hangup is not None:
                hangup.watch(scope)  # only this delivery ends: the call goes on (its machine is told apart)
            try:
                await deliver(writer, reader, lambda: watch.left, poll_seconds=poll, keepalive=self.keepalive)
            finally:
                if hangup is not None:
                    hangup.unwatch(scope)


class ResumedStream:
    """The answer to a resume (``GET`` + ``Last-Event-ID``) of a request stream (kind ``RESUMED``)."""

    def __init__(self, reader: Reader, *, poll_seconds: float = 0.0) -> None:
        self.reader = reader
        self.poll_seconds = poll_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = LongStream(Kind.RESUMED, scope, receive, send)
        reader = self.reader

        async def opening(writer: SseWriter) -> None:
            await writer.start(list(SSE_HEADERS))

        async def source(writer: SseWriter) -> None:
            await deliver(writer, reader, stream.is_over, poll_seconds=self.poll_seconds)

        try:
            await stream.run(opening, source)
        finally:
            reader.detach()


class LostStream:
    """The answer to a resume the gateway cannot serve for a known request: its error response."""

    def __init__(self, lost: Lost) -> None:
        self.lost = lost

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        error = error_object(
            CODE_CANCELLED,
            f"the request's stream cannot be resumed: {self.lost.reason}",
            {"stream": "lost"},
        )
        message = {"jsonrpc": "2.0", "id": self.lost.request_id, "error": error}
        writer = SseWriter(send)
        await writer.start(list(SSE_HEADERS))
        await writer.write_frame(b"data: " + orjson.dumps(message) + b"\r\n\r\n")
        await writer.end()


class EventStream:
    """A legacy session's GET stream: ``200 text/event-stream``, the session's unsolicited
    messages as they come (each with its id; a resume replays the ones missed first), a
    keep-alive comment while quiet. A new one of a 2025-11-25 session opens with a priming
    event, so that a client whose GET stream another GET replaced resumes it by id, and is
    told it is over (``SessionStreams.resume``) rather than replacing the newer one. It ends
    after ``max_seconds`` (the client reconnects), when the client leaves, when the session
    opens another GET stream or ends, and when the gateway drains (the stream carries no
    request the drain could wait for): its answer machine decides which (kind ``GET_STREAM``)."""

    def __init__(self, reader: Reader, *, max_seconds: float, keepalive: float = KEEPALIVE_SECONDS) -> None:
        self._reader = reader
        self._max_seconds = max_seconds
        self._keepalive = keepalive

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = LongStream(Kind.GET_STREAM, scope, receive, send)
        reader = self._reader

        async def opening(writer: SseWriter) -> None:
            await writer.start(list(LEGACY_GET_HEADERS))
            if reader.opens:  # its id tells this connection's resume from a newer GET's
                await writer.write_frame(id_frame(reader.stream.event_id(PRIMING), b""))

        async def source(writer: SseWriter) -> None:
            await deliver(writer, reader, stream.is_over, keepalive=self._keepalive)

        try:
            await stream.run(opening, source, lifetime=self._max_seconds)
        finally:
            reader.detach()
