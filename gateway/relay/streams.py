"""A legacy session's resumable SSE streams, live (L-TR §Resumability and Redelivery).

What is kept, and for how long, is ``gateway.protocol.eventlog``'s (its rules are there);
this module joins it to the connections that read the streams:

- A **stream** (``Stream``) is a request's SSE answer or the session's GET stream. Its
  producer (the request's exchange, or the children's unsolicited messages) ``emit``s each
  message once: it is kept in the log and handed to the one connection that reads the
  stream now (``Reader``), if any. Each message goes on exactly one connection (L-TR
  §Multiple Connections): a newer reader (a resume) supersedes the older one, whose
  response then ends.
- A request stream that nobody reads (the POST's connection was lost or closed, no resume
  attached) starts its ``RESUME_WINDOW``: the call's cancel scope (``producer``) gets that
  deadline, so the call is cancelled at the child (``notifications/cancelled``) when nobody
  resumed in time; a reader that attaches lifts it.
- A request whose client cancelled it is **sealed** (``Stream.seal``; ``seal_request`` when
  its call had ended, its result perhaps not yet read): a resume of its stream gets nothing
  (``Closed``), not even an error, for a request the client has forgotten.
- A session has **one GET stream**. A new ``GET`` opens a new one, and the previous one ends
  (the client may have lost its connection without the gateway knowing); a 2025-11-25 GET
  stream opens with a priming event, so that the connection it replaced can be told apart
  when it reconnects: a resume of a GET stream that is not the session's current one, while
  a connection reads that one, is ``Closed`` too (no two connections take the GET stream from
  each other in turn).
- A request's producer waits while its reader's queue is full (``STREAM_MAX_EVENTS``): the
  call waits for a slow client as it would on its own connection (one that reads nothing is
  reset by the connection's write timeout). The GET stream's producer cannot wait: a reader
  of it whose client reads too slowly is let go (its response ends; the client resumes from
  its last event id).

Process-wide, every session's log shares ``PROCESS_BUDGET`` (``PROCESS_MAX_BYTES``).
"""

from __future__ import annotations

import contextlib
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from gateway.protocol import eventlog
from gateway.protocol.eventlog import Budget, Closed, EventLog, Gone, StreamLog, Unknown
from gateway.protocol.jsonrpc import JsonId

PROCESS_BUDGET = Budget()
"""The bytes every session of this process keeps for resumption (``PROCESS_MAX_BYTES``)."""
STREAM_KEY_BYTES = 12
"""Random bytes in a stream key (96 bits): unguessable, so an id names one stream of one session."""


def _mint_key() -> str:
    return secrets.token_urlsafe(STREAM_KEY_BYTES)


StoredEvent = tuple[int, bytes]
REPLACED = "the session opened a new GET stream"
SEALED = "the client cancelled its request"


def _same_id(kept: JsonId | None, named: JsonId) -> bool:
    """The same JSON-RPC id, with the same JSON type (``7`` is not ``"7"``, nor ``True``)."""
    return type(kept) is type(named) and kept == named


