"""The pool's dispatcher (gateway/protocol/dispatch.py), rule by rule, with the clock passed in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from gateway.errors import ClientThrottledError, GatewayError, GatewayUnavailableError
from gateway.protocol.attribution import AskPolicy
from gateway.protocol.dispatch import STARTUP_WAIT, Dispatcher
from gateway.protocol.dispatchstate import (
    MAX_CONCURRENT_STARTS,
    Action,
    CheckLiveness,
    Lease,
    Lost,
    Member,
    NoBudget,
    PoolSettings,
    RestartAfter,
    StartChild,
    StopChild,
    Waiting,
    Wake,
)
from gateway.protocol.handshake import ChildInfo
from gateway.protocol.versions import Era

ASKS = {"sampling": {}, "elicitation": {}}
"""Told a legacy child, these make every call that may ask an asker (attribution rule 3)."""


@dataclass(eq=False)
class Kid:
    """A child as the dispatcher sees it (``ChildView``)."""

    pid: int
    era: Era = Era.LEGACY
    declared_capabilities: Mapping[str, object] = field(default_factory=lambda: dict(ASKS))
    in_flight: int = 0
    open_questions: int = 0
    awaiting_input: int = 0
    has_asked: bool = False
    last_output: float = 0.0
    alive: bool = True

    @property
    def info(self) -> ChildInfo:
        return ChildInfo(era=self.era, version="2025-11-25")

    def is_alive(self) -> bool:
        return self.alive


class Budget:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.claimed = 0

    def has_room(self) -> bool:
        return self.claimed < self.capacity

    def claim(self) -> bool:
        if not self.has_room():
            return False
        self.claimed += 1
        return True

    def full_error(self, label: str) -> GatewayError:
        return GatewayUnavailableError(f"{label}: the gateway is full")


class Ledger:
    def __init__(self) -> None:
        self.recorded: list[frozenset[str]] = []
        self.throttled: set[str] = set()

    def check(self, principal: str, now: float, label: str) -> None:
        if principal in self.throttled:
            raise ClientThrottledError(f"{label}: {principal} crashes children")

    def record(self, principals: frozenset[str] | set[str] | list[str], now: float) -> None:
        self.recorded.append(frozenset(principals))


def pool(size: int = 1, *, started: int | None = None, **settings: object) -> Dispatcher[Kid]:
    """A dispatcher with ``started`` (default: its minimum) children up."""
    dispatcher: Dispatcher[Kid] = Dispatcher(PoolSettings(min_size=size, max_size=size, **settings), "srv")  # type: ignore[arg-type]
    for n, action in enumerate(dispatcher.start_minimum(0.0)):
        assert isinstance(action, StartChild)
        if started is None or n < started:
            dispatcher.started(action.member, Kid(100 + n), 0.0)
    return dispatcher


def take(
    d: Dispatcher[Kid],
    principal: str = "p",
    method: str | None = "tools/call",
    tool: str | None = "tools/call t",
    *,
    now: float = 1.0,
) -> Lease[Kid] | Waiting[Kid]:
    ticket = d.ticket(principal, method, tool, None, now)
    decision = d.try_acquire(ticket, now, NoBudget())
    if isinstance(decision, Lease):
        d.leave(ticket)
    return decision


def granted(outcome: Lease[Kid] | Waiting[Kid]) -> Lease[Kid]:
    assert isinstance(outcome, Lease), outcome
    return outcome


def stopped(actions: list[Action[Kid]]) -> list[Member[Kid]]:
    return [a.member for a in actions if isinstance(a, StopChild)]


def child_of(lease: Lease[Kid]) -> Kid:
    assert lease.member.child is not None
    return lease.member.child


def test_a_request_takes_the_least_loaded_child() -> None:
    d = pool(3, child_asks=AskPolicy.NEVER)
    first, second, third = (child_of(granted(take(d))) for _ in range(3))
    assert len({first.pid, second.pid, third.pid}) == 3
    fourth = granted(take(d))
    assert fourth.member.leases == 2


def test_an_asker_needs_a_child_to_itself_and_waits_when_none_is_free() -> None:
    d = pool(1, asking_max=0)
    first = granted(take(d, "alice"))
    assert first.asking
    waiting = take(d, "bob")
    assert isinstance(waiting, Waiting)
    assert waiting.actions == ()  # the pool is at its bound: nothing to start
    assert waiting.deadline == 1.0 + d.settings.queue_timeout


def test_quiet_calls_run_beside_an_asking_or_parked_call() -> None:
    d = pool(1, asking_max=0)
    asker = granted(take(d, "alice"))
    child_of(asker).open_questions = 1  # parked: its client has the question
    for method in ("tools/list", "ping", "resources/list", "subscriptions/listen"):
        assert child_of(granted(take(d, "bob", method, None))) is child_of(asker)
    d.tools.note_quiet("tools/call echo")
    quiet = granted(take(d, "bob", "tools/call", "tools/call echo"))
    assert child_of(quiet) is child_of(asker)
    assert not quiet.asking
    assert isinstance(take(d, "bob", "tools/call", "tools/call unknown"), Waiting)  # may ask: not beside a question


def test_a_quiet_tool_still_waits_under_child_asks_always() -> None:
    d = pool(1, asking_max=0, child_asks=AskPolicy.ALWAYS)
    granted(take(d, "alice"))
    d.tools.note_quiet("tools/call echo")
    assert isinstance(take(d, "bob", "tools/call", "tools/call echo"), Waiting)


def test_askers_grow_the_pool_past_its_maximum_up_to_the_asking_bound() -> None:
    d = pool(1, asking_max=3)
    granted(take(d, "a"))
    ticket = d.ticket("b", "tools/call", "tools/call t", None, 1.0)
    decision = d.try_acquire(ticket, 1.0, NoBudget())
    assert isinstance(decision, Waiting)
    [start] = decision.actions
    assert isinstance(start, StartChild)
    assert d.try_acquire(ticket, 1.1, NoBudget()).actions == ()  # one start per waiting asker
    d.started(start.member, Kid(2), 1.2)
    assert isinstance(d.try_acquire(ticket, 1.2, NoBudget()), Lease)
    d.leave(ticket)
    third = take(d, "c", now=1.3)
    assert isinstance(third, Waiting)
    assert isinstance(third.actions[0], StartChild)  # the third and last
    d.started(third.actions[0].member, Kid(3), 1.4)
    granted(take(d, "c", now=1.4))
    assert take(d, "d", now=1.5) == Waiting(1.5 + d.settings.queue_timeout, False, ())


def test_quiet_calls_never_grow_the_pool_past_its_maximum() -> None:
    d = pool(1, max_in_flight=1, asking_max=8)
    granted(take(d, "a", "tools/list", None))
    decision = take(d, "b", "tools/list", None)
    assert decision == Waiting(1.0 + d.settings.queue_timeout, False, ())


def test_waiting_askers_start_children_at_once_up_to_a_bound() -> None:
    d = pool(1, asking_max=16)
    granted(take(d, "a"))
    starts = 0
    tickets = [d.ticket(f"p{n}", "tools/call", "tools/call t", None, 1.0) for n in range(MAX_CONCURRENT_STARTS + 2)]
    for ticket in tickets:
        decision = d.try_acquire(ticket, 1.0, NoBudget())
        starts += sum(isinstance(a, StartChild) for a in decision.actions)
    assert starts == MAX_CONCURRENT_STARTS
    assert d.unplaced_askers == len(tickets)
    for ticket in tickets:
        d.leave(ticket)
    assert (d.unplaced_askers, d.waiting) == (0, 0)


def test_the_global_budget_refusing_a_start_blocks_and_then_fails_with_its_error() -> None:
    d: Dispatcher[Kid] = Dispatcher(PoolSettings(min_size=0, max_size=1), "srv")
    ticket = d.ticket("a", "tools/list", None, None, 0.0)
    decision = d.try_acquire(ticket, 0.0, Budget(0))
    assert isinstance(decision, Waiting)
    assert decision.blocked
    assert decision.deadline == d.settings.queue_timeout  # blocked, not cold: the queue timeout
    with pytest.raises(GatewayUnavailableError, match="the gateway is full"):
        d.try_acquire(ticket, decision.deadline, Budget(0))


def test_a_principal_at_its_cap_of_parked_questions_gets_429_and_nobody_else_does() -> None:
    d = pool(1, asking_max=8, max_parked_per_principal=2)
    for n in range(2):
        lease = take(d, "mallory", now=float(n))
        if isinstance(lease, Waiting):
            [start] = lease.actions
            assert isinstance(start, StartChild)
            d.started(start.member, Kid(10 + n), float(n))
            lease = take(d, "mallory", now=float(n))
        child_of(granted(lease)).open_questions = 1
    assert d.parked("mallory") == 2
    with pytest.raises(ClientThrottledError, match="mallory already holds 2 calls waiting for its answers") as refused:
        take(d, "mallory")
    assert refused.value.status == 429
    assert granted(take(d, "mallory", "tools/list", None))  # a quiet call of the same client still runs
    assert isinstance(take(d, "alice"), Waiting)  # another client's asker: a child is started for it


def test_release_retires_a_child_past_max_requests_and_wakes_waiters() -> None:
    d = pool(1, max_requests=2, child_asks=AskPolicy.NEVER)
    first = granted(take(d))
    assert d.release(first, 2.0) == []  # nobody waits: nothing to wake
    second = granted(take(d))
    ticket = d.ticket("w", "ping", None, None, 3.0)
    actions = d.release(second, 3.0)
    assert [type(a) for a in actions] == [StopChild, Wake]
    assert stopped(actions) == [second.member]
    assert second.member.retiring
    d.leave(ticket)


def test_maintenance_retires_idle_children_above_the_minimum_and_checks_the_others() -> None:
    d = pool(1, started=1, idle_timeout=10.0, liveness_interval=5.0, asking_max=2)
    granted(take(d, "a"))
    extra = take(d, "b")
    assert isinstance(extra, Waiting)
    [start] = extra.actions
    assert isinstance(start, StartChild)
    d.started(start.member, Kid(2), 1.0)
    lease = granted(take(d, "b", now=1.0))
    d.release(lease, 1.0)
    actions = d.maintain(12.0, NoBudget())
    assert stopped(actions) == [start.member]
    assert start.member.retiring
    assert not d.members[0].retiring  # the minimum stays (and holds a lease)


def test_a_stalled_child_is_stopped_at_once_even_with_leases() -> None:
    d = pool(1, stall_timeout=5.0, child_asks=AskPolicy.NEVER)
    lease = granted(take(d))
    child_of(lease).in_flight = 1
    actions = d.maintain(10.0, NoBudget())
    assert stopped(actions) == [lease.member]
    child_of(lease).awaiting_input = 1  # silent because its client is answering: no stall
    lease.member.retiring = False
    assert d.maintain(10.0, NoBudget()) == []


def test_an_idle_child_is_checked_and_a_failed_check_stops_it() -> None:
    d = pool(1, liveness_interval=5.0)
    member = d.members[0]
    [check] = d.maintain(6.0, NoBudget())
    assert isinstance(check, CheckLiveness)
    assert check.member is member
    assert d.maintain(7.0, NoBudget()) == []  # checked lately
    assert [type(a) for a in d.liveness_failed(member, "ping timed out")] == [StopChild]
    assert d.liveness_failed(member, "again") == []  # already retiring


def test_a_child_that_dies_serving_charges_its_principals_and_restarts_at_once() -> None:
    ledger = Ledger()
    d: Dispatcher[Kid] = Dispatcher(
        PoolSettings(min_size=1, max_size=1, child_asks=AskPolicy.NEVER), "srv", crashes=ledger
    )
    [start] = d.start_minimum(0.0)
    assert isinstance(start, StartChild)
    d.started(start.member, Kid(1), 0.0)
    alice, bob = granted(take(d, "alice")), granted(take(d, "bob"))
    child_of(alice).alive = False
    d.release(alice, 20.0)
    actions = d.exited(start.member, GatewayUnavailableError("died"), 20.0)
    assert [type(a) for a in actions] == [Lost, RestartAfter, Wake]
    assert RestartAfter(0.0) in actions
    assert ledger.recorded == [frozenset({"alice", "bob"})]
    assert set(d.suspects) == {"alice", "bob"}
    assert bob.member is alice.member


def test_during_a_backoff_with_no_child_requests_fail_at_once_with_the_last_error() -> None:
    d: Dispatcher[Kid] = Dispatcher(PoolSettings(min_size=1, max_size=1), "srv")
    [start] = d.start_minimum(0.0)
    assert isinstance(start, StartChild)
    error = GatewayUnavailableError("cannot start srv: no such file")
    actions = d.exited(start.member, error, 0.1)  # never started: a start failure, backoff 0.5 s
    assert RestartAfter(0.5) in actions
    with pytest.raises(GatewayUnavailableError, match="no such file"):
        take(d, now=0.2)
    decision = take(d, now=0.7)  # the backoff is over: this request may start one
    assert isinstance(decision, Waiting)
    assert [type(a) for a in decision.actions] == [StartChild]
    assert decision.deadline == 0.7 + STARTUP_WAIT


def test_a_member_starting_is_no_child_and_counts_as_starting() -> None:
    member: Member[Kid] = Member(0.0)
    assert member.is_starting
    assert not member.is_live
    assert not member.holds_questions()
