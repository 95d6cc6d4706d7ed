"""Hostile HTTP peers against a real gateway on loopback (issue #13 rows 2, 3, 7; #14 streaming).

- a huge header is refused once its first ``MAX_HEAD_BYTES`` are read, with memory flat and
  other clients served meanwhile; a head that never ends gets 408 after the header timeout;
- connections that send headers and then trickle a body hold no request slot (others are not
  429'd) and get 408 after the body timeout;
- clients that never read their replies: a reply goes out in pieces under a process budget
  (past it, 503), the connection is aborted after the write timeout, and a request still
  running is cancelled at the child (both eras);
- a child's burst of 2,000 progress notifications reaches the client whole, then the result.

Raw sockets play the hostile peers; every wait is bounded by ``fail_after``.
"""

from __future__ import annotations

import re
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import orjson
import pytest
from anyio.abc import SocketStream

from gateway.http import replies
from gateway.http.connection import MAX_HEAD_BYTES, GuardedHttpTools
from gateway.http.drain import Drain
from gateway.protocol.attribution import AskPolicy
from gateway.relay.router import Router
from gateway.relay.server_config import DualEra, ServerConfig
from gateway.stdio.pool import PoolSettings
from tests.conftest import server_spec
from tests.gateway_server import (
    BASE_HEADERS,
    app_for,
    legacy_initialize,
    modern_call,
    modern_headers,
    parse_sse,
    running_gateway,
    serving,
)
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

MIB = 2**20
FLOOD = 64 * MIB
"""A header this long took the old edge ~15 s and hundreds of MB; now 80 KiB of it are read."""
SHORT = GuardedHttpTools.configured(header_timeout=0.5, write_timeout=1.0)


def peak_rss_reset() -> None:
    """Start measuring this process's peak RSS afresh (the gateway runs in it)."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")


def peak_rss_bytes() -> int:
    with open("/proc/self/status") as status:
        match = re.search(r"VmHWM:\s+(\d+) kB", status.read())
    assert match is not None
    return int(match.group(1)) * 1024


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


async def connect(port: int, *, small_receive_buffer: bool = False) -> SocketStream:
    stream = await anyio.connect_tcp("127.0.0.1", port)
    if small_receive_buffer:  # a peer that reads nothing fills up after a few KiB, not megabytes
        stream.extra(anyio.abc.SocketAttribute.raw_socket).setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return stream


async def read_all(stream: SocketStream) -> bytes:
    """One response: until its ``content-length`` is in, or the server closes (or resets)."""
    data = b""
    try:
        while True:
            data += await stream.receive()
            head, found, body = data.partition(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length: *(\d+)", head)
            if found and length is not None and len(body) >= int(length.group(1)):
                return data
    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
        return data


def post_bytes(port: int, body: object, headers: dict[str, str]) -> bytes:
    payload = orjson.dumps(body)
    head = ["POST /mcp HTTP/1.1", f"host: 127.0.0.1:{port}", f"content-length: {len(payload)}"]
    head += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


async def echo(http: httpx.AsyncClient, url: str, request_id: int = 1) -> httpx.Response:
    return await http.post(
        url, headers=modern_headers("tools/call", "echo"), json=modern_call(request_id, "echo", {"message": "hi"})
    )


class WatchedDrain(Drain):
    """The app's count of MCP requests in flight, with an event for each change."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = anyio.Event()
        self.finished = 0  # requests that left the app

    def enter(self) -> None:
        super().enter()
        self.changed.set()
        self.changed = anyio.Event()

    def leave(self) -> None:
        super().leave()
        self.finished += 1
        self.changed.set()
        self.changed = anyio.Event()

    async def wait_for(self, condition: Callable[[int], bool]) -> None:
        """Until ``condition(in_flight)`` holds."""
        with anyio.fail_after(10):
            while not condition(self.in_flight):
                await self.changed.wait()

    async def wait_finished(self, count: int) -> None:
        with anyio.fail_after(20):
            while self.finished < count:
                await self.changed.wait()


