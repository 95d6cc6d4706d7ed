"""Waiting on the gateway's log records instead of polling it.

The gateway runs in the test's process and logs what happens as it happens (a child ready, a pool
failing, a question held, a request answered: ``gateway.access``). ``recording(...)`` collects
the records of the loggers named, and ``Records.wait_for`` sleeps on an event until a matching
record has come (callers bound it with ``anyio.fail_after``): no request is sent to find out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio


class Records(logging.Handler):
    """Every record of the loggers it is added to; ``wait_for`` waits, on an event, for matches."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._changed = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:  # called on the event loop, by the gateway
        self.records.append(record)
        self._changed.set()
        self._changed = anyio.Event()

    def matching(self, predicate: Callable[[logging.LogRecord], bool]) -> list[logging.LogRecord]:
        return [record for record in self.records if predicate(record)]

    async def wait_for(self, predicate: Callable[[logging.LogRecord], bool], count: int = 1) -> logging.LogRecord:
        """The ``count``-th record (from the start of the recording) for which ``predicate`` holds."""
        while True:
            changed = self._changed
            found = self.matching(predicate)
            if len(found) >= count:
                return found[count - 1]
            await changed.wait()

    async def wait_for_text(self, text: str, count: int = 1) -> logging.LogRecord:
        """The ``count``-th record whose message contains ``text``."""
        return await self.wait_for(lambda record: text in record.getMessage(), count)

    def errors(self) -> list[str]:
        return [record.getMessage() for record in self.records if record.levelno >= logging.ERROR]


@contextmanager
def recording(*names: str, level: int = logging.DEBUG) -> Iterator[Records]:
    """The records of the loggers ``names`` (and their children) at ``level`` and above."""
    records = Records()
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(records)
        if logger.getEffectiveLevel() > level:
            logger.setLevel(level)
    try:
        yield records
    finally:
        for logger, old in zip(loggers, levels, strict=True):
            logger.removeHandler(records)
            logger.setLevel(old)
