"""uvicorn's httptools protocol with the limits a hostile peer needs, enforced on the socket.

httptools gathers a header value across reads (with a quadratic ``+=``) and hands it over only
when the header ends, so the 64 KiB check in ``gateway.http.limits`` would run after a 200 MB
header had been buffered. ``GuardedHttpTools`` counts the bytes of each request head as they
arrive, before the parser sees them, and keeps the httptools speed for everything else (the
count is one addition per read while a head is open).

- ``MAX_HEAD_BYTES``: a request line plus headers longer than this is answered 431 and the
  connection closed; the parser never sees the excess.
- ``HEADER_TIMEOUT``: a head (from a new connection's accept, its TLS handshake included, or
  from the first byte of a later request on it) must be complete within this, else 408 and the
  connection is closed (a new connection that sent nothing at all, or did not finish its TLS
  handshake, is closed without an answer).
- ``WRITE_TIMEOUT``: while the socket's send buffer is full (the peer stopped reading), the
  connection may wait this long for it to drain; then it is reset, which frees what was
  buffered for it (in the process and in the kernel) and is a disconnect for the request (a
  modern request is cancelled at the child; ``WRITE_TIMED_OUT`` in the scope tells the
  stream to cancel a legacy one too).

- ``OpenConnections`` (``--max-connections``): the connections one listener holds. A
  connection accepted past its cap is not served: once its request head has come (or its first
  ``MAX_HEAD_BYTES``; one whose head has not come within ``PAST_CAP_HEAD_TIMEOUT`` is closed
  unanswered) it is answered 503 with ``Retry-After``, a FIN sent, and what it still sends
  read and dropped for ``REFUSAL_DRAIN`` before it is closed; the parser never sees it. A
  probe (``GET /healthz``, ``GET /readyz``, its head within ``PROBE_HEAD_MAX``) past the cap
  is served from a small reserve (``PROBE_RESERVE``), once: its connection is closed after the
  answer. Past the cap and ``MAX_REFUSING`` connections waiting to be answered, a new one is
  closed at once. So the descriptors clients hold stay within the cap plus those, and children
  can still be started (``default_max_connections`` leaves half the open-file limit to them).
  Over TLS a connection counts from its accept (``gateway.http.tls.TlsHandshake`` holds the
  count during the handshake and gives it back at the hand-over, when this class counts it).

The transport uvicorn writes through is a ``HeldHead`` (``gateway.http.heldhead``): a
response's head leaves with its body in one write.

``Hangup`` (in the scope under ``HANGUP``) tells a response the moment its connection is
lost: a stream registers its cancel scope there instead of running a task that waits for
``http.disconnect`` (``gateway.http.sse``), so an answer that is ready at once costs no task.

Each request's scope also carries ``HEAD_BYTES`` (``gateway.http.limits``): at most how many
bytes its head took (the reads its head came in, summed), so the edge need not sum the headers
of a head too small to pass their byte limits.

Refusals here happen before the ASGI app runs, so they are logged here (``gateway.http``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from typing import Any, ClassVar, Final

import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway.http.heldhead import HeldHead
from gateway.http.inflight import Cancellable
from gateway.http.limits import (
    BUSY_RETRY_AFTER,
    HEAD_BYTES,
    MAX_HEADER_BYTES,
    PROBE_PATHS,
    OpenConnections,
)
from gateway.protocol.jsonrpc import error_object

log = logging.getLogger("gateway.http")

MAX_HEAD_BYTES: Final = MAX_HEADER_BYTES + 16 * 1024
"""Request line plus headers as sent (``MAX_HEADER_BYTES`` of names and values, plus room for
a long URL and the separators): past it, 431 without parsing further."""
HEADER_TIMEOUT: Final = 10.0
"""Seconds to send a complete request head: no real client needs more, and a peer that
trickles a header forever would otherwise hold its connection and buffer for good."""
WRITE_TIMEOUT: Final = 30.0
"""Seconds a connection may stay unable to send (the peer reads nothing) before it is aborted."""
BODY_RECEIVED: Final = "gateway.body_received"
"""Scope key set once the request's whole body has been read from the socket: the endpoint
then reads it without arming its body timeout."""
WRITE_TIMED_OUT: Final = "gateway.write_timed_out"
"""Scope key set when the connection was aborted for not reading its response."""
HANGUP: Final = "gateway.hangup"
"""Scope key of the connection's ``Hangup``."""
PAST_CAP_HEAD_TIMEOUT: Final = 2.0
"""Seconds a connection past the cap has to send its request head (``HEADER_TIMEOUT`` for
one served): it holds a descriptor meanwhile, so it is not given long."""
REFUSAL_DRAIN: Final = 1.0
"""Seconds a connection answered 503 at the cap stays open, its further bytes read and
dropped, once the 503 and a FIN were sent: closed at once, the rest of its request (a POST
body still arriving) would reset the connection, and the client could lose the answer."""
PROBE_HEAD_MAX: Final = 1024
"""Bytes of a head past the cap kept to see whether it is a probe (``PROBE_PATHS``)."""
# What a connection holds of its listener's count (``OpenConnections``).
_NOTHING: Final = 0
_SERVED: Final = 1
_REFUSING: Final = 2
_PROBE: Final = 3


