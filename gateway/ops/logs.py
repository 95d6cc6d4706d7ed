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
"""

from __future__ import annotations

import logging
import logging.handlers
import queue
import sys
import time
from datetime import UTC, datetime
from functools import lru_cache
from typing import IO, Any, Final

import orjson

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


@lru_cache(maxsize=256)  # one entry per kind of record (its attributes): a handful of call sites
def _extras(attributes: tuple[str, ...]) -> tuple[tuple[str, bool], ...]:
    """A record's ``extra`` keys in order, each with whether its value is redacted."""
    return tuple((key, is_secret(key)) for key in attributes if key not in _STANDARD)


def _iso_time(created: float) -> str:
    """``created`` as an ISO 8601 UTC time to the millisecond (what the JSON lines carry)."""
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")


LINE_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The text lines' format (``--log-format text``)."""
_LINE: Final = "%s %s %s: %s"
"""``LINE_FORMAT`` with its fields given in order: the same conversions (``%s``), the same text."""


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

    _second: tuple[int, str] = (-1, "")  # one attribute: a pair is replaced at once, never torn

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

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None or self.datefmt is not None or not self.default_msec_format:
            return super().formatTime(record, datefmt)
        second, text = self._second
        if second != int(record.created):
            second = int(record.created)
            text = time.strftime(self.default_time_format, self.converter(second))
            self._second = (second, text)
        return self.default_msec_format % (text, record.msecs)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return escape_controls(super().formatException(ei), keep_newlines=True)

    def formatStack(self, stack_info: str) -> str:
        return escape_controls(super().formatStack(stack_info), keep_newlines=True)


_FIXED_TYPES: Final = frozenset({str, int, float, bool, type(None)})
"""Argument types whose value cannot change between the call and the listener's formatting."""
LOG_BATCH_SECONDS: Final = 0.01
"""How long the writing thread lets a burst of records gather after its first one: log lines
appear at most this much later, and the thread wakes at most 100 times a second."""
MAX_BATCH_LINES: Final = 256
"""Lines the listener gathers into one write at most (a burst is written as it drains)."""


class DeferredQueueHandler(logging.handlers.QueueHandler):
    """``QueueHandler`` for a listener in the same process: a record whose message and
    arguments are text and numbers is queued as it is, so the loop neither copies it nor
    merges its message (the listener formats it, to the same text). Any other record (a
    traceback, a stack, an argument that could change before the listener runs) is prepared
    as ``QueueHandler`` does."""

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
            and (not args or (type(args) is tuple and _FIXED_TYPES.issuperset(map(type, args))))
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

    def __init__(self, records: queue.SimpleQueue[logging.LogRecord], *handlers: logging.Handler) -> None:
        super().__init__(records, *handlers, respect_handler_level=False)
        self.records = records

    def dequeue(self, block: bool) -> logging.LogRecord:
        records = self.records
        if not block:
            return records.get(block)
        if not records.empty():  # this thread is the queue's one reader: a record is there to get
            return records.get_nowait()
        for handler in self.handlers:  # the burst is over: write it
            handler.flush()
        record = records.get()  # the first record of a burst wakes the thread
        # fenced: QueueListener._sentinel
        if record is not self._sentinel:  # type: ignore[attr-defined]
            time.sleep(LOG_BATCH_SECONDS)  # the rest of the burst is put without waking it
        return record

    def stop(self) -> None:
        super().stop()
        for handler in self.handlers:
            handler.flush()


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
    listener = FlushingQueueListener(records, handler)
    root = logging.getLogger()
    root.handlers[:] = [DeferredQueueHandler(records)]
    root.setLevel(level.upper())
    listener.start()
    # uvicorn's own access log would repeat gateway.access in another shape.
    logging.getLogger("uvicorn.access").disabled = True
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    return listener
