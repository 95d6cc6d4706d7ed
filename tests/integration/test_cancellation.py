"""Cancellation across the gateway, with a real child behind a real socket: a **modern**
client that closes its SSE stream (the TCP connection, through uvicorn) cancels its request,
and the child gets exactly one ``notifications/cancelled`` naming the child-side id (SHTTP
§Cancellation; digest §7.4).

The rest of the cancellation paths (a modern client abandoning a pending JSON answer, a
legacy client's POSTed cancellation, a legacy client's disconnect that does not cancel) are
component tests (tests/component/test_streams.py), where the fake child says when a call
arrives and when a cancel names it.

How the tests know, without sleeping or polling, what the child is doing: the test server
keeps its tool calls in flight until each has ended, and its ``await_idle`` tool answers once
it is the only one left (it waits on the server's own condition, in the child: one round trip
through the gateway). Every wait is bounded by ``fail_after``. The child-side id is never
known to the client, but a cancellation that names the wrong id does not stop the child's
work, so "no other call is in flight" proves the id was the child's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import server_processes, server_spec
from tests.gateway_server import (
    MODERN_META,
    modern_call,
    modern_headers,
    parse_sse,
    running_gateway,
)
from tests.logrecords import Records, recording

pytestmark = pytest.mark.anyio

WAIT_SECONDS = 10.0
CHILD_ERAS = ["modern", "legacy"]


class Child:
    """The gateway's one child, watched from outside through real traffic."""

    def __init__(self, http: httpx.AsyncClient, url: str, access: Records) -> None:
        self.http, self.url = http, url
        self.access = access  # the gateway's access lines

    async def round_trip(self) -> None:
        """A ``tools/list`` through the gateway: real traffic that starts no tool thread."""
        reply = await self.http.post(
            self.url,
            headers=modern_headers("tools/list"),
            json={"jsonrpc": "2.0", "id": "poll", "method": "tools/list", "params": {"_meta": MODERN_META}},
        )
        assert reply.status_code == 200, reply.text

    async def wait_idle(self) -> None:
        """Until the child runs no tool call but the one asking (bounded, in the child too)."""
        with anyio.fail_after(WAIT_SECONDS):
            body = await self.call("idle", "await_idle", {"timeout_ms": int(WAIT_SECONDS * 1000) - 1000})
        assert body["result"]["structuredContent"]["others"] == 0, body

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
        """The child's cancelled ids, once a request was cancelled (bounded): its access line
        comes once its exchange is closed, which queued the child's cancel ahead of this ask."""
        with anyio.fail_after(WAIT_SECONDS):
            await self.access.wait_for_text("outcome=cancelled")
        return await self.cancelled_ids()


@asynccontextmanager
async def watched_child(child_era: str) -> AsyncIterator[Child]:
    with recording("gateway.access") as access:
        async with (
            # Declaring no client capability to legacy children keeps every client on the one child
            # (children are keyed by the capabilities they are told; these clients declare none).
            running_gateway(server_spec("--era", child_era, client_capabilities={}), pool_size=1) as url,
            httpx.AsyncClient(timeout=WAIT_SECONDS) as http,
        ):
            child = Child(http, url, access)
            await child.round_trip()  # the pool is ready
            assert len(server_processes()) == 1
            yield child


def assert_exactly_one_child_side_id(ids: list[Any]) -> None:
    assert len(ids) == 1, ids
    # The clients in these tests use string ids: an integer proves the gateway named its own.
    assert type(ids[0]) is int, ids


async def assert_the_gateway_still_serves(child: Child) -> None:
    echoed = await child.call("after", "echo", {"message": "still here"})
    assert echoed["result"]["content"] == [{"type": "text", "text": "still here"}]


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

            await child.wait_idle()  # the countdown stopped long before its 30 s
            assert_exactly_one_child_side_id(await child.wait_cancelled_ids())
            await assert_the_gateway_still_serves(child)
            assert_exactly_one_child_side_id(await child.cancelled_ids())
