"""A question from a stdio child for the client of one request: sampling, elicitation, roots.

``gateway.stdio.questions`` makes a ``ChildAsk`` when the child's session machine attributes
such a request to one request in flight (``gateway.protocol.childsession``), and delivers it
in that request's exchange. The reader of the exchange answers it once (the relay: from the
client, or locally); the task that waits for it writes the reply to the child under the
child's own id. The child may withdraw it first (``withdraw``: it cancelled the question);
then nothing is written, and the ask is offered to its exchange again, withdrawn, so that its
reader can tell the client.
"""

from __future__ import annotations

import anyio

from gateway.errors import CODE_CANCELLED, GATEWAY_NAME
from gateway.protocol import jsonrpc
from gateway.protocol.jsonrpc import ErrorReply, JsonObject, Reply, Request, Result


class ChildAsk:
    """A request from the child for the client of one exchange (sampling, elicitation, roots).

    Whoever reads the exchange answers it, once: the first ``answer`` wins, and the child
    gets that reply under its own id. An ask nobody answers is answered for them: with an
    error when its exchange ends, or by the relay at ``spec.input_timeout`` (a backstop answers
    it ``ASK_BACKSTOP_GRACE`` later, ``gateway.stdio.questions``). ``answer_locally``
    marks an answer the gateway made in the client's place (counted and logged by the child).
    """

    def __init__(self, request: Request) -> None:
        self.request = request
        self.reply: Reply | None = None
        self.local_reason: str | None = None  # why the gateway answered it, when it did
        self.client_id: str | None = None  # the id its client got it under (a legacy session's ``g-N``)
        self.withdrawn = False  # the child cancelled it (``withdraw``): no answer goes to it
        self.withdrawn_reason: str | None = None
        self._answered = anyio.Event()

    def __repr__(self) -> str:
        return f"<ChildAsk {self.request.method} id={self.request.id!r} answered={self.is_answered}>"

    @property
    def method(self) -> str:
        return self.request.method

    @property
    def params(self) -> JsonObject | None:
        return self.request.params

    @property
    def is_answered(self) -> bool:
        return self.reply is not None

    def answer(self, reply: Reply) -> bool:
        """Answer the child (``reply``'s id is replaced by the child's); False if already answered."""
        if self.reply is not None:
            return False
        if isinstance(reply, Result):
            self.reply = Result(self.request.id, reply.result)
        else:
            self.reply = ErrorReply(self.request.id, reply.error)
        self._answered.set()
        return True

    def answer_locally(self, reply: Reply, reason: str) -> bool:
        """Answer in the client's place (``inputs.local_answer``); ``reason`` says why."""
        if not self.answer(reply):
            return False
        self.local_reason = reason
        return True

    def withdraw(self, reason: str | None) -> bool:
        """The child cancelled this question: it counts as answered (every later answer is
        refused), but nothing is written to the child. False when it was answered already."""
        if self.reply is not None:
            return False
        self.withdrawn, self.withdrawn_reason = True, reason
        error = jsonrpc.error_object(CODE_CANCELLED, "the server withdrew its question", {"source": GATEWAY_NAME})
        self.reply = ErrorReply(self.request.id, error)
        self._answered.set()
        return True

    def answer_result(self, result: JsonObject) -> bool:
        return self.answer(Result(self.request.id, result))

    def answer_error(self, code: int, message: str, **data: object) -> bool:
        details = {"source": GATEWAY_NAME, "method": self.request.method, **data}
        return self.answer(ErrorReply(self.request.id, jsonrpc.error_object(code, message, details)))

    async def wait(self) -> Reply:
        await self._answered.wait()
        assert self.reply is not None
        return self.reply
