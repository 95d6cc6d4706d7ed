"""Legacy sessions over fake children: initialize, ``Mcp-Session-Id``, DELETE, 404 after."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.relay.server_config import DualEra, Isolation
from gateway.stdio.pool import PoolSettings
from tests.component.fakechild import fake_backend
from tests.component.harness import in_process_gateway, legacy_call
from tests.gateway_server import BASE_HEADERS, legacy_initialize, open_legacy_session

pytestmark = pytest.mark.anyio

DECLARES_ALL = {"sampling": {}, "elicitation": {}}  # no roots: the gateway would ask for them first

BOUND = 20.0


async def test_initialize_opens_a_session_that_serves_until_deleted_and_is_404_after() -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, in_process_gateway(backend) as gw:
            init = await gw.http.post(gw.url, headers=BASE_HEADERS, json=legacy_initialize("2025-06-18"))
            assert init.status_code == 200
            assert init.json()["result"]["protocolVersion"] == "2025-06-18"  # the client's, negotiated
            assert init.json()["result"]["serverInfo"]["name"] == "fakeserver"  # the child's, from its handshake
            session_id = init.headers["mcp-session-id"]
            assert len(session_id) >= 32
            headers = {**BASE_HEADERS, "mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"}
            done = await gw.http.post(
                gw.url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
            )
            assert done.status_code == 202
            served = await gw.http.post(gw.url, headers=headers, json=legacy_call(1, "echo", {"message": "in"}))
            assert served.json()["result"]["content"][0]["text"] == "in"

            deleted = await gw.http.delete(gw.url, headers=headers)
            assert deleted.status_code == 204
            after = await gw.http.post(gw.url, headers=headers, json=legacy_call(2, "echo", {"message": "out"}))
            assert after.status_code == 404
            again = await gw.http.delete(gw.url, headers=headers)
            assert again.status_code == 404
            assert [c.arguments["message"] for c in backend.calls()] == ["in"]  # nothing reached a child after


async def test_an_unknown_session_id_is_404_and_a_request_without_one_is_refused() -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, in_process_gateway(backend) as gw:
            unknown = {**BASE_HEADERS, "mcp-session-id": "not-a-session", "mcp-protocol-version": "2025-11-25"}
            reply = await gw.http.post(gw.url, headers=unknown, json=legacy_call(1, "echo"))
            assert reply.status_code == 404
            bare = {**BASE_HEADERS, "mcp-protocol-version": "2025-11-25"}
            missing = await gw.http.post(gw.url, headers=bare, json=legacy_call(1, "echo"))
            assert missing.status_code == 400
    assert backend.calls() == []


async def test_delete_cancels_the_sessions_requests_in_flight_and_no_other() -> None:
    replies: dict[str, Any] = {}
    with anyio.fail_after(BOUND):
        # Two children: calls that may ask do not share a legacy child (attribution).
        async with fake_backend() as backend, in_process_gateway(backend, pool=PoolSettings(1, 2)) as gw:
            # Sessions that may be asked (children told so), so that their calls may ask.
            leaving = await open_legacy_session(gw.http, gw.url, capabilities=DECLARES_ALL)
            staying = await open_legacy_session(gw.http, gw.url, capabilities=DECLARES_ALL)
            async with anyio.create_task_group() as tg:
                for name, headers in (("leaving", leaving), ("staying", staying)):

                    async def one(name: str = name, headers: dict[str, str] = headers) -> None:
                        reply = await gw.http.post(gw.url, headers=headers, json=legacy_call(9, "hold", {"tag": name}))
                        replies[name] = reply

                    tg.start_soon(one)
                held = {c.arguments["tag"]: c for c in await backend.wait_calls(2)}
                assert (await gw.http.delete(gw.url, headers=leaving)).status_code == 204
                await backend.until(lambda: held["leaving"].cancelled.is_set())
                assert not held["staying"].cancelled.is_set()
                held["staying"].release()
            kept = await gw.http.post(gw.url, headers=staying, json=legacy_call(10, "echo", {"message": "still"}))
            assert kept.json()["result"]["content"][0]["text"] == "still"
    assert held["leaving"].child.cancels() == [held["leaving"].id]  # exactly one, naming the child-side id
    assert held["staying"].child.cancels() == []
    assert "-31005" in replies["leaving"].text  # the session ended: its request says so
    assert replies["staying"].json()["result"]["content"][0]["text"] == "released"


async def test_sessions_under_session_isolation_get_a_child_each_and_delete_stops_it() -> None:
    with anyio.fail_after(BOUND):
        async with (
            fake_backend() as backend,
            in_process_gateway(backend, isolation=Isolation.SESSION, dual_era=DualEra.MODERN) as gw,
        ):
            pids = []
            sessions = [await open_legacy_session(gw.http, gw.url) for _ in range(3)]
            for headers in sessions:
                reply = await gw.http.post(gw.url, headers=headers, json=legacy_call(1, "whoami"))
                pids.append(reply.json()["result"]["structuredContent"]["pid"])
            assert len(set(pids)) == 3
            await gw.http.delete(gw.url, headers=sessions[0])
            [first] = [c for c in backend.children if c.pid == pids[0]]
            await backend.until(lambda: not first.is_running)  # its session pool stopped it
            assert first.returncode == 0  # it exited at stdin close: the first rung of the stop ladder
            again = await gw.http.post(gw.url, headers=sessions[1], json=legacy_call(2, "whoami"))
            assert again.json()["result"]["structuredContent"]["pid"] == pids[1]
