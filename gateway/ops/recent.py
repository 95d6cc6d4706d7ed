"""The last warnings and errors the gateway logged, for ``/status`` and the ``/ui`` page.

``RecentErrors`` is a logging handler on the ``gateway`` logger that keeps the last
``RECENT_ERRORS`` records at WARNING or above (start failures, crashes, failed liveness
checks, dropped output), each as time, level, logger and message — the same text the log
has, nothing more (the log never carries credentials). The app attaches it for its
lifetime (``attached``), so several apps in one process (tests) each see their own.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from typing import Any, Final

RECENT_ERRORS: Final = 20
"""Records kept: enough to see what went wrong lately, bounded whatever a crash loop logs."""
MAX_MESSAGE_CHARS: Final = 1000
"""A kept message is cut here (stderr tails can make long ones)."""
LOGGER: Final = "gateway"
_NO_LOCK: Final = nullcontext()


class RecentErrors(logging.Handler):
    def __init__(self, size: int = RECENT_ERRORS) -> None:
        super().__init__(logging.WARNING)
        self.entries: deque[dict[str, Any]] = deque(maxlen=size)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not break logging
            message = str(record.msg)
        self.entries.append(
            {
                "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="seconds"),
                "level": record.levelname.lower(),
                "logger": record.name,
                "message": message[:MAX_MESSAGE_CHARS],
            }
        )

    def snapshot(self) -> list[dict[str, Any]]:
        """Newest first (under the handler's lock: ``handle`` holds it while appending)."""
        with self.lock or _NO_LOCK:
            return list(reversed(self.entries))

    @contextmanager
    def attached(self) -> Iterator[RecentErrors]:
        logger = logging.getLogger(LOGGER)
        logger.addHandler(self)
        try:
            yield self
        finally:
            logger.removeHandler(self)
