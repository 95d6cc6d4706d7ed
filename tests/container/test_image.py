"""The image as users run it: the demo, an npx server, a uvx server, MCP_GATEWAY_* settings, a
mounted mcpServers file, --workers 2, each driven by the official Python SDK client in both eras.

Every run uses the read-only root filesystem with the writable mounts docs/deployment.md
documents (tmpfs on /tmp and on /home/gateway, owned by the image's user), as a hardened
deployment does."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client, types
from mcp_types import CallToolResult, TextContent

from tests.container.docker import READ_ONLY_MOUNTS, running
from tests.gateway_server import MODERN

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600), pytest.mark.usefixtures("image")]

MODES = ["legacy", MODERN]  # the session handshake, and the stateless revision pinned
CALL_DEADLINE = 60.0
NPX_START = 240.0  # a cold npx downloads the server first
EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"
TIME_SERVER = "mcp-server-time@2026.10.19"


def texts(result: CallToolResult) -> list[str]:
    return [c.text for c in result.content if isinstance(c, TextContent)]


async def list_call_and_progress(url: str, mode: str, echo: str, progress_tool: str, arguments: dict) -> list[float]:
    """List the tools, call ``echo``, then ``progress_tool``; the progress values seen, in order."""
    seen: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(value)

    async with Client(url, mode=mode) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"echo", progress_tool} <= names, names
        echoed = await client.call_tool("echo", {"message": echo})
        assert not echoed.is_error, texts(echoed)
        assert echo in texts(echoed)[0]
        result = await client.call_tool(progress_tool, arguments, progress_callback=on_progress)
        assert not result.is_error, texts(result)
    return seen


@pytest.mark.parametrize("mode", MODES)
async def test_the_default_command_serves_the_demo_to_the_sdk_client(mode: str) -> None:
    with running(docker_options=READ_ONLY_MOUNTS) as gateway:
        await anyio.to_thread.run_sync(gateway.wait_ready)
        with anyio.fail_after(CALL_DEADLINE):
            seen = await list_call_and_progress(
                gateway.url, mode, "hello from the image", "countdown", {"steps": 3, "interval_ms": 10}
            )
    assert seen == [1.0, 2.0, 3.0]


async def test_an_npx_server_runs_inside_the_container_for_both_eras_with_progress_and_elicitation() -> None:
    """`docker run IMAGE -- npx -y SERVER stdio`, as the README prints it; the SDK client in both
    eras lists, calls, gets progress, and answers the server's elicitation (an interactive tool
    that the server registers only for a client declaring the capability)."""
    with running("--", "npx", "-y", EVERYTHING, "stdio", docker_options=READ_ONLY_MOUNTS) as gateway:
        await anyio.to_thread.run_sync(gateway.wait_ready, NPX_START)
        for mode in MODES:
            asked: list[str] = []

            async def on_elicitation(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
                asked.append(mode)  # noqa: B023 - called within this iteration
                return types.ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True})

            with anyio.fail_after(CALL_DEADLINE):
                seen = await list_call_and_progress(
                    gateway.url,
                    mode,
                    "through the container",
                    "trigger-long-running-operation",
                    {"duration": 1, "steps": 4},
                )
                async with Client(gateway.url, mode=mode, elicitation_callback=on_elicitation) as client:
                    elicited = await client.call_tool("trigger-elicitation-request", {})
            assert seen == [1.0, 2.0, 3.0, 4.0], mode
            assert not elicited.is_error, texts(elicited)
            assert "Ada Lovelace" in "\n".join(texts(elicited))
            assert asked == [mode]


async def test_a_uvx_server_configured_by_an_environment_variable() -> None:
    """MCP_GATEWAY_COMMAND (every flag has an MCP_GATEWAY_* variable) naming a pinned uvx server;
    MCP_GATEWAY_POOL_MAX too. uv's cache and tool directories are under the writable home."""
    env = {"MCP_GATEWAY_COMMAND": f"uvx {TIME_SERVER}", "MCP_GATEWAY_POOL_MAX": "2"}
    with running(docker_options=READ_ONLY_MOUNTS, env=env) as gateway:
        await anyio.to_thread.run_sync(gateway.wait_ready, NPX_START)
        for mode in MODES:
            with anyio.fail_after(CALL_DEADLINE):
                async with Client(gateway.url, mode=mode) as client:
                    names = {tool.name for tool in (await client.list_tools()).tools}
                    result = await client.call_tool("get_current_time", {"timezone": "UTC"})
            assert "get_current_time" in names
            assert not result.is_error, texts(result)
            assert json.loads(texts(result)[0])["timezone"] == "UTC"
    settings = [r for r in gateway.logs.records() if "pool opened" in str(r.get("message"))]
    assert settings, "the gateway never opened its pool"


async def test_a_mounted_mcp_servers_file_serves_each_server_on_its_own_path(tmp_path: Path) -> None:
    config = {
        "mcpServers": {
            "demo": {"command": "python", "args": ["-m", "gateway.tools.demo.server"]},
            "everything": {"command": "npx", "args": ["-y", EVERYTHING, "stdio"], "pool": {"min": 1, "max": 1}},
        }
    }
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps(config))
    servers.chmod(0o644)
    mounts = (*READ_ONLY_MOUNTS, "-v", f"{servers}:/etc/mcp-gateway/servers.json:ro")
    env = {"MCP_GATEWAY_CONFIG": "/etc/mcp-gateway/servers.json"}
    with running(docker_options=mounts, env=env) as gateway:
        await anyio.to_thread.run_sync(gateway.logs.wait_for_message, " ready: ", NPX_START, 2)
        base = gateway.url.removesuffix("/mcp")
        for name, expected in (("demo", "hi"), ("everything", "Echo: hi")):
            for mode in MODES:
                with anyio.fail_after(CALL_DEADLINE):
                    async with Client(f"{base}/servers/{name}/mcp", mode=mode) as client:
                        result = await client.call_tool("echo", {"message": "hi"})
                assert texts(result) == [expected], (name, mode)


async def test_two_workers_inside_the_container_serve_concurrent_clients_of_both_eras() -> None:
    with running("--workers", "2", docker_options=READ_ONLY_MOUNTS) as gateway:
        await anyio.to_thread.run_sync(gateway.logs.wait_for_message, " ready: ", 120.0, 2)
        ready = [r for r in gateway.logs.records() if " ready: " in str(r.get("message"))]
        results: dict[int, list[str]] = {}

        async def one(index: int) -> None:
            async with Client(gateway.url, mode=MODES[index % 2]) as client:
                results[index] = texts(await client.call_tool("echo", {"message": f"client {index}"}))

        with anyio.fail_after(CALL_DEADLINE):
            async with anyio.create_task_group() as tg:
                for index in range(8):
                    tg.start_soon(one, index)
    assert results == {i: [f"client {i}"] for i in range(8)}
    # Each worker runs its own pool, so each started a child and says which worker it is.
    assert len({r.get("worker") for r in ready}) == 2, ready
