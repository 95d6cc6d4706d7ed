"""A pool's settings and its members, as the stdio edge names them: ``PoolSettings`` and
``Member`` (``gateway.protocol.dispatchstate``: one child of the pool from its start to its
exit, with its leases and who holds them; ``member_status``: what ``/status`` shows of one), and
the registry of who hears a pool's children outside any request (``PoolHooks``).
``gateway.stdio.pool`` re-exports them; the pool's rules are in ``gateway.protocol.dispatch``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from gateway.protocol import dispatchstate
from gateway.protocol.dispatchstate import PoolSettings as PoolSettings
from gateway.protocol.jsonrpc import Notification, Reply, Request
from gateway.stdio.child import StdioChild
from gateway.stdio.handshake import StartWait

if TYPE_CHECKING:
    from gateway.stdio.pool import Pool

STATUS_STDERR_LINES: Final = 5
"""Last stderr lines of each child shown by /status and /ui (the full tail goes into errors)."""

Member: TypeAlias = dispatchstate.Member[StdioChild]
StdioPoolAction: TypeAlias = dispatchstate.PoolAction[StdioChild]

PoolListener = Callable[["Pool", Notification], None]
LossListener = Callable[["Pool"], None]
"""Called when a started child of the pool exits unplanned (crash), or the pool closes."""
PoolRequestHandler = Callable[["Pool", Request], Awaitable[Reply | None]]
"""Offered a child's unattributable request (``PoolHooks.add_request_handler``); None: not mine."""
log = logging.getLogger("gateway.stdio.pool")

ParkedReleaser = Callable[["Pool", str], bool]
"""Asked to end the oldest call of a principal parked on a pool's children (dispatch rule 5's
fair share, ``ReleaseParked``); True when it ended one."""


class PoolHooks:
    """Who hears of what a pool's children say outside any request, and who ends a parked call
    for a waiting asker: one registry, shared by every pool of a server
    (``gateway.relay.pools.RunningPools`` passes its own to each pool it opens), so a listener
    added once hears every pool, those opened later included. Each call names the pool."""

    def __init__(self) -> None:
        self._listeners: list[PoolListener] = []
        self._loss_listeners: list[LossListener] = []
        self._request_handlers: list[PoolRequestHandler] = []
        self._parked_releasers: list[ParkedReleaser] = []

    def add_listener(self, listener: PoolListener) -> None:
        """Call ``listener(pool, notification)`` for every notification a child of a pool
        sends outside any request (the pool says whose it is: sessions served by it)."""
        self._listeners.append(listener)

    def add_loss_listener(self, listener: LossListener) -> None:
        """Call ``listener(pool)`` when a started child exits unplanned or a pool closes: state
        that the gateway emulates on top of the pool's children (listens) must end then."""
        self._loss_listeners.append(listener)

    def add_request_handler(self, handler: PoolRequestHandler) -> None:
        """Offer ``handler(pool, request)`` every request a child of a pool sends that no
        exchange carries (unattributable); the first reply that is not None answers it, and
        with none the gateway answers locally (``gateway.protocol.inputs.local_answer``)."""
        self._request_handlers.append(handler)

    def add_parked_releaser(self, releaser: ParkedReleaser) -> None:
        """Ask ``releaser(pool, principal)`` to end a parked call when a dispatcher says so."""
        self._parked_releasers.append(releaser)

    def release_parked(self, pool: Pool, principal: str) -> None:
        if not any(releaser(pool, principal) for releaser in self._parked_releasers):
            log.info("%s: no parked call of %s to end for a waiting asker", pool.label, principal)

    async def child_request(self, pool: Pool, request: Request) -> Reply | None:
        for handler in self._request_handlers:
            reply = await handler(pool, request)
            if reply is not None:
                return reply
        return None

    def lost(self, pool: Pool) -> None:
        for listener in self._loss_listeners:
            listener(pool)

    def broadcast(self, pool: Pool, notification: Notification) -> None:
        for listener in self._listeners:
            listener(pool, notification)


CHILD_STATES: Final = ("ready", "starting", "stalled", "retiring")
"""The states ``member_state`` gives a child: ``/status`` shows them, and the
``mcp_gateway_children`` gauge counts each (every one, 0 included)."""


def member_state(m: Member) -> str:
    """One of ``CHILD_STATES``: ``stalled`` while its stdin takes nothing (new requests go to
    other children), ``retiring`` once it takes no more."""
    return "retiring" if m.retiring else "stalled" if m.stalled else "ready" if m.is_live else "starting"


def member_status(m: Member, now: float, start: StartWait | None) -> dict[str, Any]:
    """One child of a pool as ``/status`` (and ``/ui``) show it; ``start``: what its handshake
    waits for, while it starts."""
    return {
        "pid": m.child.pid if m.child else None,
        "state": member_state(m),
        "era": m.child.info.era.value if m.child and m.child.info else None,
        "protocol_version": m.child.info.version if m.child and m.child.info else None,
        "in_flight": m.leases,
        "asking": m.asking_leases,
        "questions_open": m.child.open_questions if m.child else 0,
        "served": m.served,
        "uptime_seconds": round(now - m.started_at, 3),
        "stderr": m.child.stderr_tail[-STATUS_STDERR_LINES:] if m.child else [],
        "waiting_for": start.describe() if m.child is None and start is not None else None,
    }
