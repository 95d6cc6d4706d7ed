"""x-mcp-header through the gateway: invalid tools hidden, Mcp-Param-* checked against the body."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import httpx
import pytest

from gateway.protocol.headers import encode_header_value
from gateway.relay.server_config import DualEra
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

ARGS = {"region": "eu-west", "count": 3, "dry": True, "opts": {"mode": "fast"}, "note": "not mirrored"}
GOOD = {"mcp-param-region": "eu-west", "mcp-param-count": "3", "mcp-param-dry-run": "true", "mcp-param-mode": "fast"}


async def call_headered(http: httpx.AsyncClient, url: str, arguments: dict[str, Any], params: dict[str, str]):  # type: ignore[no-untyped-def]
    headers = modern_headers("tools/call", "headered", **params)
    return await http.post(url, headers=headers, json=modern_call(1, "headered", arguments))


async def test_tools_with_invalid_annotations_are_hidden_from_http_clients(caplog: pytest.LogCaptureFixture) -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            listed = await http.post(
                url,
                headers=modern_headers("tools/list"),
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": MODERN_META}},
            )
    names = {tool["name"] for tool in listed.json()["result"]["tools"]}
    assert "headered" in names
    assert "bad_header" not in names
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'bad_header'" in w and "number" in w for w in warnings)


async def test_a_call_whose_headers_mirror_its_arguments_is_served() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            reply = await call_headered(http, url, ARGS, GOOD)
            assert reply.status_code == 200, reply.text
            assert reply.json()["result"]["structuredContent"]["arguments"] == ARGS
            # Integers compare numerically; values that are not header-safe travel Base64-encoded.
            zurich = {**ARGS, "region": "Zürich"}
            encoded = {**GOOD, "mcp-param-region": encode_header_value("Zürich"), "mcp-param-count": "3.0"}
            assert encoded["mcp-param-region"].startswith("=?base64?")
            reply = await call_headered(http, url, zurich, encoded)
            assert reply.status_code == 200, reply.text


@pytest.mark.parametrize(
    ("arguments", "params", "complaint"),
    [
        (ARGS, {k: v for k, v in GOOD.items() if k != "mcp-param-count"}, "Mcp-Param-Count"),
        (ARGS, {**GOOD, "mcp-param-count": "4"}, "Mcp-Param-Count"),
        (ARGS, {**GOOD, "mcp-param-mode": "slow"}, "Mcp-Param-Mode"),
        ({k: v for k, v in ARGS.items() if k != "region"}, GOOD, "Mcp-Param-Region"),
        ({**ARGS, "dry": None}, GOOD, "Mcp-Param-Dry-Run"),
        (ARGS, {**GOOD, "mcp-param-region": "=?base64?not base64!?="}, "Mcp-Param-Region"),
    ],
    ids=["missing", "different-integer", "different-nested", "header-without-value", "header-for-null", "bad-base64"],
)
async def test_a_header_that_does_not_mirror_the_body_is_refused_with_400(
    arguments: dict[str, Any], params: dict[str, str], complaint: str
) -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            reply = await call_headered(http, url, arguments, params)
            assert reply.status_code == 400
            error = reply.json()["error"]
            assert error["code"] == -32020
            assert complaint.lower() in error["message"].lower()
            assert reply.json()["id"] == 1
            # The gateway refused before the child saw anything: it still serves the right call.
            assert (await call_headered(http, url, ARGS, GOOD)).status_code == 200


async def test_the_whole_paginated_tool_list_is_walked_for_the_schemas() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec("--page-size", "2")) as url, httpx.AsyncClient() as http:
            missing = {k: v for k, v in GOOD.items() if k != "mcp-param-region"}
            assert (await call_headered(http, url, ARGS, missing)).status_code == 400
            assert (await call_headered(http, url, ARGS, GOOD)).status_code == 200


async def test_list_changed_refreshes_the_schemas_and_reaches_legacy_get_streams() -> None:
    with anyio.fail_after(20):
        # One child for both eras (dual_era=modern), so the modern client's add_tool is the session's too.
        async with running_gateway(server_spec(), dual_era=DualEra.MODERN) as url, httpx.AsyncClient() as http:
            init = await http.post(
                url,
                headers=BASE_HEADERS,
                json=legacy_initialize("2025-11-25"),
            )
            session = {"mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            async with http.stream("GET", url, headers={"accept": "text/event-stream", **session}) as stream:
                assert stream.status_code == 200
                assert stream.headers["content-type"].startswith("text/event-stream")
                added = await http.post(
                    url,
                    headers=modern_headers("tools/call", "add_tool"),
                    json=modern_call(2, "add_tool", {"name": "fresh"}),
                )
                assert added.json()["result"]["content"][0]["text"] == "added fresh"
                received = ""
                async for chunk in stream.aiter_text():
                    received += chunk
                    if parse_sse(received):
                        break
            assert parse_sse(received) == [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}]


async def test_legacy_requests_are_not_held_to_mirrored_headers() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            init = await http.post(
                url,
                headers=BASE_HEADERS,
                json=legacy_initialize("2025-06-18"),
            )
            headers = {**BASE_HEADERS, "mcp-session-id": init.headers["mcp-session-id"]}
            reply = await http.post(
                url,
                headers=headers,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "headered", "arguments": ARGS},
                },
            )
            assert reply.status_code == 200
            assert reply.json()["result"]["structuredContent"]["arguments"] == ARGS


async def test_list_changed_reaches_only_the_sessions_the_notifying_pool_serves() -> None:
    from gateway.relay.server_config import Isolation

    with anyio.fail_after(20):
        async with (
            running_gateway(server_spec(), isolation=Isolation.PRINCIPAL, principal_header="X-User") as url,
            httpx.AsyncClient() as http,
        ):
            sessions = {}
            for user in ("alice", "bob"):
                init = await http.post(
                    url,
                    headers={**BASE_HEADERS, "x-user": user},
                    json=legacy_initialize("2025-11-25", user),
                )
                sessions[user] = {**BASE_HEADERS, "x-user": user, "mcp-session-id": init.headers["mcp-session-id"]}

            async def notify(user: str) -> None:
                body = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {
                        "name": "notify",
                        "arguments": {"method": "notifications/tools/list_changed", "params": {"from": user}},
                    },
                }
                assert (await http.post(url, headers=sessions[user], json=body)).status_code == 200

            async with http.stream("GET", url, headers={**sessions["bob"], "accept": "text/event-stream"}) as stream:
                await notify("alice")  # alice's own child: must not reach bob
                await notify("bob")
                received = ""
                async for chunk in stream.aiter_text():
                    received += chunk
                    if parse_sse(received):
                        break
            assert parse_sse(received)[0]["params"] == {"from": "bob"}


async def test_a_hidden_tool_cannot_be_called_over_http_either() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            reply = await http.post(
                url,
                headers=modern_headers("tools/call", "bad_header"),
                json=modern_call(4, "bad_header", {"ratio": 0.5}),
            )
    assert reply.status_code == 200
    assert reply.json()["id"] == 4
    assert reply.json()["error"]["code"] == -32602
    assert "not available over HTTP" in reply.json()["error"]["message"]
