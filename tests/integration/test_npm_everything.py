"""The npm tier: the reference ``@modelcontextprotocol/server-everything`` behind the gateway.

The child is a real legacy (2025-11-25) server from the npm registry, run as
``node …/dist/index.js stdio`` (no npx). It answers the gateway's ``server/discover`` probe
at once with -32601 (method not found), so the gateway learns "legacy" from that answer and
never waits out ``probe_timeout``. Clients are the official MCP Python SDK, in ``auto`` mode
(it discovers, so it talks 2026-07-28 to the gateway, which bridges to the legacy child) and
in ``legacy`` mode (an ``initialize`` session), plus raw httpx for the wire shapes.

Tool names are those of server-everything 2026.8.31 (kebab-case: ``echo``,
``trigger-long-running-operation``); ``scripts/install-npm-servers.sh`` pins that version.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client, types
from mcp.types import TextContent
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from gateway.relay.server_config import Isolation
from gateway.stdio.spec import ChildSpec
from tests.gateway_server import MODERN, MODERN_META, modern_call, modern_headers, parse_sse, running_gateway
from tests.schemas import validate

REPO = Path(__file__).resolve().parents[2]
NPM_MODULES = REPO / ".npm-servers" / "node_modules"
EVERYTHING = NPM_MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"

if not EVERYTHING.is_file():
    pytest.skip(
        f"{EVERYTHING.relative_to(REPO)} is missing; install the npm servers with scripts/install-npm-servers.sh",
        allow_module_level=True,
    )

pytestmark = [pytest.mark.npm, pytest.mark.anyio]

PROBE_TIMEOUT = 20.0
"""A ceiling, never reached: the child answers ``server/discover`` with -32601 within about
0.5 s of spawning. Bounded so that a child that stayed silent would cost 20 s, not 30."""
ERA_VERDICT_WITHIN = PROBE_TIMEOUT / 2
"""The first answer must come well before the probe would have timed out."""
TEST_DEADLINE = 30.0

LONG_TOOL = "trigger-long-running-operation"
STEPS = 3
LONG_ARGS = {"duration": 0.3, "steps": STEPS}
LONG_TEXT = f"Long running operation completed. Duration: 0.3 seconds, Steps: {STEPS}."


def everything_spec() -> ChildSpec:
    return ChildSpec(
        "node",
        (str(EVERYTHING), "stdio"),
        probe_timeout=PROBE_TIMEOUT,
        handshake_timeout=20.0,
        stdin_close_grace=1.0,
        sigterm_grace=1.0,
        name="server-everything",
    )


async def test_the_gateway_answers_server_discover_for_the_legacy_child_without_waiting_for_the_probe() -> None:
    with anyio.fail_after(TEST_DEADLINE):
        async with running_gateway(everything_spec()) as url, httpx.AsyncClient() as http:
            with anyio.fail_after(ERA_VERDICT_WITHIN):
                reply = await http.post(
                    url,
                    headers=modern_headers("server/discover"),
                    json={"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": MODERN_META}},
                )
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/json"
    body = reply.json()
    validate(body, "DiscoverResultResponse")
    result = body["result"]
    assert MODERN in result["supportedVersions"]
    assert "tools" in result["capabilities"]
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "mcp-servers/everything"


async def test_progress_of_the_long_running_operation_streams_as_sse_to_a_raw_modern_client() -> None:
    with anyio.fail_after(TEST_DEADLINE):
        async with running_gateway(everything_spec()) as url, httpx.AsyncClient() as http:
            reply = await http.post(
                url,
                headers=modern_headers("tools/call", LONG_TOOL),
                json=modern_call(7, LONG_TOOL, LONG_ARGS, progressToken="tok"),
            )
    assert reply.headers["content-type"].startswith("text/event-stream")
    *progress, final = parse_sse(reply.text)
    for note in progress:
        validate(note, "ProgressNotification")
    assert [(n["params"]["progressToken"], n["params"]["progress"]) for n in progress] == [
        ("tok", step) for step in range(1, STEPS + 1)
    ]
    validate(final, "CallToolResultResponse")
    assert final["id"] == 7
    assert final["result"]["content"] == [{"type": "text", "text": LONG_TEXT}]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_sdk_client_connects_and_lists_the_everything_tools(mode: str) -> None:
    with anyio.fail_after(TEST_DEADLINE):
        async with running_gateway(everything_spec()) as url, Client(url, mode=mode) as client:
            listed = await client.list_tools()
            version = client.protocol_version
            server_name = client.server_info.name if client.server_info else None
    if mode == "auto":
        assert version == MODERN
    else:
        assert version in HANDSHAKE_PROTOCOL_VERSIONS
    assert server_name == "mcp-servers/everything"
    names = {tool.name for tool in listed.tools}
    assert {"echo", LONG_TOOL} <= names


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_sdk_client_calls_echo(mode: str) -> None:
    with anyio.fail_after(TEST_DEADLINE):
        async with running_gateway(everything_spec()) as url, Client(url, mode=mode) as client:
            result = await client.call_tool("echo", {"message": "hello through the gateway"})
    assert not result.is_error
    assert result.content == [TextContent(type="text", text="Echo: hello through the gateway")]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_sdk_client_gets_progress_in_order_and_then_the_result(mode: str) -> None:
    events: list[object] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        events.append((progress, total))

    with anyio.fail_after(TEST_DEADLINE):
        async with running_gateway(everything_spec()) as url, Client(url, mode=mode) as client:
            result = await client.call_tool(LONG_TOOL, LONG_ARGS, progress_callback=on_progress)
            events.append("result")
    assert events == [(float(step), float(STEPS)) for step in range(1, STEPS + 1)] + ["result"]
    assert not result.is_error
    assert result.content == [TextContent(type="text", text=LONG_TEXT)]


# -- the child asks the client: sampling, elicitation, roots --------------------------------

ASKING_TOOLS = {"trigger-sampling-request", "trigger-elicitation-request", "get-roots-list"}


def asking_spec() -> ChildSpec:
    """server-everything registers its asking tools only for a client that declares the
    capabilities at initialize, which the gateway does by default."""
    return everything_spec()


@pytest.mark.parametrize("mode", ["legacy", "auto", MODERN])
async def test_the_sdk_clients_callbacks_answer_the_everything_servers_sampling_elicitation_and_roots(
    mode: str,
) -> None:
    """Legacy mode: the child's requests go out on each call's SSE stream. Modern modes: each
    becomes an MRTR round (``input_required``, then a retry) driven by the SDK."""
    asked: list[str] = []

    async def on_sampling(context: object, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.append("sampling")
        reply = types.TextContent(type="text", text="sampled by the test client")
        return types.CreateMessageResult(role="assistant", content=reply, model="test-model")

    async def on_elicitation(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append("elicitation")
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True})

    async def on_roots(context: object) -> types.ListRootsResult:
        asked.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri="file:///srv/project", name="project")])

    with anyio.fail_after(TEST_DEADLINE * 2):
        async with (
            running_gateway(asking_spec()) as url,
            Client(
                url,
                mode=mode,
                sampling_callback=on_sampling,
                elicitation_callback=on_elicitation,
                list_roots_callback=on_roots,
            ) as client,
        ):
            assert {tool.name for tool in (await client.list_tools()).tools} >= ASKING_TOOLS
            sampled = await client.call_tool("trigger-sampling-request", {"prompt": "say hi", "maxTokens": 20})
            elicited = await client.call_tool("trigger-elicitation-request", {})
            rooted = await client.call_tool("get-roots-list", {})
    texts = [[c.text for c in result.content if isinstance(c, TextContent)] for result in (sampled, elicited, rooted)]
    assert not any(result.is_error for result in (sampled, elicited, rooted)), texts
    assert "sampled by the test client" in texts[0][0]
    assert "- Name: Ada Lovelace" in "\n".join(texts[1])
    assert "file:///srv/project" in texts[2][0]
    # The roots may have been asked for once more at start-up (server-everything asks 350 ms
    # after initialize); sampling and elicitation were asked exactly once, by their tools.
    assert asked.count("sampling") == 1
    assert asked.count("elicitation") == 1
    assert asked.count("roots") >= 1


async def test_without_declared_capabilities_the_everything_server_offers_no_asking_tools() -> None:
    spec = replace(everything_spec(), client_capabilities={})  # --client-capability none
    with anyio.fail_after(TEST_DEADLINE):
        async with running_gateway(spec) as url, Client(url, mode="legacy") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
    assert not ASKING_TOOLS & names  # told nothing, the child never asks


CLIENTS = 8


async def test_eight_concurrent_clients_of_both_eras_each_get_their_own_questions_and_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The default gateway: half the clients modern (MRTR), half legacy (requests on SSE), all
    at once, each asked by the child for sampling and elicitation and answering as itself.
    Every answer must come back to the client that gave it, and the gateway answers nothing."""
    asked: dict[int, list[str]] = {i: [] for i in range(CLIENTS)}
    outcomes: dict[int, tuple[str, str]] = {}

    async def run_client(url: str, index: int) -> None:
        async def on_sampling(context: object, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
            asked[index].append("sampling")
            reply = types.TextContent(type="text", text=f"sampled by client {index}")
            return types.CreateMessageResult(role="assistant", content=reply, model="test-model")

        async def on_elicitation(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked[index].append("elicitation")
            return types.ElicitResult(action="accept", content={"name": f"Client {index}", "check": True})

        mode = MODERN if index % 2 else "legacy"
        async with Client(url, mode=mode, sampling_callback=on_sampling, elicitation_callback=on_elicitation) as client:
            sampled = await client.call_tool("trigger-sampling-request", {"prompt": f"hi {index}", "maxTokens": 20})
            elicited = await client.call_tool("trigger-elicitation-request", {})
        texts = ["\n".join(c.text for c in r.content if isinstance(c, TextContent)) for r in (sampled, elicited)]
        assert not sampled.is_error, texts
        assert not elicited.is_error, texts
        outcomes[index] = (texts[0], texts[1])

    caplog.set_level("INFO", logger="gateway.child")
    with anyio.fail_after(TEST_DEADLINE * 2):
        async with running_gateway(everything_spec()) as url, httpx.AsyncClient() as http:
            async with anyio.create_task_group() as tg:
                for index in range(CLIENTS):
                    tg.start_soon(run_client, url, index)
            metrics = (await http.get(url.removesuffix("/mcp") + "/metrics")).text
    for index in range(CLIENTS):
        sampled_text, elicited_text = outcomes[index]
        assert f"sampled by client {index}" in sampled_text
        assert f"- Name: Client {index}\n" in elicited_text + "\n"
        assert sorted(asked[index]) == ["elicitation", "sampling"]
    answered_by_gateway = [
        r.getMessage()
        for r in caplog.records
        if "the gateway answered it" in r.getMessage() and "roots/list" not in r.getMessage()
    ]
    assert answered_by_gateway == []  # (server-everything's own roots/list at start-up has no asker)
    [to_clients] = [
        line for line in metrics.splitlines() if line.startswith("mcp_gateway_child_questions_to_clients_total{")
    ]
    assert float(to_clients.split()[-1]) >= 2 * CLIENTS


async def test_under_session_isolation_each_child_is_told_its_own_clients_capabilities() -> None:
    """server-everything registers an asking tool only for what its client declared."""
    with anyio.fail_after(TEST_DEADLINE):
        async with (
            running_gateway(everything_spec(), isolation=Isolation.SESSION) as url,
            Client(url, mode="legacy", sampling_callback=_never_called) as sampler,
            Client(url, mode="legacy", elicitation_callback=_never_called) as elicitor,
        ):
            sampler_tools = {tool.name for tool in (await sampler.list_tools()).tools}
            elicitor_tools = {tool.name for tool in (await elicitor.list_tools()).tools}
    assert "trigger-sampling-request" in sampler_tools
    assert "trigger-elicitation-request" not in sampler_tools
    assert "trigger-elicitation-request" in elicitor_tools
    assert "trigger-sampling-request" not in elicitor_tools


async def _never_called(context: object, params: object) -> types.ErrorData:
    raise AssertionError("not asked in this test")
