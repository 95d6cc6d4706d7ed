"""``PipeWriter`` over a real pipe: ``write_now`` (no coroutine) agrees with ``send``."""

from __future__ import annotations

import asyncio
import os

import anyio
import pytest

from gateway.stdio.backend import PipeWriter

pytestmark = pytest.mark.anyio


async def pipe_writer() -> tuple[PipeWriter, int, asyncio.WriteTransport]:
    """A ``PipeWriter`` on the write end of an OS pipe, the read end, and the transport."""
    read_fd, write_fd = os.pipe()
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), os.fdopen(write_fd, "wb", buffering=0)
    )
    return PipeWriter(asyncio.StreamWriter(transport, protocol, None, loop)), read_fd, transport


async def test_write_now_writes_a_line_as_send_does() -> None:
    writer, read_fd, _ = await pipe_writer()
    try:
        assert writer.write_now(b"first\n")
        await writer.send(b"second\n")
        assert os.read(read_fd, 100) == b"first\nsecond\n"
    finally:
        await writer.aclose()
        os.close(read_fd)


async def test_write_now_leaves_to_send_a_line_over_the_high_water_mark() -> None:
    writer, read_fd, transport = await pipe_writer()
    try:
        too_big = b"x" * (transport.get_write_buffer_limits()[1] + 1)
        assert not writer.write_now(too_big)
        assert transport.get_write_buffer_size() == 0  # nothing written
    finally:
        await writer.aclose()
        os.close(read_fd)


async def test_write_now_to_a_pipe_nobody_reads_raises_as_send_does() -> None:
    for way in ("write_now", "send"):
        writer, read_fd, _ = await pipe_writer()
        os.close(read_fd)  # the child closed its stdin
        with pytest.raises(anyio.BrokenResourceError):
            if way == "write_now":
                writer.write_now(b"line\n")
            else:
                await writer.send(b"line\n")
        await writer.aclose()
