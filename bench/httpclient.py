"""A minimal asyncio HTTP/1.1 client: one keep-alive connection, requests as prebuilt bytes.

The load generator must not be the bottleneck, so this does only what the benchmark needs:
write a request, read the status line and headers, then the body by ``Content-Length`` or
chunked transfer encoding (the gateway streams both JSON and SSE answers chunked). SSE
bodies can be read event by event as chunks arrive (``events``), with the arrival time
of each, for the streaming and latency runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson

HEADER_END = b"\r\n\r\n"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
MODERN_META = (
    b'"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
)


class HttpError(Exception):
    """The server closed the connection or sent something this client cannot read."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> object:
        return orjson.loads(self.body)


def request_bytes(host: str, port: int, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"host: {host}:{port}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split(" ", 2)[1])
    except (IndexError, ValueError) as exc:
        raise HttpError(f"bad status line {lines[0]!r}") from exc
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return status, headers


class Connection:
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, raw: bytes) -> Response:
        """Send one request and read its whole answer."""
        await self.send(raw)
        status, headers = await self.read_head()
        body = await self.read_body(headers)
        if headers.get("connection", "").lower() == "close":
            self.close()
        return Response(status, headers, body)

    async def send(self, raw: bytes) -> None:
        if self.writer is None:
            await self.open()
        assert self.writer is not None
        self.writer.write(raw)

    async def read_head(self) -> tuple[int, dict[str, str]]:
        assert self.reader is not None
        try:
            head = await self.reader.readuntil(HEADER_END)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as exc:
            self.close()
            raise HttpError(f"connection lost before the answer: {exc!r}") from exc
        return parse_head(head[:-4])

    async def read_body(self, headers: dict[str, str]) -> bytes:
        if "content-length" in headers:
            return await self._exactly(int(headers["content-length"]))
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return b"".join([chunk async for chunk in self.chunks()])
        return b""  # 202 and other bodiless answers (the load never asks for close-delimited ones)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The chunks of a chunked body as they arrive."""
        assert self.reader is not None
        while True:
            try:
                size_line = await self.reader.readline()
                size = int(size_line.split(b";", 1)[0], 16)
            except (ValueError, ConnectionError) as exc:
                self.close()
                raise HttpError(f"bad chunk size line: {exc!r}") from exc
            if size == 0:
                await self.reader.readline()  # the empty trailer line
                return
            data = await self._exactly(size + 2)
            yield data[:-2]

    async def events(self, headers: dict[str, str]) -> AsyncIterator[tuple[int, object]]:
        """The JSON messages of an SSE body, each with its arrival time (``time.monotonic_ns``)."""
        if not headers.get("content-type", "").startswith("text/event-stream"):
            body = await self.read_body(headers)
            yield time.monotonic_ns(), orjson.loads(body)
            return
        pending = b""
        async for chunk in self.chunks():
            now = time.monotonic_ns()
            pending += chunk
            *blocks, pending = pending.replace(b"\r\n", b"\n").split(b"\n\n")
            for block in blocks:
                data = [line[5:].lstrip() for line in block.split(b"\n") if line.startswith(b"data:")]
                if data:
                    yield now, orjson.loads(b"\n".join(data))

    async def _exactly(self, size: int) -> bytes:
        assert self.reader is not None
        try:
            return await self.reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            self.close()
            raise HttpError(f"connection lost in the body: {exc!r}") from exc


# -- MCP shapes ---------------------------------------------------------------------------


def modern_headers(method: str = "tools/call", name: str | None = "echo") -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
    }
    if name is not None:
        headers["mcp-name"] = name
    return headers


def legacy_headers(session_id: str | None, *, initialized: bool = False) -> dict[str, str]:
    """The headers of a legacy request: before initialize answered (``session_id`` None),
    or after it (with the session's id, or ``initialized`` on a server without sessions)."""
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if session_id is not None:
        headers["mcp-session-id"] = session_id
    if session_id is not None or initialized:
        headers["mcp-protocol-version"] = LEGACY
    return headers


def call_body(request_id: int, tool: str, arguments: dict[str, object], *, modern: bool, **meta: object) -> bytes:
    params: dict[str, object] = {"name": tool, "arguments": arguments}
    if modern:
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            **meta,
        }
    if meta:
        params["_meta"] = meta
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})


INITIALIZE = orjson.dumps(
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
    }
)
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


async def open_session(conn: Connection, path: str, extra: dict[str, str] | None = None) -> str | None:
    """A legacy session on ``conn``: initialize, then notifications/initialized (``extra``:
    headers sent with both, e.g. ``authorization``). Its id, or None from a server that
    assigns none (the 2025-11-25 transport lets a server go without sessions)."""
    headers = {**legacy_headers(None), **(extra or {})}
    answer = await conn.request(request_bytes(conn.host, conn.port, path, headers, INITIALIZE))
    session_id = answer.headers.get("mcp-session-id")
    if answer.status != 200 or b'"result"' not in answer.body:
        raise HttpError(f"initialize answered {answer.status}: {answer.body[:200]!r}")
    headers = {**legacy_headers(session_id, initialized=True), **(extra or {})}
    done = await conn.request(request_bytes(conn.host, conn.port, path, headers, INITIALIZED))
    if done.status not in (200, 202):
        raise HttpError(f"notifications/initialized answered {done.status}: {done.body[:200]!r}")
    return session_id
