"""The bare bridges: the least work a correct gateway does per call (two yardsticks).

``--kind asgi`` (the default): a bare ASGI callable on uvicorn (httptools, uvloop, no
framework, no access log); ``--kind protocol``: a bare asyncio protocol on uvloop, no HTTP
server library at all (keep-alive, ``Content-Length`` bodies, the head read as
``bench.noop``'s raw ceiling reads it), no task per request: the request's line is written to
the child from the socket's read callback and the answer to the socket from the pipe's. Each
is in front of one shared echo child over two pipes, read by the event loop as the gateway
reads its children. Each request's id is rewritten to one of the bridge's own before its line goes to
the child and restored on the reply, so concurrent clients that number their calls alike
each get their own answer: the one thing a shared child needs to be correct. Nothing else
is done: no header checks, no sessions (a legacy ``initialize`` is answered here with a
fixed session id), no pool, no cancellation, no bounds, no logs, no metrics.

Neither is a peer or ever a best peer: the tables show them to say how much of the gateway's
time per call is the HTTP hop plus the pipe, which no gateway on uvicorn avoids (``asgi``), how
much of that is uvicorn's ASGI path rather than the socket (``protocol``: what a server of the
gateway's own on the event loop could reach at best), and how much is the gateway's own work.

``--kind task`` is the protocol bridge with an asyncio task per request that awaits its answer
(what a task per request costs, ``python -m bench.layers``).

    python -m bench.bridge [--kind asgi|protocol|task] --port PORT -- CHILD ARGV...
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
from typing import Any

import orjson

from bench.noop import INIT_RESULT, SESSION, content_length, read_body

READY = (200, [], b"ready\n")
MAX_LINE = 64 * 1024 * 1024
"""Longest reply line the bridge buffers (the bench's largest reply fits)."""


class Child(asyncio.Protocol):
    """One echo child: a request line out, its reply matched back by the bridge's id."""

    def __init__(self) -> None:
        self.buffer = b""
        self.waiting: dict[int, asyncio.Future[dict[str, Any]] | tuple[Connection, Any]] = {}
        self.next_id = 0
        self.stdin: Any = None  # uvloop's pipe transports are not asyncio.WriteTransport subclasses

    async def attach(self, pipes: tuple[int, int]) -> None:
        """Read replies from ``pipes[0]`` in the event loop; write requests to ``pipes[1]``."""
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: self, os.fdopen(pipes[0], "rb", buffering=0))
        self.stdin, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, os.fdopen(pipes[1], "wb", buffering=0))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > MAX_LINE:
            raise RuntimeError("the child's reply line is over the bridge's bound")
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            reply = orjson.loads(line)
            waiter = self.waiting.pop(reply.get("id"), None)
            if isinstance(waiter, tuple):  # a protocol connection's: answered from here
                connection, theirs = waiter
                reply["id"] = theirs
                connection.respond(200, b"", orjson.dumps(reply))
            elif waiter is not None and not waiter.done():
                waiter.set_result(reply)

    async def call(self, message: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        own = self.next_id
        theirs = message["id"]
        message["id"] = own
        future = asyncio.get_running_loop().create_future()
        self.waiting[own] = future
        self.stdin.write(orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE))
        try:
            reply = await future
        finally:
            self.waiting.pop(own, None)
        reply["id"] = theirs
        return reply

    def send(self, connection: Connection, message: dict[str, Any]) -> None:
        """``message`` to the child, its answer to go to ``connection`` (no task, no future)."""
        self.next_id += 1
        self.waiting[self.next_id] = (connection, message["id"])
        message["id"] = self.next_id
        self.stdin.write(orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE))


CHILD = Child()


class Connection(asyncio.Protocol):
    """``--kind protocol``: one keep-alive HTTP/1.1 connection, answered from callbacks
    (``--kind task``: each call in an asyncio task of its own that awaits its answer)."""

    def __init__(self, tasks: bool = False) -> None:
        self.buffer = b""
        self.tasks = tasks
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport subclasses

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def respond(self, status: int, extra: bytes, payload: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n%s"
                % (status, b"OK" if status == 200 else b"Accepted", extra, len(payload), payload)
            )

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].lower()
            length = content_length(head)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            if not head.startswith(b"post"):  # GET /readyz, a legacy DELETE
                self.respond(200, b"", b"ready\n")
                continue
            request = orjson.loads(body)
            if "id" not in request:
                self.respond(202, b"", b"")
            elif request.get("method") == "initialize":
                self.respond(200, b"mcp-session-id: " + SESSION + b"\r\n", INIT_RESULT)
            elif self.tasks:  # ``--kind task``: the same, with a task per request awaiting a future
                asyncio.get_running_loop().create_task(self._answer(request))
            else:
                CHILD.send(self, request)

    async def _answer(self, request: dict[str, Any]) -> None:
        self.respond(200, b"", orjson.dumps(await CHILD.call(request)))


def start_child(argv: list[str]) -> tuple[int, int]:
    """The child, started (no shell): the pipe its replies come on and the one it reads."""
    to_child, from_us = os.pipe()
    to_us, from_child = os.pipe()
    subprocess.Popen(argv, stdin=to_child, stdout=from_child)
    os.close(to_child)
    os.close(from_child)
    return to_us, from_us


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = await read_body(receive)
    headers: list[tuple[bytes, bytes]] = []
    if scope["method"] == "GET":
        status, headers, payload = READY
    else:
        request = orjson.loads(body)
        if "id" not in request:
            status, payload = 202, b""
        elif request.get("method") == "initialize":
            status, payload = 200, INIT_RESULT
            headers = [(b"mcp-session-id", SESSION)]
        else:
            status, payload = 200, orjson.dumps(await CHILD.call(request))
    headers = [*headers, (b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def serve(port: int, pipes: tuple[int, int], kind: str) -> None:
    await CHILD.attach(pipes)
    if kind in ("protocol", "task"):
        tasks = kind == "task"
        server = await asyncio.get_running_loop().create_server(
            lambda: Connection(tasks), "127.0.0.1", port, backlog=2048
        )
        async with server:
            await server.serve_forever()
        return
    import uvicorn

    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off")
    await uvicorn.Server(config).serve()


def main() -> None:
    parser = argparse.ArgumentParser(description="a bare bridge to one stdio child (a yardstick)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--kind", choices=["asgi", "protocol", "task"], default="asgi")
    parser.add_argument("child", nargs=argparse.REMAINDER, help="-- then the child's argv")
    args = parser.parse_args()
    argv = args.child[1:] if args.child[:1] == ["--"] else args.child
    if not argv:
        parser.error("the child's argv is required (after --)")
    pipes = start_child(argv)
    try:
        import uvloop

        uvloop.run(serve(args.port, pipes, args.kind))
    except ImportError:
        asyncio.run(serve(args.port, pipes, args.kind))


if __name__ == "__main__":
    main()
