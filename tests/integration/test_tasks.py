"""The Tasks extension served by the gateway for every child (issue #26).

Real test-server children (legacy-only and dual-era) behind an in-process gateway on a
loopback socket, driven with raw httpx. Calls that become tasks wait at a *gate* (``wait_gate``
waits until a file exists; the test creates it), so every state is reached by an event, not by time;
a task's completion is awaited on the store's change event (``TaskStore.changed``), then
read with ``tasks/get`` as any client would.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway.http.auth import TokenStore
from gateway.http.drain import Drain
from gateway.protocol import tasks as rules
from gateway.protocol.jsonrpc import HEADER_MISMATCH, INVALID_PARAMS, MISSING_CLIENT_CAPABILITY
from gateway.relay import tasks as task_store
from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from gateway.relay.tasks import TaskStore
from gateway.stdio.pool import PoolSettings
from gateway.stdio.spec import ChildSpec
from tests.balancer import cluster
from tests.conftest import server_spec
from tests.cutting_proxy import CuttingProxy
from tests.gateway_server import MODERN_META, app_for, modern_headers, serving
from tests.integration.test_client_requests import sse
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

WAIT = 30.0
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
WITH_TASKS = {CAPABILITIES_KEY: {"extensions": {rules.EXTENSION: {}}, "elicitation": {}}}
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
ELICITATION = {
    "method": "elicitation/create",
    "params": {
        "message": "Your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
}
ELICITED = {"action": "accept", "content": {"name": "Ada"}}
TASK_TOOLS = ("wait_gate", "fail", "error_reply", "exit", "ask_client", "sleep", "needs_input")
CHILDREN = {
    # A legacy-only child marks wait_gate itself (execution.taskSupport); the operator names the rest.
    "legacy": lambda: server_spec("--era", "legacy", "--task-support", "wait_gate"),
    "dual": lambda: server_spec(),
}


TOKENS = tuple(f"token-{n}-0123456789abcdef" for n in range(3))
"""Three principals: each test's clients are different people, concurrently."""


class Gateway:
    def __init__(self, url: str, store: TaskStore, http: httpx.AsyncClient, token: str | None = None) -> None:
        self.url, self.store, self.http = url, store, http
        self.auth = {"authorization": f"Bearer {token}"} if token else {}
        self.ids = iter(range(1, 1_000_000))

    def client(self, token: str) -> Gateway:
        """The same gateway as another principal sees it."""
        return Gateway(self.url, self.store, self.http, token)

    async def post(self, method: str, params: dict[str, Any], *, name: str | None = None, **headers: str) -> Any:
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        sent = {**modern_headers(method, name), **self.auth, **headers}
        return await self.http.post(self.url, headers=sent, json=body)

    async def call(self, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None, **h: str) -> Any:
        declared = WITH_TASKS if meta is None else meta
        params = {"name": tool, "arguments": arguments, "_meta": {**MODERN_META, **declared}}
        return await self.post("tools/call", params, name=tool, **h)

    async def task(self, method: str, task_id: str, meta: dict[str, Any] | None = None, **more: Any) -> Any:
        params = {"taskId": task_id, **more, "_meta": {**MODERN_META, **(WITH_TASKS if meta is None else meta)}}
        return await self.post(method, params, name=task_id)

    async def get(self, task_id: str, **headers: str) -> dict[str, Any]:
        reply = await self.task(rules.GET, task_id)
        assert reply.status_code == 200, reply.text
        result: dict[str, Any] = reply.json()["result"]
        return result

    async def until(self, task_id: str, done: Callable[[str | None], bool]) -> dict[str, Any]:
        """The task once ``done(status)`` holds, waiting on the store's changes (no polling)."""
        with anyio.fail_after(WAIT):
            while not done(self.store.status(task_id)):
                await self.store.changed()
        return await self.get(task_id)


@asynccontextmanager
async def gateway(
    spec: ChildSpec, pool_max: int = 1, first_round: float = rules.DEFAULT_FIRST_ROUND, **app_options: Any
) -> AsyncIterator[Gateway]:
    """``first_round``: 0 makes a call that asks at once a task at once (its questions on the task)."""
    server = ServerConfig(
        "test", spec, PoolSettings(max_size=pool_max), task_tools=TASK_TOOLS, task_first_round=first_round
    )
    app_options.setdefault("tokens", TokenStore(TOKENS))
    app = app_for(Router(server), **app_options)
    async with serving(app) as base, httpx.AsyncClient(timeout=WAIT) as http:
        yield Gateway(f"{base}/mcp", app.state.task_stores["test"], http, TOKENS[0])


