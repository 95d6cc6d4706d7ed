"""``--max-connections``: the connections one listener holds, from all clients, are bounded.

A real gateway on loopback whose listener takes two connections (and the protocol alone, on a
recorded transport, for what a socket cannot show deterministically). Legacy GET streams (which a
client keeps open as long as it likes) hold both; then a new connection's request is answered
503 with ``Retry-After`` and a JSON-RPC error, and closed, without the request running (a
head that comes in pieces, once it has ended); once a stream ends, a new client is served
again, a probe (``GET /healthz``) past the cap is served from the reserve, a connection past
the cap and past those waiting for their 503 is closed at once, and ``/metrics`` counts what
was refused. Waits are bounded by ``fail_after``; the wait for the server to see a closed
socket is on the count's changes (``WatchedConnections``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
import uvicorn
from uvicorn.server import ServerState

from gateway.http.connection import GuardedHttpTools
from gateway.http.limits import BUSY_RETRY_AFTER, MAX_REFUSING, OpenConnections
from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from gateway.stdio.pool import PoolSettings
from tests.conftest import server_spec
from tests.gateway_server import app_for, open_legacy_session, serving

pytestmark = pytest.mark.anyio

BOUND = 30.0
CAP = 2


class WatchedConnections(OpenConnections):
    """The listener's count, with a wait for the server's side of a socket to be seen
    (``until``): every change of the count wakes the waiters."""

    def __init__(self, cap: int | None) -> None:
        super().__init__(cap)
        self._changed = anyio.Event()

    def _note(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def admit(self) -> bool | None:
        admitted = super().admit()
        self._note()
        return admitted

    def release(self, admitted: bool) -> None:
        super().release(admitted)
        self._note()

    def as_probe(self) -> bool:
        taken = super().as_probe()
        self._note()
        return taken

    def probe_ended(self) -> None:
        super().probe_ended()
        self._note()

    async def until(self, done: Callable[[], bool]) -> None:
        while not done():
            await self._changed.wait()


@asynccontextmanager
async def capped(**limits: Any) -> AsyncIterator[tuple[str, Any]]:
    """A gateway whose listener holds at most ``CAP`` connections (the app's own count, as
    ``gateway.server.run`` wires it); its MCP URL and app."""
    router = Router(ServerConfig("test", server_spec(), PoolSettings(min_size=1)))
    app = app_for(router, max_connections=CAP, connections=WatchedConnections(CAP))
    http = GuardedHttpTools.configured(connections=app.state.connections, **limits)
    async with serving(app, http=http) as base:
        yield f"{base}/mcp", app


async def raw_request(url: str, head: bytes) -> bytes:
    """``head`` sent on a new connection; everything read until the server closes it."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    async with await anyio.connect_tcp(parts.hostname, parts.port or 80) as stream:
        await stream.send(head)
        received = b""
        while True:
            try:
                received += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return received


async def test_past_the_cap_a_request_gets_503_with_retry_after_and_a_freed_slot_serves_again() -> None:
    with anyio.fail_after(BOUND):
        async with capped() as (url, app), httpx.AsyncClient(timeout=BOUND) as first, httpx.AsyncClient() as second:
            sessions = [await open_legacy_session(client, url) for client in (first, second)]
            streams = [
                client.stream("GET", url, headers={**session, "accept": "text/event-stream"})
                for client, session in zip((first, second), sessions, strict=True)
            ]
            held = [await stream.__aenter__() for stream in streams]
            assert [response.status_code for response in held] == [200, 200]
            assert app.state.connections.open == CAP  # each client's one connection, kept alive

            body = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}'
            parts = urlsplit(url)
            head = (
                f"POST {parts.path} HTTP/1.1\r\nhost: {parts.netloc}\r\ncontent-type: application/json\r\n"
                f"accept: application/json, text/event-stream\r\ncontent-length: {len(body)}\r\n\r\n"
            ).encode()
            refused = await raw_request(url, head + body)
            status, _, rest = refused.partition(b"\r\n")
            assert status == b"HTTP/1.1 503 Service Unavailable", refused
            headers, _, payload = rest.partition(b"\r\n\r\n")
            assert f"retry-after: {BUSY_RETRY_AFTER}".encode() in headers.lower()
            assert b"connection: close" in headers.lower()
            assert b'"code":-32600' in payload
            assert f"holds {CAP} connections".encode() in payload
            assert app.state.connections.refused == 1

            # A head that comes in pieces is answered once it has ended, never parsed.
            async with await anyio.connect_tcp(parts.hostname or "", parts.port or 80) as stream:
                await stream.send(head[:10])
                await stream.send(head[10:] + body)
                answer = b""
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                    while True:
                        answer += await stream.receive()
            assert answer.startswith(b"HTTP/1.1 503 ")
            assert app.state.connections.refused == 2
            assert app.state.connections.open == CAP  # the refused were never counted

            await streams[0].__aexit__(None, None, None)
            await first.aclose()  # its connection goes: the slot is free once the server sees it
            await app.state.connections.until(lambda: app.state.connections.open < CAP)
            reply = await second.post(url, headers=sessions[1], json={"jsonrpc": "2.0", "id": 2, "method": "ping"})
            assert reply.status_code == 200, reply.text
            assert reply.json()["result"] == {}
            await streams[1].__aexit__(None, None, None)


