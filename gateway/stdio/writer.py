"""A child's stdin: whole lines, in order, never interleaved, and batched under load.

``send(line)`` writes the line at once when the pipe is idle (nothing queued, no write in
progress): the common case at low load costs what a plain write costs. Otherwise the line is
queued, and one task, ``run``, writes everything queued in one go when the pipe is free (one
system call for many requests under load). ``put(line)`` only queues, without waiting (a
cancel, an answer to the child's question). Lines never interleave: one write at a time,
each of whole lines, in the order they were sent or put.

A caller of ``send`` waits for the pipe only when its line was written at once, or when more
than ``WRITE_HIGH_WATER`` bytes are queued behind a write in progress (``wait_for_room``): a
child that stops reading its stdin holds about twice that much of the gateway's memory at
most (the batch being written, and the queue behind it), and its callers wait instead of
piling up more.

When a write fails (the child closed its stdin or is gone), ``broken`` is set, ``run``
returns, and later ``send`` and ``put`` calls raise ``BrokenPipe`` for the edge to translate.
"""

from __future__ import annotations

from typing import Final

import anyio
from anyio.abc import ByteSendStream

WRITE_HIGH_WATER: Final = 1024 * 1024
"""Bytes queued for one child's stdin above which a new request waits for the writer: about
ten thousand small requests, or one large one, while the child is slow to read; past it the
callers wait instead of the gateway's memory growing."""


class BrokenPipe(Exception):
    """The child's stdin no longer takes lines."""


class LineWriter:
    def __init__(self, stream: ByteSendStream, high_water: int = WRITE_HIGH_WATER) -> None:
        self.high_water = high_water
        self.written = 0  # bytes handed to the pipe
        self.broken: BaseException | None = None
        self._stream = stream
        self._lines: list[bytes] = []
        self._queued = 0
        self._busy = False  # a write is in progress (by ``send`` or ``run``)
        self._wake = anyio.Event()
        self._room = anyio.Event()

    @property
    def queued(self) -> int:
        """Bytes put and not yet handed to the pipe."""
        return self._queued

    @property
    def is_full(self) -> bool:
        return self._queued > self.high_water

    def put(self, line: bytes) -> None:
        """Queue one whole line (with its newline); raises ``BrokenPipe`` once a write failed."""
        if self.broken is not None:
            raise BrokenPipe from self.broken
        self._lines.append(line)
        self._queued += len(line)
        self._wake.set()

    async def send(self, line: bytes) -> None:
        """Write ``line`` now if the pipe is idle, else queue it (waiting while the queue is
        over the high-water mark); raises ``BrokenPipe`` once a write failed."""
        if self._busy or self._lines or self.broken is not None:
            self.put(line)
            if self._queued > self.high_water:
                await self.wait_for_room()
            return
        self._busy = True
        try:
            await self._write(line)
        finally:
            self._busy = False
            if self._lines:
                self._wake.set()  # what was put meanwhile goes out next, in order
        if self.broken is not None:
            raise BrokenPipe from self.broken

    async def wait_for_room(self) -> None:
        """Return once the queue is at or below the high-water mark (or the pipe broke)."""
        while self._queued > self.high_water and self.broken is None:
            if self._room.is_set():
                self._room = anyio.Event()
            await self._room.wait()

    async def run(self) -> None:
        """Write what is queued, in order, until a write fails; then return."""
        while self.broken is None:
            if not self._lines or self._busy:
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            data = self._lines[0] if len(self._lines) == 1 else b"".join(self._lines)
            self._lines = []
            self._queued = 0
            self._room.set()  # the queue is empty again (this batch is the pipe's now)
            self._busy = True
            try:
                await self._write(data)
            finally:
                self._busy = False

    async def _write(self, data: bytes) -> None:
        try:
            await self._stream.send(data)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self.broken = exc
            self._room.set()
            self._wake.set()  # ``run`` sees it and returns
            return
        self.written += len(data)
