"""Several servers from one config: each at /servers/NAME/mcp, failing independently; a broken
one is reported by readiness, and holds the replica only when the operator requires it."""

from __future__ import annotations

import anyio
import httpx
import pytest

from gateway.relay.router import Router, ServerConfig
from gateway.stdio.spec import ChildSpec
from tests.conftest import server_spec
from tests.gateway_server import app_for, modern_call, modern_headers, serving

pytestmark = pytest.mark.anyio


async def test_each_server_has_its_endpoint_and_a_broken_one_does_not_affect_the_others() -> None:
    routers = [
        Router(ServerConfig("alpha", server_spec("--name", "alpha"))),
        Router(ServerConfig("beta", server_spec("--name", "beta", "--era", "legacy"))),
        Router(ServerConfig("broken", ChildSpec("/nonexistent/server"))),
    ]
    with anyio.fail_after(20):
        async with serving(app_for(routers)) as base, httpx.AsyncClient(timeout=10) as http:
            for name in ("alpha", "beta"):
                reply = await http.post(
                    f"{base}/servers/{name}/mcp",
                    headers=modern_headers("server/discover"),
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "server/discover",
                        "params": {"_meta": modern_call(1, "x")["params"]["_meta"]},
                    },
                )
                assert reply.json()["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == name
            broken = await http.post(
                f"{base}/servers/broken/mcp", headers=modern_headers("tools/call", "echo"), json=modern_call(1, "echo")
            )
            assert broken.json()["error"]["message"].startswith("cannot start /nonexistent/server")
            fine = await http.post(
                f"{base}/servers/alpha/mcp",
                headers=modern_headers("tools/call", "echo"),
                json=modern_call(2, "echo", {"message": "still here"}),
            )
            assert fine.json()["result"]["content"][0]["text"] == "still here"
            assert (await http.post(f"{base}/mcp", json={})).status_code == 404  # no single-server alias
            readiness = await http.get(f"{base}/readyz")
            assert readiness.status_code == 200  # alpha and beta serve: one broken server is reported
            assert readiness.text.startswith("ready; degraded: broken ")  # starting (backing off) or failing
            status = (await http.get(f"{base}/status")).json()
            assert [s["name"] for s in status["servers"]] == ["alpha", "beta", "broken"]
