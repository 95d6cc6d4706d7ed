"""The I/O of a child's questions for clients (sampling, elicitation, roots), and of the child
requests nobody carries. Who gets each question is decided by the session machine
(``gateway.protocol.childsession``, by the rules of ``gateway.protocol.attribution``); this
module carries the decisions out:

- ``ask``: an ``Ask`` becomes a ``ChildAsk`` offered to its exchange; its answer, or an error
  ``ASK_BACKSTOP_GRACE`` after ``spec.input_timeout``, is written to the child, and
  ``closed(ask_id)`` tells the machine it is no longer open (``withdraw``: the child
  cancelled it first: nothing is written, and its exchange is told). The relay bounds each ask by
  ``spec.input_timeout`` itself, counted from the same moment, and ends the call its own way
  (a parked call is cancelled at the child before its questions are answered); the backstop
  comes later so that the two never race, and answers only an ask the relay left behind;
- ``answer``: an ``Unattributed`` request is offered to the child's request handler (a
  session's GET stream), else answered by the gateway
  (``gateway.protocol.inputs.unattributed_answer``), logged and counted.

``awaiting_input`` (child requests waiting for a client's answer) tells the pool that the
child's silence is no stall.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Final

import anyio

from gateway.errors import CODE_INPUT_TIMEOUT, ChildError
from gateway.protocol import inputs, jsonrpc
from gateway.protocol.jsonrpc import ErrorReply, Reply, Request
from gateway.stdio.ask import ChildAsk
from gateway.stdio.boundary import TaskStarter
from gateway.stdio.spec import ChildSpec

log = logging.getLogger("gateway.child")

ASK_BACKSTOP_GRACE: Final = 1.0
"""Seconds past ``spec.input_timeout`` before an ask nobody answered is answered here."""

RequestHandler = Callable[[Request], Awaitable[Reply | None]]
"""Answers a child request no exchange carries; None: the gateway's local answer."""


class Questions:
    def __init__(
        self,
        spec: ChildSpec,
        tg: TaskStarter,
        write: Callable[[bytes], None],
        handler: RequestHandler | None,
        closed: Callable[[int], None],
    ) -> None:
        self.spec = spec
        self.awaiting_input = 0  # child requests waiting for a client's answer (not a stall)
        self.to_clients = 0  # attributed questions handed to an exchange (metrics)
        self.answered_by_gateway = 0  # every question the gateway answered itself (metrics)
        self._tg = tg
        self._write = write
        self._handler = handler
        self._closed = closed
        # Questions with a client, until answered (each also an open question of the session
        # machine, so bounded as those are), with how each was offered to its exchange.
        self._open: dict[int, tuple[ChildAsk, Callable[[ChildAsk], bool]]] = {}

    def ask(self, ask_id: int, request: Request, offer: Callable[[ChildAsk], bool]) -> bool:
        """Hand an attributed question to its exchange (``offer``); False if it cannot take it."""
        ask = ChildAsk(request)
        if not offer(ask):
            return False
        self._open[ask_id] = (ask, offer)
        self.awaiting_input += 1  # from now: the child's silence is no stall
        self.to_clients += 1
        self._tg.start_soon(self._await_ask, ask_id, ask)
        return True

    def answer(self, request: Request, reason: str) -> None:
        self._tg.start_soon(self._answer, request, reason)

    def withdraw(self, ask_id: int, reason: str | None) -> None:
        """The child cancelled question ``ask_id``: it is answered nothing, and offered to its
        exchange again, withdrawn, so that its reader can tell the client."""
        opened = self._open.get(ask_id)
        if opened is None:
            return
        ask, offer = opened
        if ask.withdraw(reason):
            offer(ask)  # (an exchange that is done takes nothing: its client is gone)

    async def _await_ask(self, ask_id: int, ask: ChildAsk) -> None:
        try:
            with anyio.move_on_after(self.spec.input_timeout + ASK_BACKSTOP_GRACE):
                await ask.wait()
            ask.answer_error(  # a no-op when it was answered
                CODE_INPUT_TIMEOUT,
                f"the client did not answer {ask.method} within {self.spec.input_timeout:g} s",
                timeout_seconds=self.spec.input_timeout,
            )
        finally:
            self.awaiting_input -= 1
            self._open.pop(ask_id, None)
            self._closed(ask_id)
        assert ask.reply is not None
        if ask.withdrawn:  # the child cancelled it: it expects no answer
            return
        if ask.local_reason is not None:
            self._answered_locally(ask.method, ask.local_reason)
        self._send(ask.reply)

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
                reply = inputs.unattributed_answer(request, self.spec.roots, reason)
                if request.method in inputs.INPUT_METHODS:
                    self._answered_locally(request.method, reason)
        except Exception:  # a handler bug must still answer the child
            log.exception("handler for child request %s failed", request.method)
            reply = ErrorReply(request.id, jsonrpc.error_object(jsonrpc.INTERNAL_ERROR, "gateway error"))
        finally:
            if asking:
                self.awaiting_input -= 1
        self._send(reply)

    def _send(self, reply: Reply) -> None:
        with suppress(ChildError):  # the child is gone: nobody to answer
            self._write(jsonrpc.encode_line(reply))