def created(reply: httpx.Response) -> dict[str, Any]:
    """A ``CreateTaskResult`` answer, checked to the letter of the extension."""
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "application/json"
    result: dict[str, Any] = reply.json()["result"]
    required = {"resultType", "taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs"}
    assert required <= set(result) <= required | {"pollIntervalMs", "statusMessage", "_meta"}, result
    assert result["resultType"] == "task"
    assert result["status"] == rules.WORKING
    assert ISO.match(result["createdAt"])
    assert ISO.match(result["lastUpdatedAt"])
    assert type(result["ttlMs"]) is int
    assert type(result.get("pollIntervalMs", 0)) is int
    return result


@pytest.mark.parametrize("era", sorted(CHILDREN))
async def test_concurrent_clients_get_tasks_that_poll_to_completed_with_the_result_inlined(
    era: str, tmp_path: Path
) -> None:
    gates = [str(tmp_path / f"g{n}") for n in range(3)]
    with anyio.fail_after(WAIT):
        # Room for four (three tasks and a quick call): a legacy child told the client may elicit
        # runs one call that may ask at a time.
        async with gateway(CHILDREN[era](), pool_max=4) as gw:
            clients = [gw.client(token) for token in TOKENS]
            ids = [""] * 3

            async def start(n: int) -> None:
                ids[n] = created(await clients[n].call("wait_gate", {"gate": gates[n]}))["taskId"]

            async with anyio.create_task_group() as tg:  # three people at once
                for n in range(3):
                    tg.start_soon(start, n)
            assert len(set(ids)) == 3
            for client, task_id in zip(clients, ids, strict=True):  # working until their gates open
                task = await client.until(task_id, lambda status: status is not None)
                assert task["status"] == rules.WORKING
                assert task["resultType"] == "complete"
                assert "result" not in task
                assert "error" not in task
            quick = await gw.call("echo", {"message": "hi"})  # not task-suitable: answered synchronously
            assert quick.json()["result"]["content"][0]["text"] == "hi"
            await anyio.Path(gates[1]).touch()
            done = await clients[1].until(ids[1], lambda status: status == rules.COMPLETED)
            others = [await clients[0].get(ids[0]), await clients[2].get(ids[2])]
            for n in (0, 2):
                await anyio.Path(gates[n]).touch()
            finals = [
                await client.until(task_id, lambda status: status == rules.COMPLETED)
                for client, task_id in zip(clients, ids, strict=True)
            ]
    assert [task["status"] for task in others] == [rules.WORKING, rules.WORKING]
    assert done["result"]["structuredContent"]["gate"] == gates[1]
    assert [task["result"]["structuredContent"]["gate"] for task in finals] == gates
    for task in finals:
        assert "_meta" not in task["result"] or "io.modelcontextprotocol/related-task" not in task["result"]["_meta"]
        assert ISO.match(task["lastUpdatedAt"])


