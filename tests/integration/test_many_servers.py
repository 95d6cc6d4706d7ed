"""Several servers from one config: each at /servers/NAME/mcp, failing independently; a broken
one is reported by readiness, and holds the replica only when the operator requires it."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import httpx
import orjson
import pytest

from gateway.cli import parse_settings
from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from gateway.server import build_app
from gateway.stdio.spec import ChildSpec
from tests.conftest import server_spec
from tests.gateway_server import app_for, modern_call, modern_headers, serving
from tests.logrecords import recording

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
            assert broken.json()["error"]["message"].startswith("cannot start server: No such file or directory")
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


async def test_a_server_the_command_line_requires_holds_readiness_while_it_exits_at_once(tmp_path: Path) -> None:
    alpha = server_spec("--name", "alpha")
    config = tmp_path / "servers.json"
    servers = {
        "alpha": {"command": alpha.command, "args": list(alpha.args)},
        "exits": {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]},
    }
    config.write_bytes(orjson.dumps({"mcpServers": servers}))
    settings = parse_settings(["--config", str(config), "--ready-requires", "exits", "--port", "0"], environ={})
    with anyio.fail_after(20), recording("gateway.pool") as records:
        async with serving(build_app(settings)) as base, httpx.AsyncClient(timeout=10) as http:
            fine = await http.post(
                f"{base}/servers/alpha/mcp",
                headers=modern_headers("tools/call", "echo"),
                json=modern_call(1, "echo", {"message": "served"}),
            )
            assert fine.json()["result"]["content"][0]["text"] == "served"
            await records.wait_for_text("exits: restarting in")  # its first start ended: exit code 3
            readiness = await http.get(f"{base}/readyz")
            assert readiness.status_code == 503
            assert readiness.text in ("not ready: exits starting (required)\n", "not ready: exits failing (required)\n")
            status = {s["name"]: s for s in (await http.get(f"{base}/status")).json()["servers"]}
            assert status["exits"]["ready_required"] is True
            assert status["alpha"]["ready_required"] is False
            (pool,) = status["exits"]["pools"].values()
            assert "code 3" in pool["last_error"]
            metrics = (await http.get(f"{base}/metrics")).text
            assert 'mcp_gateway_server_state{server="alpha",state="ready"} 1.0' in metrics
            assert 'mcp_gateway_server_state{server="exits",state="ready"} 0.0' in metrics
