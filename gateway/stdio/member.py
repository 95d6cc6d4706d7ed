"""A pool's settings and its members, as the stdio edge names them: ``PoolSettings`` and
``Member`` (``gateway.protocol.dispatchstate``: one child of the pool from its start to its
exit, with its leases and who holds them), and the callbacks a pool offers its users.
``gateway.stdio.pool`` re-exports them; the pool's rules are in ``gateway.protocol.dispatch``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeAlias

from gateway.protocol import dispatchstate
from gateway.protocol.dispatchstate import PoolSettings as PoolSettings
from gateway.protocol.jsonrpc import Notification, Reply, Request
from gateway.stdio.child import StdioChild

if TYPE_CHECKING:
    from gateway.stdio.pool import Pool

Member: TypeAlias = dispatchstate.Member[StdioChild]
Lease: TypeAlias = dispatchstate.Lease[StdioChild]
Action: TypeAlias = dispatchstate.Action[StdioChild]

PoolListener = Callable[["Pool", Notification], None]
LossListener = Callable[["Pool"], None]
"""Called when a started child of the pool exits unplanned (crash), or the pool closes."""
PoolRequestHandler = Callable[["Pool", Request], Awaitable[Reply | None]]
"""Offered a child's unattributable request (``Pool.add_request_handler``); None: not mine."""
