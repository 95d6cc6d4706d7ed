"""In-memory pipes for fake children: byte streams over anyio memory object streams, and a
state that changes with a way to wait on it (no polling)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

WAIT: Final = 10.0
"""Bound of every wait in the fake's helpers (a test that fails, fails in seconds)."""


class Changes:
    """A state that changes, and a way to wait until a predicate over it holds (no polling:
    the predicate is checked again at each change)."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def changed(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    async def until(self, predicate: Callable[[], bool], timeout: float = WAIT) -> None:
        with anyio.fail_after(timeout):
            while not predicate():
                await self._event.wait()


class ByteSend(ByteSendStream):
    def __init__(self, stream: MemoryObjectSendStream[bytes]) -> None:
        self._stream = stream

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def aclose(self) -> None:
        self._stream.close()


class ByteReceive(ByteReceiveStream):
    def __init__(self, stream: MemoryObjectReceiveStream[bytes]) -> None:
        self._stream = stream
        self._rest = b""
        self.fault: Exception | None = None  # raised by the next receive (a fault injected by a test)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._rest:
            self._rest = await self._stream.receive()  # EndOfStream once the writer closed
        if self.fault is not None:
            raise self.fault
        chunk, self._rest = self._rest[:max_bytes], self._rest[max_bytes:]
        return chunk

    async def aclose(self) -> None:
        self._stream.close()


def pipe() -> tuple[MemoryObjectSendStream[bytes], MemoryObjectReceiveStream[bytes]]:
    return anyio.create_memory_object_stream[bytes](math.inf)
