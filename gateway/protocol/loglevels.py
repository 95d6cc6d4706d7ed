"""MCP log levels (RFC 5424 severities, ``server/utilities/logging``) and their order.

``notifications/message`` goes to a client only at or above the level it asked for: a
modern request's ``_meta["io.modelcontextprotocol/logLevel"]``, or a legacy session's
``logging/setLevel``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Final

LOG_MESSAGE: Final = "notifications/message"
SET_LEVEL: Final = "logging/setLevel"
LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
_RANK: Final = {name: rank for rank, name in enumerate(LEVELS)}
_PYTHON: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}


def is_level(value: Any) -> bool:
    return isinstance(value, str) and value in _RANK


def at_least(level: Any, minimum: str) -> bool:
    """True if ``level`` (a message's) is at or above ``minimum``; an unknown level never is."""
    return is_level(level) and _RANK[level] >= _RANK.get(minimum, len(LEVELS))


def most_verbose(levels: Iterable[Any]) -> str | None:
    """The lowest of ``levels`` (what a child shared by clients with these levels must emit
    so that each still gets what it asked for); unknown values and None are skipped."""
    known = [level for level in levels if is_level(level)]
    return min(known, key=_RANK.__getitem__) if known else None


def python_level(level: Any) -> int:
    """The stdlib logging level the gateway logs a child's message at (unknown: INFO)."""
    return _PYTHON.get(level, logging.INFO) if isinstance(level, str) else logging.INFO
