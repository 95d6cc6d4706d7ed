"""Whose question is it: exact attribution of a child's requests, by construction (digest §4.1, §8.3).

A legacy child's ``sampling/createMessage``, ``elicitation/create`` or ``roots/list`` carries no
field that names the request it serves. The gateway therefore never guesses: it arranges
that at most one request that may ask is in flight on a child whenever a question could come.

Rules:

1. **Which requests may ask.** ``ASKING_METHODS`` (``tools/call``, ``prompts/get``,
   ``resources/read``: the requests MRTR allows to ask, §1.4). Other requests (lists,
   ``ping``, listens) never carry a question, so they share children freely.
2. **Who may join a child** (``admits``). A request that may ask is not given a child
   - on which a question is open (asked and not yet answered: a client is answering, or an
     MRTR call is parked), or held back as ambiguous;
   - that already runs a request that may ask, when the server asks (``is_exclusive``).
   The pool then starts another child within its maximum, else the request queues
   (503 after the queue timeout).
3. **When the server asks** (``is_exclusive``), by its ``AskPolicy``:
   ``always`` - yes; ``never`` - no (requests share, questions are attributed only when
   they can be); ``auto`` (the default) - once a question came during a request (learned),
   and from the start for a legacy child the gateway told it may ask for sampling or
   elicitation (a compliant child asks only for what was declared, so a child told nothing
   never asks mid-call).
4. **Attribution** (``attribute``): a question goes to the one request that may ask in
   flight as it is read. With none in flight it is *unattributable*: only then the gateway
   answers it (or a session's GET stream takes it). With several (before the server was
   known to ask, or with ``never``) it is *ambiguous*: it is held, not answered, and
   ``resolve`` gives it to the one of its candidates still in flight once the others have
   ended (a request whose tool waits for an answer cannot end, the others do); if all have
   ended, nobody is waiting for it and the gateway answers it.

Imports: standard library and ``gateway.protocol`` only; no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Generic, TypeVar

from gateway.protocol.inputs import MRTR_METHODS

T = TypeVar("T")

ASKING_METHODS: Final = MRTR_METHODS
"""Requests during which a child may ask its client something (rule 1)."""
ASKING_CAPABILITIES: Final = frozenset({"sampling", "elicitation"})
"""Declared to a legacy child, these let it ask mid-call: ``auto`` treats it as asking."""


class AskPolicy(StrEnum):
    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


def may_ask(method: str | None) -> bool:
    return method in ASKING_METHODS


def is_exclusive(policy: AskPolicy, *, learned: bool, legacy: bool, declared: Mapping[str, object]) -> bool:
    """Whether a request that may ask needs a child to itself (rule 3)."""
    if policy is AskPolicy.ALWAYS:
        return True
    if policy is AskPolicy.NEVER:
        return False
    return learned or (legacy and not ASKING_CAPABILITIES.isdisjoint(declared))


@dataclass(frozen=True, slots=True)
class ChildLoad:
    """What the pool needs to know of one child to decide whether a request may join it."""

    asking_requests: int = 0  # requests that may ask, in flight on the child
    open_questions: int = 0  # questions asked and not answered yet, or held back as ambiguous


def admits(load: ChildLoad, method: str | None, *, exclusive: bool) -> bool:
    """Whether a request for ``method`` may run on a child with this load (rule 2)."""
    if not may_ask(method):
        return True
    if load.open_questions:
        return False
    return not exclusive or load.asking_requests == 0


@dataclass(frozen=True, slots=True)
class Attributed(Generic[T]):
    owner: T


@dataclass(frozen=True, slots=True)
class Unattributable:
    """No request that may ask is in flight: no client waits for this question."""


@dataclass(frozen=True, slots=True)
class Ambiguous(Generic[T]):
    """Several requests may have asked it; hold it until one candidate is left."""

    candidates: frozenset[T]


Attribution = Attributed[T] | Unattributable | Ambiguous[T]


def attribute(candidates: Collection[T]) -> Attribution[T]:
    """Rule 4, as the question is read: ``candidates`` are the requests that may ask in flight."""
    if not candidates:
        return Unattributable()
    if len(candidates) == 1:
        [owner] = candidates
        return Attributed(owner)
    return Ambiguous(frozenset(candidates))


def resolve(held: Sequence[frozenset[T]], in_flight: Collection[T]) -> list[Attribution[T]]:
    """Each held question's fate now that some requests ended: ``Attributed`` to its one
    candidate still in flight, ``Unattributable`` when none is left, else still ``Ambiguous``
    (with the candidates that remain)."""
    outcomes: list[Attribution[T]] = []
    for candidates in held:
        remaining = [c for c in candidates if c in in_flight]
        outcomes.append(attribute(remaining))
    return outcomes
