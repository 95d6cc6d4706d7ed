"""One exchange as its steps see it: the ``Turn``, and the shape of a step (``Step``, ``Plan``).

``gateway.relay.steps`` lists the steps in order; ``gateway.relay.exchange`` runs them. A
``Turn`` is made per exchange, and it is also the ``Call`` the relay drives once the child
exchange has begun (one object per call, not two). It holds what the steps learn on the way:
the request (a step may replace it: without the roots round's params, with a task's
progressToken), the roots set its children are given, and from the lease on the pool, the
child and its ``ChildInfo``; then the child's reply and the client's final message.

A step is for the client eras and the methods it names (``Step.eras``, ``Step.methods``:
decided once, at import, into a ``Plan`` per era and method) and, where that is not all,
when its predicate holds (``Step.when``, over the turn); its action (``Step.act``) either lets
the exchange go on (it noted something on the turn, or checked something and raised) or
returns the client's answer (``Emissions``: the events to yield). An answer ends the exchange
unless the step says otherwise (``ends``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from gateway.protocol.handshake import ChildInfo
from gateway.protocol.jsonrpc import JsonObject, Reply, Request
from gateway.protocol.outcome import Rejection
from gateway.protocol.roots import Roots
from gateway.protocol.versions import Era
from gateway.relay.client import ClientContext
from gateway.relay.events import Emitted
from gateway.relay.spans import ChildSpan
from gateway.relay.suspensions import Call
from gateway.stdio.pool import Pool

if TYPE_CHECKING:
    from gateway.relay.exchange import Relay

Emissions = AsyncGenerator[Emitted, None]
"""What a step answers the client: events, the last of them the ``Final`` (unless the step goes on)."""
Predicate = Callable[["Turn"], bool]
Act = Callable[["Turn"], Awaitable[Emissions | None]]
ReplyAct = Callable[["Turn"], Emissions | None]
"""A step on the child's reply: it works on ``Turn.reply`` / ``Turn.final`` without waiting."""


class Step(NamedTuple):
    """One step of an exchange: for which requests, when, and what it does."""

    name: str
    eras: frozenset[Era]
    methods: frozenset[str] | None  # None: every method
    when: Predicate | None  # None: whenever the era and method fit
    act: Act
    ends: bool = True  # whether its answer is the exchange's last


class ReplyStep(NamedTuple):
    """One step on the child's reply (its answer always ends the exchange)."""

    name: str
    eras: frozenset[Era]
    methods: frozenset[str] | None
    when: Predicate | None
    act: ReplyAct


Stage = tuple[Predicate | None, Act, bool]
"""A step as a plan holds it: its predicate, its action, whether its answer ends the exchange."""
ReplyStage = tuple[Predicate | None, ReplyAct]


class Plan(NamedTuple):
    """The steps for one client era and method, in order, in the exchange's three stretches."""

    before_child: tuple[Stage, ...]
    on_child: tuple[Stage, ...]
    on_reply: tuple[ReplyStage, ...]


class Turn(Call):
    """One exchange in progress (see the module doc). ``child``, ``ex``, ``stack`` (the
    ``Call``) and ``info`` are set from the lease and the child exchange on: the steps
    before the lease do not read them."""

    roots: Roots | None = None  # the client's roots set, when its call runs on children given it
    round_retry: bool = False  # the retry of the gateway's own roots round (client_roots)
    round_roots: Roots | Rejection | None = None  # what that retry answered (None: nothing)
    pool: Pool | None = None
    info: ChildInfo
    tool: str | None = None  # the lease's and the child's (attribution.tool_key)
    resumed: bool = False  # a parked call resumed by its retry
    rounds: int = 0  # a modern child's input_required rounds so far (input_rounds)
    bridged: bool = False  # sent to its legacy child task-augmented (steps.ask_child_for_task)
    task_at_retry: bool = False  # may become a task, asked first: a task at its round's retry (steps.start_task)
    reply: Reply | None = None  # the child's
    final: JsonObject | None = None  # the client's, once translated
    child_span: ChildSpan | None = None  # the child exchange's, when the request is traced
    __repr__ = object.__repr__  # not the dataclass's: the fields from the lease on may be unset

    def __init__(
        self, relay: Relay, request: Request, client: ClientContext, headers: Mapping[str, str] | None, plan: Plan
    ) -> None:
        self.relay = relay
        self.request = request
        self.client = client
        self.headers = headers
        self.plan = plan

    def on(self, call: Call) -> Turn:
        """This turn on ``call`` (a parked call resumed, a task's, a child's retry)."""
        self.child, self.ex, self.stack, self.runs_as_task = call.child, call.ex, call.stack, call.runs_as_task
        info = call.child.info
        assert info is not None
        self.info = info
        return self
