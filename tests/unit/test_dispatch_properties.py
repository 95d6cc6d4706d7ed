"""Two pools' dispatchers under random event orders (hypothesis stateful testing).

Requests of several principals (askers, quiet tools, lists) arrive at either pool, wait, give
up; children start, ask, get answered, die, exit, stop reading stdin and read again; leases
end; maintenance ticks as the clock moves. The two pools share a global child budget (``SharedBudget``, modelled on
``gateway.stdio.budget``): a start on demand at the cap evicts the other pool's idle child, as an
``EvictChild`` action carried out here the way ``gateway.stdio.pool`` carries it out. The
dispatchers are driven as the pool drives them (each event that frees a child for a waiter is
told to the dispatcher; a ``Wake`` makes its request try again), and after every step:

- waiters are served in arrival order: a request is never granted a child while one that
  arrived before it at the same pool, of the same kind and principal standing, still waits;
- every request decided while it waited (granted or failed) was woken, and only such a request
  or one whose deadline came nearer is woken;
- the children in service over both pools never exceed the budget; an evicted child was
  another pool's, idle, live and above its pool's minimum; room is never left free while a
  request the cap held back waits (room that frees is given, pool by pool in the order their
  held-back requests arrived, before anyone else can take it);
- a child never runs two askers at once, and no asker was given a child with a question open;
- a principal at its cap of parked questions was never given a child for an asker;
- the pool never holds more members than its bound for askers (nor than its minimum), not
  counting children whose stdin stalled, which are given no request;
- every lease is counted once: leases, asking leases and the per-principal tables agree with
  the leases held; the waiting and unplaced counts agree with the tickets waiting;
- every ``StopChild`` names a member of the pool that is retiring or whose child must go.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gateway.errors import GatewayError, GatewayUnavailableError
from gateway.protocol.dispatch import Dispatcher
from gateway.protocol.dispatchstate import (
    EvictChild,
    Lease,
    Member,
    PoolAction,
    PoolSettings,
    StartChild,
    StopChild,
    Ticket,
    Wake,
)
from tests.unit.test_dispatch import Kid, child_up, note, tick

PRINCIPALS = st.sampled_from(["alice", "bob", "carol"])
KINDS = st.sampled_from(["asker", "quiet", "list"])
POOLS = st.integers(min_value=0, max_value=1)
CALLS = {
    "asker": ("tools/call", "tools/call ask"),
    "quiet": ("tools/call", "tools/call quiet"),
    "list": ("tools/list", None),
}
"""What a request of each kind asks the pool for: its method and tool key."""
CAP = 1
BOUND = 4
CAPACITY = 2
"""Children in service over both pools: below either pool's bound, so the cap is reached."""


class SharedBudget:
    """The global child budget over both pools (``gateway.stdio.budget.ChildBudget``'s rules)."""

    def __init__(self) -> None:
        self.pools: list[Dispatcher[Kid]] = []

    def in_service(self) -> int:
        return sum(1 for d in self.pools for m in d.members if not m.retiring)

    def room_for(self, d: Dispatcher[Kid]) -> Room:
        return Room(self, d)


@dataclass(frozen=True)
class Victim:
    pool: Dispatcher[Kid]
    member: Member[Kid]


@dataclass
class Room:
    budget: SharedBudget
    pool: Dispatcher[Kid]

    def has_room(self) -> bool:
        return self.budget.in_service() < CAPACITY

    def victim(self, spared: Collection[object]) -> object | None:
        candidates = [
            Victim(other, m)
            for other in self.budget.pools
            if other is not self.pool and len(other.members) > other.settings.min_size
            for m in other.members
            if m.is_live and m.leases == 0
        ]
        return min((v for v in candidates if v not in spared), key=lambda v: v.member.last_used, default=None)

    def full_error(self, label: str) -> GatewayError:
        return GatewayUnavailableError(f"{label}: the gateway is full")


@dataclass(eq=False)
class PoolModel:
    """One pool's dispatcher and what its edge would hold."""

    d: Dispatcher[Kid]
    room: Room
    leases: list[Lease[Kid]] = field(default_factory=list)
    tickets: list[Ticket[Kid]] = field(default_factory=list)  # waiting, in arrival order
    starting: list[Member[Kid]] = field(default_factory=list)
    arrivals: dict[Ticket[Kid], tuple[int, str]] = field(default_factory=dict)  # order, kind


class DispatchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.budget = SharedBudget()
        self.settings = [
            # One request per child: quiet calls grow the pools too, so each may evict the other's
            # idle child; the first never below its minimum. Children retire when old, busy or
            # not: room frees on a tick then, and goes to whoever waits for it.
            PoolSettings(
                min_size=1, max_size=2, max_in_flight=1, asking_max=BOUND, max_parked_per_principal=CAP, max_age=500
            ),
            PoolSettings(
                min_size=0, max_size=2, max_in_flight=1, asking_max=BOUND, max_parked_per_principal=CAP, max_age=500
            ),
        ]
        self.pools: list[PoolModel] = []
        for n, s in enumerate(self.settings):
            d: Dispatcher[Kid] = Dispatcher(s, f"srv{n}")
            d.tools.note_quiet("tools/call quiet")
            self.budget.pools.append(d)
            self.pools.append(PoolModel(d, self.budget.room_for(d)))
        self.now = 0.0
        self.pids = 0
        self.arrived = 0
        self.evictions = 0
        self.stopped: set[int] = set()  # ids of members told to stop
        for pool in self.pools:
            self.apply(pool, pool.d.start_minimum(self.now))
        self.ready(self.pools[0])
        self.warm(self.pools[1])  # the budget starts at its cap, with an idle child to evict

    def ready(self, pool: PoolModel) -> None:
        while pool.starting:
            self.pids += 1
            self.apply(pool, child_up(pool.d, pool.starting.pop(), Kid(self.pids), self.now, pool.room))

    def warm(self, pool: PoolModel) -> None:
        """One request served to its end on ``pool``: a child started on demand, now idle."""
        self.arrive(self.pools.index(pool), "alice", "list")
        self.ready(pool)
        [lease] = pool.leases
        pool.leases.remove(lease)
        self.apply(pool, pool.d.release(lease, self.now, pool.room))

    def apply(self, pool: PoolModel, actions: list[PoolAction[Kid]] | tuple[PoolAction[Kid], ...]) -> None:
        for action in actions:
            if isinstance(action, StartChild):
                assert action.member in pool.d.members
                pool.starting.append(action.member)
            elif isinstance(action, StopChild):
                assert action.member in pool.d.members
                self.stopped.add(id(action.member))
            elif isinstance(action, EvictChild):
                victim = action.victim
                assert isinstance(victim, Victim)
                owner = self.model_of(victim.pool)
                assert owner is not pool, "a pool evicted its own child"
                member = victim.member
                assert member in owner.d.members
                assert member.is_live
                assert member.leases == 0, "evicted a busy child"
                assert len(owner.d.members) > owner.d.settings.min_size, "evicted a minimum"
                self.evictions += 1
                event("a child of the other pool evicted")
                self.apply(owner, owner.d.retire(member, "evicted"))
            elif isinstance(action, Wake):
                ticket = action.ticket
                assert ticket in pool.tickets, "woke a request that does not wait"
                if not ticket.queued:  # decided while it waited: its request takes the outcome
                    event("granted while waiting" if ticket.lease is not None else "failed while waiting")
                    self.try_ticket(pool, ticket)

    def model_of(self, d: Dispatcher[Kid]) -> PoolModel:
        return next(pool for pool in self.pools if pool.d is d)

    def budget_changed(self) -> None:
        """A child went idle, retired or left service: the pools with a start held back by the
        cap serve their waiters, the pool whose held-back waiter arrived first first
        (``ChildBudget.changed``)."""
        held = [pool for pool in self.pools if pool.d.held_back]
        for pool in sorted(held, key=lambda pool: pool.d.blocked_since()):
            self.apply(pool, pool.d.changed(self.now, pool.room))

    def try_ticket(self, pool: PoolModel, ticket: Ticket[Kid]) -> None:
        parked_before = pool.d.parked(ticket.principal)
        try:
            decision = pool.d.try_acquire(ticket, self.now, pool.room)
        except GatewayError:
            self.leave(pool, ticket)
            return
        if isinstance(decision, Lease):
            self.assert_fit(decision, parked_before)
            self.assert_first_served(pool, ticket)
            pool.leases.append(decision)
            self.leave(pool, ticket)
        else:
            if decision.blocked:
                event("a start held back by the budget")
            self.apply(pool, decision.actions)

    @staticmethod
    def assert_fit(lease: Lease[Kid], parked_before: int) -> None:
        child = lease.member.child
        assert child is not None
        if lease.asking:
            assert child.open_questions == 0, "an asker joined a child with a question open"
            assert lease.member.asking_leases == 1, "two askers on one child"
            assert parked_before < CAP, "a principal past its cap got a child for an asker"
        assert not lease.member.stalled, "a child whose stdin stalled was given a request"

    def assert_first_served(self, pool: PoolModel, granted: Ticket[Kid]) -> None:
        """No request that arrived before ``granted`` and would take any child it takes still waits."""
        order, kind = pool.arrivals[granted]
        suspect = granted.principal in pool.d.suspects
        for other in pool.d.queue:
            before, other_kind = pool.arrivals[other]
            alike = other.principal == granted.principal or (other.principal in pool.d.suspects) == suspect
            assert not (before < order and other_kind == kind and alike), (
                f"request {order} ({kind}, {granted.principal}) overtook request {before} ({other.principal})"
            )

    def leave(self, pool: PoolModel, ticket: Ticket[Kid]) -> None:
        pool.tickets.remove(ticket)
        self.apply(pool, pool.d.leave(ticket, self.now, pool.room))

    @rule(n=POOLS, principal=PRINCIPALS, kind=KINDS)
    def arrive(self, n: int, principal: str, kind: str) -> None:
        pool = self.pools[n]
        method, tool = CALLS[kind]
        ticket = pool.d.ticket(principal, method, tool, None, self.now)
        self.arrived += 1
        pool.arrivals[ticket] = (self.arrived, kind)
        pool.tickets.append(ticket)
        self.try_ticket(pool, ticket)

    @rule(n=POOLS, principal=PRINCIPALS, kind=KINDS)
    def arrive_at_once(self, n: int, principal: str, kind: str) -> None:
        """As ``Pool.lease`` arrives: granted without a ticket when none waits
        (``acquire_now``), else with its ticket, as ``arrive``."""
        pool = self.pools[n]
        method, tool = CALLS[kind]
        parked_before = pool.d.parked(principal)
        try:
            lease = pool.d.acquire_now(principal, method, tool, None, self.now)
        except GatewayError:
            return
        if lease is None:
            self.arrive(n, principal, kind)
            return
        assert not pool.tickets, "granted at once while a request waits"
        event("granted at once")
        self.arrived += 1
        self.assert_fit(lease, parked_before)
        pool.leases.append(lease)

    @precondition(lambda self: any(pool.tickets for pool in self.pools))
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        """A waiter's own try at any moment (its deadline, say): it must not overtake either."""
        pool = data.draw(st.sampled_from([pool for pool in self.pools if pool.tickets]))
        self.try_ticket(pool, data.draw(st.sampled_from(pool.tickets)))

    @precondition(lambda self: any(pool.tickets for pool in self.pools))
    @rule(data=st.data())
    def give_up(self, data: st.DataObject) -> None:
        pool = data.draw(st.sampled_from([pool for pool in self.pools if pool.tickets]))
        self.leave(pool, data.draw(st.sampled_from(pool.tickets)))

    @precondition(lambda self: any(pool.starting for pool in self.pools))
    @rule(data=st.data())
    def child_ready(self, data: st.DataObject) -> None:
        pool = data.draw(st.sampled_from([pool for pool in self.pools if pool.starting]))
        member = data.draw(st.sampled_from(pool.starting))
        pool.starting.remove(member)
        self.pids += 1
        self.apply(pool, child_up(pool.d, member, Kid(self.pids, last_output=self.now), self.now, pool.room))

    def leases_where(self, asking: bool) -> list[tuple[PoolModel, Lease[Kid]]]:
        return [(pool, lease) for pool in self.pools for lease in pool.leases if lease.asking == asking]

    @precondition(lambda self: self.leases_where(asking=True))
    @rule(data=st.data())
    def child_asks(self, data: st.DataObject) -> None:
        pool, lease = data.draw(st.sampled_from(self.leases_where(asking=True)))
        note(pool.d, lease, open_questions=1, has_asked=True)  # its ``ChildFacts``, where they change
        self.apply(pool, pool.d.changed(self.now, pool.room))  # the child's ``Changed``

    @precondition(lambda self: self.leases_where(asking=False))
    @rule(data=st.data())
    def quiet_tool_asks_after_all(self, data: st.DataObject) -> None:
        """Held as ambiguous, or its own: open until the child's last lease ends."""
        pool, lease = data.draw(st.sampled_from(self.leases_where(asking=False)))
        note(pool.d, lease, open_questions=1)
        self.apply(pool, pool.d.changed(self.now, pool.room))

    @precondition(lambda self: any(pool.leases for pool in self.pools))
    @rule(data=st.data())
    def lease_ends(self, data: st.DataObject) -> None:
        pool = data.draw(st.sampled_from([pool for pool in self.pools if pool.leases]))
        lease = data.draw(st.sampled_from(pool.leases))
        pool.leases.remove(lease)
        if lease.asking or not any(other.member is lease.member for other in pool.leases):
            note(pool.d, lease, open_questions=0)  # its question ends with it
        self.apply(pool, pool.d.release(lease, self.now, pool.room))
        self.budget_changed()

    @precondition(lambda self: any(m.child is not None for pool in self.pools for m in pool.d.members))
    @rule(data=st.data(), crash=st.booleans())
    def child_exits(self, data: st.DataObject, crash: bool) -> None:
        pool, member = data.draw(
            st.sampled_from([(pool, m) for pool in self.pools for m in pool.d.members if m.child is not None])
        )
        note(pool.d, member, alive=False)  # its death comes before the failures it causes
        member.note_death()  # (the pool's exit watch)
        for lease in [lease for lease in pool.leases if lease.member is member]:
            pool.leases.remove(lease)
            self.apply(pool, pool.d.release(lease, self.now, pool.room))
        error = GatewayError("child exited") if crash else None
        self.apply(pool, pool.d.exited(member, error, self.now, pool.room))
        self.budget_changed()

    @precondition(lambda self: any(pool.starting for pool in self.pools))
    @rule(n=POOLS)
    def start_fails(self, n: int) -> None:
        pool = self.pools[n]
        if pool.starting:
            member = pool.starting.pop(0)
            self.apply(pool, pool.d.exited(member, GatewayError("cannot start"), self.now, pool.room))
            self.budget_changed()

    def live_children(self) -> list[tuple[PoolModel, Kid]]:
        return [(pool, m.child) for pool in self.pools for m in pool.d.members if m.child is not None and m.is_live]

    @precondition(lambda self: self.live_children())
    @rule(data=st.data(), flowing=st.booleans())
    def stdin_stalls_or_flows(self, data: st.DataObject, flowing: bool) -> None:
        """A write to a child's stdin starts waiting for the pipe, or goes through; the next
        ticks route around the child while it waits past the notice."""
        _, child = data.draw(st.sampled_from(self.live_children()))
        child.stdin_waiting_since = None if flowing else self.now

    @rule(seconds=st.floats(min_value=0.0, max_value=400.0))
    def tick(self, seconds: float) -> None:
        self.now += seconds
        for pool in self.pools:
            self.apply(pool, tick(pool.d, self.now, pool.room))
            self.apply(pool, pool.d.restart_due(self.now, pool.room))
            if any(m.stalled for m in pool.d.members):
                event("a child whose stdin stalled routed around")
        self.budget_changed()  # a child may have retired (``Pool._room_may_have_freed``)

    @invariant()
    def no_room_is_left_while_a_request_waits_for_it(self) -> None:
        """Room that frees goes to the requests the cap held back at once, before any other."""
        if self.budget.in_service() < CAPACITY:
            for pool in self.pools:
                assert pool.d.held_back == 0, "room left free while a request waits for it"
        for pool in self.pools:
            assert pool.d.held_back == sum(ticket.blocked for ticket in pool.tickets)

    @invariant()
    def within_the_budget(self) -> None:
        assert self.budget.in_service() <= CAPACITY

    @invariant()
    def every_decided_request_was_woken(self) -> None:
        for pool in self.pools:
            assert all(ticket.queued for ticket in pool.tickets)
            assert list(pool.d.queue) == pool.tickets  # in arrival order

    @invariant()
    def bounded(self) -> None:
        for pool in self.pools:
            assert pool.d.counted() <= max(BOUND, pool.d.settings.min_size)
            stalled = sum(m.stalled for m in pool.d.members)
            assert len(pool.d.members) <= max(BOUND, pool.d.settings.min_size) + stalled

    @invariant()
    def one_asker_per_child(self) -> None:
        for pool in self.pools:
            for member in pool.d.members:
                assert member.asking_leases <= 1

    @invariant()
    def leases_are_counted_once(self) -> None:
        for pool in self.pools:
            d = pool.d
            for member in d.members:
                mine = [lease for lease in pool.leases if lease.member is member]
                assert member.leases == len(mine)
                assert member.asking_leases == sum(lease.asking for lease in mine)
                assert sum(member.principals.values()) == len(mine)
                assert sum(member.askers.values()) == member.asking_leases
            assert d.waiting == len(pool.tickets)
            assert d.unplaced_askers == sum(t.unplaced for t in pool.tickets)
            assert 0 <= d.unplaced_askers <= d.waiting


DispatchMachine.TestCase.settings = settings(max_examples=400, stateful_step_count=30, deadline=None)
test_dispatcher_invariants = DispatchMachine.TestCase
