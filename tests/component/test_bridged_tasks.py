"""Tasks bridged to a legacy child that keeps its own (2025-11-25 tasks; issue #38 items 1–3).

A fake task server (``faketasks``: server-everything's ``simulate-research-query`` in small)
behind the in-process gateway. A modern client that opts in to the Tasks extension gets a task
of the gateway's; the child gets the task-augmented call, its ``tasks/get`` behind the client's
polls, its ``tasks/result`` for the outcome (with the task's questions), the client's answers
as the responses to those questions, and ``tasks/cancel``. Waits are on the task store's
change event and the fake's events, each under ``fail_after``; what the gateway emits is
checked against the official schemas (the 2025-11-25 ones for what the child reads).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from gateway.http.auth import TokenStore
from gateway.protocol import tasks as rules
from gateway.protocol.attribution import AskPolicy
from gateway.protocol.jsonrpc import INVALID_PARAMS, MISSING_CLIENT_CAPABILITY
from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from gateway.relay.tasks import TaskStore
from gateway.stdio.pool import PoolSettings
from tests.component.fakechild import FakeBackend, FakeChild, Script
from tests.component.faketasks import RELATED, FakeTasks
from tests.component.harness import FAKE_SPEC, Gateway, in_process_servers
from tests.gateway_server import MODERN_META, modern_headers
from tests.schemas import validate

pytestmark = [pytest.mark.anyio, pytest.mark.component]

WAIT = 10.0
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
WITH_TASKS = {CAPABILITIES_KEY: {"extensions": {rules.EXTENSION: {}}, "elicitation": {}}}
WITHOUT_TASKS = {CAPABILITIES_KEY: {"elicitation": {}}}
TOKENS = tuple(f"token-{n}-0123456789abcdef" for n in range(3))


class Client:
    """One principal's modern client of the gateway."""

    def __init__(self, gw: Gateway, store: TaskStore, token: str) -> None:
        self.gw, self.store = gw, store
        self.auth = {"authorization": f"Bearer {token}"}
        self.ids = iter(range(1, 1_000_000))

    async def post(self, method: str, params: dict[str, Any], name: str | None = None) -> Any:
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        return await self.gw.http.post(self.gw.url, headers={**modern_headers(method, name), **self.auth}, json=body)

    async def call(self, tool: str, arguments: dict[str, Any], declared: dict[str, Any] = WITH_TASKS) -> Any:
        params = {"name": tool, "arguments": arguments, "_meta": {**MODERN_META, **declared}}
        return await self.post("tools/call", params, tool)

    async def created(self, tool: str, arguments: dict[str, Any]) -> str:
        reply = await self.call(tool, arguments)
        assert reply.status_code == 200, reply.text
        result = reply.json()["result"]
        assert result["resultType"] == "task", result
        assert result["status"] == rules.WORKING
        assert set(result) <= {"resultType", "taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs"} | {
            "pollIntervalMs",
            "statusMessage",
        }
        task_id: str = result["taskId"]
        return task_id

    async def task(self, method: str, task_id: str, **more: Any) -> Any:
        params = {"taskId": task_id, **more, "_meta": {**MODERN_META, **WITH_TASKS}}
        return await self.post(method, params, task_id)

    async def get(self, task_id: str) -> dict[str, Any]:
        reply = await self.task(rules.GET, task_id)
        assert reply.status_code == 200, reply.text
        result: dict[str, Any] = reply.json()["result"]
        assert result["resultType"] == "complete"
        assert "requestState" not in result
        return result

    async def until(self, task_id: str, done: Callable[[str | None], bool]) -> dict[str, Any]:
        """The task once ``done(status)`` holds, waiting on the store's changes (no polling)."""
        with anyio.fail_after(WAIT):
            while not done(self.store.status(task_id)):
                await self.store.changed()
        return await self.get(task_id)


@asynccontextmanager
async def bridged(
    tasks: FakeTasks, pool: PoolSettings | None = None
) -> AsyncIterator[tuple[FakeBackend, list[Client]]]:
    server = ServerConfig("test", FAKE_SPEC, pool or PoolSettings(max_size=4))
    async with FakeBackend(tasks.script()).running_in() as backend:
        router = Router(server, backend=backend)
        async with in_process_servers([router], tokens=TokenStore(TOKENS)) as gw:
            store = gw.app.state.task_stores["test"]
            yield backend, [Client(gw, store, token) for token in TOKENS]