class Hangup:
    """A connection's loss, pushed to whoever watches it: each watched cancel scope (or anything
    with ``cancel()``: a response's answer machine is told through one, which reads ``stalled``
    to tell a reset for not reading from a disconnect) is cancelled when the peer goes away (or
    the connection is reset for not reading), which is when uvicorn would answer ``receive()``
    with ``http.disconnect``."""

    __slots__ = ("_scopes", "is_lost", "stalled")

    def __init__(self) -> None:
        self.is_lost = False
        self.stalled = False
        self._scopes: dict[Cancellable, None] = {}  # in the order they were watched

    def watch(self, scope: Cancellable) -> None:
        if not self.is_lost:
            self._scopes[scope] = None
        else:
            scope.cancel()

    def unwatch(self, scope: Cancellable) -> None:
        self._scopes.pop(scope, None)

    def lost(self) -> None:
        self.is_lost = True
        for scope in self._scopes:
            scope.cancel()
        self._scopes.clear()


def _refusal(status: int, message: str, retry_after: int | None = None) -> bytes:
    body = orjson.dumps({"jsonrpc": "2.0", "error": error_object(-32600, message)})  # no id: none was read
    return b"".join(
        [
            STATUS_LINE[status],
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"retry-after: %d\r\n" % retry_after if retry_after is not None else b"",
            b"connection: close\r\n\r\n",
            body,
        ]
    )


