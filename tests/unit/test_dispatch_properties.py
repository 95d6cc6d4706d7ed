"""The pool's dispatcher under random event orders (hypothesis stateful testing).

Requests of several principals (askers, quiet tools, lists) arrive, wait, give up; children
start, ask, get answered, die, exit; leases end; maintenance ticks as the clock moves. The
dispatcher is driven as ``gateway.stdio.pool`` drives it, and after every step:

- a child never runs two askers at once, and no asker was given a child with a question open;
- a principal at its cap of parked questions was never given a child for an asker;
- the pool never holds more members than its bound for askers (nor than its minimum);
- every lease is counted once: leases, asking leases and the per-principal tables agree with
  the leases held; the waiting and unplaced counts agree with the tickets waiting;
- every ``StopChild`` names a member of the pool that is retiring or whose child must go.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gateway.errors import GatewayError
from gateway.protocol.dispatch import Dispatcher
from gateway.protocol.dispatchstate import (
    Action,
    Lease,
    Member,
    NoBudget,
    PoolSettings,
    StartChild,
    StopChild,
    Ticket,
)
from tests.unit.test_dispatch import Kid

PRINCIPALS = st.sampled_from(["alice", "bob", "carol"])
KINDS = st.sampled_from(["asker", "quiet", "list"])
CAP = 1
BOUND = 4


class DispatchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.settings = PoolSettings(min_size=1, max_size=1, asking_max=BOUND, max_parked_per_principal=CAP)
        self.d: Dispatcher[Kid] = Dispatcher(self.settings, "srv")
        self.d.tools.note_quiet("tools/call quiet")
        self.now = 0.0
        self.pids = 0
        self.leases: list[Lease[Kid]] = []
        self.tickets: list[Ticket[Kid]] = []
        self.starting: list[Member[Kid]] = []
        self.stopped: set[int] = set()  # ids of members told to stop
        self.apply(self.d.start_minimum(self.now))

    def apply(self, actions: list[Action[Kid]] | tuple[Action[Kid], ...]) -> None:
        for action in actions:
            if isinstance(action, StartChild):
                assert action.member in self.d.members
                self.starting.append(action.member)
            elif isinstance(action, StopChild):
                assert action.member in self.d.members
                self.stopped.add(id(action.member))

    def try_ticket(self, ticket: Ticket[Kid]) -> None:
        parked_before = self.d.parked(ticket.principal)
        try:
            decision = self.d.try_acquire(ticket, self.now, NoBudget())
        except GatewayError:
            self.d.leave(ticket)
            self.tickets.remove(ticket)
            return
        if isinstance(decision, Lease):
            lease = decision
            child = lease.member.child
            assert child is not None
            if lease.asking:
                assert child.open_questions == 0, "an asker joined a child with a question open"
                assert lease.member.asking_leases == 1, "two askers on one child"
                assert parked_before < CAP, "a principal past its cap got a child for an asker"
            self.d.leave(ticket)
            self.tickets.remove(ticket)
            self.leases.append(lease)
        else:
            self.apply(decision.actions)

    @rule(principal=PRINCIPALS, kind=KINDS)
    def arrive(self, principal: str, kind: str) -> None:
        method, tool = {
            "asker": ("tools/call", "tools/call ask"),
            "quiet": ("tools/call", "tools/call quiet"),
            "list": ("tools/list", None),
        }[kind]
        ticket = self.d.ticket(principal, method, tool, None, self.now)
        self.tickets.append(ticket)
        self.try_ticket(ticket)

    @precondition(lambda self: self.tickets)
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        self.try_ticket(data.draw(st.sampled_from(self.tickets)))

    @precondition(lambda self: self.tickets)
    @rule(data=st.data())
    def give_up(self, data: st.DataObject) -> None:
        ticket = data.draw(st.sampled_from(self.tickets))
        self.d.leave(ticket)
        self.tickets.remove(ticket)

    @precondition(lambda self: self.starting)
    @rule(data=st.data())
    def child_ready(self, data: st.DataObject) -> None:
        member = data.draw(st.sampled_from(self.starting))
        self.starting.remove(member)
        self.pids += 1
        self.apply(self.d.started(member, Kid(self.pids, last_output=self.now), self.now))

    @precondition(lambda self: any(lease.asking for lease in self.leases))
    @rule(data=st.data())
    def child_asks(self, data: st.DataObject) -> None:
        lease = data.draw(st.sampled_from([lease for lease in self.leases if lease.asking]))
        assert lease.member.child is not None
        lease.member.child.open_questions = 1
        lease.member.child.has_asked = True

    @precondition(lambda self: any(not lease.asking for lease in self.leases))
    @rule(data=st.data())
    def quiet_tool_asks_after_all(self, data: st.DataObject) -> None:
        """Held as ambiguous, or its own: open until the child's last lease ends."""
        lease = data.draw(st.sampled_from([lease for lease in self.leases if not lease.asking]))
        assert lease.member.child is not None
        lease.member.child.open_questions = 1

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def lease_ends(self, data: st.DataObject) -> None:
        lease = data.draw(st.sampled_from(self.leases))
        self.leases.remove(lease)
        child = lease.member.child
        assert child is not None
        if lease.asking or not any(other.member is lease.member for other in self.leases):
            child.open_questions = 0  # its question ends with it
        self.apply(self.d.release(lease, self.now))

    @precondition(lambda self: any(m.child is not None for m in self.d.members))
    @rule(data=st.data(), crash=st.booleans())
    def child_exits(self, data: st.DataObject, crash: bool) -> None:
        member = data.draw(st.sampled_from([m for m in self.d.members if m.child is not None]))
        assert member.child is not None
        member.child.alive = False
        member.note_death()
        for lease in [lease for lease in self.leases if lease.member is member]:
            self.leases.remove(lease)
            self.apply(self.d.release(lease, self.now))
        error = GatewayError("child exited") if crash else None
        self.apply(self.d.exited(member, error, self.now))

    @precondition(lambda self: self.starting)
    @rule()
    def start_fails(self) -> None:
        member = self.starting.pop(0)
        self.apply(self.d.exited(member, GatewayError("cannot start"), self.now))

    @rule(seconds=st.floats(min_value=0.0, max_value=400.0))
    def tick(self, seconds: float) -> None:
        self.now += seconds
        self.apply(self.d.maintain(self.now, NoBudget()))
        self.apply(self.d.restart_due(self.now, NoBudget()))

    @invariant()
    def bounded(self) -> None:
        assert len(self.d.members) <= max(BOUND, self.settings.min_size)

    @invariant()
    def one_asker_per_child(self) -> None:
        for member in self.d.members:
            assert member.asking_leases <= 1

    @invariant()
    def leases_are_counted_once(self) -> None:
        for member in self.d.members:
            mine = [lease for lease in self.leases if lease.member is member]
            assert member.leases == len(mine)
            assert member.asking_leases == sum(lease.asking for lease in mine)
            assert sum(member.principals.values()) == len(mine)
            assert sum(member.askers.values()) == member.asking_leases
        assert self.d.waiting == len(self.tickets)
        assert self.d.unplaced_askers == sum(t.unplaced for t in self.tickets)
        assert 0 <= self.d.unplaced_askers <= self.d.waiting


DispatchMachine.TestCase.settings = settings(max_examples=400, stateful_step_count=30, deadline=None)
test_dispatcher_invariants = DispatchMachine.TestCase
