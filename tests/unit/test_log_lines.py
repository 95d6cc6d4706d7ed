"""A line that skips its record (``gateway.ops.logs.LineRoute``) is written byte for byte as
its record would be, and only when nothing but the gateway's own writer could see the record.

Each comparison writes one call twice through the same listener, once as a ``Line`` and once
as the record ``Logger.log`` makes, with the clock both read fixed to one instant, and
compares the two lines the stream received."""

from __future__ import annotations

import io
import logging
import logging.handlers
import queue
import sys
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.http import observe as observing
from gateway.http.observe import ACCESS_KEYS, ACCESS_LINE, ProbeAnswers, observe
from gateway.ops import logs, records
from gateway.ops.logs import (
    LINE_FORMAT,
    BatchedStreamHandler,
    DeferredQueueHandler,
    FlushingQueueListener,
    JsonFormatter,
    LineRoute,
    TextFormatter,
    line_route,
)
from gateway.ops.metrics import GatewayMetrics
from gateway.ops.records import NS_CLOCK, log_fast
from tests.unit.test_edge_fast_paths import EDGE_VALUES, CountingStream

NAME = "tests.lines"
INSTANTS = [
    1_700_000_000_000_000_000,
    1_700_000_000_123_456_789,
    1_700_000_000_999_499_999,
    1_677_903_920_999_998_503,  # 999 ms
    1_677_903_920_999_999_900,  # to seconds, rounds up to the next second
    1_800_000_061_500_000_001,
    250_000_000,  # a quarter of a second after the epoch
]


class Writer:
    """A logger whose only handler is a ``DeferredQueueHandler`` read by a
    ``FlushingQueueListener`` that writes through one ``BatchedStreamHandler``, as ``configure``
    sets up the root logger (the listener started by ``lines``)."""

    def __init__(self, formatter: logging.Formatter) -> None:
        self.stream = io.StringIO()
        self.handler = BatchedStreamHandler(self.stream)
        self.handler.setFormatter(formatter)
        self.records: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.listener = FlushingQueueListener(self.records, self.handler)
        self.queued = DeferredQueueHandler(self.records)
        self.queued.listener = self.listener
        self.logger = logging.getLogger(NAME)
        self.logger.handlers[:] = [self.queued]
        self.logger.propagate = False  # pytest's handlers are on the root logger
        self.logger.setLevel(logging.DEBUG)

    def route(self, level: int = logging.INFO) -> LineRoute:
        route = line_route(self.logger, level)
        assert route is not None
        return route

    def lines(self) -> list[str]:
        """What the listener writes for what is queued."""
        self.listener.start()
        self.listener.stop()
        return self.stream.getvalue().splitlines(keepends=True)


@pytest.fixture
def restore() -> Iterator[None]:
    logger = logging.getLogger(NAME)
    yield
    logger.handlers[:] = []
    logger.filters[:] = []
    logger.disabled = False
    logger.propagate = True


def fix_clock(monkeypatch: pytest.MonkeyPatch, ns: int) -> None:
    """Every clock a line or a record reads reads ``ns``: the line's (``records.clock``),
    ``LogRecord``'s, and ``log_fast``'s (``records._stamp``)."""
    monkeypatch.setattr(logs, "clock", (lambda: ns) if NS_CLOCK else (lambda: ns / 1e9))
    clock = SimpleNamespace(time=lambda: ns / 1e9, time_ns=lambda: ns, strftime=time.strftime)
    monkeypatch.setattr(logging, "time", clock)
    monkeypatch.setattr(records, "time", clock)


def both(
    writer: Writer, level: int, msg: str, args: tuple[Any, ...], keys: tuple[str, ...], values: tuple[Any, ...]
) -> tuple[str, str]:
    """The line ``LineRoute.write`` writes, and the one ``Logger.log`` writes, for one call."""
    route = writer.route(level)
    assert route.write(level, NAME, msg, args, keys, values if route.extras else ())
    writer.logger.log(level, msg, *args, extra=dict(zip(keys, values, strict=True)))
    line, record_line = writer.lines()
    return line, record_line


