"""subscriptions/listen for modern clients in front of a legacy child (emulated by the gateway)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from gateway.http.drain import Drain
from gateway.protocol.subscriptions import MAX_LISTEN_URIS
from gateway.stdio.pool import PoolSettings
from tests.conftest import server_spec
from tests.gateway_server import MODERN_META, modern_call, modern_headers, running_gateway

pytestmark = pytest.mark.anyio

SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
LEGACY = ("--era", "legacy")


def listen_request(listen_id: Any, **notifications: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": listen_id,
        "method": "subscriptions/listen",
        "params": {"notifications": notifications, "_meta": MODERN_META},
    }


class Sse:
    """Reads an SSE response: messages in order; keep-alive comments counted."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.aiter_lines()
        self.comments: list[str] = []

    async def next(self) -> dict[str, Any] | None:
        """The next message, or None when the stream ended."""
        data: list[str] = []
        async for line in self.lines:
            if line.startswith(":"):
                self.comments.append(line)
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif line == "" and data:
                parsed: dict[str, Any] = orjson.loads("\n".join(data))
                return parsed
        return None


@asynccontextmanager
async def listening(http: httpx.AsyncClient, url: str, listen_id: Any, **notifications: Any) -> AsyncIterator[Sse]:
    body = listen_request(listen_id, **notifications)
    async with http.stream("POST", url, headers=modern_headers("subscriptions/listen"), json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Sse(response)


async def call(http: httpx.AsyncClient, url: str, request_id: int, tool: str, arguments: dict[str, Any]) -> None:
    reply = await http.post(
        url, headers=modern_headers("tools/call", tool), json=modern_call(request_id, tool, arguments)
    )
    assert reply.status_code == 200, reply.text


async def test_the_ack_comes_first_with_what_the_child_can_do_then_opted_in_list_changed() -> None:
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec(*LEGACY)) as url,
            httpx.AsyncClient(timeout=20) as http,
            listening(
                http, url, "L1", toolsListChanged=True, promptsListChanged=True, resourceSubscriptions=["file:///x"]
            ) as stream,
        ):
            ack = await stream.next()
            assert ack is not None
            assert ack["method"] == "notifications/subscriptions/acknowledged"
            # The child advertises tools.listChanged, not prompts, nor resources.subscribe.
            assert ack["params"]["notifications"] == {"toolsListChanged": True}
            assert ack["params"]["_meta"][SUBSCRIPTION_ID] == "L1"
            # Not opted in (prompts were not honoured): never delivered. The child sends it
            # first, so the next message shows it was skipped.
            await call(http, url, 1, "notify", {"method": "notifications/prompts/list_changed"})
            await call(http, url, 2, "add_tool", {"name": "fresh"})
            changed = await stream.next()
            assert changed is not None
            assert changed["method"] == "notifications/tools/list_changed"
            assert changed["params"]["_meta"] == {SUBSCRIPTION_ID: "L1"}
            assert "id" not in changed


async def test_each_listener_gets_its_own_subscription_id_with_its_exact_type() -> None:
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec(*LEGACY)) as url,
            httpx.AsyncClient(timeout=20) as http,
            listening(http, url, 7, toolsListChanged=True) as numbered,
            listening(http, url, "7", toolsListChanged=True) as named,
            listening(http, url, 8, promptsListChanged=True) as elsewhere,
        ):
            for stream in (numbered, named):
                assert await stream.next() is not None  # the acks
            ack = await elsewhere.next()
            assert ack is not None
            assert ack["params"]["notifications"] == {}
            await call(http, url, 1, "add_tool", {"name": "fresh"})
            first, second = await numbered.next(), await named.next()
            assert first is not None
            assert second is not None
            assert first["params"]["_meta"][SUBSCRIPTION_ID] == 7
            assert second["params"]["_meta"][SUBSCRIPTION_ID] == "7"


async def test_a_quiet_listen_stream_gets_keep_alive_comments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gateway.http.listen.KEEPALIVE_SECONDS", 0.05)
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec(*LEGACY)) as url,
            httpx.AsyncClient(timeout=20) as http,
            listening(http, url, 1, toolsListChanged=True) as stream,
        ):
            assert await stream.next() is not None
            async for line in stream.lines:
                if line.startswith(":"):
                    assert line == ": keep-alive"
                    break


async def test_a_drain_ends_the_listen_with_the_graceful_result() -> None:
    drain = Drain()
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec(*LEGACY), drain=drain) as url,
            httpx.AsyncClient(timeout=20) as http,
            listening(http, url, "L", toolsListChanged=True) as stream,
        ):
            assert await stream.next() is not None
            drain.begin()
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain.wait_idle, 20)
                end = await stream.next()
                assert end == {
                    "jsonrpc": "2.0",
                    "id": "L",
                    "result": {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: "L"}},
                }
                assert await stream.next() is None


