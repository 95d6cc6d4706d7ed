"""Rules 5 and 6 of the child session (``gateway.protocol.childsession``): the child's questions
and what they teach about its tools.

``QuestionDesk`` attributes each question the child asks (sampling, elicitation, roots) by
the rules of ``gateway.protocol.attribution``, as the line is read: to the one request in
flight that may ask (``Ask``), held while several may, or left to the gateway
(``Unattributed``). A question that names its task (2025-11-25 ``_meta`` related-task) goes
to the ``tasks/result`` in flight for that task, whatever else runs, or to the gateway when
none is. A held question is settled when a request ends (``ended``) or its deadline passes
(``expire``). The child may withdraw a question it asked (``notifications/cancelled`` naming
its id, as the TypeScript SDK does when its own wait for the answer times out): one with a
client becomes ``Withdrawn`` (no answer is then written to the child), one held is dropped
(``withdrawn``).

**A cancelled asker lingers.** A request that may ask (it asked its client something, or has not
yet, on a child seen to ask or of a tool known to: a tool that goes on past its cancel may ask
first then) and is then ended by the gateway without its child's answer (``abandoned``: its
caller left, or it timed out) stays a candidate for ``ASKER_LINGERS`` seconds from then
(``ASKER_LINGERS_ASKING`` from each question it asks on), or until the child answers it after
all (``replied_late``): a tool that does not stop at the cancel asks its next question as soon
as the last is refused. A question only it may have asked goes to the gateway, which answers it;
one it may have asked with requests in flight (held, also from before it was ended) is held like
any ambiguous question, and goes to the gateway too once settled, never to another request; and
while it lingers the child counts an open question, so no other request that may ask is admitted
to it (quiet ones are). Before, such a question went to whatever request was in flight, a quiet
tool's call of another client included: that client was asked a question that was not its own,
or its call was cancelled for a capability it did not need.

So does a request the gateway ends while it is a candidate of a held question, though it
never asked before: the held question may be its own (a held question has no owner yet), so
it goes to the gateway, not to the candidate left. Before, the candidate left was given it,
as if a request ended by its client's leaving had ended by its child's answer: with calls
that may ask sharing a child (``--child-asks never``, or a tool learned quiet), one client's
hang-up handed its question to another client.

**Its cancel waits while it lingers.** Such a candidate never asked, so its child may still
end it on its own, which proves the question is not its: the ``notifications/cancelled``
for it is held back for its ``ASKER_LINGERS`` (``abandoned`` says so). Its child's reply
within them is the child's own end of it (``replied_late``): it leaves every held question's
candidates as a request that ended does, and the question goes to the candidate left, its
asker. Otherwise the cancel is written when they pass, or at once when a question proves it
asks on, and it lingers ``ASKER_LINGERS`` from then. Before, the cancel went at once: a reply
after it proves nothing (a tool may turn its cancelled question into a result), so a quiet
call that its client cancelled (a task's, say) got another client's dialog declined.

It also keeps the pool's ``ToolLearning`` up to date: a request that ends with a result and
was never a question's candidate makes its tool quiet; a question makes its owner's tool (or
every candidate's, when it stays unresolved) asking.

Imports: standard library and ``gateway.protocol`` only; no I/O, no clock.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable
from typing import Final, Generic, TypeVar

from gateway.protocol import attribution, inputs
from gateway.protocol.attribution import Ambiguous, Attributed, ToolLearning
from gateway.protocol.childactions import Ask, Changed, ChildAction, Log, Timed, Unattributed, Withdrawn
from gateway.protocol.childstate import Deadlines, Entry, Held, Lingering
from gateway.protocol.jsonrpc import Request

OwnerT = TypeVar("OwnerT")

ALL_ENDED = "every request that was in flight when it asked has ended"
CANCELLED_ASKER = "the request that asked before on this child was cancelled; nobody waits for its questions"
CANCELLED_CANDIDATE = (
    "a request that may have asked it was cancelled, so it may be that request's; nobody waits for its questions"
)
ASKER_LINGERS: Final = 2.0
"""Seconds a request that asked and was cancelled by the gateway stays a candidate for its
child's questions (``QuestionDesk.abandoned``): a tool that does not stop at the cancel asks
its next question as soon as the last is refused, within milliseconds. Meanwhile that child
takes no other request that may ask (quiet ones still join), so it is kept short."""
MAX_HELD_QUESTIONS: Final = 64
"""Questions one child may have held as ambiguous at once (each waits up to the input
timeout for its candidates to settle); past it, a new ambiguous one is the gateway's to answer
at once. A child's questions come one per request that may ask; no real child holds this many."""
ASKER_LINGERS_ASKING: Final = 10.0
"""Seconds it lingers from each question it asked while lingering: a tool shown to ask on
after its cancel is given longer between questions."""