def calls() -> Iterator[tuple[int, str, tuple[Any, ...], tuple[str, ...], tuple[Any, ...]]]:
    """Calls shaped like the access line's, each with one edge value everywhere, and others."""
    keys = ("event", "rpc_method", "status", "code", "access_token", "name_")
    for value in EDGE_VALUES:
        args = ("POST", value, value, 200, 62.75, value, "ok", value, value, value, value, value, value)
        yield (
            logging.INFO,
            ACCESS_LINE.rsplit(" request_id", 1)[0],
            args,
            keys,
            ("request", value, 200, value, value, 1),
        )
    yield logging.WARNING, "no args %s", (), ("event",), ("x\ny",)
    yield logging.INFO, "%(a)s and %(b)d", ({"a": "x\ny", "b": 2},), (), ()  # one mapping as the arguments
    yield logging.INFO, "%s", ({},), (), ()  # an empty one is not
    yield logging.ERROR, "a message with a newline\n\u2028", (), ("peer",), (None,)
    yield 35, "%s %r", ("x", "y"), ("status",), (1.5,)  # a level without a name


@pytest.mark.usefixtures("restore")
@pytest.mark.parametrize("formatter", [TextFormatter(LINE_FORMAT), JsonFormatter()], ids=["text", "json"])
@pytest.mark.parametrize("ns", INSTANTS)
def test_a_line_is_the_text_its_record_would_have_been(
    monkeypatch: pytest.MonkeyPatch, formatter: logging.Formatter, ns: int
) -> None:
    fix_clock(monkeypatch, ns)
    for level, msg, args, keys, values in calls():
        writer = Writer(formatter)
        line, record_line = both(writer, level, msg, args, keys, values)
        assert line == record_line
        assert line.endswith("\n")
        assert line.count("\n") == 1


@pytest.mark.usefixtures("restore")
def test_a_line_has_the_time_of_its_record_at_every_millisecond_of_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """The text line writes the local time of the second once per second and the milliseconds
    itself (``TextFormatter.format_line``): across second boundaries, both ways, and the
    rounding of the seconds, it writes what ``Formatter.formatTime`` writes."""
    formatter = TextFormatter(LINE_FORMAT)
    for start in (1_700_000_000_000_000_000, 1_677_903_920_999_000_000, 86_400_000_000_000):
        for step in (-1_000_001_000, 999_999, 1_000_000, 1_000_001, 333_333_333, 1_999_999_999):
            ns = start
            for _ in range(12):
                fix_clock(monkeypatch, ns)
                writer = Writer(formatter)  # the same formatter: its second carried over
                line, record_line = both(writer, logging.INFO, "%s", ("m",), (), ())
                assert line == record_line
                ns += step


@pytest.mark.usefixtures("restore")
@pytest.mark.parametrize("ns", [-500_000_000, -1_000_000_000, -1_500_000_000, 0, 999_999_999])
def test_a_line_from_before_1970_or_its_first_second_has_its_records_time(
    monkeypatch: pytest.MonkeyPatch, ns: int
) -> None:
    """A new formatter knows no second yet; ``int()`` of a time before 1970 rounds up."""
    fix_clock(monkeypatch, ns)
    for _ in range(2):
        line, record_line = both(Writer(TextFormatter(LINE_FORMAT)), logging.INFO, "%s", ("m",), (), ())
        assert line == record_line


@pytest.mark.usefixtures("restore")
@pytest.mark.parametrize(
    ("fmt", "kwargs"),
    [(LINE_FORMAT, {"datefmt": "%H:%M:%S"}), (LINE_FORMAT, {})],
    ids=["datefmt", "msec_format"],
)
def test_a_line_in_another_time_format_is_its_records_too(
    monkeypatch: pytest.MonkeyPatch, fmt: str, kwargs: dict[str, Any]
) -> None:
    formatter = TextFormatter(fmt, **kwargs)
    if not kwargs:
        formatter.default_msec_format = "%s.%03d"
    fix_clock(monkeypatch, INSTANTS[1])
    line, record_line = both(Writer(formatter), logging.INFO, "%s", ("m",), (), ())
    assert line == record_line


