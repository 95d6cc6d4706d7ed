"""Exact attribution under concurrency: a child's question reaches the client whose request asked.

Nothing on stdio ties a legacy child's question to the request that caused it, so the
gateway never lets two requests that may ask share a child while a question could come
(``gateway.protocol.attribution``): the pool grows for the others, or they queue. The child
is the legacy-only test server; its ``ask_client`` tool asks what it is given and returns
every answer it got, so each client can check that the answers in its result are its own.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway.protocol.attribution import AskPolicy
from gateway.stdio.pool import PoolSettings
from tests.gateway_server import modern_call, modern_headers, running_gateway
from tests.integration.test_client_requests import (
    CAPABILITIES_KEY,
    ELICITATION,
    SAMPLING,
    WAIT,
    answers,
    legacy_ask,
    legacy_child,
    messages,
    modern_ask,
    open_session,
    post,
    retry_of,
    sse,
)
from tests.logrecords import recording

ALL = {"sampling": {}, "elicitation": {}}
"""What these clients declare: the questions the child asks them (no roots: a call that declares
roots would first be asked for them by the gateway, gateway.relay.client_roots)."""

pytestmark = pytest.mark.anyio


def elicited(name: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": name}}


def sampled(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": {"type": "text", "text": text}, "model": "m"}


async def metric(http: httpx.AsyncClient, url: str, name: str) -> float:
    text = (await http.get(url.removesuffix("/mcp") + "/metrics")).text
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + "{")]
    return sum(values)


async def test_while_a_question_is_open_another_call_that_may_ask_gets_a_child_of_its_own() -> None:
    pool = PoolSettings(min_size=1, max_size=2)
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(legacy_child(), pool=pool) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            alice = await open_session(http, url, {"elicitation": {}})
            async with http.stream("POST", url, headers=alice, json=legacy_ask(1, [ELICITATION])) as pending:
                stream = sse(pending)
                question = await anext(stream)  # alice's call now waits for her answer on the child
                bob_call = modern_ask(2, [ELICITATION, SAMPLING], ALL)
                bob_call["params"]["arguments"]["together"] = True  # one write: one MRTR round
                [bob_round] = messages(await post(http, url, bob_call))
                await http.post(
                    url, headers=alice, json={"jsonrpc": "2.0", "id": question["id"], "result": elicited("Alice")}
                )
                alice_final = await anext(stream)
            state = bob_round["result"]["requestState"]
            retry = retry_of(bob_call, 3, state, {"k1": elicited("Bob"), "k2": sampled("bob's")})
            bob_final = (await post(http, url, retry)).json()
            to_clients = await metric(http, url, "mcp_gateway_child_questions_to_clients_total")
            by_gateway = await metric(http, url, "mcp_gateway_child_questions_answered_by_gateway_total")
    assert question["method"] == "elicitation/create"
    assert answers(alice_final) == [{"result": elicited("Alice")}]
    # Bob's call ran on a second child: both questions were his, asked in one MRTR round.
    assert sorted(bob_round["result"]["inputRequests"]) == ["k1", "k2"]
    assert answers(bob_final) == [{"result": elicited("Bob")}, {"result": sampled("bob's")}]
    assert (to_clients, by_gateway) == (3, 0)


async def test_with_no_child_to_spare_a_call_that_may_ask_queues_and_then_gets_its_own_question() -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(legacy_child()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            alice = await open_session(http, url, {"elicitation": {}})
            bob = await open_session(http, url, {"elicitation": {}})
            async with http.stream("POST", url, headers=alice, json=legacy_ask(1, [ELICITATION])) as pending:
                stream = sse(pending)
                question = await anext(stream)
                bob_got: list[dict[str, Any]] = []

                async def bob_calls() -> None:
                    async with http.stream("POST", url, headers=bob, json=legacy_ask(1, [ELICITATION])) as reply:
                        async for message in sse(reply):
                            bob_got.append(message)
                            if "method" in message:  # his own question: he answers it
                                answer = {"jsonrpc": "2.0", "id": message["id"], "result": elicited("Bob")}
                                await http.post(url, headers=bob, json=answer)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(bob_calls)  # queued: the one child has alice's question open
                    answer = {"jsonrpc": "2.0", "id": question["id"], "result": elicited("Alice")}
                    await http.post(url, headers=alice, json=answer)
                    alice_final = await anext(stream)
    assert answers(alice_final) == [{"result": elicited("Alice")}]
    bob_question, bob_final = bob_got
    assert bob_question["method"] == "elicitation/create"
    assert answers(bob_final) == [{"result": elicited("Bob")}]


async def test_past_the_queue_timeout_a_call_that_may_ask_gets_503_while_the_child_is_asking() -> None:
    pool = PoolSettings(min_size=1, max_size=1, queue_timeout=0.2, asking_max=0)  # no child to spare
    with anyio.fail_after(WAIT):
        async with running_gateway(legacy_child(), pool=pool) as url, httpx.AsyncClient(timeout=WAIT) as http:
            alice = await open_session(http, url, ALL)  # as the modern caller: one pool (children keyed by it)
            async with http.stream("POST", url, headers=alice, json=legacy_ask(1, [ELICITATION])) as pending:
                stream = sse(pending)
                question = await anext(stream)
                refused = await post(http, url, modern_ask(2, [SAMPLING], ALL))
                listed = await http.post(url, headers=alice, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
                answer = {"jsonrpc": "2.0", "id": question["id"], "result": elicited("Alice")}
                await http.post(url, headers=alice, json=answer)
                alice_final = await anext(stream)
    assert refused.status_code == 503
    assert "retry-after" in refused.headers
    assert listed.status_code == 200  # requests that never ask still share the child
    assert answers(alice_final) == [{"result": elicited("Alice")}]


def gated_call(gate: Path) -> dict[str, Any]:
    """A modern call that reports progress and waits at ``gate`` (it never asks), declaring what
    Alice declares: children told them are one pool, so it may be a held question's candidate."""
    return modern_call(5, "wait_gate", {"gate": str(gate)}, progressToken="g", **{CAPABILITIES_KEY: ALL})


