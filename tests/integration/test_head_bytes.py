"""The connection's bound on each request head (``gateway.http.limits.HEAD_BYTES``), on a real
socket: never under the head as sent, however the head is split across reads or shares one with
the request before it; and the header checks it lets the edge skip still refuse what they must.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import orjson
import pytest

from gateway.http.limits import HEAD_BYTES, MAX_MCP_HEADER_BYTES
from tests.conftest import server_spec
from tests.gateway_server import ENGINE_VARIABLE, running_gateway, serving

pytestmark = pytest.mark.anyio


def head(number: int, pad: int) -> bytes:
    return b"GET /r%d HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: %s\r\n\r\n" % (number, b"p" * pad)


async def read_until(stream: anyio.abc.SocketStream, count: int) -> bytes:
    data = b""
    while data.count(b"HTTP/1.1 200") < count or not data.endswith(b"done"):
        data += await stream.receive()
    return data


@pytest.mark.skipif(os.environ.get(ENGINE_VARIABLE) == "granian", reason="GuardedHttpTools is uvicorn's")
async def test_the_bound_on_a_head_is_never_under_it_however_it_is_read() -> None:
    bounds: dict[str, int | None] = {}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        bounds[scope["path"]] = scope.get(HEAD_BYTES)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
        await send({"type": "http.response.body", "body": b"done"})

    heads = [head(n, pad) for n, pad in enumerate((0, 10, 3000, 9000, 20, 0, 5000))]
    with anyio.fail_after(20):
        async with serving(app) as url:
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(heads[0])  # alone
                await read_until(stream, 1)
                await stream.send(heads[1] + heads[2])  # the second begins in the first's read
                await read_until(stream, 2)
                for piece in range(0, len(heads[3]), 700):  # in pieces (the reads may join them)
                    await stream.send(heads[3][piece : piece + 700])
                await read_until(stream, 1)
                await stream.send(heads[4] + heads[5] + heads[6][:100])  # the last ends in a later read
                await stream.send(heads[6][100:])
                await read_until(stream, 3)
    assert len(bounds) == len(heads)
    for number, sent in enumerate(heads):
        bound = bounds[f"/r{number}"]
        assert bound is not None
        assert bound >= len(sent), (number, bound, len(sent))


async def test_an_mcp_header_over_its_limit_is_still_refused_with_431() -> None:
    request = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nMcp-Name: %s\r\nContent-Length: 0\r\n\r\n"
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url:
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            for size, status in ((MAX_MCP_HEADER_BYTES + 1, b"431"), (MAX_MCP_HEADER_BYTES - 200, b"4")):
                async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                    await stream.send(request % (b"n" * size))
                    data = b""
                    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
                        data += await stream.receive()
                assert data.startswith(b"HTTP/1.1 " + status), data[:200]
                message = orjson.loads(data.partition(b"\r\n\r\n")[2])["error"]["message"]
                over = f"header mcp-name is {size} bytes; at most {MAX_MCP_HEADER_BYTES}"
                assert (message == over) is (size > MAX_MCP_HEADER_BYTES), message
