"""The npm tier of owner routing: the real ``@modelcontextprotocol/server-everything`` (a
legacy child) behind three gateway instances and a round-robin balancer (``tests.balancer``).

A modern SDK client calls ``trigger-sampling-request``: the instance that runs the call parks
it and answers ``input_required``; the SDK's retry goes to the next instance, which forwards
it to the one holding the call. A legacy SDK session's calls with progress roam the same way.
"""

from __future__ import annotations

from dataclasses import replace

import anyio
import pytest
from mcp import Client, types
from mcp.types import TextContent

from tests.balancer import cluster
from tests.gateway_server import MODERN
from tests.integration.test_npm_everything import LONG_ARGS, LONG_TEXT, LONG_TOOL, STEPS, everything_spec

pytestmark = [pytest.mark.npm, pytest.mark.anyio]

DEADLINE = 90.0


async def test_everythings_sampling_via_mrtr_resumes_on_the_instance_that_parked_it() -> None:
    asked: list[str] = []

    async def on_sampling(context: object, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.append("sampling")
        reply = types.TextContent(type="text", text="sampled across instances")
        return types.CreateMessageResult(role="assistant", content=reply, model="test-model")

    spec = replace(everything_spec(), client_capabilities={"sampling": {}})
    with anyio.fail_after(DEADLINE):
        async with cluster(spec) as c, Client(c.url, mode=MODERN, sampling_callback=on_sampling) as client:
            sampled = await client.call_tool("trigger-sampling-request", {"prompt": "say hi", "maxTokens": 20})
    assert sampled.is_error is not True
    assert any("sampled across instances" in part.text for part in sampled.content if isinstance(part, TextContent))
    assert asked == ["sampling"]
    calls = [hit for hit in c.balancer.hits if hit.rpc == "tools/call"]
    assert len(calls) == 2
    assert calls[0].backend != calls[1].backend  # the retry reached another instance
    assert 404 not in c.balancer.statuses()


async def test_a_legacy_sdk_session_with_progress_roams_over_three_instances() -> None:
    progress: list[float] = []
    every_progress = anyio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)
        if len(progress) == 3 * STEPS:
            every_progress.set()

    with anyio.fail_after(DEADLINE):
        async with cluster(everything_spec()) as c, Client(c.url, mode="legacy") as client:
            for _ in range(3):
                result = await client.call_tool(LONG_TOOL, LONG_ARGS, progress_callback=on_progress)
                assert [part.text for part in result.content if isinstance(part, TextContent)] == [LONG_TEXT]
            await every_progress.wait()
    assert 404 not in c.balancer.statuses()
    assert {hit.backend for hit in c.balancer.hits} == {0, 1, 2}
