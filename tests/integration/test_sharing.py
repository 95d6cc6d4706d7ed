"""Many clients share one child: each sees only its own answer and its own progress.

64 clients talk at once to a gateway whose pool holds a single child. They all use the
JSON-RPC id ``1`` and each asks ``progress_burst`` for a burst tagged with its own tag, under
its own progress token; the tokens include both ``0`` and ``"0"``, which must not be
confused. The gateway must give every client exactly its own progress (its token, its tag,
in order) and its own result, and the ``pid`` tool must show they all reached one process.
"""

from __future__ import annotations

import ssl
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import server_spec
from tests.gateway_server import (
    BASE_HEADERS,
    legacy_initialize,
    modern_call,
    modern_headers,
    parse_sse,
    running_gateway,
)

pytestmark = pytest.mark.anyio

CLIENTS = 64
BURST = 20
LEGACY_VERSION = "2025-11-25"


def token_for(index: int) -> int | str:
    """Pairs of clients get ``2k`` and ``"2k"``: equal as text, different as JSON."""
    return index if index % 2 == 0 else str(index - 1)


def messages_of(reply: httpx.Response) -> list[dict[str, Any]]:
    assert reply.status_code == 200, reply.text
    if reply.headers["content-type"].startswith("text/event-stream"):
        return parse_sse(reply.text)
    return [reply.json()]


def assert_only_own_burst(messages: list[dict[str, Any]], tag: str, token: int | str) -> None:
    *progress, final = messages
    assert final["id"] == 1
    assert type(final["id"]) is int
    assert final["result"]["content"] == [{"type": "text", "text": tag}]
    assert [note["method"] for note in progress] == ["notifications/progress"] * BURST
    for note in progress:
        assert note["params"]["message"] == tag
        assert note["params"]["progressToken"] == token
        assert type(note["params"]["progressToken"]) is type(token)
    assert [note["params"]["progress"] for note in progress] == list(range(1, BURST + 1))


class ModernClient:
    """A stateless client: every request carries its headers and ``_meta``."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http, self.url = http, url

    async def open(self) -> None:
        """Nothing to open: there is no session."""

    async def call(self, tool: str, arguments: dict[str, Any], **meta: Any) -> list[dict[str, Any]]:
        reply = await self.http.post(
            self.url, headers=modern_headers("tools/call", tool), json=modern_call(1, tool, arguments, **meta)
        )
        return messages_of(reply)


class LegacyClient:
    """A client with its own ``Mcp-Session-Id``; ids are unique within its session only."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http, self.url = http, url
        self.headers: dict[str, str] = {}
        self.next_id = 0

    async def open(self) -> None:
        init = await self.http.post(
            self.url,
            headers=BASE_HEADERS,
            json=legacy_initialize(LEGACY_VERSION),
        )
        assert init.status_code == 200, init.text
        self.headers = {
            **BASE_HEADERS,
            "mcp-session-id": init.headers["mcp-session-id"],
            "mcp-protocol-version": LEGACY_VERSION,
        }
        note = await self.http.post(
            self.url, headers=self.headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        assert note.status_code == 202
        self.next_id = 1

    async def call(self, tool: str, arguments: dict[str, Any], **meta: Any) -> list[dict[str, Any]]:
        request_id, self.next_id = self.next_id, self.next_id + 1
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        if meta:
            params["_meta"] = meta
        reply = await self.http.post(
            self.url,
            headers=self.headers,
            json={"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params},
        )
        return messages_of(reply)


@pytest.mark.parametrize("child_era", ["modern", "legacy"])
@pytest.mark.parametrize("client_era", ["modern", "legacy"])
async def test_sixty_four_clients_with_the_same_id_on_one_child_each_get_only_their_own_progress_and_result(
    client_era: str, child_era: str
) -> None:
    bursts: dict[int, list[dict[str, Any]]] = {}
    pids: dict[int, int] = {}
    kind = ModernClient if client_era == "modern" else LegacyClient

    with anyio.fail_after(20):
        async with running_gateway(server_spec("--era", child_era), pool_size=1) as url, AsyncExitStack() as stack:
            # One HTTP client (one connection) each, as independent agents would have: a single
            # shared httpx pool spends seconds rescanning 64 busy connections. They share one
            # TLS context (unused on plain http) because loading the CA store 64 times is slow.
            tls = ssl.create_default_context()
            clients = [
                kind(await stack.enter_async_context(httpx.AsyncClient(timeout=15, verify=tls)), url)
                for _ in range(CLIENTS)
            ]
            async with anyio.create_task_group() as tg:
                for client in clients:
                    tg.start_soon(client.open)

            async def run(index: int) -> None:
                client = clients[index]
                bursts[index] = await client.call(
                    "progress_burst", {"count": BURST, "tag": f"client-{index}"}, progressToken=token_for(index)
                )
                [pid_reply] = await client.call("pid", {})
                pids[index] = pid_reply["result"]["structuredContent"]["pid"]

            async with anyio.create_task_group() as tg:
                for index in range(CLIENTS):
                    tg.start_soon(run, index)

    assert sorted(bursts) == list(range(CLIENTS))
    for index, messages in bursts.items():
        assert_only_own_burst(messages, f"client-{index}", token_for(index))
    assert len(set(pids.values())) == 1, pids
