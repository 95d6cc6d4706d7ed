"""The official MCP Python SDK client against the real gateway, in each of its connect modes.

Each client mode (``auto``: probe ``server/discover`` and fall back to ``initialize``;
``legacy``: the ``initialize`` handshake; a pinned modern version: no handshake at all)
meets each era of child (dual, legacy-only, modern-only). Every pairing must list the
tools, call ``echo``, and deliver every progress notification of ``progress_burst`` to the
SDK's callback, in order, along with the right result.
"""

from __future__ import annotations

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult, TextContent
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from tests.conftest import server_spec
from tests.gateway_server import MODERN, running_gateway

pytestmark = pytest.mark.anyio

CLIENT_MODES = ["auto", "legacy", MODERN]
CHILD_ERAS = ["dual", "legacy", "modern"]
BURST = 5


def text_of(result: CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, TextContent), content
    return content.text


def assert_negotiated(client: Client, mode: str) -> None:
    """The gateway speaks modern to every client that asks for it, whatever the child's era."""
    if mode == "legacy":
        assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
    else:
        # "auto" probes server/discover first: the gateway answers it for every child era,
        # so the SDK must settle on the modern revision rather than fall back.
        assert client.protocol_version == MODERN


@pytest.mark.parametrize("era", CHILD_ERAS)
@pytest.mark.parametrize("mode", CLIENT_MODES)
async def test_the_sdk_client_lists_tools_calls_echo_and_receives_progress_in_order(mode: str, era: str) -> None:
    progress: list[tuple[float, float | None, str | None]] = []
    all_progress_seen = anyio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))
        if len(progress) == BURST:
            all_progress_seen.set()

    with anyio.fail_after(20):
        async with running_gateway(server_spec("--era", era)) as url, Client(url, mode=mode) as client:
            assert_negotiated(client, mode)

            listed = await client.list_tools()
            assert {"echo", "progress_burst"} <= {tool.name for tool in listed.tools}

            echoed = await client.call_tool("echo", {"message": f"hello from {mode} to {era}"})
            assert echoed.is_error is not True
            assert text_of(echoed) == f"hello from {mode} to {era}"

            burst = await client.call_tool(
                "progress_burst", {"count": BURST, "tag": "sdk"}, progress_callback=on_progress
            )
            assert burst.is_error is not True
            assert text_of(burst) == "sdk"
            # The SDK runs each progress callback in a task of its own, so the last ones may
            # still be pending when call_tool returns: wait for them (bounded by fail_after).
            await all_progress_seen.wait()
            assert progress == [(float(n), float(BURST), "sdk") for n in range(1, BURST + 1)]
