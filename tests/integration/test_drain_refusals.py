"""What a draining gateway tells the requests it refuses, and that every refusal is a request
nothing ran for (``gateway.http.drain``).

A proxy sends a 503 on to another replica (the compose nginx: ``proxy_next_upstream http_503
non_idempotent``), so a 503 must mean that nothing of the request ran; and its message must not
promise what cannot happen: a legacy session lives in the draining process and ends with it,
so its requests are told to start a new session, not to retry elsewhere."""

from __future__ import annotations

import anyio
import httpx
import pytest

from gateway.http.drain import SESSION_ENDING, SHUTTING_DOWN, Drain
from tests.conftest import server_spec
from tests.gateway_server import (
    BASE_HEADERS,
    legacy_initialize,
    modern_call,
    modern_headers,
    open_legacy_session,
    running_gateway,
)

pytestmark = pytest.mark.anyio


def refusal_message(response: httpx.Response) -> str:
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "5"
    body = response.json()
    assert body["error"]["code"] == -31004
    message = body["error"]["message"]
    assert isinstance(message, str)
    return message


async def test_a_session_s_request_is_told_its_session_ends_and_a_sessionless_one_to_retry_elsewhere() -> None:
    drain = Drain()
    with anyio.fail_after(30):
        async with running_gateway(server_spec(), drain=drain) as url, httpx.AsyncClient(timeout=10) as http:
            session = await open_legacy_session(http, url)
            echo = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}
            assert (await http.post(url, headers=session, json=echo)).status_code == 200  # the session works

            drain.begin()  # as on SIGTERM

            in_session = refusal_message(await http.post(url, headers=session, json={**echo, "id": 2}))
            assert in_session == SESSION_ENDING
            assert "another replica" not in in_session
            stream = await http.get(url, headers={**session, "accept": "text/event-stream"})
            assert refusal_message(stream) == SESSION_ENDING

            modern = await http.post(url, headers=modern_headers("tools/call", "echo"), json=modern_call(3, "echo"))
            assert refusal_message(modern) == SHUTTING_DOWN
            initialize = await http.post(url, headers=BASE_HEADERS, json=legacy_initialize())
            assert refusal_message(initialize) == SHUTTING_DOWN
