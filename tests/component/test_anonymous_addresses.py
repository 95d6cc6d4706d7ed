"""Anonymous clients are their addresses for cancels and sessions (issue #38 items 7 and 8).

Two anonymous clients (two ``mcp-remote`` processes, say) each send ids 0, 1, 2: a cancel's
owner is its sender (its address, or its legacy session), so each one's cancel of 1 ends its
own call 1 and nothing else. An anonymous legacy session is tied to the address that opened
it: another address holding its id is told it does not exist (404), as another principal is.

Clients on different addresses are ``httpx.ASGITransport(client=(ADDRESS, PORT))``; waits are
on the fake child's calls and cancels, each bounded.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from gateway.stdio.pool import PoolSettings
from tests.component.fakechild import Call, Script, fake_backend
from tests.component.harness import WAIT, Gateway, in_process_gateway, legacy_call
from tests.gateway_server import BASE_HEADERS, modern_call, modern_headers, open_legacy_session

pytestmark = pytest.mark.anyio

BOUND = 60.0
ADDRESSES = ("127.0.0.2", "127.0.0.3")


def client_at(gw: Gateway, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=gw.app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=WAIT)


def cancel(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_two_anonymous_addresses_with_equal_ids_each_cancel_their_own_call(era: str) -> None:
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="dual")) as backend,
            in_process_gateway(backend, pool=PoolSettings(max_size=8)) as gw,
            anyio.create_task_group() as tg,
        ):
            clients = [client_at(gw, address) for address in ADDRESSES]
            answers: dict[tuple[int, int], str] = {}

            async def answer(key: tuple[int, int], http: httpx.AsyncClient, sent: Any, body: Any) -> None:
                answers[key] = (await http.post(gw.url, headers=sent, json=body)).text

            headers: list[dict[str, str]] = []
            for http in clients:
                headers.append(await open_legacy_session(http, gw.url) if era == "legacy" else {})
            for who, http in enumerate(clients):
                for request_id in (0, 1, 2):
                    if era == "legacy":
                        sent, body = headers[who], legacy_call(request_id, "hold", {"who": who, "n": request_id})
                    else:
                        sent = modern_headers("tools/call", "hold")
                        body = modern_call(request_id, "hold", {"who": who, "n": request_id})
                    tg.start_soon(answer, (who, request_id), http, sent, body)
            calls = await backend.wait_calls(6, "hold")
            by_key: dict[tuple[int, int], Call] = {(c.arguments["who"], c.arguments["n"]): c for c in calls}
            for who, http in enumerate(clients):
                sent = headers[who] if era == "legacy" else modern_headers("notifications/cancelled")
                assert (await http.post(gw.url, headers=sent, json=cancel(1))).status_code == 202
            await backend.until(lambda: by_key[0, 1].cancelled.is_set() and by_key[1, 1].cancelled.is_set())
            others = [call for key, call in by_key.items() if key[1] != 1]
            assert not any(call.cancelled.is_set() for call in others)
            for call in others:
                call.release()
        # Every call's request has ended: the cancelled ones without an answer, the others answered.
        for key, text in answers.items():
            assert ("released" in text) is (key[1] != 1), (key, text)


async def test_another_address_holding_an_anonymous_session_id_is_told_it_does_not_exist() -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era="dual")) as backend, in_process_gateway(backend) as gw:
            opener, other = client_at(gw, ADDRESSES[0]), client_at(gw, ADDRESSES[1])
            session = await open_legacy_session(opener, gw.url)
            echo = legacy_call(1, "echo", {"message": "hi"})
            for refused in (
                await other.post(gw.url, headers=session, json=echo),
                await other.post(gw.url, headers=session, json=cancel(1)),
                await other.get(gw.url, headers={**session, "accept": "text/event-stream"}),
                await other.delete(gw.url, headers=session),
            ):
                assert refused.status_code == 404, refused.text
                assert refused.json()["error"]["message"] == "unknown or ended session: initialize a new one"
            answered = await opener.post(gw.url, headers=session, json=echo)  # still the opener's
            assert answered.status_code == 200, answered.text
            assert "hi" in answered.text
            assert (await opener.delete(gw.url, headers=session)).status_code == 204
            # Without a session: another address is not refused anything else.
            fresh = await open_legacy_session(other, gw.url, headers=dict(BASE_HEADERS))
            assert (await other.delete(gw.url, headers=fresh)).status_code == 204
