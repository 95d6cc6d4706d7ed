"""No-op HTTP servers that answer the benchmark's requests in the gateway's JSON shapes.

They measure the load generator's ceiling on this machine (``raw``: a bare asyncio protocol
on uvloop, parsing only what it must) and what any uvicorn-based server can do here at best
(``uvicorn``: a bare ASGI callable, no framework, orjson). Neither talks to a child.

    python -m bench.noop --kind raw|uvicorn --port PORT

Both answer ``GET /readyz``; a POST gets the echo reply for its id, echoing its message
(``initialize`` gets a session id, a notification gets 202).
"""

from __future__ import annotations

import argparse
import asyncio
import re
from typing import Any

import orjson

ID = re.compile(rb'"id":(\d+|"[^"]*")')
MESSAGE = re.compile(rb'"message":("[^"]*")')
RESULT_HEAD = b',"result":{"content":[{"type":"text","text":'
RESULT_TAIL = (
    b'}],"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"bench-echo","version":"1"}}}}'
)
INIT_RESULT = b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}}'
SESSION = b"00000000000000000000000000000000"


def answer(body: bytes) -> tuple[int, bytes, bytes]:
    """(status, extra header lines, body) for one POSTed JSON-RPC message."""
    if b'"method":"initialize"' in body:
        return 200, b"mcp-session-id: " + SESSION + b"\r\n", INIT_RESULT
    match = ID.search(body)
    if match is None:
        return 202, b"", b""
    message = MESSAGE.search(body, match.end())  # echoed, so the load's answer check passes
    text = message.group(1) if message is not None else b'""'
    return 200, b"", b'{"jsonrpc":"2.0","id":' + match.group(1) + RESULT_HEAD + text + RESULT_TAIL


def content_length(head: bytes) -> int:
    at = head.find(b"content-length:")
    if at < 0:
        return 0
    end = head.find(b"\r\n", at)
    return int(head[at + 15 : end if end >= 0 else len(head)])


class RawProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive, Content-Length bodies only: the least work a server can do."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport subclasses

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        out = []
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = self.buffer[:end].lower()
            length = content_length(head)
            if len(self.buffer) < end + 4 + length:
                break
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            if head.startswith(b"get"):
                status, extra, payload = 200, b"", b"ready\n"
            else:
                status, extra, payload = answer(body)
            reason = b"OK" if status == 200 else b"Accepted"
            out.append(
                b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n%s"
                % (status, reason, extra, len(payload), payload)
            )
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


async def serve_raw(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(RawProtocol, "127.0.0.1", port, backlog=2048)
    async with server:
        await server.serve_forever()


async def read_body(receive: Any) -> bytes:
    """An ASGI request's whole body."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = await read_body(receive)
    if scope["method"] == "GET":
        status, headers, payload = 200, [], b"ready\n"
    else:
        status, extra, payload = answer(body)
        headers = [(b"mcp-session-id", SESSION)] if extra else []
        if payload:
            payload = orjson.dumps(orjson.loads(payload))  # the parse and dump a real server pays
    headers += [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def main() -> None:
    parser = argparse.ArgumentParser(description="a no-op HTTP server for calibration")
    parser.add_argument("--kind", choices=["raw", "uvicorn"], required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    if args.kind == "uvicorn":
        import uvicorn

        uvicorn.run(asgi_app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
        return
    try:
        import uvloop

        uvloop.run(serve_raw(args.port))
    except ImportError:
        asyncio.run(serve_raw(args.port))


if __name__ == "__main__":
    main()
