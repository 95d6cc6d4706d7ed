"""A task server's tools for legacy sessions, which the gateway offers no tasks (taskbridge rule 7).

A fake 2025-11-25 task server (``faketasks``: server-everything's ``simulate-research-query``
in small) behind the in-process gateway, shared by several sessions. The gateway declares no
``tasks`` to a session, so:

- a call of a tool the child runs only as a task (``research``) goes to the child
  task-augmented, and the session gets the task's outcome as the call's answer, with the
  task's questions on the call's stream, each session its own;
- a session that leaves before the outcome has the child's task cancelled, and only its own;
- ``tasks/get|result|list|cancel`` from a session are -32601, never sent to the shared child
  (whose ``tasks/list`` would name every client's tasks), and modern clients' ``tasks/result``
  and ``tasks/list`` (not in 2026-07-28) are 404 with -32601;
- a session's ``tools/list`` names no ``taskSupport``.

Waits are on the fake's change events, each bounded.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.protocol.jsonrpc import METHOD_NOT_FOUND, Request, Result
from gateway.relay import events
from gateway.relay.client import ClientContext
from gateway.relay.sessions import LegacySession
from tests.component.fakechild import FakeChild, Script, fake_backend
from tests.component.faketasks import RELATED, FakeTasks
from tests.component.harness import Gateway, in_process_gateway
from tests.component.test_roots_keying import open_session, served_of
from tests.gateway_server import MODERN_META, modern_headers, open_legacy_session
from tests.schemas import validate

pytestmark = [pytest.mark.anyio, pytest.mark.component]

BOUND = 20.0
ELICITING = {"elicitation": {}}


def received(backend_children: list[FakeChild], method: str) -> list[dict[str, Any]]:
    return [m for child in backend_children for m in child.received if m.get("method") == method]


async def call(gw: Gateway, session: LegacySession, request_id: int, tool: str, arguments: dict[str, Any]) -> Any:
    """A legacy ``tools/call`` through the relay (the in-process transport does not stream),
    answering each question it yields with a pick naming the question; its final message."""
    request = Request(request_id, "tools/call", {"name": tool, "arguments": arguments})
    async for event in served_of(gw.app).relay.exchange(request, ClientContext.of_session(session)):
        if isinstance(event, events.Ask):
            question = event.message
            validate(question, "JSONRPCRequest", "2025-11-25")
            validate(question["params"], "ElicitRequestFormParams", "2025-11-25")
            assert RELATED not in question["params"].get("_meta", {})  # the session made no task
            pick = {"action": "accept", "content": {"pick": question["params"]["message"]}}
            session.take(Result(question["id"], pick))
        elif isinstance(event, events.Final):
            return event.message
    raise AssertionError("no final message")


async def test_sessions_calling_a_task_only_tool_each_get_their_own_outcome_and_questions() -> None:
    tasks = FakeTasks()
    with anyio.fail_after(BOUND):
        async with fake_backend(tasks.script()) as backend, in_process_gateway(backend) as gw:
            sessions = [await open_session(gw, ELICITING) for _ in range(3)]
            got: dict[str, Any] = {}

            async def one(n: int) -> None:
                topic = f"topic-{n}"
                # Session 0 is asked two questions, session 1 one, session 2 none (released below).
                got[topic] = await call(gw, sessions[n], 7, "research", {"topic": topic, "ask": 2 - n})

            async with anyio.create_task_group() as tg:
                for n in range(3):
                    tg.start_soon(one, n)
                await backend.until(lambda: "topic-2" in {task.topic for task in tasks.tasks.values()})
                tasks.by_topic("topic-2").release()
    for n in range(3):
        topic = f"topic-{n}"
        message = got[topic]
        validate(message, "JSONRPCResultResponse", "2025-11-25")
        validate(message["result"], "CallToolResult", "2025-11-25")
        assert message["id"] == 7
        picks = [{"action": "accept", "content": {"pick": f"{topic}: question {q + 1}?"}} for q in range(2 - n)]
        answers = ", ".join(str(pick) for pick in picks) or "none"
        assert message["result"]["content"][0]["text"] == f"report on {topic}; answers: {answers}"
        assert "task" not in message["result"]
    augmented = received(backend.children, "tools/call")
    assert len(augmented) == 3
    for request in augmented:
        validate(request, "CallToolRequest", "2025-11-25")
        assert "ttl" in request["params"]["task"]
    fetched = received(backend.children, "tasks/result")
    assert sorted(r["params"]["taskId"] for r in fetched) == sorted(tasks.tasks)
    assert all(task.status == "completed" for task in tasks.tasks.values())
    assert not received(backend.children, "tasks/cancel")


async def test_a_session_that_leaves_before_the_outcome_has_its_childs_task_cancelled_and_no_other() -> None:
    tasks = FakeTasks()
    with anyio.fail_after(BOUND):
        async with fake_backend(tasks.script()) as backend, in_process_gateway(backend) as gw:
            leaving, staying = [await open_session(gw, ELICITING) for _ in range(2)]
            kept: dict[str, Any] = {}

            async def stays() -> None:
                kept["message"] = await call(gw, staying, 1, "research", {"topic": "kept"})

            leaves = anyio.CancelScope()

            async def leaves_early() -> None:
                with leaves:
                    await call(gw, leaving, 1, "research", {"topic": "left"})

            async with anyio.create_task_group() as tg:
                tg.start_soon(stays)
                tg.start_soon(leaves_early)
                # Both wait in the child's tasks/result before the one leaves.
                await backend.until(lambda: len(received(backend.children, "tasks/result")) == 2)
                leaves.cancel()
                await backend.until(lambda: tasks.by_topic("left").status == "cancelled")
                assert tasks.by_topic("kept").status == "working"
                tasks.by_topic("kept").release()
    [cancel] = received(backend.children, "tasks/cancel")
    validate(cancel, "CancelTaskRequest", "2025-11-25")
    assert cancel["params"]["taskId"] == tasks.by_topic("left").task_id
    assert kept["message"]["result"]["content"][0]["text"] == "report on kept; answers: none"


async def test_a_session_that_augments_a_call_itself_gets_the_outcome_not_a_handle() -> None:
    # The gateway declares no tasks to sessions, so it ignores a session's ``task`` (as a
    # receiver without tasks must): the child's task is waited for, as for ``research``.
    tasks = FakeTasks()
    with anyio.fail_after(BOUND):
        async with fake_backend(tasks.script()) as backend, in_process_gateway(backend) as gw:
            session = await open_session(gw, ELICITING)
            request = Request(3, "tools/call", {"name": "maybe", "arguments": {"topic": "own"}, "task": {"ttl": 5000}})
            final: dict[str, Any] = {}

            async def run() -> None:
                async for event in served_of(gw.app).relay.exchange(request, ClientContext.of_session(session)):
                    if isinstance(event, events.Final):
                        final.update(event.message)

            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await backend.until(lambda: bool(received(backend.children, "tasks/result")))
                tasks.by_topic("own").release()
    assert final["result"]["content"][0]["text"] == "report on own; answers: none"
    assert RELATED not in final["result"].get("_meta", {})


async def test_task_requests_are_refused_to_sessions_and_modern_clients_and_never_reach_the_child() -> None:
    tasks = FakeTasks()
    with anyio.fail_after(BOUND):
        async with fake_backend(tasks.script()) as backend, in_process_gateway(backend) as gw:
            session = await open_legacy_session(gw.http, gw.url, capabilities=ELICITING)
            # A task of another client's on the shared child, whose id a session might learn.
            modern = await gw.http.post(
                gw.url,
                headers=modern_headers("tools/call", "maybe"),
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "maybe", "arguments": {"topic": "x"}, "_meta": MODERN_META},
                },
            )
            assert modern.status_code == 200, modern.text
            refused = (
                "tasks/get",
                "tasks/result",
                "tasks/list",
                "tasks/cancel",
                "tasks/update",
                "subscriptions/listen",
            )
            for n, method in enumerate(refused):
                params = {"notifications": {"taskIds": ["child-task-1"]}} if method.startswith("subscriptions/") else {}
                params |= {} if method in ("tasks/list", "subscriptions/listen") else {"taskId": "child-task-1"}
                body = {"jsonrpc": "2.0", "id": n + 10, "method": method, "params": params}
                reply = await gw.http.post(gw.url, headers=session, json=body)
                assert reply.status_code == 200, reply.text
                message = reply.json()
                validate(message, "JSONRPCErrorResponse", "2025-11-25")
                assert message["id"] == n + 10
                assert message["error"]["code"] == METHOD_NOT_FOUND
                assert method in message["error"]["message"]
            for method in ("tasks/result", "tasks/list"):
                params = {"_meta": MODERN_META} | ({} if method == "tasks/list" else {"taskId": "child-task-1"})
                body = {"jsonrpc": "2.0", "id": 20, "method": method, "params": params}
                name = params.get("taskId")
                reply = await gw.http.post(gw.url, headers=modern_headers(method, name), json=body)
                assert reply.status_code == 404, reply.text
                assert reply.json()["error"]["code"] == METHOD_NOT_FOUND
    for method in ("tasks/get", "tasks/result", "tasks/list", "tasks/cancel", "tasks/update", "subscriptions/listen"):
        assert not received(backend.children, method), method


async def test_a_sessions_tool_list_names_no_task_support_and_a_modern_clients_does() -> None:
    tasks = FakeTasks()
    with anyio.fail_after(BOUND):
        async with fake_backend(tasks.script()) as backend, in_process_gateway(backend) as gw:
            session = await open_legacy_session(gw.http, gw.url, capabilities=ELICITING)
            listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            legacy = await gw.http.post(gw.url, headers=session, json=listing)
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": MODERN_META}}
            modern = await gw.http.post(gw.url, headers=modern_headers("tools/list"), json=body)
    validate(legacy.json(), "JSONRPCResultResponse", "2025-11-25")
    validate(legacy.json()["result"], "ListToolsResult", "2025-11-25")
    legacy_tools = {tool["name"]: tool for tool in legacy.json()["result"]["tools"]}
    assert {"research", "maybe", "echo"} <= set(legacy_tools)
    assert not any("execution" in tool for tool in legacy_tools.values()), legacy_tools
    modern_tools = {tool["name"]: tool for tool in modern.json()["result"]["tools"]}
    assert modern_tools["research"]["execution"] == {"taskSupport": "required"}
    assert backend.children


async def test_a_sessions_cancel_of_its_call_over_http_cancels_the_childs_task_and_its_logs_reach_it() -> None:
    """Over the HTTP edge: the session's stream carries the task's log line at its level, and
    its ``notifications/cancelled`` for the call ends the child's task with ``tasks/cancel``."""
    tasks = FakeTasks()
    with anyio.fail_after(BOUND):
        async with fake_backend(tasks.script()) as backend, in_process_gateway(backend) as gw:
            session = await open_legacy_session(gw.http, gw.url, capabilities=ELICITING)
            level = {"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "info"}}
            assert (await gw.http.post(gw.url, headers=session, json=level)).status_code == 200
            body = {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "research", "arguments": {"topic": "logged", "log": "halfway"}},
            }
            async with gw.open(body, session) as response:
                assert await response.start() == 200
                logged = await response.next_message()
                assert logged is not None
                validate(logged, "JSONRPCNotification", "2025-11-25")
                assert logged["method"] == "notifications/message"
                assert logged["params"]["data"] == "logged: halfway"
                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}
                assert (await gw.http.post(gw.url, headers=session, json=cancel)).status_code == 202
                await backend.until(lambda: tasks.by_topic("logged").status == "cancelled")
    [cancelled] = received(backend.children, "tasks/cancel")
    assert cancelled["params"]["taskId"] == tasks.by_topic("logged").task_id


