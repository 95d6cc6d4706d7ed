"""Logging set-up: human text or one JSON object per line (``--log-format``).

The JSON formatter writes the standard fields (time, level, logger, message) and every
``extra`` the call site gave; keys that look like credentials are redacted, whatever their
source, as a second line of defence (the gateway never logs tokens or mapped header values
on purpose). The rules are ``gateway.protocol.redaction``'s, which also redacts the text the
gateway logs as someone else wrote it (a child's stderr).

Log lines quote what clients and children send (methods, tool names, paths, principals,
stderr), so both formatters escape control characters (``escape_controls``): a newline in a
method name cannot forge a second line, and terminal escape sequences are not replayed.
Tracebacks keep their line breaks (only their other control characters are escaped).

Records go through a queue to a thread that formats and writes them (``configure``), and the
event loop's share of a record is kept small: a record whose arguments cannot change (text
and numbers, the access line's case) is queued as it is, without the copy and the early
formatting ``QueueHandler`` does for safety, and without the handler's lock when no filter
was added to it, a ``SimpleQueue`` being thread-safe (``DeferredQueueHandler``); the thread writes
what it finds queued in one write, not one per line (``BatchedStreamHandler``), and it wakes
once per burst: after the first record of a burst it waits ``LOG_BATCH_SECONDS`` for the rest
(``FlushingQueueListener``). Waking the thread for every line cost more than the line itself:
each wake is a futex call and a hand-over of the GIL, about 130 µs of CPU per request at one
request in flight, where the line's own formatting is a few µs.

**Bounded.** At most ``MAX_LOG_QUEUE_LINES`` lines wait for the thread (checked before a line
is queued): when stderr takes nothing (a full pipe nobody reads, a stalled log shipper, a
terminal paused with Ctrl-S), later lines are dropped and counted (``DROPPED``,
``mcp_gateway_log_lines_dropped_total``) instead of the gateway's memory growing with every
request, and the thread writes one warning with the count once its writes go through again.
"""

from __future__ import annotations

import logging
import logging.handlers
import math
import queue
import sys
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import IO, Any, Final, TypeAlias

import orjson

from gateway.ops.records import NS_CLOCK, clock, moment
from gateway.protocol.redaction import REDACTED as REDACTED
from gateway.protocol.redaction import is_secret as is_secret

# Record attributes that are not extras; uvicorn's color_message repeats the message with ANSI codes.
_STANDARD: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "color_message",
}

# C0 controls, DEL, C1 controls, the Unicode line and paragraph separators, and the
# bidirectional overrides and isolates (which can make a line read as something else).
_ESCAPED: Final = [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES: Final = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _ESCAPED}
_ESCAPES_KEEP_NEWLINES: Final = {c: e for c, e in _ESCAPES.items() if c != 0x0A}


