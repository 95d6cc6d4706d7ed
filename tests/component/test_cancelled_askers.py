"""A call cancelled before it asked: its tool's late question is nobody's, never the next
client's on that child (``gateway.protocol.childquestions``, "A cancelled asker lingers").

Bob's call is cancelled (he hangs up) while its tool is still running, and the tool, which
does not stop at the cancel, asks a question about Bob's business once Alice's call has been
taken. Before, Bob's child was free at his cancel, Alice's call was given it, and Bob's
question went to Alice as hers (her answer then went to Bob's tool). Now the cancelled call
lingers: Alice's call runs on another child, and Bob's question is answered by the gateway.
Both child eras; waits on the fake's events, bounded.
"""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest

from gateway.stdio.pool import PoolSettings
from tests.component.fakecalls import DEFAULT_TOOLS
from tests.component.fakechild import Call, FakeBackend, JsonObject, Script, fake_backend, text
from tests.component.harness import Gateway, in_process_gateway
from tests.gateway_server import modern_call, modern_headers

pytestmark = [pytest.mark.anyio, pytest.mark.component]

BOUND = 15.0
DECLARED = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


def calls(backend: FakeBackend, method: str) -> int:
    """Messages of ``method`` the children read (the warm-up's call not counted)."""
    return sum(
        message.get("method") == method and (message.get("params") or {}).get("name") != "ask"
        for child in backend.children
        for message in child.received
    )


async def seen_asking(gw: Gateway) -> None:
    """The child asks during a call once (``roots/list``, answered by the gateway for a client
    that declares no roots): a child seen to ask is one whose cancelled calls linger."""
    body = modern_call(0, "ask", {"method": "roots/list"}, **DECLARED)
    reply = await gw.http.post(gw.url, headers=modern_headers("tools/call", "ask"), json=body)
    assert reply.json()["result"]["content"][0]["text"] == "asked", reply.text


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_a_cancelled_calls_late_question_never_reaches_the_next_client(era: str) -> None:
    ask_now = anyio.Event()
    bob_got: dict[str, Any] = {}

    async def bobs_tool(call: Call) -> JsonObject:
        await call.cancelled.wait()  # it does not stop at the cancel
        await ask_now.wait()
        reply = await call.child.ask(
            "elicitation/create", {"message": "Bob: approve the wire?", "requestedSchema": SCHEMA}
        )
        bob_got.update(reply)
        call.child.backend.changes.changed()
        return text("bob's tool ended")

    async def alices_tool(call: Call) -> JsonObject:
        await call.child.ask("elicitation/create", {"message": "Alice: your name?", "requestedSchema": SCHEMA})
        return text("alice's tool ended")

    script = Script(era=era, tools={**DEFAULT_TOOLS, "bob": bobs_tool, "alice": alices_tool})
    with anyio.fail_after(BOUND):
        async with fake_backend(script) as backend, in_process_gateway(backend, pool=PoolSettings(max_size=2)) as gw:
            await seen_asking(gw)
            async with gw.open(modern_call(1, "bob", {}, **DECLARED), modern_headers("tools/call", "bob")):
                await backend.until(lambda: calls(backend, "tools/call") == 1)
            await backend.until(lambda: calls(backend, "notifications/cancelled") == 1)  # Bob hung up

            alice: dict[str, Any] = {}
            async with anyio.create_task_group() as tg:

                async def alices_call() -> None:
                    body = modern_call(2, "alice", {}, **DECLARED)
                    reply = await gw.http.post(gw.url, headers=modern_headers("tools/call", "alice"), json=body)
                    alice.update(reply.json())

                tg.start_soon(alices_call)
                await backend.until(lambda: calls(backend, "tools/call") == 2)  # Alice's call was taken
                ask_now.set()
                await backend.until(lambda: bool(bob_got))
    [bobs_child] = [
        child for child in backend.children if any(m.get("method") == "notifications/cancelled" for m in child.received)
    ]
    assert not any(m.get("params", {}).get("name") == "alice" for m in bobs_child.received)  # another child took it
    assert "error" in bob_got or bob_got.get("result", {}).get("action") in (
        "decline",
        "cancel",
    )  # the gateway's answer
    questions = alice["result"]["inputRequests"]
    assert [q["params"]["message"] for q in questions.values()] == ["Alice: your name?"]


async def test_a_cancelled_calls_log_lines_never_reach_the_client_left_on_its_child() -> None:
    """A log line carries no request id: it goes to the one request in flight. Bob's tool logs
    about his work after his cancel; Alice's call, then alone on the child, asked for logs."""
    logged = anyio.Event()

    async def bobs_tool(call: Call) -> JsonObject:
        await call.cancelled.wait()
        data = "bob: SELECT salary FROM payroll"
        await call.child.write(
            {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": data}}
        )
        logged.set()
        return text("bob's tool ended")

    script = Script(era="modern", tools={**DEFAULT_TOOLS, "bob": bobs_tool})
    with anyio.fail_after(BOUND):
        async with fake_backend(script) as backend, in_process_gateway(backend, pool=PoolSettings(max_size=1)) as gw:
            alice: list[JsonObject] = []
            async with anyio.create_task_group() as tg:

                async def alices_call() -> None:
                    body = modern_call(2, "hold", {}, **{"io.modelcontextprotocol/logLevel": "debug"})
                    async with gw.open(body, modern_headers("tools/call", "hold")) as response:
                        await response.start()
                        if response.headers["content-type"].startswith("text/event-stream"):
                            alice.extend(await response.messages())
                        else:  # nothing came before the answer: JSON
                            alice.append(orjson.loads(await response.body()))

                tg.start_soon(alices_call)
                [held] = await backend.wait_calls(1)
                async with gw.open(modern_call(1, "bob", {}, **DECLARED), modern_headers("tools/call", "bob")):
                    await backend.until(lambda: calls(backend, "tools/call") == 2)
                await logged.wait()  # Bob hung up; his tool logged on
                held.release()
    assert [m["result"]["content"][0]["text"] for m in alice] == ["released"]  # no log line of Bob's
