"""The floor: a Python client driving the echo server directly over one pipe.

``PipeClient`` spawns the server, multiplexes requests by id over its stdin (asyncio,
orjson), routes each reply line to the waiting caller and each notification to a callback
with its arrival time. Whatever the gateway adds on top of this is the gateway's cost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson

from bench.httpclient import MODERN

PIPE_LIMIT = 256 * 1024 * 1024
"""Longest line the floor reads (the 50 MB reply must fit)."""
DISCOVER = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "server/discover",
    "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}},
}

Notification = Callable[[int, dict[str, Any]], None]


class PipeClient:
    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.proc: asyncio.subprocess.Process | None = None
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.on_notification: Notification | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> PipeClient:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            limit=PIPE_LIMIT,
        )
        self._reader = asyncio.create_task(self._read())
        await self.call_raw(0, orjson.dumps(DISCOVER))
        return self

    async def _read(self) -> None:
        assert self.proc is not None
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            message = orjson.loads(line)
            request_id = message.get("id")
            if "method" not in message and request_id in self.pending:
                self.pending.pop(request_id).set_result(message)
            elif self.on_notification is not None and "method" in message:
                self.on_notification(time.monotonic_ns(), message)
        for future in self.pending.values():
            future.set_exception(ConnectionError("the server closed its stdout"))

    async def call_raw(self, request_id: int, line: bytes) -> dict[str, Any]:
        """Send ``line`` (one JSON-RPC request whose id is ``request_id``) and await its reply."""
        assert self.proc is not None
        assert self.proc.stdin is not None
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        self.proc.stdin.write(line + b"\n")
        await self.proc.stdin.drain()
        return await future

    async def close(self) -> None:
        if self.proc is None:
            return
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 5)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        if self._reader is not None:
            await self._reader

    async def __aenter__(self) -> PipeClient:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