def escape_controls(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with control characters written as ``\\xNN``/``\\uNNNN`` (a backslash
    itself is left alone: the point is that one record stays one line)."""
    if text.isprintable():  # the common case: nothing to do, checked in C
        return text
    return text.translate(_ESCAPES_KEEP_NEWLINES if keep_newlines else _ESCAPES)


def redact(key: str, value: Any) -> Any:
    return REDACTED if is_secret(key) else value


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": _iso_time(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": escape_controls(record.getMessage()),
        }
        attributes = vars(record)
        for key, secret in _extras(tuple(attributes)):
            value = attributes[key]
            if value is not None:
                out[key] = REDACTED if secret else escape_controls(value) if isinstance(value, str) else value
        if record.exc_info:
            out["exception"] = escape_controls(self.formatException(record.exc_info), keep_newlines=True)
        return orjson.dumps(out, default=str).decode()

    _keys: tuple[tuple[str, ...], tuple[tuple[str, bool], ...]] = ((), ())  # a line's keys, and _extras of them

    def format_line(self, line: Line) -> str:
        """What ``format`` writes for the record ``line`` stands for (``LineRoute``)."""
        _, ct, _, levelname, name, msg, args, keys, values = line
        known, keyed = self._keys  # one attribute: a pair is replaced at once, never torn
        if keys is not known:
            keyed = tuple((key, is_secret(key)) for key in keys)  # _extras: ``fits`` took them all
            self._keys = (keys, keyed)
        if args:
            msg = msg % (args[0] if len(args) == 1 and isinstance(args[0], Mapping) and args[0] else args)
        out: dict[str, Any] = {
            "time": _iso_time(moment(ct)[0] if NS_CLOCK else ct),
            "level": levelname.lower(),
            "logger": name,
            "message": escape_controls(msg),
        }
        for (key, secret), value in zip(keyed, values, strict=True):
            if value is not None:
                out[key] = REDACTED if secret else escape_controls(value) if isinstance(value, str) else value
        return orjson.dumps(out, default=str).decode()


@lru_cache(maxsize=256)  # one entry per kind of record (its attributes): a handful of call sites
def _extras(attributes: tuple[str, ...]) -> tuple[tuple[str, bool], ...]:
    """A record's ``extra`` keys in order, each with whether its value is redacted."""
    return tuple((key, is_secret(key)) for key in attributes if key not in _STANDARD)


def fits(keys: tuple[str, ...]) -> bool:
    """Whether ``keys`` are ``extra`` keys a record takes as they are: none twice, none a field
    of a record (``makeRecord`` refuses those) or another key the JSON lines leave out."""
    return len(frozenset(keys)) == len(keys) and _STANDARD.isdisjoint(keys)


def _iso_time(created: float) -> str:
    """``created`` as an ISO 8601 UTC time to the millisecond (what the JSON lines carry)."""
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")


LINE_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The text lines' format (``--log-format text``)."""
_LINE: Final = "%s %s %s: %s"
"""``LINE_FORMAT`` with its fields given in order: the same conversions (``%s``), the same text."""
_MSEC_FORMAT: Final = logging.Formatter.default_msec_format
"""``"%s,%03d"``: the milliseconds after the local time (``TextFormatter.format_line``)."""
_TIMED_LINE: Final = "%s,%03d %s %s: %s"
"""``_LINE`` with the time as ``_MSEC_FORMAT`` writes it."""


class TextFormatter(logging.Formatter):
    """``logging.Formatter`` with control characters escaped (a traceback keeps its lines).

    The local time of a second is formatted once for all the lines of that second (what
    ``formatTime`` would give for each: the same converter, then the milliseconds).

    With ``LINE_FORMAT`` (the gateway's), a record without a traceback or a stack is written
    without ``Formatter.format``'s steps (``usesTime``, ``formatMessage``, the style's
    format over the record's dict): its fields are formatted with ``_LINE``, which gives the
    same text, and the line's control characters are escaped as ``formatMessage`` escapes
    them. ``record.message`` and ``record.asctime`` are set, as ``Formatter.format`` sets
    them. Any other format, or a record with a traceback or a stack, goes the standard way."""

    # One attribute: a pair is replaced at once, never torn. No second is -inf (-1 is one: 1969's last).
    _second: tuple[float, str] = (-math.inf, "")

    def __init__(
        self,
        fmt: str | None = None,
        datefmt: str | None = None,
        style: Any = "%",
        validate: bool = True,
        *,
        defaults: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(fmt, datefmt, style, validate, defaults=defaults)
        self._line = fmt == LINE_FORMAT and style == "%" and not defaults

    def format(self, record: logging.LogRecord) -> str:
        if not self._line or record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)
        message = record.message = record.getMessage()
        asctime = record.asctime = self.formatTime(record, self.datefmt)
        line = _LINE % (asctime, record.levelname, record.name, message)
        return line if line.isprintable() else line.translate(_ESCAPES)

    def format_line(self, line: Line) -> str:
        """What ``format`` writes for the record ``line`` stands for (``LineRoute``; this
        formatter takes lines with ``LINE_FORMAT`` only, ``takes_lines``). With the default
        time format the line is one %-format (``_TIMED_LINE``): the local time of the second,
        then the milliseconds as ``%03d`` truncates them, which is ``LogRecord.msecs``."""
        _, ct, _, levelname, name, msg, args, _, _ = line
        if args:
            msg = msg % (args[0] if len(args) == 1 and isinstance(args[0], Mapping) and args[0] else args)
        if NS_CLOCK or self.datefmt is not None or self.default_msec_format != _MSEC_FORMAT:
            created, msecs = moment(ct)
            if self.datefmt is None and self.default_msec_format:
                asctime = self._local_time(created, msecs)
            else:
                asctime = self.formatTime(_Moment(created, msecs), self.datefmt)  # type: ignore[arg-type]
            text = _LINE % (asctime, levelname, name, msg)
        else:  # moment(ct) on this Python, and _local_time, written out
            known, local = self._second
            if not 0 <= known <= ct < known + 1:  # int(ct) is not the second known (none before 1970 is)
                second = int(ct)
                local = time.strftime(self.default_time_format, self.converter(second))
                if second >= 0:
                    self._second = (second, local)
                known = second
            # ``%03d`` of the milliseconds, as LogRecord's int(…) + 0.0 is written (truncated).
            text = _TIMED_LINE % (local, (ct - known) * 1000, levelname, name, msg)
        return text if text.isprintable() else text.translate(_ESCAPES)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None or self.datefmt is not None or not self.default_msec_format:
            return super().formatTime(record, datefmt)
        return self._local_time(record.created, record.msecs)

    def _local_time(self, created: float, msecs: float) -> str:
        second, text = self._second
        if second != int(created):
            second = int(created)
            text = time.strftime(self.default_time_format, self.converter(second))
            self._second = (second, text)
        return self.default_msec_format % (text, msecs)  # type: ignore[operator]

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return escape_controls(super().formatException(ei), keep_newlines=True)

    def formatStack(self, stack_info: str) -> str:
        return escape_controls(super().formatStack(stack_info), keep_newlines=True)


class _Moment:
    """What ``Formatter.formatTime`` reads of a record: its ``created`` and ``msecs``."""

    __slots__ = ("created", "msecs")

    def __init__(self, created: float, msecs: float) -> None:
        self.created = created
        self.msecs = msecs


FIXED_TYPES: Final = frozenset({str, int, float, bool, type(None)})
"""Argument types whose value cannot change between the call and the listener's formatting."""
LOG_BATCH_SECONDS: Final = 0.01
"""How long the writing thread lets a burst of records gather after its first one: log lines
appear at most this much later, and the thread wakes at most 100 times a second."""
MAX_BATCH_LINES: Final = 256
"""Lines the listener gathers into one write at most (a burst is written as it drains)."""
MAX_LOG_QUEUE_LINES: Final = 10_000
"""Lines (records) that may wait for the writing thread; past it a line is dropped and counted
(``DROPPED``). A queued record is one to two KB, so at most 10-20 MB wait for a stderr that
takes nothing; at 8,000 requests a second it holds about a second of access lines."""


class Dropped:
    """Lines one queue dropped because ``MAX_LOG_QUEUE_LINES`` waited (any thread may drop one:
    counted under a lock, which only the dropping path takes). ``total`` never falls (the
    metric); ``take_unreported`` hands the queue's writing thread what it has not said yet."""

    def __init__(self) -> None:
        self.total = 0
        self._reported = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.total += 1

    def take_unreported(self) -> int:
        with self._lock:
            count, self._reported = self.total - self._reported, self.total
        return count


DROPPED: Final = Dropped()
"""The lines the process's log queue dropped (``configure``'s; ``mcp_gateway_log_lines_dropped_total``)."""


Line: TypeAlias = tuple["LineRoute", Any, int, str, str, str, tuple[Any, ...], tuple[str, ...], tuple[Any, ...]]
"""A line put on the queue without a record (``LineRoute.write``): its route, the clock's
reading (``records.clock``), the level and its name, the logger's name, the message and its
arguments, the ``extra`` keys and their values."""


class LineRoute:
    """The way a line goes when the only handler its record would reach is a
    ``DeferredQueueHandler`` whose listener writes through one ``BatchedStreamHandler`` with a
    formatter that writes lines (``takes_lines``), and nothing else would see the record
    (``line_route``): the line is put on the queue as a tuple (``Line``), and the listener's
    thread writes what the formatter would write for the record. Nothing of a record is made
    on the event loop: no record, no call site, no thread, process or task read, no handler
    called. Made by ``DeferredQueueHandler.route``, one per listener's handlers and formatter."""

    __slots__ = ("_keys", "dropped", "extras", "formatter", "handlers", "max_lines", "put", "queue", "writer")

    def __init__(
        self,
        records: queue.SimpleQueue[Any],
        handlers: tuple[BatchedStreamHandler],
        formatter: LineFormatter,
        max_lines: int = MAX_LOG_QUEUE_LINES,
        dropped: Dropped | None = None,
    ) -> None:
        self.queue: Final = records
        self.put: Final = records.put
        self.max_lines: Final = max_lines  # the queue's bound (``MAX_LOG_QUEUE_LINES``)
        self.dropped: Final = dropped if dropped is not None else Dropped()  # the queue's count
        self.handlers: Final = handlers
        """The listener's handlers when the route was made (``DeferredQueueHandler.route``)."""
        self.writer: Final = handlers[0]
        self.formatter: Final = formatter
        self.extras: Final = type(formatter) is JsonFormatter
        """Whether the formatter writes the ``extra`` values (the JSON lines do, the text lines
        do not): when it does not, the caller may pass none (``write``)."""
        self._keys: tuple[str, ...] | None = None  # the last keys that ``fits``

    def write(
        self, level: int, name: str, msg: str, args: tuple[Any, ...], keys: tuple[str, ...], values: tuple[Any, ...]
    ) -> bool:
        """Queue the line of ``logging.getLogger(name).log(level, msg, *args, extra=dict(zip(keys,
        values)))`` (``msg`` a ``str``), its moment read now; False (nothing queued) when ``keys``
        are not ones a record takes as they are (``fits``): the caller makes the record.
        ``values`` may be ``()`` when the route does not write them (not ``extras``)."""
        if keys is not self._keys:  # a call site's keys are one tuple: checked once
            if not fits(keys):
                return False
            self._keys = keys
        if self.queue.qsize() >= self.max_lines:
            self.dropped.add()
            return True
        self.put((self, clock(), level, getLevelName(level), name, msg, args, keys, values))
        return True


LineFormatter: TypeAlias = "TextFormatter | JsonFormatter"


def takes_lines(formatter: logging.Formatter | None) -> bool:
    """Whether ``formatter`` writes a ``Line`` as it would write its record (``format_line``):
    ``JsonFormatter``, or ``TextFormatter`` with ``LINE_FORMAT``, and not a subclass."""
    return type(formatter) is JsonFormatter or (type(formatter) is TextFormatter and formatter._line)


def line_route(logger: logging.Logger, level: int) -> LineRoute | None:
    """The ``LineRoute`` a record of ``logger`` at ``level`` may take instead of being made, or
    None: it may when ``Logger.handle`` would hand it to one handler only, a
    ``DeferredQueueHandler`` with a route (``DeferredQueueHandler.route``), and nothing could
    tell: the logger is a plain ``Logger`` (not one that makes or handles records its own way),
    enabled and without filters, and the record factory is ``LogRecord`` (another could add
    fields, which the JSON lines would carry). Read on every call, as ``Logger.callHandlers``
    reads the handlers: a handler added anywhere on the way (a test's, ``RecentErrors`` at
    the record's level) sends the record the usual way. The caller checks
    ``logger.isEnabledFor(level)``."""
    if type(logger) is not _LOGGER or logger.filters or logger.disabled or getLogRecordFactory() is not _RECORD:
        return None
    found: logging.Handler | None = None
    current: logging.Logger | None = logger
    while current:
        handlers = current.handlers
        if handlers:  # most loggers on the way have none
            for handler in handlers:
                if level >= handler.level:
                    if found is not None or type(handler) is not DeferredQueueHandler:
                        return None
                    found = handler
        if not current.propagate:
            break
        current = current.parent
    return None if found is None else found.route()  # type: ignore[attr-defined]


_LOGGER: Final = logging.Logger
_RECORD: Final = logging.LogRecord
getLogRecordFactory: Final = logging.getLogRecordFactory
getLevelName: Final = logging.getLevelName


class DeferredQueueHandler(logging.handlers.QueueHandler):
    """``QueueHandler`` for a listener in the same process: a record whose message and
    arguments are text and numbers is queued as it is, so the loop neither copies it nor
    merges its message (the listener formats it, to the same text). Any other record (a
    traceback, a stack, an argument that could change before the listener runs) is prepared
    as ``QueueHandler`` does.

    ``listener``: the ``FlushingQueueListener`` reading this handler's queue, when it is known
    (``configure``): then a line may skip its record (``route``)."""

    listener: FlushingQueueListener | None = None
    _route: LineRoute | None = None
    max_lines: int = MAX_LOG_QUEUE_LINES
    """At most this many records wait on the queue; past it a record is dropped (``dropped``)."""

    def __init__(self, records: queue.SimpleQueue[Any], dropped: Dropped | None = None) -> None:
        """``dropped``: where the queue's drops are counted (``configure``: ``DROPPED``)."""
        super().__init__(records)
        self.records: Final = records
        self.dropped: Final = dropped if dropped is not None else Dropped()

    def enqueue(self, record: logging.LogRecord) -> None:
        records = self.records
        if records.qsize() >= self.max_lines:
            self.dropped.add()
            return
        records.put_nowait(record)

    def route(self) -> LineRoute | None:
        """The ``LineRoute`` to this handler's listener: when no filter was added to this
        handler, the listener reads its queue and writes through one ``BatchedStreamHandler``
        without filters whose formatter ``takes_lines``. Else None (the record is made)."""
        route = self._route
        listener = self.listener
        if (
            route is not None
            and listener is not None
            and listener.handlers is route.handlers
            and listener.queue is route.queue
            and self.queue is route.queue
            and route.writer.formatter is route.formatter
            and not route.writer.filters
            and not self.filters
            and route.max_lines == self.max_lines
            and route.dropped is self.dropped
        ):
            return route
        return self._new_route()

    def _new_route(self) -> LineRoute | None:
        listener = self.listener
        if listener is None or self.filters or listener.queue is not self.queue:
            return None
        handlers = listener.handlers
        if len(handlers) != 1 or type(handlers[0]) is not BatchedStreamHandler or handlers[0].filters:
            return None
        formatter = handlers[0].formatter
        if not takes_lines(formatter):
            return None
        self._route = LineRoute(self.queue, handlers, formatter, self.max_lines, self.dropped)  # type: ignore[arg-type]
        return self._route

    def handle(self, record: logging.LogRecord) -> Any:
        """``Handler.handle`` without the handler's lock, when no filter was added to this
        handler (else as ``Handler.handle``): ``emit`` only puts the record on a
        ``SimpleQueue``, which is thread-safe, and touches nothing else of the handler."""
        if self.filters:
            return super().handle(record)
        self.emit(record)
        return True

    def prepare(self, record: logging.LogRecord) -> Any:
        args = record.args
        if (
            type(record.msg) is str
            and record.exc_info is None
            and record.stack_info is None
            and (not args or (type(args) is tuple and FIXED_TYPES.issuperset(map(type, args))))
        ):
            return record
        return super().prepare(record)


class BatchedStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler whose ``emit`` adds the line to a batch and ``flush`` writes the batch
    in one write (the listener flushes when the queue runs empty, and every
    ``MAX_BATCH_LINES``): one system call per burst instead of one per line."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(stream)
        self._batch: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._batch.append(self.format(record) + self.terminator)
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)
            return
        if len(self._batch) >= MAX_BATCH_LINES:
            self.flush()

    def handle_line(self, line: Line) -> None:
        """``handle`` for a ``Line``: its formatter's text added to the batch, under the lock."""
        try:
            text = line[0].formatter.format_line(line) + self.terminator
        except RecursionError:
            raise
        except Exception:
            self.handleError(line_record(line))
            return
        lock = self.lock
        lock.acquire()  # type: ignore[union-attr]  # as Handler.handle holds it around emit
        try:
            self._batch.append(text)
            if len(self._batch) >= MAX_BATCH_LINES:
                self.flush()
        finally:
            lock.release()  # type: ignore[union-attr]

    def flush(self) -> None:
        self.acquire()
        try:
            if not self._batch:
                return
            text = "".join(self._batch)
            self._batch.clear()
            try:
                self.stream.write(text)
                self.stream.flush()
            except (OSError, ValueError):
                pass  # stderr is gone (a closed pipe): nowhere left to say so; keep serving
        finally:
            self.release()


