"""A pool of children for one server and one isolation key: the stdio edge of its dispatcher.

Who gets which child, when children start, retire and stop, and what an exit means are the
rules of the pure ``gateway.protocol.dispatch`` (written at its top; supervision verdicts in
``gateway.protocol.supervision``, attribution in ``gateway.protocol.attribution``). This
module owns what the rules cannot: the task group, the waits, the processes. It asks the
dispatcher with the time now, and carries out the actions it returns:

- ``StartChild``: a task in the pool's task group opens the child (``open_child``), hands it
  to the dispatcher once its handshake is done, and waits for its stop or its exit;
- ``StopChild``: that task's stop event is set, so the stop ladder runs in the child's own
  task (never awaited inline in the maintenance tick, nor on a request's path);
- ``CheckLiveness``: a task sends ``ping`` (legacy) or ``server/discover`` (modern) to an
  idle child; a failure is reported back (``liveness_failed``);
- ``RestartAfter``: a task sleeps the backoff, then asks ``restart_due``;
- ``EvictChild``: the ``ChildBudget`` retires another pool's idle child (its pool stops it);
- ``Wake``: the one waiting request it names takes its outcome; ``Lost``: loss listeners are told.

The dispatcher never reads a child; the pool tells it: a child's ``profile()`` and
``facts()`` when it has started, each change of its ``ChildFacts`` as the child reports it
(``on_facts``, copied at once), and each child's ``reading()`` with the maintenance tick.

A request leases a child with ``async with pool.lease(...) as child``: it waits (on its own
event, bounded by the deadline the dispatcher gives) until the dispatcher grants it a child
or fails it (503, 429, the last start error). Waiters are served in arrival order (dispatch
rule 0). A ``ChildBudget`` shared by every pool of the gateway bounds the children started on
demand (``gateway.stdio.budget``).

**A pool is a failure domain.** Its children are domains of their own (``gateway.stdio.child``);
an unexpected exception in one of the pool's own tasks (a child's task here, maintenance,
liveness, a restart delay) ends the pool: every child stops, and the requests waiting for a
child get ``closed_error`` (503, ``Retry-After: 1``). The exception leaves ``async with pool``,
and its owner (``gateway.relay.pools``) logs it and drops the pool: the next request opens a
new one.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from typing import Any, Final

import anyio
from anyio.abc import TaskGroup

from gateway.errors import ChildError, ChildFaultError, GatewayError, GatewayUnavailableError
from gateway.protocol import dispatchstate as ds
from gateway.protocol.dispatch import STARTUP_WAIT as STARTUP_WAIT
from gateway.protocol.dispatch import Dispatcher
from gateway.protocol.handshake import modern_meta
from gateway.protocol.jsonrpc import Reply, Request, Result
from gateway.protocol.redaction import redact_text
from gateway.protocol.supervision import ExitKind
from gateway.protocol.versions import Era
from gateway.stdio.backend import PROCESS_BACKEND, ChildBackend
from gateway.stdio.budget import ChildBudget
from gateway.stdio.child import StdioChild
from gateway.stdio.crashes import CrashLedger
from gateway.stdio.handshake import StartWait
from gateway.stdio.launch import open_child
from gateway.stdio.member import LossListener as LossListener
from gateway.stdio.member import Member, PoolHooks, StdioPoolAction, member_status
from gateway.stdio.member import ParkedReleaser as ParkedReleaser
from gateway.stdio.member import PoolListener as PoolListener
from gateway.stdio.member import PoolRequestHandler as PoolRequestHandler
from gateway.stdio.member import PoolSettings as PoolSettings
from gateway.stdio.questions import RequestHandler
from gateway.stdio.spec import ChildSpec
from gateway.stdio.tally import PoolTally, StartTimes

log = logging.getLogger("gateway.pool")

MAINTENANCE_TICK: Final = 1.0
"""Seconds between idle, age and liveness checks."""
GATEWAY_FAULT: Final = ExitKind.GATEWAY_FAULT.value
"""The exit reason counted for a child the gateway failed on (``ChildFaultError``)."""


class Pool:
    def __init__(
        self,
        spec: ChildSpec,
        settings: PoolSettings | None = None,
        *,
        gateway_version: str = "0",
        on_request: RequestHandler | None = None,
        hooks: PoolHooks | None = None,
        label: str | None = None,
        size: int | None = None,
        budget: ChildBudget | None = None,
        crashes: CrashLedger | None = None,
        backend: ChildBackend = PROCESS_BACKEND,
        on_started: Callable[[], None] | None = None,
        server: str | None = None,
    ) -> None:
        """``backend``: how children are started (real processes unless a test passes a fake);
        ``on_started``: called when a child has completed its handshake and serves;
        ``server``: the server's name, in the log records of the pool and its children (by
        default the pool's label)."""
        if settings is None:
            settings = PoolSettings(min_size=size or 1, max_size=size or 1)
        self.spec = spec
        self.settings = settings
        self.label = label or spec.label
        self.server = server or self.label
        self.dispatch: Dispatcher[StdioChild] = Dispatcher(settings, self.label, crashes=crashes, server=self.server)
        self.room: ds.Room = budget.room_for(self) if budget is not None else ds.NoBudget()
        self.spawns = 0
        self.restarts = 0
        self.exits: Counter[str] = Counter()  # "code 0", "SIGKILL", "start failure", "gateway fault"
        self.starts = StartTimes()  # every cold start, as a histogram
        self.retired: Counter[str] = Counter()  # counters of children that are gone
        self._gateway_version = gateway_version
        self._backend = backend
        self._on_started = on_started
        self.hooks = hooks if hooks is not None else PoolHooks()
        self._on_request = on_request
        self.session_id: str | None = None  # the one legacy session this pool is dedicated to, if any
        self.budget = budget
        self.crashes = crashes
        self._stops: dict[Member, anyio.Event] = {}
        self._start_waits: dict[Member, StartWait] = {}  # while a child starts: what it has not answered yet
        self._tg: TaskGroup | None = None
        self._closing = False
        self.closed_error: GatewayUnavailableError | None = None  # once closed: what a waiter gets
        self.answered_alike: Callable[[str], bool] | None = None  # questions its shared children need not attribute
        self._changed = anyio.Event()  # a child started or left (``wait_started``)
        self._wakers: dict[ds.Ticket[StdioChild], anyio.Event] = {}  # each waiting request's own
        self._running: AbstractAsyncContextManager[Pool] | None = None

    @property
    def members(self) -> list[Member]:
        return self.dispatch.members

    @property
    def last_error(self) -> GatewayError | None:
        return self.dispatch.last_error

    @property
    def failing(self) -> bool:
        """Start failures in a row reached ``CRASH_LOOP``: requests fail at once until a start succeeds."""
        return self.dispatch.supervision.failing

    def __repr__(self) -> str:
        return f"<Pool {self.label} live={len(self.children())} members={len(self.members)} failing={self.failing}>"

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Pool:
        self._running = self._run()
        return await self._running.__aenter__()

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._running is not None
        await self._running.__aexit__(*exc_info)

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[Pool]:
        """The pool's life: its task group (children, maintenance) around the block."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                if self.budget is not None:
                    self.budget.pools.add(self)
                self._apply(self.dispatch.start_minimum(time.monotonic()))
                tg.start_soon(self._maintain)
                try:
                    yield self
                finally:
                    self._closing = True
                    self.hooks.lost(self)
                    for stop in self._stops.values():
                        stop.set()
                    tg.cancel_scope.cancel()  # maintenance; children stop shielded (process.stop)
        except Exception:  # a task of the pool failed (the module doc): its waiters are told why
            self._close_with(f"{self.label}: the gateway hit an internal error on this pool; retry")
            raise
        finally:
            self._close_with(f"{self.label}: this pool has closed; retry")
            if self.budget is not None:
                self.budget.pools.discard(self)
                self.budget.waiting.discard(self)
                self.budget.changed()

    def _close_with(self, message: str) -> None:
        """Closed: every request waiting for a child, and every later one, gets a 503 now."""
        if self.closed_error is None:
            self.closed_error = GatewayUnavailableError(message, retry_after=1, server=self.label)
        for woken in self._wakers.values():  # each waiting request finds closed_error
            woken.set()
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def wake(self) -> None:
        """The global child budget has room, or may: the waiting requests are served in order."""
        self._apply(self.dispatch.changed(time.monotonic(), self.room))

    def _child_changed(self) -> None:
        """A child's questions closed (its facts, copied as they changed, say so): a waiting
        asker may now fit (attribution rule 3)."""
        self._apply(self.dispatch.changed(time.monotonic(), self.room))

    async def _child_request(self, request: Request) -> Reply | None:
        """A child's request no exchange carries: the pool's own handler (a test's), else the hooks'."""
        if self._on_request is not None:
            return await self._on_request(request)
        return await self.hooks.child_request(self, request)

    def evict(self, member: Member, why: str) -> None:
        """Retire ``member`` for another pool (the global child budget)."""
        self._apply(self.dispatch.retire(member, why, event="evict"))

    def _apply(self, actions: list[StdioPoolAction] | tuple[StdioPoolAction, ...]) -> None:
        """Carry out the dispatcher's actions, in order (once closed, nothing is started)."""
        for action in actions:
            if self.closed_error is not None and isinstance(action, (ds.StartChild, ds.CheckLiveness, ds.RestartAfter)):
                continue
            if isinstance(action, ds.Wake):
                woken = self._wakers.pop(action.ticket, None)
                if woken is not None:
                    woken.set()
            elif isinstance(action, ds.StopChild):
                stop = self._stops.get(action.member)
                if stop is not None:
                    stop.set()
            elif isinstance(action, ds.StartChild):
                assert self._tg is not None
                self._stops[action.member] = anyio.Event()
                self._tg.start_soon(self._run_member, action.member)
            elif isinstance(action, ds.CheckLiveness):
                assert self._tg is not None
                self._tg.start_soon(self._check_liveness, action.member)
            elif isinstance(action, ds.EvictChild):
                assert self.budget is not None  # only a budget names victims
                self.budget.evict(action.victim, self)
            elif isinstance(action, ds.RestartAfter):
                assert self._tg is not None
                self.restarts += 1
                self._tg.start_soon(self._restart_after, action.delay)
            elif isinstance(action, ds.ReleaseParked):
                self.hooks.release_parked(self, action.principal)
            else:  # Lost
                self.hooks.lost(self)

    # -- state --------------------------------------------------------------------------

    def children(self) -> list[StdioChild]:
        return self.dispatch.children()

    def parked(self, principal: str) -> int:
        """Calls of ``principal`` holding a question its client has not answered (the cap's count)."""
        return self.dispatch.parked(principal)

    def is_ready(self) -> bool:
        return not self.failing and bool(self.children())

    def is_starting(self) -> bool:
        """No child is up yet, and one may still come: ``wait_started`` would wait."""
        return self.dispatch.may_start()

    async def wait_started(self) -> None:
        """Until a child has started (or starting failed), at most ``STARTUP_WAIT``: what the
        handshake learnt of the server (its era) is then known."""
        if not self.dispatch.may_start():  # no cancel scope to enter
            return
        with anyio.move_on_after(STARTUP_WAIT):
            while self.dispatch.may_start():
                await self._changed.wait()

    def is_idle(self) -> bool:
        return not self.members and self.dispatch.waiting == 0

    def is_unused(self) -> bool:
        """Nothing runs or waits here: no request holds a child, none waits for one, and no
        child's question waits for a client (its children may be up, idle)."""
        members = self.members
        return self.dispatch.waiting == 0 and not any(m.leases or m.holds_questions() for m in members)

    def used_by(self, principal: str) -> bool:
        """A request charged to ``principal`` holds a child here or waits for one."""
        dispatch = self.dispatch
        return any(principal in m.principals for m in dispatch.members) or any(
            ticket.principal == principal for ticket in dispatch.queue
        )

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "failing": self.failing,
            "crash_suspects": len(self.dispatch.suspects),
            "last_error": self.last_error.detailed if self.last_error else None,
            "spawns": self.spawns,
            "restarts": self.restarts,
            "gateway_faults": self.exits[GATEWAY_FAULT],
            "waiting": self.dispatch.waiting,
            "children": [member_status(m, now, self._start_waits.get(m)) for m in self.members],
        }

    # -- leasing ------------------------------------------------------------------------

    def lease(
        self,
        prefer: StdioChild | None = None,
        principal: str = "anonymous",
        method: str | None = None,
        tool: str | None = None,
    ) -> PoolLease:
        """A child for one request of ``principal`` (who is charged if the child dies meanwhile),
        as ``async with pool.lease(...) as child``; ``method`` (a request that may ask) may make
        it wait for a child on which its questions can only be its own, unless its ``tool``
        (``attribution.tool_key``) is known quiet."""
        return PoolLease(self, prefer, principal, method, tool)

    async def _acquire(self, request: PoolLease) -> StdioChild:
        dispatch = self.dispatch
        ticket = dispatch.ticket(request.principal, request.method, request.tool, request.prefer, time.monotonic())
        try:
            while True:
                if self.closed_error is not None:
                    raise self.closed_error
                now = time.monotonic()
                decision = dispatch.try_acquire(ticket, now, self.room)  # 429 / 503 propagate
                if isinstance(decision, ds.Lease):
                    request.held = decision
                    assert decision.member.child is not None
                    return decision.member.child
                woken = self._wakers[ticket] = anyio.Event()  # before the actions: one may decide it
                if decision.actions:
                    self._apply(decision.actions)
                if self.budget is not None:  # a later placing may hold its start back for room
                    self.budget.waiting.add(self)
                with anyio.move_on_after(decision.deadline - now):
                    await woken.wait()
        finally:
            self._wakers.pop(ticket, None)
            left = dispatch.leave(ticket, time.monotonic(), self.room)  # a lease granted, never taken
            if left:
                self._apply(left)
            if self.budget is not None and not dispatch.waiting:
                self.budget.waiting.discard(self)

    # -- children -----------------------------------------------------------------------

    async def _run_member(self, member: Member) -> None:
        self.spawns += 1
        stop = self._stops[member]
        exit_error: GatewayError | None = None
        try:
            async with open_child(
                self.spec,
                gateway_version=self._gateway_version,
                on_request=self._child_request,
                on_notification=partial(self.hooks.broadcast, self),
                on_change=self._child_changed,
                on_facts=lambda facts: self.dispatch.noted(member, facts),
                backend=self._backend,
                on_start=lambda wait: self._start_waits.__setitem__(member, wait),
                server=self.server,
                pool=self.label,
            ) as child:
                self._start_waits.pop(member, None)
                child.tools = self.dispatch.tools
                if self.answered_alike is not None and self.spec.answers_roots:
                    child.answer_alike(self.answered_alike)
                self.starts.observe(time.monotonic() - member.started_at)
                started = self.dispatch.started(
                    member, child, child.profile(), child.facts(), time.monotonic(), self.room
                )
                self._apply(started)
                self._notify()
                if self._on_started is not None:
                    self._on_started()
                async with anyio.create_task_group() as tg:

                    async def watch_exit() -> None:
                        nonlocal exit_error
                        exit_error = await child.wait_exited()
                        member.note_death()
                        stop.set()

                    tg.start_soon(watch_exit)
                    await stop.wait()
                    tg.cancel_scope.cancel()
        except ChildError as exc:  # could not start: say why now, not only once the pool is failing
            message = redact_text(exc.detailed)  # it may quote the child's stderr
            fields = {**self.dispatch.log_fields, "event": "start_failed", "error": message}
            log.warning("%s: child failed to start: %s", self.label, message, extra=fields)
            exit_error = exc
        finally:
            self._stops.pop(member, None)
            self._start_waits.pop(member, None)
            self._record_exit(member, exit_error)
            # Closing: the member only leaves (its exit is no verdict on the command).
            actions = [] if self._closing else self.dispatch.exited(member, exit_error, time.monotonic(), self.room)
            if self._closing:
                self.dispatch.forget(member)
            if self.budget is not None:
                self.budget.changed()
            self._notify()
        self._apply(actions)

    def _record_exit(self, member: Member, error: GatewayError | None) -> None:
        if member.child is None:
            self.exits["start failure"] += 1
            return
        self.retired.update(member.child.counters())
        error = error or member.child.death  # stopped by the pool: its exit, not its stop, says how it ended
        if isinstance(error, ChildFaultError):  # the gateway failed on it, and stopped it
            self.exits[GATEWAY_FAULT] += 1
            return
        data = error.data if error is not None else {}
        self.exits[str(data.get("signal") or f"code {data.get('exit_code')}")] += 1

    def totals(self) -> Counter[str]:
        """Child counters over the pool's life: the gone children's plus the live ones'."""
        total = Counter(self.retired)
        for member in self.members:
            if member.child is not None:
                total.update(member.child.counters())
        return total

    def tally(self) -> PoolTally:
        """What the pool has counted so far, its live children's counters included (a new value;
        ``gateway.stdio.tally``): it never falls while the pool lives, and is final once it ended."""
        return PoolTally(self.spawns, self.restarts, Counter(self.exits), self.totals(), self.starts.copy())

    async def _restart_after(self, delay: float) -> None:
        if delay:
            fields = {**self.dispatch.log_fields, "event": "restart", "delay": delay}
            log.info("%s: restarting in %.1f s", self.label, delay, extra=fields)
            await anyio.sleep(delay)
        if not self._closing:
            self._apply(self.dispatch.restart_due(time.monotonic(), self.room))

    async def _maintain(self) -> None:
        """Idle stop, age recycling and liveness, once a tick (never on the request path)."""
        while True:
            await anyio.sleep(MAINTENANCE_TICK)
            now = time.monotonic()
            readings = {m: m.child.reading(now) for m in self.members if m.child is not None}
            self._apply(self.dispatch.maintain(now, self.room, readings))
            self._room_may_have_freed()

    def _room_may_have_freed(self) -> None:
        """A child of this pool may have retired (idle, too old, failed its check): the room it
        leaves in the global budget goes to the requests waiting for room now, in arrival
        order, not to whichever request comes next."""
        if self.budget is not None and self.budget.waiting:
            self.budget.changed()

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
            problem = exc.detailed
        self._apply(self.dispatch.liveness_failed(member, problem))
        self._room_may_have_freed()


