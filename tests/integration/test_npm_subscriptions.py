"""The npm tier: a legacy session's resource subscription on server-everything, a server that
keeps roots (it fetches them outside any call), for a client that declares roots (issue #36
item 4). Its calls run on children given its roots set, and its ``resources/subscribe`` runs
there too: server-everything sends ``resources/updated`` only for what its own process was
subscribed to, so the update its ``toggle-subscriber-updates`` call starts reaches the
session's GET stream. A rootless session beside it gets its own, never the other's.

The same for a modern client (2026-07-28): its ``subscriptions/listen`` declares roots as its
calls do, and follows its calls to the child given its roots set (``gateway.relay.listen_roots``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.gateway_server import (
    BASE_HEADERS,
    MODERN_META,
    legacy_initialize,
    modern_headers,
    parse_sse,
    running_gateway,
    sse_messages,
)
from tests.integration.test_npm_everything import everything_spec
from tests.integration.test_shared_settings import call

pytestmark = [pytest.mark.npm, pytest.mark.anyio]

DEADLINE = 60.0
UPDATED = "notifications/resources/updated"
ROOTS = [{"uri": "file:///tmp/alice", "name": "alice"}]
URIS = {
    "alice": "demo://resource/static/document/architecture.md",
    "carol": "demo://resource/static/document/features.md",
}


async def test_a_roots_sessions_own_change_reaches_its_subscription_on_a_server_that_keeps_roots() -> None:
    with anyio.fail_after(DEADLINE):
        async with running_gateway(everything_spec()) as url, httpx.AsyncClient(timeout=DEADLINE) as http:
            sessions = {}
            for name in ("alice", "carol"):  # alice declares roots; carol does not
                init = legacy_initialize(capabilities={"roots": {}} if name == "alice" else {})
                reply = await http.post(url, headers=BASE_HEADERS, json=init)
                assert reply.status_code == 200, reply.text
                session = {**BASE_HEADERS, "mcp-session-id": reply.headers["mcp-session-id"]}
                sessions[name] = {**session, "mcp-protocol-version": "2025-11-25"}
                initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                await http.post(url, headers=sessions[name], json=initialized)

            async def send(who: str, method: str, **params: Any) -> dict[str, Any]:
                body = {"jsonrpc": "2.0", "id": f"{who}-{method}", "method": method, "params": params}
                got, _ = await call(http, url, sessions[who], body, ROOTS if who == "alice" else None)
                return got[-1]

            for name, uri in URIS.items():
                assert "result" in await send(name, "resources/subscribe", uri=uri)
            get = {"accept": "text/event-stream"}
            async with (
                http.stream("GET", url, headers={**sessions["alice"], **get}) as alice_get,
                http.stream("GET", url, headers={**sessions["carol"], **get}) as carol_get,
            ):
                alice_in, carol_in = sse_messages(alice_get), sse_messages(carol_get)
                updates: dict[str, dict[str, Any]] = {}
                for name, stream in (("alice", alice_in), ("carol", carol_in)):
                    assert "result" in await send(name, "tools/call", name="toggle-subscriber-updates", arguments={})
                    async for message in stream:  # the first update for what it subscribed to
                        if message.get("method") == UPDATED:
                            updates[name] = message["params"]
                            break
                for name in URIS:  # stop the 5 s timers
                    assert "result" in await send(name, "tools/call", name="toggle-subscriber-updates", arguments={})
    assert updates == {name: {"uri": uri} for name, uri in URIS.items()}


CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
TOGGLE = "toggle-subscriber-updates"


async def modern_tool(
    http: httpx.AsyncClient, url: str, who: str, tool: str, arguments: dict[str, Any] | None = None
) -> tuple[dict[str, Any], int]:
    """``who``'s modern ``tool`` call (alice declares roots and answers the gateway's roots
    round, if it asks, with hers); the final message and how many rounds it took."""
    meta = {**MODERN_META, CAPABILITIES_KEY: {"roots": {}} if who == "alice" else {}}
    params: dict[str, Any] = {"name": tool, "arguments": arguments or {}, "_meta": meta}
    for attempt in range(2):
        body = {"jsonrpc": "2.0", "id": f"{who}-{attempt}", "method": "tools/call", "params": params}
        reply = await http.post(url, headers=modern_headers("tools/call", tool), json=body)
        assert reply.status_code == 200, reply.text
        final: dict[str, Any] = [m async for m in messages_of(reply)][-1]
        result = final.get("result", {})
        if result.get("resultType") != "input_required":
            return final, attempt + 1
        assert who == "alice", final  # only a client that declares roots is asked for them
        params = {**params, "inputResponses": {"roots": {"roots": ROOTS}}, "requestState": result["requestState"]}
    raise AssertionError("asked for roots twice")


async def modern_toggle(http: httpx.AsyncClient, url: str, who: str) -> dict[str, Any]:
    final, _ = await modern_tool(http, url, who, TOGGLE)
    return final


def listening(http: httpx.AsyncClient, url: str, who: str, uri: str) -> Any:
    """``who``'s ``subscriptions/listen`` for ``uri`` (declaring roots as its calls do), streamed."""
    meta = {**MODERN_META, CAPABILITIES_KEY: {"roots": {}} if who == "alice" else {}}
    params = {"notifications": {"resourceSubscriptions": [uri]}, "_meta": meta}
    body = {"jsonrpc": "2.0", "id": f"listen-{who}", "method": "subscriptions/listen", "params": params}
    return http.stream("POST", url, headers=modern_headers("subscriptions/listen"), json=body)


