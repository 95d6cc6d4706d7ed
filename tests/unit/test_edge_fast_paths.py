"""The edge's cheaper ways to log and count give what the library's own ways give."""

from __future__ import annotations

import asyncio
import io
import logging
import logging.handlers
import queue
import re
import sys
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.ops.logs import (
    BatchedStreamHandler,
    DeferredQueueHandler,
    FlushingQueueListener,
    JsonFormatter,
    TextFormatter,
    escape_controls,
)
from gateway.ops.metrics import LATENCY_BUCKETS, GatewayMetrics
from gateway.ops.records import MAX_REMEMBERED_LINES, log_fast
from tests.unit.test_log_records import refusal

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # LINE_FORMAT, written out
OBSERVATIONS = [
    ("test", "tools/call", "modern", 200, "ok", 0.0004),
    ("test", "tools/call", "modern", 200, "ok", 0.001),  # on a bucket's bound: counted in that bucket
    ("test", "tools/call", "modern", 200, "ok", 0.0031),
    ("test", "tools/call", "legacy", 499, "cancelled", 301.0),  # past the last bound: +Inf only
    ("test", "initialize", "legacy", 200, "ok", 0.02),
    ("other", "POST", "-", 431, "error", 0.0001),
    ("test", "tools/call", "modern", 200, "ok", 7.5),
]


def without_created(page: bytes) -> str:
    """The exposition with the creation times (which differ by construction) blanked."""
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", page.decode())


def test_request_metrics_expose_what_prometheus_client_objects_would() -> None:
    ours = GatewayMetrics([], lambda name: None)  # type: ignore[arg-type, return-value]
    registry = CollectorRegistry(auto_describe=True)
    requests = Counter(
        "mcp_gateway_requests",
        "MCP requests answered, by JSON-RPC method, client era, HTTP status and outcome",
        ["server", "method", "era", "status", "outcome"],
        registry=registry,
    )
    latency = Histogram(
        "mcp_gateway_request_seconds",
        "Time from request to the end of the answer (the whole stream for SSE)",
        ["server", "method", "era"],
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )
    in_flight = Gauge("mcp_gateway_requests_in_flight", "Requests being answered", ["server"], registry=registry)
    ours.enter("test")
    in_flight.labels("test").inc()
    ours.enter("other")
    in_flight.labels("other").inc()
    for server, method, era, status, outcome, seconds in OBSERVATIONS:
        ours.observe(server, method, era, status, outcome, seconds)
        requests.labels(server, method, era, str(status), outcome).inc()
        latency.labels(server, method, era).observe(seconds)
    ours.leave("test")
    in_flight.labels("test").dec()
    alone = CollectorRegistry(auto_describe=True)  # the request metrics only, not the pools'
    alone.register(ours.requests)
    page = without_created(generate_latest(alone))
    assert page == without_created(generate_latest(registry))
    assert page.count("_created{") == 8  # four counters and four histograms, as the library writes them


def test_a_method_outside_the_fixed_set_is_counted_as_other() -> None:
    ours = GatewayMetrics([], lambda name: None)  # type: ignore[arg-type, return-value]
    ours.observe("test", "tools/call\n" + "x" * 1000, "modern", 200, "ok", 0.01)
    page = generate_latest(ours.registry).decode()
    assert 'method="other"' in page
    assert "xxx" not in page


def capture(handler: logging.Handler) -> logging.Logger:
    logger = logging.getLogger("tests.fast")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


