"""An awaitable ``Backlog``: one producer that never waits, one reader that does.

The stdout pump serves every client of a child, so it must never block on one slow reader:
``put`` is synchronous; past ``COALESCE_ABOVE`` queued messages progress is coalesced, and
past four times that, further messages (but a final answer) are refused and counted
(``gateway.protocol.backlog`` has the rules). The reader awaits ``get``; ``close()`` from
the producer ends the reader's iteration once the queue is empty; ``close_reader()`` says the
reader left, so later items are discarded.

A bare asyncio future, made when the reader has to wait, wakes it: an inbox is made for every
request, and ``anyio.Event`` costs a look-up of the running async library each time one is
made (about 5 µs), ``asyncio.Event`` a lock the first time it is waited on. The gateway runs
on asyncio (uvicorn); the reader's wait is still cancelled by anyio's cancel scopes, which
cancel the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Final, Generic, TypeVar

import anyio
from anyio.lowlevel import checkpoint_if_cancelled

from gateway.protocol.backlog import Backlog
from gateway.protocol.jsonrpc import PROGRESS

T = TypeVar("T")

COALESCE_ABOVE: Final = 16_384
"""Messages queued for one request before progress for a token is coalesced (latest value
kept). A child writing flat out fills one 256 KiB stdout read with ~2,500 progress lines
before the reader runs; this keeps every one of them for a reader that keeps up, at well
over 50,000 progress notifications a second, for at most ~8 MB per request."""


def progress_key(method: str, params: object) -> Hashable | None:
    """The coalescing key of a progress notification (its token), else None."""
    if method != PROGRESS or not isinstance(params, dict):
        return None
    token = params.get("progressToken")
    return (PROGRESS, token) if isinstance(token, (str, int)) else None


class Inbox(Generic[T]):
    def __init__(self, coalesce_above: int = COALESCE_ABOVE) -> None:
        self._coalesce_above = coalesce_above
        # Made with the first item: most requests get none (their reply is no item of it).
        self._backlog: Backlog[T] | None = None
        self._waiter: asyncio.Future[None] | None = None  # the reader's, while it waits
        self._closed = False  # the producer is done
        self._reader_gone = False

    @property
    def dropped(self) -> int:
        """Items refused at the backlog's hard limit (``Backlog.dropped``)."""
        return 0 if self._backlog is None else self._backlog.dropped

    def first(self) -> T | None:
        """The oldest item, left queued; None when none is."""
        return None if self._backlog is None else self._backlog.first()

    def put(self, item: T, key: Hashable | None = None, *, always: bool = False) -> bool:
        """Queue ``item`` (False: refused, or nobody will read it); ``always``: past every bound."""
        if self._closed or self._reader_gone:
            return False
        backlog = self._backlog
        if backlog is None:
            backlog = self._backlog = Backlog(self._coalesce_above)
        accepted = backlog.put(item, key, always=always)
        self._wake()
        return accepted

    def close(self) -> None:
        self._closed = True
        waiter = self._waiter  # ``_wake`` spelled out: every request's inbox is closed by its reply
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close_reader(self) -> None:
        self._reader_gone = True
        if self._backlog is not None:
            self._backlog.clear()

    def get_nowait(self) -> T:
        """The next item; raises ``anyio.WouldBlock`` when none is queued, ``anyio.EndOfStream``
        when none will come."""
        backlog = self._backlog
        if backlog:
            return backlog.pop()
        if self._closed or self._reader_gone:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def wait(self) -> T | None:
        """Until an item is queued or none will come (nothing is taken): then ``first()``."""
        while not (self._backlog or self._closed or self._reader_gone):
            self._waiter = waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        return None if self._backlog is None else self._backlog.first()  # (``first()`` without its call)

    async def get(self) -> T:
        if self._backlog or self._closed or self._reader_gone:
            await checkpoint_if_cancelled()  # ready at once: still a point where a cancel is seen
        while True:
            if self._backlog or self._closed or self._reader_gone:  # what get_nowait returns or raises
                return self.get_nowait()
            # Nothing yet (asked, not learnt from get_nowait's WouldBlock: raising it cost a
            # request about 2k instructions each time the reader waits).
            self._waiter = waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
