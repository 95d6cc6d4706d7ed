"""Logging set-up: human text or one JSON object per line (``--log-format``).

The JSON formatter writes the standard fields (time, level, logger, message) and every
``extra`` the call site gave; keys that look like credentials are redacted, whatever their
source, as a second line of defence (the gateway never logs tokens or mapped header values
on purpose).
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


def redact(key: str, value: Any) -> Any:
    return REDACTED if any(word in key.lower() for word in _SECRET_WORDS) else value


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and value is not None:
                out[key] = redact(key, value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def configure(level: str, fmt: str) -> logging.handlers.QueueListener:
    """Log through a queue: the event loop only enqueues records; a thread formats and writes
    them, so a slow stderr (a full pipe, a busy log shipper) never stalls requests. The
    caller stops the returned listener at exit (which flushes what is queued)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
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