def received(child: FakeChild, method: str) -> list[dict[str, Any]]:
    return [m for m in child.received if m.get("method") == method]


def answers_to_child(child: FakeChild) -> list[dict[str, Any]]:
    return [m for m in child.received if "method" not in m and str(m.get("id", "")).startswith("s-")]


def status_is(*wanted: str) -> Callable[[str | None], bool]:
    return lambda status: status in wanted


async def test_a_bridged_task_relays_the_childs_question_and_polls_to_its_result() -> None:
    tasks = FakeTasks()
    async with bridged(tasks) as (backend, [client, *_]):
        task_id = await client.created("research", {"topic": "alpha", "ask": 1})
        [child] = [c for c in backend.children if received(c, "tools/call")]
        [augmented] = received(child, "tools/call")
        validate(augmented, "CallToolRequest", "2025-11-25")
        assert augmented["params"]["task"] == {"ttl": round(rules.DEFAULT_TTL * 1000)}
        assert not any(key.startswith("io.modelcontextprotocol/") for key in augmented["params"].get("_meta", {}))

        waiting = await client.until(task_id, status_is(rules.INPUT_REQUIRED))
        [waited] = received(child, "tasks/result")
        validate(waited, "GetTaskPayloadRequest", "2025-11-25")
        assert waited["params"]["taskId"] == tasks.by_topic("alpha").task_id
        validate(waiting["inputRequests"], "InputRequests")
        [(key, question)] = waiting["inputRequests"].items()
        assert question["method"] == "elicitation/create"
        assert question["params"]["message"] == "alpha: question 1?"
        assert "_meta" not in question["params"]  # the child's task id stays the gateway's to know

        answer = {"action": "accept", "content": {"pick": "technical"}}
        validate({key: answer}, "InputResponses")
        ack = await client.task(rules.UPDATE, task_id, inputResponses={key: answer})
        assert ack.json()["result"] == {"resultType": "complete"}
        done = await client.until(task_id, status_is(rules.COMPLETED))
        [reply] = answers_to_child(child)
        validate(reply, "JSONRPCResultResponse", "2025-11-25")
        validate(reply["result"], "ElicitResult", "2025-11-25")
        assert reply["result"] == answer
        validate(done["result"], "CallToolResult")
        assert done["result"]["content"][0]["text"] == f"report on alpha; answers: {answer}"
        assert RELATED not in done["result"].get("_meta", {})


async def test_questions_a_task_asks_together_are_surfaced_together() -> None:
    tasks = FakeTasks()
    async with bridged(tasks) as (_, [client, *_]):
        task_id = await client.created("research", {"topic": "beta", "ask": 2})
        waiting = await client.until(task_id, status_is(rules.INPUT_REQUIRED))
        assert sorted(q["params"]["message"] for q in waiting["inputRequests"].values()) == [
            "beta: question 1?",
            "beta: question 2?",
        ]
        keys = {q["params"]["message"]: key for key, q in waiting["inputRequests"].items()}
        first, second = keys["beta: question 1?"], keys["beta: question 2?"]
        await client.task(rules.UPDATE, task_id, inputResponses={first: {"action": "accept", "content": {"pick": "1"}}})
        still = await client.get(task_id)  # the round goes on once every question is answered
        assert still["status"] == rules.INPUT_REQUIRED
        assert list(still["inputRequests"]) == [second]
        await client.task(rules.UPDATE, task_id, inputResponses={second: {"action": "decline"}})
        done = await client.until(task_id, status_is(rules.COMPLETED))
        assert done["result"]["content"][0]["text"] == (
            "report on beta; answers: {'action': 'accept', 'content': {'pick': '1'}}, {'action': 'decline'}"
        )


