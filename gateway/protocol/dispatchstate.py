"""What the pool's dispatcher (``gateway.protocol.dispatch``) works on: its settings, its
members' bookkeeping (with the facts of each child it was given: ``ChildProfile`` at its
start, ``ChildFacts`` as they change, a ``Reading`` at each tick; it never reads a child), a
child budget and a crash ledger, and the actions it returns for the stdio edge to carry out.

Imports: standard library, ``gateway.errors`` and ``gateway.protocol`` only; no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Final, Generic, Protocol, TypeVar

from gateway.errors import GatewayError
from gateway.protocol.attribution import AskPolicy
from gateway.protocol.childactions import ChildFacts

ASKING_CHILDREN: Final = 16
"""Children a pool may grow to for calls that need a child to themselves (askers), past
``--pool-max``. A node MCP server costs about 70 MB resident (server-everything and
server-filesystem measured at 69–71 MB, the Python test server at 17 MB), so 16 cost about
1.1 GB at worst; they are started only while askers wait, and stop after ``--idle-timeout``.
Sixteen hold two principals at their cap of parked questions, or one at its cap and eight
other askers, before anyone queues."""
MAX_PARKED_PER_PRINCIPAL: Final = 8
"""Calls of one principal holding a question its client has not answered (a parked MRTR call,
or a legacy client's open ask), per pool: each holds a child for up to ``--input-timeout``.
Past it the principal's next asking call gets 429; eight concurrent interactive clients behind
one address (one anonymous principal) still each get their question."""
STDIN_STALL_NOTICE: Final = 2.0
"""Seconds a write to a child's stdin may wait for the pipe before the pool stops giving that
child new requests and may start another beside it (dispatch rule 7). A healthy child takes a
4 MiB line in milliseconds; one that waits this long has stopped reading for now. It is stopped
only at ``--stdin-stall-timeout`` (60 s): until then it may read again and rejoin."""
MAX_CONCURRENT_STARTS: Final = 4
"""Children a pool starts at once for waiting askers: a node server's cold start is CPU-bound,
and four at once already fill a small machine."""


@dataclass(frozen=True)
class PoolSettings:
    min_size: int = 1
    max_size: int = 1
    max_in_flight: int = 0
    queue_timeout: float = 30.0
    idle_timeout: float = 300.0
    max_requests: int = 0
    max_age: float = 0.0
    stall_timeout: float = 0.0
    liveness_interval: float = 60.0
    liveness_timeout: float = 10.0  # seconds a liveness check may take before the child is recycled
    child_asks: AskPolicy = AskPolicy.AUTO  # whether requests that may ask get a child to themselves
    asking_max: int = ASKING_CHILDREN  # children at most for askers (never fewer than max_size)
    max_parked_per_principal: int = MAX_PARKED_PER_PRINCIPAL  # 0: no cap
    stall_notice: float = STDIN_STALL_NOTICE  # seconds a stdin write waits before routing around

    def __post_init__(self) -> None:
        if self.min_size < 0 or self.max_size < 1 or self.min_size > self.max_size:
            raise ValueError(f"pool sizes need 0 <= min ({self.min_size}) <= max ({self.max_size}), max >= 1")
        if self.max_in_flight < 0:
            raise ValueError("max_in_flight must be 0 (unlimited) or more")
        if self.asking_max < 0 or self.max_parked_per_principal < 0:
            raise ValueError("asking_max and max_parked_per_principal must be 0 or more")

    @property
    def asking_bound(self) -> int:
        """Children at most while askers wait (``max_size`` when ``asking_max`` is smaller)."""
        return max(self.max_size, self.asking_max)


C = TypeVar("C")
"""A child, as the stdio edge holds it: the dispatcher hands it out in leases and never reads it."""


@dataclass(frozen=True, slots=True)
class ChildProfile:
    """What the dispatcher is told of a child when it has started (``Dispatcher.started``) and
    keeps for its life: its pid (for the log), whether it speaks the legacy era, and the client
    capabilities it was told (attribution rule 3: what it may ask)."""

    pid: int
    legacy: bool
    declared: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class Reading:
    """A child's counters as the stdio edge reads them for a maintenance tick
    (``Dispatcher.maintain``): requests in flight (not its open listens, which may rightly say
    nothing for hours), its requests waiting for a client's answer,
    when stdout last said anything and since when a write to its stdin has waited (None: none
    waits)."""

    in_flight: int
    awaiting_input: int
    last_output: float
    stdin_waiting_since: float | None


class Room(Protocol):
    """The gateway's child budget as one pool sees it (``gateway.stdio.budget``): asked, never
    changed, by a decision. A start at the cap takes a ``victim`` (another pool's idle child),
    which the decision returns as ``EvictChild`` for the stdio edge to retire."""

    def has_room(self) -> bool: ...
    def victim(self, spared: Collection[object]) -> object | None:
        """The idle child of another pool to retire for one more start, none of ``spared`` (the
        victims this decision already chose); None when there is none."""

    def full_error(self, label: str) -> GatewayError: ...


class NoBudget:
    """No global cap: there is always room."""

    def has_room(self) -> bool:
        return True

    def victim(self, spared: Collection[object]) -> object | None:  # pragma: no cover - always room
        return None

    def full_error(self, label: str) -> GatewayError:  # pragma: no cover - never refused
        raise AssertionError("NoBudget never refuses")


class Ledger(Protocol):
    """Crashes by principal (``gateway.stdio.crashes.CrashLedger``)."""

    def check(self, principal: str, now: float, label: str) -> None: ...
    def record(self, principals: Collection[str], now: float) -> None: ...


@dataclass(eq=False)
class Member(Generic[C]):
    """One child of the pool, from its start to its exit (compared by identity)."""

    started_at: float
    child: C | None = None  # None while it starts
    pid: int | None = None  # from its ``ChildProfile`` (for the log)
    legacy: bool = False  # it speaks the legacy era (its profile)
    declared: Mapping[str, object] = field(default_factory=dict)  # the capabilities it was told (its profile)
    alive: bool = False  # its ``ChildFacts``: it has started and not died
    questions: int = 0  # its ``ChildFacts``: questions open (with a client, or held as ambiguous)
    asked: bool = False  # its ``ChildFacts``: a question came while a request that may ask was in flight
    leases: int = 0
    asking_leases: int = 0  # leases of askers: requests that may ask and need the child alone
    served: int = 0
    last_used: float = 0.0
    last_check: float = 0.0
    retiring: bool = False
    exclusive: bool = False  # a crash suspect's request runs on it alone
    stalled: bool = False  # its stdin has taken nothing for ``stall_notice``: no new requests
    # Leases held, and asking leases held, by principal: plain dicts (a Counter's item access
    # is a Python call per lease and release); a principal with none is not a key.
    principals: dict[str, int] = field(default_factory=dict)
    askers: dict[str, int] = field(default_factory=dict)
    crashed_with: frozenset[str] | None = None  # who held leases when its child died

    def __post_init__(self) -> None:
        self.last_used = self.last_check = self.started_at

    @property
    def is_live(self) -> bool:
        return self.alive and not self.retiring

    @property
    def is_starting(self) -> bool:
        return self.child is None

    def holds_questions(self) -> bool:
        """A question of this child waits for its client (asked, or held as ambiguous)."""
        return self.questions > 0

    def note(self, facts: ChildFacts) -> None:
        """Its child's facts changed (``ChildFacts``): the copy decisions read."""
        self.questions, self.asked, self.alive = facts.open_questions, facts.has_asked, facts.alive

    def note_death(self) -> None:
        """Remember who had requests in flight when the child died (the first to notice)."""
        if self.crashed_with is None:
            self.crashed_with = frozenset(p for p, n in self.principals.items() if n > 0)

    def leave(self, principal: str, asking: bool) -> None:
        """A lease of ``principal`` (an asker's, if ``asking``) ended: its counts go down, a
        principal's at zero removed."""
        if asking:
            self.asking_leases -= 1
            _drop(self.askers, principal)
        # ``_drop(self.principals, principal)`` spelled out: every lease ends here.
        principals = self.principals
        left = principals.get(principal, 0) - 1
        if left > 0:
            principals[principal] = left
        else:
            principals.pop(principal, None)
        self.leases -= 1


@dataclass(slots=True, eq=False)
class Ticket(Generic[C]):
    """One request for a child, queued in arrival order from ``Dispatcher.ticket`` until it is
    granted a lease, fails, or leaves. Its outcome, when decided while it waits, is kept here
    for its own try to take (``lease``, ``error``), and it is woken for it (``Wake``)."""

    principal: str
    method: str | None
    tool: str | None
    prefer: C | None
    arrived: float
    asker: bool  # it may ask and its tool is not known quiet: it needs a child to itself
    unplaced: bool = False  # counted among the askers no child could take (each may start one)
    queued: bool = True  # still in the dispatcher's queue (no lease, no error, not left)
    deadline: float = math.inf  # when it fails if no child is granted (set at each placing)
    blocked: bool = False  # the global child cap held back a start for it at its last placing
    lease: Lease[C] | None = None  # granted while it waited, not yet taken by its try
    error: GatewayError | None = None  # what it fails with, decided while it waited
    reclaimed: bool = False  # a parked call of a principal above its fair share was ended for it


@dataclass(slots=True, eq=False)
class Lease(Generic[C]):
    """A request's hold on a member: what ``release`` gives back."""

    member: Member[C]
    principal: str
    alone: bool  # a crash suspect's request, run alone
    asking: bool  # it counts among the member's asking leases


# -- actions for the stdio edge ---------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class StartChild(Generic[C]):
    """Run ``member`` (already counted in the pool): spawn its child, hand it over when ready."""

    member: Member[C]


@dataclass(frozen=True, slots=True, eq=False)
class StopChild(Generic[C]):
    """Stop ``member``'s child now (its leases, if any, fail with the child's exit)."""

    member: Member[C]


@dataclass(frozen=True, slots=True, eq=False)
class CheckLiveness(Generic[C]):
    """Ask ``member``'s idle child whether it still answers; report ``liveness_failed``."""

    member: Member[C]


@dataclass(frozen=True, slots=True)
class RestartAfter:
    """Call ``restart_due`` after ``delay`` seconds."""

    delay: float


@dataclass(frozen=True, slots=True, eq=False)
class Wake(Generic[C]):
    """Wake ``ticket``'s request, and only it: it was granted a lease or failed while it waited
    (its try takes the outcome), or its deadline came nearer (it waits again, less long)."""

    ticket: Ticket[C]


@dataclass(frozen=True, slots=True, eq=False)
class EvictChild:
    """Retire ``victim`` (another pool's idle child, as ``Room.victim`` named it) to make room in
    the gateway's child budget for a start this decision made."""

    victim: object


@dataclass(frozen=True, slots=True)
class ReleaseParked:
    """End the oldest call of ``principal`` parked on this pool's children (its client left a
    question unanswered): every child that may ask holds an unanswered question, and
    ``principal`` holds more of them than the waiting asker's principal (fair share)."""

    principal: str


@dataclass(frozen=True, slots=True)
class Lost:
    """A started child exited unplanned: state emulated on the pool's children must end."""


@dataclass(slots=True)
class Waiting(Generic[C]):
    """No child yet: wait for the ticket's ``Wake`` until ``deadline``, then try again."""

    deadline: float
    blocked: bool  # the global child cap held back a start: the budget should tell this pool
    actions: tuple[PoolAction[C], ...] = ()


PoolAction = (
    StartChild[C] | StopChild[C] | CheckLiveness[C] | RestartAfter | Wake[C] | Lost | EvictChild | ReleaseParked
)
Decision = Lease[C] | Waiting[C]
"""A try of ``Dispatcher.try_acquire``: the lease granted, or how long to wait."""


def _drop(counter: dict[str, int], key: str) -> None:
    left = counter.get(key, 0) - 1
    if left > 0:
        counter[key] = left
    else:
        counter.pop(key, None)
