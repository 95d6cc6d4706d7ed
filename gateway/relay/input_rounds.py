"""A modern child's ``input_required``, for a legacy client (digest §7.6 D).

Each ``inputRequests`` entry goes to the client on its request's stream as a JSON-RPC request
with a gateway id (a URL elicitation with an ``elicitationId`` of the gateway's, as 2025-11-25
requires); the client's POSTed results (within the input timeout) go back to the child
in a retry — a new child request with the original params, ``inputResponses`` under the same
keys and the child's ``requestState`` unchanged — whose outcome, maybe another round, the relay
streams as any call's (``next_round``), at most ``MAX_INPUT_ROUNDS`` rounds. A session that did
not declare what is asked, or does not answer in time, gets a gateway error (-31006, -31007).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Final

import anyio

from gateway.errors import CODE_INPUT_TIMEOUT, GATEWAY_NAME, ChildError, ChildProtocolError
from gateway.protocol import inputs, jsonrpc, urlelicitation
from gateway.protocol.jsonrpc import ErrorReply, JsonObject, Request, Result
from gateway.relay import events, translate
from gateway.relay.client import ClientContext
from gateway.relay.events import Emitted
from gateway.relay.suspensions import Call, Holdings
from gateway.relay.translate import response
from gateway.stdio.ask import ChildAsk
from gateway.stdio.child import StdioChild

MAX_INPUT_ROUNDS: Final = 10
"""``input_required`` rounds a modern child may ask of a legacy client in one request; past
this the request ends with an error (a child that never completes must not loop forever)."""


def new_elicitation_id() -> str:
    """An ``elicitationId`` of the gateway's, for a legacy client (random, 16 characters)."""
    return secrets.token_urlsafe(12)


NextRound = Callable[[Call, Request, ClientContext, int], AsyncGenerator[Emitted]]
"""How the relay streams the child's retry (round number given): ``Relay.next_round``."""


async def input_round(
    next_round: NextRound, child: StdioChild, request: Request, client: ClientContext, result: JsonObject, rounds: int
) -> AsyncGenerator[Emitted]:
    """Ask the legacy client what the modern child's ``input_required`` asks, then retry
    the child with the answers (a new child request); the retry's outcome, which may be
    another round, is streamed on as usual."""
    wanted = result.get("inputRequests")
    wanted = {} if wanted is None else wanted
    state = result.get("requestState")
    problem = translate.input_required_problem(wanted, state)
    if problem is None and rounds >= MAX_INPUT_ROUNDS:
        problem = f"the server still wants input after {MAX_INPUT_ROUNDS} rounds; the gateway gave up"
    if problem is not None:
        yield events.Final(
            response(request.id, error=ChildProtocolError(f"{request.method}: {problem}").error_object())
        )
        return
    assert isinstance(wanted, dict)
    answers: JsonObject = {}
    asks: dict[str, ChildAsk] = {}
    for key, entry in wanted.items():
        ask = ChildAsk(Request(key, entry["method"], entry.get("params")))
        reachable = client.session is not None and client.accepts_requests
        if reachable and inputs.is_declared(client.capabilities, ask.method, ask.params):
            asks[key] = ask
        elif ask.method == inputs.ROOTS and child.spec.roots is not None:  # the configured roots answer it
            answers[key] = {"roots": [dict(root) for root in child.spec.roots]}
        else:
            yield events.Final(response(request.id, error=translate.undeclared_input_error(ask, client)))
            return
    session = client.session
    timeout = child.spec.input_timeout
    unanswered: list[ChildAsk] = []
    try:
        for ask in asks.values():
            assert session is not None  # only a session's client is asked (reachable, above)
            gateway_id: str = session.track_ask(ask)
            params = urlelicitation.for_legacy_client(ask.method, ask.params, new_elicitation_id)
            yield events.Ask(Request(gateway_id, ask.method, params).to_dict())
        with anyio.move_on_after(timeout):
            for ask in asks.values():
                await ask.wait()
        unanswered = [ask for ask in asks.values() if not ask.is_answered]
    finally:  # timed out, or the request was cancelled: answered, so the session forgets them
        for ask in asks.values():
            ask.answer_error(CODE_INPUT_TIMEOUT, "no answer came")
    if unanswered:
        methods = ", ".join(sorted({ask.method for ask in unanswered}))
        yield events.Final(
            response(
                request.id,
                error=jsonrpc.error_object(
                    CODE_INPUT_TIMEOUT,
                    f"the client did not answer {methods} within {timeout:g} s, so the server cannot complete "
                    "this request",
                    {"source": GATEWAY_NAME, "method": unanswered[0].method, "timeout_seconds": timeout},
                ),
            )
        )
        return
    for key, ask in asks.items():
        reply = ask.reply
        if isinstance(reply, ErrorReply):
            yield events.Final(response(request.id, error=translate.client_refusal_error(ask, reply)))
            return
        assert isinstance(reply, Result)
        answers[key] = reply.result
    info = child.info
    assert info is not None
    params = dict(translate.params_for_child(request.params, client, info) or {})
    params["inputResponses"] = answers
    if state is not None:
        params["requestState"] = state  # the child's own, unchanged
    async with Holdings() as stack:
        try:
            ex = await stack.enter(
                child.exchange(request.method, params, asks=True, log_level=translate.log_level(request, client))
            )
        except ChildError as exc:
            yield events.Final(response(request.id, error=exc.error_object()))
            return
        retried = next_round(Call(child, ex, stack), request, client, rounds + 1)
        async with aclosing(retried):
            async for message in retried:
                yield message