class Keep(logging.Handler):
    """Keeps every record it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class CountingStream(io.StringIO):
    """A text stream that counts the writes made to it."""

    writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


TIMES = ("created", "msecs", "relativeCreated")


def test_a_fast_record_carries_what_logger_info_would_give() -> None:
    keep = Keep()
    logger = capture(keep)
    records = keep.records
    extra = {"event": "request", "status": 200, "principal": "alice"}
    log_fast(logger, logging.INFO, "%s %d", ("POST", 200), extra)
    logger.info("%s %d", "POST", 200, extra=extra)
    fast, slow = records
    assert fast.lineno == slow.lineno - 1  # the line of each call
    # Every other field, the thread, the process and (Python 3.12 and later) the task included.
    differs = {"lineno", *TIMES}
    assert {k: v for k, v in vars(fast).items() if k not in differs} == {
        k: v for k, v in vars(slow).items() if k not in differs
    }
    assert fast.getMessage() == slow.getMessage() == "POST 200"
    assert (fast.event, fast.status, fast.principal) == ("request", 200, "alice")  # type: ignore[attr-defined]
    formatter = JsonFormatter()
    assert formatter.format(fast).split(",", 1)[1] == formatter.format(slow).split(",", 1)[1]  # but the time


def test_fast_records_from_different_tasks_each_carry_their_own_task() -> None:
    """On Python 3.12 a record names the asyncio task that logged it (``taskName``): the access
    line of each request must name its own, not the first request's."""
    keep = Keep()
    logger = capture(keep)

    async def request(name: str) -> None:
        log_fast(logger, logging.INFO, "%s", (name,), {"status": 200})
        logger.info("%s", name, extra={"status": 200})

    async def main() -> None:
        await asyncio.gather(
            asyncio.create_task(request("first"), name="request-1"),
            asyncio.create_task(request("second"), name="request-2"),
        )

    asyncio.run(main())
    fast_1, slow_1, fast_2, slow_2 = keep.records  # each task logs both lines without yielding
    assert [r.getMessage() for r in (fast_1, slow_1, fast_2, slow_2)] == ["first", "first", "second", "second"]
    for fast, slow in ((fast_1, slow_1), (fast_2, slow_2)):
        assert getattr(fast, "taskName", None) == getattr(slow, "taskName", None)
    if sys.version_info >= (3, 12):
        assert (fast_1.taskName, fast_2.taskName) == ("request-1", "request-2")  # type: ignore[attr-defined]


def test_the_deferred_queue_handler_writes_the_same_lines_as_the_standard_one() -> None:
    mutable = ["before"]
    cases: list[tuple[str, tuple[object, ...]]] = [
        ("plain %s %d %.1f %s", ("text", 7, 1.25, None)),
        ("a list %s", (mutable,)),  # may change before the listener formats it: merged now
        ("no args", ()),
    ]
    lines = {}
    for handler_class in (logging.handlers.QueueHandler, DeferredQueueHandler):
        records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        logger = capture(handler_class(records))
        mutable[:] = ["before"]
        for message, args in cases:
            logger.info(message, *args)
        try:
            raise ValueError("boom\nline")
        except ValueError:
            logger.exception("failed %s", "here")
        mutable[:] = ["after"]  # the listener runs later
        formatter = TextFormatter(FORMAT)
        out = []
        while not records.empty():
            record = records.get()
            text = formatter.format(record)
            out.append(text.split(" ", 2)[2])  # but the time
        lines[handler_class] = out
    assert lines[DeferredQueueHandler] == lines[logging.handlers.QueueHandler]
    assert "a list ['before']" in lines[DeferredQueueHandler][1]


def test_the_deferred_queue_handler_applies_a_filter_added_to_it() -> None:
    """Without a filter it queues every record itself (no lock, no ``Filterer.filter``);
    with one, ``Handler.handle`` decides, as for any handler."""
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    handler = DeferredQueueHandler(records)
    logger = capture(handler)
    logger.info("first %s", "x")
    handler.addFilter(lambda record: "keep" in record.getMessage())
    logger.info("dropped")
    logger.info("keep %d", 2)
    handler.filters.clear()
    logger.info("last")
    queued = []
    while not records.empty():
        queued.append(records.get().getMessage())
    assert queued == ["first x", "keep 2", "last"]
    record = logging.LogRecord("gateway", logging.INFO, __file__, 1, "m", (), None)
    assert handler.handle(record) is True


def test_the_text_formatter_gives_the_standard_time_for_every_line() -> None:
    ours, standard = TextFormatter(FORMAT), logging.Formatter(FORMAT)
    for created in (-1.0, 1_700_000_000.0, 1_700_000_000.9994, 1_700_000_001.0005, 1_700_000_061.5, 0.25):
        record = logging.LogRecord("gateway", logging.INFO, __file__, 1, "m", (), None)
        record.created, record.msecs = created, int((created - int(created)) * 1000) + 0.0
        assert ours.format(record) == standard.format(record)


ACCESS_FORMAT = "%s %s %s %d %.1fms era=%s outcome=%s code=%s principal=%s child=%s client=%s name=%s id=%s"
EDGE_VALUES: list[object] = [
    "tools/call",
    "a\nb\r\x00\x1b[2K\x7f\x85\u2028\u202e\u2066",  # controls, C1, separators, bidi
    "100% %s %(name)s %%",  # a % in a value is text, not a format
    "x" * 5000,  # long
    "é ✓ 名前 \U0001f600 \\n",  # non-ASCII, astral, a backslash
    "",
    None,
    7,
    -31005,
    2.5,
    True,
]


