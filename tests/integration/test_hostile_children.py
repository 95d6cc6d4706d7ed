"""Hostile load on children (issue #13 rows 4, 5, 11, 12): one client must not hurt others.

Real test-server children behind real gateways on loopback port-0 sockets. Clients are told
apart by a trusted identity header (``X-User`` from 127.0.0.0/8), as behind an
authenticating reverse proxy.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from gateway.errors import ClientThrottledError, GatewayUnavailableError
from gateway.relay.router import Router
from gateway.relay.server_config import Isolation, ServerConfig
from gateway.relay.sessions import SessionStore
from gateway.stdio.budget import ChildBudget
from gateway.stdio.crashes import CrashLedger
from gateway.stdio.pool import PoolSettings
from tests.conftest import server_processes, server_spec
from tests.gateway_server import (
    BASE_HEADERS,
    OPERATOR,
    app_for,
    legacy_initialize,
    modern_call,
    modern_headers,
    operator_tokens,
    serving,
)
from tests.integration.test_drain import Logged, logged_gateway

pytestmark = pytest.mark.anyio

IDENTITY = {"principal_header": "X-User", "trusted_proxies": ["127.0.0.0/8"]}


def gateway_app(server: ServerConfig, children: ChildBudget | None = None) -> Any:
    return app_for(Router(server, children=children), operator_tokens=operator_tokens(), **IDENTITY)


async def call(http: httpx.AsyncClient, url: str, user: str, tool: str, args: dict[str, Any]) -> httpx.Response:
    """A call as ``user``, who also sends ``X-Api-Key: user`` (a credential where mapped)."""
    headers = modern_headers("tools/call", tool, **{"x-user": user, "x-api-key": user})
    return await http.post(url, headers=headers, json=modern_call(1, tool, args))


async def status(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    reply = await http.get(url.replace("/mcp", "/status"), headers=OPERATOR)
    return reply.json()["servers"][0]  # type: ignore[no-any-return]


def pid_of(reply: httpx.Response) -> int:
    return int(reply.json()["result"]["structuredContent"]["pid"])


async def ended(pid: int) -> None:
    """Wait until ``pid`` has terminated (a pidfd becomes readable then): an event, not a poll."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await anyio.wait_readable(fd)
    finally:
        os.close(fd)


def is_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


# -- row 4: legacy sessions per principal ------------------------------------------------


async def test_a_principal_at_its_session_cap_gets_429_while_another_principals_session_keeps_working() -> None:
    server = ServerConfig("test", server_spec(), PoolSettings(), Isolation.SESSION, max_sessions_per_principal=3)
    echo = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "hi"}},
    }
    with anyio.fail_after(40):
        async with serving(gateway_app(server)) as base, httpx.AsyncClient(timeout=30) as http:
            url = f"{base}/mcp"

            async def initialize(user: str) -> httpx.Response:
                return await http.post(url, headers={**BASE_HEADERS, "x-user": user}, json=legacy_initialize())

            bob = await initialize("bob")
            bob_session = {**BASE_HEADERS, "x-user": "bob", "mcp-session-id": bob.headers["mcp-session-id"]}
            alice = [await initialize("alice") for _ in range(3)]
            assert [r.status_code for r in alice] == [200, 200, 200]
            children = len(server_processes())  # one per session (isolation: session)
            refused = await initialize("alice")
            assert refused.status_code == 429
            assert int(refused.headers["retry-after"]) >= 1
            error = refused.json()["error"]
            assert error["code"] == -31008
            assert "3 legacy sessions" in error["message"]
            assert refused.json()["id"] == 0
            assert len(server_processes()) == children  # refused before any child was started
            # Nobody's session was ended to make room: bob's and alice's first still answer.
            assert (await http.post(url, headers=bob_session, json=echo)).json()["result"]["content"][0]["text"] == "hi"
            first = {**BASE_HEADERS, "x-user": "alice", "mcp-session-id": alice[0].headers["mcp-session-id"]}
            assert "result" in (await http.post(url, headers=first, json=echo)).json()
            # Ending one of her sessions makes room for alice again.
            assert (await http.delete(url, headers=first)).status_code == 204
            assert (await initialize("alice")).status_code == 200


