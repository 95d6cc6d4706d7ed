"""The npm tier: server-everything, which caches roots once per process, shared by sessions
that each have their own roots (issue #12 item 9). Each session's ``get-roots-list`` must
show that session's roots, on its first call too: the gateway has the child fetch them
again (``roots/list_changed``, answered by the calling session) before the call."""

from __future__ import annotations

from dataclasses import replace

import anyio
import httpx
import pytest

from tests.gateway_server import running_gateway
from tests.integration.test_npm_everything import everything_spec
from tests.integration.test_shared_settings import call, legacy_call, open_session

pytestmark = [pytest.mark.npm, pytest.mark.anyio]

ROOTS = {name: [{"uri": f"file:///home/{name}", "name": name}] for name in ("alice", "bob", "carol")}


async def test_every_session_sees_its_own_roots_through_one_shared_server_everything() -> None:
    # Told at initialize that roots may change, so that the child can be told they did.
    spec = replace(everything_spec(), client_capabilities={"roots": {"listChanged": True}})
    with anyio.fail_after(60):
        async with running_gateway(spec, pool_size=1) as url, httpx.AsyncClient(timeout=20) as http:
            declares = {"roots": {"listChanged": True}}
            sessions = {name: await open_session(http, url, declares) for name in ROOTS}
            for name in ["alice", "bob", "bob", "carol", "alice", "carol"]:
                messages, _ = await call(
                    http, url, sessions[name], legacy_call(name, "get-roots-list", {}), ROOTS[name]
                )
                text = messages[-1]["result"]["content"][0]["text"]
                assert f"file:///home/{name}" in text, (name, text)
                assert all(f"file:///home/{other}" not in text for other in ROOTS if other != name), (name, text)
