"""One exchange as its steps see it, stretch by stretch, and the shape of a step (``Step``, ``Plan``).

``gateway.relay.steps`` lists the steps in order; ``gateway.relay.exchange`` runs them. What
each stretch of an exchange works on is a value made when what it holds exists, so that no
step can read what is not there yet (mypy proves it; there is no unset attribute to read):

- ``Turn``: the request as its client sent it, immutable: the request, its ``ClientContext``,
  its HTTP headers and its ``Plan``. A step that replaces the request (without the roots
  round's params, with a task's progressToken) makes a new ``Turn``.
- ``Admission``: the steps before the lease, and what they learn there: the turn (replaced when
  they replace the request), the roots set its children are given, the roots round's retry.
- ``Leased``: from the lease on, the steps on the child: the turn with its pool, child,
  ``ChildInfo``, tool key and the ``Holdings`` that own the lease (and, once it is opened, the
  child exchange).
- ``Running``: a call whose child exchange has begun, as ``Relay.run`` drives it (the ``Call``
  a parked round or a task takes over): the turn, the child, its exchange and holdings, and
  what the run keeps on the way (its rounds, the child's reply and the client's final message).

The steps get their collaborators directly (``Collaborators``: the router, the parked calls,
the task store, the tool catalog, the shared settings, and the relay whose loops run a call
on), never through the exchange's values.

A step is for the client eras and the methods it names (``Step.eras``, ``Step.methods``:
decided once, at import, into a ``Plan`` per era and method; a step on the child or its reply
also for the child eras it names, ``child_eras``: the plan holds those stretches by child era)
and, where that is not all,
when its predicate holds (``Step.when``, over its stretch's value); its action (``Step.act``)
either lets the exchange go on (it noted what it learned, or checked something and raised)
or returns the client's answer (``Emissions``: the events to yield). An answer ends the
exchange unless the step says otherwise (``ends``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Generic, NamedTuple, TypeVar

from gateway.protocol.handshake import ChildInfo
from gateway.protocol.jsonrpc import JsonObject, Reply, Request
from gateway.protocol.outcome import Rejection
from gateway.protocol.roots import Roots
from gateway.protocol.versions import Era
from gateway.relay.client import ClientContext
from gateway.relay.events import Emitted
from gateway.relay.spans import ChildSpan
from gateway.relay.suspensions import Call, Holdings, Suspensions
from gateway.stdio.child import StdioChild
from gateway.stdio.exchange import Exchange
from gateway.stdio.pool import Pool

if TYPE_CHECKING:
    from gateway.relay.catalog import Known, ToolCatalog
    from gateway.relay.exchange import Relay
    from gateway.relay.router import Router
    from gateway.relay.session_subscriptions import SessionSubscriptions
    from gateway.relay.shared_settings import SharedSettings
    from gateway.relay.tasks import TaskStore

Emissions = AsyncGenerator[Emitted, None]
"""What a step answers the client: events, the last of them the ``Final`` (unless the step goes on)."""


class Turn:
    """One request as its steps see it (see the module doc): never changed once made."""

    __slots__ = ("client", "headers", "plan", "request")

    def __init__(self, request: Request, client: ClientContext, headers: Mapping[str, str] | None, plan: Plan) -> None:
        self.request: Final = request
        self.client: Final = client
        self.headers: Final = headers  # None: not over HTTP (a task's run, a round's retry)
        self.plan: Final = plan

    def with_request(self, request: Request) -> Turn:
        """This turn with ``request`` instead (the same method: the same plan)."""
        return Turn(request, self.client, self.headers, self.plan)


class Admission:
    """The steps before the lease (see the module doc): the turn, and what they learn about it."""

    __slots__ = ("roots", "round_retry", "round_roots", "turn")

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.roots: Roots | None = None  # the client's roots set, when its call runs on children given it
        self.round_retry = False  # the retry of the gateway's own roots round (client_roots), not a URL round's
        self.round_roots: Roots | Rejection | None = None  # what that retry answered (None: nothing)


class Leased:
    """The steps on the child, before the child exchange (see the module doc)."""

    __slots__ = ("bridged", "child", "child_span", "info", "known", "pool", "stack", "tool", "turn")

    def __init__(
        self, turn: Turn, pool: Pool, tool: str | None, child: StdioChild, info: ChildInfo, stack: Holdings
    ) -> None:
        self.turn: Final = turn
        self.pool: Final = pool
        self.tool: Final = tool  # the lease's and the child's (attribution.tool_key)
        self.child: Final = child
        self.info: Final = info
        self.stack: Final = stack  # the lease, then the child exchange too (steps.open_call)
        # Sent to its legacy child task-augmented (True: steps.ask_child_for_task, task_if_required),
        # or without the ``task`` its session sent (None: a tool its child runs only plainly).
        self.bridged: bool | None = False
        self.child_span: ChildSpan | None = None  # the child exchange's, when the request is traced
        # The called tool as its child's list has it (``ToolCatalog.known``), once the
        # ``param_headers`` step looked it up: the steps after it read it here, not again.
        self.known: Known | None = None


class Running(Call):
    """A call whose child exchange has begun, as ``Relay.run`` drives it (see the module doc)."""

    __slots__ = ("child_span", "final", "info", "reply", "resumed", "rounds", "task_at_retry", "turn")

    def __init__(
        self,
        turn: Turn,
        child: StdioChild,
        info: ChildInfo,
        ex: Exchange,
        stack: Holdings,
        runs_as_task: bool = False,
        child_span: ChildSpan | None = None,
    ) -> None:
        # Call's fields set here, not through its __init__: one call less per exchange.
        self.child, self.ex, self.stack, self.runs_as_task = child, ex, stack, runs_as_task
        self.turn: Final = turn
        self.info: Final = info
        self.child_span: Final = child_span
        self.resumed = False  # a parked call resumed by its retry
        self.rounds = 0  # a modern child's input_required rounds so far (input_rounds)
        self.task_at_retry = False  # may become a task, asked first: a task at its round's retry (steps.start_task)
        self.reply: Reply | None = None  # the child's
        self.final: JsonObject | None = None  # the client's, once translated

    @classmethod
    def on(cls, call: Call, turn: Turn) -> Running:
        """``turn`` on ``call`` (a parked call resumed, a task's, a child's retry)."""
        info = call.child.info
        assert info is not None  # a call's child has been through its handshake
        return cls(turn, call.child, info, call.ex, call.stack, call.runs_as_task)


@dataclass(frozen=True, slots=True)
class Collaborators:
    """What the steps work with, given to each step directly (made once per ``Relay``)."""

    router: Router
    suspensions: Suspensions
    tasks: TaskStore
    catalog: ToolCatalog
    settings: SharedSettings
    relay: Relay  # whose loops run a call on (``Relay.run``, ``Relay.next_round``), and which a task's run drives
    session_subscriptions: SessionSubscriptions | None = None  # legacy sessions' resources/subscribe, counted


On = TypeVar("On", Admission, Leased)
"""What a step works on: before the lease an ``Admission``, on the child a ``Leased``."""
Predicate = Callable[[Collaborators, On], bool]
Act = Callable[[Collaborators, On], Awaitable[Emissions | None]]
ReplyPredicate = Callable[[Collaborators, Running], bool]
ReplyAct = Callable[[Collaborators, Running], Emissions | None]
"""A step on the child's reply: it works on ``Running.reply`` / ``Running.final`` without waiting."""


