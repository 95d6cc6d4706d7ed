"""Failure domains: where an unexpected exception stops, so one bug takes down one part.

Structured concurrency makes the task tree the failure tree: an exception a task does not
handle cancels its task group and climbs to the next, up to the app's lifespan. Each failure
domain (a child, a pool, each long-lived service task; ``docs/architecture.md``, "Failure
domains") stops it at its edge with one of these, as an Erlang supervisor or a trio nursery
would: the traceback is logged, what the domain owned is failed with a clear error (the
domain's ``on_fault``), and the rest of the gateway runs on.

- ``contained(log, what, then)``: a ``with`` block that is a boundary. An ``Exception`` from
  it is logged with its traceback and handed to ``on_fault``; cancellation and other
  ``BaseException``\\ s pass (they are how a task group stops, not failures).
- ``Guarded``: a task group's ``start_soon`` whose every task runs inside ``contained``
  (the child's questions, and the tasks it starts for its handshake).
- ``keep_running(loop, log, what)``: a long-lived loop that is started again after a fault,
  ``RESTART_PAUSE`` later.

Only what the gateway did not expect is contained here: errors it raises on purpose
(``GatewayError``) are handled where they are raised.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, Final, Protocol

import anyio
from anyio.abc import TaskGroup

RESTART_PAUSE: Final = 1.0
"""Seconds before a failed long-lived loop runs again: a loop that fails at once each time
costs a log line a second, not a spinning CPU."""

Fault = Callable[[Exception], None]


class TaskStarter(Protocol):
    """What starts a task: ``Guarded`` (or a test's stand-in)."""

    def start_soon(self, func: Callable[..., Coroutine[Any, Any, object]], *args: object) -> None: ...


@contextmanager
def contained(log: logging.Logger, what: str, then: str, on_fault: Fault | None = None) -> Iterator[None]:
    """A boundary around the block: an ``Exception`` is logged (``what`` failed; ``then``: what
    happens now) with its traceback, passed to ``on_fault`` and not raised further."""
    try:
        yield
    except Exception as exc:
        log.error("the gateway failed in %s: %r; %s", what, exc, then, exc_info=exc)
        if on_fault is not None:
            try:
                on_fault(exc)
            except Exception:  # the domain's own clean-up must not carry the failure out
                log.exception("the gateway failed again while containing a failure in %s", what)


class Guarded:
    """``start_soon`` into ``tg``, each task inside ``contained(log, what, then, on_fault)``."""

    __slots__ = ("_log", "_on_fault", "_tg", "_then", "_what")

    def __init__(self, tg: TaskGroup, log: logging.Logger, what: str, then: str, on_fault: Fault | None) -> None:
        self._tg = tg
        self._log = log
        self._what = what
        self._then = then
        self._on_fault = on_fault

    def start_soon(self, func: Callable[..., Coroutine[Any, Any, object]], *args: object) -> None:
        self._tg.start_soon(self._run, func, *args)

    async def _run(self, func: Callable[..., Awaitable[object]], *args: object) -> None:
        with contained(self._log, self._what, self._then, self._on_fault):
            await func(*args)


async def keep_running(loop: Callable[[], Awaitable[None]], log: logging.Logger, what: str) -> None:
    """Run ``loop`` (a long-lived task) until it returns; after a fault, run it again."""
    while True:
        with contained(log, what, f"it runs again in {RESTART_PAUSE:g} s"):
            await loop()
            return
        await anyio.sleep(RESTART_PAUSE)