class Reader:
    """The connection reading a stream now: the events it missed first (``replay``), then the
    live ones. ``next()`` → an event, or None when the stream ended or another reader took it."""

    __slots__ = ("_queue", "_replay", "inbox", "opens", "stream")

    def __init__(self, stream: Stream, replay: list[StoredEvent]) -> None:
        self.stream = stream
        self.opens = False  # the first reader of a new GET stream that primes: its priming event goes first
        self._replay = replay
        self.inbox, self._queue = anyio.create_memory_object_stream[StoredEvent](eventlog.STREAM_MAX_EVENTS)

    async def next(self) -> StoredEvent | None:
        if self._replay:
            return self._replay.pop(0)
        try:
            return await self._queue.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return None

    def ready(self) -> list[StoredEvent]:
        """What is waiting already (read together, written in one send)."""
        items, self._replay = self._replay, []
        while True:
            try:
                items.append(self._queue.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                return items

    def detach(self) -> None:
        """This connection is done (left, closed for polling, or ended): the stream waits for a resume."""
        self._queue.close()
        self.inbox.close()
        self.stream.let_go(self)


class Stream:
    __slots__ = ("_streams", "log", "priming", "producer", "reader")

    def __init__(self, streams: SessionStreams, log: StreamLog, *, priming: bool) -> None:
        self._streams = streams
        self.log = log
        self.priming = priming  # a 2025-11-25 request stream opens with its priming event
        self.reader: Reader | None = None
        self.producer: anyio.CancelScope | None = None  # a request's call: the window is its deadline

    @property
    def is_request(self) -> bool:
        return self.log.request_id is not None

    def event_id(self, n: int) -> str:
        return self.log.event_id(n)

    def attach(self, replay: list[StoredEvent]) -> Reader:
        """A new reader (the POST's own connection, or a resume); an older one is let go."""
        old, self.reader = self.reader, Reader(self, replay)
        if old is not None:
            old.inbox.close()  # its response ends after what it holds; the events are in the log
        if self.log.finished:  # its result was sent: the replay is all there is
            self.reader.inbox.close()
            return self.reader
        self.log.unattended_since = None
        if self.producer is not None:
            self.producer.deadline = math.inf
        return self.reader

    def emit(self, data: bytes) -> int:
        """Keep ``data`` and hand it to the reader; its event number."""
        n = self._streams.log.append(self.log, data)
        reader = self.reader
        if reader is not None:
            try:
                reader.inbox.send_nowait((n, data))
            except anyio.WouldBlock:  # reads too slowly: let it go; the client resumes from the log
                reader.inbox.close()
                self.let_go(reader)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                self.let_go(reader)
        return n

    async def put(self, data: bytes) -> int:
        """``emit`` for a request's producer: when its reader's queue is full, wait for room
        (the call waits for a slow client, as it would on its own connection), unless another
        reader takes the stream over meanwhile (the event is in the log, which it replays)."""
        n = self._streams.log.append(self.log, data)
        reader = self.reader
        if reader is not None:
            try:
                reader.inbox.send_nowait((n, data))
            except anyio.WouldBlock:
                # Let go meanwhile (ClosedResourceError): a newer reader replays it from the log.
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    await reader.inbox.send((n, data))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                self.let_go(reader)
        return n

    def finish(self) -> None:
        """Its last event (the result) was emitted: the reader ends after it."""
        self._streams.log.finish(self.log)
        if self.reader is not None:
            self.reader.inbox.close()

    def let_go(self, reader: Reader) -> None:
        if self.reader is not reader:
            return
        self.reader = None
        now = anyio.current_time()
        self.log.unattended_since = now
        if self.producer is not None and not self.log.finished:
            self.producer.deadline = now + self._streams.window

    def seal(self, reason: str) -> None:
        """Its client cancelled the request: a resume of it gets nothing (``Closed``), whatever
        the stream holds or still carries (eventlog rule 5)."""
        self._streams.log.seal(self.log, reason)

    def end(self, reason: str | None = None) -> None:
        """The producer is done. ``reason``: it ended without its result (cancelled), so its
        events go at once and a resume is answered with ``reason``."""
        self.producer = None
        if self.reader is not None:
            self.reader.inbox.close()
        if reason is not None:
            self._streams.log.forget(self.log, reason)


@dataclass(frozen=True, slots=True)
class Lost:
    """A resume the gateway cannot serve for a known request: answer it with an error."""

    request_id: JsonId
    reason: str


class SessionStreams:
    """One legacy session's resumable streams."""

    def __init__(
        self,
        *,
        window: float = eventlog.RESUME_WINDOW,
        mint_key: Callable[[], str] = _mint_key,
        budget: Budget = PROCESS_BUDGET,
    ) -> None:
        self.log = EventLog(budget, on_forget=self._forgotten)
        self.window = window
        self.live: dict[str, Stream] = {}
        self.get_stream: Stream | None = None
        self._mint_key = mint_key

    def _forgotten(self, key: str) -> None:
        """The log gave the stream up: so does the live side; a call still running is
        cancelled (nobody could be given its events exactly once any more)."""
        stream = self.live.pop(key, None)
        if stream is None:
            return
        if stream.producer is not None:
            stream.producer.cancel()
        if stream is self.get_stream:
            self.get_stream = None

    def open_request(self, request_id: JsonId, *, priming: bool) -> Stream:
        self.sweep()
        stream = Stream(self, self.log.open(self._mint_key(), request_id), priming=priming)
        self.live[stream.log.key] = stream
        return stream

    def seal_request(self, request_id: JsonId) -> None:
        """Seal the kept streams of ``request_id`` (its JSON type exact): its client cancelled
        it after its call ended, and may not have had its result yet."""
        for log in [s for s in self.log.streams.values() if _same_id(s.request_id, request_id)]:
            self.log.seal(log, SEALED)

    def open_get(self, *, priming: bool = False) -> Reader:
        """A new GET stream (no ``Last-Event-ID``): the previous one ends. ``priming``: it
        opens with a priming event (a 2025-11-25 session), so its client resumes it by id."""
        self.sweep()
        old = self.get_stream
        if old is not None:
            if old.reader is not None:
                old.reader.inbox.close()
            self.log.forget(old.log, REPLACED)
        self.get_stream = stream = Stream(self, self.log.open(self._mint_key(), None), priming=priming)
        self.live[stream.log.key] = stream
        reader = stream.attach([])
        reader.opens = priming
        return reader

    def resume(self, last_event_id: str, *, priming: bool = False) -> Reader | Lost | Closed | Unknown:
        """The reader of the stream ``last_event_id`` names, replaying what came after it
        (``priming``: as for ``open_get``, when a new GET stream is opened instead)."""
        self.sweep()
        found = self.log.resume(last_event_id)
        if isinstance(found, eventlog.Replay):
            stream = self.live.get(found.stream.key)
            if stream is not None:
                return stream.attach(found.events)
            found = Gone(found.stream.key, found.stream.request_id, "its call ended without a result")
        if isinstance(found, Gone):
            if found.request_id is None and self._read_elsewhere(found.key):
                return Closed(found.key, f"{REPLACED}, which another connection reads")
            stream = self.live.get(found.key)
            if stream is not None:  # its call, if running, is cancelled: nobody can have its events once
                self.log.forget(stream.log, found.reason)
            if found.request_id is None:  # the GET stream: a new one, from now on
                return self.open_get(priming=priming)
            return Lost(found.request_id, found.reason)
        return found

    def _read_elsewhere(self, key: str) -> bool:
        """Whether a connection reads the session's GET stream now, and it is not stream ``key``."""
        current = self.get_stream
        return current is not None and current.log.key != key and current.reader is not None

    def offer(self, data: bytes, *, live: bool = False) -> bool:
        """An unsolicited message for the GET stream: handed to its connection, and kept for a
        resume of it (a GET stream whose connection was cut gets it when the client resumes).
        False when the session has no GET stream (open, or within its window), or the message
        could be neither handed on nor kept. ``live``: only if a connection reads the stream now
        (a child's question: unanswered until a resume, it is better answered by the gateway)."""
        stream = self.get_stream
        if stream is None or stream.log.key not in self.log.streams:
            return False
        delivered = stream.reader is not None
        if live and not delivered:
            return False
        n = stream.emit(data)
        return delivered or n >= stream.log.first_kept

    def sweep(self, now: float | None = None) -> None:
        """Forget the streams nobody read within the window (their calls are cancelled)."""
        self.log.expire(anyio.current_time() if now is None else now, self.window)

    def close(self) -> None:
        for stream in list(self.live.values()):
            if stream.reader is not None:
                stream.reader.inbox.close()
        self.live.clear()
        self.get_stream = None
        self.log.close()