async def test_with_child_asks_never_a_question_from_two_calls_in_flight_waits_until_one_is_left(
    tmp_path: Path,
) -> None:
    """Sharing on purpose: the question is held, not answered, until the other call has ended
    with its child's answer (a call whose tool waits for the answer cannot end so)."""
    pool = PoolSettings(child_asks=AskPolicy.NEVER)
    gate = tmp_path / "gate"
    send, receive = anyio.create_memory_object_stream[dict[str, Any]](10)
    with anyio.fail_after(WAIT), send, receive, recording("gateway.child") as held_questions:
        async with running_gateway(legacy_child(), pool=pool) as url, httpx.AsyncClient(timeout=WAIT) as http:
            alice = await open_session(http, url, ALL)

            async def alice_calls() -> None:
                async with http.stream("POST", url, headers=alice, json=legacy_ask(1, [ELICITATION])) as pending:
                    async for message in sse(pending):
                        await send.send(message)

            other = http.stream("POST", url, headers=modern_headers("tools/call", "wait_gate"), json=gated_call(gate))
            async with other as gated:
                gated_messages = sse(gated)
                assert (await anext(gated_messages))["method"] == "notifications/progress"  # in flight at the child
                async with anyio.create_task_group() as tg:
                    tg.start_soon(alice_calls)
                    # The child asks (either call may have asked): the question is held, nobody is asked.
                    await held_questions.wait_for_text("held until only one is left")
                    early: list[dict[str, Any]] = []
                    with contextlib.suppress(anyio.WouldBlock):
                        early.append(receive.receive_nowait())
                    gate.touch()  # the other call ends with its result: one candidate is left
                    gated_rest = [message async for message in gated_messages]
                    question = await receive.receive()
                    answer = {"jsonrpc": "2.0", "id": question["id"], "result": elicited("Alice")}
                    await http.post(url, headers=alice, json=answer)
                    alice_final = await receive.receive()
            by_gateway = await metric(http, url, "mcp_gateway_child_questions_answered_by_gateway_total")
    assert early == []
    assert [message["result"]["structuredContent"]["gate"] for message in gated_rest] == [str(gate)]
    assert question["method"] == "elicitation/create"
    assert answers(alice_final) == [{"result": elicited("Alice")}]
    assert by_gateway == 0