async def test_a_bridged_tasks_status_is_the_childs_and_its_cancel_reaches_the_child() -> None:
    tasks = FakeTasks()
    async with bridged(tasks) as (backend, [client, *_]):
        task_id = await client.created("research", {"topic": "gamma"})
        child_task = tasks.by_topic("gamma")
        child_task.message = "halfway there"
        working = await client.get(task_id)
        assert working["status"] == rules.WORKING
        assert working["statusMessage"] == "halfway there"

        ack = await client.task(rules.CANCEL, task_id)
        assert ack.json()["result"] == {"resultType": "complete"}
        await backend.until(lambda: child_task.status == "cancelled")
        [child] = [c for c in backend.children if received(c, "tasks/cancel")]
        [cancel] = received(child, "tasks/cancel")
        validate(cancel, "CancelTaskRequest", "2025-11-25")
        assert cancel["params"]["taskId"] == child_task.task_id
        assert (await client.get(task_id))["status"] == rules.CANCELLED
        again = await client.task(rules.CANCEL, task_id)  # idempotent; the child is not asked again
        assert again.json()["result"] == {"resultType": "complete"}
        assert len(received(child, "tasks/cancel")) == 1


async def test_concurrent_clients_on_one_child_each_get_their_own_task_and_questions() -> None:
    tasks = FakeTasks()
    # One child for all three: each question is routed by the task it names, not by who may ask.
    async with bridged(tasks, PoolSettings(max_size=1, child_asks=AskPolicy.NEVER)) as (backend, clients):
        topics = [f"topic-{n}" for n in range(3)]
        ids = [""] * 3

        async def start(n: int) -> None:
            ids[n] = await clients[n].created("research", {"topic": topics[n], "ask": 1})

        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(start, n)
        assert len(backend.children) == 1
        for n, client in enumerate(clients):
            waiting = await client.until(ids[n], status_is(rules.INPUT_REQUIRED))
            [question] = waiting["inputRequests"].values()
            assert question["params"]["message"] == f"{topics[n]}: question 1?"
            other = await clients[(n + 1) % 3].task(rules.GET, ids[n])
            assert other.json()["error"]["code"] == INVALID_PARAMS  # another principal's: no such task
        for n in reversed(range(3)):  # answered in another order than asked
            [key] = (await clients[n].get(ids[n]))["inputRequests"]
            answer = {"action": "accept", "content": {"pick": topics[n]}}
            await clients[n].task(rules.UPDATE, ids[n], inputResponses={key: answer})
        for n, client in enumerate(clients):
            done = await client.until(ids[n], status_is(rules.COMPLETED))
            assert done["result"]["content"][0]["text"] == (
                f"report on {topics[n]}; answers: {{'action': 'accept', 'content': {{'pick': '{topics[n]}'}}}}"
            )


async def test_a_tool_that_runs_only_as_a_task_is_refused_to_a_client_that_did_not_opt_in() -> None:
    tasks = FakeTasks()
    async with bridged(tasks) as (backend, [client, *_]):
        refused = await client.call("research", {"topic": "delta"}, WITHOUT_TASKS)
        assert refused.status_code == 400
        body = refused.json()
        validate(body, "MissingRequiredClientCapabilityError")
        assert body["error"]["code"] == MISSING_CLIENT_CAPABILITY
        assert body["error"]["data"]["requiredCapabilities"] == {"extensions": {rules.EXTENSION: {}}}
        assert not tasks.tasks
        assert not any(received(child, "tools/call") for child in backend.children)

        plain = await client.call("maybe", {"topic": "epsilon"}, WITHOUT_TASKS)  # optional: synchronous
        assert plain.status_code == 200
        assert plain.json()["result"]["content"][0]["text"] == "done at once: epsilon"
        [child] = [c for c in backend.children if received(c, "tools/call")]
        assert "task" not in received(child, "tools/call")[0]["params"]

        task_id = await client.created("maybe", {"topic": "zeta", "ask": 1})  # optional, opted in: a task
        assert await client.until(task_id, status_is(rules.INPUT_REQUIRED))
        await client.task(rules.CANCEL, task_id)
        await backend.until(lambda: tasks.by_topic("zeta").status == "cancelled")


