"""The global child cap: how many children all pools of the gateway may run together.

Every isolation key (a principal, a legacy session, a credential fingerprint) gets its own
pool, and every pool its own children, so without a bound a client could start a process
per key. ``ChildBudget`` is shared by every pool of every server:

- a pool asks ``claim(pool)`` before it starts a child **on demand**. Below the cap the
  answer is yes. At the cap, the least recently used **idle** child of another pool (live,
  no lease, above its pool's minimum) is retired to make room, and the answer is yes;
  with none to evict the answer is no: the request waits (the pool's queue timeout) for a
  child anywhere to become idle or stop, then gets ``full_error()`` (503 + ``Retry-After``);
- children in service count (starting or live); a retired child stopping does not, since
  the stop ladder ends it within its graces. Pre-warmed minimums (``pool.min``) are started
  with their pool regardless, and are never evicted; a pool restarting its minimum after a
  crash waits for room (``has_room``) instead of evicting.

The default is sized to the machine (``machine_children``): ``CHILDREN_PER_CPU`` per CPU
the gateway may use, or one per ``CHILD_MEMORY_BYTES`` of the memory it may use (the
cgroup limit in a container), whichever is smaller, and never below ``MIN_CHILDREN``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Final

from gateway.errors import GatewayUnavailableError

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
CGROUP_MEMORY_MAX: Final = Path("/sys/fs/cgroup/memory.max")


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _memory_bytes() -> int | None:
    limits: list[int] = []
    with contextlib.suppress(ValueError, OSError, AttributeError):  # not POSIX
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    try:
        text = CGROUP_MEMORY_MAX.read_text().strip()
        if text.isdigit():
            limits.append(int(text))
    except OSError:
        pass
    return min(limits) if limits else None


def machine_children() -> int:
    """The default cap for this machine (see the module docstring)."""
    by_cpu = CHILDREN_PER_CPU * _cpus()
    memory = _memory_bytes()
    by_memory = memory // CHILD_MEMORY_BYTES if memory else by_cpu
    return max(MIN_CHILDREN, min(by_cpu, by_memory))


class ChildBudget:
    def __init__(self, capacity: int = 0) -> None:
        """``capacity`` children at most over all pools; 0: ``machine_children()``."""
        if capacity < 0:
            raise ValueError("the child cap must be 0 (sized to the machine) or more")
        self.capacity = capacity or machine_children()
        self.pools: set[Pool] = set()
        self.waiting: set[Pool] = set()  # pools with a request waiting for room
        self.evictions = 0

    def __repr__(self) -> str:
        return f"<ChildBudget {self.in_service()}/{self.capacity} pools={len(self.pools)}>"

    def in_service(self) -> int:
        return sum(1 for pool in self.pools for member in pool.members if not member.retiring)

    def has_room(self) -> bool:
        return self.in_service() < self.capacity

    def claim(self, pool: Pool) -> bool:
        """May ``pool`` start one more child now? At the cap, evict an idle child elsewhere."""
        if self.has_room():
            return True
        victim = self._idle_elsewhere(pool)
        if victim is None:
            return False
        self.evictions += 1
        owner, member = victim
        owner.evict(member, f"evicted for {pool.label}: the gateway runs at most {self.capacity} children")
        return True

    def room_for(self, pool: Pool) -> PoolRoom:
        """This budget as ``pool``'s dispatcher sees it (``gateway.protocol.dispatchstate.Room``)."""
        return PoolRoom(self, pool)

    def _idle_elsewhere(self, pool: Pool) -> tuple[Pool, Member] | None:
        candidates = [
            (other, member)
            for other in self.pools
            if other is not pool and len(other.members) > other.settings.min_size
            for member in other.members
            if member.is_live and member.leases == 0
        ]
        return min(candidates, key=lambda pair: pair[1].last_used, default=None)

    def full_error(self, label: str) -> GatewayUnavailableError:
        return GatewayUnavailableError(
            f"{label}: the gateway already runs its limit of {self.capacity} children (--max-children), "
            "all of them busy; retry later",
            retry_after=FULL_RETRY_AFTER,
            server=label,
            max_children=self.capacity,
        )

    def changed(self) -> None:
        """A child became idle or left service: the pools waiting for room look again."""
        for pool in list(self.waiting):
            pool.wake()


class PoolRoom:
    """One pool's view of the budget: the ``Room`` its dispatcher claims starts from."""

    __slots__ = ("budget", "pool")

    def __init__(self, budget: ChildBudget, pool: Pool) -> None:
        self.budget = budget
        self.pool = pool

    def has_room(self) -> bool:
        return self.budget.has_room()

    def claim(self) -> bool:
        return self.budget.claim(self.pool)

    def full_error(self, label: str) -> GatewayUnavailableError:
        return self.budget.full_error(label)
