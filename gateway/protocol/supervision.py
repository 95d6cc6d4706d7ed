"""When a pool restarts a child, and when it gives up: the pool's supervision policy, pure.

Rules (``gateway.stdio.pool`` applies them; the clock is the caller's):

1. **A planned exit** (the pool retired the child: idle, old, recycled) changes nothing
   here: it is replaced at once if the pool needs it.
2. **Died while serving** (requests were in flight when it went): the command works, and the
   crash is more likely a request's doing, so the child is restarted at once and the streak
   of start failures is cleared. The principals in flight are charged elsewhere
   (``gateway.stdio.crashes``), never everyone with a backoff.
3. **A start failure**: the command did not start, the child died before its handshake, or
   it exited within ``QUICK_EXIT`` seconds of it with nothing in flight (it never served).
   Each one in a row doubles the delay before the next start, from ``BACKOFF_FIRST`` up to
   ``BACKOFF_MAX``.
4. **Any other exit** (it served, then went while idle) clears the streak.
5. **Failing**: ``CRASH_LOOP`` start failures in a row mark the pool failing (requests then
   fail at once with the last error, readiness reports it), until a start succeeds
   (``started``).
6. **A gateway fault** (the gateway's own code failed on the child, and stopped it:
   ``ChildFaultError``) is unplanned but nobody's doing: no principal is charged. It counts in
   the streak as a start failure does, so a fault that comes back each time is restarted
   after the same doubling backoff, never in a spin, and can make the pool failing. A
   planned exit during which the gateway failed is a fault too.

Imports: standard library only. No I/O, clock or async.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

BACKOFF_FIRST: Final = 0.5
BACKOFF_MAX: Final = 30.0
"""Restart delays double from BACKOFF_FIRST up to BACKOFF_MAX while children keep failing."""
QUICK_EXIT: Final = 10.0
"""A child that exits within this many seconds of its handshake, with no request in flight,
never served: it counts as a start failure."""
CRASH_LOOP: Final = 5
"""Consecutive start failures that mark the pool failing."""


class ExitKind(Enum):
    PLANNED = "planned"  # rule 1
    DIED_SERVING = "died serving"  # rule 2
    START_FAILURE = "start failure"  # rule 3
    SERVED = "served"  # rule 4
    GATEWAY_FAULT = "gateway fault"  # rule 6


def classify(*, planned: bool, started: bool, uptime: float, charged: bool, fault: bool = False) -> ExitKind:
    """Which rule an exit falls under. ``started``: the handshake completed; ``uptime``: seconds
    since then; ``charged``: requests were in flight when the child died; ``fault``: the
    gateway failed on the child (rule 6)."""
    if fault:
        return ExitKind.GATEWAY_FAULT
    if planned and started:
        return ExitKind.PLANNED
    if charged:
        return ExitKind.DIED_SERVING
    if not started or uptime < QUICK_EXIT:
        return ExitKind.START_FAILURE
    return ExitKind.SERVED


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: ExitKind
    delay: float  # seconds before the next start may begin
    now_failing: bool  # this exit made the pool failing (rule 5), to be logged once


class Supervision:
    """One pool's streak of start failures and whether it is failing."""

    __slots__ = ("failing", "quick_failures")

    def __init__(self) -> None:
        self.quick_failures = 0
        self.failing = False

    def exited(self, *, planned: bool, started: bool, uptime: float, charged: bool, fault: bool = False) -> Verdict:
        kind = classify(planned=planned, started=started, uptime=uptime, charged=charged, fault=fault)
        now_failing = False
        if kind in (ExitKind.START_FAILURE, ExitKind.GATEWAY_FAULT):
            self.quick_failures += 1
            if self.quick_failures >= CRASH_LOOP and not self.failing:
                self.failing = now_failing = True
        elif kind is not ExitKind.PLANNED:
            self.quick_failures = 0
        return Verdict(kind, self.backoff(), now_failing)

    def backoff(self) -> float:
        """Rule 3's delay for the current streak (0 when there is none)."""
        if self.quick_failures == 0:
            return 0.0
        doublings = min(self.quick_failures - 1, 64)  # past BACKOFF_MAX long before; 2.0 ** 1024 overflows
        return float(min(BACKOFF_FIRST * 2.0**doublings, BACKOFF_MAX))

    def started(self) -> bool:
        """A child completed its handshake; True if the pool was failing until now."""
        was, self.failing = self.failing, False
        return was