async def test_a_task_whose_handle_comes_after_its_call_ended_is_cancelled_at_the_child() -> None:
    """A call sent task-augmented and ended before its handle came: the child is sent no
    ``notifications/cancelled`` (it ends no task, and a compliant child would then send no
    handle), and the handle, when it comes, gets ``tasks/cancel``. Another session's task on
    the same child goes on."""
    tasks = FakeTasks()
    with anyio.fail_after(BOUND):
        async with fake_backend(tasks.script()) as backend, in_process_gateway(backend) as gw:
            leaving, staying = [await open_session(gw, ELICITING) for _ in range(2)]
            kept: dict[str, Any] = {}

            async def stays() -> None:
                kept["message"] = await call(gw, staying, 1, "research", {"topic": "kept"})

            leaves, left = anyio.CancelScope(), anyio.Event()

            async def leaves_early() -> None:
                try:
                    with leaves:
                        await call(gw, leaving, 1, "research", {"topic": "late", "late_handle": True})
                finally:
                    left.set()  # its call ended in the gateway

            async with anyio.create_task_group() as tg:
                tg.start_soon(stays)
                tg.start_soon(leaves_early)
                await backend.until(lambda: len(received(backend.children, "tools/call")) == 2)
                leaves.cancel()  # before the handle
                await left.wait()
                [late] = [c for c in backend.calls("research") if c.arguments.get("topic") == "late"]
                late.release()  # the handle comes now
                await backend.until(lambda: "late" in {t.topic for t in tasks.tasks.values()})
                await backend.until(lambda: tasks.by_topic("late").status == "cancelled")
                tasks.by_topic("kept").release()
    [cancel] = received(backend.children, "tasks/cancel")
    validate(cancel, "CancelTaskRequest", "2025-11-25")
    assert cancel["params"]["taskId"] == tasks.by_topic("late").task_id
    assert not received(backend.children, "notifications/cancelled")
    assert kept["message"]["result"]["content"][0]["text"] == "report on kept; answers: none"