async def test_a_full_session_store_refuses_with_503_and_ends_nobodys_session() -> None:
    ended: list[str] = []
    store = SessionStore(max_sessions=2, max_per_principal=5, on_end=ended.append)
    first = store.create("2025-11-25", {}, None, "alice")
    store.create("2025-11-25", {}, None, "bob")
    with pytest.raises(GatewayUnavailableError) as refused:
        store.create("2025-11-25", {}, None, "carol")
    assert not isinstance(refused.value, ClientThrottledError)
    assert refused.value.status == 503
    assert refused.value.retry_after >= 1
    assert ended == []
    assert store.get(first.id) is first
    store.end(first.id)
    assert store.create("2025-11-25", {}, None, "carol").principal == "carol"


# -- row 5: a principal that keeps crashing the shared child --------------------------------
# The throttle through a whole gateway, while others are served: tests/component/test_crashes.py.


def test_crash_strikes_are_shared_among_the_principals_in_flight_and_age_out() -> None:
    ledger = CrashLedger(strikes=3, window=60)
    ledger.record({"mallory"}, 0.0)
    for when in (1.0, 2.0, 3.0, 4.0):
        ledger.record({"mallory", "alice"}, when)
    assert ledger.retry_after("alice", 4.0) is None  # four halves: 2 strikes
    assert ledger.retry_after("mallory", 4.0) == pytest.approx(56.0)  # 3 strikes; 2 once the first ages out
    with pytest.raises(ClientThrottledError) as throttled:
        ledger.check("mallory", 10.0, "test")
    assert throttled.value.status == 429
    assert throttled.value.retry_after == 50
    assert ledger.retry_after("mallory", 60.0) is None


# -- row 11: what children start outside their group ---------------------------------------


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        stat = fh.read()
    return int(stat[stat.rfind(b")") + 2 :].split()[1])


@asynccontextmanager
async def gateway_with_an_orphan(*flags: str) -> AsyncIterator[tuple[Logged, int]]:
    """The gateway (``logged_gateway`` with ``flags``) and the pid of its child's setsid
    grandchild, orphaned by a crash. The test stops the gateway; on the way out every log line
    has been read, and the grandchild is killed should it have outlived the gateway (the test
    asserts, before, that it did not)."""
    grandchild = 0
    try:
        async with logged_gateway(*flags) as gw:
            grandchild = pid_of(await call(gw.http, gw.url, "anyone", "spawn_detached", {}))
            assert is_running(grandchild)
            assert os.getsid(grandchild) == grandchild  # it left the child's session
            crashed = await call(gw.http, gw.url, "anyone", "exit", {"code": 1})
            assert crashed.json()["error"]["code"] == -31001
            assert parent_of(grandchild) == gw.process.pid  # an orphan, adopted by the subreaper
            yield gw, grandchild
    finally:
        if grandchild and is_running(grandchild):
            os.kill(grandchild, signal.SIGKILL)


async def test_a_setsid_grandchild_orphaned_by_a_crash_does_not_outlive_the_gateway_process() -> None:
    with anyio.fail_after(60):
        async with gateway_with_an_orphan() as (gw, grandchild):
            gw.process.send_signal(signal.SIGTERM)
            assert await gw.process.wait() == 0
            assert not is_running(grandchild)  # here: leaving the helper kills one that outlived it
    assert any("outlived them" in message for message in gw.messages), json.dumps(gw.lines[-5:])


async def test_a_second_signal_stops_at_once_exits_zero_and_still_ends_what_children_left() -> None:
    """An impatient operator: a second signal during the drain stops the gateway at once. It
    ended the process by that signal (uvicorn raised it again once it had put back the default
    handler), before the sweep, so a setsid grandchild outlived the gateway and the exit status
    was -15 (SIGTERM) or a KeyboardInterrupt's (SIGINT); a third SIGINT skipped the lifespan's
    end, where the children stop in order. Now: exit code 0, the children stopped, the orphan
    ended, no error logged."""
    with anyio.fail_after(60):
        async with gateway_with_an_orphan("--drain-timeout", "60") as (gw, grandchild):
            body = modern_call(2, "sleep", {"ms": 60_000, "progress": True}, progressToken="p")
            headers = modern_headers("tools/call", "sleep")
            async with gw.http.stream("POST", gw.url, headers=headers, json=body) as slow:
                async for line in slow.aiter_lines():
                    if line.startswith("data:"):
                        break  # the sleep runs at the child: the drain will wait for it
                gw.process.send_signal(signal.SIGTERM)
                await gw.draining.wait()
                gw.process.send_signal(signal.SIGINT)  # the second: stop now
                gw.process.send_signal(signal.SIGINT)  # and a third (uvicorn's would skip the lifespan's end)
                assert await gw.process.wait() == 0
            assert not is_running(grandchild)  # here: leaving the helper kills one that outlived it
    messages = gw.messages
    assert "received SIGINT: stopping now" in messages, messages[-5:]
    assert any("outlived them" in message for message in messages), messages[-5:]
    assert any("exited with code 0 after the gateway stopped it" in message for message in messages)  # in order
    assert [line for line in gw.lines if line["level"] in ("error", "critical")] == []


