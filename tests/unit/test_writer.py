"""A child's stdin writer (``gateway.stdio.writer``): whole lines, in order, direct when idle, batched, bounded."""

from __future__ import annotations

import anyio
import pytest
from anyio.abc import ByteSendStream

from gateway.stdio.writer import BrokenPipe, LineWriter

pytestmark = pytest.mark.anyio


class Pipe(ByteSendStream):
    """A pipe whose reader takes one write per ``drain()``, or everything once ``open``."""

    def __init__(self, *, open_: bool = True) -> None:
        self.writes: list[bytes] = []
        self.open = open_
        self.broken = False
        self.arrived = anyio.Event()
        self._turn = anyio.Event()

    def drain(self) -> None:
        self._turn.set()

    async def send(self, item: bytes) -> None:
        if self.broken:
            raise anyio.BrokenResourceError
        self.writes.append(item)
        self.arrived.set()
        if not self.open:
            await self._turn.wait()
            self._turn = anyio.Event()

    async def aclose(self) -> None:
        self.broken = True


async def wait_for_writes(pipe: Pipe, count: int) -> None:
    while len(pipe.writes) < count:
        pipe.arrived = anyio.Event()
        await pipe.arrived.wait()


async def test_lines_go_out_whole_and_in_order_and_queued_ones_together() -> None:
    pipe = Pipe(open_=False)
    writer = LineWriter(pipe)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            writer.put(b"one\n")
            await wait_for_writes(pipe, 1)  # the writer is now stuck in its first write
            writer.put(b"two\n")
            writer.put(b"three\n")
            assert writer.queued == len(b"two\nthree\n")
            pipe.drain()
            await wait_for_writes(pipe, 2)
            pipe.drain()
            tg.cancel_scope.cancel()
    assert pipe.writes == [b"one\n", b"two\nthree\n"]
    assert writer.written == len(b"one\ntwo\nthree\n")


async def test_a_line_sent_to_an_idle_pipe_goes_out_at_once_and_later_ones_queue_behind_it() -> None:
    pipe = Pipe(open_=False)
    writer = LineWriter(pipe)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            tg.start_soon(writer.send, b"direct\n")  # the caller writes it, and waits in the pipe
            await wait_for_writes(pipe, 1)
            await writer.send(b"queued-1\n")  # returns at once: queued behind the write in progress
            writer.put(b"queued-2\n")
            assert pipe.writes == [b"direct\n"]
            pipe.drain()
            await wait_for_writes(pipe, 2)
            pipe.drain()
            tg.cancel_scope.cancel()
    assert pipe.writes == [b"direct\n", b"queued-1\nqueued-2\n"]


async def test_a_caller_waits_only_while_the_queue_is_over_the_high_water_mark() -> None:
    pipe = Pipe(open_=False)
    writer = LineWriter(pipe, high_water=10)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            writer.put(b"first\n")
            await wait_for_writes(pipe, 1)
            waited = anyio.Event()

            async def caller() -> None:
                await writer.send(b"0123456789\n")  # 11 bytes queued behind the stuck write: over the mark
                waited.set()

            tg.start_soon(caller)
            await anyio.wait_all_tasks_blocked()
            assert writer.is_full
            assert not waited.is_set()
            pipe.drain()  # the first write ends; the writer takes the queue for the next one
            await waited.wait()
            assert not writer.is_full
            pipe.drain()
            tg.cancel_scope.cancel()


async def test_a_broken_pipe_ends_the_writer_and_later_lines_are_refused() -> None:
    pipe = Pipe()
    pipe.broken = True
    writer = LineWriter(pipe, high_water=1)
    writer.put(b"lost\n")
    with anyio.fail_after(5):
        await writer.run()
        await writer.wait_for_room()  # returns at once: nobody waits on a broken pipe
    assert isinstance(writer.broken, anyio.BrokenResourceError)
    with pytest.raises(BrokenPipe):
        writer.put(b"more\n")
    with pytest.raises(BrokenPipe):
        await writer.send(b"more\n")


async def test_a_direct_write_that_fails_breaks_the_writer() -> None:
    pipe = Pipe()
    pipe.broken = True
    writer = LineWriter(pipe)
    with anyio.fail_after(5):
        with pytest.raises(BrokenPipe):
            await writer.send(b"lost\n")
        await writer.run()  # returns at once: the pipe is broken
    assert writer.written == 0