async def test_a_modern_child_that_declares_legacy_tasks_is_told_of_an_augmented_calls_cancel() -> None:
    """The gateway sends ``task`` to legacy children only; a session's own ``task`` on a call
    to a modern child is not a task the gateway waits on: the call is cancelled as any call."""
    script = Script(era="modern", capabilities={"tools": {}, "tasks": {"requests": {"tools": {"call": {}}}}})
    with anyio.fail_after(BOUND):
        async with fake_backend(script) as backend, in_process_gateway(backend) as gw:
            session = await open_session(gw, ELICITING)
            request = Request(4, "tools/call", {"name": "hold", "arguments": {}, "task": {"ttl": 1000}})
            leaves, left = anyio.CancelScope(), anyio.Event()

            async def run() -> None:
                try:
                    with leaves:
                        async for _ in served_of(gw.app).relay.exchange(request, ClientContext.of_session(session)):
                            pass
                finally:
                    left.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                [held] = await backend.wait_calls(1)
                leaves.cancel()
                await left.wait()
                await backend.until(held.cancelled.is_set)  # told to stop


async def test_a_sessions_own_task_on_a_tool_that_takes_none_is_dropped_so_its_call_is_a_plain_one() -> None:
    """The gateway declared no tasks to the session, so it ignores the session's ``task``: a
    tool its child runs only plainly (``forbidden``) is called without it, and a cancel of
    that call is sent as for any call."""
    tasks = FakeTasks()
    with anyio.fail_after(BOUND):
        async with fake_backend(tasks.script()) as backend, in_process_gateway(backend) as gw:
            session = await open_session(gw, ELICITING)
            request = Request(6, "tools/call", {"name": "echo", "arguments": {"message": "hi"}, "task": {"ttl": 5}})
            finals = [
                event.message
                async for event in served_of(gw.app).relay.exchange(request, ClientContext.of_session(session))
                if isinstance(event, events.Final)
            ]
    [sent] = received(backend.children, "tools/call")
    assert "task" not in sent["params"]
    assert finals[0]["result"]["content"][0]["text"] == "hi"
