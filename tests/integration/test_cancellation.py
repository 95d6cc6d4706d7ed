"""Cancellation across the gateway: what reaches the child when a client leaves or cancels.

- A **modern** client that goes away (its SSE stream or its pending JSON answer) cancels
  its request: the child gets exactly one ``notifications/cancelled`` naming the child-side
  id (SHTTP §Cancellation; digest §7.4).
- A **legacy** client cancels by POSTing ``notifications/cancelled`` with its own id; its
  pending POST then ends, with no reply in it (a cancelled request is not answered),
  instead of hanging.
- A **legacy** client that merely disconnects does not cancel (L-TR §Sending Messages).

How the tests know, without sleeping, what the child is doing: the test server runs every
``tools/call`` on a thread of its own, while ``tools/list`` is answered on its reader thread.
So the child's thread count (``/proc/PID/task``) rises by one exactly when it starts working
on a call and falls back when that work ends; it is polled between real ``tools/list``
round trips through the gateway, and every wait is bounded by ``fail_after``. The child-side
id is never known to the client, but a cancellation that names the wrong id does not stop
the child's work, so "the thread count fell back" proves the id was the child's.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import server_processes, server_spec
from tests.gateway_server import (
    BASE_HEADERS,
    MODERN_META,
    modern_call,
    modern_headers,
    parse_sse,
    running_gateway,
)

pytestmark = pytest.mark.anyio

LEGACY_VERSION = "2025-11-25"
LONG_MS = 30_000
"""Long enough that only a cancellation can end the work within a test's time bound."""
WAIT_SECONDS = 10.0
CHILD_ERAS = ["modern", "legacy"]


