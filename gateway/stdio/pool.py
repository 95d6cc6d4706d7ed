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
  grows (within ``max_size``) for the others, or they queue as above. Under ``auto`` the pool
  learns per tool (``tools``, rule 5): on a legacy child, a tool that once ran, answered and
  asked nothing shares children freely from then on, until it asks.
- **Size**: ``min_size`` children are started with the pool (pre-warmed, so ``npx`` cold
  start is paid before traffic) and kept; children above the minimum stop after
  ``idle_timeout`` without a lease. A child is recycled after ``max_requests`` leases or
  ``max_age`` seconds (0 = never), once its last lease ends.
- **Supervision**: a child that exits is replaced when the pool is below ``min_size`` or
  requests are waiting. A child that **dies while serving** (requests in flight) is
  replaced at once: the command works, and the crash is more likely a request's doing, so
  it is charged to the principals whose requests were in flight (``gateway.stdio.crashes``
  throttles one that keeps crashing children with 429), never to everyone with a backoff.
  Those principals become **suspects** of the pool: each of their requests runs alone on a
  child (the pool grows for it, or it waits for one to empty) until one of them ends with
  the child alive. So the next crash names its cause, and takes nobody else's calls along.
  **Start failures** — the command does not start, or the child dies before its handshake
  completes, or within ``QUICK_EXIT`` of it with no request in flight (it never served) —
  are what the backoff is for: it doubles with each consecutive one up to ``BACKOFF_MAX``,
  and ``CRASH_LOOP`` of them mark the pool **failing**: requests then fail at once with
  the last error (command, exit, stderr tail) and readiness reports it, until a later start
  succeeds. These rules are decided by the pure ``gateway.protocol.supervision``; the pool
  applies its verdicts. A child that stops answering — requests pending but no output for
  ``stall_timeout``, or an idle liveness check (``ping`` for legacy children,
  ``server/discover`` for modern ones) failing — is recycled. Every change is logged with
  the child's pid.
- **Global cap**: a ``ChildBudget`` shared by every pool of the gateway bounds the children
  started on demand (``gateway.stdio.budget``): at the cap an idle child of another pool is
  evicted, or the request waits like a saturated one and then gets 503.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any, Final

import anyio
from anyio.abc import TaskGroup

from gateway.errors import ChildError, GatewayError, GatewayUnavailableError
from gateway.protocol import attribution
from gateway.protocol.handshake import modern_meta
from gateway.protocol.jsonrpc import Notification, Reply, Request, Result
from gateway.protocol.supervision import ExitKind, Supervision
from gateway.protocol.versions import Era
from gateway.stdio.backend import PROCESS_BACKEND, ChildBackend
from gateway.stdio.budget import ChildBudget
from gateway.stdio.child import StdioChild, open_child
from gateway.stdio.crashes import CRASH_WINDOW, CrashLedger
from gateway.stdio.member import LossListener as LossListener
from gateway.stdio.member import Member as Member
from gateway.stdio.member import PoolListener as PoolListener
from gateway.stdio.member import PoolRequestHandler as PoolRequestHandler
from gateway.stdio.member import PoolSettings as PoolSettings
from gateway.stdio.questions import RequestHandler
from gateway.stdio.spec import ChildSpec

log = logging.getLogger("gateway.pool")

