"""Anonymous clients are told apart by their peer address (issue #24 item 6, issue #29 item 3).

Without a token or a trusted identity header every client used to be the one principal
``anonymous``: 256 idle listens locked every other anonymous client out, one anonymous
client's cancel of id 1 was ambiguous with another's id 1 (``mcp-remote`` reuses 0, 1, 2…)
and cancelled nothing, and listens had no lifetime. Now the limits, cancels and throttles of
an anonymous request are keyed by ``anonymous@ADDRESS`` (``gateway.http.limits.client_key``);
which child a request may share is unchanged (anonymous clients still share the pool).

Every client here is a real TCP client on its own loopback source address (127.0.0.1,
127.0.0.2, …: the whole 127/8 is local on Linux), talking to a real gateway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway.relay.router import Router
from gateway.relay.server_config import Isolation, ServerConfig
from gateway.stdio.pool import PoolSettings
from tests.conftest import server_spec
from tests.gateway_server import (
    BASE_HEADERS,
    app_for,
    legacy_initialize,
    modern_call,
    modern_headers,
    running_gateway,
    serving,
)
from tests.integration.test_listen import Sse, listen_request
from tests.integration.test_posted_cancels import (
    StreamedCall,
    cancelled_ids,
    child_id_of,
    modern_cancel,
    open_session,
    running,
)

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def client_from(address: str) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client whose connections come from ``address`` (a loopback address)."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    async with httpx.AsyncClient(transport=transport, timeout=30) as http:
        yield http


def work(n: int) -> dict[str, Any]:
    return {"steps": 100, "interval_ms": 300 + n}  # 30 s; distinct, so the child's id of each is known


async def test_two_anonymous_clients_reusing_ids_each_cancel_their_own_call(tmp_path: Path) -> None:
    """Two mcp-remote-like clients, ids 0, 1, 2 each, both in flight on one shared child: each
    client's POSTed cancel of 1 ends its own call 1 and nothing else (before: "names 2
    requests in flight; ignored", and both ran on)."""
    record = tmp_path / "stdin.jsonl"
    spec = server_spec("--era", "dual", "--record", str(record))
    with anyio.fail_after(60):
        async with (
            running_gateway(spec, pool_size=1) as url,
            client_from("127.0.0.1") as first,
            client_from("127.0.0.2") as second,
            client_from("127.0.0.3") as stranger,
            anyio.create_task_group() as tg,
        ):
            calls: dict[tuple[int, int], StreamedCall] = {}
            for who, http in enumerate((first, second)):
                for request_id in (0, 1, 2):
                    headers = modern_headers("tools/call", "countdown")
                    body = modern_call(request_id, "countdown", work(3 * who + request_id), progressToken="t")
                    calls[who, request_id] = StreamedCall(http, url, headers, body)
            for call in calls.values():
                tg.start_soon(call.run)
            for call in calls.values():
                await call.wait_for(running)
            cancel = modern_headers("notifications/cancelled")
            # A third address has no call 2: its cancel finds nothing of its own.
            assert (await stranger.post(url, headers=cancel, json=modern_cancel(2))).status_code == 202
            for http in (first, second):
                assert (await http.post(url, headers=cancel, json=modern_cancel(1))).status_code == 202
            for who in (0, 1):
                await calls[who, 1].wait_for(lambda c: c.done)
                assert calls[who, 1].final is None  # cancelled: no answer
            told = await cancelled_ids(first, url)
            assert sorted(told, key=str) == sorted(
                [child_id_of(record, work(1)), child_id_of(record, work(4))], key=str
            )
            for key, call in calls.items():
                if key[1] != 1:
                    seen = call.progress
                    await call.wait_for(lambda c, seen=seen: c.progress > seen)  # still running
                    assert not call.done
            tg.cancel_scope.cancel()


