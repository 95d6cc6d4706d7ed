"""A child's stderr in the gateway's log: one record per line (``--child-stderr-log``, on by default).

A server's own diagnostics (an expired credential, a rate-limit warning, a deprecation) are
written to its stderr; the child's stderr pump (``gateway.stdio.child``) drains it into the tail
that errors and ``/status`` quote, and hands each complete line here. Each becomes a record of
the ``gateway.child.stderr`` logger at INFO, with the fields ``event`` (``stderr``), ``server``,
``pool``, ``pid`` and ``line``; the message reads ``child LABEL (pid N) stderr: LINE``.

- **Bounded**: a line is cut at the tail's bound (``STDERR_LINE_CHARS``), and each child may
  log ``STDERR_LOG_BURST`` lines at once and ``STDERR_LOG_RATE`` a second after that
  (``gateway.protocol.throttle``). What it writes faster is left out of the log (never out of
  the tail) and counted: a record with ``event`` ``stderr_dropped`` and ``dropped`` (the count)
  comes before the next line logged, or when stderr ends.
- **Redacted** by the log's rules (``gateway.protocol.redaction``): the value of a pair whose
  name looks like a credential (``API_KEY=…``, ``"password": "…"``), a bearer token and a URL's
  password become ``[redacted]``. Control characters are escaped by the formatters
  (``gateway.ops.logs``), as in every record.
- Nothing is done for a line while the logger would drop it (``--log-level warning``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

from gateway.protocol.redaction import redact_text
from gateway.protocol.throttle import LineThrottle
from gateway.stdio.spec import STDERR_LOG_BURST, STDERR_LOG_RATE

log = logging.getLogger("gateway.child.stderr")

LINE: Final = "stderr"
"""The ``event`` of a line's record."""
DROPPED: Final = "stderr_dropped"
"""The ``event`` of the record that counts the lines left out."""


class StderrLog:
    """One child's stderr lines as log records (the module doc). ``fields``: the child's
    ``server``, ``pool`` and ``pid``, added to every record."""

    def __init__(self, label: str, fields: Mapping[str, object], now: float) -> None:
        self._label = label
        self._pid = fields.get("pid")
        self._fields = dict(fields)
        self._throttle = LineThrottle(STDERR_LOG_RATE, STDERR_LOG_BURST, now)

    def lines(self, lines: list[str], now: float) -> None:
        """Log ``lines`` (complete, non-empty, cut), as the bucket lets them through."""
        if not lines or not log.isEnabledFor(logging.INFO):
            return
        for text in lines:
            dropped = self._throttle.admit(now)
            if dropped is None:
                continue
            if dropped:
                self._report(dropped, "")
            line = redact_text(text)
            log.info(
                "child %s (pid %s) stderr: %s",
                self._label,
                self._pid,
                line,
                extra={**self._fields, "event": LINE, "line": line},
            )

    def close(self) -> None:
        """Stderr ended: count what was left out and not reported yet."""
        dropped = self._throttle.close()
        if dropped and log.isEnabledFor(logging.INFO):
            self._report(dropped, " before its stderr ended")

    def _report(self, dropped: int, when: str) -> None:
        log.info(
            "child %s (pid %s): %d stderr lines left out of the log%s (more than %g a second)",
            self._label,
            self._pid,
            dropped,
            when,
            STDERR_LOG_RATE,
            extra={**self._fields, "event": DROPPED, "dropped": dropped},
        )
