"""The first end-to-end path: real uvicorn, real child, raw httpx, both eras, JSON answers."""

from __future__ import annotations

import anyio
import httpx
import pytest

from tests.conftest import server_spec
from tests.gateway_server import (
    BASE_HEADERS,
    MODERN_META,
    legacy_initialize,
    modern_call,
    modern_headers,
    parse_sse,
    running_gateway,
)

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("era", ["modern", "legacy", "dual"])
async def test_a_modern_client_lists_and_calls_tools_with_json_answers(era: str) -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec("--era", era)) as url, httpx.AsyncClient() as http:
            listed = await http.post(
                url,
                headers=modern_headers("tools/list"),
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": MODERN_META}},
            )
            assert listed.status_code == 200
            assert listed.headers["content-type"] == "application/json"
            body = listed.json()
            assert body["id"] == 1
            assert "echo" in {tool["name"] for tool in body["result"]["tools"]}
            assert body["result"]["resultType"] == "complete"
            assert "ttlMs" in body["result"]
            assert "cacheScope" in body["result"]

            called = await http.post(
                url, headers=modern_headers("tools/call", "echo"), json=modern_call("x", "echo", {"message": "hi"})
            )
            assert called.status_code == 200
            assert called.json()["id"] == "x"
            assert called.json()["result"]["content"] == [{"type": "text", "text": "hi"}]


@pytest.mark.parametrize("era", ["modern", "legacy", "dual"])
async def test_a_legacy_client_initializes_then_lists_and_calls_tools(era: str) -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec("--era", era)) as url, httpx.AsyncClient() as http:
            init = await http.post(
                url,
                headers=BASE_HEADERS,
                json=legacy_initialize("2025-06-18"),
            )
            assert init.status_code == 200
            assert init.json()["result"]["protocolVersion"] == "2025-06-18"
            session = init.headers["mcp-session-id"]
            headers = {**BASE_HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
            note = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            assert note.status_code == 202
            assert note.content == b""
            listed = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert "echo" in {tool["name"] for tool in listed.json()["result"]["tools"]}
            assert "resultType" not in listed.json()["result"]
            called = await http.post(
                url,
                headers=headers,
                json={
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"message": "yo"}},
                },
            )
            assert called.json() == {"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "yo"}]}}


async def test_progress_streams_as_sse_and_the_final_response_ends_the_stream() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            reply = await http.post(
                url,
                headers=modern_headers("tools/call", "progress_burst"),
                json=modern_call(7, "progress_burst", {"count": 3, "tag": "t"}, progressToken="tok"),
            )
            assert reply.headers["content-type"].startswith("text/event-stream")
            assert reply.headers["x-accel-buffering"] == "no"
            assert reply.headers["cache-control"] == "no-cache"
            messages = parse_sse(reply.text)
            assert [m.get("method") for m in messages] == ["notifications/progress"] * 3 + [None]
            assert all(m["params"]["progressToken"] == "tok" for m in messages[:3])
            assert messages[-1]["id"] == 7


async def test_while_its_server_cannot_start_the_probe_succeeds_and_the_next_request_carries_the_reason() -> None:
    """A modern client in pin mode takes any probe error but -32022 for "not modern" and hides
    the cause (the TypeScript client 2.x): so the gateway answers ``server/discover`` itself,
    and the start error comes with the next request; legacy clients still get it at once."""
    from gateway.stdio.spec import ChildSpec

    discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": MODERN_META}}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": MODERN_META}}
    with anyio.fail_after(20):
        async with running_gateway(ChildSpec("/nonexistent/mcp-server")) as url, httpx.AsyncClient() as http:
            probe = await http.post(url, headers=modern_headers("server/discover"), json=discover)
            tools = await http.post(url, headers=modern_headers("tools/list"), json=listing)
            legacy = await http.post(url, headers=BASE_HEADERS, json=legacy_initialize())
    assert probe.status_code == 200
    result = probe.json()["result"]
    assert "2026-07-28" in result["supportedVersions"]
    assert set(result["capabilities"]) >= {"tools", "prompts", "resources"}  # so clients send their lists
    assert (result["ttlMs"], result["cacheScope"]) == (0, "private")
    error = result["_meta"]["mcp-stdio-gateway/child"]["error"]
    assert (error["code"], error["message"].split(":")[0]) == (-31000, "cannot start mcp-server")
    assert tools.json()["error"]["code"] == -31000
    assert tools.json()["error"]["message"].startswith("cannot start mcp-server: ")
    assert "/nonexistent" not in tools.text  # the command is the operator's (docs/operations.md)
    assert legacy.json()["error"]["code"] == -31000


async def test_a_command_that_cannot_start_fails_requests_at_once_with_the_reason() -> None:
    from gateway.stdio.spec import ChildSpec

    with anyio.fail_after(20):
        async with running_gateway(ChildSpec("/nonexistent/mcp-server")) as url, httpx.AsyncClient() as http:
            reply = await http.post(
                url, headers=modern_headers("tools/call", "echo"), json=modern_call(1, "echo", {"message": "x"})
            )
    error = reply.json()["error"]
    assert error["message"].startswith("cannot start mcp-server: ")
    assert "No such file or directory" in error["message"]
