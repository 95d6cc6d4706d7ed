"""The pool's dispatcher (gateway/protocol/dispatch.py), rule by rule, with the clock passed in.

The dispatcher never reads a child: a ``Kid`` is told to it as the stdio edge tells a real
child, its profile at ``started``, its facts by ``noted`` when a test changes them (``note``),
its counters in each tick's readings (``tick``)."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from gateway.errors import ClientThrottledError, GatewayError, GatewayUnavailableError
from gateway.protocol.attribution import AskPolicy
from gateway.protocol.childactions import ChildFacts
from gateway.protocol.dispatch import STARTUP_WAIT, Dispatcher
from gateway.protocol.dispatchstate import (
    MAX_CONCURRENT_STARTS,
    CheckLiveness,
    ChildProfile,
    Decision,
    EvictChild,
    Lease,
    Lost,
    Member,
    NoBudget,
    PoolAction,
    PoolSettings,
    Reading,
    ReleaseParked,
    RestartAfter,
    Room,
    StartChild,
    StopChild,
    Ticket,
    Waiting,
    Wake,
)
from gateway.protocol.versions import Era

ASKS = {"sampling": {}, "elicitation": {}}
"""Told a legacy child, these make every call that may ask an asker (attribution rule 3)."""


@dataclass(eq=False)
class Kid:
    """A child as its edge tells the dispatcher of it (``StdioChild.profile``, ``facts``,
    ``reading``): what it is, its facts, its counters. A test changes them, then tells the
    dispatcher (``note``, ``tick``)."""

    pid: int
    era: Era = Era.LEGACY
    declared_capabilities: Mapping[str, object] = field(default_factory=lambda: dict(ASKS))
    in_flight: int = 0
    open_questions: int = 0
    awaiting_input: int = 0
    has_asked: bool = False
    last_output: float = 0.0
    stdin_waiting_since: float | None = None
    alive: bool = True

    def profile(self) -> ChildProfile:
        return ChildProfile(self.pid, self.era is Era.LEGACY, self.declared_capabilities)

    def facts(self) -> ChildFacts:
        return ChildFacts(self.open_questions, self.has_asked, self.alive)

    def reading(self) -> Reading:
        return Reading(self.in_flight, self.awaiting_input, self.last_output, self.stdin_waiting_since)


def child_up(d: Dispatcher[Kid], member: Member[Kid], kid: Kid, now: float, room: Room) -> list[PoolAction[Kid]]:
    """``member``'s child ``kid`` has started: told as the pool tells it."""
    return d.started(member, kid, kid.profile(), kid.facts(), now, room)


def note(d: Dispatcher[Kid], held: Lease[Kid] | Member[Kid], **facts: object) -> None:
    """The child of ``held`` changes ``facts`` (``open_questions``, ``has_asked``, ``alive``):
    told to the dispatcher where they change, as the child's session machine tells it."""
    member = held.member if isinstance(held, Lease) else held
    kid = member.child
    assert kid is not None
    for name, value in facts.items():
        setattr(kid, name, value)
    d.noted(member, kid.facts())


def tick(d: Dispatcher[Kid], now: float, room: Room) -> list[PoolAction[Kid]]:
    """A maintenance tick, with each child's reading taken for it."""
    return d.maintain(now, room, {m: m.child.reading() for m in d.members if m.child is not None})


class Budget:
    """A global child budget at its cap: ``idle`` other pools' children it may evict."""

    def __init__(self, idle: Sequence[object] = ()) -> None:
        self.idle = list(idle)

    def has_room(self) -> bool:
        return False

    def victim(self, spared: Collection[object]) -> object | None:
        return next((v for v in self.idle if v not in spared), None)

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
            child_up(dispatcher, action.member, Kid(100 + n), 0.0, NoBudget())
    return dispatcher


