"""A modern server's list changes reach the gateway (``gateway.stdio.changes``), with a real
server built with the official Python SDK (``tests/servers/sdk_dual.py``).

A 2026-07-28 server says its tools changed only on a ``subscriptions/listen`` that asked (the
SDK's ``ctx.notify_tools_changed`` publishes to its listens, and to nobody else). The gateway
holds such a listen on each modern child, so a tool added at run time is checked like any
other (its ``Mcp-Param-*`` header against its argument: 400 -32020 on a mismatch), and the
legacy sessions the child serves get ``notifications/tools/list_changed`` on their GET stream.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from gateway.protocol.jsonrpc import HEADER_MISMATCH
from gateway.relay.server_config import DualEra
from tests.gateway_server import modern_call, modern_headers, running_gateway
from tests.integration.test_client_requests import open_session, sse
from tests.integration.test_dual_era import sdk_dual
from tests.schemas import validate

pytestmark = pytest.mark.anyio

WAIT = 30.0


async def call(http: httpx.AsyncClient, url: str, request_id: int, tool: str, **arguments: Any) -> httpx.Response:
    headers = modern_headers("tools/call", tool)
    if "region_header" in arguments:
        headers["mcp-param-region"] = arguments.pop("region_header")
    return await http.post(url, headers=headers, json=modern_call(request_id, tool, arguments))


async def test_a_tool_added_at_run_time_is_header_checked_and_legacy_sessions_hear_of_it() -> None:
    with anyio.fail_after(WAIT):
        # One child, spoken to as modern, serving a legacy session and modern clients alike.
        async with (
            running_gateway(sdk_dual(), dual_era=DualEra.MODERN, pool_size=1) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            session = await open_session(http, url, {})
            async with http.stream("GET", url, headers={**session, "accept": "text/event-stream"}) as get:
                assert get.status_code == 200
                stream = sse(get)
                added = await call(http, url, 1, "add_regional")  # the gateway lists the tools first
                assert added.status_code == 200, added.text
                assert added.json()["result"]["content"][0]["text"] == "added"
                changed = await anext(stream)
            wrong = await call(http, url, 2, "regional", region="eu", region_header="us")
            right = await call(http, url, 3, "regional", region="eu", region_header="eu")
    assert changed["method"] == "notifications/tools/list_changed"
    assert "io.modelcontextprotocol/subscriptionId" not in changed.get("params", {}).get("_meta", {})
    validate(changed, "ToolListChangedNotification", "2025-11-25")
    assert wrong.status_code == 400, wrong.text
    assert wrong.json()["error"]["code"] == HEADER_MISMATCH
    assert right.status_code == 200, right.text
    assert right.json()["result"]["content"][0]["text"] == "served from eu"
