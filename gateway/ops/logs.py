"""Logging set-up: human text or one JSON object per line (``--log-format``).

The JSON formatter writes the standard fields (time, level, logger, message) and every
``extra`` the call site gave; keys that look like credentials are redacted, whatever their
source, as a second line of defence (the gateway never logs tokens or mapped header values
on purpose).

Log lines quote what clients and children send (methods, tool names, paths, principals,
stderr), so both formatters escape control characters (``escape_controls``): a newline in a
method name cannot forge a second line, and terminal escape sequences are not replayed.
Tracebacks keep their line breaks (only their other control characters are escaped).
"""

from __future__ import annotations

import logging
import logging.handlers
import queue
import sys
from datetime import UTC, datetime
from typing import Any, Final

import orjson

# Record attributes that are not extras; uvicorn's color_message repeats the message with ANSI codes.
_STANDARD: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "color_message",
}
_SECRET_WORDS: Final = ("authorization", "token", "secret", "password", "api_key", "apikey", "cookie")
REDACTED: Final = "[redacted]"

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
    return REDACTED if any(word in key.lower() for word in _SECRET_WORDS) else value


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": escape_controls(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and value is not None:
                value = redact(key, value)
                out[key] = escape_controls(value) if isinstance(value, str) else value
        if record.exc_info:
            out["exception"] = escape_controls(self.formatException(record.exc_info), keep_newlines=True)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """``logging.Formatter`` with control characters escaped (a traceback keeps its lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return escape_controls(super().formatException(ei), keep_newlines=True)

    def formatStack(self, stack_info: str) -> str:
        return escape_controls(super().formatStack(stack_info), keep_newlines=True)


def configure(level: str, fmt: str) -> logging.handlers.QueueListener:
    """Log through a queue: the event loop only enqueues records; a thread formats and writes
    them, so a slow stderr (a full pipe, a busy log shipper) never stalls requests. The
    caller stops the returned listener at exit (which flushes what is queued)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = logging.handlers.QueueListener(records, handler, respect_handler_level=False)
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(records)]
    root.setLevel(level.upper())
    listener.start()
    # uvicorn's own access log would repeat gateway.access in another shape.
    logging.getLogger("uvicorn.access").disabled = True
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    return listener
