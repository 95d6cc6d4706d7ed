"""A child's questions for clients (sampling, elicitation, roots): who gets each, and when the
gateway answers instead (the rules are ``gateway.protocol.attribution``; this is their I/O).

``StdioChild`` hands every request the child sends to ``Questions.on_request`` as it is read:

- a question with one candidate (an exchange in flight that may ask) goes to that exchange as
  a ``ChildAsk``; its answer, or an error after ``spec.input_timeout``, goes to the child;
- a question with several candidates is held until one is left (``exchange_ended`` is called
  as each exchange ends), or until ``spec.input_timeout``; then it is given, or answered here;
- anything else is offered to the child's request handler (a session's GET stream), else
  answered by the gateway (``gateway.protocol.inputs.local_answer``), logged and counted.

``open`` (questions asked and not yet answered, or held) is what the pool reads to keep other
requests that may ask off the child; ``on_change`` is called when it may have dropped.
``tools`` (the pool's ``ToolLearning``, attribution rule 5) learns which tools ask: a question
marks its candidates questioned, and its owner asking; an exchange ending with a result and
never questioned marks its tool quiet (``note_quiet``, called by the exchange).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from contextlib import suppress
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from gateway.errors import CODE_INPUT_TIMEOUT, ChildError
from gateway.protocol import attribution, inputs, jsonrpc
from gateway.protocol.attribution import Ambiguous, Attributed
from gateway.protocol.jsonrpc import ErrorReply, JsonObject, Reply, Request
from gateway.stdio.ask import ChildAsk
from gateway.stdio.spec import ChildSpec

if TYPE_CHECKING:
    from gateway.stdio.child import Exchange

log = logging.getLogger("gateway.child")

RequestHandler = Callable[[Request], Awaitable[Reply | None]]
"""Answers a child request no exchange carries; None: the gateway's local answer."""


class _Held:
    """An ambiguous question: the child's request, and the exchanges it may belong to."""

    def __init__(self, request: Request, candidates: frozenset[Exchange]) -> None:
        self.request = request
        self.candidates = candidates
        self.settled = anyio.Event()


