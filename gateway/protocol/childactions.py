"""What the child session machine (``gateway.protocol.childsession``) asks its edge to do.

Each event the machine takes returns a list of these, to be carried out in order. The owner
of a request is opaque (``Generic``): the stdio edge passes its exchange object.

Imports: standard library, ``gateway.protocol`` and ``gateway.errors`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from gateway.errors import ChildError
from gateway.protocol.jsonrpc import Notification, Reply, Request

OwnerT = TypeVar("OwnerT")


# The actions are values, made for every line and never changed after, but not frozen: a frozen
# dataclass's __init__ sets each field through object.__setattr__ (``gateway.protocol.jsonrpc``).
@dataclass(slots=True)
class Deliver(Generic[OwnerT]):
    """A notification for a request's stream (progress, an attributed log, a listen's)."""

    owner: OwnerT
    notification: Notification


@dataclass(slots=True)
class Answered(Generic[OwnerT]):
    owner: OwnerT
    reply: Reply


@dataclass(slots=True)
class Failed(Generic[OwnerT]):
    owner: OwnerT
    error: ChildError


@dataclass(slots=True)
class Write:
    """A line for the child's stdin (``notifications/cancelled``)."""

    line: bytes


@dataclass(slots=True)
class Ask(Generic[OwnerT]):
    """Hand the child's question to ``owner``'s client; report back with ``ask_closed``."""

    owner: OwnerT
    ask_id: int
    request: Request


@dataclass(slots=True)
class Withdrawn:
    """The child cancelled a question it asked and that is still with a client (its
    ``notifications/cancelled`` names it): no answer goes to the child, and its client is told
    if it can be. The ask closes as any (``ask_closed``)."""

    ask_id: int
    reason: str | None


@dataclass(slots=True)
class Unattributed:
    """A child request no request carries: the edge (a handler, else local answers) answers it."""

    request: Request
    reason: str


@dataclass(slots=True)
class Broadcast:
    """A notification that belongs to no request."""

    notification: Notification


@dataclass(slots=True)
class Log:
    """A line for the gateway's log, formatted lazily like ``logging``'s own arguments;
    ``fields``: the record's own fields (``event``, ``exit_code``…), beside the child's
    ``server``, ``pool`` and ``pid`` the edge adds to every line of a child."""

    level: int
    template: str
    args: tuple[object, ...] = ()
    fields: Mapping[str, object] | None = None


@dataclass(slots=True)
class Changed:
    """``open_questions`` may have dropped: the pool may now place a request that may ask."""


@dataclass(slots=True)
class Timed:
    """A deadline the machine set on its own (a held question's, a lingering asker's): the
    edge's timer must wake by ``at`` (``gateway.stdio.timer.DeadlineTimer.note``) to ``tick``."""

    at: float


@dataclass(slots=True)
class ChildFacts:
    """What the pool's dispatcher decides from, as the machine has it now (``childsession``
    rule 8): the questions open (asked of a client and not closed, plus those held as
    ambiguous), whether a question came while a request that may ask was in flight, and
    whether the child lives. Sent first whenever one of them changes; the edge copies them to
    the dispatcher at once, ahead of any action still waiting (``gateway.stdio.carried``), so
    its copy is never behind the machine."""

    open_questions: int
    has_asked: bool
    alive: bool


ChildAction = (
    Deliver[OwnerT]
    | Answered[OwnerT]
    | Failed[OwnerT]
    | Write
    | Ask[OwnerT]
    | Withdrawn
    | Unattributed
    | Broadcast
    | Log
    | Changed
    | Timed
    | ChildFacts
)
