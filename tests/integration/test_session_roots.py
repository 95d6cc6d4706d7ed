"""Roots under ``--isolation session``, with the official SDK's legacy client.

A session's own child starts before the session could be asked anything (no call, no GET
stream yet), so a server that fetches roots at start-up (server-filesystem, server-everything;
here the test server's ``--cache-roots``) was answered the configured roots and kept them: every
session's calls ran without the roots its client declared. A session that declares roots now
runs its calls on a pool of its own given its set (``Router.keys_roots``), as a shared roots
pool is."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import Client
from mcp import types as sdk

from gateway.relay.server_config import Isolation
from tests.conftest import server_spec
from tests.gateway_server import running_gateway

pytestmark = pytest.mark.anyio

WAIT = 30.0


def roots_of(name: str) -> Any:
    async def answer(context: Any) -> sdk.ListRootsResult:
        return sdk.ListRootsResult(roots=[sdk.Root(uri=f"file:///client/{name}", name=name)])

    return answer


@pytest.mark.parametrize("isolation", [Isolation.SESSION, Isolation.SHARED])
async def test_each_sessions_calls_run_on_a_child_holding_its_own_roots(isolation: Isolation) -> None:
    spec = server_spec("--era", "legacy", "--cache-roots")
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(spec, isolation=isolation) as url,
            Client(url, mode="legacy", list_roots_callback=roots_of("alice")) as alice,
            Client(url, mode="legacy", list_roots_callback=roots_of("bob")) as bob,
        ):
            held = {}
            for name, client in (("alice", alice), ("bob", bob), ("alice again", alice)):
                held[name] = (await client.call_tool("cached_roots", {})).structured_content
    assert held["alice"] == {"roots": [{"uri": "file:///client/alice", "name": "alice"}]}
    assert held["bob"] == {"roots": [{"uri": "file:///client/bob", "name": "bob"}]}
    assert held["alice again"] == held["alice"]
