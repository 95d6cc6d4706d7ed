"""A FIFO of messages waiting for a slow reader, where only progress may be coalesced.

Rules (issue #14: "the final result and every non-progress message always arrive"):

- Below ``coalesce_above`` queued items, every item is kept, in order.
- At or above it, an item with a ``key`` (progress for one token) whose key already has an
  item waiting **replaces that item's value in place**: the reader gets the latest progress
  for the token, at the older item's position, and the queue does not grow. With no item of
  that key waiting, it is queued like any other.
- An item without a key (a log message, an ask) is queued up to ``hard_limit`` items; an
  item put with ``always=True`` (the final reply) is queued whatever the length, so a reply
  is never lost.
- At ``hard_limit`` items anything else is refused (``put`` returns False, counted in
  ``dropped``). The hard limit only binds when a child floods one request faster than its
  client reads, and is what keeps that from growing without bound; the HTTP write timeout
  ends a client that stops reading altogether.

Every operation is O(1): a queued item sits in a one-element box that the key index points
at, so replacing a value never searches the queue.
Imports: standard library only (sans-IO: no anyio, no clock).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class Backlog(Generic[T]):
    def __init__(self, coalesce_above: int, hard_limit: int | None = None) -> None:
        self.coalesce_above = coalesce_above
        self.hard_limit = hard_limit if hard_limit is not None else 4 * coalesce_above
        self.coalesced = 0  # progress values replaced by a newer one (a reader that fell behind)
        self.dropped = 0  # keyed items refused at the hard limit
        self._boxes: deque[tuple[list[T], Hashable | None]] = deque()
        self._waiting: dict[Hashable, list[T]] = {}  # key → the box of its queued item

    def __len__(self) -> int:
        return len(self._boxes)

    def put(self, item: T, key: Hashable | None = None, *, always: bool = False) -> bool:
        """Queue ``item``; True unless it was refused (see the module rules)."""
        if not always and len(self._boxes) >= self.coalesce_above:
            box = self._waiting.get(key) if key is not None else None
            if box is not None:
                box[0] = item
                self.coalesced += 1
                return True
            if len(self._boxes) >= self.hard_limit:
                self.dropped += 1
                return False
        box = [item]
        self._boxes.append((box, key))
        if key is not None:
            self._waiting[key] = box
        return True

    def first(self) -> T | None:
        """The oldest item, left queued; None when empty."""
        return self._boxes[0][0][0] if self._boxes else None

    def pop(self) -> T:
        """The oldest item; raises ``IndexError`` when empty."""
        box, key = self._boxes.popleft()
        if key is not None and self._waiting.get(key) is box:
            del self._waiting[key]
        return box[0]

    def clear(self) -> None:
        self._boxes.clear()
        self._waiting.clear()