def access_records() -> list[logging.LogRecord]:
    """Records shaped like the access line's, each with one edge value in every ``%s``."""
    made = []
    for value in EDGE_VALUES:
        args = ("POST", value, value, 200, 62.75, value, "ok", value, value, value, value, value, value)
        made.append(logging.LogRecord("gateway.access", logging.INFO, __file__, 1, ACCESS_FORMAT, args, None))
    for msg, args in [
        ("no args %s", ()),  # no arguments: the message as it is
        ("%(a)s and %(b)d", ({"a": "x\ny", "b": 2},)),  # one mapping as the arguments
        ("a message with a newline\n", ()),
    ]:
        made.append(logging.LogRecord("gateway.\x1bname", logging.WARNING, __file__, 1, msg, args, None))
    record = logging.LogRecord("gateway", logging.INFO, __file__, 1, 42, (), None)  # not a str message
    made.append(record)
    record = logging.LogRecord("gateway", 35, __file__, 1, "%s", ("x",), None)
    record.levelname = "NOTE\tLEVEL"  # as addLevelName(35, ...) would name it
    made.append(record)
    return made


def test_the_text_line_is_the_standard_formatters_with_its_controls_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    """``TextFormatter`` with the gateway's format writes what ``logging.Formatter`` writes,
    escaped as a whole, and sets the record's ``message`` and ``asctime`` as it does (its
    own way: ``Formatter.formatMessage`` is not called)."""
    ours, standard = TextFormatter(FORMAT), logging.Formatter(FORMAT)
    for record in access_records():
        for created in (1_700_000_000.0, 1_700_000_000.9994, 1_700_000_061.5):
            record.created, record.msecs = created, int((created - int(created)) * 1000) + 0.0
            expected = escape_controls(standard.format(record))
            fields = (record.message, record.asctime)  # type: ignore[attr-defined]
            del record.message, record.asctime  # type: ignore[attr-defined]
            with monkeypatch.context() as patched:
                patched.delattr(logging.Formatter, "formatMessage")
                assert ours.format(record) == expected
            assert (record.message, record.asctime) == fields  # type: ignore[attr-defined]
            assert "\n" not in expected
            assert "\x1b" not in expected


def test_a_failing_message_fails_as_the_standard_formatters_does() -> None:
    record = logging.LogRecord("gateway", logging.INFO, __file__, 1, "%s %s", ("one",), None)
    for formatter in (logging.Formatter(FORMAT), TextFormatter(FORMAT)):
        with pytest.raises(TypeError, match="not enough arguments"):
            formatter.format(record)


