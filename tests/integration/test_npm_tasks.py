"""The npm tier: server-everything's own task tool through the gateway (issue #38 item 1).

``simulate-research-query`` is a 2025-11-25 task tool (``execution.taskSupport: "required"``,
registered with the TypeScript SDK's ``registerToolTask``): it takes only task-augmented calls,
answers ``tasks/get`` and ``tasks/result``, and with ``ambiguous`` asks its elicitation from
the background, delivered through ``tasks/result``. A modern client that opts in to the Tasks
extension gets a task of the gateway's bridged to the child's; it waits for changes on a
``subscriptions/listen`` for its task id (no polling, no sleeps), answers the child's question
with ``tasks/update`` and reads the result with ``tasks/get``. ``call`` does the same from the
command line. A client that does not opt in is refused with -32021.

Legacy sessions have no tasks (``taskbridge`` rule 7): the SDK's legacy client calls the tool
as a plain call and gets the report on the call's stream, the task's question on the same
stream; a session's ``tasks/list`` is -32601, so no session learns another client's task.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client as SdkClient
from mcp import types
from mcp.types import TextContent

from gateway.protocol import tasks as rules
from gateway.protocol.jsonrpc import METHOD_NOT_FOUND, MISSING_CLIENT_CAPABILITY
from gateway.tools.call import command
from tests.gateway_server import MODERN_META, modern_headers, open_legacy_session, running_gateway
from tests.integration.test_call_cli import call
from tests.integration.test_client_requests import sse
from tests.integration.test_npm_everything import EVERYTHING, everything_spec
from tests.schemas import validate

pytestmark = [pytest.mark.npm, pytest.mark.anyio]

if not EVERYTHING.is_file():  # pragma: no cover - the module above skips first
    pytest.skip("server-everything is not installed", allow_module_level=True)

TOOL = "simulate-research-query"
WAIT = 60.0
"""The research takes four stages of a second each, plus the child's start."""
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
WITH_TASKS = {CAPABILITIES_KEY: {"extensions": {rules.EXTENSION: {}}, "elicitation": {}}}


class Client:
    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http, self.url = http, url
        self.ids = iter(range(1, 1_000_000))

    def body(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}

    async def post(self, method: str, params: dict[str, Any], name: str | None = None) -> httpx.Response:
        return await self.http.post(self.url, headers=modern_headers(method, name), json=self.body(method, params))

    async def research(self, arguments: dict[str, Any], declared: dict[str, Any] = WITH_TASKS) -> httpx.Response:
        params = {"name": TOOL, "arguments": arguments, "_meta": {**MODERN_META, **declared}}
        return await self.post("tools/call", params, TOOL)

    async def task(self, method: str, task_id: str, **more: Any) -> dict[str, Any]:
        reply = await self.post(method, {"taskId": task_id, **more, "_meta": {**MODERN_META, **WITH_TASKS}}, task_id)
        assert reply.status_code == 200, reply.text
        result: dict[str, Any] = reply.json()["result"]
        return result

    @asynccontextmanager
    async def changes(self, task_id: str) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """The task's states as the gateway's listen sends them (``notifications/tasks``)."""
        params = {"notifications": {"taskIds": [task_id]}, "_meta": {**MODERN_META, **WITH_TASKS}}
        body = self.body("subscriptions/listen", params)
        async with self.http.stream("POST", self.url, headers=modern_headers("subscriptions/listen"), json=body) as r:
            assert r.status_code == 200

            async def states() -> AsyncIterator[dict[str, Any]]:
                async for message in sse(r):
                    if message.get("method") == rules.STATUS_NOTIFICATION:
                        yield message["params"]

            yield states()


