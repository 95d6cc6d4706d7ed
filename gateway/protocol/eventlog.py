"""The events a legacy session's SSE streams keep for resumption, as pure bookkeeping
(L-TR §Resumability and Redelivery).

Rules:

1. **Ids.** Every event on a legacy session's stream (a request's SSE answer, the session's
   GET stream) has the id ``<stream key>.<n>``. The key is minted per stream (random, passed
   in), so it names the stream and no two streams share one; ``n`` counts that stream's
   events from 1 (``0`` is a 2025-11-25 request stream's priming event, which carries no
   message). Ids are therefore unique across the session's streams and never reused.
2. **Resume.** A ``Last-Event-ID`` is looked up only among this session's streams
   (``resume``): ``Replay`` with the events after ``n`` when every one of them is still kept;
   ``Gone`` when the stream is known (or was, ``MAX_TOMBSTONES``) but events after ``n`` were
   dropped; ``Unknown`` otherwise (malformed, another session's, never sent, forgotten).
3. **Retention** (oldest first, and never another session's events):

   - per stream: at most ``STREAM_MAX_EVENTS`` events and ``STREAM_MAX_BYTES``;
   - per session: at most ``SESSION_MAX_BYTES`` in all its streams, and at most
     ``SESSION_MAX_FINISHED`` finished streams; an append over the bytes first drops this
     session's finished streams (oldest first), then the oldest events of the stream
     appended to;
   - per process: ``Budget`` (``PROCESS_MAX_BYTES``); an append over it sheds this session's
     own events the same way, and an event that still does not fit is not kept (its
     stream's replay then starts after it).

   A dropped event moves its stream's ``first_kept``: a resume from before it is ``Gone``.
4. **Forgetting.** A stream nobody reads (``unattended``) is forgotten ``window`` seconds
   later (``expire``; the clock is passed in): its events are dropped and a tombstone keeps
   its request id, so that a late resume is answered for that request (the HTTP edge cancels
   a call still running at that moment).
5. **Sealing.** A request stream whose client cancelled the request is sealed (``seal``): it
   is forgotten at once, and a resume of it is ``Closed``: nothing is replayed, and nothing
   is answered for a request the client has given up (cancellation: the receiver SHOULD NOT
   respond; a client that resumed the stream would get a response for an id it forgot).

Imports: standard library, ``gateway.protocol.jsonrpc`` and ``.versions`` only. No clock, no randomness.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from gateway.protocol import versions
from gateway.protocol.jsonrpc import JsonId

STREAM_MAX_EVENTS: Final = 1024
"""Events one stream keeps for a resume: a long call's progress at 2 a second for 8 minutes."""
STREAM_MAX_BYTES: Final = 1024 * 1024
"""Bytes one stream keeps (a large result counts whole; one over this is not kept)."""
SESSION_MAX_BYTES: Final = 4 * 1024 * 1024
"""Bytes all the streams of one session keep."""
SESSION_MAX_FINISHED: Final = 32
"""Finished streams (their result sent) one session keeps for a late resume."""
PROCESS_MAX_BYTES: Final = 128 * 1024 * 1024
"""Bytes all the sessions of one gateway process keep for resumption."""
MAX_TOMBSTONES: Final = 64
"""Forgotten streams one session still recognises, to answer a late resume clearly."""
RESUME_WINDOW: Final = 60.0
"""Seconds a stream nobody reads is kept (its call running): then the call is cancelled at the
child and its events are dropped. Enough for a client's reconnect backoff (the TypeScript SDK
waits 1 s, then 1.5 s, up to 30 s) and a proxy's or a polling stream's reconnect."""
PRIMING: Final = 0
"""The event number of a request stream's priming event (an id, no message)."""
PRIMING_SINCE: Final = "2025-11-25"
"""The first revision whose request streams open with a priming event (older clients may
choke on an event with empty data) and may be polling streams."""
MAX_EVENT_ID_CHARS: Final = 128
"""Longest ``Last-Event-ID`` parsed: ours are about 30 characters."""