async def test_metrics_count_the_connections_and_the_refusals() -> None:
    with anyio.fail_after(BOUND):
        async with capped() as (url, app), httpx.AsyncClient(timeout=BOUND) as client:
            app.state.connections.refused = 3  # as if three were refused
            page = (await client.get(url.removesuffix("/mcp") + "/metrics")).text
    lines = {
        line.split()[0]: float(line.split()[1]) for line in page.splitlines() if line.startswith("mcp_gateway_conn")
    }
    assert lines["mcp_gateway_connections_open"] == 1  # the scrape's own
    assert lines["mcp_gateway_connections_max"] == CAP
    assert lines["mcp_gateway_connections_refused_total"] == 3


async def test_past_the_cap_a_probe_is_served_from_the_reserve() -> None:
    with anyio.fail_after(BOUND):
        async with capped() as (url, app), httpx.AsyncClient(timeout=BOUND) as holder:
            session = await open_legacy_session(holder, url)
            async with holder.stream("GET", url, headers={**session, "accept": "text/event-stream"}) as stream:
                assert stream.status_code == 200
                async with httpx.AsyncClient() as other:  # the second connection: the cap is full
                    assert (await other.get(url.removesuffix("/mcp") + "/status")).status_code in (200, 401, 403)
                    parts = urlsplit(url)
                    probe = f"GET /healthz HTTP/1.1\r\nhost: {parts.netloc}\r\nconnection: close\r\n\r\n".encode()
                    answer = await raw_request(url, probe)
                    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
                    refused = await raw_request(url, probe.replace(b"/healthz", b"/status"))
                    assert refused.startswith(b"HTTP/1.1 503 "), refused[:200]
                    # A probe is served once: its connection closes after the answer, and a
                    # request pipelined behind it is not served past the cap.
                    status = f"GET /status HTTP/1.1\r\nhost: {parts.netloc}\r\n\r\n".encode()
                    kept = probe.replace(b"connection: close\r\n", b"")
                    twice = await raw_request(url, kept + status)
                    assert twice.startswith(b"HTTP/1.1 200 "), twice[:200]
                    assert twice.count(b"HTTP/1.1 ") == 1, twice
                    assert b"connection: close" in twice.lower()
            await app.state.connections.until(lambda: app.state.connections.probes == 0)  # given back
            assert app.state.connections.refused == 1


class Recorded(asyncio.Transport):
    """A connection's transport that records what the protocol does with it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.eof = False
        self.aborted = False
        self.closed = anyio.Event()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def write_eof(self) -> None:
        self.eof = True

    def can_write_eof(self) -> bool:
        return True

    def is_closing(self) -> bool:
        return self.closed.is_set()

    def close(self) -> None:
        self.closed.set()

    def abort(self) -> None:
        self.aborted = True
        self.closed.set()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def protocol(connections: OpenConnections) -> GuardedHttpTools:
    async def app(scope: object, receive: object, send: object) -> None:  # never reached
        raise AssertionError

    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    http = GuardedHttpTools.configured(connections=connections)
    return http(config, ServerState(), {}, _loop=asyncio.get_running_loop())


async def test_a_503_past_the_cap_is_followed_by_a_fin_and_the_rest_of_the_request_is_read_then_dropped() -> None:
    connections = OpenConnections(1)
    assert connections.admit()  # the one connection the cap allows, held
    refused, transport = protocol(connections), Recorded()
    refused.connection_made(transport)
    head = b"POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-length: 7\r\n\r\n"
    for byte in range(len(head)):  # a head that trickles in a byte a read: answered once, at its end
        refused.data_received(head[byte : byte + 1])
    [answer] = transport.writes
    assert answer.startswith(b"HTTP/1.1 503 ")
    assert transport.eof  # the FIN, not a close: the body still coming does not reset the answer
    assert not transport.closed.is_set()
    refused.data_received(b"{body}}")
    assert len(transport.writes) == 1
    with anyio.fail_after(BOUND):
        await transport.closed.wait()  # after REFUSAL_DRAIN
    refused.connection_lost(None)
    assert (connections.open, connections.refusing, connections.refused) == (1, 0, 1)


async def test_past_the_cap_and_past_those_waiting_for_their_503_a_connection_is_closed_at_once() -> None:
    connections = OpenConnections(1)
    assert connections.admit()
    waiting = []
    for _ in range(MAX_REFUSING):
        one, transport = protocol(connections), Recorded()
        one.connection_made(transport)
        waiting.append((one, transport))
    assert connections.refusing == MAX_REFUSING
    dropped, transport = protocol(connections), Recorded()
    dropped.connection_made(transport)
    assert transport.aborted  # unanswered, its descriptor freed at once
    dropped.connection_lost(None)
    assert (connections.refusing, connections.refused) == (MAX_REFUSING, 1)
    for one, _ in waiting:
        one.connection_lost(None)
    assert connections.refusing == 0