@pytest.mark.usefixtures("restore")
def test_the_access_line_is_written_as_its_record_would_be(monkeypatch: pytest.MonkeyPatch) -> None:
    """``observe`` through the line route and through the record (``log_fast``), for
    requests whose fields take each shape: text and JSON, byte for byte."""
    monkeypatch.setattr(observing, "log", logging.getLogger(NAME))
    fix_clock(monkeypatch, INSTANTS[1])
    headers = [(b"x-request-id", b"r 1\x1b"), (b"traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01")]
    requests: list[tuple[dict[str, Any], dict[str, Any], str | None, int]] = [
        ({}, {"method": "tools/call", "era": "modern", "rpc_id": 7, "mcp_name": "echo", "child_pid": 9}, "s", 200),
        (
            {"headers": headers},
            {"method": "x\n" * 200, "rpc_id": "id\x00" * 90, "outcome": "error", "code": -1},
            "s",
            0,
        ),
        (
            {"gateway.principal": "alice", "client": None},
            {"rpc_id": 1.5, "session": "abcd", "forwarded_to": "u"},
            None,
            404,
        ),
        ({"headers": [(b"mcp-name", b"\xe9\x85")]}, {"method": "tools/list", "mcp_name": ""}, "s", 499),
    ]
    for formatter in (TextFormatter(LINE_FORMAT), JsonFormatter()):
        for extra_scope, fields, server, status in requests:
            scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [], "client": ("10.0.0.1", 5)}
            scope.update(extra_scope)
            written = []
            for routed in (True, False):
                writer = Writer(formatter)
                if routed:  # and no record made
                    monkeypatch.setattr(observing, "log_fast", None)
                else:
                    monkeypatch.setattr(observing, "log_fast", log_fast)
                    monkeypatch.setattr(observing, "line_route", lambda logger, level: None)
                observe(
                    GatewayMetrics([], lambda name: None),
                    dict(scope),
                    dict(fields),
                    server,
                    status,
                    None,
                    False,
                    0.0123456,
                    ProbeAnswers(),
                )
                monkeypatch.setattr(observing, "line_route", line_route)
                (text,) = writer.lines()
                written.append(text)
            assert written[0] == written[1]


@pytest.mark.usefixtures("restore")
def test_an_id_that_is_not_text_or_a_number_makes_its_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """A forwarded request's id, read from its body unchecked, may be an array: its record is
    made (and prepared on the loop, as any record with such an argument)."""
    monkeypatch.setattr(observing, "log", logging.getLogger(NAME))
    writer = Writer(TextFormatter(LINE_FORMAT))
    made: list[object] = []
    monkeypatch.setattr(observing, "log_fast", lambda *args: made.append(args))
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [], "client": None}
    observe(None, scope, {"rpc_id": [1]}, "s", 200, None, False, 0.001)
    observe(None, scope, {"rpc_id": 1}, "s", 200, None, False, 0.001)
    assert len(made) == 1
    assert len(writer.lines()) == 1