async def test_a_question_the_child_asks_before_its_task_exists_is_answered_synchronously() -> None:
    """tasks-mrtr-composition: a first-round question comes back as ``input_required`` on the
    call itself; its retry gets the task handle."""
    tasks = FakeTasks()

    async def asks_first(call: Any) -> Any:  # asks before it hands out its task
        question = {"message": "which?", "requestedSchema": {"type": "object"}}
        answer = await call.child.ask("elicitation/create", question)
        call.arguments["topic"] = str(answer.get("result", {}).get("content", {}).get("pick"))
        return await tasks.tool(call)

    script = tasks.script()
    script = Script(**{**script.__dict__, "tools": {**script.tools, "research": asks_first}})
    server = ServerConfig("test", FAKE_SPEC, PoolSettings(max_size=2))
    backend = FakeBackend(script)
    router = Router(server, backend=backend)
    async with backend.running_in(), in_process_servers([router], tokens=TokenStore(TOKENS)) as gw:
        client = Client(gw, gw.app.state.task_stores["test"], TOKENS[0])
        first = await client.call("research", {})
        round_one = first.json()["result"]
        assert round_one["resultType"] == "input_required"
        [key] = round_one["inputRequests"]
        params = {
            "name": "research",
            "arguments": {},
            "inputResponses": {key: {"action": "accept", "content": {"pick": "eta"}}},
            "requestState": round_one["requestState"],
            "_meta": {**MODERN_META, **WITH_TASKS},
        }
        retry = await client.post("tools/call", params, "research")
        assert "result" in retry.json(), retry.text
        handle = retry.json()["result"]
        assert handle["resultType"] == "task", handle
        assert tasks.by_topic("eta").call.task is not None
        tasks.by_topic("eta").release()
        done = await client.until(handle["taskId"], status_is(rules.COMPLETED))
        assert done["result"]["content"][0]["text"] == "report on eta; answers: none"


async def test_questions_the_gateways_own_task_run_meets_together_are_one_round() -> None:
    """tasks-mrtr-input for a task the gateway runs itself (a child without tasks, the tool
    named by ``--task-tool``): two questions asked at once are two ``inputRequests`` entries."""

    async def two_questions(call: Any) -> Any:
        picks: list[Any] = [None, None]

        async def ask(n: int) -> None:
            schema = {"type": "object", "properties": {"pick": {"type": "string"}}}
            reply = await call.child.ask("elicitation/create", {"message": f"q{n}?", "requestedSchema": schema})
            picks[n] = reply["result"]["content"]["pick"]

        async with anyio.create_task_group() as tg:
            for n in range(2):
                tg.start_soon(ask, n)
        return {"content": [{"type": "text", "text": f"picked {picks[0]} and {picks[1]}"}]}

    script = Script(era="legacy", tools={"two": two_questions})
    # No first round: the questions, asked at once, come once the task exists.
    server = ServerConfig("test", FAKE_SPEC, PoolSettings(max_size=2), task_tools=("two",), task_first_round=0)
    backend = FakeBackend(script)
    router = Router(server, backend=backend)
    async with backend.running_in(), in_process_servers([router], tokens=TokenStore(TOKENS)) as gw:
        client = Client(gw, gw.app.state.task_stores["test"], TOKENS[0])
        task_id = await client.created("two", {})
        waiting = await client.until(task_id, status_is(rules.INPUT_REQUIRED))
        validate(waiting["inputRequests"], "InputRequests")
        keys = {question["params"]["message"]: key for key, question in waiting["inputRequests"].items()}
        assert sorted(keys) == ["q0?", "q1?"]
        given = {keys[f"q{n}?"]: {"action": "accept", "content": {"pick": f"p{n}"}} for n in range(2)}
        await client.task(rules.UPDATE, task_id, inputResponses=given)
        done = await client.until(task_id, status_is(rules.COMPLETED))
        assert done["result"]["content"][0]["text"] == "picked p0 and p1"


async def test_a_question_a_bridged_task_withdraws_is_not_shown_again_and_gets_no_answer() -> None:
    tasks = FakeTasks()
    async with bridged(tasks) as (backend, [client, *_]):
        task_id = await client.created("research", {"topic": "gamma", "withdraw": True})
        waiting = await client.until(task_id, status_is(rules.INPUT_REQUIRED))
        [question] = waiting["inputRequests"].values()
        assert question["params"]["message"] == "gamma: still there?"
        tasks.by_topic("gamma").release()  # the child withdraws its question and goes on
        done = await client.until(task_id, status_is(rules.COMPLETED))
        [child] = [c for c in backend.children if received(c, "tools/call")]
        store = client.store
        assert store._runs[task_id].task.asked == 1  # the withdrawn question made no second round
    assert done["result"]["content"][0]["text"] == "report on gamma; answers: none"
    assert answers_to_child(child) == []  # nothing was written for the withdrawn question