class PoolLease:
    """``Pool.lease``: a plain async context manager (one is made per request; a generator-based
    one costs about four times as much to enter and leave)."""

    __slots__ = ("held", "method", "pool", "prefer", "principal", "tool")

    def __init__(
        self, pool: Pool, prefer: StdioChild | None, principal: str, method: str | None, tool: str | None
    ) -> None:
        self.pool = pool
        self.prefer = prefer
        self.principal = principal
        self.method = method
        self.tool = tool
        self.held: ds.Lease[StdioChild] | None = None  # set once a child is taken

    def take_now(self) -> StdioChild | None:
        """A child at once, when the common shape holds (no waiter, a child with room: no
        ticket, no wait); None: entering waits (``__aenter__``). Taken, it is held as entered."""
        pool = self.pool
        if pool.closed_error is None:
            held = pool.dispatch.acquire_now(self.principal, self.method, self.tool, self.prefer, time.monotonic())
            if held is not None:
                self.held = held
                child = held.member.child
                assert child is not None
                return child
        return None

    async def __aenter__(self) -> StdioChild:
        child = self.take_now()
        return child if child is not None else await self.pool._acquire(self)

    def leave(self) -> None:
        """``__aexit__`` without a coroutine (it never awaits): the child given back to its pool."""
        pool, held = self.pool, self.held
        assert held is not None
        actions = pool.dispatch.release(held, time.monotonic(), pool.room)
        if actions:
            pool._apply(actions)
        if pool.budget is not None and pool.budget.waiting:
            pool.budget.changed()  # an idle child may now be evicted for another pool, or one retired

    async def __aexit__(self, *exc_info: object) -> None:
        self.leave()
