"""Era per client for a child that speaks both eras (``gateway.relay.router``, ``dual_era``).

The child is a real dual-era server built with the official MCP Python SDK
(``tests/servers/sdk_dual.py``: ``MCPServer.run`` → ``serve_dual_era_loop``), whose tools ask
the legacy way, mid-call. Such a tool can ask only on a connection opened with
``initialize``; on one opened with ``server/discover`` the SDK has no back-channel.

- ``per-client`` (default): a legacy client gets a child opened with ``initialize``, so its
  tools ask it (sampling, elicitation) as they would a direct legacy client; a modern client
  gets a child opened with ``server/discover``, as it would directly.
- ``legacy``: every child is opened with ``initialize``; a modern client's questions then
  become MRTR rounds through the gateway.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, types
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from gateway.relay.server_config import DualEra
from gateway.stdio.spec import ChildSpec
from tests.conftest import TESTS, server_spec
from tests.gateway_server import MODERN, modern_call, modern_headers, running_gateway
from tests.integration.test_client_requests import open_session

pytestmark = pytest.mark.anyio

WAIT = 30.0


def sdk_dual() -> ChildSpec:
    return ChildSpec(
        sys.executable, (str(TESTS / "servers" / "sdk_dual.py"),), stdin_close_grace=1.0, sigterm_grace=1.0
    )


async def on_sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    reply = types.TextContent(type="text", text="from the client's model")
    return types.CreateMessageResult(role="assistant", content=reply, model="m")


async def on_elicitation(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Ada"})


async def ask_both(url: str, mode: str) -> list[str]:
    async with Client(url, mode=mode, sampling_callback=on_sampling, elicitation_callback=on_elicitation) as client:
        sampled = await client.call_tool("ask_sampling", {"prompt": "hi"})
        named = await client.call_tool("ask_name", {})
    return ["".join(c.text for c in r.content if isinstance(c, TextContent)) for r in (sampled, named)]


async def test_a_legacy_client_of_a_dual_child_is_asked_by_its_legacy_tools() -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(sdk_dual()) as url:
            texts = await ask_both(url, "legacy")
    assert texts == ["sampled: from the client's model", "hello Ada"]


async def test_with_dual_era_legacy_a_modern_client_answers_the_same_tools_in_mrtr_rounds() -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(sdk_dual(), dual_era=DualEra.LEGACY) as url:
            modern = await ask_both(url, MODERN)
            legacy = await ask_both(url, "legacy")
    assert modern == ["sampled: from the client's model", "hello Ada"]
    assert legacy == modern


async def test_legacy_and_modern_clients_of_a_dual_server_get_children_opened_in_their_own_era() -> None:
    """Per client (the default): the modern client meets the child's modern side, where a tool
    that asks the legacy way cannot ask, exactly as it would without the gateway."""
    with anyio.fail_after(WAIT):
        async with running_gateway(sdk_dual()) as url:
            legacy = await ask_both(url, "legacy")
            async with Client(url, mode=MODERN, sampling_callback=on_sampling) as client:
                with pytest.raises(MCPError, match="no back-channel"):
                    await client.call_tool("ask_sampling", {"prompt": "hi"})
    assert legacy == ["sampled: from the client's model", "hello Ada"]


async def pid_of(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> int:
    call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "pid", "arguments": {}}}
    pid: int = (await http.post(url, headers=headers, json=call)).json()["result"]["structuredContent"]["pid"]
    return pid


async def test_once_a_server_turns_out_to_speak_only_the_modern_era_legacy_clients_share_its_children() -> None:
    """Only the first legacy client's ``initialize`` meets a child opened with ``initialize``
    first (which the modern-only server refuses, so it is probed instead); from then on every
    legacy call runs on the modern clients' children: the split costs nothing lasting."""
    with anyio.fail_after(WAIT):
        async with running_gateway(server_spec("--era", "modern")) as url, httpx.AsyncClient(timeout=WAIT) as http:
            reply = await http.post(url, headers=modern_headers("tools/call", "pid"), json=modern_call(1, "pid"))
            modern_pid = reply.json()["result"]["structuredContent"]["pid"]
            first = await open_session(http, url, {})
            first_pid = await pid_of(http, url, first)
            second = await open_session(http, url, {})
            second_pid = await pid_of(http, url, second)
            first_again = await pid_of(http, url, first)
    assert first_pid == second_pid == first_again == modern_pid