def take(
    d: Dispatcher[Kid],
    principal: str = "p",
    method: str | None = "tools/call",
    tool: str | None = "tools/call t",
    *,
    now: float = 1.0,
) -> Lease[Kid] | Waiting[Kid]:
    """A request that tries once, and goes away if it must wait (what it started still starts)."""
    ticket = d.ticket(principal, method, tool, None, now)
    decision = d.try_acquire(ticket, now, NoBudget())
    d.leave(ticket, now, NoBudget())
    return decision


def granted(outcome: Decision[Kid]) -> Lease[Kid]:
    assert isinstance(outcome, Lease), outcome
    return outcome


def stopped(actions: list[PoolAction[Kid]]) -> list[Member[Kid]]:
    return [a.member for a in actions if isinstance(a, StopChild)]


def woken(actions: list[PoolAction[Kid]]) -> list[Ticket[Kid]]:
    return [a.ticket for a in actions if isinstance(a, Wake)]


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
    note(d, asker, open_questions=1)  # parked: its client has the question
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
    child_up(d, start.member, Kid(2), 1.2, NoBudget())
    assert isinstance(d.try_acquire(ticket, 1.2, NoBudget()), Lease)
    d.leave(ticket, 1.2, NoBudget())
    third = take(d, "c", now=1.3)
    assert isinstance(third, Waiting)
    assert isinstance(third.actions[0], StartChild)  # the third and last
    child_up(d, third.actions[0].member, Kid(3), 1.4, NoBudget())
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
        d.leave(ticket, 1.0, NoBudget())
    assert (d.unplaced_askers, d.waiting) == (0, 0)


def test_the_global_budget_refusing_a_start_blocks_and_then_fails_with_its_error() -> None:
    d: Dispatcher[Kid] = Dispatcher(PoolSettings(min_size=0, max_size=1), "srv")
    ticket = d.ticket("a", "tools/list", None, None, 0.0)
    decision = d.try_acquire(ticket, 0.0, Budget())
    assert isinstance(decision, Waiting)
    assert decision.blocked
    assert decision.deadline == d.settings.queue_timeout  # blocked, not cold: the queue timeout
    with pytest.raises(GatewayUnavailableError, match="the gateway is full"):
        d.try_acquire(ticket, decision.deadline, Budget())


def test_a_principal_at_its_cap_of_parked_questions_gets_429_and_nobody_else_does() -> None:
    d = pool(1, asking_max=8, max_parked_per_principal=2)
    for n in range(2):
        lease = take(d, "mallory", now=float(n))
        if isinstance(lease, Waiting):
            [start] = lease.actions
            assert isinstance(start, StartChild)
            child_up(d, start.member, Kid(10 + n), float(n), NoBudget())
            lease = take(d, "mallory", now=float(n))
        note(d, granted(lease), open_questions=1)
    assert d.parked("mallory") == 2
    with pytest.raises(ClientThrottledError, match="mallory already holds 2 calls waiting for its answers") as refused:
        take(d, "mallory")
    assert refused.value.status == 429
    # The cap is the admission's threshold, not a bound the count never passes: said so.
    assert "(from 2 on, its next call that may ask is refused: --max-parked-per-principal)" in str(refused.value)
    assert granted(take(d, "mallory", "tools/list", None))  # a quiet call of the same client still runs
    assert isinstance(take(d, "alice"), Waiting)  # another client's asker: a child is started for it


def test_release_grants_the_first_waiter_and_retires_a_child_past_max_requests() -> None:
    d = pool(1, max_requests=3, max_in_flight=1, child_asks=AskPolicy.NEVER)
    first = granted(take(d))
    assert d.release(first, 2.0, NoBudget()) == []  # nobody waits: nothing to wake
    second = granted(take(d))
    early, late = (d.ticket(p, "ping", None, None, 3.0) for p in ("early", "late"))
    for ticket in (early, late):
        assert isinstance(d.try_acquire(ticket, 3.0, NoBudget()), Waiting)
    assert woken(d.release(second, 4.0, NoBudget())) == [early]
    third = granted(d.try_acquire(early, 4.0, NoBudget()))
    d.leave(early, 4.0, NoBudget())
    actions = d.release(third, 5.0, NoBudget())  # its third request: retired, and nobody is woken
    assert [type(a) for a in actions] == [StopChild]
    assert stopped(actions) == [third.member]
    assert third.member.retiring
    assert late.queued


