"""Every connection limit of the plain server holds over TLS and mutual TLS too (issue #24 items 3, 7).

Each limit is tested over the three transports the gateway serves: plain TCP, TLS, and TLS with
client certificates (mTLS, whose protocol class records each connection's certificate subject):

- a request head that never ends gets 408 at the head timeout;
- a head over ``MAX_HEAD_BYTES`` gets 431;
- a body that never ends gets 408 at the body timeout;
- a large reply to a client that reads nothing is aborted after the write timeout;
- and, over TLS, a handshake that never ends is closed at the head timeout (asyncio's own
  default is 60 s), as is a handshake that ends with no request head after it.

No error may be logged meanwhile (a limit that raises instead of acting logs a traceback and
leaves the connection open). Each test runs on asyncio's own event loop and on uvloop (the one
the gateway serves with: its transports are not asyncio's classes). Raw sockets play the peers;
every wait is bounded by ``fail_after``.
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import orjson
import pytest
from anyio.abc import ByteStream, SocketAttribute
from anyio.streams.tls import TLSStream

from gateway.http import replies
from gateway.http.connection import MAX_HEAD_BYTES, GuardedHttpTools
from gateway.http.tls import PeerSubjects, TlsFiles, uvicorn_options
from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from tests.conftest import server_spec
from tests.gateway_server import app_for, modern_call, modern_headers, serving
from tests.integration.test_connection_cap import WatchedConnections
from tests.integration.test_tls import Authority, write_pair
from tests.logrecords import Records, recording

pytestmark = pytest.mark.anyio

TRANSPORTS = ("plain", "tls", "mtls")
HEAD_TIMEOUT, WRITE_TIMEOUT, BODY_TIMEOUT = 1.5, 1.0, 1.0
"""The limits tested: the head timeout leaves a busy machine room for a TLS handshake."""
SHORT = GuardedHttpTools.configured(header_timeout=HEAD_TIMEOUT, write_timeout=WRITE_TIMEOUT)
PATIENT_HEAD = GuardedHttpTools.configured(header_timeout=10.0, write_timeout=WRITE_TIMEOUT)
"""For the tests of other limits: a busy machine may take longer than ``HEAD_TIMEOUT`` for a
handshake and a head, which would end those tests with a 408 of the head timeout instead."""
WAIT = 20.0
"""Every test's bound: far under asyncio's 60 s handshake default, far over the limits tested."""


@pytest.fixture(params=[pytest.param({}, id="asyncio"), pytest.param({"use_uvloop": True}, id="uvloop")])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, bool]]:
    return "asyncio", request.param


@dataclass
class Served:
    port: int
    client_context: ssl.SSLContext | None  # None: plain TCP
    records: Records

    async def connect(self, *, small_receive_buffer: bool = False) -> ByteStream:
        stream = await anyio.connect_tcp("127.0.0.1", self.port)
        if small_receive_buffer:  # a peer that reads nothing fills up after a few KiB, not megabytes
            stream.extra(SocketAttribute.raw_socket).setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        if self.client_context is None:
            return stream
        return await TLSStream.wrap(
            stream, hostname="127.0.0.1", ssl_context=self.client_context, standard_compatible=False
        )


def certificates(tmp_path: Path, transport: str) -> tuple[TlsFiles | None, PeerSubjects | None, ssl.SSLContext | None]:
    """The server's TLS files and subjects, and the client's context, for ``transport``."""
    if transport == "plain":
        return None, None, None
    server_ca, client_ca = Authority("server CA"), Authority("client CA")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    write_pair(*server_ca.issue("gateway", server=True), cert, key)
    context = server_ca.client_context()
    if transport == "tls":
        return TlsFiles(str(cert), str(key)), None, context
    client_cert, client_key = tmp_path / "alice.crt", tmp_path / "alice.key"
    write_pair(*client_ca.issue("alice", server=False), client_cert, client_key)
    context.load_cert_chain(client_cert, client_key)
    tls = TlsFiles(str(cert), str(key), str(client_ca.write(tmp_path / "client-ca.crt")))
    return tls, PeerSubjects(), context


@asynccontextmanager
async def gateway(tmp_path: Path, transport: str, http: type[GuardedHttpTools] = SHORT) -> AsyncIterator[Served]:
    """The test child behind the gateway over ``transport``, with short head, body and write
    limits, composed as ``server.serve`` composes it (``tls.uvicorn_options``)."""
    tls, peers, context = certificates(tmp_path, transport)
    app = app_for(Router(ServerConfig("test", server_spec())), body_timeout=BODY_TIMEOUT, tls_peers=peers)
    # The gateway's loggers, and asyncio's and uvicorn's, where a failing callback is reported.
    with recording("gateway", "asyncio", "uvicorn.error") as records:
        async with serving(app, **uvicorn_options(tls, peers, http)) as base:
            port = int(base.rsplit(":", 1)[1])
            yield Served(port, context, records)
    assert records.errors() == []


async def read_all(stream: ByteStream) -> bytes:
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


def refusal(reply: bytes, status: int) -> str:
    """The JSON-RPC error message of a refusal with ``status`` that closes the connection."""
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), reply[:200]
    assert b"connection: close" in head
    message: str = orjson.loads(body)["error"]["message"]
    return message


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_request_head_that_never_ends_gets_408_at_the_head_timeout(tmp_path: Path, transport: str) -> None:
    with anyio.fail_after(WAIT):
        async with gateway(tmp_path, transport) as served, await served.connect() as trickle:
            await trickle.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
            reply = await read_all(trickle)
    assert f"not received within {HEAD_TIMEOUT:g} s" in refusal(reply, 408)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_request_head_over_the_limit_gets_431(tmp_path: Path, transport: str) -> None:
    with anyio.fail_after(WAIT):
        async with gateway(tmp_path, transport, PATIENT_HEAD) as served, await served.connect() as stream:
            await stream.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES + 1))
            reply = await read_all(stream)
    assert f"request headers over {MAX_HEAD_BYTES} bytes" in refusal(reply, 431)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_request_body_that_never_ends_gets_408_at_the_body_timeout(tmp_path: Path, transport: str) -> None:
    with anyio.fail_after(WAIT):
        async with gateway(tmp_path, transport, PATIENT_HEAD) as served, await served.connect() as stream:
            request = post_bytes(
                served.port, modern_call(9, "echo", {"message": "x"}), modern_headers("tools/call", "echo")
            )
            await stream.send(request[:-5])  # the head and most of the body; the rest never comes
            reply = await read_all(stream)
    assert f"request body not received within {BODY_TIMEOUT:g} s" in refusal(reply, 408)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_large_reply_to_a_client_that_reads_nothing_is_aborted_after_the_write_timeout(
    tmp_path: Path, transport: str
) -> None:
    reply_bytes = 8_000_000  # far more than the kernel buffers of a connection take
    with anyio.fail_after(WAIT):
        async with gateway(tmp_path, transport, PATIENT_HEAD) as served:
            request = post_bytes(
                served.port, modern_call(1, "big", {"bytes": reply_bytes}), modern_headers("tools/call", "big")
            )
            async with await served.connect(small_receive_buffer=True) as stream:
                await stream.send(request)
                aborted = await served.records.wait_for(lambda r: "connection aborted" in r.getMessage())
                received = await read_all(stream)  # reset: what was in flight, then nothing more
    assert f"read nothing for {WRITE_TIMEOUT:g} s" in aborted.getMessage()
    if transport == "plain":
        assert received.startswith(b"HTTP/1.1 200 ")
    assert len(received) < reply_bytes
    assert replies.BUDGET.used == 0


@pytest.mark.parametrize("transport", ["tls", "mtls"])
async def test_a_tls_handshake_that_never_ends_is_closed_at_the_head_timeout(tmp_path: Path, transport: str) -> None:
    with anyio.fail_after(WAIT):  # asyncio's own handshake timeout is 60 s
        async with gateway(tmp_path, transport) as served:
            async with await anyio.connect_tcp("127.0.0.1", served.port) as silent:
                closed_silent = await read_all(silent)
            async with await anyio.connect_tcp("127.0.0.1", served.port) as stalled:
                await stalled.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a ClientHello's first bytes
                closed_stalled = await read_all(stalled)
            # The server is well: the next client gets its handshake and its answer.
            async with await served.connect() as stream:
                await stream.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                healthy = await read_all(stream)
    assert closed_silent == closed_stalled == b""
    assert healthy.startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("transport", ["tls", "mtls"])
async def test_a_tls_connection_that_sends_no_head_after_its_handshake_is_closed_at_the_head_timeout(
    tmp_path: Path, transport: str
) -> None:
    with anyio.fail_after(WAIT):
        async with gateway(tmp_path, transport) as served, await served.connect() as idle:
            closed = await read_all(idle)
    assert closed == b""


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_past_the_connection_cap_a_request_gets_503_after_its_handshake_and_a_probe_is_served(
    tmp_path: Path, transport: str
) -> None:
    """A handshake counts from the accept; past the cap it goes on, and the request after it is
    answered 503 (a probe is served from the reserve); every count is given back at the end."""
    connections = WatchedConnections(1)
    capped = GuardedHttpTools.configured(header_timeout=10.0, connections=connections)
    until = connections.until  # the server's side of a socket, seen

    with anyio.fail_after(WAIT):
        async with gateway(tmp_path, transport, capped) as served:
            async with await served.connect() as holder:
                await holder.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # a head not ended: held
                await until(lambda: connections.open == 1)
                async with await served.connect() as refused:
                    await refused.send(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    reply = await read_all(refused)
                async with await served.connect() as probe:
                    await probe.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nconnection: close\r\n\r\n")
                    probed = await read_all(probe)
            await until(lambda: (connections.open, connections.refusing, connections.probes) == (0, 0, 0))
    assert "the gateway holds 1 connections" in refusal(reply, 503)
    assert probed.startswith(b"HTTP/1.1 200 "), probed[:200]
    assert connections.refused == 1