class GuardedHttpTools(HttpToolsProtocol):  # fenced: HttpToolsProtocol
    max_head_bytes: ClassVar[int] = MAX_HEAD_BYTES
    header_timeout: ClassVar[float] = HEADER_TIMEOUT
    write_timeout: ClassVar[float] = WRITE_TIMEOUT
    open_connections: ClassVar[OpenConnections] = OpenConnections(None)  # counted, never capped
    _held_head: HeldHead  # the connection's transport, from connection_made

    @classmethod
    def configured(
        cls,
        *,
        max_head_bytes: int = MAX_HEAD_BYTES,
        header_timeout: float = HEADER_TIMEOUT,
        write_timeout: float = WRITE_TIMEOUT,
        connections: OpenConnections | None = None,
    ) -> type[GuardedHttpTools]:
        """This protocol with other limits (uvicorn takes a class for ``http``); ``connections``:
        its listener's count and cap (a new uncapped one when None)."""
        attrs = {
            "max_head_bytes": max_head_bytes,
            "header_timeout": header_timeout,
            "write_timeout": write_timeout,
            "open_connections": connections if connections is not None else OpenConnections(None),
        }
        return type("GuardedHttpTools", (cls,), attrs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # the next bytes belong to a request head
        self._head_bytes = 0
        self._heads_done = 0
        self._head_timer: asyncio.TimerHandle | None = None
        # When the head of a request on a kept-alive connection began: its timer is armed
        # only if the head is still incomplete once the bytes at hand are parsed (a head that
        # comes whole, the usual case, never arms one: a timer armed and cancelled costs a
        # request about 2 µs).
        self._head_began: float | None = None
        # Bytes handed to the parser: in all, before the read it parses now, and before the
        # read in which the current request began. A head lies within the reads from the one
        # its request began in to the one it ended in: their sum bounds it (``HEAD_BYTES``).
        self._received = 0
        self._read_start = 0
        self._head_start = 0
        self._write_timer: asyncio.TimerHandle | None = None
        self._hangup = Hangup()
        # Made when the connection is accepted (uvicorn makes the protocol then), which over TLS
        # is before the handshake (``gateway.http.tls.TlsHandshake``): the first head's time
        # counts from here.
        self.head_deadline = self.loop.time() + self.header_timeout
        self._slot = _NOTHING  # what it holds of its listener's count (``OpenConnections``)
        # Past the cap: bytes of its head read so far, their last three (a head's end may be
        # split across reads), the head itself while it may be a probe, the 503 sent.
        self._past_cap_bytes = 0
        self._past_cap_tail = b""
        self._past_cap_head: bytes | None = b""
        self._refusal_sent = False
        self._drain_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Every write of uvicorn's (and of this class) goes through it: a response's head and
        # body leave in one write (gateway.http.heldhead). Flow control keeps the real one.
        self.transport = self._held_head = HeldHead(transport, self.loop)
        delay = max(self.head_deadline - self.loop.time(), 0.0)
        admitted = self.open_connections.admit()
        if admitted is None:  # past the cap and those waiting for their 503: closed unanswered
            transport.abort()
            return
        if not admitted:  # answered 503 once its head has come (``_read_past_cap``)
            self._slot = _REFUSING
            delay = min(delay, PAST_CAP_HEAD_TIMEOUT)
        else:
            self._slot = _SERVED
        self._head_timer = self.loop.call_later(delay, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        slot, self._slot = self._slot, _NOTHING
        connections = self.open_connections
        if slot in (_SERVED, _REFUSING):
            connections.release(slot == _SERVED)
        elif slot == _PROBE:
            connections.probe_ended()
        for timer in (self._head_timer, self._write_timer, self._drain_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._write_timer = self._drain_timer = None
        super().connection_lost(exc)
        self._hangup.lost()

    def data_received(self, data: bytes) -> None:
        slot = self._slot
        if slot != _SERVED and slot != _PROBE:  # (one compare for a served connection)
            if slot == _REFUSING:
                self._read_past_cap(data)
            return  # closed at once, past the cap: nothing of it is read
        while self._in_head and len(data) > self.max_head_bytes - self._head_bytes:
            # Feed only what fits: a head must end inside it (then the rest is its body, or
            # pipelined requests, whose heads are counted afresh).
            room = self.max_head_bytes - self._head_bytes
            heads_done = self._heads_done
            self._read_start = self._received
            self._received += room
            super().data_received(data[:room])  # fenced: httptools.feed_data
            if self.transport.is_closing():
                return
            if self._heads_done == heads_done:
                self._refuse(431, f"request headers over {self.max_head_bytes} bytes")
                return
            data = data[room:]
        if self._in_head:
            self._head_bytes += len(data)
        if data:
            self._read_start = self._received
            self._received += len(data)
            super().data_received(data)
        began = self._head_began
        if began is not None and self._head_timer is None and not self.transport.is_closing():
            # A head still incomplete: it must end within the header timeout from its start.
            delay = max(began + self.header_timeout - self.loop.time(), 0.0)
            self._head_timer = self.loop.call_later(delay, self._head_timed_out)

    # -- parser callbacks -----------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[HANGUP] = self._hangup  # type: ignore[typeddict-unknown-key]
        self._head_start = self._read_start
        if self._head_timer is None:  # armed in data_received if the head is not whole by then
            self._head_began = self.loop.time()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._heads_done += 1
        self._head_began = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self.scope[HEAD_BYTES] = self._received - self._head_start  # type: ignore[typeddict-unknown-key]
        super().on_headers_complete()
        self._held_head.hold_next()  # the next write is this request's response head

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.scope[BODY_RECEIVED] = True  # type: ignore[typeddict-unknown-key]
        self._in_head, self._head_bytes = True, 0
        # uvicorn pauses reading while a body over 64 KiB waits for the app, and resumes only
        # in the app's next receive(), which an endpoint that has its body never makes: the
        # client's hang-up (EOF) would never be read, so a large call held at a child would
        # not be cancelled when its client left. A pipelined request still pauses reading.
        if not self.pipeline:  # fenced: HttpToolsProtocol
            self.flow.resume_reading()

    # -- flow control ---------------------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.write_timeout, self._write_timed_out)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    # -- limits ---------------------------------------------------------------------------

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head or self.transport.is_closing():
            return
        if self._head_bytes == 0 and self._head_began is None:  # an idle new connection (a pre-connect): close it
            self.transport.close()
            return
        self._refuse(408, f"request headers not received within {self.header_timeout:g} s")

    def _write_timed_out(self) -> None:
        self._write_timer = None
        if self.transport.is_closing():
            return
        peer, stalled = self._peer_label(), self.write_timeout
        log.warning("%s read nothing for %g s while a response waited: connection aborted", peer, stalled)
        if self.cycle is not None:
            self.cycle.scope[WRITE_TIMED_OUT] = True  # type: ignore[typeddict-unknown-key]
        self._hangup.stalled = True
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            # A reset, not a FIN queued behind megabytes the peer will never read: the kernel
            # frees the socket's send buffer now, and the peer learns at once.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def _read_past_cap(self, data: bytes) -> None:
        """A connection past the cap: its bytes counted (never parsed) until its head has
        ended, then 503 with ``Retry-After`` (or, for a probe, served from the reserve);
        answered at the head, not at once, so that a client whose request was still arriving
        reads the answer rather than a reset. Linear in what it reads."""
        if self._refusal_sent:
            return  # the rest of its request, read and dropped until it is closed
        head = self._past_cap_head
        if head is not None:
            head += data
            self._past_cap_head = head if len(head) <= PROBE_HEAD_MAX else None
        seen = self._past_cap_tail + data
        self._past_cap_bytes += len(data)
        self._past_cap_tail = seen[-3:]
        ended = b"\r\n\r\n" in seen
        if not ended and self._past_cap_bytes < self.max_head_bytes:
            return
        if self.transport.is_closing():
            return
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        connections = self.open_connections
        head = self._past_cap_head
        self._past_cap_head = None
        if ended and head is not None and head.startswith(PROBE_PATHS) and connections.as_probe():
            self._slot = _PROBE
            # Served as any request, once: ``connection: close`` added to its head, so uvicorn
            # closes it after the answer and serves nothing more on it (no request past the cap,
            # and the reserve's slot comes back at once).
            end = head.index(b"\r\n\r\n")
            self.data_received(head[:end] + b"\r\nconnection: close" + head[end:])
            return
        connections.refuse(self._peer_label(), self.loop.time())
        message = f"the gateway holds {connections.cap} connections, the most it takes; retry shortly"
        self.transport.write(_refusal(503, message, BUSY_RETRY_AFTER))
        self._refusal_sent = True
        if not self.transport.can_write_eof():  # TLS: its close sends close_notify after the answer
            self.transport.close()
            # (which waits for the peer's close_notify up to the header timeout: not that long)
            self._drain_timer = self.loop.call_later(REFUSAL_DRAIN, self.transport.abort)
            return
        self.transport.write_eof()
        self._drain_timer = self.loop.call_later(REFUSAL_DRAIN, self.transport.close)

    def _refuse(self, status: int, message: str) -> None:
        log.warning("%s refused (%d): %s", self._peer_label(), status, message)
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.abort()  # a response is under way on this connection: no second one
            return
        self.transport.write(_refusal(status, message))
        self.transport.close()

    def _peer_label(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
