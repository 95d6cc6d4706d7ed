"""A pool's settings and its members: ``PoolSettings`` (sizes, limits, timeouts, the ask
policy) and ``Member`` (one child of the pool, from its start to its exit: its leases,
who holds them, whether it is retiring or runs one request alone). ``gateway.stdio.pool``
re-exports both; the pool's rules are written there.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from gateway.protocol import attribution
from gateway.protocol.attribution import AskPolicy, ChildLoad
from gateway.protocol.jsonrpc import Notification, Reply, Request
from gateway.stdio.child import StdioChild
from gateway.stdio.handshake import StartWait

if TYPE_CHECKING:
    from gateway.stdio.pool import Pool

log = logging.getLogger("gateway.pool")


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

    def __post_init__(self) -> None:
        if self.min_size < 0 or self.max_size < 1 or self.min_size > self.max_size:
            raise ValueError(f"pool sizes need 0 <= min ({self.min_size}) <= max ({self.max_size}), max >= 1")
        if self.max_in_flight < 0:
            raise ValueError("max_in_flight must be 0 (unlimited) or more")


PoolListener = Callable[["Pool", Notification], None]
LossListener = Callable[["Pool"], None]
"""Called when a started child of the pool exits unplanned (crash), or the pool closes."""
PoolRequestHandler = Callable[["Pool", Request], Awaitable[Reply | None]]
"""Offered a child's unattributable request (``Pool.add_request_handler``); None: not mine."""


class Member:
    """One child in the pool, from its start to its exit."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.child: StdioChild | None = None
        self.leases = 0
        self.asking_leases = 0  # leases for requests that may ask and need the child alone (rules 1, 3)
        self.served = 0
        self.started_at = time.monotonic()
        self.last_used = self.started_at
        self.last_check = self.started_at
        self.retiring = False
        self.exclusive = False  # a suspect's request runs on it alone
        self.stop = anyio.Event()
        self.principals: Counter[str] = Counter()  # leases held, by principal
        self.crashed_with: frozenset[str] | None = None  # who held leases when its child died
        self.start_wait: StartWait | None = None  # while its child starts: what it has not answered yet

    def watch_start(self, wait: StartWait) -> None:
        self.start_wait = wait

    def note_death(self) -> None:
        """Remember who had requests in flight when the child died (the first to notice)."""
        if self.crashed_with is None:
            self.crashed_with = frozenset(p for p, n in self.principals.items() if n > 0)

    @property
    def is_live(self) -> bool:
        return self.child is not None and self.child.is_alive() and not self.retiring

    def has_room(self, method: str | None = None, tool: str | None = None) -> bool:
        limit = self.pool.settings.max_in_flight
        if not self.is_live or self.exclusive or (limit != 0 and self.leases >= limit):
            return False
        if not attribution.may_ask(method):  # rule 2 is about requests that may ask
            return True
        assert self.child is not None
        load = ChildLoad(self.asking_leases, self.child.open_questions)
        # Exclusivity matters only beside another asking request (``admits``): not worked out otherwise.
        exclusive = load.asking_requests > 0 and self.pool.is_exclusive(self.child, tool)
        return attribution.admits(load, method, exclusive=exclusive)

    def retire(self, why: str) -> None:
        if not self.retiring:
            self.retiring = True
            pid = self.child.pid if self.child else None
            log.info("%s: retiring child pid %s (%s)", self.pool.label, pid, why)
        if self.leases == 0:
            self.stop.set()