def shape(d: Dispatcher[Kid], lease: Lease[Kid] | Waiting[Kid] | None) -> object:
    """What a try decided, and the dispatcher's bookkeeping after it, comparable across twins."""
    decided = None
    if isinstance(lease, Lease):
        decided = (d.members.index(lease.member), lease.principal, lease.alone, lease.asking)
    members = [
        (m.leases, m.asking_leases, m.served, m.last_used, m.exclusive, dict(m.principals), dict(m.askers))
        for m in d.members
    ]
    return decided, members, d.waiting


def twins(*, full: bool = False, **settings: object) -> tuple[Dispatcher[Kid], Dispatcher[Kid]]:
    """Two dispatchers of three children, told the same history: one asker's call parked on the
    first child, a quiet call on the second (and on the third when ``full``), a crash suspect
    ("sue")."""
    pair = []
    for _ in range(2):
        d = pool(3, asking_max=3, max_parked_per_principal=1, **settings)
        d.tools.note_quiet("tools/call echo")
        note(d, granted(take(d, "alice")), open_questions=1)
        for _ in range(2 if full else 1):
            granted(take(d, "bob", "tools/list", None))
        d.suspects["sue"] = 0.0
        pair.append(d)
    return pair[0], pair[1]


REQUESTS = [
    ("carol", "tools/call", "tools/call t"),  # an asker: the one child without a question or asker
    ("carol", "tools/call", "tools/call echo"),  # a quiet tool (learned, on legacy children)
    ("carol", "tools/list", None),
    ("carol", "ping", None),
    ("sue", "tools/list", None),  # a suspect: a child with no lease, alone
    ("alice", "tools/list", None),  # at its cap, but quiet calls go on
]


@pytest.mark.parametrize(("principal", "method", "tool"), REQUESTS)
@pytest.mark.parametrize("max_in_flight", [0, 1])
@pytest.mark.parametrize("full", [False, True])
def test_a_request_with_no_waiter_is_granted_at_once_as_its_ticket_would_be(
    principal: str, method: str, tool: str | None, max_in_flight: int, full: bool
) -> None:
    fast, slow = twins(full=full, max_in_flight=max_in_flight)
    at_once = fast.acquire_now(principal, method, tool, None, 2.0)
    by_ticket = take(slow, principal, method, tool, now=2.0)
    assert shape(fast, at_once) == shape(slow, by_ticket)
    if at_once is None:  # it would wait: nothing was decided, its ticket decides (and starts)
        assert isinstance(by_ticket, Waiting)
        assert shape(fast, take(fast, principal, method, tool, now=2.0)) == shape(slow, by_ticket)


def test_a_request_at_its_cap_or_throttled_is_refused_at_once_as_by_its_ticket() -> None:
    fast, slow = twins()
    with pytest.raises(ClientThrottledError, match="alice already holds 1 calls") as at_once:
        fast.acquire_now("alice", "tools/call", "tools/call t", None, 2.0)
    ticket = slow.ticket("alice", "tools/call", "tools/call t", None, 2.0)
    with pytest.raises(ClientThrottledError) as by_ticket:
        slow.try_acquire(ticket, 2.0, NoBudget())
    slow.leave(ticket, 2.0, NoBudget())  # as the pool's request leaves, whatever its outcome
    assert str(at_once.value) == str(by_ticket.value)
    assert shape(fast, None) == shape(slow, None)
    ledger = Ledger()
    ledger.throttled.add("mallory")
    d: Dispatcher[Kid] = Dispatcher(PoolSettings(1, 1), "srv", crashes=ledger)
    [start] = d.start_minimum(0.0)
    assert isinstance(start, StartChild)
    child_up(d, start.member, Kid(1), 0.0, NoBudget())
    with pytest.raises(ClientThrottledError, match="mallory crashes children"):
        d.acquire_now("mallory", "tools/list", None, None, 1.0)
    assert d.members[0].leases == 0


