"""One client's settings do not leak through a shared child (issue #12 item 9).

- ``logging/setLevel``: each legacy session keeps its own level. A legacy child is told the
  most verbose level among its live sessions, so a session that asks for less never cuts
  off another that asks for more; each gets only messages at or above its own level.
- Roots: a legacy child that caches roots (as server-everything does) is told
  ``notifications/roots/list_changed`` before a call from a client other than the one whose
  roots it holds, so it asks again and the calling client answers.

All the clients share one child (pool of one); ``--record`` shows what the child was told.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import server_spec
from tests.gateway_server import (
    MODERN_META,
    modern_call,
    modern_headers,
    open_legacy_session,
    parse_sse,
    running_gateway,
)

pytestmark = pytest.mark.anyio

LOG_MESSAGE = "notifications/message"
LOG_LEVEL = "io.modelcontextprotocol/logLevel"


def recorded(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def open_session(http: httpx.AsyncClient, url: str, capabilities: dict[str, Any] | None = None) -> dict[str, str]:
    return await open_legacy_session(http, url, capabilities=capabilities)


def legacy_call(request_id: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


async def call(
    http: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    body: dict[str, Any],
    roots: list[dict[str, str]] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """The messages a legacy call got (notifications, then the final answer), answering
    every ``roots/list`` on its stream with ``roots``; and how many were asked."""
    asked = 0
    async with http.stream("POST", url, headers=headers, json=body) as reply:
        assert reply.status_code == 200
        if reply.headers["content-type"] == "application/json":
            return [json.loads(await reply.aread())], 0
        text, seen, got = "", 0, []
        async for chunk in reply.aiter_text():
            text += chunk
            found = parse_sse(text)
            for message in found[seen:]:
                if "method" in message and "id" in message:
                    assert message["method"] == "roots/list"
                    assert roots is not None
                    asked += 1
                    answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"roots": roots}}
                    assert (await http.post(url, headers=headers, json=answer)).status_code == 202
                else:
                    got.append(message)
            seen = len(found)
    return got, asked


def logged(messages: list[dict[str, Any]]) -> list[str]:
    return [m["params"]["data"] for m in messages if m.get("method") == LOG_MESSAGE]


@pytest.mark.parametrize("child_era", ["legacy", "modern", "dual"])
async def test_one_sessions_log_level_never_changes_what_another_session_gets(child_era: str, tmp_path: Path) -> None:
    record = tmp_path / "stdin.jsonl"
    spec = server_spec("--era", child_era, "--logging", "--record", str(record))
    with anyio.fail_after(30):
        async with running_gateway(spec, pool_size=1) as url, httpx.AsyncClient(timeout=20) as http:
            alice, bob = await open_session(http, url), await open_session(http, url)
            for headers, level in ((alice, "debug"), (bob, "error")):
                body = {"jsonrpc": "2.0", "id": "lvl", "method": "logging/setLevel", "params": {"level": level}}
                assert (await http.post(url, headers=headers, json=body)).json() == {
                    "jsonrpc": "2.0",
                    "id": "lvl",
                    "result": {},
                }

            async def log(headers: dict[str, str], level: str, data: str) -> list[str]:
                messages, _ = await call(http, url, headers, legacy_call(data, "log", {"level": level, "data": data}))
                assert "result" in messages[-1]
                return logged(messages)

            assert await log(alice, "debug", "a1") == ["a1"]  # bob's "error" did not silence alice
            assert await log(bob, "warning", "b1") == []  # below bob's own level
            assert await log(bob, "error", "b2") == ["b2"]
            assert await log(alice, "info", "a2") == ["a2"]
            # A modern client's own logLevel on the same child is not cut off by bob either.
            modern = modern_call("m1", "log", {"level": "debug", "data": "m1"}, **{LOG_LEVEL: "debug"})
            reply = await http.post(url, headers=modern_headers("tools/call", "log"), json=modern)
            assert logged(parse_sse(reply.text)) == ["m1"]
            # Legacy sessions meet a legacy (or dual) server in the legacy era; a modern-only one
            # refuses initialize and is spoken to in the modern era, where there is no setLevel.
            as_legacy = child_era != "modern"
            levels = [m["params"]["level"] for m in recorded(record) if m.get("method") == "logging/setLevel"]
            assert levels == (["debug"] if as_legacy else [])  # the most verbose; never bob's "error"

            # Once alice has gone, the child need not be that verbose any more.
            assert (await http.delete(url, headers=alice)).status_code == 204
            assert await log(bob, "error", "b3") == ["b3"]
            levels = [m["params"]["level"] for m in recorded(record) if m.get("method") == "logging/setLevel"]
            assert levels == (["debug", "error"] if as_legacy else [])
            # A modern request that wants more makes the child that verbose while it runs.
            modern = modern_call("m2", "log", {"level": "info", "data": "m2"}, **{LOG_LEVEL: "info"})
            reply = await http.post(url, headers=modern_headers("tools/call", "log"), json=modern)
            assert logged(parse_sse(reply.text)) == ["m2"]
            assert await log(bob, "warning", "b4") == []  # bob still gets only what he asked for
            levels = [m["params"]["level"] for m in recorded(record) if m.get("method") == "logging/setLevel"]
            if child_era == "legacy":
                assert levels == ["debug", "error", "info", "error"]
            elif as_legacy:  # a dual child may serve the modern request in another process
                assert levels[:2] == ["debug", "error"]
                assert levels[-1] == "error"
            else:
                assert levels == []


ROOTS_SPEC_OPTIONS: dict[str, Any] = {"client_capabilities": {"roots": {"listChanged": True}}}
ROOTS = {name: [{"uri": f"file:///home/{name}", "name": name}] for name in ("alice", "bob", "mona")}


async def test_a_child_that_caches_roots_only_ever_holds_one_clients_roots_set(tmp_path: Path) -> None:
    """Children are keyed by the roots set they are given (issue #23): each client's calls run
    on a child that fetched exactly its roots (asked of a legacy session once, on its first
    call's stream; of a modern client by the gateway's own round), and no child is told
    ``roots/list_changed`` to fetch another's."""
    record = tmp_path / "stdin.jsonl"
    spec = server_spec("--era", "legacy", "--cache-roots", "--record", str(record), **ROOTS_SPEC_OPTIONS)
    with anyio.fail_after(40):
        async with running_gateway(spec, pool_size=1) as url, httpx.AsyncClient(timeout=20) as http:
            declares = {"roots": {"listChanged": True}}
            alice, bob = await open_session(http, url, declares), await open_session(http, url, declares)
            carol = await open_session(http, url)  # declares no roots

            async def cached(headers: dict[str, str], name: str) -> tuple[Any, int]:
                messages, asked = await call(http, url, headers, legacy_call(name, "cached_roots", {}), ROOTS.get(name))
                return messages[-1]["result"]["structuredContent"]["roots"], asked

            assert await cached(alice, "alice") == (ROOTS["alice"], 1)
            assert await cached(bob, "bob") == (ROOTS["bob"], 1)  # not alice's, as a cache would say
            carols, asked = await cached(carol, "carol")
            assert asked == 0
            assert carols == []  # the gateway's answer (no roots configured: none), not bob's roots
            assert await cached(alice, "alice") == (ROOTS["alice"], 0)  # known, and her child holds them
            assert await cached(bob, "bob") == (ROOTS["bob"], 0)

            # A modern client with roots answers the gateway's own round, before a child is chosen.
            meta = {**MODERN_META, "io.modelcontextprotocol/clientCapabilities": {"roots": {}}}
            first = await http.post(
                url, headers=modern_headers("tools/call", "cached_roots"), json=modern_call(1, "cached_roots", **meta)
            )
            result = first.json()["result"]
            assert result["resultType"] == "input_required"
            assert result["inputRequests"] == {"roots": {"method": "roots/list", "params": {}}}
            retry = modern_call(2, "cached_roots", **meta)
            retry["params"].update(
                inputResponses={"roots": {"roots": ROOTS["mona"]}}, requestState=result["requestState"]
            )
            second = await http.post(url, headers=modern_headers("tools/call", "cached_roots"), json=retry)
            assert second.json()["result"]["structuredContent"]["roots"] == ROOTS["mona"]
    told = [m for m in recorded(record) if m.get("method") == "notifications/roots/list_changed"]
    assert told == []  # nothing to refresh: no child ever holds two clients' roots