@asynccontextmanager
async def gateway_app(**app_options: Any) -> AsyncIterator[tuple[str, WatchedDrain]]:
    """A gateway serving the test child with short header and write timeouts, and its drain."""
    # Calls of both eras share the one child (the test server never asks here, and every child is
    # opened in the modern era), so a modern client can ask it what a legacy call was told.
    never_asks = PoolSettings(child_asks=AskPolicy.NEVER)
    server = ServerConfig("test", server_spec(), never_asks, dual_era=DualEra.MODERN)
    drain = WatchedDrain()
    app = app_for(Router(server), drain=drain, **app_options)
    async with serving(app, http=SHORT) as base:
        yield f"{base}/mcp", drain


# -- row 2: a huge header -----------------------------------------------------------------


async def flood_header(port: int, total: int = FLOOD) -> tuple[int, bytes]:
    """Send a request whose one header is ``total`` bytes long; (bytes sent, the reply)."""
    piece = b"a" * MIB
    sent = 0
    async with await connect(port) as stream:
        try:
            await stream.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
            while sent < total:
                await stream.send(piece)
                sent += len(piece)
            await stream.send(b"\r\n\r\n")
        except (anyio.BrokenResourceError, OSError):
            pass
        return sent, await read_all(stream)


async def test_a_header_over_the_limit_gets_431_with_a_json_rpc_error() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, await connect(port_of(url)) as stream:
            await stream.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES + 1))
            reply = await read_all(stream)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ")
    assert b"connection: close" in head
    assert f"request headers over {MAX_HEAD_BYTES} bytes" in orjson.loads(body)["error"]["message"]


async def test_pipelined_requests_longer_together_than_the_head_limit_are_each_answered() -> None:
    pad = b"p" * 50_000  # each head is under the limit; the two sent in one write are over it
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + pad + b"\r\n\r\n"
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, await connect(port_of(url)) as stream:
            await stream.send(request * 2)
            data = b""
            while data.count(b"ok\n") < 2:
                data += await stream.receive()
    assert data.count(b"HTTP/1.1 200 OK") == 2


async def test_a_huge_header_is_cut_off_early_and_the_gateway_memory_stays_flat() -> None:
    with anyio.fail_after(60):
        async with running_gateway(server_spec()) as url:
            peak_rss_reset()
            before = peak_rss_bytes()
            sent, reply = await flood_header(port_of(url))
            grown = peak_rss_bytes() - before
    # The server stopped reading after 80 KiB, so the kernel buffers filled and the send failed
    # long before 64 MiB went out (the old edge read it all, and held it several times over).
    assert sent < FLOOD // 2
    assert grown < 24 * MIB, f"peak RSS grew {grown // MIB} MiB during a {FLOOD // MIB} MiB header"
    if reply:  # the refusal may be lost to the reset of the unread flood
        assert reply.startswith(b"HTTP/1.1 431 ")


async def test_other_clients_are_answered_while_huge_headers_are_sent() -> None:
    with anyio.fail_after(60):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient(timeout=30) as http:
            stop, flooded = anyio.Event(), anyio.Event()

            async def attacker() -> None:
                while not stop.is_set():
                    await flood_header(port_of(url))
                    flooded.set()

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(attacker)
                with anyio.fail_after(20):
                    await flooded.wait()  # the attack is under way
                with anyio.fail_after(10):  # each echo took ~3 s during one 60 MB header before
                    for n in range(5):
                        assert (await echo(http, url, n)).status_code == 200
                stop.set()


async def test_a_request_head_that_never_ends_gets_408_after_the_header_timeout() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec(), http=SHORT) as url:
            port = port_of(url)
            async with await connect(port) as trickle, await connect(port) as silent:
                await trickle.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
                trickled, said_nothing = await read_all(trickle), await read_all(silent)
    head, _, body = trickled.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ")
    assert "not received within 0.5 s" in orjson.loads(body)["error"]["message"]
    assert said_nothing == b""  # closed: a connection that never started a request gets no answer


