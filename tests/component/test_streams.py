"""Streams over fake children: progress as SSE in order, exactly one answer per request, and
what reaches the child when a client leaves or cancels.

- A **modern** client that goes away (its SSE stream, or its pending JSON answer) cancels its
  request: the child gets exactly one ``notifications/cancelled`` naming the child-side id.
- A **legacy** client cancels by POSTing ``notifications/cancelled`` with its own id; its
  pending POST then ends with no reply in it. A legacy client that merely disconnects does
  not cancel.

Moved here from tests/integration/test_cancellation.py, which watched a real child's thread
count in ``/proc`` between ``tools/list`` round trips; the fake child says when a call
arrives and when a cancel names it. The SSE-close case over a real socket stays there. The
batch case comes from tests/integration/test_posted_cancels.py (it polled the child's stdin).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.relay.server_config import DualEra
from gateway.stdio.pool import PoolSettings
from tests.component.fakechild import Era, FakeBackend, Script, fake_backend
from tests.component.harness import Gateway, in_process_gateway, legacy_call
from tests.gateway_server import modern_call, modern_headers, open_legacy_session

pytestmark = pytest.mark.anyio

BOUND = 20.0
CHILD_ERAS: list[Era] = ["modern", "legacy"]


async def flush(gw: Gateway, backend: FakeBackend, headers: dict[str, str] | None = None) -> None:
    """One more request through the gateway to the child, answered: whatever the gateway wrote
    to that child before it (a cancel, say) has been read by the child (stdin is ordered)."""
    if headers is None:
        reply = await gw.http.post(
            gw.url, headers=modern_headers("tools/call", "echo"), json=modern_call("flush", "echo", {"message": "f"})
        )
    else:
        reply = await gw.http.post(gw.url, headers=headers, json=legacy_call("flush", "echo", {"message": "f"}))
    assert reply.json()["result"]["content"][0]["text"] == "f"


async def test_progress_reaches_each_client_as_sse_in_order_and_then_exactly_one_answer() -> None:
    """Six clients, modern and legacy, all with progress token "p", on one child at once: each
    gets its own five progress notifications in order, token restored, then its one answer."""
    with anyio.fail_after(BOUND):
        async with (
            fake_backend() as backend,
            in_process_gateway(backend, pool=PoolSettings(1, 1), dual_era=DualEra.MODERN) as gw,
        ):
            sessions = [await open_legacy_session(gw.http, gw.url) for _ in range(3)]
            seen: dict[str, list[dict[str, Any]]] = {}

            async def client(n: int) -> None:
                tag = f"client-{n}"
                args = {"count": 5, "tag": tag, "hold": True}
                if n < 3:
                    request = (
                        modern_call(n, "progress", args, progressToken="p"),
                        modern_headers("tools/call", "progress"),
                    )
                else:
                    request = (legacy_call(n, "progress", args, progressToken="p"), sessions[n - 3])
                async with gw.open(*request) as response:
                    assert await response.start() == 200
                    assert response.headers["content-type"].startswith("text/event-stream")
                    progress = [m for _ in range(5) if (m := await response.next_message()) is not None]
                    [call] = [c for c in backend.calls("progress") if c.arguments["tag"] == tag]
                    call.release()  # the answer can come only now: after all five
                    seen[tag] = [*progress, *await response.messages()]

            async with anyio.create_task_group() as tg:
                for n in range(6):
                    tg.start_soon(client, n)
    for n in range(6):
        messages = seen[f"client-{n}"]
        assert [m["params"]["progress"] for m in messages[:5]] == [1, 2, 3, 4, 5]
        assert {m["params"]["progressToken"] for m in messages[:5]} == {"p"}
        assert [m["params"]["message"] for m in messages[:5]] == [f"client-{n} {k}" for k in range(1, 6)]
        [answer] = messages[5:]  # exactly one answer, last
        assert answer["id"] == n
        assert answer["result"]["content"][0]["text"] == "released"
    assert len(backend.children) == 1


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_a_modern_client_leaving_its_sse_stream_cancels_its_call_at_the_child_exactly_once(
    child_era: Era,
) -> None:
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era=child_era)) as backend,
            in_process_gateway(backend, pool=PoolSettings(1, 2)) as gw,
        ):
            async with anyio.create_task_group() as tg:
                other: list[Any] = []

                async def stays() -> None:
                    body = modern_call(
                        "stays", "progress", {"count": 1, "tag": "stays", "hold": True}, progressToken="s"
                    )
                    async with gw.open(body, modern_headers("tools/call", "progress")) as response:
                        other.extend(await response.messages())

                tg.start_soon(stays)
                body = modern_call("leaves", "progress", {"count": 2, "tag": "leaves", "hold": True}, progressToken="p")
                async with gw.open(body, modern_headers("tools/call", "progress")) as response:
                    first = await response.next_message()
                    assert first is not None
                    assert first["params"]["progressToken"] == "p"
                    response.disconnect()  # the client goes away mid-stream
                [leaver] = [c for c in backend.calls() if c.arguments.get("tag") == "leaves"]
                await backend.until(leaver.cancelled.is_set)
                [stayer] = await backend.wait_calls(1)
                assert stayer.arguments["tag"] == "stays"
                stayer.release()
            await flush(gw, backend)
    assert leaver.child.cancels() == [leaver.id]  # exactly one, naming the child-side id (an int)
    assert type(leaver.id) is int
    assert stayer.child.cancels() == ([leaver.id] if stayer.child is leaver.child else [])
    assert [m.get("id") for m in other] == [None, "stays"]  # its progress, then its one answer


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_a_modern_client_abandoning_a_pending_json_answer_cancels_its_call_at_the_child(
    child_era: Era,
) -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era=child_era)) as backend, in_process_gateway(backend) as gw:
            async with gw.open(modern_call("slow", "hold", {}), modern_headers("tools/call", "hold")) as response:
                [call] = await backend.wait_calls(1)  # the child works on it; no byte has come back
                assert response.sent_nothing()
                response.disconnect()
            await backend.until(call.cancelled.is_set)
            await flush(gw, backend)
    assert call.child.cancels() == [call.id]
    assert not call.answered


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_a_legacy_clients_posted_cancellation_reaches_the_child_and_ends_the_pending_post_unanswered(
    child_era: Era,
) -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era=child_era)) as backend, in_process_gateway(backend) as gw:
            session = await open_legacy_session(gw.http, gw.url)
            async with gw.open(legacy_call("nap", "hold"), session) as response:
                [call] = await backend.wait_calls(1)
                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "nap"}}
                assert (await gw.http.post(gw.url, headers=session, json=cancel)).status_code == 202
                assert await response.start() == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                assert await response.messages() == []  # no -31005, no result: a cancelled request is not answered
            await backend.until(call.cancelled.is_set)
            await flush(gw, backend, session)
    assert call.child.cancels() == [call.id]


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_a_legacy_client_that_disconnects_mid_call_does_not_cancel_it_at_the_child(child_era: Era) -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era=child_era)) as backend, in_process_gateway(backend) as gw:
            session = await open_legacy_session(gw.http, gw.url)
            async with gw.open(legacy_call("first", "hold"), session) as response:
                [call] = await backend.wait_calls(1)
                response.disconnect()  # pushed to the request at once, as the server does
                # A legacy call outlives its client: the app's call returns only when it ends.
                call.release()
                await backend.until(lambda: call.answered)
            await flush(gw, backend, session)
    assert call.child.cancels() == []


async def test_a_cancelled_request_of_a_2025_03_26_batch_is_left_out_of_the_answer() -> None:
    """Moved from tests/integration/test_posted_cancels.py (it polled the child's stdin record)."""
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="legacy")) as backend,
            in_process_gateway(backend, pool=PoolSettings(1, 1)) as gw,
        ):
            session = await open_legacy_session(gw.http, gw.url, version="2025-03-26")
            batch = [legacy_call("b1", "hold"), legacy_call("b2", "echo", {"message": "kept"})]
            answered: list[Any] = []
            async with anyio.create_task_group() as tg:

                async def post_batch() -> None:
                    answered.append(await gw.http.post(gw.url, headers=session, json=batch))

                tg.start_soon(post_batch)
                [held] = await backend.wait_calls(1, "hold")
                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "b1"}}
                assert (await gw.http.post(gw.url, headers=session, json=cancel)).status_code == 202
    [reply] = answered
    assert reply.status_code == 200
    assert [(m["id"], m["result"]["content"][0]["text"]) for m in reply.json()] == [("b2", "kept")]
    assert held.child.cancels() == [held.id]