def test_a_request_arriving_behind_a_waiter_is_not_granted_at_once() -> None:
    d = pool(1, asking_max=0)
    parked = granted(take(d, "alice"))
    note(d, parked, open_questions=1)
    asker = waiter(d, "bob", "tools/call")
    # A quiet call may pass the waiting asker (rule 0), but only its ticket's try decides that.
    assert d.acquire_now("carol", "tools/list", None, None, 2.0) is None
    assert parked.member.leases == 1
    assert list(d.queue) == [asker]
    assert child_of(granted(take(d, "carol", "tools/list", None, now=2.0))) is child_of(parked)


def test_a_legacy_session_is_granted_its_own_child_at_once_or_waits_for_it() -> None:
    d = pool(2, max_in_flight=1, child_asks=AskPolicy.NEVER)
    first = granted(take(d, "alice"))
    mine = first.member
    assert mine.child is not None
    assert d.acquire_now("alice", "tools/call", "tools/call t", mine.child, 1.0) is None  # busy: it waits for it
    d.release(first, 1.5, NoBudget())
    again = d.acquire_now("alice", "tools/call", "tools/call t", mine.child, 2.0)
    assert again is not None
    assert again.member is mine


def test_maintenance_retires_idle_children_above_the_minimum_and_checks_the_others() -> None:
    d = pool(1, started=1, idle_timeout=10.0, liveness_interval=5.0, asking_max=2)
    granted(take(d, "a"))
    extra = take(d, "b")
    assert isinstance(extra, Waiting)
    [start] = extra.actions
    assert isinstance(start, StartChild)
    child_up(d, start.member, Kid(2), 1.0, NoBudget())
    lease = granted(take(d, "b", now=1.0))
    d.release(lease, 1.0, NoBudget())
    actions = tick(d, 12.0, NoBudget())
    assert stopped(actions) == [start.member]
    assert start.member.retiring
    assert not d.members[0].retiring  # the minimum stays (and holds a lease)


def test_a_stalled_child_is_stopped_at_once_even_with_leases() -> None:
    d = pool(1, stall_timeout=5.0, child_asks=AskPolicy.NEVER)
    lease = granted(take(d))
    child_of(lease).in_flight = 1
    actions = tick(d, 10.0, NoBudget())
    assert stopped(actions) == [lease.member]
    child_of(lease).awaiting_input = 1  # silent because its client is answering: no stall
    lease.member.retiring = False
    assert tick(d, 10.0, NoBudget()) == []


def test_an_idle_child_is_checked_and_a_failed_check_stops_it() -> None:
    d = pool(1, liveness_interval=5.0)
    member = d.members[0]
    [check] = tick(d, 6.0, NoBudget())
    assert isinstance(check, CheckLiveness)
    assert check.member is member
    assert tick(d, 7.0, NoBudget()) == []  # checked lately
    assert [type(a) for a in d.liveness_failed(member, "ping timed out")] == [StopChild]
    assert d.liveness_failed(member, "again") == []  # already retiring


