"""The npm tier: the TypeScript MCP client 2.x (``@modelcontextprotocol/client``) against the gateway.

In pin mode (``versionNegotiation: { mode: { pin: '2026-07-28' } }``) that client takes any
error to its ``server/discover`` probe, except -32022, for "not a modern server" and shows
only "Version negotiation failed … via server/discover": the reason a gateway's server
cannot start never reached it. The gateway now answers the probe itself while its server
cannot start, so the reason arrives with the client's next request (``tools/list``).
``tests/integration/ts_client.mjs`` is the client; ``scripts/install-npm-servers.sh`` pins it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.stdio.spec import ChildSpec
from tests.conftest import server_spec
from tests.gateway_server import running_gateway

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / ".npm-servers" / "node_modules" / "@modelcontextprotocol" / "client" / "dist" / "index.mjs"
SCRIPT = Path(__file__).with_name("ts_client.mjs")

if not CLIENT.is_file() or shutil.which("node") is None:
    pytest.skip(
        f"{CLIENT.relative_to(REPO)} is missing; install it with scripts/install-npm-servers.sh",
        allow_module_level=True,
    )

pytestmark = [pytest.mark.npm, pytest.mark.anyio]

TEST_DEADLINE = 60.0


async def ts_client(url: str, mode: str) -> dict[str, Any]:
    result = await anyio.run_process(["node", str(SCRIPT), url, mode, str(CLIENT)], check=False)
    assert result.returncode == 0, result.stderr.decode()
    answer: dict[str, Any] = json.loads(result.stdout.decode().strip().splitlines()[-1])
    return answer


@pytest.mark.parametrize("mode", ["pin", "auto"])
async def test_the_ts_client_sees_why_the_server_cannot_start(mode: str) -> None:
    with anyio.fail_after(TEST_DEADLINE):
        async with running_gateway(ChildSpec("/nonexistent/mcp-server")) as url:
            answer = await ts_client(url, mode)
    assert answer["ok"] is False, answer
    assert answer["stage"] == "listTools", answer  # connected: the probe was answered
    assert "cannot start mcp-server" in answer["message"], answer
    assert "No such file or directory" in answer["message"], answer


@pytest.mark.parametrize("mode", ["pin", "auto", "legacy"])
async def test_the_ts_client_lists_the_tools_of_a_server_that_starts(mode: str) -> None:
    with anyio.fail_after(TEST_DEADLINE):
        async with running_gateway(server_spec()) as url:
            answer = await ts_client(url, mode)
    assert answer["ok"] is True, answer
    assert "echo" in answer["tools"]