WHOLE_HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
ENDLESS_HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a"


@pytest.mark.parametrize(
    "pipelined",
    [
        # A kept-alive connection's next head, begun in one write after the first answer and
        # going on in another: its timer is armed only when a head is still incomplete after
        # the bytes at hand (a whole head arms none).
        False,
        # Begun in the same write as the end of the request before it (its bytes counted with
        # that one's): it was closed as an idle connection, without an answer.
        True,
    ],
)
async def test_a_later_head_that_never_ends_gets_408_after_the_header_timeout(pipelined: bool) -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec(), http=SHORT) as url, await connect(port_of(url)) as conn:
            if pipelined:
                await conn.send(WHOLE_HEAD + ENDLESS_HEAD)
                first = await read_all(conn)
            else:
                await conn.send(WHOLE_HEAD)
                first = await read_all(conn)
                await conn.send(ENDLESS_HEAD[:23])
                await conn.send(ENDLESS_HEAD[23:])
            second = await read_all(conn)
    assert first.startswith(b"HTTP/1.1 200 ")
    head, _, body = second.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), second
    assert "not received within 0.5 s" in orjson.loads(body)["error"]["message"]


# -- row 3: slow bodies -------------------------------------------------------------------


async def test_slow_bodies_hold_no_request_slot_and_end_with_408_after_the_body_timeout() -> None:
    slots, slow = 4, 6
    with anyio.fail_after(30):
        async with (
            gateway_app(max_requests_per_principal=slots, body_timeout=1.0) as (url, drain),
            httpx.AsyncClient(timeout=20) as http,
        ):
            port = port_of(url)
            request = post_bytes(port, modern_call(9, "echo", {"message": "x"}), modern_headers("tools/call", "echo"))
            streams = [await connect(port) for _ in range(slow)]
            try:
                for stream in streams:
                    await stream.send(request[:-5])  # headers and most of the body; the rest never comes
                await drain.wait_for(lambda in_flight: in_flight >= slow)  # every slow request reached the app
                # More slow requests than slots, yet an anonymous client is served (it was 429).
                assert (await echo(http, url)).status_code == 200
                legacy = await http.post(url, headers=BASE_HEADERS, json=legacy_initialize())
                assert legacy.status_code == 200
                for stream in streams:
                    head, _, body = (await read_all(stream)).partition(b"\r\n\r\n")
                    assert head.startswith(b"HTTP/1.1 408 ")
                    assert b"connection: close" in head
                    assert "request body not received within 1 s" in orjson.loads(body)["error"]["message"]
            finally:
                for stream in streams:
                    await stream.aclose()


async def test_a_client_that_leaves_before_its_body_is_in_is_logged_499_and_not_as_a_crash() -> None:
    """Closing the connection after the head, or in the middle of the body, is a client's right:
    the gateway has nobody to answer, logs the request as 499 (client closed), and neither sends
    a 500 nor logs an exception. It was "Exception in ASGI application" and a 500 access line."""
    with anyio.fail_after(30), recording("gateway", "uvicorn") as records:
        async with gateway_app() as (url, drain), httpx.AsyncClient(timeout=20) as http:
            port = port_of(url)
            request = post_bytes(port, modern_call(9, "echo", {"message": "x"}), modern_headers("tools/call", "echo"))
            head_end = request.index(b"\r\n\r\n") + 4
            for count, cut in enumerate((head_end, len(request) - 5), start=1):  # no body byte; most of it
                async with await connect(port) as stream:
                    await stream.send(request[:cut])
                    await drain.wait_for(lambda in_flight: in_flight >= 1)  # its body is being read
                await records.wait_for(lambda record: record.name == "gateway.access", count)
                await drain.wait_for(lambda in_flight: in_flight == 0)
            assert (await echo(http, url)).status_code == 200  # and the next client is served
    lines = [(r.status, r.outcome) for r in records.records if r.name == "gateway.access"]  # type: ignore[attr-defined]
    assert lines == [(499, "cancelled"), (499, "cancelled"), (200, "ok")]
    assert records.errors() == []


