"""Whose question is it: exact attribution of a child's requests, by construction (digest §4.1, §8.3).

A legacy child's ``sampling/createMessage``, ``elicitation/create`` or ``roots/list`` carries no
field that names the request it serves. The gateway therefore never guesses: it arranges
that at most one request that may ask is in flight on a child whenever a question could come.

Rules:

1. **Which requests may ask.** ``ASKING_METHODS`` (``tools/call``, ``prompts/get``,
   ``resources/read``: the requests MRTR allows to ask, §1.4). Other requests (lists,
   ``ping``, listens) never carry a question, so they share children freely.
2. **Who may join a child** (``admits``). A request that cannot ask (rule 1, or a tool known
   quiet that needs no child to itself, rule 5) joins any child, also one whose other requests
   are asking or parked: it cannot make a question ambiguous. A request that may ask is not
   given a child
   - on which a question is open (asked and not yet answered: a client is answering, or an
     MRTR call is parked), or held back as ambiguous;
   - that already runs a request that may ask and is not known quiet, when the server asks
     (``is_exclusive``; requests of quiet tools, rule 5, share).
   The pool then starts another child for it (``gateway.protocol.dispatch`` rule 4), else the
   request queues (503 after the queue timeout).
3. **When the server asks** (``is_exclusive``), by its ``AskPolicy``:
   ``always`` - yes; ``never`` - no (requests share, questions are attributed only when
   they can be); ``auto`` (the default) - once a question came during a request (learned),
   and from the start for a legacy child the gateway told it may ask for sampling or
   elicitation (a compliant child asks only for what was declared, so a child told nothing
   never asks mid-call) - except, on a legacy child, for a tool learned to be quiet (rule 5).
5. **Per tool** (``tool_key``, ``ToolLearning``): under ``auto`` the pool learns which tools
   (``tools/call`` by name, ``prompts/get`` by name, ``resources/read`` as one) ask. A tool
   not known to be quiet is treated as may-ask (rule 3). When an exchange of a tool ends with
   a result (the child accepted the name, and lived to answer) and no question came while it
   was a candidate (rule 4), the tool is *quiet*: its later requests share children freely.
   A question marks its owner *asking* (an ambiguous one: when resolved, its owner; all its
   candidates when nobody is left or it times out); an asking tool is never quiet again. At
   most ``MAX_LEARNED_TOOLS`` names are recorded; past it, unknown tools stay may-ask. A quiet
   tool that asks after all stays exact: its question is a candidate's like any other (held
   while ambiguous, rule 4).
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
MAX_LEARNED_TOOLS: Final = 1024
"""Tool names a pool records as quiet or asking (rule 5): names come from clients, so the set is
bounded; past it unknown tools are treated as may-ask (exact, only slower)."""


class AskPolicy(StrEnum):
    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


# ``is_exclusive`` runs for each lease: a module global costs a fraction of a member looked up
# on its enum class (CPython 3.11 does not specialize class attribute loads).
_ALWAYS: Final = AskPolicy.ALWAYS
_NEVER: Final = AskPolicy.NEVER


def may_ask(method: str | None) -> bool:
    return method in ASKING_METHODS


def tool_key(method: str | None, params: Mapping[str, object] | None) -> str | None:
    """What rule 5 learns about: the request kind and its tool (or prompt) name; None when
    ``method`` never asks. ``resources/read`` is one key: URIs are many and often generated."""
    if method not in ASKING_METHODS:  # ``may_ask``, spelled out: every request asks this
        return None
    assert method is not None
    if method == "resources/read":
        return method
    name = None if params is None else params.get("name")
    return f"{method} {name}" if isinstance(name, str) else method


def is_exclusive(
    policy: AskPolicy, *, learned: bool, legacy: bool, declared: Mapping[str, object], quiet: bool = False
) -> bool:
    """Whether a request that may ask needs a child to itself (rules 3 and 5): ``quiet``, its
    tool is known to ask nothing."""
    if policy is _ALWAYS:
        return True
    if policy is _NEVER:
        return False
    if legacy and quiet:
        return False
    return learned or (legacy and not ASKING_CAPABILITIES.isdisjoint(declared))


class ToolLearning:
    """Which tools of one server are known to ask, or known to be quiet (rule 5)."""

    def __init__(self, limit: int = MAX_LEARNED_TOOLS) -> None:
        self.limit = limit
        self.quiet: set[str] = set()
        self.asking: set[str] = set()

    def is_quiet(self, key: str | None) -> bool:
        return key is not None and key in self.quiet

    def note_quiet(self, key: str) -> bool:
        """An exchange of ``key`` ended with a result, no question having been its: True if
        ``key`` is newly quiet (never an asking tool, nor past the limit)."""
        if key in self.quiet or key in self.asking or len(self.quiet) + len(self.asking) >= self.limit:
            return False
        self.quiet.add(key)
        return True

    def note_asked(self, keys: Collection[str]) -> list[str]:
        """A question was (or may have been) asked by exchanges of ``keys``: those are asking from
        now on. Returns the keys that were quiet (their requests shared children)."""
        was_quiet = [key for key in keys if key in self.quiet]
        for key in keys:
            self.quiet.discard(key)  # frees room for the swap below: the total never grows past it
            if key not in self.asking and len(self.quiet) + len(self.asking) < self.limit:
                self.asking.add(key)
        return was_quiet


def admits(asking_requests: int, open_questions: int, *, asks: bool, exclusive: bool, quiet: bool = False) -> bool:
    """Whether a request may run on a child with ``asking_requests`` in flight (requests that
    may ask and needed the child alone, not quiet) and ``open_questions`` (asked and not
    answered yet, or held back as ambiguous) (rule 2); ``asks``: it may ask (``may_ask`` of its
    method, rule 1); ``quiet``: its tool is known quiet and needs no child to itself."""
    if quiet or not asks:
        return True
    if open_questions:
        return False
    return not exclusive or asking_requests == 0


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
