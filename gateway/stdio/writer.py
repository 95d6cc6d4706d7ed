"""A child's stdin: whole lines, in order, never interleaved, batched under load, bounded.

``send(line)`` writes the line at once when the pipe is idle (nothing queued, no write in
progress): the common case at low load costs what a plain write costs, and ``write_now``
does it without a coroutine when the pipe takes the line whole at once. Otherwise the line is
queued, and one task, ``run``, writes everything queued in one go when the pipe is free (one
system call for many requests under load). ``put(line)`` only queues, without waiting (a
cancel, an answer to the child's question). ``queue(line)`` queues a request's line for the end
of the loop turn, when everything queued by then leaves in one write (the caller does this when
other requests are in flight on the child, so a burst of requests costs one system call and one
wake-up of the child, and a lone request still goes at once). Lines never interleave: one write at a time,
each of whole lines, in the order they were sent or put.

**Bounded.** At most ``max_queued`` bytes wait behind the write in progress
(``MAX_STDIN_QUEUE_BYTES``, ``--max-stdin-queue-bytes``), checked *before* a line is queued:

- a ``send`` whose line does not fit raises ``StdinFull`` at once (the caller answers 503
  with ``Retry-After``); one line always fits an empty queue, so any single request can go;
- a ``put`` whose line does not fit is dropped and counted (``dropped``): it is a cancel or
  an answer for a child that has stopped reading, which the stall timeout below recycles;
- a queued line whose request ends before it is written (the client left, its timeout) is
  taken back (``withdraw(ticket)``): a child that reads nothing holds no line of a request
  that is gone.

So a child that stops reading its stdin holds at most the batch being written (in the pipe's
transport) and ``max_queued`` bytes behind it, about twice the bound, whatever its clients do.

**Slow, then stalled.** ``stalled_since(now)``, looked at once a maintenance tick, says since
when the child has taken nothing of its stdin while something waited for it: a write waiting
for a full pipe (``waiting_since``), or lines in the pipe the child has not read with nothing
read or written since an earlier look (``unread_since``: the kernel's count, from the pipe's
``unread``, unchanged between looks; a request of a few hundred bytes fits in the pipe, so a
child that stopped reading would otherwise look idle and keep getting requests, each held
until the request timeout). Once that is longer than ``STDIN_STALL_NOTICE``, the pool gives
the child no new request and starts another beside it (``gateway.protocol.dispatch`` rule 7).
A child that has taken nothing for ``stall_timeout`` seconds (``STDIN_STALL_TIMEOUT``,
``--stdin-stall-timeout``; with the pipe's lines unread, also silent on stdout that long)
breaks the writer with ``StdinStalled``: it is stopped
(``StdioChild.pump_stdin``) and its pool replaces it; its requests fail with the exit error,
and what it held is freed. A child that reads, however slowly, never stalls: each look that
finds the count moved starts the clock again (over a socket pair the count moves when a
write has been read whole, so a single write read for longer than the notice looks stalled).

When a write fails (the child closed its stdin or is gone), ``broken`` is set, ``run``
returns, and later ``send`` and ``put`` calls raise ``BrokenPipe`` for the edge to translate.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Final

import anyio
from anyio.abc import ByteSendStream

log = logging.getLogger("gateway.stdio")

MAX_STDIN_QUEUE_BYTES: Final = 16 * 1024 * 1024
"""Bytes that may wait for one child's stdin behind the write in progress: four requests of the
largest body (``--max-body-bytes``, 4 MiB), or about a hundred thousand small ones. Past it a
request is refused (503) instead of the gateway's memory growing with a child that reads slowly
or not at all."""
STDIN_STALL_TIMEOUT: Final = 60.0
"""Seconds one write to a child's stdin may wait for the pipe to take it; past that the child
is taken as having stopped reading, and is stopped (its pool replaces it). 0: no limit."""


class BrokenPipe(Exception):
    """The child's stdin no longer takes lines."""


class StdinFull(Exception):
    """This line does not fit in what may wait for the child's stdin."""

    def __init__(self, queued: int, line: int, limit: int) -> None:
        super().__init__(f"{queued} bytes already wait for it (at most {limit}; this request is {line})")
        self.queued, self.line, self.limit = queued, line, limit


class StdinStalled(Exception):
    """A write to the child's stdin waited longer than the stall timeout."""