async def test_the_request_limit_still_counts_requests_whose_body_is_in() -> None:
    with anyio.fail_after(30):
        async with (
            gateway_app(max_requests_per_principal=1) as (url, _),
            httpx.AsyncClient(timeout=20) as http,
        ):
            started = anyio.Event()
            async with anyio.create_task_group() as tg:

                async def long_call() -> None:
                    async with http.stream(
                        "POST",
                        url,
                        headers=modern_headers("tools/call", "progress_burst"),
                        json=modern_call(
                            1, "progress_burst", {"count": 1, "tag": "t", "then_sleep_ms": 20_000}, progressToken="p"
                        ),
                    ) as response:
                        async for _ in response.aiter_lines():
                            started.set()  # the first progress: the call is running
                            tg.cancel_scope.cancel()

                tg.start_soon(long_call)
                await started.wait()
                refused = await echo(http, url)
                assert refused.status_code == 429
                assert refused.headers["retry-after"] == "1"


# -- row 7: clients that never read -------------------------------------------------------


async def test_large_replies_waiting_for_clients_that_never_read_share_one_budget_past_which_they_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reply_bytes, clients = 8_000_000, 4  # more than the kernel buffers of a connection take
    budget = replies.ReplyBudget(40 * MIB)  # room for two of the replies at once (each held twice over)
    monkeypatch.setattr(replies, "BUDGET", budget)
    patient = GuardedHttpTools.configured(write_timeout=120.0)  # the budget, not the timeout, is tested
    with anyio.fail_after(60):
        drain = WatchedDrain()
        app = app_for(Router(ServerConfig("test", server_spec(), PoolSettings())), drain=drain)
        async with serving(app, http=patient) as base, httpx.AsyncClient(timeout=20) as http:
            url, port = f"{base}/mcp", port_of(base)
            request = post_bytes(
                port, modern_call(1, "big", {"bytes": reply_bytes}), modern_headers("tools/call", "big")
            )
            peak_rss_reset()
            before = peak_rss_bytes()
            streams = [await connect(port, small_receive_buffer=True) for _ in range(clients)]
            try:
                for stream in streams:
                    await stream.send(request)
                await drain.wait_finished(clients - 2)  # refused; the two that hold the budget never finish
                assert drain.in_flight == 2
                assert budget.used > 2 * reply_bytes
                assert (await echo(http, url)).status_code == 200  # small replies need no budget
                refused = await http.post(
                    url, headers=modern_headers("tools/call", "big"), json=modern_call(5, "big", {"bytes": reply_bytes})
                )
                # 200 with -31004, never a 503: the call ran, so no proxy may retry it on its own.
                assert refused.status_code == 200
                assert "retry-after" not in refused.headers
                assert refused.json()["id"] == 5
                assert refused.json()["error"]["code"] == -31004
                assert "40 MiB of large replies" in refused.json()["error"]["message"]
                grown = peak_rss_bytes() - before
            finally:
                for stream in streams:
                    await stream.aclose()
            await drain.wait_for(lambda in_flight: in_flight == 0)  # the holders' clients went away
            assert budget.used == 0
    # Each reply exists a few times over while it is made (child line, parsed, serialized), but
    # nothing piles up: the old edge buffered every unread reply whole in its transport.
    assert grown < 120 * MIB, f"peak RSS grew {grown // MIB} MiB"