async def test_a_child_crash_ends_the_listen_without_the_graceful_result() -> None:
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec(*LEGACY)) as url,
            httpx.AsyncClient(timeout=20) as http,
            listening(http, url, 1, toolsListChanged=True) as stream,
        ):
            assert await stream.next() is not None
            reply = await http.post(
                url, headers=modern_headers("tools/call", "exit"), json=modern_call(2, "exit", {"code": 3})
            )
            assert "error" in reply.json()
            # Ended as an unexpected drop: the client reconnects (and lists again).
            assert await stream.next() is None


async def test_listen_without_notifications_is_invalid_params() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec(*LEGACY)) as url, httpx.AsyncClient(timeout=20) as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {"_meta": MODERN_META}}
            reply = await http.post(url, headers=modern_headers("subscriptions/listen"), json=body)
            assert reply.status_code == 400
            assert reply.json()["error"]["code"] == -32602


# -- a modern child: its own listen, forwarded ------------------------------------------------

MODERN_CHILD = ("--era", "modern")


async def test_a_modern_childs_listen_is_forwarded_with_the_clients_subscription_id() -> None:
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec(*MODERN_CHILD)) as url,
            httpx.AsyncClient(timeout=20) as http,
            listening(http, url, "tools", toolsListChanged=True) as tools,
            listening(http, url, 5, promptsListChanged=True) as prompts,
        ):
            ack = await tools.next()
            assert ack is not None
            assert ack["method"] == "notifications/subscriptions/acknowledged"
            assert ack["params"]["notifications"] == {"toolsListChanged": True}
            # The child tagged it with its own id for the request; the client sees its own.
            assert ack["params"]["_meta"][SUBSCRIPTION_ID] == "tools"
            ack = await prompts.next()
            assert ack is not None
            assert ack["params"]["_meta"][SUBSCRIPTION_ID] == 5
            await call(http, url, 1, "notify", {"method": "notifications/prompts/list_changed"})
            await call(http, url, 2, "add_tool", {"name": "fresh"})
            changed = await prompts.next()
            assert changed is not None
            assert changed["method"] == "notifications/prompts/list_changed"
            assert changed["params"]["_meta"] == {SUBSCRIPTION_ID: 5}
            changed = await tools.next()
            assert changed is not None
            assert changed["method"] == "notifications/tools/list_changed"
            assert changed["params"]["_meta"] == {SUBSCRIPTION_ID: "tools"}
            # The child ends its listens: each client gets the graceful result under its own id.
            await call(http, url, 3, "end_listens", {})
            assert await tools.next() == {
                "jsonrpc": "2.0",
                "id": "tools",
                "result": {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: "tools"}},
            }
            assert await tools.next() is None


async def test_a_child_that_ends_its_listen_with_cancelled_gives_the_client_the_graceful_result() -> None:
    # The cancellation page has a server end a listen with notifications/cancelled (digest §8.1).
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec(*MODERN_CHILD)) as url,
            httpx.AsyncClient(timeout=20) as http,
            listening(http, url, "mine", toolsListChanged=True) as stream,
        ):
            assert await stream.next() is not None  # the acknowledgement
            await call(http, url, 1, "end_listens", {"cancelled": True})
            assert await stream.next() == {
                "jsonrpc": "2.0",
                "id": "mine",
                "result": {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: "mine"}},
            }
            assert await stream.next() is None


async def test_closing_a_forwarded_listen_cancels_it_at_the_child() -> None:
    # One request per child: the next call gets the child only once the listen's exchange has
    # ended, which writes notifications/cancelled first; the child reads stdin in order.
    pool = PoolSettings(max_in_flight=1)
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec(*MODERN_CHILD), pool=pool) as url,
            httpx.AsyncClient(timeout=20) as http,
        ):
            async with listening(http, url, 1, toolsListChanged=True) as stream:
                assert await stream.next() is not None
            reply = await http.post(
                url, headers=modern_headers("tools/call", "cancelled_ids"), json=modern_call(2, "cancelled_ids")
            )
            ids = reply.json()["result"]["structuredContent"]["ids"]
            assert len(ids) == 1
            assert isinstance(ids[0], int)


