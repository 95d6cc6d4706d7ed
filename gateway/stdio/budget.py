"""The global child cap: how many children all pools of the gateway may run together.

Every isolation key (a principal, a legacy session, a credential fingerprint) gets its own
pool, and every pool its own children, so without a bound a client could start a process
per key. ``ChildBudget`` is shared by every pool of every server:

- a pool's dispatcher asks ``has_room()`` before it starts a child **on demand**. At the cap
  it asks for a ``victim(pool, spared)``: the least recently used **idle** child of another
  pool (live, no lease, above its pool's minimum). The decision returns it as an
  ``EvictChild`` action, and the pool carries it out with ``evict``, which retires the child
  in its own pool; the budget never changes a pool in the middle of another pool's decision.
  With no victim the request waits (the pool's queue timeout) for a child anywhere to become
  idle, retire or stop (``changed``: the waiting pools serve their queues, the pool whose
  held-back request arrived first first), then gets ``full_error()`` (503 + ``Retry-After``);
- children in service count (starting or live); a retired child stopping does not, since
  the stop ladder ends it within its graces. Pre-warmed minimums (``pool.min``) are started
  with their pool regardless, and are never evicted; a pool restarting its minimum after a
  crash waits for room (``has_room``) instead of evicting.

The default is sized to the machine (``machine_children``): ``CHILDREN_PER_CPU`` per CPU
the gateway may use (its CPU affinity, under its cgroup's CPU quota), or one per
``CHILD_MEMORY_BYTES`` of the memory it may use (the machine's, under its cgroup's memory
limit), whichever is smaller, and never below ``MIN_CHILDREN``. The cgroup limits are read for
v1 and v2 alike (``gateway.stdio.cgroups``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from gateway.errors import GatewayUnavailableError
from gateway.stdio.cgroups import CgroupLimits, read_limits

if TYPE_CHECKING:
    from gateway.stdio.member import Member
    from gateway.stdio.pool import Pool

CHILDREN_PER_CPU: Final = 16
"""Stdio servers mostly wait on their clients and on I/O; 16 busy ones already share a core."""
CHILD_MEMORY_BYTES: Final = 64 * 1024 * 1024
"""A typical node or python MCP server's resident size (a node server is 50–80 MB)."""
MIN_CHILDREN: Final = 8
"""The smallest machine still runs a few isolation keys at once."""
FULL_RETRY_AFTER: Final = 5
"""Seconds a client is told to wait when every child of the gateway is busy."""


def _affinity_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _physical_memory() -> int | None:
    with contextlib.suppress(ValueError, OSError, AttributeError):  # not POSIX
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None  # pragma: no cover - not POSIX


def children_for(cpus: float, memory_bytes: int | None) -> int:
    """The cap for ``cpus`` CPUs (a fraction under a CPU quota) and ``memory_bytes`` of memory
    (None: unknown): the smaller of the two sizes, never below ``MIN_CHILDREN``."""
    by_cpu = int(CHILDREN_PER_CPU * cpus)
    by_memory = memory_bytes // CHILD_MEMORY_BYTES if memory_bytes else by_cpu
    return max(MIN_CHILDREN, min(by_cpu, by_memory))


def machine_children(limits: CgroupLimits | None = None) -> int:
    """The default cap for this machine (see the module docstring): the CPUs the gateway may run
    on (its affinity, under its cgroup's CPU quota) and the memory it may use (the machine's,
    under its cgroup's limit). ``limits``: the cgroup's (read from ``/sys/fs/cgroup`` when None)."""
    limits = read_limits() if limits is None else limits
    cpus: float = _affinity_cpus()
    if limits.cpus is not None:
        cpus = min(cpus, limits.cpus)
    memory = [m for m in (_physical_memory(), limits.memory_bytes) if m]
    return children_for(cpus, min(memory, default=None))


class ChildBudget:
    def __init__(self, capacity: int = 0) -> None:
        """``capacity`` children at most over all pools; 0: ``machine_children()``."""
        if capacity < 0:
            raise ValueError("the child cap must be 0 (sized to the machine) or more")
        self.capacity = capacity or machine_children()
        self.pools: set[Pool] = set()
        self.waiting: set[Pool] = set()  # pools with a request waiting (for room, or maybe later)
        self.evictions = 0

    def __repr__(self) -> str:
        return f"<ChildBudget {self.in_service()}/{self.capacity} pools={len(self.pools)}>"

    def in_service(self) -> int:
        return sum(1 for pool in self.pools for member in pool.members if not member.retiring)

    def has_room(self) -> bool:
        return self.in_service() < self.capacity

    def victim(self, pool: Pool, spared: Collection[object]) -> Victim | None:
        """The idle child to evict for one more start of ``pool`` at the cap (none of ``spared``):
        a fact for its decision, which returns it as ``EvictChild``; nothing changes here."""
        candidates = [
            Victim(other, member)
            for other in self.pools
            if other is not pool and len(other.members) > other.settings.min_size
            for member in other.members
            if member.is_live and member.leases == 0
        ]
        return min((v for v in candidates if v not in spared), key=lambda v: v.member.last_used, default=None)

    def evict(self, victim: object, pool: Pool) -> None:
        """Carry out ``pool``'s ``EvictChild``: ``victim``'s pool retires it (and stops it)."""
        assert isinstance(victim, Victim), victim
        self.evictions += 1
        why = f"evicted for {pool.label}: the gateway runs at most {self.capacity} children"
        victim.pool.evict(victim.member, why)

    def room_for(self, pool: Pool) -> PoolRoom:
        """This budget as ``pool``'s dispatcher sees it (``gateway.protocol.dispatchstate.Room``)."""
        return PoolRoom(self, pool)

    def full_error(self, label: str) -> GatewayUnavailableError:
        return GatewayUnavailableError(
            f"{label}: the gateway already runs its limit of {self.capacity} children (--max-children), "
            "all of them busy; retry later",
            retry_after=FULL_RETRY_AFTER,
            server=label,
            max_children=self.capacity,
        )

    def changed(self) -> None:
        """A child became idle or left service: the pools with requests waiting for room serve
        their queues, in the order those requests arrived (the pool whose first held-back
        request arrived first goes first, ``Dispatcher.blocked_since``), so the room goes to
        the waiter that arrived first, whichever pool it waits in."""
        held = [pool for pool in self.waiting if pool.dispatch.held_back]
        for pool in sorted(held, key=lambda pool: pool.dispatch.blocked_since()):
            pool.wake()


@dataclass(frozen=True, slots=True)
class Victim:
    """An idle child of ``pool`` that another pool's start may evict (``ChildBudget.victim``)."""

    pool: Pool
    member: Member


class PoolRoom:
    """One pool's view of the budget: the ``Room`` its dispatcher claims starts from."""

    __slots__ = ("budget", "pool")

    def __init__(self, budget: ChildBudget, pool: Pool) -> None:
        self.budget = budget
        self.pool = pool

    def has_room(self) -> bool:
        return self.budget.has_room()

    def victim(self, spared: Collection[object]) -> Victim | None:
        return self.budget.victim(self.pool, spared)

    def full_error(self, label: str) -> GatewayUnavailableError:
        return self.budget.full_error(label)
