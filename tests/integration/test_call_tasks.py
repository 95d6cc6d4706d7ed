"""``call`` and the Tasks extension: a call answered with a task handle is polled to its end.

The gateway makes a task of the test server's ``sleep`` (marked ``execution.taskSupport`` by
the legacy-only child) and of ``ask_client`` (named with ``--task-tool``); ``call`` declares the
extension on every modern request, polls ``tasks/get``, answers a task's questions with
``tasks/update`` and keeps polling through a dropped connection.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest

from gateway.protocol import tasks
from gateway.relay.router import Router
from gateway.relay.server_config import ROOTS_LEARN_WAIT, ServerConfig
from gateway.stdio.pool import PoolSettings
from tests.conftest import server_spec
from tests.gateway_server import app_for, serving
from tests.integration.test_call_cli import Recorder, call

pytestmark = pytest.mark.anyio

WAIT = 30.0


@asynccontextmanager
async def gateway(
    first_round: float = tasks.DEFAULT_FIRST_ROUND, roots_learn_wait: float = ROOTS_LEARN_WAIT
) -> AsyncIterator[str]:
    """``first_round``: 0 makes a call that asks at once a task at once (its questions on the task).
    ``roots_learn_wait``: 0 for a call with roots that need not wait to learn the test server
    fetches none at start-up."""
    spec = server_spec("--era", "legacy", "--task-support", "sleep")
    server = ServerConfig(
        "test",
        spec,
        PoolSettings(max_size=2),
        roots_learn_wait=roots_learn_wait,
        task_tools=("ask_client",),
        task_first_round=first_round,
    )
    with anyio.fail_after(WAIT):
        async with serving(app_for(Router(server))) as base:
            yield f"{base}/mcp"


def polls(recorder: Recorder) -> list[httpx.Request]:
    return recorder.posted(tasks.GET)


async def test_call_polls_a_task_to_its_result_naming_the_task_in_mcp_name() -> None:
    recorder = Recorder()
    async with gateway() as url:
        run = await call(url, "--mode", "modern", "sleep", "--arg", "ms=300", transport=recorder)
    assert run.code == 0, run.err
    assert "slept" in run.out
    [created] = recorder.posted("tools/call")
    declared = json.loads(created.content)["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    assert declared["extensions"] == {tasks.EXTENSION: {}}
    assert polls(recorder)
    task_id = json.loads(polls(recorder)[0].content)["params"]["taskId"]
    assert all(request.headers["mcp-name"] == task_id for request in polls(recorder))


async def test_a_tasks_roots_question_reaches_call_which_answers_it_with_its_roots() -> None:
    """A call that declares roots (``--root``) on a server that keeps none (it fetches no roots
    outside a call) gets no round before its child is chosen (issue #36): the task's own
    ``roots/list`` reaches ``call`` as the task's input request, and its answer (``tasks/update``)
    gives the child exactly those roots."""
    recorder = Recorder()
    arguments = json.dumps({"requests": [{"method": "roots/list", "params": {}}]})
    async with gateway(first_round=0) as url:
        run = await call(
            url, "--mode", "modern", "--root", "/srv/project", "ask_client", "--json", arguments, transport=recorder
        )
    assert run.code == 0, run.err[-2000:]
    assert "file:///srv/project" in run.out
    [first] = recorder.posted("tools/call")  # one call: no round of the gateway's first
    assert "requestState" not in json.loads(first.content)["params"]
    [update] = recorder.posted(tasks.UPDATE)
    answered = json.dumps(json.loads(update.content)["params"])
    assert '"file:///srv/project"' in answered, answered


async def test_call_answers_round_one_of_a_tool_that_asks_at_once_then_polls_the_task_its_retry_made() -> None:
    """tasks-mrtr-composition through ``call``: the child asks at once, so the first answer is
    a synchronous round (no task yet); ``call`` answers it with its roots in the retry, whose
    answer is the task handle; the task's result carries those roots."""
    recorder = Recorder()
    arguments = json.dumps({"requests": [{"method": "roots/list", "params": {}}]})
    async with gateway(roots_learn_wait=0) as url:
        run = await call(
            url, "--mode", "modern", "--root", "/srv/project", "ask_client", "--json", arguments, transport=recorder
        )
    assert run.code == 0, run.err[-2000:]
    assert "file:///srv/project" in run.out
    first, retry = (json.loads(posted.content)["params"] for posted in recorder.posted("tools/call"))
    assert "requestState" not in first
    assert "requestState" in retry
    assert '"file:///srv/project"' in json.dumps(retry["inputResponses"])
    assert polls(recorder)
    assert not recorder.posted(tasks.UPDATE)


class DropsPolls(Recorder):
    """Fails the first two ``tasks/get`` as a dropped connection would."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and json.loads(request.content).get("method") == tasks.GET and self.dropped < 2:
            self.dropped += 1
            raise httpx.ConnectError("connection reset by a proxy", request=request)
        return await super().handle_async_request(request)


async def test_call_keeps_polling_through_a_dropped_connection_and_gets_the_result() -> None:
    recorder = DropsPolls()
    async with gateway() as url:
        run = await call(url, "--mode", "modern", "sleep", "--arg", "ms=200", transport=recorder)
    assert run.code == 0, run.err
    assert "slept" in run.out
    assert recorder.dropped == 2


class SeesPolls(Recorder):
    """Sets ``polled`` once ``call`` has polled its task."""

    def __init__(self) -> None:
        super().__init__()
        self.polled = anyio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if request.method == "POST" and json.loads(request.content).get("method") == tasks.GET:
            self.polled.set()
        return response


async def test_an_interrupted_call_cancels_its_task_at_the_gateway() -> None:
    recorder = SeesPolls()
    async with gateway() as url, anyio.create_task_group() as tg:

        async def interrupted() -> None:
            await call(url, "--mode", "modern", "sleep", "--arg", "ms=60000", transport=recorder)

        tg.start_soon(interrupted)
        await recorder.polled.wait()
        tg.cancel_scope.cancel()  # as Ctrl-C would end it
    [cancel] = recorder.posted(tasks.CANCEL)
    [created] = recorder.posted(tasks.GET)[:1]
    assert json.loads(cancel.content)["params"]["taskId"] == json.loads(created.content)["params"]["taskId"]