@asynccontextmanager
async def gateway() -> AsyncIterator[Client]:
    with anyio.fail_after(WAIT):
        async with running_gateway(everything_spec()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            yield Client(http, url)


def created(reply: httpx.Response) -> str:
    assert reply.status_code == 200, reply.text
    result = reply.json()["result"]
    assert result["resultType"] == "task", result
    assert result["status"] == rules.WORKING
    assert "task" not in result  # the flat SEP-2663 handle, never the child's nested one
    task_id: str = result["taskId"]
    return task_id


async def test_a_modern_client_runs_the_childs_task_tool_to_its_report() -> None:
    async with gateway() as client:
        task_id = created(await client.research({"topic": "tide pools"}))
        working = await client.task(rules.GET, task_id)
        assert working["status"] in (rules.WORKING, rules.COMPLETED)
        async with client.changes(task_id) as states:
            async for state in states:
                if state["status"] in rules.TERMINAL:
                    break
        done = await client.task(rules.GET, task_id)
    assert done["status"] == rules.COMPLETED, done
    validate(done["result"], "CallToolResult")
    assert done["result"]["content"][0]["text"].startswith("# Research Report: tide pools\n")
    assert "io.modelcontextprotocol/related-task" not in done["result"].get("_meta", {})


async def test_an_ambiguous_query_asks_through_the_task_and_takes_the_answer_from_tasks_update() -> None:
    async with gateway() as client:
        task_id = created(await client.research({"topic": "python", "ambiguous": True}))
        async with client.changes(task_id) as states:
            async for state in states:
                if state["status"] == rules.INPUT_REQUIRED:
                    validate(state["inputRequests"], "InputRequests")
                    [(key, question)] = state["inputRequests"].items()
                    assert question["method"] == "elicitation/create"
                    assert "multiple interpretations" in question["params"]["message"]
                    answer = {"action": "accept", "content": {"interpretation": "programming"}}
                    ack = await client.task(rules.UPDATE, task_id, inputResponses={key: answer})
                    assert ack == {"resultType": "complete"}
                if state["status"] in rules.TERMINAL:
                    break
        done = await client.task(rules.GET, task_id)
    assert done["status"] == rules.COMPLETED, done
    assert done["result"]["content"][0]["text"].startswith("# Research Report: python (programming)\n")


async def test_a_client_that_does_not_opt_in_is_told_the_tool_needs_the_tasks_extension() -> None:
    async with gateway() as client:
        refused = await client.research({"topic": "x"}, {CAPABILITIES_KEY: {}})
    assert refused.status_code == 400
    validate(refused.json(), "MissingRequiredClientCapabilityError")
    assert refused.json()["error"]["code"] == MISSING_CLIENT_CAPABILITY
    assert refused.json()["error"]["data"]["requiredCapabilities"] == {"extensions": {rules.EXTENSION: {}}}


async def test_call_runs_the_childs_task_tool_and_answers_its_question(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter(["historical\n"])
    monkeypatch.setattr(command, "_terminal_reader", lambda: lambda: next(answers, ""))
    async with gateway() as client:
        plain = await call(client.url, "--mode", "modern", TOOL, "--arg", "topic=tide pools")
        asked = await call(client.url, "--mode", "modern", TOOL, "--arg", "topic=rivers", "--arg", "ambiguous=true")
    assert plain.code == 0, plain.err[-2000:]
    assert plain.out.startswith("# Research Report: tide pools\n")
    assert asked.code == 0, asked.err[-2000:]
    assert asked.out.startswith("# Research Report: rivers (historical)\n"), asked.out[:300]


async def test_legacy_sdk_clients_get_the_task_tools_report_on_the_call_each_their_own() -> None:
    asked: dict[str, list[str]] = {"python": [], "tide pools": []}
    reports: dict[str, str] = {}

    async def run(url: str, topic: str, ambiguous: bool) -> None:
        async def on_elicitation(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked[topic].append(params.message)
            return types.ElicitResult(action="accept", content={"interpretation": "programming"})

        async with SdkClient(url, mode="legacy", elicitation_callback=on_elicitation) as client:
            [tool] = [tool for tool in (await client.list_tools()).tools if tool.name == TOOL]
            assert tool.execution is None or tool.execution.task_support is None  # a plain call, as sessions see it
            result = await client.call_tool(TOOL, {"topic": topic, "ambiguous": ambiguous})
        assert not result.is_error, result
        reports[topic] = "".join(c.text for c in result.content if isinstance(c, TextContent))

    with anyio.fail_after(WAIT * 2):
        async with running_gateway(everything_spec()) as url, anyio.create_task_group() as tg:
            tg.start_soon(run, url, "python", True)
            tg.start_soon(run, url, "tide pools", False)
    assert reports["python"].startswith("# Research Report: python (programming)\n")
    assert reports["tide pools"].startswith("# Research Report: tide pools\n")
    [question] = asked["python"]
    assert "multiple interpretations" in question
    assert asked["tide pools"] == []


async def test_a_session_cannot_list_or_read_another_clients_task_on_the_shared_child() -> None:
    async with gateway() as client:
        created(await client.research({"topic": "secret plans"}))  # the child keeps this task
        session = await open_legacy_session(client.http, client.url, capabilities={"elicitation": {}})
        listed = await client.http.post(
            client.url, headers=session, json={"jsonrpc": "2.0", "id": 1, "method": "tasks/list", "params": {}}
        )
        modern = await client.post("tasks/list", {"_meta": {**MODERN_META, **WITH_TASKS}})
    assert listed.status_code == 200, listed.text
    validate(listed.json(), "JSONRPCErrorResponse", "2025-11-25")
    assert listed.json()["error"]["code"] == METHOD_NOT_FOUND
    assert "secret plans" not in listed.text
    assert modern.status_code == 404, modern.text
    assert modern.json()["error"]["code"] == METHOD_NOT_FOUND
