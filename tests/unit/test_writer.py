"""A child's stdin writer (``gateway.stdio.writer``): whole lines, in order, direct when idle, batched, bounded."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ByteSendStream

from gateway.stdio.backend import unread_counter
from gateway.stdio.writer import BrokenPipe, LineWriter, StdinFull, StdinStalled

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


async def test_a_line_that_does_not_fit_behind_a_write_in_progress_is_refused_before_it_is_queued() -> None:
    pipe = Pipe(open_=False)
    writer = LineWriter(pipe, max_queued=10)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            writer.put(b"first\n")
            await wait_for_writes(pipe, 1)  # stuck in the pipe
            # One line always fits an empty queue, however large: any single request can go.
            assert await writer.send(b"0123456789abcdef\n") is not None
            with pytest.raises(StdinFull) as refused:
                await writer.send(b"x\n")
            assert (refused.value.queued, refused.value.limit) == (17, 10)
            assert writer.queued == 17  # the refused line was never queued
            writer.put(b"cancel\n")  # a put that does not fit is dropped and counted
            assert writer.dropped == 1
            pipe.drain()
            await wait_for_writes(pipe, 2)
            assert await writer.send(b"y\n") is not None  # room again (the pipe is busy with the batch)
            pipe.drain()
            await wait_for_writes(pipe, 3)
            pipe.drain()
            tg.cancel_scope.cancel()
    assert pipe.writes == [b"first\n", b"0123456789abcdef\n", b"y\n"]


async def test_a_withdrawn_line_is_never_written_and_frees_its_room() -> None:
    pipe = Pipe(open_=False)
    writer = LineWriter(pipe, max_queued=10)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            writer.put(b"first\n")
            await wait_for_writes(pipe, 1)
            gone = await writer.send(b"gone-----\n")
            assert not writer.fits(2)  # 10 bytes queued: no room for another
            assert writer.withdraw(gone)
            assert writer.queued == 0
            assert not writer.withdraw(gone)  # once
            assert await writer.send(b"kept\n") is not None
            pipe.drain()
            await wait_for_writes(pipe, 2)
            pipe.drain()
            tg.cancel_scope.cancel()
    assert pipe.writes == [b"first\n", b"kept\n"]


async def test_a_write_the_pipe_never_takes_breaks_the_writer_after_the_stall_timeout() -> None:
    pipe = Pipe(open_=False)
    writer = LineWriter(pipe, stall_timeout=0.05)
    with anyio.fail_after(5):
        writer.put(b"never read\n")
        await writer.run()  # returns: the write stalled
    assert isinstance(writer.broken, StdinStalled)
    with pytest.raises(BrokenPipe):
        await writer.send(b"more\n")


async def test_a_cancelled_direct_write_makes_later_lines_wait_for_the_pipe_in_order() -> None:
    pipe = Pipe(open_=False)
    writer = LineWriter(pipe)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            with anyio.move_on_after(0.01):
                await writer.send(b"direct\n")  # its caller gives up while the pipe holds it
            # Not written directly again (that would pile up in the pipe's buffer): queued.
            assert await writer.send(b"next\n") is not None
            assert pipe.writes == [b"direct\n"]
            pipe.drain()
            await wait_for_writes(pipe, 2)  # run waited for the pipe (an empty write) first
            pipe.drain()
            await wait_for_writes(pipe, 3)
            pipe.drain()
            tg.cancel_scope.cancel()
    assert pipe.writes == [b"direct\n", b"", b"next\n"]


async def test_a_broken_pipe_ends_the_writer_and_later_lines_are_refused() -> None:
    pipe = Pipe()
    pipe.broken = True
    writer = LineWriter(pipe, max_queued=1)
    writer.put(b"lost\n")
    with anyio.fail_after(5):
        await writer.run()
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


class SlowPipe(ByteSendStream):
    """A pipe whose writes take a little loop time, and that says whether they wait."""

    def __init__(self, at_once: bool) -> None:
        self.at_once = at_once
        self.lines: list[bytes] = []

    def takes_at_once(self, size: int) -> bool:
        return self.at_once

    async def send(self, item: bytes) -> None:
        await anyio.sleep(0.05)
        self.lines.append(item)

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize("at_once", [True, False])
async def test_the_stall_timer_is_armed_only_for_a_write_that_may_wait(at_once: bool) -> None:
    pipe = SlowPipe(at_once)
    writer = LineWriter(pipe, stall_timeout=0.001)  # far shorter than the write's own wait
    with anyio.fail_after(5):
        if at_once:  # the pipe said it takes the line at once: no timer, so no stall
            await writer.send(b"line\n")
        else:
            with pytest.raises(BrokenPipe):
                await writer.send(b"line\n")
    if at_once:
        assert pipe.lines == [b"line\n"]
        assert writer.broken is None
    else:
        assert isinstance(writer.broken, StdinStalled)


async def test_a_write_that_waits_for_the_pipe_says_since_when_until_it_goes_through() -> None:
    """``waiting_since`` is what the dispatcher routes around a stalled child by (rule 7)."""
    pipe = Pipe(open_=False)  # takes no write until drained (and has no ``takes_at_once``)
    writer = LineWriter(pipe)
    assert writer.waiting_since is None
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            before = time.monotonic()
            tg.start_soon(writer.send, b"held\n")
            await wait_for_writes(pipe, 1)  # handed to the pipe, which has not taken it
            since = writer.waiting_since
            assert since is not None
            assert since >= before
            pipe.drain()
        assert writer.waiting_since is None  # it went through


class NowPipe(Pipe):
    """A ``Pipe`` that can also take a line without a coroutine, as ``PipeWriter`` can."""

    def __init__(self) -> None:
        super().__init__()
        self.at_once = True

    def write_now(self, item: bytes) -> bool:
        if self.broken:
            raise anyio.BrokenResourceError
        if not self.at_once:
            return False
        self.writes.append(item)
        self.arrived.set()
        return True


async def test_write_now_writes_what_send_would_and_only_when_the_pipe_is_idle() -> None:
    fast, slow = NowPipe(), Pipe()
    now, general = LineWriter(fast), LineWriter(slow)
    assert now.write_now(b"one\n")
    assert await general.send(b"one\n") is None
    assert (fast.writes, now.written, now.queued) == (slow.writes, general.written, general.queued)
    fast.at_once = False  # the pipe would have to wait: nothing is written, send takes it
    assert not now.write_now(b"two\n")
    assert fast.writes == [b"one\n"]
    fast.at_once = True
    now.put(b"queued\n")  # a line waits: write_now must not pass it
    assert not now.write_now(b"three\n")
    assert fast.writes == [b"one\n"]
    assert not LineWriter(Pipe()).write_now(b"x\n")  # a pipe without write_now: always send


async def test_write_now_on_a_broken_pipe_breaks_the_writer_as_send_does() -> None:
    fast, slow = NowPipe(), Pipe()
    now, general = LineWriter(fast), LineWriter(slow)
    fast.broken = slow.broken = True
    with pytest.raises(BrokenPipe):
        now.write_now(b"line\n")
    with pytest.raises(BrokenPipe):
        await general.send(b"line\n")
    assert isinstance(now.broken, anyio.BrokenResourceError)
    assert isinstance(general.broken, anyio.BrokenResourceError)
    assert not now.write_now(b"again\n")  # broken: the general path raises for it
    with pytest.raises(BrokenPipe):
        await now.send(b"again\n")
    assert now.written == general.written == 0


async def test_lines_queued_in_one_turn_go_out_in_one_write_in_order_even_to_an_idle_pipe() -> None:
    pipe = Pipe()
    writer = LineWriter(pipe, max_queued=20)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            first = writer.queue(b"one\n")  # the pipe is idle: queued all the same, not written
            writer.queue(b"two\n")
            gone = writer.queue(b"gone\n")
            assert pipe.writes == []
            assert writer.withdraw(gone)  # its request ended before the write: never written
            writer.queue(b"three\n")
            await wait_for_writes(pipe, 1)
            assert not writer.withdraw(first)  # written already
            tg.cancel_scope.cancel()
    assert pipe.writes == [b"one\ntwo\nthree\n"]
    assert writer.written == len(b"one\ntwo\nthree\n")


async def test_a_queued_line_is_refused_as_a_sent_one_is() -> None:
    writer = LineWriter(Pipe(), max_queued=10)
    assert writer.queue(b"0123456789abcdef\n") == 1  # one line always fits an empty queue
    with pytest.raises(StdinFull) as refused:
        writer.queue(b"x\n")
    assert (refused.value.queued, refused.value.line, refused.value.limit) == (17, 2, 10)
    assert writer.queued == 17  # the refused line was never queued
    broken = LineWriter(Pipe())
    broken._break(OSError("gone"))
    with pytest.raises(BrokenPipe):
        broken.queue(b"y\n")


async def test_lines_queued_in_one_turn_leave_at_its_end_in_one_write_made_without_the_writer_task() -> None:
    pipe = NowPipe()
    writer = LineWriter(pipe)
    with anyio.fail_after(5):
        writer.queue(b"one\n")
        writer.queue(b"two\n")
        assert pipe.writes == []
        await wait_for_writes(pipe, 1)  # no ``run`` task: the end of the turn wrote them
        assert (pipe.writes, writer.written, writer.queued) == ([b"one\ntwo\n"], 8, 0)
        pipe.at_once = False  # the pipe would have to wait: the writer task takes the batch
        writer.queue(b"three\n")
        writer.queue(b"four\n")
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            await wait_for_writes(pipe, 2)
            tg.cancel_scope.cancel()
    assert pipe.writes == [b"one\ntwo\n", b"three\nfour\n"]


async def test_a_pipe_that_breaks_at_the_end_of_the_turn_breaks_the_writer() -> None:
    pipe = NowPipe()
    writer = LineWriter(pipe)
    with anyio.fail_after(5):
        writer.queue(b"one\n")
        pipe.broken = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)  # returns once the writer is broken
    assert isinstance(writer.broken, anyio.BrokenResourceError)
    with pytest.raises(BrokenPipe):
        writer.queue(b"two\n")
    assert pipe.writes == []


class CountingPipe(NowPipe):
    """A ``NowPipe`` with the kernel's count of what its reader has not read (``unread``), as
    ``PipeWriter`` has: every write stays unread until ``read``."""

    def __init__(self) -> None:
        super().__init__()
        self.unread_bytes = 0
        self.counted = True

    def write_now(self, item: bytes) -> bool:
        taken = super().write_now(item)
        self.unread_bytes += len(item) if taken else 0
        return taken

    def read(self, size: int) -> None:
        self.unread_bytes -= size

    def unread(self) -> int | None:
        return self.unread_bytes if self.counted else None


def test_lines_the_child_leaves_unread_in_the_pipe_stall_it_from_the_look_that_first_finds_them() -> None:
    """Rule 7's other half: a request of a few hundred bytes fits in the pipe, so a child that
    stopped reading has no write waiting (``waiting_since`` stays None); the looks, once a
    tick, find its lines unread with nothing read or written since, and say since when."""
    pipe = CountingPipe()
    writer = LineWriter(pipe, stall_timeout=60.0)
    assert writer.stalled_since(100.0, last_output=0.0) is None  # nothing written: nothing waits
    assert writer.write_now(b"request one\n")
    assert writer.waiting_since is None
    assert writer.stalled_since(101.0, last_output=0.0) == 101.0  # unread, from this look
    assert writer.stalled_since(105.0, last_output=0.0) == 101.0  # nothing read or written since
    pipe.read(5)  # it read a little: the clock starts again
    assert writer.stalled_since(106.0, last_output=0.0) == 106.0
    assert writer.write_now(b"request two\n")  # written to: the clock starts again too
    assert writer.stalled_since(107.0, last_output=0.0) == 107.0
    pipe.read(pipe.unread_bytes)  # it read everything
    assert writer.stalled_since(108.0, last_output=0.0) is None
    assert writer.broken is None
    pipe.counted = False  # a pipe nobody can count: only a waiting write stalls it
    assert writer.write_now(b"request three\n")
    assert writer.stalled_since(109.0, last_output=0.0) is None
    assert writer.stalled_since(200.0, last_output=0.0) is None


async def test_lines_left_unread_past_the_stall_timeout_break_the_writer_unless_the_child_speaks() -> None:
    pipe = CountingPipe()
    writer = LineWriter(pipe, stall_timeout=10.0)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            assert writer.write_now(b"never read\n")
            assert writer.stalled_since(100.0, last_output=50.0) == 100.0
            # Output since the lines were left unread (a tool reporting progress): working, not stuck.
            assert writer.stalled_since(115.0, last_output=108.0) == 100.0
            assert writer.broken is None
            # Silent and not reading for the whole timeout: the writer breaks, and ``run`` returns.
            assert writer.stalled_since(118.0, last_output=108.0) == 100.0
            assert isinstance(writer.broken, StdinStalled)
            assert "read nothing of its stdin, and wrote nothing, for 10 s" in str(writer.broken)
    # Being stopped, it stays stalled for its pool's routing (it never "reads again").
    assert writer.stalled_since(119.0, last_output=108.0) == 100.0
    with pytest.raises(BrokenPipe):
        await writer.send(b"more\n")


def test_a_write_that_waits_for_the_pipe_is_left_to_its_own_stall_timer() -> None:
    """A write waiting for a full pipe breaks the writer itself (``fail_after``); a look finding
    the same unread bytes then reports the earlier of the two moments and breaks nothing."""
    pipe = CountingPipe()
    writer = LineWriter(pipe, stall_timeout=10.0)
    assert writer.write_now(b"in the pipe\n")
    assert writer.stalled_since(100.0, last_output=0.0) == 100.0
    writer.waiting_since = 103.0  # as ``_write`` sets it while a write waits
    assert writer.stalled_since(120.0, last_output=0.0) == 100.0
    assert writer.broken is None


def test_a_pipe_closed_before_it_is_counted_counts_nothing_and_raises_nothing(tmp_path: Path) -> None:
    """A child that exits at once can have its stdin pipe closed before the gateway wraps it:
    ``fileno()`` then raises, which failed the whole pool (a gateway fault) in CI."""
    closed = (tmp_path / "pipe").open("wb")
    closed.close()

    class ClosedPipe(asyncio.BaseTransport):
        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return closed if name == "pipe" else default

    assert unread_counter(ClosedPipe()) is None
