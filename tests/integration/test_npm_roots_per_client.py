"""The npm tier: with default flags in front of server-everything, a client that declares no
roots never sees another client's roots (issues #23, #36).

server-everything fetches roots once per process (outside any call: the gateway learns that
it keeps them) and offers ``get-roots-list`` to a client told roots at ``initialize``. Every
child is told the configured capabilities (roots among them), so the usual children serve
every client; a client with roots gets children keyed by its set, and the usual ones are
given no client's roots. Both eras, at the same time, on one gateway.
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

            async def rootless_roots() -> None:
                messages, _ = await call(http, url, rootless, legacy_call("r", ROOTS_TOOL, {}), None)
                got["legacy without roots"] = messages[-1]["result"]["content"][0]["text"]
                got["modern without roots"] = await modern_roots(http, url, {"sampling": {}, "elicitation": {}})
                got["tools"] = await modern_tools(http, url, {"sampling": {}, "elicitation": {}})

            async with anyio.create_task_group() as tg:
                tg.start_soon(alices_roots)
                tg.start_soon(rootless_roots)
            status = (await http.get(url.removesuffix("/mcp") + "/status")).json()
    assert "file:///home/alice" in got["alice"], got["alice"]
    # The usual children are told roots (the configured set) but given none: the tool is there
    # for everyone (issue #36: one warm pool whatever a client declares), and shows no one's.
    assert ROOTS_TOOL in got["tools"]
    for name in ("legacy without roots", "modern without roots"):
        assert "file:///home/alice" not in got[name], got[name]
        assert "no roots" in got[name].lower(), got[name]
    [server] = status["servers"]
    pools = sorted(server["pools"])
    assert "test" in pools, pools
    assert sum("roots=" in label for label in pools) == 1, pools  # alice's set only


async def modern_roots(http: httpx.AsyncClient, url: str, capabilities: dict[str, Any]) -> str:
    meta = {**MODERN_META, "io.modelcontextprotocol/clientCapabilities": capabilities}
    params = {"name": ROOTS_TOOL, "arguments": {}, "_meta": meta}
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
    reply = await http.post(url, headers=modern_headers("tools/call", ROOTS_TOOL), json=body)
    assert reply.status_code == 200, reply.text
    text: str = reply.json()["result"]["content"][0]["text"]
    return text
