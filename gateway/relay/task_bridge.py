"""A bridged task's run: a legacy child's own task behind a task of the gateway's.

The rules are ``gateway.protocol.taskbridge``'s. The call reached the child task-augmented
(the ``bridge_task`` steps of ``gateway.relay.steps``), and the child answered with its task;
``TaskStore.bridge`` made the gateway's task and started this run in the service's task group,
with the call's lease (as for the gateway's own runs, ``gateway.relay.task_run``: the child is
kept while its task runs). The run:

- waits in the child's ``tasks/result`` for the outcome, and settles the task with it;
- takes the questions the child sends there for its task (``_meta`` related-task, attributed by
  ``gateway.protocol.childquestions``), those read together as one round, shows them as the
  task's ``inputRequests``, and answers the child with the client's ``tasks/update`` (or lets
  the gateway answer, as for any child question, when the client cannot or does not);
- on ``tasks/cancel`` (``Run.scope``), the gateway stopping, or any end before the outcome was
  fetched, sends the child ``tasks/cancel`` with its id (``CHILD_CANCEL_TIMEOUT``).

``refresh`` answers a client's ``tasks/get`` of a working task with the child's latest
``statusMessage`` (the child's ``tasks/get``, ``CHILD_STATUS_TIMEOUT``).

``run_to_end`` is a legacy session's call that the child answered with its task
(``taskbridge`` rule 7): no task of the gateway's, the session has none. The call's stream
stays open while the relay drives the child's ``tasks/result`` as it drives any call (the
child's questions for its task go to the session there, the outcome is the call's answer),
with the call's lease; the child's task is cancelled when the call ends before it (cancelled,
timed out, its session deleted or its stream not resumed: a legacy hang-up alone ends nothing).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING, Final

import anyio

from gateway.errors import ChildError, GatewayError
from gateway.protocol import inputs, taskbridge, tasks
from gateway.protocol.jsonrpc import JsonObject, Result, error_object
from gateway.protocol.tasks import CANCELLED, WORKING
from gateway.relay import asks, events, translate
from gateway.relay.events import Emitted
from gateway.relay.suspensions import Call, Holdings
from gateway.relay.task_run import Run
from gateway.relay.translate import response
from gateway.stdio.ask import ChildAsk
from gateway.stdio.child import StdioChild
from gateway.stdio.exchange import Exchange

if TYPE_CHECKING:
    from gateway.relay.exchange import Relay
    from gateway.relay.tasks import TaskStore
    from gateway.relay.turn import Running

log = logging.getLogger("gateway.tasks")

CHILD_STATUS_TIMEOUT: Final = 5.0
"""Seconds the child has to answer the ``tasks/get`` behind a client's poll; past it the
client gets the gateway's own view of the task."""
CHILD_CANCEL_TIMEOUT: Final = 5.0
"""Seconds the child has to acknowledge ``tasks/cancel`` (shielded: the run waits that long)."""


async def run_bridged(store: TaskStore, run: Run, call: Call) -> None:
    """The bridged task's run, to its outcome; never raises into the task group."""
    task, child, child_task_id = run.task, call.child, run.child_task_id
    assert child_task_id is not None
    fetched = False
    try:
        with anyio.CancelScope() as run.scope:
            if task.is_terminal:  # cancelled before the run began
                return
            async with call.stack:  # the lease (the create call's exchange has ended)
                final = await _outcome(store, run, child, child_task_id)
            fetched = True
            _settle(store, run, final)
    except GatewayError as exc:
        _settle(store, run, response(run.request.id, error=exc.error_object()))
    except Exception:  # never into the app's task group: the task fails, with the reason logged
        log.exception("%s: bridged task %s… failed in the gateway", store.server, task.task_id[:14])
        _settle(store, run, response(run.request.id, error=error_object(-31000, "the gateway failed to run the task")))
    finally:
        run.scope = None
        if not task.is_terminal:  # the gateway is stopping
            task.fail(error_object(-31000, "the gateway stopped before the task ended"), store.now())
            store.ended(task)
        if not fetched:  # cancelled by the client, or nobody will fetch it now
            by_client = task.status == CANCELLED
            why = "cancelled by the client" if by_client else "ended before its outcome was fetched"
            await _cancel_child(store.server, child, child_task_id, f"the gateway's task {why}")


def _settle(store: TaskStore, run: Run, final: JsonObject) -> None:
    if not run.task.is_terminal:  # a task cancelled meanwhile stays cancelled (and is counted once)
        store.settle(run.task, final)