async def acknowledged(stream: AsyncIterator[dict[str, Any]], uri: str) -> None:
    ack = await anext(stream)
    assert ack["method"] == "notifications/subscriptions/acknowledged", ack
    assert ack["params"]["notifications"] == {"resourceSubscriptions": [uri]}, ack


async def messages_of(reply: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    if reply.headers["content-type"].startswith("text/event-stream"):
        for message in parse_sse(reply.text):
            yield message
    else:
        yield reply.json()


async def test_a_modern_listen_gets_its_own_calls_update_on_a_server_that_keeps_roots() -> None:
    got: dict[str, dict[str, Any]] = {}
    with anyio.fail_after(DEADLINE):
        async with (
            running_gateway(everything_spec()) as url,
            httpx.AsyncClient(timeout=DEADLINE) as http,
            listening(http, url, "alice", URIS["alice"]) as alice_listen,
            listening(http, url, "carol", URIS["carol"]) as carol_listen,
        ):
            streams = {"alice": sse_messages(alice_listen), "carol": sse_messages(carol_listen)}
            for who, stream in streams.items():
                await acknowledged(stream, URIS[who])
            # Alice first: her toggle runs on her roots child, which sends at once for what
            # that process is subscribed to; the usual child sends nothing yet.
            for who, stream in streams.items():
                assert "result" in await modern_toggle(http, url, who)
                async for message in stream:
                    if message.get("method") == UPDATED:
                        got[who] = message["params"]
                        break
            for who in streams:  # stop the 5 s timers
                assert "result" in await modern_toggle(http, url, who)
    for who, uri in URIS.items():
        assert got[who]["uri"] == uri, got
        assert got[who]["_meta"] == {"io.modelcontextprotocol/subscriptionId": f"listen-{who}"}, got


NPM_MODULES = Path(__file__).resolve().parents[2] / ".npm-servers" / "node_modules"
MEMORY = NPM_MODULES / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"
GRAPH = "memory://knowledge-graph"


@pytest.mark.skipif(not MEMORY.is_file(), reason="server-memory is missing: run scripts/install-npm-servers.sh")
async def test_a_modern_listen_gets_its_own_calls_update_on_server_memory_which_keeps_no_roots(tmp_path: Path) -> None:
    """server-memory never reads roots: the gateway learns that, a roots-declaring call runs in
    one round trip on the usual child, where its listen subscribed."""
    spec = replace(everything_spec(), args=(str(MEMORY),), env={"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")})
    entities = {"entities": [{"name": "gateway", "entityType": "project", "observations": ["relays"]}]}
    with anyio.fail_after(DEADLINE):
        async with (
            running_gateway(spec) as url,
            httpx.AsyncClient(timeout=DEADLINE) as http,
            listening(http, url, "alice", GRAPH) as alice_listen,
        ):
            stream = sse_messages(alice_listen)
            await acknowledged(stream, GRAPH)
            final, rounds = await modern_tool(http, url, "alice", "create_entities", entities)
            assert "result" in final, final
            update = await anext(stream)
    assert rounds == 1  # no roots round: the server keeps none
    assert update["method"] == UPDATED, update
    assert update["params"] == {"uri": GRAPH, "_meta": {"io.modelcontextprotocol/subscriptionId": "listen-alice"}}
