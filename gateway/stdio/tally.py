"""What a pool has counted over its life, as values that add up: ``PoolTally`` and ``StartTimes``.

``/metrics`` shows counters, and a counter must never fall (Prometheus's ``rate()`` reads a
fall as a restart of the process). Pools come and go: a principal's, a session's or a roots
set's pool is dropped once idle. So when a pool has ended, its tally is folded into its
server's totals for its pool kind (``gateway.relay.pools``), and what a scrape shows for a
server and pool kind is that total plus the tallies of the kind's pools still running. A
pool's own tally only grows: a child's counters move into the pool's ``retired`` the moment
it exits, with no await between (``gateway.stdio.pool``).

``StartTimes`` is a histogram of cold starts (spawn to handshake done) with fixed buckets,
``START_BUCKETS``: it counts every start, however many.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

START_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Upper bounds in seconds of ``mcp_gateway_child_start_seconds``' buckets (then ``+Inf``): a
binary or a local Python server starts in 50 ms to 1 s, ``uvx`` and a cached ``npx`` in 1–5 s,
an ``npx -y`` that downloads its package first in 10–60 s; a pool waits ``STARTUP_WAIT``
(120 s) for a first start."""
_BOUNDS: Final = (*START_BUCKETS, math.inf)


class StartTimes:
    """A histogram of cold starts: the count per bucket (not cumulative) and the sum."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * len(_BOUNDS)
        self.sum = 0.0

    def __repr__(self) -> str:
        return f"<StartTimes count={self.count} sum={self.sum:.3f}>"

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(_BOUNDS, seconds)] += 1  # the first bucket whose bound is ≥ seconds
        self.sum += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def add(self, other: StartTimes) -> None:
        self.counts = [mine + theirs for mine, theirs in zip(self.counts, other.counts, strict=True)]
        self.sum += other.sum

    def copy(self) -> StartTimes:
        copy = StartTimes()
        copy.add(self)
        return copy

    def buckets(self) -> list[tuple[float, int]]:
        """Cumulative, as Prometheus reads them: (upper bound, starts at most that long), ``+Inf`` last."""
        total, cumulative = 0, []
        for bound, count in zip(_BOUNDS, self.counts, strict=True):
            total += count
            cumulative.append((bound, total))
        return cumulative


@dataclass(slots=True)
class PoolTally:
    """A pool's counts over its life, or the sum of several pools' (``add``)."""

    spawns: int = 0
    restarts: int = 0
    exits: Counter[str] = field(default_factory=Counter)  # by reason: "code 0", "SIGKILL", "start failure"…
    children: Counter[str] = field(default_factory=Counter)  # its children's counters (StdioChild.counters)
    starts: StartTimes = field(default_factory=StartTimes)

    def add(self, other: PoolTally) -> None:
        self.spawns += other.spawns
        self.restarts += other.restarts
        self.exits.update(other.exits)
        self.children.update(other.children)
        self.starts.add(other.starts)