STARTUP_WAIT: Final = 120.0
"""How long a request waits while the first child is still starting (npx cold starts)."""
MAINTENANCE_TICK: Final = 1.0
"""Seconds between idle, age and liveness checks."""
START_SAMPLES: Final = 100
"""Cold-start durations kept per pool for metrics."""
STATUS_STDERR_LINES: Final = 5
"""Last stderr lines of each child shown by /status and /ui (the full tail goes into errors)."""


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
        budget: ChildBudget | None = None,
        crashes: CrashLedger | None = None,
        backend: ChildBackend = PROCESS_BACKEND,
    ) -> None:
        """``backend``: how children are started (real processes unless a test passes a fake)."""
        if settings is None:
            settings = PoolSettings(min_size=size or 1, max_size=size or 1)
        self.spec = spec
        self.settings = settings
        self.label = label or spec.label
        self.members: list[Member] = []
        self.supervision = Supervision()  # the streak of start failures, failing (protocol/supervision)
        self.last_error: GatewayError | None = None
        self.spawns = 0
        self.restarts = 0
        self.exits: Counter[str] = Counter()  # "code 0", "SIGKILL", "start failure"
        self.start_seconds: list[float] = []  # recent cold starts (bounded)
        self.retired: Counter[str] = Counter()  # counters of children that are gone
        self._next_start = 0.0
        self._waiting = 0
        self._gateway_version = gateway_version
        self._on_request = on_request
        self._backend = backend
        self._listeners: list[PoolListener] = []
        self._loss_listeners: list[LossListener] = []
        self._request_handlers: list[PoolRequestHandler] = []
        self.session_id: str | None = None  # the one legacy session this pool is dedicated to, if any
        self.budget = budget
        self.crashes = crashes
        self.suspects: dict[str, float] = {}  # principal → when a crash was last charged to it
        self.learned_asks = False  # a child of this pool asked during a request (attribution rule 3)
        self.tools = attribution.ToolLearning()  # which tools ask, which are quiet (rule 5)
        self._tg: TaskGroup | None = None
        self._closing = False
        self._changed = anyio.Event()

    @property
    def failing(self) -> bool:
        """Start failures in a row reached ``CRASH_LOOP``: requests fail at once until a start succeeds."""
        return self.supervision.failing

    def __repr__(self) -> str:
        return f"<Pool {self.label} live={len(self.children())} members={len(self.members)} failing={self.failing}>"

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Pool:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        if self.budget is not None:
            self.budget.pools.add(self)
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
        try:
            await self._tg.__aexit__(None, None, None)
        finally:
            if self.budget is not None:
                self.budget.pools.discard(self)
                self.budget.waiting.discard(self)
                self.budget.changed()

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

    def wake(self) -> None:
        """Let waiting requests look again (the global child budget has room, or may)."""
        self._notify()

    # -- state --------------------------------------------------------------------------

    def is_exclusive(self, child: StdioChild, tool: str | None = None) -> bool:
        """Whether a request that may ask (for ``tool``, ``attribution.tool_key``) needs ``child``
        to itself (attribution rules 3 and 5)."""
        if child.has_asked and not self.learned_asks:
            self.learned_asks = True
            log.info("%s: the server asks its client during requests; such requests now get a child each", self.label)
        legacy = child.info is not None and child.info.era is Era.LEGACY
        return attribution.is_exclusive(
            self.settings.child_asks,
            learned=self.learned_asks,
            legacy=legacy,
            declared=child.declared_capabilities,
            quiet=legacy and self.tools.is_quiet(tool),  # (only a legacy child's quiet tools count)
        )

    def children(self) -> list[StdioChild]:
        return [m.child for m in self.members if m.is_live and m.child is not None]

    def is_ready(self) -> bool:
        return not self.failing and bool(self.children())

    async def wait_started(self) -> None:
        """Until a child has started (or starting failed), at most ``STARTUP_WAIT``: what the
        handshake learnt of the server (its era) is then known."""
        if not self._may_start():  # the usual case: no cancel scope to enter
            return
        with anyio.move_on_after(STARTUP_WAIT):
            while self._may_start():
                await self._changed.wait()

    def _may_start(self) -> bool:
        """No child is up yet, and one may still come (none failed to start, one is starting)."""
        return self.last_error is None and bool(self.members) and not self.children()

    def is_idle(self) -> bool:
        return not self.members and self._waiting == 0

    def is_unused(self) -> bool:
        """No request holds or waits for a child of this pool (it may still have children)."""
        return self._waiting == 0 and all(member.leases == 0 for member in self.members)

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "failing": self.failing,
            "crash_suspects": len(self.suspects),
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
                    "stderr": m.child.stderr_tail[-STATUS_STDERR_LINES:] if m.child else [],
                    "waiting_for": m.start_wait.describe() if m.child is None and m.start_wait else None,
                }
                for m in self.members
            ],
        }

    # -- leasing ------------------------------------------------------------------------

    def lease(
        self,
        prefer: StdioChild | None = None,
        principal: str = "anonymous",
        method: str | None = None,
        tool: str | None = None,
    ) -> Lease:
        """A child for one request of ``principal`` (who is charged if the child dies meanwhile),
        as ``async with pool.lease(...) as child``; ``method`` (a request that may ask) may make
        it wait for a child on which its questions can only be its own, unless its ``tool``
        (``attribution.tool_key``) is known quiet."""
        return Lease(self, prefer, principal, method, tool)

    async def _take(self, lease: Lease) -> StdioChild:
        member, alone = await self._acquire(lease.prefer, lease.method, lease.principal, lease.tool)
        assert member.child is not None
        asking = attribution.may_ask(lease.method) and self.is_exclusive(member.child, lease.tool)
        member.asking_leases += asking
        member.principals[lease.principal] += 1
        member.exclusive = alone
        lease.member, lease.alone, lease.asking = member, alone, asking
        return member.child

    def _give_back(self, lease: Lease) -> None:
        member, principal, alone = lease.member, lease.principal, lease.alone
        assert member is not None
        assert member.child is not None
        member.asking_leases -= lease.asking
        if not member.child.is_alive():
            member.note_death()
        elif alone:
            self.suspects.pop(principal, None)  # it ran alone and the child lived: cleared
        if alone:
            member.exclusive = False
        member.principals[principal] -= 1
        if member.principals[principal] <= 0:
            del member.principals[principal]
        self._release(member)

    def _pick(
        self, prefer: StdioChild | None, method: str | None, alone: bool = False, tool: str | None = None
    ) -> Member | None:
        """``alone``: only a child with no lease will do (a crash suspect's request)."""
        if prefer is not None:
            # A legacy session waits for its own child rather than move: what it set up there
            # (subscriptions, log level) lives only in that process. A dead child frees it.
            # Except when only a question holds it (attribution): a person may take minutes to
            # answer, so a call that may ask runs on another child then, for this call only.
            for member in self.members:
                if member.child is prefer and member.is_live:
                    if alone and member.leases:
                        return None
                    if member.has_room(method, tool):
                        return member
                    if not member.has_room(None):
                        return None
                    break
        free = [m for m in self.members if m.has_room(method, tool) and not (alone and m.leases)]
        return min(free, key=lambda m: m.leases, default=None)

    async def _acquire(
        self, prefer: StdioChild | None, method: str | None, principal: str, tool: str | None = None
    ) -> tuple[Member, bool]:
        """A member with a lease taken, and whether the request runs on it alone. Whether the
        principal is throttled (429, before any work) or a crash suspect (it runs alone) is
        decided at each try, not once on arrival: a request that came while the child it
        waits for was dying (its clients answered, the pool's bookkeeping not yet done) is
        judged with that crash counted."""
        started = time.monotonic()
        self._waiting += 1
        try:
            while True:
                if self.crashes is not None:
                    self.crashes.check(principal, time.monotonic(), self.label)
                alone = principal in self.suspects
                member = self._pick(prefer, method, alone, tool)
                if member is not None:
                    member.leases += 1
                    member.served += 1
                    member.last_used = time.monotonic()
                    return member, alone
                starting = any(m.child is None for m in self.members)
                now = time.monotonic()
                no_child = not self.children() and not starting
                if no_child and self.last_error is not None and now < self._next_start:
                    # Fail fast during the backoff: the command does not start (or keeps dying).
                    # After it, a request may try again, even when failing: a fixed command (or
                    # a pool with no minimum, which nothing else restarts) must be able to recover.
                    raise self.last_error
                blocked = False  # by the global child cap
                if not starting and len(self.members) < self.settings.max_size and now >= self._next_start:
                    if self.budget is None or self.budget.claim(self):
                        self._start_member()
                        starting = True
                    else:
                        blocked = True
                if blocked and self.budget is not None:
                    self.budget.waiting.add(self)
                wait = STARTUP_WAIT if not self.children() and not blocked else self.settings.queue_timeout
                remaining = started + wait - now
                if remaining <= 0:
                    if blocked and self.budget is not None and not self.children():
                        raise self.budget.full_error(self.label)
                    raise self._saturated()
                with anyio.move_on_after(remaining):
                    await self._changed.wait()
        finally:
            self._waiting -= 1
            if self.budget is not None and not self._waiting:
                self.budget.waiting.discard(self)

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
        member.last_used = time.monotonic()
        s = self.settings
        if s.max_requests and member.served >= s.max_requests:
            member.retire(f"served {member.served} requests")
        if member.retiring and member.leases == 0:
            member.stop.set()
        if self._waiting:  # only a waiting request looks again; a new Event per release costs
            self._notify()
        if self.budget is not None and self.budget.waiting:
            self.budget.changed()  # an idle child may now be evicted for another pool

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
                backend=self._backend,
                on_start=member.watch_start,
            ) as child:
                member.child = child
                member.start_wait = None
                child.tools = self.tools
                self._record_start(time.monotonic() - member.started_at)
                member.started_at = time.monotonic()
                if self.supervision.started():
                    log.info("%s: child pid %d started; no longer failing", self.label, child.pid)
                self.last_error = None
                self._notify()
                async with anyio.create_task_group() as tg:

                    async def watch_exit() -> None:
                        nonlocal exit_error
                        exit_error = await child.wait_exited()
                        member.note_death()
                        member.stop.set()

                    tg.start_soon(watch_exit)
                    await member.stop.wait()
                    tg.cancel_scope.cancel()
        except ChildError as exc:  # could not start: say why now, not only once the pool is failing
            log.warning("%s: child failed to start: %s", self.label, exc.message)
            exit_error = exc
        finally:
            self.members.remove(member)
            self._record_exit(member, exit_error)
            self._notify()
            if self.budget is not None:
                self.budget.changed()
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
        now = time.monotonic()
        charged = member.crashed_with or frozenset()
        verdict = self.supervision.exited(
            planned=member.retiring,
            started=member.child is not None,
            uptime=now - member.started_at,
            charged=bool(charged),
        )
        if verdict.kind is not ExitKind.PLANNED:
            if member.child is not None:
                self._lost()
            self.last_error = error
        if verdict.kind is ExitKind.DIED_SERVING:  # restart at once; the requests' principals pay
            if self.crashes is not None:
                self.crashes.record(charged, now)
            for stale in [p for p, when in self.suspects.items() if when <= now - CRASH_WINDOW]:
                del self.suspects[stale]
            self.suspects.update(dict.fromkeys(charged, now))
            log.warning("%s: child died serving %s; restarting at once", self.label, ", ".join(sorted(charged)))
        if verdict.now_failing:
            log.error(
                "%s: failing after %d quick failures; last: %s",
                self.label,
                self.supervision.quick_failures,
                error.message if error else "?",
            )
        delay = verdict.delay
        self._next_start = time.monotonic() + delay
        if len(self.members) < self.settings.min_size or self._waiting:
            self.restarts += 1
            assert self._tg is not None
            self._tg.start_soon(self._restart_after, delay)
        self._notify()

    async def _restart_after(self, delay: float) -> None:
        if delay:
            log.info("%s: restarting in %.1f s", self.label, delay)
            await anyio.sleep(delay)
        if self._closing:
            return
        if len(self.members) < self.settings.min_size:
            if self.budget is None or self.budget.has_room():  # a minimum takes free room, never evicts
                self._start_member()
        elif (
            self._waiting
            and len(self.members) < self.settings.max_size
            and not self._is_starting()
            and (self.budget is None or self.budget.claim(self))
        ):
            self._start_member()

    def _is_starting(self) -> bool:
        return any(m.child is None for m in self.members)

    async def _maintain(self) -> None:
        """Idle stop, age recycling and liveness, once a tick (never on the request path)."""
        while True:
            await anyio.sleep(MAINTENANCE_TICK)
            now = time.monotonic()
            s = self.settings
            idle = [m for m in self.members if m.is_live and m.leases == 0 and now - m.last_used > s.idle_timeout]
            for member in idle[: max(0, len(self.members) - s.min_size)]:
                member.retire(f"idle for {now - member.last_used:.0f} s")
            if (  # a minimum the global cap held back
                len(self.members) < s.min_size
                and now >= self._next_start
                and not self._is_starting()
                and (self.budget is None or self.budget.has_room())
            ):
                self._start_member()
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


class Lease:
    """``Pool.lease``: a plain async context manager (one is made per request; a generator-based
    one costs about four times as much to enter and leave)."""

    __slots__ = ("alone", "asking", "member", "method", "pool", "prefer", "principal", "tool")

    def __init__(
        self, pool: Pool, prefer: StdioChild | None, principal: str, method: str | None, tool: str | None
    ) -> None:
        self.pool = pool
        self.prefer = prefer
        self.principal = principal
        self.method = method
        self.tool = tool
        self.member: Member | None = None  # set once a child is taken
        self.alone = False
        self.asking = False

    async def __aenter__(self) -> StdioChild:
        return await self.pool._take(self)

    async def __aexit__(self, *exc_info: object) -> None:
        self.pool._give_back(self)