@dataclass
class Budget:
    """The bytes a whole process keeps, shared by every session's log."""

    limit: int = PROCESS_MAX_BYTES
    used: int = 0


@dataclass(eq=False)
class StreamLog:
    """One stream's kept events: ``(n, message bytes)``, oldest first."""

    key: str
    request_id: JsonId | None  # None: the session's GET stream
    events: deque[tuple[int, bytes]] = field(default_factory=deque)
    size: int = 0
    next_n: int = 1
    first_kept: int = 1  # the oldest event a resume can still get
    finished: bool = False  # its last event (the result) is in
    unattended_since: float | None = None  # nobody reads it since then

    def event_id(self, n: int) -> str:
        return f"{self.key}.{n}"

    def after(self, n: int) -> list[tuple[int, bytes]]:
        return [event for event in self.events if event[0] > n]


@dataclass(frozen=True, slots=True)
class Replay:
    """Resume ``stream``: ``events`` (after the client's last) first, then its live ones."""

    stream: StreamLog
    events: list[tuple[int, bytes]]


@dataclass(frozen=True, slots=True)
class Gone:
    """The stream was this session's, but what came after the client's last event was not kept."""

    key: str
    request_id: JsonId | None
    reason: str


@dataclass(frozen=True, slots=True)
class Closed:
    """The stream was sealed: nothing more is said on it (rule 5)."""

    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class Unknown:
    reason: str


PRIMING_VERSIONS: Final = frozenset(versions.ALL_VERSIONS[versions.rank(PRIMING_SINCE) :])
"""The versions ranked ``PRIMING_SINCE`` or later (each legacy request asks ``primes``)."""


def primes(version: str) -> bool:
    """Whether a session of ``version`` gets priming events and polling streams."""
    if version in PRIMING_VERSIONS:
        return True
    versions.rank(version)  # an unknown version raises ValueError, as ranking both always did
    return False


def parse_event_id(text: str) -> tuple[str, int] | None:
    """``(stream key, n)`` of an id of ours, or None."""
    if len(text) > MAX_EVENT_ID_CHARS:
        return None
    key, dot, number = text.rpartition(".")
    if not dot or not key or not number.isdigit() or not number.isascii():
        return None
    return key, int(number)


