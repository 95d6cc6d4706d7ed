"""The gateway's app on a lean HTTP/1.1 server of ~100 lines: a yardstick, not a product.

    python -m bench.lean --port PORT -- CHILD ARGV...

It serves ``gateway.server.build_app`` (the app ``python -m gateway`` serves, its lifespan
run here) with httptools' parser on uvloop: keep-alive, ``Content-Length`` or chunked
responses, one asyncio task per request, a response's head and body in one write, and the
connection's ``Hangup`` in the scope as ``GuardedHttpTools`` puts it there (so an answer
starts no task to watch for the client's hang-up). None of uvicorn's per-request work, and
none of the gateway's edge limits on the socket either (no head or body bounds, no timeouts,
no TLS, no drain): never serve anything with it. ``python -m bench.layers`` runs it beside
uvicorn to say how much of a call is uvicorn's and how much the gateway's own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

import httptools

from gateway.cli import parse_settings
from gateway.http.connection import BODY_RECEIVED, HANGUP, Hangup
from gateway.http.limits import HEAD_BYTES
from gateway.server import build_app, settle_heap

REASONS = {200: b"OK", 202: b"Accepted", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed"}


class Connection(asyncio.Protocol):
    """One keep-alive connection: each whole request becomes a task running the app."""

    def __init__(self, app: Any, state: dict[str, Any]) -> None:
        self.app, self.state = app, state
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport subclasses
        self.hangup = Hangup()
        self.gone = asyncio.get_running_loop().create_future()
        self.url, self.body, self.read = b"", b"", 0
        self.headers: list[tuple[bytes, bytes]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.client = transport.get_extra_info("peername")[:2]
        self.server = transport.get_extra_info("sockname")[:2]

    def connection_lost(self, exc: Exception | None) -> None:
        self.hangup.lost()
        if not self.gone.done():
            self.gone.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.read = len(data)
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.url, self.body, self.headers = b"", b"", []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        path, _, query = self.url.partition(b"?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": "http",
            "method": self.parser.get_method().decode(),
            "root_path": "",
            "path": path.decode(),
            "raw_path": path,
            "query_string": query,
            "headers": self.headers,
            "state": self.state.copy(),
            HANGUP: self.hangup,
            HEAD_BYTES: self.read,  # at least the head's bytes (the read it came in)
            BODY_RECEIVED: True,
        }
        asyncio.get_running_loop().create_task(self.run(scope, self.body))

    async def run(self, scope: dict[str, Any], body: bytes) -> None:
        unread = [True]
        head: list[bytes] = []
        chunked = [False]

        async def receive() -> dict[str, Any]:
            if unread[0]:
                unread[0] = False
                return {"type": "http.request", "body": body, "more_body": False}
            await self.gone
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                lines = [b"HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, b"Status"))]
                sized = False
                for name, value in message.get("headers", []):
                    sized = sized or name.lower() == b"content-length"
                    lines.append(name + b": " + value + b"\r\n")
                if not sized:
                    lines.append(b"transfer-encoding: chunked\r\n")
                    chunked[0] = True
                head.append(b"".join([*lines, b"\r\n"]))
            elif message["type"] == "http.response.body":
                data, more = message.get("body", b""), message.get("more_body", False)
                if chunked[0]:
                    data = (b"%x\r\n%s\r\n" % (len(data), data) if data else b"") + (b"" if more else b"0\r\n\r\n")
                if head:
                    data = head.pop() + data
                if data and self.transport is not None and not self.transport.is_closing():
                    self.transport.write(data)

        await self.app(scope, receive, send)


async def serve(port: int, child: list[str]) -> None:
    settings = parse_settings(["--port", str(port), "--", *child], environ=dict(os.environ))
    app = build_app(settings)
    loop = asyncio.get_running_loop()
    started: asyncio.Future[None] = loop.create_future()
    state: dict[str, Any] = {}
    sent_startup = [False]

    async def receive() -> dict[str, Any]:
        if not sent_startup[0]:
            sent_startup[0] = True
            return {"type": "lifespan.startup"}
        await asyncio.Event().wait()  # runs until the process is stopped
        return {"type": "lifespan.shutdown"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set_result(None)
        elif message["type"] == "lifespan.startup.failed":
            started.set_exception(RuntimeError(message.get("message", "start-up failed")))

    lifespan = loop.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": state}, receive, send))
    await started
    settle_heap()
    server = await loop.create_server(lambda: Connection(app, state), "127.0.0.1", port, backlog=2048)
    async with server:
        await server.serve_forever()
    lifespan.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description="the gateway's app on a lean HTTP server (a yardstick)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("child", nargs=argparse.REMAINDER, help="-- then the child's argv")
    args = parser.parse_args()
    child = args.child[1:] if args.child[:1] == ["--"] else args.child
    if not child:
        parser.error("the child's argv is required (after --)")
    import uvloop

    uvloop.run(serve(args.port, child))


if __name__ == "__main__":
    main()
