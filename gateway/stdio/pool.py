"""Children for one server: start, hand out, replace, stop.

This first pool keeps ``size`` children (default one) and hands out the one with the
fewest requests in flight. A child that exits is replaced with exponential backoff; while
a start is failing, requests fail at once with the start error (``cannot start PROGRAM:
REASON``) instead of waiting. Decisions happen synchronously (no awaits between reading
and updating the table); I/O happens after.

Lifecycle: ``async with Pool(spec) as pool`` runs the supervisor tasks; leaving the
context stops every child with the spec's stop ladder.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import anyio
from anyio.abc import TaskGroup

from gateway.errors import ChildError, ChildStartError, GatewayUnavailableError
from gateway.protocol.jsonrpc import Notification
from gateway.stdio.child import NotificationHandler, RequestHandler, StdioChild, open_child
from gateway.stdio.spec import ChildSpec

log = logging.getLogger("gateway.pool")

BACKOFF_FIRST: Final = 0.5
BACKOFF_MAX: Final = 30.0
"""Restart delays double from BACKOFF_FIRST up to BACKOFF_MAX while starts keep failing."""
STARTUP_WAIT: Final = 120.0
"""How long a request waits for a child that is still starting (npx cold starts)."""


class Slot:
    """One place in the pool: the live child, or the reason there is none."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.child: StdioChild | None = None
        self.last_error: ChildError | None = None
        self.restarts = 0


class Pool:
    def __init__(
        self,
        spec: ChildSpec,
        *,
        size: int = 1,
        gateway_version: str = "0",
        on_request: RequestHandler | None = None,
    ) -> None:
        self.spec = spec
        self.slots = [Slot(i) for i in range(size)]
        self._gateway_version = gateway_version
        self._on_request = on_request
        self._listeners: list[NotificationHandler] = []
        self._tg: TaskGroup | None = None
        self._closing = False
        self._changed = anyio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def __aenter__(self) -> Pool:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        for slot in self.slots:
            self._tg.start_soon(self._supervise, slot)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closing = True
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)

    def add_listener(self, listener: NotificationHandler) -> None:
        """Call ``listener`` with every notification a child sends outside any request."""
        self._listeners.append(listener)

    def _dispatch(self, notification: Notification) -> None:
        for listener in self._listeners:
            listener(notification)

    def is_ready(self) -> bool:
        return any(slot.child is not None and slot.child.is_alive() for slot in self.slots)

    def children(self) -> list[StdioChild]:
        return [s.child for s in self.slots if s.child is not None and s.child.is_alive()]

    async def wait_ready(self) -> StdioChild:
        """The least busy live child; waits for one that is starting; fails fast when starts fail."""
        with anyio.move_on_after(STARTUP_WAIT):
            while True:
                live = self.children()
                if live:
                    return min(live, key=lambda c: c.in_flight)
                failed = [s.last_error for s in self.slots if s.last_error is not None]
                if failed and len(failed) == len(self.slots):
                    raise failed[0]
                await self._changed.wait()
        raise GatewayUnavailableError(
            f"no {self.spec.label} child became ready within {STARTUP_WAIT:g} s", retry_after=5
        )

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[StdioChild]:
        child = await self.wait_ready()
        yield child

    async def _supervise(self, slot: Slot) -> None:
        delay = BACKOFF_FIRST
        while not self._closing:
            started = anyio.current_time()
            try:
                async with open_child(
                    self.spec,
                    gateway_version=self._gateway_version,
                    on_request=self._on_request,
                    on_notification=self._dispatch,
                ) as child:
                    slot.child, slot.last_error = child, None
                    self._notify()
                    delay = BACKOFF_FIRST
                    slot.last_error = await child.wait_exited()
            except ChildStartError as exc:
                slot.last_error = exc
                log.error("%s", exc.message)
            slot.child = None
            slot.restarts += 1
            self._notify()
            if anyio.current_time() - started > BACKOFF_MAX:
                delay = BACKOFF_FIRST
            log.info("restarting %s in %.1f s", self.spec.label, delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)