def test_a_child_that_dies_serving_charges_its_principals_and_restarts_at_once() -> None:
    ledger = Ledger()
    d: Dispatcher[Kid] = Dispatcher(
        PoolSettings(min_size=1, max_size=1, child_asks=AskPolicy.NEVER), "srv", crashes=ledger
    )
    [start] = d.start_minimum(0.0)
    assert isinstance(start, StartChild)
    child_up(d, start.member, Kid(1), 0.0, NoBudget())
    alice, bob = granted(take(d, "alice")), granted(take(d, "bob"))
    note(d, alice, alive=False)
    d.release(alice, 20.0, NoBudget())
    actions = d.exited(start.member, GatewayUnavailableError("died"), 20.0, NoBudget())
    assert [type(a) for a in actions] == [Lost, RestartAfter]
    assert RestartAfter(0.0) in actions
    assert ledger.recorded == [frozenset({"alice", "bob"})]
    assert set(d.suspects) == {"alice", "bob"}
    assert bob.member is alice.member


def test_during_a_backoff_with_no_child_requests_fail_at_once_with_the_last_error() -> None:
    d: Dispatcher[Kid] = Dispatcher(PoolSettings(min_size=1, max_size=1), "srv")
    [start] = d.start_minimum(0.0)
    assert isinstance(start, StartChild)
    error = GatewayUnavailableError("cannot start srv: no such file")
    actions = d.exited(start.member, error, 0.1, NoBudget())  # never started: a start failure, backoff 0.5 s
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


def waiter(d: Dispatcher[Kid], principal: str, method: str | None = "ping", *, now: float = 1.0) -> Ticket[Kid]:
    """A request that arrives, tries, and waits (its ticket stays queued)."""
    ticket = d.ticket(principal, method, None if method == "ping" else f"{method} t", None, now)
    assert isinstance(d.try_acquire(ticket, now, NoBudget()), Waiting)
    return ticket


def test_a_child_that_frees_up_goes_to_the_first_waiter_never_to_a_request_arriving_after() -> None:
    d = pool(1, max_in_flight=1, child_asks=AskPolicy.NEVER)
    busy = granted(take(d, "busy"))
    a = waiter(d, "a")
    assert woken(d.release(busy, 2.0, NoBudget())) == [a]  # granted at the release, not at a's wake-up
    b = d.ticket("b", "ping", None, None, 2.0)  # arrives before a's request has run again
    assert isinstance(d.try_acquire(b, 2.0, NoBudget()), Waiting)
    assert child_of(granted(d.try_acquire(a, 2.1, NoBudget()))) is child_of(busy)
    assert list(d.queue) == [b]


def test_waiters_are_granted_in_arrival_order_each_woken_alone() -> None:
    d = pool(1, max_in_flight=1, child_asks=AskPolicy.NEVER)
    lease = granted(take(d, "busy"))
    tickets = [waiter(d, f"w{n}", now=1.0 + n) for n in range(4)]
    for n, ticket in enumerate(tickets):
        assert woken(d.release(lease, 10.0 + n, NoBudget())) == [ticket]
        lease = granted(d.try_acquire(ticket, 10.0 + n, NoBudget()))
        d.leave(ticket, 10.0 + n, NoBudget())
    assert d.release(lease, 20.0, NoBudget()) == []


def test_a_quiet_call_passes_a_waiting_asker_that_the_child_cannot_take() -> None:
    d = pool(1, asking_max=0)
    parked = granted(take(d, "alice"))
    note(d, parked, open_questions=1)  # parked: an asker may not join it (rule 3)
    asker = waiter(d, "bob", "tools/call")
    quiet = d.ticket("carol", "tools/list", None, None, 2.0)
    assert child_of(granted(d.try_acquire(quiet, 2.0, NoBudget()))) is child_of(parked)
    d.leave(quiet, 2.0, NoBudget())
    assert list(d.queue) == [asker]


def test_a_question_closing_is_an_event_that_grants_the_waiting_asker() -> None:
    d = pool(1, asking_max=0)
    quiet = granted(take(d, "alice", "tools/list", None))
    note(d, quiet, open_questions=1)  # held as ambiguous
    asker = waiter(d, "bob", "tools/call")
    assert d.changed(2.0, NoBudget()) == []  # still open: nothing to grant, nobody woken
    note(d, quiet, open_questions=0)
    assert woken(d.changed(3.0, NoBudget())) == [asker]
    assert granted(d.try_acquire(asker, 3.0, NoBudget())).asking