class Step(NamedTuple, Generic[On]):
    """One step of an exchange: for which requests, when, and what it does."""

    name: str
    eras: frozenset[Era]
    methods: frozenset[str] | None  # None: every method
    when: Predicate[On] | None  # None: whenever the era and method fit
    act: Act[On]
    ends: bool = True  # whether its answer is the exchange's last
    child_eras: frozenset[Era] | None = None  # on the child: the child eras it is for (None: every one)


class ReplyStep(NamedTuple):
    """One step on the child's reply (its answer always ends the exchange)."""

    name: str
    eras: frozenset[Era]
    methods: frozenset[str] | None
    when: ReplyPredicate | None
    act: ReplyAct
    child_eras: frozenset[Era] | None = None  # the child eras it is for (None: every one)


Stage = tuple[Predicate[On] | None, Act[On], bool]
"""A step as a plan holds it: its predicate, its action, whether its answer ends the exchange."""
ReplyStage = tuple[ReplyPredicate | None, ReplyAct]


class Plan(NamedTuple):
    """The steps for one client era and method, in order, in the exchange's three stretches;
    on the child and on its reply, by the child's era (known once a child is leased)."""

    before_child: tuple[Stage[Admission], ...]
    on_child: Mapping[Era, tuple[Stage[Leased], ...]]
    on_reply: Mapping[Era, tuple[ReplyStage, ...]]