@pytest.mark.parametrize("era", sorted(CHILDREN))
async def test_a_drain_waits_for_running_tasks_and_lets_their_clients_read_and_cancel_them(
    era: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three clients' tasks when the drain begins: Ada's ended before it and was never read
    (nothing waits for it), Bob's and Cy's run. Their ``tasks/*`` are let in (a new call and an
    unknown task id get the drain's 503); the drain waits for Bob's task until he has read its
    outcome, and for Cy's until he cancels it. Before, the drain did not wait for tasks at all,
    and every ``tasks/*`` got 503, also from a replica forwarding it to this one, the owner."""
    monkeypatch.setattr(task_store, "DRAIN_READ_GRACE", 3600.0)  # Bob reads his outcome well within it
    gates = [str(tmp_path / f"g{n}") for n in range(3)]
    await anyio.Path(gates[0]).touch()  # Ada's task passes its gate at once
    drain = Drain()
    with anyio.fail_after(WAIT):
        async with gateway(CHILDREN[era](), pool_max=3, drain=drain) as gw:
            ada, bob, cy = (gw.client(token) for token in TOKENS)
            ids = [
                created(await c.call("wait_gate", {"gate": g}))["taskId"]
                for c, g in zip((ada, bob, cy), gates, strict=True)
            ]
            await ada.until(ids[0], lambda status: status == rules.COMPLETED)
            for client, task_id in ((bob, ids[1]), (cy, ids[2])):
                await client.until(task_id, lambda status: status is not None)  # running at their gates
            drain.begin()  # as on SIGTERM
            counted_at_start = drain.in_flight
            new_call = await bob.call("wait_gate", {"gate": gates[1]})
            unknown = await bob.task(rules.GET, "t.no-such-task")
            working = await bob.get(ids[1])
            await anyio.Path(gates[1]).touch()
            while gw.store.status(ids[1]) != rules.COMPLETED:
                await gw.store.changed()
            counted_unread = drain.in_flight  # Bob's ended during the drain: waited for until read
            completed = await bob.get(ids[1])
            counted_read = drain.in_flight
            cancelled = await cy.task(rules.CANCEL, ids[2])
            assert await drain.wait_idle(WAIT)  # nothing left: every task's client is done with it
    assert counted_at_start == 2  # Bob's and Cy's: Ada's ended before the drain
    for refused in (new_call, unknown):
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == -31004
    assert working["status"] == rules.WORKING
    assert (counted_unread, counted_read) == (2, 1)
    assert completed["status"] == rules.COMPLETED
    assert completed["result"]["structuredContent"]["gate"] == gates[1]
    assert cancelled.json()["result"] == {"resultType": "complete"}


async def test_a_task_that_ends_during_the_drain_and_is_never_read_holds_it_only_for_the_read_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An abandoned task (its client never polls again) that ends while the gateway drains is
    waited for ``DRAIN_READ_GRACE`` at most, not to the drain's budget."""
    monkeypatch.setattr(task_store, "DRAIN_READ_GRACE", 0.0)
    gate = str(tmp_path / "gate")
    drain = Drain()
    with anyio.fail_after(WAIT):
        async with gateway(CHILDREN["dual"](), drain=drain) as gw:
            task_id = created(await gw.call("wait_gate", {"gate": gate}))["taskId"]
            await gw.until(task_id, lambda status: status is not None)
            drain.begin()
            assert drain.in_flight == 1
            await anyio.Path(gate).touch()
            assert await drain.wait_idle(WAIT)  # with no read: let go after the grace
    assert gw.store.status(task_id) == rules.COMPLETED


async def test_a_tool_error_is_completed_with_is_error_and_a_protocol_error_or_a_crash_is_failed() -> None:
    with anyio.fail_after(WAIT):
        async with gateway(server_spec("--era", "legacy")) as gw:
            tool_error = created(await gw.call("fail", {}))["taskId"]
            protocol_error = created(await gw.call("error_reply", {}))["taskId"]
            crash = created(await gw.call("exit", {"code": 3}))["taskId"]
            terminal = rules.TERMINAL.__contains__
            results = [await gw.until(task_id, terminal) for task_id in (tool_error, protocol_error, crash)]
    failed_tool, failed_rpc, crashed = results
    assert failed_tool["status"] == rules.COMPLETED
    assert failed_tool["result"]["isError"] is True
    assert failed_rpc["status"] == rules.FAILED
    assert failed_rpc["error"]["code"] == 1234
    assert "result" not in failed_rpc
    assert crashed["status"] == rules.FAILED
    assert "exit" in crashed["error"]["message"], crashed


@pytest.mark.parametrize("era", sorted(CHILDREN))
async def test_a_cancelled_task_settles_to_cancelled_and_the_child_gets_notifications_cancelled(
    era: str, tmp_path: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with gateway(CHILDREN[era]()) as gw:  # one child: the cancelled call's
            task_id = created(await gw.call("wait_gate", {"gate": str(tmp_path / "never")}))["taskId"]
            await gw.until(task_id, lambda status: status is not None)
            ack = await gw.task(rules.CANCEL, task_id)
            again = await gw.task(rules.CANCEL, task_id)  # idempotent on an ended task
            task = await gw.get(task_id)
            cancelled = await gw.call("await_cancelled", {"count": 1})  # the same declaration: the same pool
    assert ack.json()["result"] == {"resultType": "complete"}
    assert again.json()["result"] == {"resultType": "complete"}
    assert task["status"] == rules.CANCELLED
    assert len(cancelled.json()["result"]["structuredContent"]["ids"]) == 1


async def test_an_elicitation_inside_a_task_is_answered_with_tasks_update_for_concurrent_clients() -> None:
    with anyio.fail_after(WAIT):
        # No first round: the question, asked at once, comes once the task exists.
        async with gateway(server_spec("--era", "legacy"), pool_max=3, first_round=0) as gw:
            clients = [gw.client(token) for token in TOKENS]
            ids = [""] * 3

            async def start(n: int) -> None:
                ids[n] = created(await clients[n].call("ask_client", {"requests": [ELICITATION]}))["taskId"]

            async with anyio.create_task_group() as tg:
                for n in range(3):
                    tg.start_soon(start, n)
            asked = [
                await client.until(task_id, lambda status: status == rules.INPUT_REQUIRED)
                for client, task_id in zip(clients, ids, strict=True)
            ]
            for n, task_id in reversed(list(enumerate(ids))):  # answered in another order than asked
                answer = {**ELICITED, "content": {"name": f"user-{n}"}}
                ack = await clients[n].task(rules.UPDATE, task_id, inputResponses={"q1": answer, "unknown": {"x": 1}})
                assert ack.json()["result"] == {"resultType": "complete"}
            finals = [
                await client.until(task_id, lambda status: status == rules.COMPLETED)
                for client, task_id in zip(clients, ids, strict=True)
            ]
    for task in asked:
        assert task["inputRequests"] == {"q1": ELICITATION}
        assert "requestState" not in task
    answered = [task["result"]["structuredContent"]["answers"] for task in finals]
    assert answered == [[{"result": {**ELICITED, "content": {"name": f"user-{n}"}}}] for n in range(3)]


@pytest.mark.parametrize("era", ["legacy", "modern", "dual"])
async def test_a_tool_that_asks_at_once_answers_round_one_synchronously_and_its_retry_makes_the_task(
    era: str,
) -> None:
    """tasks-mrtr-composition (SEP-2663 with SEP-2322), for three clients at once: the first
    answer is the round (no ``taskId``), the retry's is the ``CreateTaskResult`` (no
    ``requestState``), and the task's result carries the answer given in the round. A legacy
    child's question (``ask_client``) is parked by the gateway; a modern-speaking child's own
    round (``needs_input``) passes through, and its retry becomes the task."""
    legacy = era == "legacy"
    tool, arguments = ("ask_client", {"requests": [ELICITATION]}) if legacy else ("needs_input", {})

    async def one(gw: Gateway, n: int) -> tuple[Any, Any, dict[str, Any]]:
        first = await gw.call(tool, arguments)
        round_one = first.json()["result"]
        [key] = round_one["inputRequests"]
        params = {
            "name": tool,
            "arguments": arguments,
            "inputResponses": {key: {**ELICITED, "content": {"name": f"user-{n}"}}},
            "requestState": round_one["requestState"],
            "_meta": {**MODERN_META, **WITH_TASKS},
        }
        handle = created(await gw.post("tools/call", params, name=tool))
        done = await gw.until(handle["taskId"], lambda status: status == rules.COMPLETED)
        return first, handle, done

    outcomes: dict[int, tuple[Any, Any, dict[str, Any]]] = {}
    with anyio.fail_after(WAIT):
        async with gateway(server_spec("--era", era), pool_max=3) as gw:

            async def run(n: int) -> None:
                outcomes[n] = await one(gw.client(TOKENS[n]), n)

            async with anyio.create_task_group() as tg:
                for n in range(3):
                    tg.start_soon(run, n)
    for n, (first, handle, done) in sorted(outcomes.items()):
        assert first.status_code == 200
        round_one = first.json()["result"]
        assert round_one["resultType"] == "input_required"
        assert "taskId" not in round_one
        [question] = round_one["inputRequests"].values()
        assert question["method"] == "elicitation/create"
        assert "requestState" not in handle
        assert "inputRequests" not in handle
        if legacy:
            answers = done["result"]["structuredContent"]["answers"]
            assert answers == [{"result": {**ELICITED, "content": {"name": f"user-{n}"}}}]
        else:
            assert done["result"]["content"][0]["text"] == f"hello user-{n}"


async def test_a_tasks_question_waits_the_input_timeout_not_the_round_timeout() -> None:
    """A task's round is answered by ``tasks/update``, for as long as ``--input-timeout``;
    ``--round-timeout`` bounds only rounds a client must retry."""
    spec = server_spec("--era", "legacy", input_timeout=30, round_timeout=0.5)
    with anyio.fail_after(WAIT), recording("gateway.mrtr") as parked:
        async with gateway(spec, first_round=0) as gw:
            task_id = created(await gw.call("ask_client", {"requests": [ELICITATION]}))["taskId"]
            await gw.until(task_id, lambda status: status == rules.INPUT_REQUIRED)
            held = await parked.wait_for_text("parked for the client's input")
            await gw.task(rules.CANCEL, task_id)
    # Counted from the question (less the moment spent gathering others): past the round timeout.
    assert 0.5 < float(held.getMessage().rsplit("up to ", 1)[1].removesuffix(" s")) <= 30


async def test_a_tool_that_reports_progress_first_is_a_task_at_once_and_asks_on_the_task() -> None:
    """Only a question *first* is a synchronous round: a call whose child shows progress first
    is answered with the task handle at once, without waiting out ``--task-first-round``."""
    with anyio.fail_after(WAIT):
        async with gateway(server_spec("--era", "legacy"), first_round=60.0) as gw:
            reply = await gw.call("ask_client", {"requests": [ELICITATION], "progress": True})
            task_id = created(reply)["taskId"]
            asked = await gw.until(task_id, lambda status: status == rules.INPUT_REQUIRED)
            await gw.task(rules.UPDATE, task_id, inputResponses={"q1": ELICITED})
            done = await gw.until(task_id, lambda status: status == rules.COMPLETED)
    assert asked["inputRequests"] == {"q1": ELICITATION}
    assert done["result"]["structuredContent"]["answers"] == [{"result": ELICITED}]


async def test_without_the_extension_tasks_methods_get_32021_and_calls_are_synchronous() -> None:
    with anyio.fail_after(WAIT):
        async with gateway(server_spec("--era", "legacy")) as gw:
            synchronous = await gw.call("fail", {}, meta={})
            refused = await gw.task(rules.GET, "t.unknown", meta={})
            unknown = await gw.task(rules.GET, "t.unknown")
            mismatch = await gw.post(rules.GET, {"taskId": "t.a", "_meta": {**MODERN_META, **WITH_TASKS}}, name="t.b")
    assert synchronous.json()["result"]["isError"] is True, synchronous.text
    assert "resultType" not in synchronous.json()["result"] or synchronous.json()["result"]["resultType"] == "complete"
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == MISSING_CLIENT_CAPABILITY
    assert refused.json()["error"]["data"] == {"requiredCapabilities": {"extensions": {rules.EXTENSION: {}}}}
    assert unknown.json()["error"]["code"] == INVALID_PARAMS
    assert mismatch.status_code == 400
    assert mismatch.json()["error"]["code"] == HEADER_MISMATCH


async def test_another_principals_task_is_not_found_and_its_owner_still_reads_it(tmp_path: Path) -> None:
    gate = tmp_path / "mine"
    with anyio.fail_after(WAIT):
        async with gateway(server_spec("--era", "legacy")) as gw:
            a, b = {"authorization": f"Bearer {TOKENS[0]}"}, {"authorization": f"Bearer {TOKENS[1]}"}
            task_id = created(await gw.call("wait_gate", {"gate": str(gate)}, **a))["taskId"]
            params = {"taskId": task_id, "_meta": {**MODERN_META, **WITH_TASKS}}
            stranger = await gw.post(rules.GET, params, name=task_id, **b)
            cancel = await gw.post(rules.CANCEL, params, name=task_id, **b)
            owner = await gw.post(rules.GET, params, name=task_id, **a)
            await anyio.Path(gate).touch()
    assert stranger.json()["error"]["code"] == INVALID_PARAMS
    assert cancel.json()["error"]["code"] == INVALID_PARAMS
    assert owner.json()["result"]["status"] == rules.WORKING


@pytest.mark.parametrize("era", sorted(CHILDREN))
async def test_server_discover_advertises_the_extension_under_capabilities_extensions(era: str) -> None:
    with anyio.fail_after(WAIT):
        async with gateway(CHILDREN[era]()) as gw:
            reply = await gw.post("server/discover", {"_meta": MODERN_META})
    capabilities = reply.json()["result"]["capabilities"]
    assert capabilities["extensions"][rules.EXTENSION] == {}
    assert "tasks" not in capabilities


# -- status notifications on a listen ---------------------------------------------------------


@pytest.mark.parametrize("era", sorted(CHILDREN))
async def test_a_listen_for_task_ids_gets_each_change_of_its_own_tasks_only(era: str, tmp_path: Path) -> None:
    gate = tmp_path / "listened"
    with anyio.fail_after(WAIT):
        async with gateway(CHILDREN[era](), pool_max=3) as gw:
            mine = created(await gw.call("wait_gate", {"gate": str(gate)}))["taskId"]
            theirs = created(await gw.client(TOKENS[1]).call("wait_gate", {"gate": str(gate)}))["taskId"]
            body = {
                "jsonrpc": "2.0",
                "id": "watch",
                "method": "subscriptions/listen",
                "params": {
                    "notifications": {"taskIds": [mine, theirs, "t.unknown"]},
                    "_meta": {**MODERN_META, **WITH_TASKS},
                },
            }
            headers = {**modern_headers("subscriptions/listen"), **gw.auth}
            seen: list[dict[str, Any]] = []
            async with gw.http.stream("POST", gw.url, headers=headers, json=body) as reply:
                assert reply.status_code == 200
                assert reply.headers["content-type"].startswith("text/event-stream")
                async for message in sse(reply):
                    seen.append(message)
                    if message.get("method") == rules.STATUS_NOTIFICATION and len(seen) == 2:
                        await anyio.Path(gate).touch()  # the listen has the working state: let the tasks end
                    if message.get("params", {}).get("status") == rules.COMPLETED:
                        break
            refused = await gw.post(
                "subscriptions/listen", {"notifications": {"taskIds": [mine]}, "_meta": MODERN_META}
            )
    ack, *notes = seen
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"taskIds": [mine]}  # not another's, not an unknown one
    assert all(note["method"] == rules.STATUS_NOTIFICATION for note in notes)
    assert {note["params"]["taskId"] for note in notes} == {mine}
    assert notes[0]["params"]["status"] == rules.WORKING
    assert notes[-1]["params"]["result"]["structuredContent"]["gate"] == str(gate)
    assert "resultType" not in notes[-1]["params"]
    assert notes[-1]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "watch"
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == MISSING_CLIENT_CAPABILITY


async def test_a_listen_for_tasks_and_more_is_served_as_before_without_task_ids() -> None:
    with anyio.fail_after(WAIT):
        async with gateway(server_spec("--era", "legacy")) as gw:
            body = {
                "jsonrpc": "2.0",
                "id": "mixed",
                "method": "subscriptions/listen",
                "params": {
                    "notifications": {"taskIds": ["t.x"], "toolsListChanged": True},
                    "_meta": {**MODERN_META, **WITH_TASKS},
                },
            }
            headers = {**modern_headers("subscriptions/listen"), **gw.auth}
            async with gw.http.stream("POST", gw.url, headers=headers, json=body) as reply:
                ack = await anext(sse(reply))
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"toolsListChanged": True}  # the server agreed to no task ids


# -- a child that serves tasks itself ----------------------------------------------------------


async def test_a_modern_childs_own_tasks_pass_through_under_gateway_ids_for_concurrent_clients(
    tmp_path: Path,
) -> None:
    gates = [tmp_path / f"own{n}" for n in range(3)]
    with anyio.fail_after(WAIT):
        async with gateway(server_spec("--era", "modern", "--serve-tasks")) as gw:
            clients = [gw.client(token) for token in TOKENS]
            ids = [""] * 3

            async def start(n: int) -> None:
                ids[n] = created(await clients[n].call("own_task", {"gate": str(gates[n])}))["taskId"]

            async with anyio.create_task_group() as tg:
                for n in range(3):
                    tg.start_soon(start, n)
            working = [await client.get(task_id) for client, task_id in zip(clients, ids, strict=True)]
            stranger = await clients[1].task(rules.GET, ids[0])
            cancel = await clients[2].task(rules.CANCEL, ids[2])
            for gate in gates[:2]:
                await anyio.Path(gate).touch()
            await gw.call("own_tasks_done", {"count": 3}, meta={})
            finals = [await client.get(task_id) for client, task_id in zip(clients, ids, strict=True)]
            kept_runs = gw.store.live(), all(gw.store.passes_through(task_id) for task_id in ids)
    assert all(task_id.startswith(rules.TASK_ID_PREFIX) for task_id in ids)  # the gateway's ids, not the child's
    assert [task["status"] for task in working] == [rules.WORKING] * 3
    assert [task["taskId"] for task in working] == ids
    assert stranger.json()["error"]["code"] == INVALID_PARAMS
    assert cancel.json()["result"]["resultType"] == "complete"
    assert [task["status"] for task in finals] == [rules.COMPLETED, rules.COMPLETED, rules.CANCELLED]
    assert [task["result"]["content"][0]["text"] for task in finals[:2]] == [
        "own child-task-1",
        "own child-task-2",
    ] or {task["result"]["content"][0]["text"] for task in finals[:2]} <= {f"own child-task-{n}" for n in (1, 2, 3)}
    assert kept_runs == (0, True)  # only the mapping is kept: no run, no result in the gateway


# -- a proxy that cuts every request ---------------------------------------------------------

PROXY_LIMIT = 2.0
"""The test proxy ends every request after this many seconds, as nginx's proxy_read_timeout would."""
LONG_CALL_MS = 3 * int(PROXY_LIMIT * 1000)
"""A call that outlives three of the proxy's request limits."""


async def test_a_call_longer_than_a_proxys_request_limit_completes_as_a_task_through_the_proxy() -> None:
    # Through the proxy, a connection per request: the task's handle comes after the first round
    # (1 s) and its end 5 s later, as long as the proxy's keep-alive (uvicorn's 5 s), so a pooled
    # connection could be closed by the proxy just as the last poll is sent on it.
    fresh = httpx.Limits(max_keepalive_connections=0)
    with anyio.fail_after(WAIT + LONG_CALL_MS / 1000):
        async with gateway(server_spec("--era", "legacy")) as gw:
            base = gw.url.removesuffix("/mcp")
            async with (
                serving(CuttingProxy(base, PROXY_LIMIT)) as front,
                httpx.AsyncClient(timeout=WAIT, limits=fresh) as http,
            ):
                direct, pooled = gw.url, gw.http
                gw.url, gw.http = f"{front}/mcp", http
                cut = await gw.call("sleep", {"ms": LONG_CALL_MS}, meta={})  # no extension: synchronous, and cut
                task_id = created(await gw.call("sleep", {"ms": LONG_CALL_MS}))["taskId"]
                final = await gw.until(task_id, lambda status: status == rules.COMPLETED)  # through the proxy
                gw.url, gw.http = direct, pooled
    assert cut.status_code == 504
    assert final["result"]["content"][0]["text"] == "slept"


# -- any replica ------------------------------------------------------------------------------


async def test_a_task_created_on_one_replica_is_polled_to_completion_through_the_others(tmp_path: Path) -> None:
    spec = server_spec("--era", "legacy", "--task-support", "wait_gate")
    gate = tmp_path / "replicas"
    with anyio.fail_after(WAIT):
        async with cluster(spec) as c, httpx.AsyncClient(timeout=WAIT) as http:
            stores: list[TaskStore] = [app.state.task_stores["test"] for app in c.apps]
            gw = Gateway(c.url, stores[0], http)
            task_id = created(await gw.call("wait_gate", {"gate": str(gate)}))["taskId"]
            [owner] = [store for store in stores if store.status(task_id) is not None]
            gw.store = owner
            polled = [await gw.get(task_id) for _ in range(3)]  # round robin: each replica once
            await anyio.Path(gate).touch()
            final = await gw.until(task_id, lambda status: status == rules.COMPLETED)
    assert [task["status"] for task in polled] == [rules.WORKING] * 3
    assert final["result"]["structuredContent"]["gate"] == str(gate)
    gets = [hit for hit in c.balancer.hits if hit.rpc == rules.GET]
    assert {hit.backend for hit in gets} == {0, 1, 2}
    assert all(hit.status == 200 for hit in gets)
