"""A legacy child's questions (sampling, elicitation, roots) reach the client whose call asked,
over fake children: a legacy client gets the question on its call's SSE stream and POSTs the
answer; a modern client gets an MRTR ``input_required`` round and retries with the answer."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.errors import CODE_NO_CLIENT_INPUT
from gateway.protocol import tasks as rules
from gateway.protocol.handshake import META_CLIENT_CAPABILITIES
from gateway.relay.router import Router
from gateway.relay.server_config import Isolation, ServerConfig
from gateway.stdio.pool import PoolSettings
from tests.component.fakechild import Script, fake_backend
from tests.component.harness import FAKE_SPEC, in_process_gateway, in_process_servers, legacy_call
from tests.gateway_server import MODERN_META, modern_call, modern_headers, open_legacy_session
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

BOUND = 20.0
ELICIT = {
    "mode": "form",
    "message": "Your name?",
    "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
}
SAMPLE = {"messages": [{"role": "user", "content": {"type": "text", "text": "say hi"}}], "maxTokens": 5}


async def test_each_legacy_clients_question_comes_on_its_own_stream_and_its_answer_reaches_the_child() -> None:
    """Three sessions ask at once (each its own child: questions carry no request id): each
    sees only its own question, under a gateway id, and its POSTed answer reaches its call."""
    finals: dict[int, dict[str, Any]] = {}
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="legacy")) as backend,
            in_process_gateway(backend, pool=PoolSettings(1, 3)) as gw,
        ):
            sessions = [await open_legacy_session(gw.http, gw.url, capabilities={"elicitation": {}}) for _ in range(3)]

            asked: list[int] = []
            all_asked = anyio.Event()

            async def client(n: int) -> None:
                params = {**ELICIT, "message": f"Your name, {n}?"}
                body = legacy_call(n, "ask", {"method": "elicitation/create", "params": params})
                async with gw.open(body, sessions[n]) as response:
                    question = await response.next_message()
                    assert question is not None
                    assert question["method"] == "elicitation/create"
                    assert question["params"]["message"] == f"Your name, {n}?"
                    asked.append(n)
                    if len(asked) == 3:
                        all_asked.set()
                    await all_asked.wait()  # three questions open at once: three children
                    answer = {"action": "accept", "content": {"name": f"client {n}"}}
                    reply = {"jsonrpc": "2.0", "id": question["id"], "result": answer}
                    assert (await gw.http.post(gw.url, headers=sessions[n], json=reply)).status_code == 202
                    [final] = await response.messages()
                    finals[n] = final

            async with anyio.create_task_group() as tg:
                for n in range(3):
                    tg.start_soon(client, n)
    for n in range(3):
        assert finals[n]["id"] == n
        answer = finals[n]["result"]["structuredContent"]["answer"]
        assert answer["result"] == {"action": "accept", "content": {"name": f"client {n}"}}
    assert len({c.child.pid for c in backend.calls("ask")}) == 3


async def test_a_modern_client_answers_a_legacy_childs_question_in_an_mrtr_round() -> None:
    call = modern_call(1, "ask", {"method": "sampling/createMessage", "params": SAMPLE})
    call["params"]["_meta"][META_CLIENT_CAPABILITIES] = {"sampling": {}}
    headers = modern_headers("tools/call", "ask")
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era="legacy")) as backend, in_process_gateway(backend) as gw:
            first = (await gw.http.post(gw.url, headers=headers, json=call)).json()
            assert first["id"] == 1
            result = first["result"]
            assert result["resultType"] == "input_required"
            [(key, request)] = result["inputRequests"].items()
            assert request == {"method": "sampling/createMessage", "params": SAMPLE}
            [parked] = backend.running_calls("ask")  # the call waits at the child for its answer
            sampled = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}
            retry = {
                **call,
                "id": 2,
                "params": {**call["params"], "inputResponses": {key: sampled}, "requestState": result["requestState"]},
            }
            second = (await gw.http.post(gw.url, headers=headers, json=retry)).json()
    assert second["id"] == 2
    assert second["result"]["resultType"] == "complete"
    assert second["result"]["structuredContent"]["answer"]["result"] == sampled
    assert backend.calls("ask") == [parked]  # the same call went on: the child was not asked twice


STILL_THERE = {"mode": "form", "message": "Still there?", "requestedSchema": {"type": "object", "properties": {}}}


def answers_to(fake: Any, question_id: str | None) -> list[dict[str, Any]]:
    """What the child read in answer to its question ``question_id``."""
    return [m for m in fake.received if "method" not in m and m.get("id") == question_id]


async def test_a_question_the_child_withdraws_is_cancelled_at_each_legacy_client_and_their_answers_go_nowhere() -> None:
    """Two sessions, each a question on its own call's stream; the child withdraws both (as the
    TypeScript SDK does when its wait times out): each client gets ``notifications/cancelled``
    naming the id it got the question under, on that stream, then the call's answer; an answer
    sent after that reaches no child."""
    finals: dict[int, list[dict[str, Any]]] = {}
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="legacy")) as backend,
            in_process_gateway(backend, pool=PoolSettings(1, 2)) as gw,
        ):
            sessions = [await open_legacy_session(gw.http, gw.url, capabilities={"elicitation": {}}) for _ in range(2)]

            async def client(n: int) -> None:
                body = legacy_call(n, "withdraw", {"method": "elicitation/create", "params": STILL_THERE})
                async with gw.open(body, sessions[n]) as response:
                    question = await response.next_message()
                    assert question is not None
                    assert question["method"] == "elicitation/create"
                    [call] = backend.running_calls("withdraw")  # one client at a time
                    call.release()
                    rest = await response.messages()
                    finals[n] = [question, *rest]
                    late = {"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {}}}
                    assert (await gw.http.post(gw.url, headers=sessions[n], json=late)).status_code < 500

            for n in range(2):  # one after the other: each call's own question and cancel
                await client(n)
    for n in range(2):
        question, cancelled, final = finals[n]
        assert cancelled == {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": question["id"], "reason": "nobody answered in time"},
        }
        assert final["id"] == n
        assert final["result"]["content"] == [{"type": "text", "text": "withdrawn"}]
    for call in backend.calls("withdraw"):
        assert answers_to(call.child, call.question_id) == []  # withdrawn: the child got no answer


async def test_a_question_the_child_withdraws_during_a_modern_round_gets_no_answer_from_the_retry() -> None:
    call = modern_call(1, "withdraw", {"method": "elicitation/create", "params": STILL_THERE})
    call["params"]["_meta"][META_CLIENT_CAPABILITIES] = {"elicitation": {}}
    headers = modern_headers("tools/call", "withdraw")
    with anyio.fail_after(BOUND), recording("gateway.child") as records:
        async with fake_backend(Script(era="legacy")) as backend, in_process_gateway(backend) as gw:
            first = (await gw.http.post(gw.url, headers=headers, json=call)).json()
            result = first["result"]
            assert result["resultType"] == "input_required"
            [(key, _)] = result["inputRequests"].items()
            [parked] = backend.running_calls("withdraw")
            parked.release()  # the child withdraws its question and answers the call meanwhile
            await records.wait_for_text("withdrew its elicitation/create")  # read by the gateway
            answer = {"action": "accept", "content": {}}
            retry = {
                **call,
                "id": 2,
                "params": {**call["params"], "inputResponses": {key: answer}, "requestState": result["requestState"]},
            }
            second = (await gw.http.post(gw.url, headers=headers, json=retry)).json()
    assert second["id"] == 2
    assert second["result"]["content"] == [{"type": "text", "text": "withdrawn"}]
    assert answers_to(parked.child, parked.question_id) == []


async def test_a_tasks_question_the_child_withdraws_lets_the_task_end_with_the_childs_answer() -> None:
    """A call that became a task (the Tasks extension) asks; the task shows the question. The
    child withdraws it and answers the call on its own: the task completes with that answer at
    once, instead of showing a withdrawn question until the input timeout; the child is sent
    no answer for it."""
    meta = {**MODERN_META, META_CLIENT_CAPABILITIES: {"extensions": {rules.EXTENSION: {}}, "elicitation": {}}}
    server = ServerConfig(
        "test", FAKE_SPEC, PoolSettings(), Isolation.SHARED, task_tools=("withdraw",), task_first_round=0
    )
    arguments = {"method": "elicitation/create", "params": STILL_THERE}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "withdraw", "arguments": arguments, "_meta": meta},
    }
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="legacy")) as backend,
            in_process_servers([Router(server, backend=backend)]) as gw,
        ):
            store = gw.app.state.task_stores["test"]
            made = (await gw.http.post(gw.url, headers=modern_headers("tools/call", "withdraw"), json=body)).json()
            task_id = made["result"]["taskId"]
            while store.status(task_id) != rules.INPUT_REQUIRED:
                await store.changed()
            [call] = backend.running_calls("withdraw")
            call.release()  # the child withdraws its question and answers the call
            while store.status(task_id) not in rules.TERMINAL:
                await store.changed()
            get = {"jsonrpc": "2.0", "id": 2, "method": rules.GET, "params": {"taskId": task_id, "_meta": meta}}
            done = (await gw.http.post(gw.url, headers=modern_headers(rules.GET, task_id), json=get)).json()
    assert done["result"]["status"] == rules.COMPLETED, done
    assert done["result"]["result"]["content"] == [{"type": "text", "text": "withdrawn"}]
    assert answers_to(call.child, call.question_id) == []


async def test_a_url_question_a_modern_round_cannot_carry_is_answered_to_the_child_with_an_error() -> None:
    """A legacy child's URL question whose url is no absolute URI: a modern client's round would
    carry a message its schema refuses, so the child is told instead (-31006), and the call
    goes on."""
    bad = {"mode": "url", "elicitationId": "e-1", "message": "Sign in", "url": "/relative/path"}
    call = modern_call(1, "ask", {"method": "elicitation/create", "params": bad})
    call["params"]["_meta"][META_CLIENT_CAPABILITIES] = {"elicitation": {"url": {}}}
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era="legacy")) as backend, in_process_gateway(backend) as gw:
            reply = (await gw.http.post(gw.url, headers=modern_headers("tools/call", "ask"), json=call)).json()
    result = reply["result"]
    assert result["resultType"] == "complete", reply
    answer = result["structuredContent"]["answer"]
    assert answer["error"]["code"] == CODE_NO_CLIENT_INPUT
    assert "not an absolute URI" in answer["error"]["message"]