class LineWriter:
    def __init__(
        self,
        stream: ByteSendStream,
        max_queued: int = MAX_STDIN_QUEUE_BYTES,
        stall_timeout: float = STDIN_STALL_TIMEOUT,
    ) -> None:
        self.max_queued = max_queued
        self.stall_timeout = stall_timeout
        self.written = 0  # bytes handed to the pipe
        self.dropped = 0  # lines put while the queue was full, never written
        self.broken: BaseException | None = None
        self._stream = stream
        # A pipe that can take a line without a coroutine (``PipeWriter.write_now``), else None.
        self._stream_write_now: Callable[[bytes], bool] | None = getattr(stream, "write_now", None)
        self._lines: dict[int, bytes] = {}  # ticket → line, in the order queued
        self._tickets = 0
        self._queued = 0
        self._busy = False  # a write is in progress (by ``send`` or ``run``)
        # A direct write whose caller was cancelled while the pipe was full: its bytes are the
        # transport's, so ``run`` waits for the pipe to take them before anything else goes.
        self._unsettled = False
        self._wake = anyio.Event()
        self._flush_due = False  # ``_flush`` is scheduled for the end of this loop turn
        # When the write in progress began waiting for the pipe (``time.monotonic``), None when
        # no write waits: the pool routes new requests around a child whose write waits long.
        self.waiting_since: float | None = None
        # The pipe's count of what the child has not read (``PipeWriter.unread``), else None.
        self._stream_unread: Callable[[], int | None] | None = getattr(stream, "unread", None)
        # Since when (a look's ``now``) the pipe has held bytes the child has not read, with
        # nothing read or written since (``stalled_since``); None when it holds none.
        self.unread_since: float | None = None
        self._looked: tuple[int, int] | None = None  # (``written``, unread) at that look
        # Since when it had taken nothing when the writer broke with ``StdinStalled``: a child
        # being stopped for it stays out of its pool's routing until it is gone.
        self.stalled_from: float | None = None

    @property
    def queued(self) -> int:
        """Bytes put and not yet handed to the pipe."""
        return self._queued

    def fits(self, size: int) -> bool:
        """Whether a line of ``size`` bytes may be queued now (one always fits an empty queue)."""
        return not self._lines or self._queued + size <= self.max_queued

    def put(self, line: bytes) -> None:
        """Queue one whole line (with its newline), or drop it when the queue is full; raises
        ``BrokenPipe`` once a write failed."""
        if self.broken is not None:
            raise BrokenPipe from self.broken
        if not self.fits(len(line)):
            self.dropped += 1
            log.debug("a %d-byte line for a child's full stdin dropped (%d bytes wait)", len(line), self._queued)
            return
        self._queue(line)

    def _queue(self, line: bytes) -> int:
        """Queue ``line`` for ``run``, woken now; its ticket."""
        ticket = self._add(line)
        self._wake.set()
        return ticket

    def _add(self, line: bytes) -> int:
        self._tickets += 1
        self._lines[self._tickets] = line
        self._queued += len(line)
        return self._tickets

    def _batch(self) -> bytes:
        """Everything queued, in order, as one write's bytes (still queued)."""
        lines = self._lines
        return next(iter(lines.values())) if len(lines) == 1 else b"".join(lines.values())

    async def send(self, line: bytes) -> int | None:
        """Write ``line`` now if the pipe is idle (None), else queue it: the ticket to
        ``withdraw`` it with. Raises ``StdinFull`` when it does not fit, ``BrokenPipe`` once a
        write failed."""
        if self._busy or self._lines or self._unsettled or self.broken is not None:
            if self.broken is not None:
                raise BrokenPipe from self.broken
            if not self.fits(len(line)):
                raise StdinFull(self._queued, len(line), self.max_queued)
            return self._queue(line)
        self._busy = True
        try:
            await self._write(line)
        except BaseException:  # cancelled while the pipe was full: it may hold the line still
            self._unsettled = True
            raise
        finally:
            self._busy = False
            if self._lines or self._unsettled:
                self._wake.set()  # what was put meanwhile goes out next, in order
        if self.broken is not None:
            raise BrokenPipe from self.broken
        return None

    def queue(self, line: bytes) -> int:
        """Queue ``line`` for ``run``'s next write, which takes everything queued by then: the
        lines of the requests a loop turn starts leave in one system call (``StdioChild`` does
        this while other requests are in flight on the child). The ticket to ``withdraw`` it
        with. Raises ``StdinFull`` and ``BrokenPipe`` as ``send`` does."""
        if self.broken is not None:
            raise BrokenPipe from self.broken
        if not self.fits(len(line)):
            raise StdinFull(self._queued, len(line), self.max_queued)
        ticket = self._add(line)
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)
        return ticket

    def _flush(self) -> None:
        """The end of the loop turn that queued lines: what is queued leaves in one write, made
        here when the pipe is idle and takes it whole at once, else by ``run``."""
        self._flush_due = False
        stream_write_now = self._stream_write_now
        if not self._lines:
            return  # withdrawn meanwhile, or taken by ``run``
        if stream_write_now is None or self._busy or self._unsettled or self.broken is not None:
            self._wake.set()
            return
        data = self._batch()
        try:
            if not stream_write_now(data):
                self._wake.set()
                return
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._break(exc)
            return
        self._lines = {}
        self._queued = 0
        self.written += len(data)

    def write_now(self, line: bytes) -> bool:
        """``send`` without waiting, for the usual line: True when the pipe was idle and took
        ``line`` whole at once (a pipe with ``write_now``, ``PipeWriter``). False: nothing
        written; call ``send``. Raises ``BrokenPipe`` as ``send`` does."""
        stream_write_now = self._stream_write_now
        if stream_write_now is None or self._busy or self._lines or self._unsettled or self.broken is not None:
            return False
        try:
            if not stream_write_now(line):
                return False
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._break(exc)
            raise BrokenPipe from exc
        self.written += len(line)
        return True

    def stalled_since(self, now: float, last_output: float) -> float | None:
        """Since when the child has taken nothing of its stdin while something waited for it, as
        a look at ``now`` finds (the module's "Slow, then stalled"); None when it is not stalled.
        Looked at once a maintenance tick: past ``stall_timeout`` with the pipe's bytes unread
        and nothing on its stdout since they were (``last_output``: a child that reports
        progress is working, not stuck), the writer breaks with ``StdinStalled`` (a write
        waiting that long breaks it itself)."""
        if self.broken is not None:  # being stopped: stalled (``StdinStalled``) or gone
            return self.stalled_from
        measure = self._stream_unread
        unread = measure() if measure is not None else None
        if not unread:  # none unread, or nobody can tell
            self.unread_since = self._looked = None
        elif (looked := (self.written, unread)) != self._looked or self.unread_since is None:
            self._looked, self.unread_since = looked, now  # it read, or was written to: from now
        elif (
            self.waiting_since is None
            and self.stall_timeout
            and now - max(self.unread_since, last_output) >= self.stall_timeout
        ):
            self.stalled_from = self.unread_since
            self._break(StdinStalled(f"it read nothing of its stdin, and wrote nothing, for {self.stall_timeout:g} s"))
            return self.stalled_from
        waiting, unread_since = self.waiting_since, self.unread_since
        if unread_since is None or (waiting is not None and waiting <= unread_since):
            return waiting
        return unread_since

    def withdraw(self, ticket: int | None) -> bool:
        """Take back a queued line whose request is gone; False when it was written already."""
        line = self._lines.pop(ticket, None) if ticket is not None else None
        if line is None:
            return False
        self._queued -= len(line)
        return True

    async def run(self) -> None:
        """Write what is queued, in order, until a write fails; then return."""
        while self.broken is None:
            if self._busy or not (self._lines or self._unsettled):
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            if self._unsettled:  # a cancelled direct write left bytes in the pipe's transport
                self._unsettled = False
                self._busy = True
                try:
                    await self._write(b"")  # returns once the pipe has taken them (or stalls)
                finally:
                    self._busy = False
                continue
            data = self._batch()
            self._lines = {}
            self._queued = 0
            self._busy = True
            try:
                await self._write(data)
            finally:
                self._busy = False

    async def _write(self, data: bytes) -> None:
        stream = self._stream
        try:
            takes_at_once = getattr(stream, "takes_at_once", None)
            if takes_at_once is not None and takes_at_once(len(data)):
                await stream.send(data)  # it cannot wait: no stall timer (a cancel scope costs per line)
            else:
                self.waiting_since = since = time.monotonic()
                try:
                    with anyio.fail_after(self.stall_timeout or math.inf):
                        await stream.send(data)
                except TimeoutError:
                    self.stalled_from = since
                    raise
                finally:
                    self.waiting_since = None
        except TimeoutError:
            self._break(StdinStalled(f"its stdin took no data for {self.stall_timeout:g} s"))
            return
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._break(exc)
            return
        self.written += len(data)

    def _break(self, exc: BaseException) -> None:
        """The pipe failed (``exc``): every later line is refused, and ``run`` sees it and returns."""
        self.broken = exc
        self._wake.set()
