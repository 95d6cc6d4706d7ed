"""Who keeps crashing children: a per-server ledger of crashes by principal, and the throttle.

A child that dies while it is serving is restarted at once (``gateway.stdio.pool``): its
death is more likely the request's doing than the command's, so everyone else must not
wait for a backoff. The cost lands on whoever sent the requests instead:

- a crash is **attributed** to the principals that held a lease on the child when it died
  (their requests were in flight). Each of the k principals involved gets 1/k of a strike,
  so a principal that crashes a child alone gets a whole one, and a bystander whose call
  happened to share the child gets a share that the crasher always matches or exceeds;
- they become **suspects** of that pool (the dispatcher's ``suspects``): each of their requests runs
  alone on a child until one ends with the child alive, which clears the principal. So the
  next crash is attributed whole, to its cause, and takes no one else's calls with it: a
  bystander loses at most the calls it had in flight at the first crash;
- a principal with ``CRASH_STRIKES`` or more within the last ``CRASH_WINDOW`` seconds is
  **throttled**: its requests to this server get 429 + ``Retry-After`` (the time until its
  strikes fall below the threshold) before they reach the pool, so no child is started
  or leased for them;
- without authentication every client is the one principal ``anonymous``: then the
  throttle holds back everyone, as ``--max-requests-per-principal`` does. Give clients
  tokens (or a trusted identity header) to keep them apart.

Memory is bounded: only strikes younger than the window are kept.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection
from typing import Final

from gateway.errors import ClientThrottledError

CRASH_STRIKES: Final = 3.0
"""Crashes (shares of crashes) within the window that throttle a principal: one or two can
be bad luck or a server bug; three in a minute from the same caller is a pattern."""
CRASH_WINDOW: Final = 60.0
"""Seconds a crash counts against the principals involved."""


class CrashLedger:
    def __init__(self, strikes: float = CRASH_STRIKES, window: float = CRASH_WINDOW) -> None:
        self.strikes = strikes
        self.window = window
        self._by_principal: dict[str, deque[tuple[float, float]]] = {}  # principal → (when, weight)
        self.throttled = 0  # requests refused, for metrics and tests

    def record(self, principals: Collection[str], now: float) -> None:
        """A serving child died with requests of ``principals`` in flight."""
        if not principals:
            return
        weight = 1.0 / len(principals)
        for principal in principals:
            self._by_principal.setdefault(principal, deque()).append((now, weight))
        self._prune(now)

    def retry_after(self, principal: str, now: float) -> float | None:
        """Seconds until ``principal`` may try again; None when it is not throttled."""
        events = self._by_principal.get(principal)
        if not events:
            return None
        while events and events[0][0] <= now - self.window:
            events.popleft()
        total = sum(weight for _, weight in events)
        if total < self.strikes:
            return None
        for when, weight in events:  # oldest first: the strikes that age out first
            total -= weight
            if total < self.strikes:
                return when + self.window - now
        return self.window  # pragma: no cover - the loop always ends below the threshold

    def check(self, principal: str, now: float, label: str) -> None:
        """Raise ``ClientThrottledError`` when ``principal`` is throttled."""
        if principal not in self._by_principal:  # never charged (or forgotten): every lease asks this
            return
        wait = self.retry_after(principal, now)
        if wait is None:
            return
        self.throttled += 1
        raise ClientThrottledError(
            f"{label}: requests from {principal} crashed this server's children "
            f"{self.strikes:g} times within {self.window:g} s; retry later",
            retry_after=max(1, math.ceil(wait)),
            server=label,
            principal=principal,
        )

    def _prune(self, now: float) -> None:
        for principal in list(self._by_principal):
            events = self._by_principal[principal]
            while events and events[0][0] <= now - self.window:
                events.popleft()
            if not events:
                del self._by_principal[principal]