class QuestionDesk(Generic[OwnerT]):
    def __init__(
        self,
        label: str,
        input_timeout: float,
        in_flight: Callable[[], list[Entry[OwnerT]]],
        deadlines: Deadlines[Entry[OwnerT] | Held[OwnerT] | Lingering[OwnerT]],
        cancel: Callable[[int, str, list[ChildAction[OwnerT]]], None],
    ) -> None:
        self.label = label
        self.input_timeout = input_timeout
        self.tools: ToolLearning | None = None
        self.has_asked = False  # a question came while a request that may ask was in flight
        self._in_flight = in_flight
        self._deadlines = deadlines
        self._cancel = cancel  # writes ``notifications/cancelled`` for a child id (the session's)
        self.held: list[Held[OwnerT]] = []  # questions held back as ambiguous (read, never changed, outside)
        # Requests that asked and were cancelled by the gateway, while they linger (``abandoned``).
        self.lingering: dict[Entry[OwnerT], Lingering[OwnerT]] = {}
        self._asks: dict[int, Request] = {}  # handed to a client, not closed yet
        self._ask_ids = itertools.count(1)
        # Asks not closed yet, plus questions held back as ambiguous, plus lingering askers: kept
        # by ``_recount`` after each change to any (the child reads it on every line it receives).
        self.open = 0
        # Methods the gateway answers alike whoever asked (a keeping server's roots, from its
        # pool): never held as ambiguous, since holding them could only stall their askers.
        self.answered_alike: Callable[[str], bool] = lambda method: False

    def _recount(self) -> None:
        self.open = len(self._asks) + len(self.held) + len(self.lingering)

    def is_open(self, method: str) -> bool:
        """A question of ``method`` is asked and not closed yet, or held back as ambiguous."""
        return any(ask.method == method for ask in self._asks.values()) or any(
            held.request.method == method for held in self.held
        )

    def request(self, request: Request, now: float, actions: list[ChildAction[OwnerT]]) -> None:
        """A request from the child: attributed as it is read (so requests read together find
        the same owner)."""
        related = inputs.related_task(request.params)
        if related is not None and request.method in inputs.INPUT_METHODS:
            # A task's question names its task: exact whatever else is in flight, never held
            # (attribution rule 4 is for questions that name nothing). Nobody waits on that
            # task's tasks/result: nobody can carry it (never another call's client).
            waiting = next((entry for entry in self._in_flight() if entry.awaits_task(related)), None)
            if waiting is not None:
                self._give(waiting, request, actions)
            else:
                actions.append(self._unattributed(request))
            return
        if request.method in inputs.INPUT_METHODS:
            candidates = [entry for entry in self._in_flight() if entry.may_ask]
            for entry in candidates:
                entry.questioned = True
            if self.lingering:  # a cancelled asker's child may still be asking for it
                candidates += self.lingering
            decision = attribution.attribute(candidates)
            if isinstance(decision, Attributed) and decision.owner in self.lingering:
                self._asks_on(self.lingering[decision.owner], now, actions)
                actions.append(Unattributed(request, CANCELLED_ASKER))
                return
            if isinstance(decision, Attributed):
                self.has_asked = True
                self._asked([decision.owner], actions)
                self._give(decision.owner, request, actions)
                return
            if isinstance(decision, Ambiguous) and self.answered_alike(request.method):
                actions.append(self._unattributed(request))  # the same answer for every candidate
                return
            if isinstance(decision, Ambiguous) and len(self.held) >= MAX_HELD_QUESTIONS:
                reason = f"{len(self.held)} of its questions are held already (at most {MAX_HELD_QUESTIONS})"
                actions.append(Unattributed(request, reason))
                return
            if isinstance(decision, Ambiguous):
                self.has_asked = True
                held = Held(request, decision.candidates, now + self.input_timeout)
                if self.lingering:
                    held.cancelled.update(entry for entry in decision.candidates if entry in self.lingering)
                self.held.append(held)
                self._recount()
                held.due = self._deadlines.push(held.deadline, held)
                actions.append(Timed(held.deadline))
                template = "child %s asked %s with %d requests in flight that may ask; held until only one is left"
                actions.append(Log(logging.INFO, template, (self.label, request.method, len(candidates))))
                return
        actions.append(self._unattributed(request))

    def withdrawn(self, child_id: object, reason: str | None, actions: list[ChildAction[OwnerT]]) -> bool:
        """The child cancelled its question ``child_id`` (``notifications/cancelled``): one
        with a client is withdrawn (``Withdrawn``: the client is told, the child gets no
        answer); one held as ambiguous is dropped. False when no open question has that id
        (answered already, or never asked: the notification is nobody's)."""
        for ask_id, request in self._asks.items():
            if request.id == child_id and type(request.id) is type(child_id):
                actions.append(Withdrawn(ask_id, reason))
                actions.append(Log(logging.INFO, "child %s withdrew its %s", (self.label, request.method)))
                return True
        for held in self.held:
            if held.request.id == child_id and type(held.request.id) is type(child_id):
                self.held.remove(held)
                held.settled = True
                if held.due is not None:
                    self._deadlines.settled_early(held.due)
                self._recount()
                actions.append(Changed())
                template = "child %s withdrew its %s, held while several requests may have asked it"
                actions.append(Log(logging.INFO, template, (self.label, held.request.method)))
                return True
        return False

    def refused(self, ask_id: int) -> list[ChildAction[OwnerT]]:
        request = self._asks.pop(ask_id, None)
        self._recount()
        return [] if request is None else [self._unattributed(request)]

    def closed(self, ask_id: int) -> list[ChildAction[OwnerT]]:
        self._asks.pop(ask_id, None)
        self._recount()
        return [Changed()]

    def ended(self, entry: Entry[OwnerT], actions: list[ChildAction[OwnerT]], *, quiet: bool) -> None:
        """``entry`` had its outcome; ``quiet``: a result from a legacy child (rule 6)."""
        if quiet and not entry.questioned:
            key = entry.tool_key()
            if key is not None and self.tools is not None and self.tools.note_quiet(key):
                template = "child %s: %s asked nothing; it now shares children"
                actions.append(Log(logging.INFO, template, (self.label, key)))
        if self.held:
            self._resolve(actions)

    def abandoned(
        self, entry: Entry[OwnerT], now: float, actions: list[ChildAction[OwnerT]], cancel: str | None
    ) -> bool:
        """The gateway is ending ``entry`` without its child's answer (its caller left, or it
        timed out; told before its end settles anything), with ``cancel`` the reason of the
        ``notifications/cancelled`` it is to get (None: none): if it asked its client
        something, or a held question may be its, it lingers. True when that cancel is held
        back (a candidate that never asked): this desk writes it later, or never."""
        candidate_of = [held for held in self.held if entry in held.candidates]
        if not (entry.asked or candidate_of or (entry.may_ask and self._asks_mid_call(entry))):
            return False
        for held in candidate_of:  # held while it was in flight: it may be that call's
            held.cancelled.add(entry)
        # Held back only for a candidate that never asked (its child may still end it on its
        # own). A call that may ask and has not asked yet lingers too, its cancel written now:
        # a tool that goes on past its cancel may ask next, and the request the child takes
        # after it must not be given that question.
        held_back = cancel if candidate_of and not entry.asked else None
        self._linger(entry, now + ASKER_LINGERS, actions, cancel=held_back)
        self._recount()
        actions.append(Changed())
        if held_back is not None:
            template = (
                "child %s: the cancel of %s (child id %d) is held back up to %g s: a held question may be its, "
                "unless the child ends it on its own"
            )
            actions.append(Log(logging.INFO, template, (self.label, entry.method, entry.child_id, ASKER_LINGERS)))
        return held_back is not None

    def _asks_mid_call(self, entry: Entry[OwnerT]) -> bool:
        """Whether ``entry``'s tool may ask after its cancel: this child has asked during a
        request before, or the tool is known to ask (on any child of the pool). A server seen
        to ask nothing (most) lingers on no cancel, so its next call is not kept waiting."""
        if self.has_asked:
            return True
        key = entry.tool_key() if self.tools is not None else None
        return key is not None and self.tools is not None and key in self.tools.asking

    def replied_late(self, child_id: object, actions: list[ChildAction[OwnerT]]) -> None:
        """The child answered a request after the gateway had ended it (rule 1's late reply):
        if that request lingers, it ends now, for the child is done with it. With no cancel
        written for it, the child ended it on its own: no held question is its."""
        entry = next((entry for entry in self.lingering if entry.child_id == child_id), None)
        if entry is None:
            return
        lingering = self.lingering[entry]
        if lingering.natural:
            for held in self.held:
                held.cancelled.discard(entry)
        self._unlinger(lingering, actions)

    def _unlinger(self, lingering: Lingering[OwnerT], actions: list[ChildAction[OwnerT]]) -> None:
        lingering.settled = True
        if lingering.due is not None:
            self._deadlines.settled_early(lingering.due)
        del self.lingering[lingering.entry]
        self._recount()
        if self.held:
            self._resolve(actions)  # says ``Changed`` when it settles the last held question
            if not self.held:
                return
        actions.append(Changed())

    def _linger(
        self,
        entry: Entry[OwnerT],
        until: float,
        actions: list[ChildAction[OwnerT]],
        *,
        cancel: str | None = None,
    ) -> None:
        """``entry`` lingers until ``until`` (anew when it lingers already)."""
        old = self.lingering.get(entry)
        if old is not None and old.due is not None:
            self._deadlines.settled_early(old.due)
        lingering = self.lingering[entry] = Lingering(entry, until, cancel)
        lingering.due = self._deadlines.push(lingering.deadline, lingering)
        actions.append(Timed(until))

    def _asks_on(self, lingering: Lingering[OwnerT], now: float, actions: list[ChildAction[OwnerT]]) -> None:
        """A question only ``lingering`` may have asked: it asks on, so its cancel (held back
        or not) is written now, and it lingers longer, from now."""
        if lingering.cancel is not None:
            self._cancel(lingering.entry.child_id, lingering.cancel, actions)
        self._linger(lingering.entry, now + ASKER_LINGERS_ASKING, actions)

    def expire(self, item: Held[OwnerT] | Lingering[OwnerT], actions: list[ChildAction[OwnerT]]) -> None:
        """A held question's input timeout passed: nobody is known to wait for it. Or a cancelled
        asker has lingered long enough: the questions held for it and others may now resolve.
        Or a candidate whose cancel was held back was not ended by its child in that time: the
        cancel is written, and it lingers on from then, as if cancelled now."""
        if isinstance(item, Lingering) and item.cancel is not None:
            self._cancel(item.entry.child_id, item.cancel, actions)
            self._linger(item.entry, item.deadline + ASKER_LINGERS, actions)
            return
        if isinstance(item, Lingering):
            self._unlinger(item, actions)
            return
        held = item
        self.held.remove(held)
        self._recount()
        held.settled = True
        self._asked(held.candidates, actions)
        actions.append(Changed())
        reason = (
            f"{len(held.candidates)} requests that may ask were in flight on the child, so it is not known "
            f"whose question this is, and none was left alone within {self.input_timeout:g} s"
        )
        actions.append(Unattributed(held.request, reason))

    def clear(self) -> None:
        self.held.clear()
        self._asks.clear()
        self.lingering.clear()
        self._recount()

    def _resolve(self, actions: list[ChildAction[OwnerT]]) -> None:
        """A request ended: a held question may now have one candidate left (or none)."""
        in_flight = {entry for entry in self._in_flight() if entry.may_ask}
        in_flight.update(self.lingering)  # still candidates while they linger
        held, self.held = self.held, []
        outcomes = attribution.resolve([question.candidates for question in held], in_flight)
        for question, outcome in zip(held, outcomes, strict=True):
            if isinstance(outcome, Ambiguous):
                question.candidates = outcome.candidates
                self.held.append(question)
                continue
            question.settled = True
            if question.due is not None:
                self._deadlines.settled_early(question.due)
            if isinstance(outcome, Attributed) and question.cancelled:  # it may be a cancelled one's
                actions.append(Unattributed(question.request, CANCELLED_CANDIDATE))  # maybe the cancelled one's
            elif isinstance(outcome, Attributed):
                self._asked([outcome.owner], actions)
                self._give(outcome.owner, question.request, actions)
            else:  # requests end one at a time, so one candidate is always left first
                self._asked(question.candidates, actions)
                actions.append(Unattributed(question.request, ALL_ENDED))
        self._recount()
        if not self.held:
            actions.append(Changed())

    def _unattributed(self, request: Request) -> Unattributed:
        in_flight = len(self._in_flight())
        if not in_flight:
            reason = "no client request is in flight on the child"
        else:
            reason = f"none of the {in_flight} request(s) in flight on the child can carry it to its client"
        return Unattributed(request, reason)

    def _give(self, entry: Entry[OwnerT], request: Request, actions: list[ChildAction[OwnerT]]) -> None:
        entry.asked = True
        ask_id = next(self._ask_ids)
        self._asks[ask_id] = request
        self._recount()
        actions.append(Ask(entry.owner, ask_id, request))

    def _asked(self, entries: Iterable[Entry[OwnerT]], actions: list[ChildAction[OwnerT]]) -> None:
        """A question was (or may have been) asked by ``entries``: their tools ask (rule 6)."""
        keys = {key for entry in entries if (key := entry.tool_key()) is not None}
        if self.tools is None or not keys:
            return
        for key in self.tools.note_asked(keys):
            template = "child %s: %s, learned to be quiet, asked after all; it gets a child to itself again"
            actions.append(Log(logging.INFO, template, (self.label, key)))