class Child:
    """The gateway's one child, watched from outside through real traffic and /proc."""

    def __init__(self, http: httpx.AsyncClient, url: str, pid: int) -> None:
        self.http, self.url, self.pid = http, url, pid
        self.idle_threads = 0

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/task"))

    async def round_trip(self) -> None:
        """A ``tools/list`` through the gateway: real traffic that starts no tool thread."""
        reply = await self.http.post(
            self.url,
            headers=modern_headers("tools/list"),
            json={"jsonrpc": "2.0", "id": "poll", "method": "tools/list", "params": {"_meta": MODERN_META}},
        )
        assert reply.status_code == 200, reply.text

    async def wait_threads(self, extra: int) -> None:
        """Until the child runs exactly ``extra`` tool calls (bounded)."""
        with anyio.fail_after(WAIT_SECONDS):
            while self.threads() != self.idle_threads + extra:
                await self.round_trip()

    async def call(self, request_id: Any, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        reply = await self.http.post(
            self.url, headers=modern_headers("tools/call", tool), json=modern_call(request_id, tool, arguments)
        )
        assert reply.status_code == 200, reply.text
        assert reply.headers["content-type"] == "application/json"
        body: dict[str, Any] = reply.json()
        assert body["id"] == request_id
        return body

    async def cancelled_ids(self) -> list[Any]:
        body = await self.call("ids", "cancelled_ids")
        ids: list[Any] = body["result"]["structuredContent"]["ids"]
        return ids

    async def wait_cancelled_ids(self) -> list[Any]:
        """The child's cancelled ids, once there is at least one (bounded, real requests)."""
        with anyio.fail_after(WAIT_SECONDS):
            while not (ids := await self.cancelled_ids()):
                pass
        return ids


@asynccontextmanager
async def watched_child(child_era: str) -> AsyncIterator[Child]:
    async with (
        running_gateway(server_spec("--era", child_era), pool_size=1) as url,
        httpx.AsyncClient(timeout=WAIT_SECONDS) as http,
    ):
        child = Child(http, url, 0)
        await child.round_trip()  # the pool is ready and no tool thread has ever run
        [child.pid] = [pid for pid, _ in server_processes()]
        child.idle_threads = child.threads()
        yield child


def assert_exactly_one_child_side_id(ids: list[Any]) -> None:
    assert len(ids) == 1, ids
    # The clients in these tests use string ids: an integer proves the gateway named its own.
    assert type(ids[0]) is int, ids


async def assert_the_gateway_still_serves(child: Child) -> None:
    echoed = await child.call("after", "echo", {"message": "still here"})
    assert echoed["result"]["content"] == [{"type": "text", "text": "still here"}]


async def open_legacy_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    init = await http.post(
        url,
        headers=BASE_HEADERS,
        json={
            "jsonrpc": "2.0",
            "id": "init",
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
    )
    assert init.status_code == 200, init.text
    headers = {**BASE_HEADERS, "mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": LEGACY_VERSION}
    note = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert note.status_code == 202
    return headers


def legacy_call(request_id: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


# -- modern clients: leaving is cancelling ----------------------------------------------


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_a_modern_client_closing_its_sse_stream_cancels_the_call_at_the_child_exactly_once(
    child_era: str,
) -> None:
    with anyio.fail_after(20):
        async with watched_child(child_era) as child, httpx.AsyncClient(timeout=WAIT_SECONDS) as leaver:
            # 100 steps of 300 ms: 30 s, far beyond every bound below, unless it is cancelled.
            call = modern_call("slow", "countdown", {"steps": 100, "interval_ms": 300}, progressToken="p")
            async with leaver.stream(
                "POST", child.url, headers=modern_headers("tools/call", "countdown"), json=call
            ) as r:
                assert r.headers["content-type"].startswith("text/event-stream")
                async for line in r.aiter_lines():
                    if line.startswith("data:"):
                        [first] = parse_sse(line + "\n\n")
                        break
            # Leaving the block before the stream ended closed the connection.
            assert first["method"] == "notifications/progress"
            assert first["params"]["progressToken"] == "p"

            await child.wait_threads(extra=0)  # the countdown stopped long before its 30 s
            assert_exactly_one_child_side_id(await child.wait_cancelled_ids())
            await assert_the_gateway_still_serves(child)
            assert_exactly_one_child_side_id(await child.cancelled_ids())


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_a_modern_client_abandoning_a_pending_json_answer_cancels_the_call_at_the_child_exactly_once(
    child_era: str,
) -> None:
    with anyio.fail_after(20):
        async with watched_child(child_era) as child, httpx.AsyncClient(timeout=WAIT_SECONDS) as leaver:
            answered: list[httpx.Response] = []
            async with anyio.create_task_group() as tg:

                async def wait_for_answer() -> None:
                    answered.append(
                        await leaver.post(
                            child.url,
                            headers=modern_headers("tools/call", "sleep"),
                            json=modern_call("slow", "sleep", {"ms": LONG_MS}),
                        )
                    )

                tg.start_soon(wait_for_answer)
                await child.wait_threads(extra=1)  # the child is sleeping on it: no byte has come back
                tg.cancel_scope.cancel()  # the client gives up: its connection closes unanswered
            assert answered == []

            await child.wait_threads(extra=0)  # the sleep was cancelled: 30 s would outlast the bound
            assert_exactly_one_child_side_id(await child.wait_cancelled_ids())
            await assert_the_gateway_still_serves(child)
            assert_exactly_one_child_side_id(await child.cancelled_ids())


# -- legacy clients: a POSTed cancellation cancels, a disconnect does not -----------------


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_a_legacy_clients_posted_cancellation_reaches_the_child_and_ends_the_pending_post_unanswered(
    child_era: str,
) -> None:
    with anyio.fail_after(20):
        async with watched_child(child_era) as child, httpx.AsyncClient(timeout=WAIT_SECONDS) as legacy:
            headers = await open_legacy_session(legacy, child.url)
            answered: list[httpx.Response] = []
            async with anyio.create_task_group() as tg:

                async def wait_for_answer() -> None:
                    answered.append(
                        await legacy.post(child.url, headers=headers, json=legacy_call("nap", "sleep", {"ms": LONG_MS}))
                    )

                tg.start_soon(wait_for_answer)
                await child.wait_threads(extra=1)
                cancel = await legacy.post(
                    child.url,
                    headers=headers,
                    json={"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "nap"}},
                )
                assert cancel.status_code == 202
                # The pending POST must now be answered; the task group waits for it (bounded).

            [reply] = answered
            assert reply.status_code == 200
            assert reply.headers["content-type"].startswith("text/event-stream")
            assert parse_sse(reply.text) == []  # no -31005, no result: the receiver does not answer

            await child.wait_threads(extra=0)
            assert_exactly_one_child_side_id(await child.wait_cancelled_ids())
            after = await legacy.post(
                child.url, headers=headers, json=legacy_call("after", "echo", {"message": "still here"})
            )
            assert after.json()["result"]["content"] == [{"type": "text", "text": "still here"}]
            assert_exactly_one_child_side_id(await child.cancelled_ids())


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_a_legacy_client_that_disconnects_mid_call_does_not_cancel_it_at_the_child(child_era: str) -> None:
    nap = {"ms": 600}  # the window in which the poll must see the first sleep running
    with anyio.fail_after(20):
        async with watched_child(child_era) as child, httpx.AsyncClient(timeout=WAIT_SECONDS) as legacy:
            headers = await open_legacy_session(legacy, child.url)
            answered: list[httpx.Response] = []
            async with anyio.create_task_group() as tg:

                async def leave_early() -> None:
                    answered.append(
                        await legacy.post(child.url, headers=headers, json=legacy_call("first", "sleep", nap))
                    )

                tg.start_soon(leave_early)
                await child.wait_threads(extra=1)  # the child is working on the first sleep
                tg.cancel_scope.cancel()  # the client disconnects
            assert answered == []

            # A second sleep of the same length, started after the first one, finishes after it:
            # by its answer the first was either finished or cancelled, never still pending.
            second = await legacy.post(child.url, headers=headers, json=legacy_call("second", "sleep", nap))
            assert second.json()["result"]["content"] == [{"type": "text", "text": "slept"}]
            await child.wait_threads(extra=0)
            assert await child.cancelled_ids() == []