def test_a_waiter_that_leaves_after_its_grant_hands_the_child_to_the_next() -> None:
    d = pool(1, max_in_flight=1, child_asks=AskPolicy.NEVER)
    busy = granted(take(d, "busy"))
    a, b = waiter(d, "a"), waiter(d, "b")
    assert woken(d.release(busy, 2.0, NoBudget())) == [a]
    assert woken(d.leave(a, 2.1, NoBudget())) == [b]  # cancelled before it took its lease
    assert granted(d.try_acquire(b, 2.1, NoBudget())).member is busy.member


def test_a_failure_decided_while_waiting_wakes_its_request_which_raises_it() -> None:
    d: Dispatcher[Kid] = Dispatcher(PoolSettings(min_size=1, max_size=1), "srv")
    [start] = d.start_minimum(0.0)
    assert isinstance(start, StartChild)
    ticket = waiter(d, "a", now=0.0)
    error = GatewayUnavailableError("cannot start srv: no such file")
    assert woken(d.exited(start.member, error, 0.1, NoBudget())) == [ticket]  # in the backoff: fail now
    assert not ticket.queued
    with pytest.raises(GatewayUnavailableError, match="no such file"):
        d.try_acquire(ticket, 0.1, NoBudget())
    assert d.leave(ticket, 0.1, NoBudget()) == []


def test_a_start_at_the_global_cap_evicts_another_pools_idle_child_as_an_action() -> None:
    d = pool(1, asking_max=8)
    granted(take(d, "a"))
    budget = Budget(idle=["lru", "next"])
    starts: list[PoolAction[Kid]] = []
    for principal in ("b", "c", "d"):
        ticket = d.ticket(principal, "tools/call", "tools/call t", None, 1.0)
        decision = d.try_acquire(ticket, 1.0, budget)
        assert isinstance(decision, Waiting)
        starts += decision.actions
        for action in decision.actions:  # the edge carries the eviction out: the victim is retired
            if isinstance(action, EvictChild):
                budget.idle.remove(action.victim)
    # Each start on demand comes after the eviction that makes its room: one victim each, and
    # the third, with no idle child left, is held back by the cap (blocked).
    assert [type(a) for a in starts] == [EvictChild, StartChild, EvictChild, StartChild]
    assert [a.victim for a in starts if isinstance(a, EvictChild)] == ["lru", "next"]
    assert decision.blocked
    # In one decision (an event serving every waiter) victims are never chosen twice.
    d2 = pool(1, asking_max=8)
    granted(take(d2, "a"))
    tickets = [waiter(d2, p, "tools/call") for p in ("b", "c")]
    for member in [m for m in d2.members if m.child is None]:
        d2.forget(member)  # their starts failed silently: both wait again, nobody starting
    actions = d2.changed(2.0, Budget(idle=["v1", "v2", "v3"]))
    assert [a.victim for a in actions if isinstance(a, EvictChild)] == ["v1", "v2"]
    assert all(t.queued for t in tickets)


def parked_pool(holders: Sequence[str]) -> Dispatcher[Kid]:
    """A pool at its asking bound, each child holding one unanswered question of a holder."""
    d = pool(1, asking_max=len(holders))
    for n, principal in enumerate(holders):
        lease = take(d, principal, now=float(n))
        if isinstance(lease, Waiting):
            [start] = [a for a in lease.actions if isinstance(a, StartChild)]
            child_up(d, start.member, Kid(10 + n), float(n), NoBudget())
            lease = take(d, principal, now=float(n))
        note(d, granted(lease), open_questions=1)
    return d


def released(decision: Decision[Kid]) -> list[str]:
    assert isinstance(decision, Waiting), decision
    return [a.principal for a in decision.actions if isinstance(a, ReleaseParked)]