class EventLog:
    """One session's streams and their kept events (the rules are in the module docstring)."""

    def __init__(
        self,
        budget: Budget,
        *,
        stream_max_events: int = STREAM_MAX_EVENTS,
        stream_max_bytes: int = STREAM_MAX_BYTES,
        session_max_bytes: int = SESSION_MAX_BYTES,
        max_finished: int = SESSION_MAX_FINISHED,
        on_forget: Callable[[str], None] | None = None,
    ) -> None:
        self.budget = budget
        self.on_forget = on_forget  # told each stream key forgotten (the live side lets it go)
        self.streams: OrderedDict[str, StreamLog] = OrderedDict()  # oldest first
        # stream key → (request id, why it was forgotten, whether it was sealed: rule 5)
        self.tombstones: OrderedDict[str, tuple[JsonId | None, str, bool]] = OrderedDict()
        self.size = 0
        self._stream_max_events = stream_max_events
        self._stream_max_bytes = stream_max_bytes
        self._session_max_bytes = session_max_bytes
        self._max_finished = max_finished

    def open(self, key: str, request_id: JsonId | None) -> StreamLog:
        stream = StreamLog(key, request_id)
        self.streams[key] = stream
        return stream

    def append(self, stream: StreamLog, data: bytes) -> int:
        """Keep ``data`` as the stream's next event (if it fits); its number."""
        n = stream.next_n
        stream.next_n += 1
        if stream.key not in self.streams:  # forgotten meanwhile: nothing is kept for it
            return n
        size = len(data)
        if size > self._stream_max_bytes:
            self._trim(stream, len(stream.events))
            stream.first_kept = n + 1
            return n
        while stream.events and (
            len(stream.events) >= self._stream_max_events or stream.size + size > self._stream_max_bytes
        ):
            self._trim(stream, 1)
        self._shed(stream, self.size + size - self._session_max_bytes)
        self._shed(stream, self.budget.used + size - self.budget.limit)
        if self.budget.used + size > self.budget.limit:  # nothing of ours is left to give up
            stream.first_kept = n + 1
            return n
        stream.events.append((n, data))
        stream.size += size
        self.size += size
        self.budget.used += size
        return n

    def finish(self, stream: StreamLog) -> None:
        stream.finished = True
        finished = [s for s in self.streams.values() if s.finished]
        for old in finished[: max(0, len(finished) - self._max_finished)]:
            self.forget(old, "its result was sent, and newer finished streams are kept instead")

    def resume(self, event_id: str) -> Replay | Gone | Closed | Unknown:
        parsed = parse_event_id(event_id)
        if parsed is None:
            return Unknown(f"Last-Event-ID {event_id[:MAX_EVENT_ID_CHARS]!r} is not an event id of this gateway")
        key, n = parsed
        stream = self.streams.get(key)
        if stream is None:
            tomb = self.tombstones.get(key)
            if tomb is None:
                return Unknown(f"no stream of this session sent event {event_id!r}")
            if tomb[2]:
                return Closed(key, tomb[1])
            return Gone(key, tomb[0], tomb[1])
        if n >= stream.next_n:
            return Unknown(f"event {event_id!r} was never sent on its stream")
        if n + 1 < stream.first_kept:
            return Gone(key, stream.request_id, f"the events after {event_id!r} were not kept (retention bounds)")
        return Replay(stream, stream.after(n))

    def expire(self, now: float, window: float) -> list[StreamLog]:
        """Forget the streams nobody has read for ``window`` seconds; the ones forgotten."""
        stale = [
            s for s in self.streams.values() if s.unattended_since is not None and now - s.unattended_since >= window
        ]
        for stream in stale:
            if stream.finished:
                self.forget(stream, f"its result was sent, but nobody resumed the stream within {window:g} s to get it")
            else:
                self.forget(stream, f"nobody resumed it within {window:g} s")
        return stale

    def seal(self, stream: StreamLog, reason: str) -> None:
        """Its client cancelled the request: a resume of it is ``Closed`` from now on (rule 5),
        whether it is still kept or was forgotten already."""
        tomb = self.tombstones.get(stream.key)
        if tomb is not None:
            self.tombstones[stream.key] = (tomb[0], reason, True)
            return
        self.forget(stream, reason, sealed=True)

    def forget(self, stream: StreamLog, reason: str, *, sealed: bool = False) -> None:
        if self.streams.pop(stream.key, None) is None:
            return
        self._trim(stream, len(stream.events))
        self.tombstones[stream.key] = (stream.request_id, reason, sealed)
        while len(self.tombstones) > MAX_TOMBSTONES:
            self.tombstones.popitem(last=False)
        if self.on_forget is not None:
            self.on_forget(stream.key)

    def close(self) -> None:
        """The session ended: every byte goes back to the process."""
        for stream in list(self.streams.values()):
            self._trim(stream, len(stream.events))
        self.streams.clear()
        self.tombstones.clear()

    def _shed(self, keep: StreamLog, excess: int) -> None:
        """Give up ``excess`` bytes of this session's: finished streams first, then ``keep``'s oldest."""
        if excess <= 0:
            return  # the usual case
        for stream in [s for s in self.streams.values() if s.finished and s is not keep]:
            if excess <= 0:
                return
            excess -= stream.size
            self.forget(stream, "the session's retention bound needed its room")
        while excess > 0 and keep.events:
            excess -= len(keep.events[0][1])
            self._trim(keep, 1)

    def _trim(self, stream: StreamLog, count: int) -> None:
        for _ in range(count):
            n, data = stream.events.popleft()
            stream.size -= len(data)
            self.size -= len(data)
            self.budget.used -= len(data)
            stream.first_kept = n + 1