async def test_a_drain_ends_a_forwarded_listen_with_the_graceful_result() -> None:
    drain = Drain()
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec(*MODERN_CHILD), drain=drain) as url,
            httpx.AsyncClient(timeout=20) as http,
            listening(http, url, "M", toolsListChanged=True) as stream,
        ):
            assert await stream.next() is not None
            drain.begin()
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain.wait_idle, 20)
                assert await stream.next() == {
                    "jsonrpc": "2.0",
                    "id": "M",
                    "result": {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: "M"}},
                }
                assert await stream.next() is None


# -- resource subscriptions on a legacy child -----------------------------------------------


def recorded(path: Path, method: str) -> list[str]:
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    return [line["params"]["uri"] for line in lines if line.get("method") == method]


async def test_resource_subscriptions_are_made_once_per_uri_and_released_at_zero(tmp_path: Path) -> None:
    record = tmp_path / "stdin.jsonl"
    drain = Drain()
    spec = server_spec(*LEGACY, "--subscribe", "--record", str(record))
    with anyio.fail_after(30):
        async with (
            running_gateway(spec, drain=drain) as url,
            httpx.AsyncClient(timeout=20) as http,
            listening(http, url, "a", resourceSubscriptions=["file:///data", "bad:x"]) as first,
        ):
            ack = await first.next()
            assert ack is not None
            # The child refused bad:x: the acknowledgement honours only what it accepted.
            assert ack["params"]["notifications"] == {"resourceSubscriptions": ["file:///data"]}
            async with listening(http, url, "b", resourceSubscriptions=["file:///data"]) as second:
                ack = await second.next()
                assert ack is not None
                assert ack["params"]["notifications"] == {"resourceSubscriptions": ["file:///data"]}
                assert recorded(record, "resources/subscribe") == ["file:///data", "bad:x"]  # once per URI
                for uri in ("file:///database", "file:///data/table"):  # not under it; a sub-resource
                    updated = {"method": "notifications/resources/updated", "params": {"uri": uri}}
                    await call(http, url, 1, "notify", updated)
                for stream, listen_id in ((first, "a"), (second, "b")):
                    note = await stream.next()
                    assert note == {
                        "jsonrpc": "2.0",
                        "method": "notifications/resources/updated",
                        "params": {"uri": "file:///data/table", "_meta": {SUBSCRIPTION_ID: listen_id}},
                    }
            # "b" is gone, "a" still holds the URI.
            drain.begin()
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain.wait_idle, 20)
                end = await first.next()
                assert end is not None
                assert end["id"] == "a"
            assert await drain.wait_idle(20)  # every stream has ended, its URIs released
    assert recorded(record, "resources/unsubscribe") == ["file:///data"]


async def test_without_resources_subscribe_no_resource_subscription_is_honoured(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec(*LEGACY)) as url,
            httpx.AsyncClient(timeout=20) as http,
            listening(http, url, 1, toolsListChanged=True, resourceSubscriptions=["file:///x"]) as stream,
        ):
            ack = await stream.next()
            assert ack is not None
            assert ack["params"]["notifications"] == {"toolsListChanged": True}


def naming_uris(line: dict[str, Any]) -> bool:
    return "resourceSubscriptions" in line["params"]["notifications"]


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_a_listen_naming_too_many_uris_is_refused_before_any_child_is_asked(tmp_path: Path, era: str) -> None:
    record = tmp_path / "stdin.jsonl"
    spec = server_spec("--era", era, "--subscribe", "--record", str(record))
    too_many = [f"file:///data/{n}" for n in range(MAX_LISTEN_URIS + 1)]
    with anyio.fail_after(30):
        async with running_gateway(spec) as url, httpx.AsyncClient(timeout=20) as http:
            body = listen_request("L", resourceSubscriptions=too_many)
            reply = await http.post(url, headers=modern_headers("subscriptions/listen"), json=body)
            assert reply.status_code == 400
            error = reply.json()["error"]
            assert error["code"] == -32602
            assert f"at most {MAX_LISTEN_URIS} per listen" in error["message"]
            # At the bound it is a listen like any other.
            async with listening(http, url, "M", resourceSubscriptions=too_many[:MAX_LISTEN_URIS]) as stream:
                ack = await stream.next()
                assert ack is not None
                assert ack["method"] == "notifications/subscriptions/acknowledged"
    lines = [orjson.loads(line) for line in record.read_bytes().splitlines() if line.strip()]
    if era == "legacy":  # the listen at the bound subscribed each of its URIs; the refused one none
        assert len(recorded(record, "resources/subscribe")) == MAX_LISTEN_URIS
    else:  # the listen at the bound was forwarded; the refused one was not (the gateway's own names none)
        named = [line for line in lines if line.get("method") == "subscriptions/listen" and naming_uris(line)]
        assert len(named) == 1
