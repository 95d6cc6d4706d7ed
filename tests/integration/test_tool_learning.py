"""Per-tool learning under ``--child-asks auto`` (attribution rule 5): a legacy child told it may
ask is not made to run every call alone. A tool that ran once, answered and asked nothing shares
the child with its own later calls; a tool that asked once keeps getting the child to itself; a
quiet tool that asks while sharing is held (never answered by the gateway) until it is the one
call left, then runs alone.

The child is the legacy-only test server with one child (``max_size=1``), so "shares" means two
calls in flight on the same process at once, shown by events, never by timing: a 60 s sleep is
in flight (its progress came, its result cannot come within the test) while another call ends.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway.stdio.pool import PoolSettings
from tests.gateway_server import running_gateway
from tests.integration.test_attribution import elicited
from tests.integration.test_client_requests import (
    ELICITATION,
    WAIT,
    answers,
    legacy_ask,
    legacy_child,
    legacy_result,
    legacy_tool,
    open_session,
    sse,
)
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

HELD_MS = 60_000  # longer than WAIT: a call that sleeps this long is in flight for the whole test


def with_progress(message: dict[str, Any], token: str) -> dict[str, Any]:
    message["params"]["_meta"] = {"progressToken": token}
    return message


async def test_after_one_quiet_call_two_legacy_sessions_run_that_tool_at_once_on_the_one_child() -> None:
    pool = PoolSettings(min_size=1, max_size=1)  # default child_asks: auto; the child is told it may ask
    with anyio.fail_after(WAIT):
        async with running_gateway(legacy_child(), pool=pool) as url, httpx.AsyncClient(timeout=WAIT) as http:
            alice = await open_session(http, url, {"elicitation": {}, "sampling": {}})
            bob = await open_session(http, url, {"elicitation": {}, "sampling": {}})
            warm_up = await legacy_result(http, url, alice, legacy_tool(1, "sleep", ms=0))
            held = with_progress(legacy_tool(2, "sleep", ms=HELD_MS, progress=True), "alice")
            async with http.stream("POST", url, headers=alice, json=held) as pending:
                alice_stream = sse(pending)  # kept: a dropped iterator closes the stream (a cancel)
                progress = await anext(alice_stream)  # alice's sleep is in flight on the child
                bobs = await legacy_result(http, url, bob, legacy_tool(1, "sleep", ms=0))
    assert progress["method"] == "notifications/progress"
    # Bob's call ran and ended on the one child while alice's was in flight there.
    assert bobs["structuredContent"]["pid"] == warm_up["structuredContent"]["pid"]
    assert warm_up["structuredContent"]["ended"] <= bobs["structuredContent"]["started"]


async def test_a_tool_that_asked_once_keeps_the_child_to_itself_while_a_quiet_tool_still_shares() -> None:
    pool = PoolSettings(min_size=1, max_size=1, queue_timeout=0.2, asking_max=0)  # no child to spare
    with anyio.fail_after(WAIT):
        async with running_gateway(legacy_child(), pool=pool) as url, httpx.AsyncClient(timeout=WAIT) as http:
            alice = await open_session(http, url, {"elicitation": {}})
            bob = await open_session(http, url, {"elicitation": {}})
            await legacy_result(http, url, bob, legacy_tool(1, "sleep", ms=0))  # sleep: learned quiet
            async with http.stream("POST", url, headers=alice, json=legacy_ask(1, [ELICITATION])) as asking:
                stream = sse(asking)
                question = await anext(stream)  # ask_client asked: it is an asking tool from now on
                answer = {"jsonrpc": "2.0", "id": question["id"], "result": elicited("Alice")}
                await http.post(url, headers=alice, json=answer)
                alice_final = await anext(stream)
            await legacy_result(http, url, alice, legacy_ask(3, []))  # asks nothing this time: still asking
            # In flight with no question open yet: only the tool's own record keeps others off.
            held = with_progress(legacy_ask(2, [], wait_ms=HELD_MS, progress=True), "alice")
            async with http.stream("POST", url, headers=alice, json=held) as pending:
                alice_stream = sse(pending)  # kept: a dropped iterator closes the stream (a cancel)
                progress = await anext(alice_stream)
                refused = await http.post(url, headers=bob, json=legacy_ask(2, []))
                shared = await legacy_result(http, url, bob, legacy_tool(3, "sleep", ms=0))
    assert answers(alice_final) == [{"result": elicited("Alice")}]
    assert progress["method"] == "notifications/progress"
    assert refused.status_code == 503  # ask_client waited for the one child, past the queue timeout
    assert shared["structuredContent"]["started"] <= shared["structuredContent"]["ended"]


async def test_a_quiet_tool_that_asks_while_sharing_is_held_until_alone_and_then_runs_alone(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    pool = PoolSettings(min_size=1, max_size=1, queue_timeout=0.2, asking_max=0)  # no child to spare
    send, receive = anyio.create_memory_object_stream[dict[str, Any]](10)
    with anyio.fail_after(WAIT), send, receive, recording("gateway.child") as held_questions:
        async with running_gateway(legacy_child(), pool=pool) as url, httpx.AsyncClient(timeout=WAIT) as http:
            alice = await open_session(http, url, {"elicitation": {}})
            bob = await open_session(http, url, {"elicitation": {}})
            await legacy_result(http, url, alice, legacy_ask(1, []))  # asked nothing: ask_client is quiet

            async def alice_calls() -> None:
                async with http.stream("POST", url, headers=alice, json=legacy_ask(2, [ELICITATION])) as pending:
                    async for message in sse(pending):
                        await send.send(message)

            held = with_progress(legacy_ask(1, [], gate=str(gate), progress=True), "bob")
            async with http.stream("POST", url, headers=bob, json=held) as bobs:
                bob_stream = sse(bobs)  # kept: a dropped iterator closes the stream (a cancel)
                assert (await anext(bob_stream))["method"] == "notifications/progress"
                async with anyio.create_task_group() as tg:
                    tg.start_soon(alice_calls)  # shares the child with bob's call: both are candidates
                    # The child asks (either call may have asked): the question is held, nobody is asked.
                    await held_questions.wait_for_text("held until only one is left")
                    early: list[dict[str, Any]] = []
                    with contextlib.suppress(anyio.WouldBlock):
                        early.append(receive.receive_nowait())
                    gate.touch()  # bob's call ends with its child's answer: alice's is the one left
                    bob_rest = [message async for message in bob_stream]
                    question = await receive.receive()
                    answer = {"jsonrpc": "2.0", "id": question["id"], "result": elicited("Alice")}
                    await http.post(url, headers=alice, json=answer)
                    alice_final = await receive.receive()
            # ask_client asked: it runs alone again, even though it once asked nothing.
            again = with_progress(legacy_ask(3, [], wait_ms=HELD_MS, progress=True), "alice")
            async with http.stream("POST", url, headers=alice, json=again) as pending:
                again_stream = sse(pending)  # kept: a dropped iterator closes the stream (a cancel)
                assert (await anext(again_stream))["method"] == "notifications/progress"
                refused = await http.post(url, headers=bob, json=legacy_ask(2, []))
    assert early == []
    assert [message.get("method") for message in bob_rest] == ["notifications/progress", None]  # never asked
    assert answers(bob_rest[-1]) == []
    assert question["method"] == "elicitation/create"
    assert answers(alice_final) == [{"result": elicited("Alice")}]
    assert refused.status_code == 503
