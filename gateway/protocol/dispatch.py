"""A pool's dispatcher: who gets which child, when children start and stop, pure.

``gateway.stdio.pool`` owns the task group, the waits and the processes; it tells this machine
what happened (a request arrived or gave up, a lease ended, a child started, exited, or its
facts changed, the global budget freed room) with the time now, and carries out the actions
it returns (``gateway.protocol.dispatchstate``: ``StartChild``, ``StopChild``, ``EvictChild``,
``CheckLiveness``, ``RestartAfter``, ``Wake``, ``Lost``, ``ReleaseParked``). Decisions are synchronous, so nothing
can interleave a check and its update; a decision changes nothing outside this pool (another
pool's child is evicted by the edge, as ``EvictChild``). It decides from what it was told and
never reads a child: a child's ``ChildProfile`` comes with ``started``, its ``ChildFacts``
(questions open, whether it has asked, whether it lives) with ``noted`` whenever they change
(``childsession`` rule 8), its counters as a ``Reading`` with each ``maintain`` tick; each
member keeps its copy (``dispatchstate.Member``).

Rules:

0. **Served in arrival order.** A request gets a ``Ticket`` and joins the pool's queue. Every
   event that can free a child for a waiter (``release``, ``started``, ``exited``, ``changed``)
   places the waiting tickets in arrival order (``_serve``): each is granted the child rules 1–3
   pick for it, or may start one (rule 4). So a child that frees up goes to the first waiter it
   can serve, never to a request that arrives after it, and a request that arrives takes a child
   at once only when no waiter could take it (a quiet call beside a question an asker must not
   join: rules 2, 3). A grant or a failure decided while a ticket waits is kept on the ticket and
   wakes its request alone (``Wake(ticket)``); nobody else looks again. With no ticket waiting,
   a request's first try is decided before its ticket is made (``acquire_now``): the same rules,
   and the ticket only when it must wait.
1. **Pick** (``try_acquire``): a request leases the live child with the fewest leases that has
   room (below ``max_in_flight``, 0 = unlimited; not running a crash suspect alone), preferring
   the child a legacy session already uses (it waits for that child rather than move, unless
   only a question holds it: then a call that may ask runs elsewhere, for this call only).
2. **Quiet calls pass questions.** A call that cannot ask (``attribution.may_ask`` is false:
   lists, ``ping``, listens; or, on a legacy child, a tool learned quiet, attribution rule 5)
   may join any live child with room, also one whose other calls are asking or parked.
3. **Askers need a child to themselves** (``attribution.is_exclusive``): a call that may ask
   is not given a child on which a question is open, nor, when the server asks, one that runs
   another asker. So each question has exactly one call it can belong to.
4. **Growth.** With no child to take, a new one is started if the pool is below its bound and
   not in a restart backoff: ``max_size`` for quiet calls (one start at a time), and for
   askers ``asking_bound`` (``max(max_size, asking_max)``; one start per waiting asker, at most
   ``MAX_CONCURRENT_STARTS`` at once). Every start on demand needs room in the gateway's child
   budget (``Room``): free room, or another pool's idle child to evict (``EvictChild``); with
   neither the request waits like a saturated one, **held back** (``blocked_since``: when the
   first such request of the pool arrived; the budget serves the pools in that order when room
   frees, so across pools too the waiter that arrived first gets it). Otherwise the request waits until its
   ``Wake``, at most ``queue_timeout`` (``STARTUP_WAIT`` while no child is up yet), and then
   fails with 503 + ``Retry-After``.
5. **A question costs its asker.** A principal with ``max_parked_per_principal`` calls holding
   an unanswered question on the pool's children (a parked MRTR call, a legacy client's open
   ask) gets 429 for its next asking call, before any child is taken; its quiet calls and
   everyone else's go on. A principal a crash is charged to is throttled by the ``Ledger``
   (429) and is a **suspect**: each of its calls runs alone until one ends with the child
   alive (``gateway.stdio.crashes``). **Fair share**: when a waiting asker finds the pool at its
   asking bound and every live child holding an unanswered question, and one principal holds
   more of those than the asker's principal plus one, that principal's oldest parked call is
   ended for it (``ReleaseParked``, once per request; its child then serves the queue in
   order). Abandoned questions of some principals cannot starve another's asking calls.
6. **Release**: a request gives its lease back; a child past ``max_requests`` leases is retired;
   a retiring child with no lease is stopped; the waiters are served (rule 0).
7. **Maintenance** (``maintain``, once a tick): a child whose stdin write has waited
   ``stall_notice`` (``STDIN_STALL_NOTICE``) is **stalled**: it gets no new request and is not
   counted against the pool's bounds, so its waiters take or start another child (and a
   minimum is restored) until its write goes through (then it rejoins, unless the pool is at
   its bound for askers without it: it stays out and retires when idle); children above ``min_size`` idle for
   ``idle_timeout`` retire; a minimum the budget held back is started; a child older than
   ``max_age`` retires; a child with requests pending, none waiting for a client, and silent
   for ``stall_timeout`` is stopped at once; an idle child unchecked for ``liveness_interval``
   is checked (``CheckLiveness``), and stopped when the check fails (``liveness_failed``).
8. **Supervision** (``exited``): ``gateway.protocol.supervision`` classifies the exit; a child
   that died serving charges the principals in flight (``Ledger.record``) and makes them
   suspects; the next start waits out the backoff; a replacement is started (``RestartAfter``)
   when the pool is below ``min_size`` or requests wait. During a backoff with no child at all,
   requests fail at once with the last error. A gateway fault (``ChildFaultError``) charges
   nobody and is restarted after the backoff (supervision rule 6).

Imports: standard library, ``gateway.errors`` and ``gateway.protocol`` only; no I/O, no clock.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping
from typing import Final, Generic

from gateway.errors import ChildFaultError, ClientThrottledError, GatewayError, GatewayUnavailableError
from gateway.protocol import attribution
from gateway.protocol.childactions import ChildFacts
from gateway.protocol.dispatchstate import (
    MAX_CONCURRENT_STARTS,
    C,
    CheckLiveness,
    ChildProfile,
    Decision,
    EvictChild,
    Lease,
    Ledger,
    Lost,
    Member,
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
from gateway.protocol.redaction import redact_text
from gateway.protocol.supervision import ExitKind, Supervision

log = logging.getLogger("gateway.pool")

STARTUP_WAIT: Final = 120.0
"""How long a request waits while the first child is still starting (npx cold starts)."""
SUSPECT_MEMORY: Final = 60.0
"""Seconds a crash keeps its principals suspects (the crash ledger's window)."""
PARKED_RETRY_AFTER: Final = 5
"""Seconds a principal at its cap of parked questions is told to wait (answering one frees it)."""


class Dispatcher(Generic[C]):
    """The bookkeeping and rules of one pool (see the module docstring)."""

    def __init__(
        self, settings: PoolSettings, label: str, *, crashes: Ledger | None = None, server: str | None = None
    ) -> None:
        """``label``: the pool's name; ``server``: its server's (by default the label). Both are
        fields of the pool's log records (``log_fields``)."""
        self.settings = settings
        self.label = label
        self.log_fields: dict[str, object] = {"server": server or label, "pool": label}
        self.crashes = crashes
        self.members: list[Member[C]] = []
        self.supervision = Supervision()
        self.last_error: GatewayError | None = None
        self.suspects: dict[str, float] = {}  # principal → when a crash was last charged to it
        self.learned_asks = False  # a child of this pool asked during a request (attribution rule 3)
        self.tools = attribution.ToolLearning()  # which tools ask, which are quiet (rule 5)
        self.queue: dict[Ticket[C], None] = {}  # waiting tickets, in arrival order (rule 0)
        self.held_back = 0  # waiting tickets the global child budget held a start back for (rule 4)
        self.unplaced_askers = 0
        self.next_start = 0.0

    # -- queries ------------------------------------------------------------------------

    def children(self) -> list[C]:
        return [m.child for m in self.members if m.is_live and m.child is not None]

    @property
    def waiting(self) -> int:
        """Requests waiting for a child."""
        return len(self.queue)

    def blocked_since(self) -> float:
        """When the first waiting request the global budget held a start back for arrived (inf:
        none waits for room). The budget gives room to the pools in this order (rule 4)."""
        if not self.held_back:
            return math.inf
        return next(ticket.arrived for ticket in self.queue if ticket.blocked)

    def starting(self) -> int:
        """Members whose child is starting."""
        return sum(1 for m in self.members if m.is_starting)

    def may_start(self) -> bool:
        """No child is up yet, and one may still come (none failed to start, one is starting)."""
        if self.last_error is not None or not self.members:
            return False
        for member in self.members:  # noqa: SIM110 - per request (``Pool.is_starting``): no list, no generator
            # ``member.is_live`` spelled out: a property costs a call.
            if member.alive and not member.retiring and member.child is not None:
                return False
        return True

    def is_exclusive(self, member: Member[C], tool: str | None = None) -> bool:
        """Whether an asking request (for ``tool``) needs ``member``'s child to itself (attribution rules 3, 5)."""
        return self._exclusive(member, self.tools.is_quiet(tool))

    def _exclusive(self, member: Member[C], quiet_tool: bool) -> bool:
        """``is_exclusive`` for a request whose tool is known quiet (``quiet_tool``), or not."""
        legacy = member.legacy
        return attribution.is_exclusive(
            self.settings.child_asks,
            learned=self.learned_asks,
            legacy=legacy,
            declared=member.declared,
            quiet=legacy and quiet_tool,  # (only a legacy child's quiet tools count)
        )

    def has_room(self, member: Member[C], asks: bool, quiet_tool: bool = False) -> bool:
        """Whether ``member`` takes a request now: one that may ask (``asks``: ``attribution.may_ask``
        of its method), of a tool known quiet (``quiet_tool``), or neither. Told per request,
        not worked out again for each member it is tried on."""
        limit = self.settings.max_in_flight
        # ``member.is_live`` spelled out: this runs for each member tried, and a property costs a call.
        if not member.alive or member.retiring or member.stalled or member.exclusive:
            return False
        if limit != 0 and member.leases >= limit:
            return False
        if not asks:  # rule 2: lists, ping, listens
            return True
        quiet = quiet_tool and not self._exclusive(member, True)  # rule 2: a quiet tool
        exclusive = member.asking_leases > 0 and not quiet and self._exclusive(member, quiet_tool)
        return attribution.admits(  # rules 2, 3
            member.asking_leases, member.questions, asks=True, exclusive=exclusive, quiet=quiet
        )

    def counted(self) -> int:
        """Members counted against the pool's bounds: a child whose stdin stalled is not (rule 7)."""
        return sum(1 for m in self.members if not m.stalled)

    def parked(self, principal: str) -> int:
        """Calls of ``principal`` holding a question its client has not answered (rule 5)."""
        held = 0
        for member in self.members:
            if principal in member.askers and member.holds_questions():
                held += member.askers[principal]
        return held

    # -- acquire and release ------------------------------------------------------------

    def acquire_now(
        self, principal: str, method: str | None, tool: str | None, prefer: C | None, now: float
    ) -> Lease[C] | None:
        """A request arrived and no request waits: rules 1–5 for it at once, as its ticket's
        first try would decide them (with the queue empty, no waiter could take a child first,
        rule 0), without making the ticket. The lease, or None when it would wait (then its
        ticket is made and tried: ``ticket``, ``try_acquire``). Raises what that try raises."""
        if self.queue:
            return None
        asks = method in attribution.ASKING_METHODS  # ``attribution.may_ask``, spelled out: one call less
        # ``self.tools.is_quiet(tool)`` spelled out: one call less per request.
        quiet_tool = asks and tool is not None and tool in self.tools.quiet
        self._admit(principal, asks and not quiet_tool, now)  # (the ticket's ``asker``)
        alone = principal in self.suspects
        member = self._pick(prefer, asks, quiet_tool, alone)
        if member is None:
            return None
        return self._grant(member, principal, asks, quiet_tool, alone, now)

    def ticket(self, principal: str, method: str | None, tool: str | None, prefer: C | None, now: float) -> Ticket[C]:
        """A request arrived: its ticket joins the queue (rule 0), to be tried at once."""
        asker = attribution.may_ask(method) and not self.tools.is_quiet(tool)
        ticket = Ticket(principal, method, tool, prefer, now, asker)
        self.queue[ticket] = None
        return ticket

    def leave(self, ticket: Ticket[C], now: float, room: Room) -> list[PoolAction[C]]:
        """The ticket's request has its child, failed or went away. A lease granted to it that
        its try never took (it went away meanwhile) is given back, to the next waiter."""
        if ticket.queued:
            self._dequeue(ticket)
        lease, ticket.lease = ticket.lease, None
        return self.release(lease, now, room) if lease is not None else []

    def _dequeue(self, ticket: Ticket[C]) -> None:
        del self.queue[ticket]
        ticket.queued = False
        if ticket.blocked:
            self.held_back -= 1
        if ticket.unplaced:
            ticket.unplaced = False
            self.unplaced_askers -= 1

    def try_acquire(self, ticket: Ticket[C], now: float, room: Room) -> Decision[C]:
        """The ticket's own try: at its arrival, when woken, at its deadline. Takes the lease or
        raises the error decided while it waited; else rules 1–5 for it alone (the waiters
        before it could take no child at the last event, rule 0). Raises ``ClientThrottledError``
        (429) or the error to fail with (503, or the last start error during a backoff)."""
        if ticket.queued:
            actions: list[PoolAction[C]] = []
            self._place(ticket, now, room, actions)
            if ticket.queued:
                return Waiting(ticket.deadline, ticket.blocked, tuple(actions))
        if ticket.error is not None:
            raise ticket.error
        lease, ticket.lease = ticket.lease, None
        assert lease is not None, "a ticket left the queue without a lease or an error"
        return lease

    def changed(self, now: float, room: Room) -> list[PoolAction[C]]:
        """A child's questions opened or closed, or the global budget has room again: rule 0."""
        return self._serve(now, room)

    def _serve(self, now: float, room: Room) -> list[PoolAction[C]]:
        """Rule 0: place every waiting ticket in arrival order; wake those decided, and those
        whose deadline came nearer."""
        actions: list[PoolAction[C]] = []
        for ticket in list(self.queue):
            deadline = ticket.deadline
            try:
                self._place(ticket, now, room, actions)
            except GatewayError as exc:
                self._dequeue(ticket)
                ticket.error = exc
            if not ticket.queued or ticket.deadline < deadline:
                actions.append(Wake(ticket))
        return actions

    def _place(self, ticket: Ticket[C], now: float, room: Room, actions: list[PoolAction[C]]) -> None:
        """Rules 1–5 for one waiting ticket: grant it a lease (it leaves the queue), or start a
        child for it and set how long it waits (``deadline``, ``blocked``); raise what it fails
        with. It raises before it adds to ``actions``, so a failure loses no action."""
        principal = ticket.principal
        self._admit(principal, ticket.asker, now)
        alone = principal in self.suspects
        asks = attribution.may_ask(ticket.method)
        quiet_tool = asks and self.tools.is_quiet(ticket.tool)  # now: learnt while it waited, maybe
        member = self._pick(ticket.prefer, asks, quiet_tool, alone)
        if member is not None:
            self._dequeue(ticket)
            ticket.lease = self._grant(member, principal, asks, quiet_tool, alone, now)
            return
        starting = self.starting()
        children = self.children()
        # An asker that the live children would each take alone: the pool grows for it (rule 4).
        alone_needed = ticket.asker and any(self.is_exclusive(m, ticket.tool) for m in self.members if m.is_live)
        if alone_needed and not ticket.unplaced:
            ticket.unplaced = True
            self.unplaced_askers += 1
        if not children and not starting and self.last_error is not None and now < self.next_start:
            # Fail fast during the backoff: the command does not start (or keeps dying). After
            # it a request may try again, even when failing: a fixed command must recover.
            raise self.last_error
        if alone_needed:
            bound, may = self.settings.asking_bound, starting < min(self.unplaced_askers, MAX_CONCURRENT_STARTS)
        else:
            bound, may = self.settings.max_size, not starting
        # Expired before any start: a start for a request that fails now would serve nobody.
        if now >= ticket.arrived + self._wait(children, ticket.blocked):
            if ticket.blocked and not children:
                raise room.full_error(self.label)
            raise self._saturated(bound)
        blocked = False  # by the global child cap
        if may and self.counted() < bound and now >= self.next_start:
            if self._claim(room, actions):
                actions.append(self._start(now))
            else:
                blocked = True
        elif alone_needed and not ticket.reclaimed and self.counted() >= bound:
            over = self._over_fair_share(ticket.principal)
            if over is not None:  # rule 5, fair share: the askers' children hold others' questions
                ticket.reclaimed = True
                actions.append(ReleaseParked(over))
        if blocked != ticket.blocked:
            ticket.blocked = blocked
            self.held_back += 1 if blocked else -1
        ticket.deadline = ticket.arrived + self._wait(children, ticket.blocked)

    def _admit(self, principal: str, asker: bool, now: float) -> None:
        """Rule 5, before any child is taken: raises 429 for a principal the crash ledger
        throttles, or for an asker (``asker``) whose principal is at its cap of parked calls."""
        if self.crashes is not None:
            self.crashes.check(principal, now, self.label)
        cap = self.settings.max_parked_per_principal
        if asker and cap and (held := self.parked(principal)) >= cap:
            raise ClientThrottledError(
                f"{self.label}: {principal} already holds {held} calls waiting for its answers "
                f"(from {cap} on, its next call that may ask is refused: --max-parked-per-principal); "
                "answer or cancel one, then retry",
                retry_after=PARKED_RETRY_AFTER,
                server=self.label,
                principal=principal,
            )

    def _over_fair_share(self, principal: str) -> str | None:
        """Rule 5's fair share: when every live child holds a question its client has not answered, the
        principal holding the most of them, if that is more than ``principal`` holds plus one
        (ending one of its calls leaves it at least as many as ``principal`` then holds)."""
        live = [m for m in self.members if m.is_live]
        if not live or not all(m.holds_questions() for m in live):
            return None
        held: Counter[str] = Counter()
        for member in live:
            held.update(member.askers)
        if not held:
            return None
        top, most = held.most_common(1)[0]
        return top if top != principal and most > held[principal] + 1 else None

    def _wait(self, children: list[C], blocked: bool) -> float:
        return STARTUP_WAIT if not children and not blocked else self.settings.queue_timeout

    def _claim(self, room: Room, actions: list[PoolAction[C]]) -> bool:
        """Room in the global budget for one more start: free, or made by evicting another
        pool's idle child (an ``EvictChild`` added to ``actions``; never one already chosen)."""
        if room.has_room():
            return True
        victim = room.victim([a.victim for a in actions if isinstance(a, EvictChild)])
        if victim is None:
            return False
        actions.append(EvictChild(victim))
        return True

    def _pick(self, prefer: C | None, asks: bool, quiet_tool: bool, alone: bool) -> Member[C] | None:
        """For a request that may ask (``asks``), of a tool known quiet (``quiet_tool``), or
        neither; ``alone``: only a child with no lease will do (a crash suspect's request)."""
        if prefer is not None:
            for member in self.members:
                if member.child is prefer and member.is_live:
                    if alone and member.leases:
                        return None
                    if self.has_room(member, asks, quiet_tool):
                        return member
                    if not self.has_room(member, False):
                        return None
                    break  # only a question holds it: this call may run elsewhere
        best: Member[C] | None = None  # the first with the fewest leases (no list, no key function)
        for member in self.members:
            fewer = best is None or member.leases < best.leases
            if fewer and not (alone and member.leases) and self.has_room(member, asks, quiet_tool):
                best = member
                if not member.leases:
                    break  # none has fewer
        return best

    def _grant(
        self, member: Member[C], principal: str, asks: bool, quiet_tool: bool, alone: bool, now: float
    ) -> Lease[C]:
        asking = asks and self._exclusive(member, quiet_tool)
        member.leases += 1
        member.served += 1
        member.last_used = now
        principals = member.principals
        principals[principal] = principals.get(principal, 0) + 1
        if asking:
            member.asking_leases += 1
            askers = member.askers
            askers[principal] = askers.get(principal, 0) + 1
        member.exclusive = alone
        return Lease(member, principal, alone, asking)

    def _saturated(self, bound: int) -> GatewayUnavailableError:
        s = self.settings
        if not self.children():
            return GatewayUnavailableError(
                f"{self.label}: no child became ready within {STARTUP_WAIT:g} s (still starting)",
                retry_after=5,
                server=self.label,
            )
        limit = f"{s.max_in_flight} request(s) each" if s.max_in_flight else "no free child"
        return GatewayUnavailableError(
            f"{self.label}: all {len(self.children())} of at most {bound} children are busy ({limit}); "
            f"no slot freed within {s.queue_timeout:g} s",
            retry_after=max(1, round(s.queue_timeout)),
            server=self.label,
        )

    def release(self, lease: Lease[C], now: float, room: Room) -> list[PoolAction[C]]:
        """Rule 6: the request of ``lease`` ended."""
        member, principal = lease.member, lease.principal
        if not member.alive:
            member.note_death()  # before the lease leaves: its principal was in flight
        elif lease.alone:
            self.suspects.pop(principal, None)  # it ran alone and the child lived: cleared
        if lease.alone:
            member.exclusive = False
        member.leave(principal, lease.asking)
        member.last_used = now
        s = self.settings
        actions: list[PoolAction[C]] = []
        if s.max_requests and member.served >= s.max_requests:
            actions += self.retire(member, f"served {member.served} requests")
        elif member.retiring and member.leases == 0:
            actions.append(StopChild(member))
        if self.queue:  # the next waiter it can serve gets the child now (rule 0)
            actions += self._serve(now, room)
        return actions

    # -- children: start, retire, exit ----------------------------------------------------

    def _start(self, now: float) -> StartChild[C]:
        member: Member[C] = Member(now)
        self.members.append(member)
        return StartChild(member)

    def start_minimum(self, now: float) -> list[PoolAction[C]]:
        """The pool's first children (pre-warmed, started regardless of the budget)."""
        return [self._start(now) for _ in range(self.settings.min_size)]

    def started(
        self, member: Member[C], child: C, profile: ChildProfile, facts: ChildFacts, now: float, room: Room
    ) -> list[PoolAction[C]]:
        """``member``'s child completed its handshake (what it is: ``profile``; its facts now:
        ``facts``): the waiters are served (rule 0)."""
        member.child = child
        member.pid, member.legacy, member.declared = profile.pid, profile.legacy, profile.declared
        member.started_at = member.last_used = member.last_check = now
        self.noted(member, facts)
        if self.supervision.started():
            log.info(
                "%s: child pid %d started; no longer failing",
                self.label,
                profile.pid,
                extra={**self.log_fields, "event": "recovered", "pid": profile.pid},
            )
        self.last_error = None
        return self._serve(now, room)

    def noted(self, member: Member[C], facts: ChildFacts) -> None:
        """``member``'s child's facts changed (``childsession`` rule 8; told where they change,
        so it only copies them: a request that then waits is served on the ``changed`` that
        follows). Before its start, ``started`` brings them."""
        if member.child is None:
            return
        member.note(facts)
        if facts.has_asked and not self.learned_asks:
            self.learned_asks = True
            log.info(
                "%s: the server asks its client during requests; such requests now get a child each",
                self.label,
                extra={**self.log_fields, "event": "learned_asks"},
            )

    def retire(self, member: Member[C], why: str, *, event: str = "retire") -> list[PoolAction[C]]:
        """Take ``member`` out of service; its child stops once its last lease ends. ``event``:
        the log record's (``evict`` when another pool needs the room)."""
        if not member.retiring:
            member.retiring = True
            pid = member.pid
            fields = {**self.log_fields, "event": event, "pid": pid, "reason": why}
            log.info("%s: retiring child pid %s (%s)", self.label, pid, why, extra=fields)
        return [StopChild(member)] if member.leases == 0 else []

    def forget(self, member: Member[C]) -> None:
        """``member`` left with the pool closing: no verdict, nothing to restart."""
        if member in self.members:
            self.members.remove(member)

    def exited(self, member: Member[C], error: GatewayError | None, now: float, room: Room) -> list[PoolAction[C]]:
        """Rule 8: ``member``'s child is gone (or never started), with ``error`` if unplanned."""
        self.forget(member)
        charged = member.crashed_with or frozenset()
        started = member.child is not None
        uptime = now - member.started_at
        planned, charged_any = member.retiring, bool(charged)
        fault = isinstance(error, ChildFaultError)
        verdict = self.supervision.exited(
            planned=planned, started=started, uptime=uptime, charged=charged_any, fault=fault
        )
        actions: list[PoolAction[C]] = []
        if verdict.kind is not ExitKind.PLANNED:
            if member.child is not None:
                actions.append(Lost())
            self.last_error = error
        if verdict.kind is ExitKind.DIED_SERVING:  # restart at once; the requests' principals pay
            if self.crashes is not None:
                self.crashes.record(charged, now)
            for stale in [p for p, when in self.suspects.items() if when <= now - SUSPECT_MEMORY]:
                del self.suspects[stale]
            self.suspects.update(dict.fromkeys(charged, now))
            principals = sorted(charged)
            fields = {**self.log_fields, "event": "died_serving", "principals": principals, "delay": 0.0}
            log.warning(
                "%s: child died serving %s; restarting at once", self.label, ", ".join(principals), extra=fields
            )
        if verdict.now_failing:
            last, streak = redact_text(error.detailed) if error else "?", self.supervision.quick_failures
            fields = {**self.log_fields, "event": "failing", "quick_failures": streak, "error": last}
            log.error("%s: failing after %d quick failures; last: %s", self.label, streak, last, extra=fields)
        self.next_start = now + verdict.delay
        if len(self.members) < self.settings.min_size or self.waiting:
            actions.append(RestartAfter(verdict.delay))
        actions += self._serve(now, room)  # a start, or the last error during a backoff
        return actions

    def restart_due(self, now: float, room: Room) -> list[PoolAction[C]]:
        """A ``RestartAfter`` came due: a minimum takes free room (never evicts); waiters claim it."""
        s = self.settings
        if self.counted() < s.min_size:
            return [self._start(now)] if room.has_room() else []
        bound = s.asking_bound if self.unplaced_askers else s.max_size
        actions: list[PoolAction[C]] = []
        if self.waiting and self.counted() < bound and not self.starting() and self._claim(room, actions):
            actions.append(self._start(now))
        return actions

    # -- maintenance ------------------------------------------------------------------------

    def maintain(self, now: float, room: Room, readings: Mapping[Member[C], Reading]) -> list[PoolAction[C]]:
        """Rule 7, once a tick, with each live child's ``Reading`` taken for it."""
        s = self.settings
        actions: list[PoolAction[C]] = []
        if self._note_stalls(now, readings):  # a stalled child's waiters may take or start another now
            actions += self._serve(now, room)
        idle = [m for m in self.members if m.is_live and m.leases == 0 and now - m.last_used > s.idle_timeout]
        for member in idle[: max(0, len(self.members) - s.min_size)]:
            actions += self.retire(member, f"idle for {now - member.last_used:.0f} s")
        if (  # a minimum the global cap held back, or a stalled child's replacement
            self.counted() < s.min_size and now >= self.next_start and not self.starting() and room.has_room()
        ):
            actions.append(self._start(now))
        for member in list(self.members):
            reading = readings.get(member)
            if not member.is_live or reading is None:
                continue
            if s.max_age and now - member.started_at > s.max_age:
                actions += self.retire(member, f"older than {s.max_age:g} s")
            elif (
                s.stall_timeout
                and reading.in_flight
                and not reading.awaiting_input  # silent because a client is answering it
                and now - reading.last_output > s.stall_timeout
            ):
                self.retire(member, f"requests pending but no output for {s.stall_timeout:g} s")
                actions.append(StopChild(member))
            elif s.liveness_interval and member.leases == 0 and now - member.last_check > s.liveness_interval:
                member.last_check = now
                actions.append(CheckLiveness(member))
        return actions

    def _note_stalls(self, now: float, readings: Mapping[Member[C], Reading]) -> bool:
        """Rule 7: a live child whose stdin write has waited ``stall_notice`` seconds is stalled
        (no new request, not counted against the bounds); one whose write went through rejoins.
        Whether any changed."""
        changed = False
        for member in self.members:
            reading = readings.get(member)
            if reading is None or not member.is_live:
                continue
            since = reading.stdin_waiting_since
            stalled = since is not None and now - since >= self.settings.stall_notice
            if member.stalled and not stalled and self.counted() >= self.settings.asking_bound:
                continue  # reads again, but the pool grew in its place: it retires when idle (rule 7)
            if stalled != member.stalled:
                member.stalled, changed = stalled, True
                if stalled:
                    log.warning(
                        "%s: child pid %d has read nothing of its stdin for %.0f s; new requests go to "
                        "other children (it is stopped at the stdin stall timeout)",
                        self.label,
                        member.pid,
                        now - since if since is not None else 0.0,
                        extra={**self.log_fields, "event": "routed_around", "pid": member.pid},
                    )
                else:
                    log.info(
                        "%s: child pid %d reads its stdin again; it takes requests again",
                        self.label,
                        member.pid,
                        extra={**self.log_fields, "event": "rejoined", "pid": member.pid},
                    )
        return changed

    def liveness_failed(self, member: Member[C], problem: str) -> list[PoolAction[C]]:
        if not member.is_live:
            return []
        pid = member.pid
        fields = {**self.log_fields, "event": "liveness_failed", "pid": pid, "reason": problem}
        log.warning(
            "%s: child pid %s failed its liveness check (%s); recycling", self.label, pid, problem, extra=fields
        )
        self.retire(member, "failed liveness check")
        return [StopChild(member)]
