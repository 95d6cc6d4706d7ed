"""The npm tier: with default flags in front of server-everything, a client that declares no
roots runs on a child never told roots, so it never sees another client's roots (issue #23).

server-everything fetches roots once per process and offers ``get-roots-list`` only to a
client that declared roots at ``initialize``. Children are keyed by the capabilities they
are told (``gateway.relay.router``): a client with roots and a client without, of either era,
each meet a child of their own kind, at the same time on one gateway.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from tests.gateway_server import MODERN_META, modern_headers, running_gateway
from tests.integration.test_npm_everything import everything_spec
from tests.integration.test_shared_settings import call, legacy_call, open_session

pytestmark = [pytest.mark.npm, pytest.mark.anyio]

ALICE = [{"uri": "file:///home/alice", "name": "alice"}]
ROOTS_TOOL = "get-roots-list"


async def modern_tools(http: httpx.AsyncClient, url: str, capabilities: dict[str, Any]) -> set[str]:
    meta = {**MODERN_META, "io.modelcontextprotocol/clientCapabilities": capabilities}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}
    reply = await http.post(url, headers=modern_headers("tools/list"), json=body)
    assert reply.status_code == 200, reply.text
    return {tool["name"] for tool in reply.json()["result"]["tools"]}


async def legacy_tools(http: httpx.AsyncClient, url: str, session: dict[str, str]) -> set[str]:
    reply = await http.post(url, headers=session, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    return {tool["name"] for tool in reply.json()["result"]["tools"]}


async def test_clients_without_roots_never_meet_a_child_that_holds_another_clients_roots() -> None:
    with anyio.fail_after(90):
        async with running_gateway(everything_spec()) as url, httpx.AsyncClient(timeout=30) as http:
            alice = await open_session(http, url, {"roots": {}, "sampling": {}, "elicitation": {}})
            rootless = await open_session(http, url, {"sampling": {}, "elicitation": {}})
            got: dict[str, Any] = {}

            async def alices_roots() -> None:
                messages, _ = await call(http, url, alice, legacy_call("a", ROOTS_TOOL, {}), ALICE)
                got["alice"] = messages[-1]["result"]["content"][0]["text"]

            async def rootless_tools() -> None:
                got["legacy without roots"] = await legacy_tools(http, url, rootless)
                got["modern without roots"] = await modern_tools(http, url, {"sampling": {}, "elicitation": {}})
                everything = {"sampling": {}, "elicitation": {}, "roots": {}}
                got["modern with roots"] = await modern_tools(http, url, everything)

            async with anyio.create_task_group() as tg:
                tg.start_soon(alices_roots)
                tg.start_soon(rootless_tools)
            status = (await http.get(url.removesuffix("/mcp") + "/status")).json()
    assert "file:///home/alice" in got["alice"], got["alice"]
    # Told no roots, the children of the clients without roots do not even offer the tool.
    assert ROOTS_TOOL not in got["legacy without roots"]
    assert ROOTS_TOOL not in got["modern without roots"]
    assert ROOTS_TOOL in got["modern with roots"]  # the tool is there for a client that declares roots
    [server] = status["servers"]
    assert "test capabilities=elicitation,sampling" in server["pools"], sorted(server["pools"])
