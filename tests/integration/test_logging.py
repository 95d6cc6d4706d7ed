"""Child log messages (notifications/message): only to requests that asked, only when attributable."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import httpx
import pytest

from gateway.protocol.attribution import AskPolicy
from gateway.stdio.pool import PoolSettings
from tests.conftest import server_spec
from tests.gateway_server import BASE_HEADERS, modern_call, modern_headers, parse_sse, running_gateway

pytestmark = pytest.mark.anyio

LOG_LEVEL = "io.modelcontextprotocol/logLevel"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
LEGACY = ("--era", "legacy")
ELICITATION = {
    "method": "elicitation/create",
    "params": {"message": "Your name?", "requestedSchema": {"type": "object", "properties": {}}},
}


def log_call(request_id: Any, level: str, data: str, **meta: Any) -> dict[str, Any]:
    arguments = {"method": "notifications/message", "params": {"level": level, "logger": "db", "data": data}}
    return modern_call(request_id, "notify", arguments, **meta)


def messages(reply: httpx.Response) -> list[dict[str, Any]]:
    assert reply.status_code == 200, reply.text
    if reply.headers["content-type"].startswith("text/event-stream"):
        return parse_sse(reply.text)
    return [reply.json()]


def child_logs(caplog: pytest.LogCaptureFixture, data: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "gateway.child" and data in r.getMessage()]


@pytest.mark.parametrize("child", ["legacy", "modern"])
async def test_a_request_with_log_level_gets_the_childs_messages_on_its_own_stream(child: str) -> None:
    flags = LEGACY if child == "legacy" else ("--era", "modern")
    with anyio.fail_after(30):
        async with running_gateway(server_spec(*flags)) as url, httpx.AsyncClient(timeout=20) as http:
            reply = await http.post(
                url,
                headers=modern_headers("tools/call", "notify"),
                json=log_call(1, "warning", "w1", **{LOG_LEVEL: "info"}),
            )
            note, final = messages(reply)
            assert note == {
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "warning", "logger": "db", "data": "w1"},
            }
            assert final["id"] == 1
            assert "result" in final


async def test_below_the_level_or_without_log_level_the_gateway_logs_and_drops_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.child")
    with anyio.fail_after(30):
        async with running_gateway(server_spec(*LEGACY)) as url, httpx.AsyncClient(timeout=20) as http:
            below = await http.post(
                url,
                headers=modern_headers("tools/call", "notify"),
                json=log_call(1, "info", "i1", **{LOG_LEVEL: "error"}),
            )
            unasked = await http.post(
                url, headers=modern_headers("tools/call", "notify"), json=log_call(2, "error", "e1")
            )
    for reply in (below, unasked):
        [final] = messages(reply)
        assert "result" in final
    assert [r.levelno for r in child_logs(caplog, "i1")] == [logging.INFO]
    assert [r.levelno for r in child_logs(caplog, "e1")] == [logging.ERROR]


async def test_with_two_requests_in_flight_on_the_child_a_message_is_not_attributed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.child")
    # Calls share the child only when told to (--child-asks never): a sleeping call stays in flight.
    pool = PoolSettings(child_asks=AskPolicy.NEVER)
    sleeper = modern_call(1, "sleep", {"ms": 60_000, "progress": True}, progressToken="s")
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec(*LEGACY), pool=pool) as url,
            httpx.AsyncClient(timeout=20) as http,
            http.stream("POST", url, headers=modern_headers("tools/call", "sleep"), json=sleeper) as slow,
        ):
            lines = slow.aiter_lines()  # kept: a dropped iterator would close the stream (a cancel)
            while not (await anext(lines)).startswith("data:"):  # its progress: in flight at the child
                pass
            reply = await http.post(
                url,
                headers=modern_headers("tools/call", "notify"),
                json=log_call(2, "error", "x1", **{LOG_LEVEL: "debug"}),
            )
            [final] = messages(reply)
            assert "result" in final
    assert len(child_logs(caplog, "x1")) == 1


async def open_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    init = await http.post(
        url,
        headers=BASE_HEADERS,
        json={
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}},
        },
    )
    assert init.status_code == 200, init.text
    headers = {**BASE_HEADERS, "mcp-session-id": init.headers["mcp-session-id"]}
    assert (
        await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    ).status_code == 202
    return headers


def legacy_log_call(request_id: Any, level: str, data: str) -> dict[str, Any]:
    arguments = {"method": "notifications/message", "params": {"level": level, "data": data}}
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "notify", "arguments": arguments},
    }


@pytest.mark.parametrize("child", ["legacy", "modern"])
async def test_a_legacy_session_gets_messages_after_set_level(child: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.child")
    flags = LEGACY if child == "legacy" else ("--era", "modern")
    with anyio.fail_after(30):
        async with running_gateway(server_spec(*flags)) as url, httpx.AsyncClient(timeout=20) as http:
            headers = await open_session(http, url)
            # Before logging/setLevel the session asked for nothing: logged at the gateway only.
            [final] = messages(await http.post(url, headers=headers, json=legacy_log_call(1, "error", "before")))
            assert "result" in final
            set_level = {"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "warning"}}
            assert messages(await http.post(url, headers=headers, json=set_level)) == [
                {"jsonrpc": "2.0", "id": 2, "result": {}}
            ]
            [note, final] = messages(await http.post(url, headers=headers, json=legacy_log_call(3, "error", "after")))
            assert note["method"] == "notifications/message"
            assert note["params"]["data"] == "after"
            assert final["id"] == 3
            [final] = messages(await http.post(url, headers=headers, json=legacy_log_call(4, "info", "quiet")))
            assert final["id"] == 4
            bad = {"jsonrpc": "2.0", "id": 5, "method": "logging/setLevel", "params": {"level": "loud"}}
            [refused] = messages(await http.post(url, headers=headers, json=bad))
            assert refused["error"]["code"] == -32602
    assert len(child_logs(caplog, "before")) == 1
    assert len(child_logs(caplog, "quiet")) == 1
