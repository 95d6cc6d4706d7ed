"""Where a child's stdout is acted on: in the event loop's read callback, or in a task.

A real child's stdout is read by the event loop (``gateway.stdio.backend.StdoutReader``) and
its lines go through the session machine in the read callback itself, so a reply reaches
its request's task in the loop turn the pipe became readable. A read callback runs outside
any task, where anyio cannot start a task or make a cancel scope; so of the machine's
actions only those that settle an exchange or queue bytes (``INLINE``: an answer, a
notification, a failure, a line for stdin, a log line) are carried out there. The first
other one (a question, which starts a task; an unattributed request; a broadcast; a
change), and every action after it until the queue is empty again, is carried out by the
child's action task (``Carried.run``), in order: nothing overtakes what came before it, but
``ChildFacts``: the machine's facts *now*, for the pool's dispatcher (they lead the actions
of their event), are carried out at once also when actions wait, so the dispatcher's copy is
never behind the machine (what it decides from when a request comes meanwhile).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Final

from gateway.protocol.childactions import Answered, ChildAction, ChildFacts, Deliver, Failed, Log, Write
from gateway.stdio.exchange import Exchange

INLINE: Final = (Answered, Deliver, Failed, Write, Log, ChildFacts)
"""Actions carried out where they are taken: they set futures, queue bytes and copy facts, no more."""


class Carried:
    """A child's actions, carried out by ``apply`` inline or, from the first that needs a
    task, by ``run`` (see the module doc)."""

    def __init__(self, apply: Callable[[Sequence[ChildAction[Exchange]]], None]) -> None:
        self._apply = apply
        self._later: list[ChildAction[Exchange]] = []
        self._waiter: asyncio.Future[None] | None = None

    def take(self, actions: Sequence[ChildAction[Exchange]]) -> None:
        """Carry out ``actions`` now, up to the first that needs a task (from any context)."""
        if not self._later:
            for n, action in enumerate(actions):
                if not isinstance(action, INLINE):
                    self._apply(actions[:n])
                    actions = actions[n:]
                    break
            else:
                self._apply(actions)
                return
        elif actions and isinstance(actions[0], ChildFacts):  # never behind the machine (the module doc)
            self._apply(actions[:1])
            actions = actions[1:]
            if not actions:
                return
        self._later.extend(actions)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def flush(self) -> None:
        """Carry out what waits for the task, now (in a task: at the end of the child's stdout)."""
        later, self._later = self._later, []
        self._apply(later)

    async def run(self) -> None:
        """The child's action task: carries out what ``take`` left to it, until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            if not self._later:
                self._waiter = waiter = loop.create_future()
                try:
                    await waiter
                finally:
                    self._waiter = None
            self.flush()
