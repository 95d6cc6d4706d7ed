"""The bare bridge: the least work a correct uvicorn-based gateway does per call (a yardstick).

A bare ASGI callable on uvicorn (httptools, uvloop, no framework, no access log) in front of
one shared echo child over two pipes, read by the event loop as the gateway reads its
children. Each request's id is rewritten to one of the bridge's own before its line goes to
the child and restored on the reply, so concurrent clients that number their calls alike
each get their own answer: the one thing a shared child needs to be correct. Nothing else
is done: no header checks, no sessions (a legacy ``initialize`` is answered here with a
fixed session id), no pool, no cancellation, no bounds, no logs, no metrics.

It is not a peer and never a best peer: the tables show it to say how much of the gateway's
time per call is the HTTP hop plus the pipe, which no gateway on uvicorn avoids, and how much
is the gateway's own work.

    python -m bench.bridge --port PORT -- CHILD ARGV...
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
from typing import Any

import orjson

from bench.noop import INIT_RESULT, SESSION, read_body

READY = (200, [], b"ready\n")
MAX_LINE = 64 * 1024 * 1024
"""Longest reply line the bridge buffers (the bench's largest reply fits)."""


class Child(asyncio.Protocol):
    """One echo child: a request line out, its reply matched back by the bridge's id."""

    def __init__(self) -> None:
        self.buffer = b""
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
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
            future = self.waiting.pop(reply.get("id"), None)
            if future is not None and not future.done():
                future.set_result(reply)

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


CHILD = Child()


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


async def serve(port: int, pipes: tuple[int, int]) -> None:
    import uvicorn

    await CHILD.attach(pipes)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off")
    await uvicorn.Server(config).serve()


def main() -> None:
    parser = argparse.ArgumentParser(description="the bare uvicorn bridge to one stdio child (a yardstick)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("child", nargs=argparse.REMAINDER, help="-- then the child's argv")
    args = parser.parse_args()
    argv = args.child[1:] if args.child[:1] == ["--"] else args.child
    if not argv:
        parser.error("the child's argv is required (after --)")
    pipes = start_child(argv)
    try:
        import uvloop

        uvloop.run(serve(args.port, pipes))
    except ImportError:
        asyncio.run(serve(args.port, pipes))


if __name__ == "__main__":
    main()