async def test_a_setsid_grandchild_is_ended_when_its_child_stops() -> None:
    server = ServerConfig("test", server_spec(), PoolSettings(min_size=1, max_size=1, max_requests=2))
    grandchild = 0
    try:
        with anyio.fail_after(40):
            async with serving(gateway_app(server)) as base, httpx.AsyncClient(timeout=30) as http:
                url = f"{base}/mcp"
                grandchild = pid_of(await call(http, url, "anyone", "spawn_detached", {}))
                child = pid_of(await call(http, url, "anyone", "pid", {}))  # the second request: recycled
                await ended(child)
                await ended(grandchild)  # in the child's stop, not the gateway's
                assert pid_of(await call(http, url, "anyone", "pid", {})) != child
    finally:
        if grandchild and is_running(grandchild):
            os.kill(grandchild, signal.SIGKILL)


# -- row 12: the global child cap ------------------------------------------------------------


@pytest.mark.parametrize("keyed_by", ["principal", "credentials"])
async def test_isolation_keys_beyond_the_global_cap_evict_idle_children_then_get_503(keyed_by: str) -> None:
    pool = PoolSettings(min_size=0, max_size=1, queue_timeout=0.5, idle_timeout=300)
    if keyed_by == "principal":
        server = ServerConfig("test", server_spec(), pool, Isolation.PRINCIPAL)
    else:  # envFromHeaders: a child per distinct credential, whoever sends it
        server = ServerConfig("test", server_spec(), pool, Isolation.SHARED, {"x-api-key": "API_KEY"})
    baseline = len(server_processes())
    with anyio.fail_after(60):
        async with (
            serving(gateway_app(server, ChildBudget(2))) as base,
            httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=20)) as http,
        ):
            url = f"{base}/mcp"
            one = pid_of(await call(http, url, "p1", "pid", {}))
            two = pid_of(await call(http, url, "p2", "pid", {}))
            three = pid_of(await call(http, url, "p3", "pid", {}))  # at the cap: p1's idle child goes
            assert len({one, two, three}) == 3
            await ended(one)  # the evicted child stops
            assert is_running(two)
            assert len(server_processes()) == baseline + 2
            whole = (await http.get(f"{base}/status", headers=OPERATOR)).json()
            assert whole["children"] == {"in_service": 2, "max": 2, "evicted": 1}
            running: list[str] = []
            both_running = anyio.Event()

            async def sleeper(user: str) -> None:
                headers = modern_headers("tools/call", "sleep", **{"x-user": user, "x-api-key": user})
                body = modern_call(1, "sleep", {"ms": 20_000, "progress": True}, progressToken="p")
                async with http.stream("POST", url, headers=headers, json=body) as reply:
                    async for line in reply.aiter_lines():
                        if line.startswith("data:") and '"notifications/progress"' in line:  # begun at the child
                            running.append(user)
                            if len(running) == 2:
                                both_running.set()

            async with anyio.create_task_group() as tg:
                for user in ("p2", "p3"):  # both children busy
                    tg.start_soon(sleeper, user)
                await both_running.wait()
                refused = await call(http, url, "p4", "pid", {})
                assert refused.status_code == 503
                assert int(refused.headers["retry-after"]) >= 1
                assert refused.json()["error"]["code"] == -31004
                assert "--max-children" in refused.json()["error"]["message"]
                assert len(server_processes()) == baseline + 2
                tg.cancel_scope.cancel()  # the sleepers leave: their calls are cancelled at the child
            assert "result" in (await call(http, url, "p4", "pid", {})).json()  # an idle child made room
    assert len(server_processes()) == baseline


