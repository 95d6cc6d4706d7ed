"""How a reply's bytes reach the socket: in bounded pieces, under one budget for the process.

uvicorn hands whatever the app sends to the transport at once, and the transport keeps it
until the peer reads it: a 15 MB reply to a client that reads nothing stays in memory for as
long as the connection lives. So:

- a body over ``REPLY_CHUNK_BYTES`` is sent in pieces of that size; uvicorn waits for the
  socket to drain below its high-water mark (64 KiB) before it takes the next piece, so what a
  connection buffers stays under the mark plus one piece (``GuardedHttpTools`` aborts a peer
  that reads nothing for ``WRITE_TIMEOUT``);
- such a body counts against ``MAX_UNSENT_REPLY_BYTES``, over every request of the process,
  until its last piece is handed over, at what it holds meanwhile: ``HELD_PER_REPLY_BYTE``
  times its size (its bytes, and the parsed message they were made from, which the answer
  keeps until it ends). A reply that does not fit is not written: the client gets an error
  (-31004, with HTTP 200, never 503: the request ran, so no proxy may retry it on its own; or,
  on an open SSE stream, a final error event) saying so, and may retry.

So what unread large replies hold stays near the budget: measured at 1.2 times it (the rest is
the child's last line and the connections' buffers), where counting the bytes alone let 2.2
times it be held (``tests/integration/test_held_replies.py``).
"""

from __future__ import annotations

from typing import Final

from starlette.types import Message, Send

from gateway.errors import GatewayUnavailableError

REPLY_CHUNK_BYTES: Final = 64 * 1024
"""Largest piece of a reply handed to the socket at once."""
MAX_UNSENT_REPLY_BYTES: Final = 64 * 1024 * 1024
"""Memory held by large replies being written at once, in all (clients that read slowly hold
theirs longer)."""
HELD_PER_REPLY_BYTE: Final = 2
"""What a large reply holds per byte while it is written: the bytes, and the parsed message
(mostly the same strings) that the answer keeps until its last piece is handed over."""
RETRY_AFTER: Final = 5


class ReplyBudget:
    def __init__(self, limit: int = MAX_UNSENT_REPLY_BYTES) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> bool:
        """Room for a reply of ``size`` bytes (what it holds: ``HELD_PER_REPLY_BYTE`` times that)."""
        held = size * HELD_PER_REPLY_BYTE
        if self.used + held > self.limit:
            return False
        self.used += held
        return True

    def give_back(self, size: int) -> None:
        self.used -= size * HELD_PER_REPLY_BYTE


BUDGET = ReplyBudget()
"""The process's budget (memory is per process)."""


def over_budget() -> GatewayUnavailableError:
    return GatewayUnavailableError(
        f"the gateway is holding its limit of {BUDGET.limit // 2**20} MiB of large replies for clients "
        "that read slowly; the request's reply was not sent, retry later",
        retry_after=RETRY_AFTER,
    )


def reserve(body: bytes) -> bool:
    """Take a large ``body``'s size from ``BUDGET`` (False: it does not fit); small ones always fit.
    A reserved body must then go through ``send_body``, which gives the size back."""
    return len(body) <= REPLY_CHUNK_BYTES or BUDGET.take(len(body))


async def send_body(send: Send, body: bytes, *, more_body: bool, start: Message | None = None) -> None:
    """``start`` (an ``http.response.start``, if given), then ``body`` as one ASGI message, or in
    ``REPLY_CHUNK_BYTES`` pieces when larger; a large body's reservation is given back at the end."""
    if len(body) <= REPLY_CHUNK_BYTES:
        if start is not None:
            await send(start)
        await send({"type": "http.response.body", "body": body, "more_body": more_body})
        return
    try:
        if start is not None:
            await send(start)
        view = memoryview(body)
        last = len(body) - REPLY_CHUNK_BYTES
        for offset in range(0, len(body), REPLY_CHUNK_BYTES):
            piece = bytes(view[offset : offset + REPLY_CHUNK_BYTES])
            await send({"type": "http.response.body", "body": piece, "more_body": more_body or offset < last})
    finally:
        BUDGET.give_back(len(body))