async def _outcome(store: TaskStore, run: Run, child: StdioChild, child_task_id: str) -> JsonObject:
    """Wait in the child's ``tasks/result``, taking its questions; its outcome, for the client."""
    request = run.request
    try:
        async with child.exchange(taskbridge.RESULT, {"taskId": child_task_id}, asks=True) as ex:
            async for item in ex:
                _, questions = asks.sort_items((item, *ex.ready()), request, False)
                if not questions:
                    continue
                _, more = asks.sort_items(await asks.stragglers(ex), request, False)
                # A question the child withdrew comes again, answered (withdrawn): no round for it.
                open_questions = [ask for ask in (*questions, *more) if not ask.is_answered]
                if open_questions:
                    await _round(store, run, child, open_questions)
            reply = ex.reply()
    except ChildError as exc:
        return response(request.id, error=exc.error_object())
    assert child.info is not None
    return translate.reply_for_client(request, reply, run.client, child.info)


async def _round(store: TaskStore, run: Run, child: StdioChild, questions: list[ChildAsk]) -> None:
    """Questions the child's task asked together: one round of ``inputRequests``; returns once
    the client answered, or the child's questions ended without it."""
    task, client = run.task, run.client
    forward: dict[str, ChildAsk] = {}
    for ask in questions:
        if inputs.is_declared(client.capabilities, ask.method, ask.params):
            forward[f"k{len(forward) + 1}"] = ask
        elif not asks.answer_pool_roots(ask, child):
            reason = f"the client did not declare the {translate.capability_name(ask)} capability"
            ask.answer_locally(inputs.local_answer(ask.request, child.spec.roots, reason, decline=False), reason)
    if not forward:
        return
    run.answers, run.answered = None, anyio.Event()
    task.ask({key: inputs.input_request(ask.method, ask.params) for key, ask in forward.items()}, store.now())
    store.touch(task)
    async with anyio.create_task_group() as tg:

        async def ended_without_client() -> None:  # the ask's input timeout, or the child's tasks/result ended
            for ask in forward.values():
                await ask.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(ended_without_client)
        await run.answered.wait()
        tg.cancel_scope.cancel()
    if run.answers is None:
        task.withdraw(store.now())
        store.touch(task)
        return
    for key, ask in forward.items():
        if key in run.answers:
            ask.answer_result(run.answers[key])


async def refresh(store: TaskStore, run: Run) -> None:
    """A working bridged task's ``statusMessage`` from the child's ``tasks/get`` (rule 3)."""
    child, child_task_id, task = run.child, run.child_task_id, run.task
    if child is None or child_task_id is None or task.status != WORKING:
        return
    try:
        reply = await child.request(taskbridge.GET, {"taskId": child_task_id}, timeout=CHILD_STATUS_TIMEOUT)
    except ChildError:
        return  # the gateway's own view answers; the run learns of a dead child itself
    if not isinstance(reply, Result):
        return
    _, message = taskbridge.child_status(reply.result)
    if message is not None and message != task.status_message:
        task.note(message, store.now())
        store.touch(task)


async def run_to_end(relay: Relay, call: Running, child_task_id: str) -> AsyncGenerator[Emitted]:
    """A legacy session's call that ``call.child`` made its task ``child_task_id``: the
    child's ``tasks/result``, driven as the call (its questions, then its outcome), on the
    call's stream and lease (``call.stack``, held by the caller until this ends)."""
    child, request, client = call.child, call.turn.request, call.turn.client
    fetched = False
    ex: Exchange | None = None
    try:
        async with Holdings() as stack:
            try:
                ex = await stack.enter(
                    child.exchange(
                        taskbridge.RESULT,
                        {"taskId": child_task_id},
                        asks=True,
                        log_level=translate.log_level(request, client),  # the task's logs reach the session
                    )
                )
            except GatewayError as exc:  # the child failed, or its stdin is full (never a 503: it ran)
                yield events.Final(response(request.id, error=exc.error_object()))
                return
            outcome = relay.drive(Call(child, ex, stack), request, client)
            async with aclosing(outcome):
                async for message in outcome:
                    if isinstance(message, events.Final):
                        # Its reader stops at the final message: what follows its yield may not run.
                        fetched = ex.replied
                        message = events.Final(tasks.without_related_task(message.message))
                    yield message
    finally:
        # The client left, the wait timed out, or the child failed to answer (a reply read
        # before the client left still counts as fetched).
        if not fetched and not (ex is not None and ex.replied):
            await _cancel_child(child.spec.name, child, child_task_id, "the session's call ended before it")


async def _cancel_child(server: str, child: StdioChild, child_task_id: str, why: str) -> None:
    """``tasks/cancel`` for the child's task (shielded, ``CHILD_CANCEL_TIMEOUT``), logged."""
    if not child.is_alive():
        return
    with anyio.CancelScope(shield=True):
        try:
            await child.request(taskbridge.CANCEL, {"taskId": child_task_id}, timeout=CHILD_CANCEL_TIMEOUT)
        except GatewayError as exc:  # the child died, timed out, or its stdin is full
            log.info("%s: the child's task %s could not be cancelled (%s): %s", server, child_task_id, exc, why)
            return
    log.info("%s: the child's task %s was cancelled: %s", server, child_task_id, why)
