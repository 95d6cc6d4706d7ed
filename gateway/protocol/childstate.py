"""The child session's records: a request in flight, a held question, and the deadline heap.

``Deadlines`` is a min-heap of (deadline, item) with lazy deletion: an item that settles
before its deadline (a request answered in time) stays in the heap, marked ``settled``, and
is skipped when it comes up; once more than ``COMPACT_ABOVE`` stale items make up over half
the heap, it is rebuilt, so its size stays proportional to the live items. Push and pop are
O(log n); the machine's correlation table stays a dict (O(1) per message).

Imports: standard library and ``gateway.protocol`` only.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Final, Generic, Protocol, TypeVar

from gateway.protocol import attribution
from gateway.protocol.jsonrpc import JsonObject, Request

OwnerT = TypeVar("OwnerT")

TASK_RESULT: Final = "tasks/result"
COMPACT_ABOVE: Final = 64
"""Stale deadlines (requests answered before their timeout) tolerated in the heap before it
is rebuilt: past this and half the heap, one O(n) rebuild keeps it O(live requests)."""


@dataclass(slots=True, eq=False)
class Entry(Generic[OwnerT]):
    """A request in flight (hashed by identity: it is a candidate in held questions)."""

    owner: OwnerT
    method: str
    params: JsonObject | None
    cancellable: bool
    accepts_asks: bool
    log_level: str | None  # the client's minimum for notifications/message; None: it wants none
    tool: str | None  # the caller's tool key (``attribution.tool_key``); computed when absent
    timeout: float | None
    deadline: float | None = None
    due: Due[Entry[OwnerT] | Held[OwnerT] | Lingering[OwnerT]] | None = (
        None  # its place in the deadline heap, emptied when it settles early
    )
    child_id: int = 0
    questioned: bool = False  # a question came while this request was one of its candidates
    asked: bool = False  # a question was given to its client (``QuestionDesk``)
    settled: bool = False  # it has had its outcome

    @property
    def may_ask(self) -> bool:
        return self.accepts_asks and not self.settled and attribution.may_ask(self.method)

    def awaits_task(self, task_id: str) -> bool:
        """Whether this is a ``tasks/result`` for ``task_id`` that carries the task's questions
        (2025-11-25: a task's background requests come while its client waits there)."""
        return (
            self.accepts_asks
            and not self.settled
            and self.method == TASK_RESULT
            and (self.params or {}).get("taskId") == task_id
        )

    def tool_key(self) -> str | None:
        if not self.accepts_asks:
            return None
        return self.tool if self.tool is not None else attribution.tool_key(self.method, self.params)


@dataclass(slots=True, eq=False)
class Held(Generic[OwnerT]):
    """An ambiguous question, until one candidate is left or its deadline passes."""

    request: Request
    candidates: frozenset[Entry[OwnerT]]
    deadline: float
    # Candidates the gateway ended without their child's answer (``Lingering``): the question
    # may be one of theirs, so it never goes to another (``QuestionDesk``). One whose child
    # then answers it on its own (no cancel was written) is taken out again: it asked nothing.
    cancelled: set[Entry[OwnerT]] = field(default_factory=set)
    settled: bool = False
    due: Due[Entry[OwnerT] | Held[OwnerT] | Lingering[OwnerT]] | None = None


@dataclass(slots=True, eq=False)
class Lingering(Generic[OwnerT]):
    """A request that asked its client something, or was a held question's candidate, and was
    then ended by the gateway (its caller left, or it timed out) without its child's answer:
    the child may go on asking for it (a tool that does not stop at the cancel), so until
    ``deadline`` it stays a candidate for the child's questions, which nobody answers but the
    gateway (``QuestionDesk``).

    ``cancel`` is the reason of a ``notifications/cancelled`` held back (None: written, or
    none to write)."""

    entry: Entry[OwnerT]
    deadline: float
    cancel: str | None = None
    settled: bool = False
    due: Due[Entry[OwnerT] | Held[OwnerT] | Lingering[OwnerT]] | None = None

    @property
    def natural(self) -> bool:
        """No cancel was written for it (held back, or none to write): a reply from its child
        is the child's own end of it, not an answer to the cancel."""
        return self.cancel is not None or not self.entry.cancellable


class Settles(Protocol):
    @property
    def settled(self) -> bool: ...


ItemT = TypeVar("ItemT", bound=Settles)


Due = list[ItemT | None]
"""An item's place in the heap, a list of one: emptied (``[None]``) when the item settles
early, so a stale heap entry keeps no request alive: not its params (a megabyte method name,
say), not its owner, not the answer the owner holds. A list, not a record: one is made per
timed request, and a list of one costs a fraction of a record's ``__init__``."""


class Deadlines(Generic[ItemT]):
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Due[ItemT]]] = []
        self._order = itertools.count()  # ties never compare the items
        self._stale = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, deadline: float, item: ItemT) -> Due[ItemT]:
        """Add ``item``; the returned ``Due`` is what ``settled_early`` takes."""
        heap = self._heap
        if self._stale > COMPACT_ABOVE and self._stale * 2 > len(heap):
            heap[:] = [slot for slot in heap if slot[2][0] is not None]
            heapq.heapify(heap)
            self._stale = 0
        due: Due[ItemT] = [item]
        heapq.heappush(heap, (deadline, next(self._order), due))
        return due

    def settled_early(self, due: Due[ItemT]) -> None:
        """An item settled before its deadline: its heap entry is stale from now on, and lets
        go of the item at once."""
        if due[0] is not None:
            due[0] = None
            self._stale += 1

    def next(self) -> float | None:
        heap = self._heap
        while heap and heap[0][2][0] is None:
            heapq.heappop(heap)
            self._stale -= 1
        return heap[0][0] if heap else None

    def pop_due(self, now: float) -> ItemT | None:
        """The earliest unsettled item whose deadline is ``now`` or past, taken out; else None.
        One at a time: handling one may settle the next."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            due = heapq.heappop(heap)[2]
            item = due[0]
            if item is not None and not item.settled:
                due[0] = None  # out of the heap: a later ``settled_early`` counts nothing stale
                return item
            if item is None:
                self._stale -= 1
        return None

    def clear(self) -> None:
        self._heap.clear()
        self._stale = 0
