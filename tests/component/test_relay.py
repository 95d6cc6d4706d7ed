"""The relay over fake children: both client eras against legacy-only, modern-only and
dual-era children, and id rewriting when many clients share one child."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from gateway.relay.server_config import DualEra
from gateway.stdio.pool import PoolSettings
from tests.component.fakechild import Era, Script, fake_backend, text
from tests.component.harness import Gateway, in_process_gateway, legacy_call
from tests.gateway_server import modern_call, modern_headers, open_legacy_session

pytestmark = pytest.mark.anyio

BOUND = 20.0
CHILD_ERAS: list[Era] = ["legacy", "modern", "dual"]


async def modern(gw: Gateway, request_id: Any, tool: str, args: dict[str, Any] | None = None) -> httpx.Response:
    return await gw.http.post(
        gw.url, headers=modern_headers("tools/call", tool), json=modern_call(request_id, tool, args or {})
    )


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_a_modern_client_is_served_by_every_kind_of_child_with_a_modern_result(child_era: Era) -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era=child_era)) as backend, in_process_gateway(backend) as gw:
            reply = await modern(gw, "m-1", "echo", {"message": "hello"})
    assert reply.status_code == 200
    body = reply.json()
    assert body["id"] == "m-1"
    assert body["result"]["content"] == [{"type": "text", "text": "hello"}]
    assert body["result"]["resultType"] == "complete"  # added by the gateway for a legacy child
    [child] = [child for child in backend.children if child.calls]
    assert child.era_of_handshake == ("initialize" if child_era == "legacy" else "server/discover")
    [call] = child.calls
    assert call.modern is (child_era != "legacy")


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_a_legacy_client_is_served_by_every_kind_of_child_with_a_legacy_result(child_era: Era) -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era=child_era)) as backend, in_process_gateway(backend) as gw:
            session = await open_legacy_session(gw.http, gw.url)
            reply = await gw.http.post(gw.url, headers=session, json=legacy_call(7, "echo", {"message": "hi"}))
    body = reply.json()
    assert body["id"] == 7
    assert body["result"]["content"] == [{"type": "text", "text": "hi"}]
    assert "resultType" not in body["result"]  # modern-only fields removed for a legacy client
    served = [child for child in backend.children if child.calls]
    [child] = served
    # A dual server's legacy clients get children opened with initialize (--dual-era per-client);
    # a modern-only child refuses initialize and is probed, and the legacy client is bridged.
    assert child.era_of_handshake == ("server/discover" if child_era == "modern" else "initialize")


async def test_under_dual_era_modern_both_eras_share_one_dual_child() -> None:
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="dual")) as backend,
            in_process_gateway(backend, dual_era=DualEra.MODERN) as gw,
        ):
            session = await open_legacy_session(gw.http, gw.url)
            legacy = await gw.http.post(gw.url, headers=session, json=legacy_call(1, "whoami"))
            fresh = await modern(gw, 1, "whoami")
    assert len(backend.children) == 1
    assert legacy.json()["result"]["structuredContent"] == fresh.json()["result"]["structuredContent"]
    assert "resultType" not in legacy.json()["result"]
    assert fresh.json()["result"]["resultType"] == "complete"


async def test_many_clients_with_the_same_ids_share_one_child_without_cross_talk() -> None:
    """Sixteen clients, modern and legacy, each sending id 1 (half of them "1"), all at once on
    one child: the child sees sixteen distinct ids of the gateway's own, and each client gets
    its own answer under its own id, with its JSON type, whatever the order of the replies."""
    answers: dict[str, dict[str, Any]] = {}
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="dual")) as backend,
            in_process_gateway(backend, pool=PoolSettings(1, 1), dual_era=DualEra.MODERN) as gw,
        ):
            sessions = [await open_legacy_session(gw.http, gw.url) for _ in range(8)]
            async with anyio.create_task_group() as tg:
                for n in range(16):
                    request_id: Any = 1 if n % 2 else "1"
                    tag = f"client-{n}"

                    async def one(n: int = n, request_id: Any = request_id, tag: str = tag) -> None:
                        if n < 8:
                            reply = await modern(gw, request_id, "hold", {"tag": tag})
                        else:
                            body = legacy_call(request_id, "hold", {"tag": tag})
                            reply = await gw.http.post(gw.url, headers=sessions[n - 8], json=body)
                        answers[tag] = reply.json()

                    tg.start_soon(one)
                held = await backend.wait_calls(16)
                child_ids = [c.id for c in held]
                assert all(type(i) is int for i in child_ids)
                assert len(set(child_ids)) == 16
                for c in reversed(held):
                    c.release(text(c.arguments["tag"]))
    assert len(backend.children) == 1
    for n in range(16):
        body = answers[f"client-{n}"]
        assert body["id"] == (1 if n % 2 else "1")
        assert type(body["id"]) is (int if n % 2 else str)
        assert body["result"]["content"][0]["text"] == f"client-{n}"