class Escaping(logging.Formatter):
    """The standard formatter, escaped where ``TextFormatter`` says it escapes: the message
    part as a whole, a traceback and a stack keeping their line breaks."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return escape_controls(super().formatException(ei), keep_newlines=True)

    def formatStack(self, stack_info: str) -> str:
        return escape_controls(super().formatStack(stack_info), keep_newlines=True)


def test_another_format_or_a_traceback_goes_the_standard_way() -> None:
    try:
        raise ValueError("boom\nline\x1b")
    except ValueError:
        info = sys.exc_info()
    for fmt, kwargs in [
        (FORMAT, {}),
        ("%(levelname)s %(name)s: %(message)s", {}),
        (FORMAT, {"datefmt": "%H:%M"}),
        (FORMAT + " %(extra)s", {"defaults": {"extra": "-"}}),
        ("{asctime} {levelname} {name}: {message}", {"style": "{"}),
    ]:
        ours, standard = TextFormatter(fmt, **kwargs), Escaping(fmt, **kwargs)  # type: ignore[arg-type]
        for record in (
            logging.LogRecord("gateway", logging.ERROR, __file__, 1, "failed\n%s", ("x",), info),
            logging.LogRecord("gateway", logging.ERROR, __file__, 1, "m", (), None, sinfo="Stack:\n  here\x1b"),
            logging.LogRecord("gateway", logging.INFO, __file__, 1, "a\x1b %s", ("b",), None),
        ):
            line = ours.format(record)
            record.exc_text = None  # the traceback's text is cached on the record
            assert line == standard.format(record)
            assert ("Traceback" in line or "Stack" in line) == (line.count("\n") > 1)


def test_the_listener_writes_a_burst_in_one_write_and_flushes_when_stopped() -> None:
    stream = CountingStream()
    handler = BatchedStreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    logger = capture(DeferredQueueHandler(records))
    for number in range(50):
        logger.info("line %d", number)
    listener = FlushingQueueListener(records, handler)
    listener.start()  # the burst is queued already: the listener finds it all at once
    listener.stop()
    assert stream.getvalue() == "".join(f"line {number}\n" for number in range(50))
    assert stream.writes == 1


def test_fast_records_of_one_call_site_differ_only_in_time_message_and_arguments() -> None:
    keep = Keep()
    logger = capture(keep)
    records = keep.records
    for status in (200, 404):  # one call site: the second record is made from the first's template
        log_fast(logger, logging.INFO, "%s %d", ("POST", status), {"status": status})
    first, second = records
    assert first is not second
    assert (first.getMessage(), second.getMessage()) == ("POST 200", "POST 404")
    assert (first.status, second.status) == (200, 404)  # type: ignore[attr-defined]
    assert second.created >= first.created
    assert {
        k: v for k, v in vars(first).items() if k not in ("args", "status", "created", "msecs", "relativeCreated")
    } == {k: v for k, v in vars(second).items() if k not in ("args", "status", "created", "msecs", "relativeCreated")}


def test_a_custom_record_factory_still_makes_the_fast_records() -> None:
    made: list[logging.LogRecord] = []
    standard = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = standard(*args, **kwargs)
        record.tagged = True
        made.append(record)
        return record

    keep = Keep()
    logger = capture(keep)
    records = keep.records
    logging.setLogRecordFactory(factory)
    try:
        log_fast(logger, logging.INFO, "%s", ("x",), {"status": 1})
    finally:
        logging.setLogRecordFactory(standard)
    assert records == made
    assert records[0].tagged  # type: ignore[attr-defined]
    assert records[0].status == 1  # type: ignore[attr-defined]


def test_an_extra_that_would_overwrite_a_record_field_is_refused_as_make_record_refuses_it() -> None:
    logger = capture(Keep())
    refused = []
    for key in ("message", "asctime", "lineno", "status_"):
        extra = {"status": 1, key: "x"}
        expected = refusal(lambda: logger.info("m", extra=extra))  # noqa: B023 (called at once)
        assert refusal(lambda: log_fast(logger, logging.INFO, "m", (), extra)) == expected  # noqa: B023
        refused.append(expected is not None)
    assert refused == [True, True, True, False]  # "status_" is no record field


def test_a_logger_class_that_makes_its_own_records_still_makes_the_fast_ones() -> None:
    class Tagging(logging.Logger):
        def makeRecord(self, *args: object, **kwargs: object) -> logging.LogRecord:  # type: ignore[override]
            record = super().makeRecord(*args, **kwargs)  # type: ignore[arg-type]
            record.tagged = True
            return record

    keep = Keep()
    logger = Tagging("tests.fast.tagging")
    logger.handlers[:] = [keep]
    logger.propagate = False
    log_fast(logger, logging.INFO, "%s", ("x",), {"status": 1})
    (record,) = keep.records
    assert record.tagged  # type: ignore[attr-defined]
    assert record.status == 1  # type: ignore[attr-defined]
    assert record.getMessage() == "x"


def test_each_fast_record_carries_the_line_of_its_own_call_however_often_it_is_made() -> None:
    keep = Keep()
    logger = capture(keep)
    expected = []
    for _ in range(3):  # the second and third time, the lines are remembered
        expected.append(sys._getframe().f_lineno + 1)
        log_fast(logger, logging.INFO, "first", (), {})
        expected.append(sys._getframe().f_lineno + 1)
        log_fast(logger, logging.INFO, "second", (), {})
    for blank_lines in range(3):  # new code objects, made and dropped: each its own lines
        exec(compile("\n" * blank_lines + "log_fast(logger, logging.INFO, 'm', (), {})", "<site>", "exec"))
        expected.append(blank_lines + 1)
    assert [record.lineno for record in keep.records] == expected
    for many in range(MAX_REMEMBERED_LINES + 1):  # past the memo's bound: still right
        exec(compile("\n" * many + "log_fast(logger, logging.INFO, 'm', (), {})", "<site>", "exec"))
        assert keep.records[-1].lineno == many + 1


def test_the_listener_gathers_a_burst_that_arrives_after_it_woke() -> None:
    stream = CountingStream()
    handler = BatchedStreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    logger = capture(DeferredQueueHandler(records))
    listener = FlushingQueueListener(records, handler)
    listener.start()  # waiting: the first record wakes it, the rest come while it lets the burst gather
    try:
        for number in range(50):
            logger.info("line %d", number)
    finally:
        listener.stop()
    assert stream.getvalue() == "".join(f"line {number}\n" for number in range(50))
