"""One request in flight on a stdio child, as its caller sees it.

``StdioChild.exchange`` (``gateway.stdio.child``) makes one per request. The child's pump
calls ``deliver``, ``offer_ask`` and ``finish`` as the session machine decides
(``gateway.protocol.childsession``); the caller iterates the exchange (notifications, and
``ChildAsk`` items when it was opened with ``asks=True``), then reads ``reply()``. The queue
never blocks the pump that serves every client of the child: an exchange is an ``Inbox``
(``gateway.stdio.inbox``), its own queue, and uses only what the inbox offers anyone (one
object less per request than one holding an inbox). The exchange knows nothing of the child:
the pump and the exchange meet only through these public methods.
"""

from __future__ import annotations

import anyio

from gateway.errors import CODE_NO_CLIENT_INPUT, ChildError, ChildTimeoutError
from gateway.protocol.jsonrpc import Notification, Reply
from gateway.stdio.ask import ChildAsk
from gateway.stdio.inbox import Inbox, progress_key

ExchangeItem = Notification | ChildAsk


class Exchange(Inbox[ExchangeItem]):
    """One request in flight: notifications (and attributed asks) as they arrive, then exactly one outcome.

    The pump calls ``deliver``, ``offer_ask`` and ``finish`` as the machine decides; the
    reader iterates, then calls ``reply()``."""

    def __init__(self, method: str) -> None:
        # Never blocks the pump that serves every client of the child: past a bound, progress
        # for a token is coalesced (latest value kept); nothing else is dropped (``inbox``).
        Inbox.__init__(self)  # (not ``super()``: no proxy made per request)
        self.method = method
        self.child_id = 0
        self.stdin_ticket: int | None = None  # its line while queued for the child's stdin (``LineWriter``)
        self._reply: Reply | None = None
        self._error: ChildError | None = None
        self.is_done = False  # it has its outcome (``finish``): a reply or an error
        self.replied = False  # that outcome is a reply (``reply()`` gives it)
        self._asks: list[ChildAsk] | None = None  # made with the first (most requests ask nothing)

    def __repr__(self) -> str:
        return f"<Exchange {self.method} child_id={self.child_id} done={self.is_done}>"

    def reply(self) -> Reply:
        if self._error is not None:
            raise self._error
        if self._reply is None:
            raise RuntimeError("exchange has no reply yet")  # a bug in the caller
        return self._reply

    @property
    def dropped_notifications(self) -> int:
        return self.dropped

    def deliver(self, note: Notification) -> None:
        self.put(note, progress_key(note.method, note.params))

    def offer_ask(self, ask: ChildAsk) -> bool:
        """Queue an attributed ask for the reader; False if it cannot be (then the gateway answers)."""
        if self.is_done or not self.put(ask):
            return False
        if self._asks is None:
            self._asks = []
        self._asks.append(ask)
        return True

    def finish(self, reply: Reply | None = None, error: ChildError | None = None) -> None:
        if self.is_done:
            return
        self.is_done = True
        self.replied = reply is not None
        self._reply, self._error = reply, error
        self.close()
        for ask in self._asks or ():  # nobody will read them now
            ask.answer_error(CODE_NO_CLIENT_INPUT, f"the request ({self.method}) ended before the client answered")

    leave = Inbox.close_reader
    """The reader is gone: what arrives from now on is discarded (the inbox's ``close_reader``)."""

    async def first_sign(self) -> ExchangeItem | Reply | None:
        """Wait for the first thing the child sends for this request, and say what it is,
        taking nothing: the oldest queued item, else the reply (None: it failed, or the
        reader left). It is the reply exactly when the inbox's ``wait()`` gives None and the
        exchange ``replied`` (what a caller that needs no more asks, without this frame)."""
        return await self.wait() or self._reply

    def ready(self) -> list[ExchangeItem]:
        """What is queued already, without waiting (so simultaneous asks make one round)."""
        items: list[ExchangeItem] = []
        while True:
            try:
                items.append(self.get_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                return items

    def __aiter__(self) -> Exchange:
        return self

    async def __anext__(self) -> ExchangeItem:
        # No deadline here: the child's deadline pump ends a request that times out, and the
        # reader learns it here (every other outcome is read with ``reply()``).
        try:
            return await self.get()
        except anyio.EndOfStream:
            if isinstance(self._error, ChildTimeoutError):
                raise self._error from None
            raise StopAsyncIteration from None
