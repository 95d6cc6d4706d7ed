"""Sleeps until a sans-IO machine's next deadline, then hands it the clock.

``DeadlineTimer(next_deadline, due)`` runs as one task (``run``): it asks ``next_deadline()``
when to wake (None: not until told), sleeps until then, and calls ``due(now)`` with anyio's
clock. ``note(deadline)`` wakes it early when a new deadline comes before the one it sleeps
for (or it sleeps for none), so it asks again. One task per machine, however many deadlines:
the machine keeps them (``gateway.protocol.childstate.Deadlines``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio


class DeadlineTimer:
    def __init__(self, next_deadline: Callable[[], float | None], due: Callable[[float], None]) -> None:
        self._next_deadline = next_deadline
        self._due = due
        self._at: float | None = None  # when the task wakes; None: not until ``note``
        self._wake = anyio.Event()

    def note(self, deadline: float | None) -> None:
        """A deadline was added: wake the task if it comes first."""
        if deadline is not None and (self._at is None or deadline < self._at):
            self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake = anyio.Event()
            self._at = self._next_deadline()
            if self._at is None:
                await self._wake.wait()
                continue
            with anyio.move_on_after(self._at - time.monotonic()):
                await self._wake.wait()
            self._due(time.monotonic())