def test_an_asker_facing_only_others_abandoned_questions_gets_one_of_the_top_holders_ended() -> None:
    d = parked_pool(["alice", "alice", "alice", "bob"])
    ticket = d.ticket("carol", "tools/call", "tools/call t", None, 9.0)
    assert released(d.try_acquire(ticket, 9.0, NoBudget())) == ["alice"]  # the most, above carol's + 1
    assert released(d.try_acquire(ticket, 9.5, NoBudget())) == []  # once per request


def test_no_parked_call_is_ended_for_a_principal_holding_about_as_many() -> None:
    # bob holds 1, carol 0: ending bob's would only move the starvation to him.
    assert released(take(parked_pool(["bob", "dave"]), "carol", now=9.0)) == []
    # alice asks for a child while holding as many as bob: nobody's call ends for her.
    assert released(take(parked_pool(["alice", "alice", "bob", "bob"]), "alice", now=9.0)) == []
    # A child with no question open is still to come free: nothing is ended.
    d = parked_pool(["alice", "alice", "alice", "bob"])
    note(d, d.members[3], open_questions=0)
    assert released(take(d, "carol", now=9.0)) == []


def test_a_child_whose_stdin_stalls_takes_no_new_request_and_a_replacement_starts() -> None:
    d = pool(1, child_asks=AskPolicy.NEVER)
    held = granted(take(d, "alice", now=1.0))
    stuck = child_of(held)
    stuck.stdin_waiting_since = 1.0  # its write waits for the pipe from now on
    assert tick(d, 1.0 + d.settings.stall_notice / 2, NoBudget()) == []  # slow, not yet stalled
    assert child_of(granted(take(d, "bob", now=2.0))) is stuck
    actions = tick(d, 1.0 + d.settings.stall_notice, NoBudget())
    [start] = [a for a in actions if isinstance(a, StartChild)]  # the minimum, counted without it
    assert held.member.stalled
    assert d.counted() == 1
    waiting = take(d, "carol", now=4.0)  # no new request for the stalled child
    assert isinstance(waiting, Waiting)
    child_up(d, start.member, Kid(200), 4.0, NoBudget())
    assert child_of(granted(take(d, "carol", now=4.1))).pid == 200
    stuck.stdin_waiting_since = None  # it reads again: it rejoins, the pool is one over its bound
    tick(d, 5.0, NoBudget())
    assert not held.member.stalled
    assert d.counted() == 2
    assert child_of(granted(take(d, "dave", now=5.1))).pid == 200  # fewest leases (two each now)
    assert child_of(granted(take(d, "erin", now=5.2))) is stuck  # it serves again


def test_a_stalled_childs_waiter_is_served_by_the_child_started_beside_it() -> None:
    d = pool(1, max_in_flight=1, child_asks=AskPolicy.NEVER)
    held = granted(take(d, "alice"))
    ticket = d.ticket("bob", "tools/call", "tools/call t", None, 1.0)
    assert isinstance(d.try_acquire(ticket, 1.0, NoBudget()), Waiting)  # the pool is full
    child_of(held).stdin_waiting_since = 1.0
    actions = tick(d, 1.0 + d.settings.stall_notice, NoBudget())
    [start] = [a for a in actions if isinstance(a, StartChild)]
    woken_now = woken(child_up(d, start.member, Kid(300), 3.5, NoBudget()))
    assert woken_now == [ticket]
    assert child_of(granted(d.try_acquire(ticket, 3.5, NoBudget()))).pid == 300


def test_a_legacy_session_waits_for_its_own_stalled_child() -> None:
    d = pool(1, child_asks=AskPolicy.NEVER)
    held = granted(take(d, "alice"))
    mine = child_of(held)
    mine.stdin_waiting_since = 0.0
    tick(d, d.settings.stall_notice, NoBudget())
    ticket = d.ticket("alice", "tools/call", "tools/call t", mine, 3.0)
    assert isinstance(d.try_acquire(ticket, 3.0, NoBudget()), Waiting)  # its state lives there


