"""A task's run: a call that became a task, driven in the app's task group (``TaskStore``).

The run drives the exchange as the relay does for any modern call (``Relay.drive``): progress
becomes the task's ``statusMessage``; a question of the child (or a modern child's
``input_required``) parks the call for an MRTR round exactly as for a client that retries,
and the task shows the round's ``inputRequests`` (under task-level keys) until
``tasks/update`` answers every one (or the child withdraws them all: then at once, with no
answers); the run then retries with the answers
(``Relay.exchange`` with ``inputResponses`` and the round's ``requestState``). Unanswered
within the server's ``--input-timeout``: the task fails (-31007), and the parked call ends at
the child as for any abandoned retry. ``tasks/cancel`` cancels the run (``Run.scope``); a
round still parked is then taken and closed at once (``release``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from gateway.errors import CODE_INPUT_TIMEOUT, GATEWAY_NAME, GatewayError
from gateway.protocol.jsonrpc import JsonObject, Request, error_object
from gateway.protocol.tasks import Task
from gateway.relay import events
from gateway.relay.client import ClientContext
from gateway.relay.rejected import Rejected
from gateway.relay.suspensions import Call, Suspension
from gateway.relay.translate import response
from gateway.stdio.ask import ChildAsk
from gateway.stdio.child import StdioChild

if TYPE_CHECKING:
    from gateway.relay.exchange import Relay
    from gateway.relay.tasks import TaskStore

log = logging.getLogger("gateway.tasks")


@dataclass
class Run:
    """A task and what its run needs: the cancel scope, the parked round, the answers."""

    task: Task
    request: Request
    client: ClientContext
    scope: anyio.CancelScope | None = None
    state: str | None = None  # the parked round's requestState
    answers: dict[str, JsonObject] | None = None
    answered: anyio.Event = field(default_factory=anyio.Event)
    child: StdioChild | None = None  # a bridged task's child (``gateway.relay.task_bridge``)
    child_task_id: str | None = None  # and the child's own id for it
    release: Callable[[], None] | None = None  # stops a drain's count of it (``TaskStore``'s drain)

    def let_go(self) -> None:
        """A drain no longer waits for this task (each time after the first: nothing)."""
        release, self.release = self.release, None
        if release is not None:
            release()


async def run_task(store: TaskStore, relay: Relay, run: Run, call: Call) -> None:
    """The task's run, to its outcome (kept by ``store``); never raises into the task group."""
    task = run.task
    try:
        with anyio.CancelScope() as run.scope:
            if task.is_terminal:  # cancelled before the run began
                return
            async with call.stack:  # a parked round takes the holdings over (asks.park)
                final = await _consume(store, run, relay.drive(call, run.request, run.client))
            while final is not None and not task.is_terminal:
                result = final.get("result")
                if not _is_round(result):
                    store.settle(task, final)
                    return
                assert isinstance(result, dict)
                final = await _input_round(store, relay, run, call, result)
    except Rejected as exc:  # a round's retry refused (its parked call ended meanwhile)
        store.settle(task, response(run.request.id, error=exc.rejection.error))
    except GatewayError as exc:  # no child for a retry (503, 429), or the command cannot start
        store.settle(task, response(run.request.id, error=exc.error_object()))
    except Exception:  # never into the app's task group: the task fails, with the reason logged
        log.exception("%s: task %s… failed in the gateway", store.server, task.task_id[:14])
        failure = error_object(-31000, "the gateway failed to run the task")
        store.settle(task, response(run.request.id, error=failure))
    finally:
        run.scope = None
        if not task.is_terminal:  # the gateway is stopping
            task.fail(error_object(-31000, "the gateway stopped before the task ended"), store.now())
            store.ended(task)
        if run.state is not None:  # a round still parked: end it now (cancelled, or stopping)
            await release(relay, run)


async def _input_round(store: TaskStore, relay: Relay, run: Run, call: Call, result: JsonObject) -> JsonObject | None:
    """Show the round's questions on the task, wait for ``tasks/update``, retry with the answers."""
    task = run.task
    wanted = result.get("inputRequests")
    run.state = result.get("requestState") if isinstance(result.get("requestState"), str) else None
    task.ask(wanted if isinstance(wanted, dict) else {}, store.now())
    store.touch(task)
    timeout = call.child.spec.input_timeout
    run.answers, run.answered = None, anyio.Event()
    parked = relay.suspensions.questions_of(run.state) if run.state is not None else []
    with anyio.move_on_after(timeout):
        async with anyio.create_task_group() as tg:
            if parked:
                tg.start_soon(_until_withdrawn, run, parked)
            await run.answered.wait()
            tg.cancel_scope.cancel()
    if run.answers is None:
        task.fail(
            error_object(
                CODE_INPUT_TIMEOUT,
                f"the client did not answer the task's input requests within {timeout:g} s",
                {"source": GATEWAY_NAME, "timeout_seconds": timeout},
            ),
            store.now(),
        )
        store.ended(task)
        return None  # the parked round ends at its own timeout (or now, in the finally)
    params = dict(run.request.params or {})
    params["inputResponses"] = run.answers
    if run.state is not None:
        params["requestState"] = run.state
    run.state = None  # the retry takes the round over
    retry = Request(run.request.id, run.request.method, params)
    return await _consume(store, run, relay.exchange(retry, run.client))


async def _until_withdrawn(run: Run, parked: list[ChildAsk]) -> None:
    """The round's questions all withdrawn by the child (``notifications/cancelled``): nothing is
    left to answer, so the run goes on at once, its retry answering nothing (the child's own
    outcome follows), rather than show them until the input timeout."""
    for ask in parked:
        await ask.wait()
    if all(ask.withdrawn for ask in parked) and not run.answered.is_set():
        run.answers = {}
        run.answered.set()


async def _consume(store: TaskStore, run: Run, exchange: AsyncGenerator[events.Emitted, None]) -> JsonObject | None:
    """The exchange's final message; its progress becomes the task's ``statusMessage``."""
    async with aclosing(exchange):
        async for event in exchange:
            if type(event) is events.Final:
                return event.message
            for note in event.notes if type(event) is events.Batch else (event,):
                if type(note) is events.Progress:
                    run.task.note(_progress_text(note.message), store.now())
                    store.touch(run.task)
    return None


async def release(relay: Relay, run: Run) -> None:
    """End a parked round at once (the task was cancelled, or the gateway stops)."""
    state, run.state = run.state, None
    assert state is not None
    taken = relay.suspensions.take(state, run.request, run.client.principal)
    if not isinstance(taken, Suspension):
        return  # already ended at its own timeout
    for ask in taken.asks.values():
        ask.answer_error(CODE_INPUT_TIMEOUT, "the task was cancelled")
    with anyio.CancelScope(shield=True):
        await taken.call.stack.aclose()


def _is_round(result: object) -> bool:
    """An MRTR ``input_required`` (the gateway's parked call, or a modern child's own round),
    to run as a task's round."""
    return isinstance(result, dict) and result.get("resultType") == "input_required"


def _progress_text(message: JsonObject) -> str:
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    progress, total, text = params.get("progress"), params.get("total"), params.get("message")
    done = f"{progress:g}/{total:g}" if isinstance(progress, int | float) and isinstance(total, int | float) else None
    if done is None and isinstance(progress, int | float):
        done = f"{progress:g}"
    return " — ".join(part for part in (done, text if isinstance(text, str) else None) if part) or "working"