async def test_with_child_asks_never_a_held_question_goes_to_no_client_when_a_candidate_leaves(tmp_path: Path) -> None:
    """The candidate whose client left did not end by its child's answer: the question may be
    its own, so the gateway answers it; the call left in flight is never asked (before, it was
    given the leaver's question)."""
    pool = PoolSettings(child_asks=AskPolicy.NEVER)
    gate = tmp_path / "gate"
    with anyio.fail_after(WAIT), recording("gateway.child") as child_log:
        async with running_gateway(legacy_child(), pool=pool) as url, httpx.AsyncClient(timeout=WAIT) as http:
            other = http.stream("POST", url, headers=modern_headers("tools/call", "wait_gate"), json=gated_call(gate))
            async with other as gated:
                gated_messages = sse(gated)
                assert (await anext(gated_messages))["method"] == "notifications/progress"  # in flight at the child
                asking = modern_ask(7, [ELICITATION], ALL)
                ask_headers = modern_headers("tools/call", "ask_client")
                async with anyio.create_task_group() as tg:  # Alice's call: its answer would come at the end
                    tg.start_soon(lambda: http.post(url, headers=ask_headers, json=asking))
                    await child_log.wait_for_text("held until only one is left")  # Alice's, or the other's?
                    tg.cancel_scope.cancel()
                # Alice's client has left (a modern client's hang-up cancels its call): her call is
                # cancelled at the child, and her question is nobody's to answer but the gateway's.
                answered: list[str] = []

                async def open_the_gate_once_answered() -> None:
                    answered.append((await child_log.wait_for_text("the gateway answered it")).getMessage())
                    gate.touch()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(open_the_gate_once_answered)
                    following = await anext(gated_messages)  # the gate's result, or a question (before: Alice's)
                    tg.cancel_scope.cancel()
            by_gateway = await metric(http, url, "mcp_gateway_child_questions_answered_by_gateway_total")
    assert following.get("result", {}).get("structuredContent", {}).get("gate") == str(gate), following  # no question
    assert len(answered) == 1
    assert "may have asked it was cancelled" in answered[0]
    assert by_gateway == 1


async def test_a_legacy_session_whose_child_is_asking_for_another_runs_its_call_on_a_second_child() -> None:
    pool = PoolSettings(min_size=1, max_size=2)
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(legacy_child(), pool=pool) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            alice = await open_session(http, url, {"elicitation": {}})
            bob = await open_session(http, url, {"elicitation": {}})  # both sessions live on the first child
            async with http.stream("POST", url, headers=alice, json=legacy_ask(1, [ELICITATION])) as pending:
                stream = sse(pending)
                question = await anext(stream)
                async with http.stream("POST", url, headers=bob, json=legacy_ask(1, [ELICITATION])) as bobs:
                    bob_stream = sse(bobs)
                    bob_question = await anext(bob_stream)  # asked at once, on the second child
                    answer = {"jsonrpc": "2.0", "id": bob_question["id"], "result": elicited("Bob")}
                    await http.post(url, headers=bob, json=answer)
                    bob_final = await anext(bob_stream)
                answer = {"jsonrpc": "2.0", "id": question["id"], "result": elicited("Alice")}
                await http.post(url, headers=alice, json=answer)
                alice_final = await anext(stream)
    assert answers(bob_final) == [{"result": elicited("Bob")}]
    assert answers(alice_final) == [{"result": elicited("Alice")}]