# -- lifecycle records ----------------------------------------------------------------------


def events(caplog: pytest.LogCaptureFixture) -> dict[str, list[logging.LogRecord]]:
    found: dict[str, list[logging.LogRecord]] = {}
    for record in caplog.records:
        if record.name == "gateway.pool":
            found.setdefault(getattr(record, "event", "-"), []).append(record)
    return found


def test_failing_and_recovered_are_records_with_the_pools_fields_and_the_error_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.pool")
    d: Dispatcher[Kid] = Dispatcher(PoolSettings(min_size=1, max_size=1), "srv principal=bob", server="srv")
    [start] = d.start_minimum(0.0)
    error = GatewayUnavailableError("cannot start srv: exited with code 2; stderr: TOKEN=abc123")
    now = 0.0
    for _ in range(5):  # CRASH_LOOP start failures in a row
        assert isinstance(start, StartChild)
        now += 1.0
        d.exited(start.member, error, now, NoBudget())
        now += 100.0
        [start] = d.restart_due(now, NoBudget())
    assert isinstance(start, StartChild)
    child_up(d, start.member, Kid(7), now, NoBudget())
    found = events(caplog)
    (failing,) = found["failing"]
    assert failing.levelno == logging.ERROR
    assert (failing.server, failing.pool, failing.quick_failures) == ("srv", "srv principal=bob", 5)  # type: ignore[attr-defined]
    assert failing.error == "cannot start srv: exited with code 2; stderr: TOKEN=[redacted]"  # type: ignore[attr-defined]
    assert "abc123" not in failing.getMessage()
    assert failing.getMessage().startswith("srv principal=bob: failing after 5 quick failures; last: ")
    (recovered,) = found["recovered"]
    assert (recovered.server, recovered.pool, recovered.pid) == ("srv", "srv principal=bob", 7)  # type: ignore[attr-defined]


def test_retiring_evicting_a_crash_and_a_failed_check_are_records_with_their_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.pool")
    d = pool(3, liveness_interval=5.0, child_asks=AskPolicy.NEVER)
    first, second, third = d.members
    d.retire(first, "idle for 300 s")
    d.retire(second, "evicted for other: the gateway runs at most 8 children", event="evict")
    d.liveness_failed(third, "ping timed out")
    found = events(caplog)
    retired, recycled = found["retire"]  # the second: the child that failed its check
    assert (recycled.pid, recycled.reason) == (102, "failed liveness check")  # type: ignore[attr-defined]
    assert (retired.pid, retired.reason, retired.server, retired.pool) == (100, "idle for 300 s", "srv", "srv")  # type: ignore[attr-defined]
    (evicted,) = found["evict"]
    assert evicted.pid == 101  # type: ignore[attr-defined]
    assert (
        evicted.getMessage() == "srv: retiring child pid 101 (evicted for other: the gateway runs at most 8 children)"
    )
    (failed_check,) = found["liveness_failed"]
    assert (failed_check.pid, failed_check.reason) == (102, "ping timed out")  # type: ignore[attr-defined]
    crashy: Dispatcher[Kid] = Dispatcher(PoolSettings(1, 1, child_asks=AskPolicy.NEVER), "srv", crashes=Ledger())
    [start] = crashy.start_minimum(0.0)
    assert isinstance(start, StartChild)
    child_up(crashy, start.member, Kid(1), 0.0, NoBudget())
    lease = granted(take(crashy, "mallory"))
    note(crashy, lease, alive=False)  # it died with mallory's call on it
    crashy.release(lease, 20.0, NoBudget())
    crashy.exited(lease.member, GatewayUnavailableError("died"), 20.0, NoBudget())
    (died,) = events(caplog)["died_serving"]
    assert (died.principals, died.delay) == (["mallory"], 0.0)  # type: ignore[attr-defined]
