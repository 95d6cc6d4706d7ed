"""The npm tier: the warm pool serves every client (issue #36), in front of server-everything.

With no flags, once ``/readyz`` is 200, the clients people use each make their first call:
``mcp-stdio-gateway call`` (legacy and modern), the official Python SDK in both eras with its
default declaration (sampling, elicitation and roots, an empty roots list), and the TypeScript
client. Every one is answered by the pre-started child, and no other child is started: every
child is told the configured capabilities, and an empty roots set is what that child has.
"""

from __future__ import annotations

import io
import json
import shutil
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, types
from rich.console import Console

from gateway.tools.call.command import run_call
from tests.gateway_server import MODERN_META, modern_headers, running_gateway
from tests.integration.test_npm_everything import everything_spec
from tests.integration.test_npm_ts_client import CLIENT, SCRIPT

pytestmark = [pytest.mark.npm, pytest.mark.anyio]

DEADLINE = 90.0


async def children(http: httpx.AsyncClient, base: str) -> list[tuple[str, int]]:
    """Every child of the server: its pool's label and its pid."""
    status = (await http.get(f"{base}/status")).json()
    [server] = status["servers"]
    return sorted(
        (label, child["pid"]) for label, pool in server["pools"].items() for child in pool["children"] if child["pid"]
    )


async def call_cli(*argv: str) -> str:
    out = io.StringIO()
    code = await run_call(argv, out=Console(file=out, width=200), err=Console(file=io.StringIO()))
    assert code == 0, out.getvalue()
    return out.getvalue()


async def sdk_call(url: str, mode: str) -> str:
    async def on_sampling(context: object, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        raise AssertionError("echo asks nothing")

    async with Client(url, mode=mode, sampling_callback=on_sampling) as client:
        result = await client.call_tool("echo", {"message": f"sdk {mode}"})
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


async def ts_call(url: str) -> dict[str, Any]:
    argv = ["node", str(SCRIPT), url, "auto", str(CLIENT), "echo", json.dumps({"message": "ts"})]
    result = await anyio.run_process(argv, check=False)
    assert result.returncode == 0, result.stderr.decode()
    answer: dict[str, Any] = json.loads(result.stdout.decode().strip().splitlines()[-1])
    return answer


async def test_the_first_call_of_every_kind_of_client_is_answered_by_the_prestarted_child() -> None:
    if shutil.which("node") is None or not CLIENT.is_file():
        pytest.skip("the TypeScript client needs node and scripts/install-npm-servers.sh")
    with anyio.fail_after(DEADLINE):
        async with running_gateway(everything_spec()) as url, httpx.AsyncClient(timeout=DEADLINE) as http:
            base = url.removesuffix("/mcp")
            # server/discover waits for the pre-started child's handshake, and asks it nothing.
            discover = {"jsonrpc": "2.0", "id": "d", "method": "server/discover", "params": {"_meta": MODERN_META}}
            assert (await http.post(url, headers=modern_headers("server/discover"), json=discover)).status_code == 200
            assert (await http.get(f"{base}/readyz")).status_code == 200
            before = await children(http, base)
            texts = [
                await call_cli(url, "echo", "--arg", "message=cli"),
                await call_cli(url, "--mode", "legacy", "echo", "--arg", "message=cli legacy"),
                await sdk_call(url, "auto"),
                await sdk_call(url, "legacy"),
            ]
            ts = await ts_call(url)
            after = await children(http, base)
            status = (await http.get(f"{base}/status")).json()
    assert len(before) == 1, before
    assert after == before  # the pre-started child answered all, and no other was started
    assert "Echo: cli" in texts[0]
    assert "Echo: cli legacy" in texts[1]
    assert texts[2:] == ["Echo: sdk auto", "Echo: sdk legacy"]
    assert ts["ok"] is True, ts
    assert ts["called"] == ["Echo: ts"]
    # Its start-up roots/list (no roots configured) got an empty list, not an error it logs.
    stderr = [line for pool in status["servers"][0]["pools"].values() for c in pool["children"] for line in c["stderr"]]
    assert not [line for line in stderr if "Failed to request roots" in line], stderr
