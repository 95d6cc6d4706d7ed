"""A token bucket for log lines, with a count of what it dropped: the clock is passed in.

``LineThrottle(rate, burst, now)`` lets ``burst`` lines through at once and ``rate`` a second
after that; what comes faster is dropped and counted. The count is handed back once, with
the first line let through after the drops (``admit``), or when the source ends (``close``),
so the log says how many lines it did not show, and when.

Rules:

1. The bucket starts full (``burst`` tokens) and gains ``rate`` tokens a second, never more
   than ``burst``. A line takes one token; with less than one, it is dropped and counted.
2. ``admit(now)`` is None for a dropped line; else the number of lines dropped since the last
   count was handed back (0: none), which the caller reports before the line it lets through.
   Under a flood that goes on, that is at most one report per line let through: at most
   ``2 × rate`` records a second.
3. ``close()`` hands back what was dropped and not yet reported, once.
4. A clock that goes back (it never should: callers pass a monotonic one) adds no tokens.

Imports: the standard library only.
"""

from __future__ import annotations


class LineThrottle:
    """Rules 1–4 (the module doc)."""

    __slots__ = ("_burst", "_dropped", "_last", "_rate", "_tokens")

    def __init__(self, rate: float, burst: int, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a line throttle needs a positive rate and a burst of at least 1, not {rate}, {burst}")
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._last = now
        self._dropped = 0

    @property
    def dropped(self) -> int:
        """Lines dropped and not reported yet."""
        return self._dropped

    def admit(self, now: float) -> int | None:
        """Rule 2: None (drop this line), or the count of dropped lines to report before it."""
        if now > self._last:
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
            self._last = now
        if self._tokens < 1.0:
            self._dropped += 1
            return None
        self._tokens -= 1.0
        dropped, self._dropped = self._dropped, 0
        return dropped

    def close(self) -> int:
        """Rule 3."""
        dropped, self._dropped = self._dropped, 0
        return dropped
