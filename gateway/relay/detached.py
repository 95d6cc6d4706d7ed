"""An exchange that outlives its HTTP request: legacy requests, whose disconnect is no cancel.

``Detached(events, on_cancel)`` runs a relay exchange in a background task (``run``, started
by the HTTP edge in the app's task group); iterating it reads what the exchange produced. A
legacy client's disconnect is **not** a cancellation (L-TR §Sending Messages: "SHOULD NOT"):
when the reader goes away (``aclose``) the exchange finishes and its result is dropped.

``handle`` cancels the exchange itself: after the client's own ``notifications/cancelled``
the reader gets no ``Final`` (the stream just ends: a cancelled request is not answered);
after a session DELETE it gets ``on_cancel()`` as the ``Final``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing

import anyio

from gateway.errors import GatewayUnavailableError
from gateway.protocol.jsonrpc import PROGRESS, JsonObject
from gateway.relay import events
from gateway.relay.exchange import Rejected
from gateway.relay.sessions import CancelHandle
from gateway.stdio.inbox import Inbox, progress_key


class Detached:
    def __init__(self, exchange: AsyncIterator[events.Emitted], on_cancel: Callable[[], JsonObject]) -> None:
        self.handle = CancelHandle()
        self._exchange = exchange
        self._on_cancel = on_cancel
        self._failure: GatewayUnavailableError | Rejected | None = None
        # What the exchange produced ahead of a slow reader: progress may be coalesced past a
        # bound, every other event (and the final answer) is kept (``gateway.stdio.inbox``).
        self._inbox: Inbox[events.Event] = Inbox()

    async def run(self) -> None:
        try:
            await self._run()
        finally:  # also when the app's task group is cancelled (shutdown): the reader ends
            self._inbox.close()

    async def _run(self) -> None:
        final_sent = False
        try:
            with self.handle.scope:
                async with aclosing(self._exchange):  # type: ignore[type-var]
                    async for emitted in self._exchange:
                        for event in emitted.notes if isinstance(emitted, events.Batch) else (emitted,):
                            final_sent = type(event) is events.Final
                            progress = type(event) is events.Progress
                            key = progress_key(PROGRESS, event.message.get("params")) if progress else None
                            self._inbox.put(event, key, always=final_sent)
        except (GatewayUnavailableError, Rejected) as exc:
            # Raised before the exchange produced anything (saturated pool, a refused
            # request): the reader re-raises it, so the client gets its status (503, 400).
            self._failure = exc
            final_sent = True
        if not final_sent and self.handle.reply:
            self._inbox.put(events.Final(self._on_cancel()), always=True)

    def ready(self) -> list[events.Event]:
        """What the exchange produced already, without waiting."""
        ready: list[events.Event] = []
        while True:
            try:
                ready.append(self._inbox.get_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                return ready

    def __aiter__(self) -> Detached:
        return self

    async def __anext__(self) -> events.Event:
        try:
            return await self._inbox.get()
        except anyio.EndOfStream:
            if self._failure is not None:
                raise self._failure from None
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._inbox.close_reader()  # the client left; the child's work goes on and its answer is dropped
