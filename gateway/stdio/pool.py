"""A pool of children for one server and one isolation key: dispatch, growth, supervision.

Rules (decided synchronously, so no await can interleave a check and its update):

- **Dispatch**: a request leases the live child with the fewest leases below
  ``max_in_flight`` (0 = unlimited), preferring the child a legacy session already uses;
  if none is free and the pool is below ``max_size``, one more child is started; otherwise
  the request waits at most ``queue_timeout`` and then fails with 503 + ``Retry-After``.
  While no child is ready yet (cold start), it waits up to ``STARTUP_WAIT`` instead.
- **Questions** (``gateway.protocol.attribution``): a request that may ask (``tools/call``,
  ``prompts/get``, ``resources/read``) is not given a child on which a question is open, nor,
  when the server asks (``child_asks``: ``auto`` learns it from the first question and assumes
  it for legacy children told they may ask for sampling or elicitation), a child that already
  runs such a request. So each question has exactly one request it can belong to; the pool
  grows (within ``max_size``) for the others, or they queue as above.
- **Size**: ``min_size`` children are started with the pool (pre-warmed, so ``npx`` cold
  start is paid before traffic) and kept; children above the minimum stop after
  ``idle_timeout`` without a lease. A child is recycled after ``max_requests`` leases or
  ``max_age`` seconds (0 = never), once its last lease ends.
- **Supervision**: a child that exits is replaced when the pool is below ``min_size`` or
  requests are waiting, after a backoff that doubles with each quick failure (start failure
  or exit within ``QUICK_EXIT`` of starting) up to ``BACKOFF_MAX``. ``CRASH_LOOP``
  consecutive quick failures mark the pool **failing**: requests then fail at once with
  the last error (command, exit, stderr tail) and readiness reports it, until a later start
  succeeds. A child that stops answering — requests pending but no output for
  ``stall_timeout``, or an idle liveness check (``ping`` for legacy children,
  ``server/discover`` for modern ones) failing — is recycled. Every change is logged with
  the child's pid.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import anyio
from anyio.abc import TaskGroup

from gateway.errors import ChildError, GatewayError, GatewayUnavailableError
from gateway.protocol import attribution
from gateway.protocol.attribution import AskPolicy, ChildLoad
from gateway.protocol.handshake import modern_meta
from gateway.protocol.jsonrpc import Notification, Reply, Request, Result
from gateway.protocol.versions import Era
from gateway.stdio.child import StdioChild, open_child
from gateway.stdio.questions import RequestHandler
from gateway.stdio.spec import ChildSpec

log = logging.getLogger("gateway.pool")

BACKOFF_FIRST: Final = 0.5
BACKOFF_MAX: Final = 30.0
"""Restart delays double from BACKOFF_FIRST up to BACKOFF_MAX while children keep failing."""
QUICK_EXIT: Final = 10.0
"""A child that exits within this many seconds of starting counts as a failure."""
CRASH_LOOP: Final = 5
"""Consecutive quick failures that mark the pool failing."""
STARTUP_WAIT: Final = 120.0
"""How long a request waits while the first child is still starting (npx cold starts)."""
MAINTENANCE_TICK: Final = 1.0
"""Seconds between idle, age and liveness checks."""
START_SAMPLES: Final = 100
"""Cold-start durations kept per pool for metrics."""


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
        self.asking_leases = 0  # leases for requests that may ask (attribution rule 1)
        self.served = 0
        self.started_at = anyio.current_time()
        self.last_used = self.started_at
        self.last_check = self.started_at
        self.retiring = False
        self.stop = anyio.Event()

    @property
    def is_live(self) -> bool:
        return self.child is not None and self.child.is_alive() and not self.retiring

    def has_room(self, method: str | None = None) -> bool:
        limit = self.pool.settings.max_in_flight
        if not self.is_live or (limit != 0 and self.leases >= limit):
            return False
        assert self.child is not None
        load = ChildLoad(self.asking_leases, self.child.open_questions)
        return attribution.admits(load, method, exclusive=self.pool.is_exclusive(self.child))

    def retire(self, why: str) -> None:
        if not self.retiring:
            self.retiring = True
            pid = self.child.pid if self.child else None
            log.info("%s: retiring child pid %s (%s)", self.pool.label, pid, why)
        if self.leases == 0:
            self.stop.set()


class Pool:
    def __init__(
        self,
        spec: ChildSpec,
        settings: PoolSettings | None = None,
        *,
        gateway_version: str = "0",
        on_request: RequestHandler | None = None,
        label: str | None = None,
        size: int | None = None,
    ) -> None:
        if settings is None:
            settings = PoolSettings(min_size=size or 1, max_size=size or 1)
        self.spec = spec
        self.settings = settings
        self.label = label or spec.label
        self.members: list[Member] = []
        self.failing = False
        self.last_error: GatewayError | None = None
        self.spawns = 0
        self.restarts = 0
        self.exits: Counter[str] = Counter()  # "code 0", "SIGKILL", "start failure"
        self.start_seconds: list[float] = []  # recent cold starts (bounded)
        self.retired: Counter[str] = Counter()  # counters of children that are gone
        self._quick_failures = 0
        self._next_start = 0.0
        self._waiting = 0
        self._gateway_version = gateway_version
        self._on_request = on_request
        self._listeners: list[PoolListener] = []
        self._loss_listeners: list[LossListener] = []
        self._request_handlers: list[PoolRequestHandler] = []
        self.session_id: str | None = None  # the one legacy session this pool is dedicated to, if any
        self.learned_asks = False  # a child of this pool asked during a request (attribution rule 3)
        self._tg: TaskGroup | None = None
        self._closing = False
        self._changed = anyio.Event()

    def __repr__(self) -> str:
        return f"<Pool {self.label} live={len(self.children())} members={len(self.members)} failing={self.failing}>"

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Pool:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        for _ in range(self.settings.min_size):
            self._start_member()
        self._tg.start_soon(self._maintain)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closing = True
        self._lost()
        for member in self.members:
            member.stop.set()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)

    def add_listener(self, listener: PoolListener) -> None:
        """Call ``listener(pool, notification)`` for every notification a child of this pool
        sends outside any request (the pool says whose it is: sessions served by it)."""
        self._listeners.append(listener)

    def add_loss_listener(self, listener: LossListener) -> None:
        """Call ``listener(pool)`` when a started child exits unplanned or the pool closes: state
        that the gateway emulates on top of the pool's children (listens) must end then."""
        self._loss_listeners.append(listener)

    def add_request_handler(self, handler: PoolRequestHandler) -> None:
        """Offer ``handler(pool, request)`` every request a child of this pool sends that no
        exchange carries (unattributable); the first reply that is not None answers it, and
        with none the gateway answers locally (``gateway.protocol.inputs.local_answer``)."""
        self._request_handlers.append(handler)

    async def _child_request(self, request: Request) -> Reply | None:
        if self._on_request is not None:
            return await self._on_request(request)
        for handler in self._request_handlers:
            reply = await handler(self, request)
            if reply is not None:
                return reply
        return None

    def _lost(self) -> None:
        for listener in self._loss_listeners:
            listener(self)

    def _dispatch(self, notification: Notification) -> None:
        for listener in self._listeners:
            listener(self, notification)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # -- state --------------------------------------------------------------------------

    def is_exclusive(self, child: StdioChild) -> bool:
        """Whether a request that may ask needs ``child`` to itself (attribution rule 3)."""
        if child.has_asked and not self.learned_asks:
            self.learned_asks = True
            log.info("%s: the server asks its client during requests; such requests now get a child each", self.label)
        legacy = child.info is not None and child.info.era is Era.LEGACY
        return attribution.is_exclusive(
            self.settings.child_asks,
            learned=self.learned_asks,
            legacy=legacy,
            declared=child.spec.declared_capabilities,
        )

    def children(self) -> list[StdioChild]:
        return [m.child for m in self.members if m.is_live and m.child is not None]

    def is_ready(self) -> bool:
        return not self.failing and bool(self.children())

    async def wait_started(self) -> None:
        """Until a child has started (or starting failed), at most ``STARTUP_WAIT``: what the
        handshake learnt of the server (its era) is then known."""
        with anyio.move_on_after(STARTUP_WAIT):
            while not self.children() and self.last_error is None and self.members:
                await self._changed.wait()

    def is_idle(self) -> bool:
        return not self.members and self._waiting == 0

    def is_unused(self) -> bool:
        """No request holds or waits for a child of this pool (it may still have children)."""
        return self._waiting == 0 and all(member.leases == 0 for member in self.members)

    def status(self) -> dict[str, Any]:
        now = anyio.current_time()
        return {
            "failing": self.failing,
            "last_error": self.last_error.message if self.last_error else None,
            "spawns": self.spawns,
            "restarts": self.restarts,
            "waiting": self._waiting,
            "children": [
                {
                    "pid": m.child.pid if m.child else None,
                    "state": "retiring" if m.retiring else "ready" if m.is_live else "starting",
                    "era": m.child.info.era.value if m.child and m.child.info else None,
                    "protocol_version": m.child.info.version if m.child and m.child.info else None,
                    "in_flight": m.leases,
                    "served": m.served,
                    "uptime_seconds": round(now - m.started_at, 3),
                }
                for m in self.members
            ],
        }

    # -- leasing ------------------------------------------------------------------------

    @asynccontextmanager
    async def lease(self, prefer: StdioChild | None = None, method: str | None = None) -> AsyncIterator[StdioChild]:
        """A child for one request; ``method`` (a request that may ask) may make it wait for a
        child on which its questions can only be its own."""
        member = await self._acquire(prefer, method)
        assert member.child is not None
        asking = attribution.may_ask(method)
        member.asking_leases += asking
        try:
            yield member.child
        finally:
            member.asking_leases -= asking
            self._release(member)

    def _pick(self, prefer: StdioChild | None, method: str | None) -> Member | None:
        if prefer is not None:
            # A legacy session waits for its own child rather than move: what it set up there
            # (subscriptions, log level) lives only in that process. A dead child frees it.
            # Except when only a question holds it (attribution): a person may take minutes to
            # answer, so a call that may ask runs on another child then, for this call only.
            for member in self.members:
                if member.child is prefer and member.is_live:
                    if member.has_room(method):
                        return member
                    if not member.has_room(None):
                        return None
                    break
        free = [m for m in self.members if m.has_room(method)]
        return min(free, key=lambda m: m.leases, default=None)

    async def _acquire(self, prefer: StdioChild | None, method: str | None) -> Member:
        started = anyio.current_time()
        self._waiting += 1
        try:
            while True:
                member = self._pick(prefer, method)
                if member is not None:
                    member.leases += 1
                    member.served += 1
                    member.last_used = anyio.current_time()
                    return member
                starting = any(m.child is None for m in self.members)
                now = anyio.current_time()
                no_child = not self.children() and not starting
                if no_child and self.last_error is not None and now < self._next_start:
                    # Fail fast during the backoff: the command does not start (or keeps dying).
                    # After it, a request may try again, even when failing: a fixed command (or
                    # a pool with no minimum, which nothing else restarts) must be able to recover.
                    raise self.last_error
                if not starting and len(self.members) < self.settings.max_size and now >= self._next_start:
                    self._start_member()
                    starting = True
                budget = STARTUP_WAIT if not self.children() else self.settings.queue_timeout
                remaining = started + budget - now
                if remaining <= 0:
                    raise self._saturated()
                with anyio.move_on_after(remaining):
                    await self._changed.wait()
        finally:
            self._waiting -= 1

    def _saturated(self) -> GatewayUnavailableError:
        s = self.settings
        if not self.children():
            return GatewayUnavailableError(
                f"{self.label}: no child became ready within {STARTUP_WAIT:g} s (still starting)",
                retry_after=5,
                server=self.label,
            )
        limit = f"{s.max_in_flight} request(s) each" if s.max_in_flight else "no free child"
        return GatewayUnavailableError(
            f"{self.label}: all {len(self.children())} of at most {s.max_size} children are busy ({limit}); "
            f"no slot freed within {s.queue_timeout:g} s",
            retry_after=max(1, round(s.queue_timeout)),
            server=self.label,
        )

    def _release(self, member: Member) -> None:
        member.leases -= 1
        member.last_used = anyio.current_time()
        s = self.settings
        if s.max_requests and member.served >= s.max_requests:
            member.retire(f"served {member.served} requests")
        if member.retiring and member.leases == 0:
            member.stop.set()
        self._notify()

    # -- supervision --------------------------------------------------------------------

    def _start_member(self) -> None:
        assert self._tg is not None
        member = Member(self)
        self.members.append(member)
        self._tg.start_soon(self._run_member, member)

    async def _run_member(self, member: Member) -> None:
        self.spawns += 1
        exit_error: GatewayError | None = None
        try:
            async with open_child(
                self.spec,
                gateway_version=self._gateway_version,
                on_request=self._child_request,
                on_notification=self._dispatch,
                on_change=self._notify,
            ) as child:
                member.child = child
                self._record_start(anyio.current_time() - member.started_at)
                member.started_at = anyio.current_time()
                if self.failing:
                    log.info("%s: child pid %d started; no longer failing", self.label, child.pid)
                self.failing = False
                self.last_error = None
                self._notify()
                async with anyio.create_task_group() as tg:

                    async def watch_exit() -> None:
                        nonlocal exit_error
                        exit_error = await child.wait_exited()
                        member.stop.set()

                    tg.start_soon(watch_exit)
                    await member.stop.wait()
                    tg.cancel_scope.cancel()
        except ChildError as exc:  # could not start
            exit_error = exc
        finally:
            self.members.remove(member)
            self._record_exit(member, exit_error)
            self._notify()
        if self._closing:
            return
        self._after_exit(member, exit_error)

    def _record_start(self, seconds: float) -> None:
        self.start_seconds.append(seconds)
        del self.start_seconds[:-START_SAMPLES]

    def _record_exit(self, member: Member, error: GatewayError | None) -> None:
        if member.child is None:
            self.exits["start failure"] += 1
            return
        self.retired.update(member.child.counters())
        data = error.data if error is not None else {}
        self.exits[str(data.get("signal") or f"code {data.get('exit_code')}")] += 1

    def totals(self) -> Counter[str]:
        """Child counters over the pool's life: the gone children's plus the live ones'."""
        total = Counter(self.retired)
        for member in self.members:
            if member.child is not None:
                total.update(member.child.counters())
        return total

    def _after_exit(self, member: Member, error: GatewayError | None) -> None:
        uptime = anyio.current_time() - member.started_at
        planned = member.retiring and member.child is not None
        if not planned and member.child is not None:
            self._lost()
        if not planned:
            self.last_error = error
            if member.child is None or uptime < QUICK_EXIT:
                self._quick_failures += 1
            else:
                self._quick_failures = 0
            if self._quick_failures >= CRASH_LOOP and not self.failing:
                self.failing = True
                log.error(
                    "%s: failing after %d quick failures; last: %s",
                    self.label,
                    self._quick_failures,
                    error.message if error else "?",
                )
        delay = 0.0 if self._quick_failures == 0 else min(BACKOFF_FIRST * 2 ** (self._quick_failures - 1), BACKOFF_MAX)
        self._next_start = anyio.current_time() + delay
        if len(self.members) < self.settings.min_size or self._waiting:
            self.restarts += 1
            assert self._tg is not None
            self._tg.start_soon(self._restart_after, delay)
        self._notify()

    async def _restart_after(self, delay: float) -> None:
        if delay:
            log.info("%s: restarting in %.1f s", self.label, delay)
            await anyio.sleep(delay)
        if not self._closing and (len(self.members) < self.settings.min_size or self._waiting):
            self._start_member()

    async def _maintain(self) -> None:
        """Idle stop, age recycling and liveness, once a tick (never on the request path)."""
        while True:
            await anyio.sleep(MAINTENANCE_TICK)
            now = anyio.current_time()
            s = self.settings
            idle = [m for m in self.members if m.is_live and m.leases == 0 and now - m.last_used > s.idle_timeout]
            for member in idle[: max(0, len(self.members) - s.min_size)]:
                member.retire(f"idle for {now - member.last_used:.0f} s")
            for member in list(self.members):
                if not member.is_live or member.child is None:
                    continue
                if s.max_age and now - member.started_at > s.max_age:
                    member.retire(f"older than {s.max_age:g} s")
                elif (
                    s.stall_timeout
                    and member.child.in_flight
                    and not member.child.awaiting_input  # silent because a client is answering it
                    and now - member.child.last_output > s.stall_timeout
                ):
                    member.retire(f"requests pending but no output for {s.stall_timeout:g} s")
                    await member.child.stop()
                elif s.liveness_interval and member.leases == 0 and now - member.last_check > s.liveness_interval:
                    member.last_check = now
                    assert self._tg is not None
                    self._tg.start_soon(self._check_liveness, member)

    async def _check_liveness(self, member: Member) -> None:
        child = member.child
        if child is None or child.info is None:
            return
        if child.info.era is Era.LEGACY:
            method, params = "ping", None
        else:
            method, params = "server/discover", {"_meta": modern_meta(self._gateway_version)}
        try:
            reply = await child.request(method, params, timeout=self.settings.liveness_timeout)
            if isinstance(reply, Result):
                return
            problem = f"{method} answered an error"
        except ChildError as exc:
            problem = exc.message
        if member.is_live:
            log.warning("%s: child pid %d failed its liveness check (%s); recycling", self.label, child.pid, problem)
            member.retire("failed liveness check")
            await child.stop()
