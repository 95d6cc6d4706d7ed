"""The queue to the log-writing thread is bounded (``gateway.ops.logs.MAX_LOG_QUEUE_LINES``):
when the log output takes nothing, later lines are dropped and counted, not kept, whichever
way a line goes (a record, or a ``LineRoute`` line), and the thread says how many once its
writes go through again."""

from __future__ import annotations

import io
import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.ops.logs import (
    DROPPED,
    LINE_FORMAT,
    MAX_LOG_QUEUE_LINES,
    BatchedStreamHandler,
    DeferredQueueHandler,
    Dropped,
    FlushingQueueListener,
    TextFormatter,
    line_route,
)

NAME = "tests.bound"
WAIT = 10.0


class StuckStream(io.StringIO):
    """A stream whose writes wait until ``release()``: a stderr nobody reads."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = threading.Event()
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def write(self, text: str) -> int:
        self.writing.set()
        assert self._released.wait(WAIT), "the test never released the stream"
        return super().write(text)


class Setup:
    """A logger whose only handler is a bounded ``DeferredQueueHandler`` read by a
    ``FlushingQueueListener`` writing to ``stream``, as ``configure`` sets up the root logger."""

    def __init__(self, stream: io.StringIO, bound: int) -> None:
        self.stream = stream
        self.handler = BatchedStreamHandler(stream)
        self.handler.setFormatter(TextFormatter(LINE_FORMAT))
        self.records: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.dropped = Dropped()  # this queue's own count, as ``configure`` gives its queue ``DROPPED``
        self.listener = FlushingQueueListener(self.records, self.handler, dropped=self.dropped)
        self.queued = DeferredQueueHandler(self.records, self.dropped)
        self.queued.max_lines = bound
        self.queued.listener = self.listener
        self.logger = logging.getLogger(NAME)
        self.logger.handlers[:] = [self.queued]
        self.logger.propagate = False
        self.logger.setLevel(logging.INFO)


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    yield
    logger = logging.getLogger(NAME)
    logger.handlers[:] = []
    logger.propagate = True


def test_the_bound_is_named_and_small_enough_to_hold() -> None:
    assert 1_000 <= MAX_LOG_QUEUE_LINES <= 100_000
    assert DeferredQueueHandler(queue.SimpleQueue()).max_lines == MAX_LOG_QUEUE_LINES


def test_records_past_the_bound_are_dropped_and_counted() -> None:
    setup = Setup(io.StringIO(), bound=3)
    for i in range(5):
        setup.logger.info("record %d", i)
    assert setup.records.qsize() == 3
    assert setup.dropped.total == 2


def test_lines_that_skip_their_record_are_bounded_alike() -> None:
    setup = Setup(io.StringIO(), bound=3)
    route = line_route(setup.logger, logging.INFO)
    assert route is not None
    assert route.max_lines == 3
    for i in range(5):
        assert route.write(logging.INFO, NAME, "line %d", (i,), (), ())  # handled: queued or dropped
    assert setup.records.qsize() == 3
    assert setup.dropped.total == 2
    setup.queued.max_lines = 4  # a changed bound makes a new route
    assert line_route(setup.logger, logging.INFO) is not route


def test_a_stuck_log_output_holds_at_most_the_bound_and_the_drops_are_reported_once_it_moves() -> None:
    stream = StuckStream()
    setup = Setup(stream, bound=50)
    setup.listener.start()
    try:
        setup.logger.info("first")
        assert stream.writing.wait(WAIT)  # the thread is stuck in its first write
        for i in range(200):
            setup.logger.info("line %d", i)
            assert setup.records.qsize() <= 50
        route = line_route(setup.logger, logging.INFO)
        assert route is not None
        for i in range(20):
            route.write(logging.INFO, NAME, "routed %d", (i,), (), ())
        assert setup.records.qsize() == 50
        dropped = setup.dropped.total
        assert dropped == 200 + 20 - 50
    finally:
        stream.release()
        setup.listener.stop()
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("INFO tests.bound: first")
    kept = [line for line in lines if ": line " in line]
    assert [line.rsplit(" ", 1)[1] for line in kept] == [str(i) for i in range(50)]  # the oldest kept, in order
    warnings = [line for line in lines if "dropped" in line]
    assert len(warnings) == 1
    assert f"WARNING gateway: {dropped} log line(s) dropped" in warnings[0]
    assert setup.dropped.take_unreported() == 0  # reported once


def test_a_queue_counts_and_reports_its_own_drops_only() -> None:
    full = Setup(io.StringIO(), bound=1)
    for i in range(3):
        full.logger.info("record %d", i)
    assert full.dropped.total == 2
    quiet = Setup(io.StringIO(), bound=10)
    quiet.listener.start()
    quiet.logger.info("one line")
    quiet.listener.stop()
    assert quiet.stream.getvalue().count("\n") == 1  # another queue's drops are not its to report
    assert DeferredQueueHandler(queue.SimpleQueue()).dropped is not DROPPED