class Questions:
    def __init__(
        self,
        spec: ChildSpec,
        tg: TaskGroup,
        owners: Callable[[], list[Exchange]],
        write: Callable[[JsonObject], Awaitable[None]],
        handler: RequestHandler | None,
        on_change: Callable[[], None] | None,
    ) -> None:
        self.spec = spec
        self.awaiting_input = 0  # child requests waiting for a client's answer (not a stall)
        self.has_asked = False  # a question came while a request that may ask was in flight
        self.to_clients = 0  # attributed questions (metrics)
        self.answered_by_gateway = 0  # every question the gateway answered itself (metrics)
        self._tg = tg
        self._owners = owners
        self._write = write
        self._handler = handler
        self._on_change = on_change
        self._open = 0  # attributed questions not answered yet
        self.tools: attribution.ToolLearning | None = None  # set by the pool (rule 5)
        self._held: list[_Held] = []  # ambiguous questions, until one candidate is left

    @property
    def open(self) -> int:
        """Questions asked and not answered yet, plus those held back as ambiguous."""
        return self._open + len(self._held)

    def on_request(self, request: Request) -> None:
        """Attribute as the line is read (so requests read together find the same owner), answer later."""
        if request.method in inputs.INPUT_METHODS:
            candidates = [ex for ex in self._owners() if ex.may_ask]
            for ex in candidates:
                ex.questioned = True
            decision = attribution.attribute(candidates)
            if isinstance(decision, Attributed):
                self.has_asked = True
                self._asked([decision.owner])
                if self._give(decision.owner, request):
                    return
            elif isinstance(decision, Ambiguous):
                self.has_asked = True
                held = _Held(request, decision.candidates)
                self._held.append(held)
                log.info(
                    "child %s asked %s with %d requests in flight that may ask; held until only one of them is left",
                    self.spec.label,
                    request.method,
                    len(candidates),
                )
                self._tg.start_soon(self._hold, held)
                return
        in_flight = len(self._owners())
        if not in_flight:
            reason = "no client request is in flight on the child"
        else:
            reason = f"none of the {in_flight} request(s) in flight on the child can carry it to its client"
        self._tg.start_soon(self._answer, request, reason)

    def _give(self, owner: Exchange, request: Request) -> bool:
        """Hand an attributed question to its exchange; False if it cannot take it any more."""
        ask = ChildAsk(request)
        if not owner._offer_ask(ask):
            return False
        self.awaiting_input += 1  # from now: the child's silence is no stall
        self._open += 1
        self.to_clients += 1
        self._tg.start_soon(self._await_ask, ask)
        return True

    def exchange_ended(self) -> None:
        """An exchange ended: a held question may now have one candidate left (or none)."""
        if not self._held:
            return
        in_flight = {ex for ex in self._owners() if ex.may_ask}
        held, self._held = self._held, []
        for question, outcome in zip(held, attribution.resolve([h.candidates for h in held], in_flight), strict=True):
            if isinstance(outcome, Ambiguous):
                question.candidates = outcome.candidates
                self._held.append(question)
                continue
            question.settled.set()
            self._asked([outcome.owner] if isinstance(outcome, Attributed) else question.candidates)
            if isinstance(outcome, Attributed) and self._give(outcome.owner, question.request):
                continue
            reason = "every request that was in flight when it asked has ended"
            self._tg.start_soon(self._answer, question.request, reason)
        if not self._held:
            self._changed()

    async def _hold(self, held: _Held) -> None:
        """Bound an ambiguous question's wait by the input timeout; then the gateway answers it."""
        with anyio.move_on_after(self.spec.input_timeout):
            await held.settled.wait()
        if held.settled.is_set():
            return
        self._held.remove(held)
        self._asked(held.candidates)
        self._changed()
        reason = (
            f"{len(held.candidates)} requests that may ask were in flight on the child, so it is not known "
            f"whose question this is, and none was left alone within {self.spec.input_timeout:g} s"
        )
        await self._answer(held.request, reason)

    def note_quiet(self, tool: str) -> None:
        """An exchange of ``tool`` ended with a result, and no question was a candidate's of it."""
        if self.tools is not None and self.tools.note_quiet(tool):
            log.info("child %s: %s asked nothing; it now shares children", self.spec.label, tool)

    def _asked(self, owners: Collection[Exchange]) -> None:
        """A question was (or may have been) asked by ``owners``: their tools ask (rule 5)."""
        tools = {ex.tool for ex in owners if ex.tool is not None}
        if self.tools is None or not tools:
            return
        for tool in self.tools.note_asked(tools):
            log.info(
                "child %s: %s, learned to be quiet, asked after all; it gets a child to itself again",
                self.spec.label,
                tool,
            )

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()

    async def _await_ask(self, ask: ChildAsk) -> None:
        try:
            with anyio.move_on_after(self.spec.input_timeout):
                await ask.wait()
            ask.answer_error(  # a no-op when it was answered
                CODE_INPUT_TIMEOUT,
                f"the client did not answer {ask.method} within {self.spec.input_timeout:g} s",
                timeout_seconds=self.spec.input_timeout,
            )
        finally:
            self.awaiting_input -= 1
            self._open -= 1
            self._changed()
        assert ask.reply is not None
        if ask.local_reason is not None:
            self._answered_locally(ask.method, ask.local_reason)
        with suppress(ChildError):
            await self._write(ask.reply.to_dict())

    def _answered_locally(self, method: str, reason: str) -> None:
        self.answered_by_gateway += 1
        log.info("child %s asked %s; the gateway answered it: %s", self.spec.label, method, reason)

    async def _answer(self, request: Request, reason: str) -> None:
        asking = request.method in inputs.INPUT_METHODS and self._handler is not None
        if asking:
            self.awaiting_input += 1  # it may wait for a client: the child's silence is no stall
        try:
            reply = None if self._handler is None else await self._handler(request)
            if reply is None:
                reply = inputs.local_answer(request, self.spec.roots, reason)
                if request.method in inputs.INPUT_METHODS:
                    self._answered_locally(request.method, reason)
        except Exception:  # a handler bug must still answer the child
            log.exception("handler for child request %s failed", request.method)
            reply = ErrorReply(request.id, jsonrpc.error_object(jsonrpc.INTERNAL_ERROR, "gateway error"))
        finally:
            if asking:
                self.awaiting_input -= 1
        with suppress(ChildError):
            await self._write(reply.to_dict())