class Other(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        pass


@pytest.mark.usefixtures("restore")
def test_a_line_takes_its_route_only_when_nothing_else_could_see_its_record() -> None:
    writer = Writer(TextFormatter(LINE_FORMAT))
    logger = writer.logger
    child = logging.getLogger(NAME + ".child")
    assert line_route(logger, logging.INFO) is writer.route()
    assert line_route(child, logging.INFO) is writer.route()  # the parent's handler
    assert line_route(logger, logging.DEBUG) is writer.route()

    def refused(change: Any, undo: Any, at: logging.Logger = logger, level: int = logging.INFO) -> None:
        change()
        try:
            assert line_route(at, level) is None
        finally:
            undo()
        assert line_route(at, level) is writer.route()

    other = Other()
    refused(lambda: child.addHandler(other), lambda: child.removeHandler(other), child)
    refused(lambda: logger.addHandler(other), lambda: logger.removeHandler(other))
    other.setLevel(logging.WARNING)  # a handler above the record's level does not see it
    logger.addHandler(other)
    assert line_route(logger, logging.INFO) is writer.route()
    assert line_route(logger, logging.WARNING) is None
    logger.removeHandler(other)
    second = DeferredQueueHandler(queue.SimpleQueue())
    refused(lambda: logger.addHandler(second), lambda: logger.removeHandler(second))
    refused(lambda: setattr(child, "propagate", False), lambda: setattr(child, "propagate", True), child)

    def keep(record: logging.LogRecord) -> bool:
        return True

    refused(lambda: logger.addFilter(keep), lambda: logger.removeFilter(keep))
    refused(lambda: writer.queued.addFilter(keep), lambda: writer.queued.removeFilter(keep))
    refused(lambda: writer.handler.addFilter(keep), lambda: writer.handler.removeFilter(keep))
    refused(lambda: setattr(logger, "disabled", True), lambda: setattr(logger, "disabled", False))
    standard = logging.getLogRecordFactory()
    refused(
        lambda: logging.setLogRecordFactory(lambda *a, **k: standard(*a, **k)),
        lambda: logging.setLogRecordFactory(standard),
    )
    formatter = writer.handler.formatter
    for another in (logging.Formatter(LINE_FORMAT), TextFormatter("%(message)s"), type("Sub", (JsonFormatter,), {})()):
        refused(lambda f=another: writer.handler.setFormatter(f), lambda: writer.handler.setFormatter(formatter))
    handlers = writer.listener.handlers
    refused(
        lambda: setattr(writer.listener, "handlers", (*handlers, Other())),
        lambda: setattr(writer.listener, "handlers", handlers),
    )
    refused(
        lambda: setattr(writer.queued, "listener", None), lambda: setattr(writer.queued, "listener", writer.listener)
    )
    json = JsonFormatter()
    writer.handler.setFormatter(json)  # another formatter that takes lines: another route, to it
    assert writer.route().formatter is json
    assert writer.route().extras

    class Own(logging.Logger):
        pass

    assert line_route(Own(NAME + ".own"), logging.INFO) is None
    assert line_route(logging.getLogger(NAME + ".nowhere"), logging.INFO) is not None
    logger.handlers[:] = []
    assert line_route(child, logging.INFO) is None  # no handler: the record goes to lastResort


@pytest.mark.usefixtures("restore")
def test_keys_a_record_would_refuse_are_not_written_as_a_line() -> None:
    writer = Writer(JsonFormatter())
    route = writer.route()
    for keys in [("message",), ("asctime",), ("lineno",), ("color_message",), ("status", "status")]:
        assert not route.write(logging.INFO, NAME, "m", (), keys, (1,) * len(keys))
    assert route.write(logging.INFO, NAME, "m", (), ("status",), (1,))
    assert not route.write(logging.INFO, NAME, "m", (), ("status", "message"), (1, 2))
    assert len(writer.lines()) == 1


@pytest.mark.usefixtures("restore")
def test_the_access_lines_keys_are_ones_a_record_takes() -> None:
    assert logs.fits(ACCESS_KEYS)
    record = logging.getLogger(NAME).makeRecord(
        NAME, logging.INFO, "f", 1, ACCESS_LINE, (), None, extra=dict.fromkeys(ACCESS_KEYS)
    )
    assert list(vars(record))[-len(ACCESS_KEYS) :] == list(ACCESS_KEYS)


@pytest.mark.usefixtures("restore")
def test_lines_and_records_are_written_in_the_order_they_were_logged_in_one_write() -> None:
    writer = Writer(TextFormatter(LINE_FORMAT))
    stream = CountingStream()
    writer.handler.setStream(stream)
    for number in range(60):
        if number % 3:
            assert writer.route().write(logging.INFO, NAME, "line %d", (number,), (), ())
        else:
            writer.logger.info("line %d", number)
    writer.listener.start()  # everything is queued already: one burst
    writer.listener.stop()
    assert stream.writes == 1
    assert [line.rsplit(" ", 1)[1] for line in stream.getvalue().splitlines()] == [str(n) for n in range(60)]


@pytest.mark.usefixtures("restore")
def test_a_line_the_formatter_fails_on_is_reported_as_its_record_would_be() -> None:
    writer = Writer(TextFormatter(LINE_FORMAT))
    seen: list[logging.LogRecord] = []
    writer.handler.handleError = seen.append  # type: ignore[method-assign]
    assert writer.route().write(logging.INFO, NAME, "%s %s", ("one",), ("status",), ())
    writer.logger.info("after")
    lines = writer.lines()
    assert [(record.name, record.msg, record.args) for record in seen] == [(NAME, "%s %s", ("one",))]
    assert len(lines) == 1
    assert lines[0].endswith("after\n")


def test_configure_hands_its_queue_handler_the_listener_that_reads_its_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``configure``'s handlers (and ``RecentErrors`` on ``gateway`` at WARNING, as the
    app has it), an access line takes its route; a warning is a record (``RecentErrors`` sees it)."""
    from gateway.ops.recent import RecentErrors

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    uvicorn = [
        (logger, logger.handlers[:], logger.propagate, logger.disabled)
        for logger in map(logging.getLogger, ("uvicorn", "uvicorn.error", "uvicorn.access"))
    ]
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    listener = logs.configure("info", "text")
    try:
        (queued,) = root.handlers
        assert isinstance(queued, DeferredQueueHandler)
        assert queued.listener is listener
        assert queued.dropped is logs.DROPPED  # the process's count (the metric's)
        assert isinstance(listener, FlushingQueueListener)
        assert listener.dropped is logs.DROPPED  # reported by the process's writer
        access = logging.getLogger("gateway.access")
        with RecentErrors().attached():
            assert line_route(access, logging.INFO) is queued.route() is not None
            assert line_route(access, logging.WARNING) is None
    finally:
        listener.stop()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        for logger, handlers, propagate, disabled in uvicorn:
            logger.handlers[:], logger.propagate, logger.disabled = handlers, propagate, disabled
