"""The child's questions in an exchange, and the MRTR rounds of a modern client.

**Questions from the child** (sampling, elicitation; roots on a session's own child) that the
child attributed to an exchange (``gateway.stdio.child``) go to the client when it declared
the capability (``gateway.protocol.inputs``), else the gateway answers them itself. Each read
of the exchange (``Relay.run``), in this order:

1. the client's notifications and the child's questions among what was read (``sort_items``);
2. for a modern client's ``tools/call``, ``prompts/get`` or ``resources/read``: the questions
   the child sends within ``ASK_GATHER_WINDOW`` of the first (``stragglers``), so that those
   sent together go out in one round;
3. a shared child's ``roots/list`` is answered with its pool's roots, never a client's
   (``answer_pool_roots``);
4. the others go to the client:

   - a *legacy* client gets each as a JSON-RPC request on this request's stream, with a
     gateway id (``g-N``, unique in its session); its POSTed response is handed to the child
     under the child's own id (``LegacySession.answer_ask``; ``ask_legacy_client``);
   - a *modern* client gets an MRTR round (``ask_modern_client``): the response ends with
     ``input_required`` and a signed ``requestState`` while the child call stays parked
     (``park``, ``gateway.relay.suspensions``); the retry answers the child and the rest of
     the call is streamed on the retry, under its id (``resume``). A sampling or elicitation
     request the client's ``clientCapabilities`` do not cover ends the call with -32021
     (``requiredCapabilities``) and cancels it at the child.

A question the child withdraws (its ``notifications/cancelled`` names it) comes back to the
exchange withdrawn: a legacy client gets ``notifications/cancelled`` naming the ``g-N`` it got
it under, on this request's stream (``withdrawal``), and its answer, if it still sends one,
reaches nobody; a modern client cannot be told mid-round, and the answer its retry carries
for it is dropped.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable
from contextlib import aclosing
from typing import Final

import anyio

from gateway.protocol import inputs, taskbridge, urlelicitation
from gateway.protocol.correlation import CANCELLED
from gateway.protocol.jsonrpc import JsonObject, Request
from gateway.relay import events, translate
from gateway.relay.client import ClientContext
from gateway.relay.events import Emitted
from gateway.relay.suspensions import Call, Suspension, Suspensions, input_responses
from gateway.relay.translate import response
from gateway.relay.turn import Collaborators, Running, Turn
from gateway.stdio.ask import ChildAsk
from gateway.stdio.child import StdioChild
from gateway.stdio.exchange import Exchange, ExchangeItem

ASK_GATHER_WINDOW: Final = 0.010
"""Seconds a modern client's MRTR round waits, after a child's first question, for the others
the child sends with it: questions written at once (from threads, or one after another
without waiting) but read apart then go out in one ``InputRequiredResult``. Measured on the
shared 2-core test machine (docs/bridging.md): three questions a Python child sends from
three threads at once were read together in 4 of 20 runs, and otherwise within 0.2–4.1 ms
(median 0.8 ms) of the first; 10 ms covers that with room, and is all a round costs more. A
legacy client gets each question at once, without this wait."""


def sort_items(
    items: Iterable[ExchangeItem], request: Request, resumed: bool
) -> tuple[list[events.Progress | events.Notification], list[ChildAsk]]:
    """The client's notifications and the child's questions among ``items``."""
    notes: list[events.Progress | events.Notification] = []
    asks: list[ChildAsk] = []
    for got in items:
        if isinstance(got, ChildAsk):
            asks.append(got)
        elif (note := translate.note_for_client(got, request, resumed)) is not None:
            notes.append(events.notification(note))
    return notes, asks


async def stragglers(ex: Exchange) -> list[ExchangeItem]:
    """What the child sends within ``ASK_GATHER_WINDOW`` of a question (more questions, most
    likely, written apart from it by a child that asks several at once); nothing is lost
    when the window closes mid-wait (the inbox keeps it for the next read)."""
    got: list[ExchangeItem] = []
    with anyio.move_on_after(ASK_GATHER_WINDOW):  # read at call time (a test widens it)
        while True:
            try:
                got.append(await ex.__anext__())
            except StopAsyncIteration:
                break
            got += ex.ready()
    return got


def answer_pool_roots(ask: ChildAsk, child: StdioChild) -> bool:
    """Answer a shared child's ``roots/list`` with its pool's roots (``Router``: the roots set
    of its pool's key, else the configured roots, else an error); False for other questions."""
    if ask.method != inputs.ROOTS:
        return False
    reason = "a shared child is given its pool's roots only" if child.spec.roots is not None else "no roots configured"
    ask.answer_locally(inputs.local_answer(ask.request, child.spec.roots, reason), reason)
    return True


def ask_legacy_client(ask: ChildAsk, client: ClientContext, call: Call) -> JsonObject | None:
    """The request to put on a legacy client's stream, or None when the gateway answered."""
    session = client.session
    if session is None or not client.accepts_requests:
        reason = "the client's request cannot carry a request back (a batch)"
    elif not inputs.is_declared(client.capabilities, ask.method, ask.params):
        reason = f"the client did not declare the {translate.capability_name(ask)} capability"
    else:
        gateway_id: str = session.track_ask(ask)
        # A URL elicitation's completion may follow it, unsolicited.
        session.url_elicitations.extend(urlelicitation.question_ids(ask.method, ask.params))
        return Request(gateway_id, ask.method, taskbridge.for_session(ask.params)).to_dict()
    # A clear error, not a made-up answer: this client is there, it just cannot be asked.
    ask.answer_locally(inputs.local_answer(ask.request, call.child.spec.roots, reason, decline=False), reason)
    return None


def withdrawal(ask: ChildAsk, client: ClientContext) -> events.Notification | None:
    """A question the child cancelled, for the legacy client it went to: a
    ``notifications/cancelled`` naming the id the client got it under (the client's answer, if
    one comes, is then nobody's). None when the client never got it (the gateway answered)."""
    session = client.session
    gateway_id = session.forget_ask(ask) if session is not None else None
    if gateway_id is None:
        return None
    params: JsonObject = {"requestId": gateway_id}
    if ask.withdrawn_reason:
        params["reason"] = ask.withdrawn_reason
    return events.Notification({"jsonrpc": "2.0", "method": CANCELLED, "params": params})


def ask_modern_client(
    suspensions: Suspensions,
    asks: list[ChildAsk],
    request: Request,
    client: ClientContext,
    call: Call,
    waited: float = 0.0,
    *,
    task_at_retry: bool = False,
) -> JsonObject | None:
    """An MRTR round: the final message (``input_required`` or -32021), or None when the
    gateway answered every question itself and the call goes on. ``task_at_retry``: the call
    becomes a task at the round's retry (``steps.start_task``)."""
    roots = call.child.spec.roots
    forward: dict[str, ChildAsk] = {}
    missing: list[ChildAsk] = []
    for ask in asks:
        if request.method not in inputs.MRTR_METHODS:
            reason = f"{request.method} cannot return input_required to a 2026-07-28 client"
        elif urlelicitation.unusable_question(ask.method, ask.params):
            reason = urlelicitation.UNUSABLE_URL  # not for a modern client's round: the child is told
            ask.answer_locally(inputs.local_answer(ask.request, roots, reason, decline=False), reason)
            continue
        elif inputs.is_declared(client.capabilities, ask.method, ask.params):
            forward[f"k{len(forward) + 1}"] = ask
            continue
        elif ask.method == inputs.ROOTS:  # roots have a local answer: never fail the call over them
            reason = "the request's clientCapabilities do not declare roots"
        else:
            missing.append(ask)
            continue
        ask.answer_locally(inputs.local_answer(ask.request, roots, reason), reason)
    if missing:
        # The caller returns after this final message: the call is cancelled at the child,
        # and its end answers every question still open.
        required = inputs.merge_capabilities(*(inputs.required_capability(a.method, a.params) for a in missing))
        return response(request.id, error=inputs.missing_capability_error(missing[0].method, required))
    if not forward:
        return None
    if not suspensions.can_park:
        for ask in forward.values():
            reason = "the gateway holds too many calls for input now"
            ask.answer_locally(inputs.local_answer(ask.request, roots, reason), reason)
        return None
    return park(suspensions, call, forward, request, client, waited, task_at_retry=task_at_retry)


def park(
    suspensions: Suspensions,
    call: Call,
    asks: dict[str, ChildAsk],
    request: Request,
    client: ClientContext,
    waited: float = 0.0,
    *,
    task_at_retry: bool = False,
) -> JsonObject:
    """Hold the call for the retry, until the input timeout counted from the first
    question (``waited``: seconds since, spent gathering the others)."""
    # The lease and exchange now outlive this response.
    parked = Call(call.child, call.ex, call.stack.pop_all(), call.runs_as_task)
    spec = call.child.spec
    # A task's round waits for tasks/update; a client's, for a retry that may never come.
    hold = spec.input_timeout if call.runs_as_task else min(spec.input_timeout, spec.round_timeout)
    timeout = max(hold - waited, 0.0)
    token = suspensions.park(
        parked,
        asks,
        request,
        client.principal,
        timeout,
        charged=client.charged,
        task_request=request if task_at_retry else None,
    )
    wanted = {key: inputs.input_request(ask.method, ask.params) for key, ask in asks.items()}
    return response(request.id, result=inputs.input_required_result(wanted, token))


async def resume(deps: Collaborators, turn: Turn, taken: Suspension) -> AsyncGenerator[Emitted]:
    """A modern retry of a parked call (``taken``): answer its questions, then stream the rest."""
    request, client, suspensions = turn.request, turn.client, deps.suspensions
    call = Running.on(taken.call, turn)
    call.resumed = True
    client.bind(call.child)
    async with call.stack:
        given = input_responses(request.params)
        unanswered: dict[str, ChildAsk] = {}
        for key, ask in taken.asks.items():
            if key in given:
                ask.answer_result(given[key])
            elif not ask.is_answered:
                unanswered[key] = ask
        if unanswered and suspensions.can_park:  # MRTR §Error Handling: ask again, no error
            again = park(suspensions, call, unanswered, request, client, task_at_retry=taken.task_request is not None)
            yield events.Final(again)
            return
        for ask in unanswered.values():
            reason = "the retry left it unanswered"
            ask.answer_locally(inputs.local_answer(ask.request, call.child.spec.roots, reason), reason)
        if (handle := as_task(deps, turn, taken)) is not None:
            yield events.Final(handle)
            return
        driven = deps.relay.run(call)
        async with aclosing(driven):
            async for message in driven:
                yield message


def as_task(deps: Collaborators, turn: Turn, taken: Suspension) -> JsonObject | None:
    """The round's retry of a call that may become a task (``steps.start_task``): the call goes
    on as a task now, and the answer is its ``CreateTaskResult`` (no ``requestState``: the
    round is over). None when it runs on here (no task wanted now: the store's bounds)."""
    first, tasks, call = taken.task_request, deps.tasks, taken.call
    if first is None:
        return None
    # The task runs the call as it began (its progress token); its answer carries this id.
    request = Request(turn.request.id, first.method, first.params)
    if not tasks.wants(request, turn.client, deps.catalog.task_support(call.child, request.params)):
        return None
    return tasks.create(deps.relay, Call(call.child, call.ex, call.stack.pop_all(), True), request, turn.client)