@pytest.mark.parametrize("child_era", ["legacy", "modern"])
async def test_idle_listens_count_as_streams_of_their_own_address_only(child_era: str) -> None:
    """Listens are streams: one address's idle listens fill its own stream slots (429 for its
    next listen) and leave another address's listens and calls alone. Before, they counted as
    requests of the one anonymous principal, and no stream limit applied to them."""
    spec = server_spec("--era", child_era)
    listen_headers = modern_headers("subscriptions/listen")
    with anyio.fail_after(60):
        async with (
            running_gateway(spec, max_streams_per_principal=2, max_requests_per_principal=4) as url,
            client_from("127.0.0.1") as hog,
            client_from("127.0.0.2") as other,
        ):
            async with (
                hog.stream("POST", url, headers=listen_headers, json=listen_request(1, toolsListChanged=True)) as a,
                hog.stream("POST", url, headers=listen_headers, json=listen_request(2, toolsListChanged=True)) as b,
            ):
                # The readers are kept: an abandoned line iterator, once collected, closes its
                # response, and the listen with it.
                readers = [Sse(a), Sse(b)]
                for held in readers:
                    assert held.response.status_code == 200
                    ack = await held.next()
                    assert ack is not None
                    assert ack["method"] == "notifications/subscriptions/acknowledged"
                third = await hog.post(url, headers=listen_headers, json=listen_request(3, toolsListChanged=True))
                assert third.status_code == 429, third.text
                assert "open streams" in third.json()["error"]["message"]
                # The hog's requests are not taken by its listens (they are streams, not calls) …
                echo = modern_call(4, "echo", {"message": "hog"})
                mine = await hog.post(url, headers=modern_headers("tools/call", "echo"), json=echo)
                assert mine.status_code == 200, mine.text
                # … and another address has all of its own.
                async with other.stream(
                    "POST", url, headers=listen_headers, json=listen_request(1, toolsListChanged=True)
                ) as theirs:
                    assert theirs.status_code == 200
                    reader = Sse(theirs)
                    assert await reader.next() is not None
                    echo = modern_call(1, "echo", {"message": "other"})
                    reply = await other.post(url, headers=modern_headers("tools/call", "echo"), json=echo)
                    assert reply.status_code == 200, reply.text
            # Closed listens give their slots back.
            async with hog.stream(
                "POST", url, headers=listen_headers, json=listen_request(5, toolsListChanged=True)
            ) as again:
                assert again.status_code == 200


@pytest.mark.parametrize("child_era", ["legacy", "modern"])
async def test_a_listen_ends_with_its_graceful_result_after_max_stream_seconds(child_era: str) -> None:
    """An idle listen lives at most ``--max-stream-seconds``, then ends as at a drain (the
    graceful result under the client's id), so a forgotten listen holds nothing for ever."""
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec("--era", child_era), max_stream_seconds=1.0) as url,
            client_from("127.0.0.1") as http,
            http.stream(
                "POST",
                url,
                headers=modern_headers("subscriptions/listen"),
                json=listen_request("L", toolsListChanged=True),
            ) as reply,
        ):
            assert reply.status_code == 200
            stream = Sse(reply)
            ack = await stream.next()
            assert ack is not None
            assert ack["method"] == "notifications/subscriptions/acknowledged"
            end = await stream.next()  # nothing else happens: only the lifetime ends it
            assert end is not None
            assert end["id"] == "L"
            assert end["result"]["resultType"] == "complete"
            assert await stream.next() is None


async def test_in_flight_requests_are_limited_per_address() -> None:
    """One anonymous address at its in-flight limit gets 429; another address is served."""
    with anyio.fail_after(60):
        async with (
            running_gateway(server_spec(), max_requests_per_principal=2) as url,
            client_from("127.0.0.1") as hog,
            client_from("127.0.0.2") as other,
            anyio.create_task_group() as tg,
        ):
            held = [
                StreamedCall(
                    hog,
                    url,
                    modern_headers("tools/call", "countdown"),
                    modern_call(i, "countdown", work(i), progressToken="t"),
                )
                for i in range(2)
            ]
            for call in held:
                tg.start_soon(call.run)
            for call in held:
                await call.wait_for(running)
            echo = modern_call(9, "echo", {"message": "x"})
            refused = await hog.post(url, headers=modern_headers("tools/call", "echo"), json=echo)
            assert refused.status_code == 429
            served = await other.post(url, headers=modern_headers("tools/call", "echo"), json=echo)
            assert served.status_code == 200, served.text
            tg.cancel_scope.cancel()


async def test_legacy_sessions_are_capped_per_address() -> None:
    """One anonymous address at its session cap gets 429 (-31008); another opens its own."""
    server = ServerConfig("test", server_spec(), PoolSettings(), Isolation.SHARED, max_sessions_per_principal=2)
    with anyio.fail_after(60):
        async with (
            serving(app_for(Router(server))) as base,
            client_from("127.0.0.1") as hog,
            client_from("127.0.0.2") as other,
        ):
            url = f"{base}/mcp"
            for _ in range(2):
                await open_session(hog, url)
            refused = await hog.post(url, headers=BASE_HEADERS, json=legacy_initialize())
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == -31008
            await open_session(other, url)