class FlushingQueueListener(logging.handlers.QueueListener):
    """Flushes its handlers whenever the queue runs empty, and when it stops; wakes once per
    burst of records, not once per record (``LOG_BATCH_SECONDS``). That the queue ran empty is
    asked (``empty()``), not learnt from ``queue.Empty``: raising and catching it once a burst
    cost about 2k instructions of a request at one request in flight."""

    def __init__(
        self, records: queue.SimpleQueue[logging.LogRecord], *handlers: logging.Handler, dropped: Dropped | None = None
    ) -> None:
        """``dropped``: the count of what its queue's handler dropped, reported once the queue
        drains (``configure``: ``DROPPED``); None: none is reported."""
        super().__init__(records, *handlers, respect_handler_level=False)
        self.records = records
        self.dropped = dropped

    def handle(self, record: logging.LogRecord | Line) -> None:
        """A ``Line`` is written by the handler its route names; a record as ``QueueListener`` does."""
        if type(record) is tuple:
            record[0].writer.handle_line(record)
        else:
            super().handle(record)  # type: ignore[arg-type]

    def dequeue(self, block: bool) -> logging.LogRecord:
        records = self.records
        if not block:
            return records.get(block)
        if not records.empty():  # this thread is the queue's one reader: a record is there to get
            return records.get_nowait()
        for handler in self.handlers:  # the burst is over: write it
            handler.flush()
        self._report_drops()
        record = records.get()  # the first record of a burst wakes the thread
        # fenced: QueueListener._sentinel
        if record is not self._sentinel:  # type: ignore[attr-defined]
            time.sleep(LOG_BATCH_SECONDS)  # the rest of the burst is put without waking it
        return record

    def _report_drops(self) -> None:
        """Once the queue has drained, one warning for the lines dropped since the last one."""
        dropped = self.dropped.take_unreported() if self.dropped is not None else 0
        if dropped:
            record = logging.LogRecord(
                "gateway",
                logging.WARNING,
                __file__,
                0,
                "%d log line(s) dropped: the log output fell behind (at most MAX_LOG_QUEUE_LINES wait)",
                (dropped,),
                None,
            )
            for handler in self.handlers:
                handler.handle(record)
                handler.flush()

    def stop(self) -> None:
        super().stop()
        for handler in self.handlers:
            handler.flush()
        self._report_drops()


def line_record(line: Line) -> logging.LogRecord:
    """A record for a ``Line`` the formatter failed on, for ``Handler.handleError`` to report."""
    _, ct, level, _, name, msg, args, keys, values = line
    record = logging.LogRecord(name, level, "", 0, msg, args, None)
    record.created, record.msecs = moment(ct)
    record.__dict__.update(zip(keys, values, strict=False))  # a text line carries no values
    return record


def configure(level: str, fmt: str) -> logging.handlers.QueueListener:
    """Log through a queue: the event loop only enqueues records; a thread formats and writes
    them, so a slow stderr (a full pipe, a busy log shipper) never stalls requests. The
    caller stops the returned listener at exit (which flushes what is queued)."""
    handler = BatchedStreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter(LINE_FORMAT))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = FlushingQueueListener(records, handler, dropped=DROPPED)
    queued = DeferredQueueHandler(records, DROPPED)
    queued.listener = listener
    root = logging.getLogger()
    root.handlers[:] = [queued]
    root.setLevel(level.upper())
    listener.start()
    # uvicorn's own access log would repeat gateway.access in another shape.
    logging.getLogger("uvicorn.access").disabled = True
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    return listener
