"""The npm tier: a legacy session's resource subscription on server-everything, a server that
keeps roots (it fetches them outside any call), for a client that declares roots (issue #36
item 4). Its calls run on children given its roots set, and its ``resources/subscribe`` runs
there too: server-everything sends ``resources/updated`` only for what its own process was
subscribed to, so the update its ``toggle-subscriber-updates`` call starts reaches the
session's GET stream. A rootless session beside it gets its own, never the other's.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from tests.gateway_server import BASE_HEADERS, legacy_initialize, running_gateway
from tests.integration.test_npm_everything import everything_spec
from tests.integration.test_session_subscriptions import messages
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
                alice_in, carol_in = messages(alice_get), messages(carol_get)
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