def test_the_default_child_cap_is_sized_to_the_machine() -> None:
    from gateway.stdio.budget import MIN_CHILDREN, machine_children

    cap = machine_children()
    assert MIN_CHILDREN <= cap <= 16 * (os.cpu_count() or 1)
    assert ChildBudget().capacity == cap


async def test_legacy_sessions_beyond_the_global_cap_move_idle_sessions_children_out_and_keep_them_working() -> None:
    pool = PoolSettings(min_size=0, max_size=1, queue_timeout=0.5)
    server = ServerConfig("test", server_spec("--era", "legacy"), pool, Isolation.SESSION)
    pid_call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "pid", "arguments": {}}}
    with anyio.fail_after(60):
        async with serving(gateway_app(server, ChildBudget(2))) as base, httpx.AsyncClient(timeout=30) as http:
            url = f"{base}/mcp"

            async def open_session() -> tuple[dict[str, str], int]:
                init = await http.post(url, headers={**BASE_HEADERS, "x-user": "u"}, json=legacy_initialize())
                assert init.status_code == 200
                headers = {**BASE_HEADERS, "x-user": "u", "mcp-session-id": init.headers["mcp-session-id"]}
                return headers, pid_of(await http.post(url, headers=headers, json=pid_call))

            (first, one), (_, two), (_, three) = [await open_session() for _ in range(3)]
            await ended(one)  # the first session's child was the least recently used idle one
            assert is_running(two)
            assert is_running(three)
            again = pid_of(await http.post(url, headers=first, json=pid_call))  # the session lives on
            assert again not in (one, two, three)
            await ended(two)  # and made room in turn
            assert is_running(three)


def test_the_session_and_child_caps_are_settings_with_flags_environment_and_config_keys(tmp_path: Any) -> None:
    from gateway.cli import parse_settings
    from gateway.errors import ConfigError

    settings = parse_settings(["--max-children", "12", "--max-sessions-per-principal", "5"])
    assert settings.max_children == 12
    assert settings.servers[0].max_sessions_per_principal == 5
    environ = {"MCP_GATEWAY_MAX_CHILDREN": "7", "MCP_GATEWAY_MAX_SESSIONS_PER_PRINCIPAL": "9"}
    from_env = parse_settings([], environ)
    assert (from_env.max_children, from_env.servers[0].max_sessions_per_principal) == (7, 9)
    config = tmp_path / "servers.json"
    config.write_text(
        json.dumps({"mcpServers": {"a": {"command": "x", "maxSessionsPerPrincipal": 2}, "b": {"command": "y"}}})
    )
    servers = parse_settings(["--config", str(config), "--max-sessions-per-principal", "4"]).servers
    assert [s.max_sessions_per_principal for s in servers] == [2, 4]
    config.write_text(json.dumps({"mcpServers": {"a": {"command": "x", "maxSessionsPerPrincipal": 0}}}))
    with pytest.raises(ConfigError, match="maxSessionsPerPrincipal"):
        parse_settings(["--config", str(config)])
    with pytest.raises(ConfigError, match="--max-children"):
        parse_settings(["--max-children", "-1"])


async def test_the_child_cap_spans_servers_and_never_evicts_a_prewarmed_minimum() -> None:
    children = ChildBudget(1)
    shared = ServerConfig("warm", server_spec(), PoolSettings(min_size=1, max_size=1))
    keyed = ServerConfig(
        "keyed", server_spec(), PoolSettings(min_size=0, max_size=1, queue_timeout=0.3), Isolation.PRINCIPAL
    )
    app = app_for([Router(shared, children=children), Router(keyed, children=children)], **IDENTITY)
    with anyio.fail_after(40):
        async with serving(app) as base, httpx.AsyncClient(timeout=30) as http:
            warm = pid_of(await call(http, f"{base}/servers/warm/mcp", "p1", "pid", {}))
            refused = await call(http, f"{base}/servers/keyed/mcp", "p1", "pid", {})
            assert refused.status_code == 503
            assert "limit of 1 children" in refused.json()["error"]["message"]
            assert is_running(warm)
            assert pid_of(await call(http, f"{base}/servers/warm/mcp", "p2", "pid", {})) == warm