async def test_a_large_reply_to_a_client_that_never_reads_is_cut_off_after_the_write_timeout() -> None:
    reply_bytes = 8_000_000
    with anyio.fail_after(60):
        async with gateway_app() as (url, drain):
            port = port_of(url)
            request = post_bytes(
                port, modern_call(1, "big", {"bytes": reply_bytes}), modern_headers("tools/call", "big")
            )
            async with await connect(port, small_receive_buffer=True) as stream:
                await stream.send(request)
                await drain.wait_finished(1)  # the write timeout (1 s) ended it
                received = await read_all(stream)  # reset: what was in flight, then nothing more
    assert received.startswith(b"HTTP/1.1 200 ")
    assert len(received) < reply_bytes
    assert replies.BUDGET.used == 0


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_stream_whose_client_stops_reading_is_cancelled_at_the_child_after_the_write_timeout(
    era: str,
) -> None:
    arguments = {"count": 4000, "tag": "x" * 2000, "then_sleep_ms": 30_000}  # ~8 MB of progress, then busy
    with anyio.fail_after(60), recording("gateway.access") as access:
        async with gateway_app() as (url, _), httpx.AsyncClient(timeout=20) as http:
            port = port_of(url)
            if era == "modern":
                headers = modern_headers("tools/call", "progress_burst")
                body: dict[str, Any] = modern_call(7, "progress_burst", arguments, progressToken="p")
            else:
                opened = await http.post(url, headers=BASE_HEADERS, json=legacy_initialize())
                headers = {
                    **BASE_HEADERS,
                    "mcp-session-id": opened.headers["mcp-session-id"],
                    "mcp-protocol-version": "2025-11-25",
                }
                await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
                body = {
                    "jsonrpc": "2.0",
                    "id": 7,
                    "method": "tools/call",
                    "params": {"name": "progress_burst", "arguments": arguments, "_meta": {"progressToken": "p"}},
                }
            async with await connect(port, small_receive_buffer=True) as reader_gone:
                await reader_gone.send(post_bytes(port, body, headers))

                async def cancelled_ids() -> list[Any]:
                    answer = await http.post(
                        url, headers=modern_headers("tools/call", "cancelled_ids"), json=modern_call(2, "cancelled_ids")
                    )
                    ids: list[Any] = answer.json()["result"]["structuredContent"]["ids"]
                    return ids

                with anyio.fail_after(20):
                    # The request's access line comes once its exchange is closed, which queued the
                    # child's notifications/cancelled ahead of any later request on that child.
                    await access.wait_for_text("outcome=cancelled")
                    assert await cancelled_ids()
                received = await read_all(reader_gone)
    assert len(received) < 4000 * 2000  # cut off mid-stream


# -- issue #14: a progress burst arrives whole ----------------------------------------------


@pytest.mark.parametrize("child_era", ["modern", "legacy", "dual"])
async def test_a_burst_of_2000_progress_notifications_reaches_a_prompt_client_whole_in_both_eras(
    child_era: str,
) -> None:
    burst = 2000
    with anyio.fail_after(60):
        async with (
            running_gateway(server_spec("--era", child_era)) as url,
            httpx.AsyncClient(timeout=30) as http,
        ):
            modern = await http.post(
                url,
                headers=modern_headers("tools/call", "progress_burst"),
                json=modern_call(1, "progress_burst", {"count": burst, "tag": "t"}, progressToken="tok"),
            )
            opened = await http.post(url, headers=BASE_HEADERS, json=legacy_initialize())
            session = {
                **BASE_HEADERS,
                "mcp-session-id": opened.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-11-25",
            }
            await http.post(url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            legacy = await http.post(
                url,
                headers=session,
                json={
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {
                        "name": "progress_burst",
                        "arguments": {"count": burst, "tag": "t"},
                        "_meta": {"progressToken": "tok"},
                    },
                },
            )
    for response, request_id in ((modern, 1), (legacy, 2)):
        messages = parse_sse(response.text)
        progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
        assert progress == list(range(1, burst + 1))
        assert messages[-1]["id"] == request_id
        assert messages[-1]["result"]["content"] == [{"type": "text", "text": "t"}]
