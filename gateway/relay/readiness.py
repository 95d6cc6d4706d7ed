"""Whether this replica can serve: the readiness rule over its servers' states, pure.

A server is in one of three states (``ServerState``, ``Router.state``):

- ``ready``: it has a ready child (or starts children on demand and is not failing);
- ``starting``: no child is ready yet, and its starts are not failing (a cold start, a
  replacement, or a retry after a start failure, during the backoff);
- ``failing``: its pool gave up for now after ``CRASH_LOOP`` start failures in a row
  (``gateway.protocol.supervision``, rule 5): requests fail at once with the last error.

Rules (``/readyz`` applies them after the drain: a draining replica is never ready):

1. A **required** server that is not ready makes the replica unready. A server is required
   when the operator says so (``--ready-requires NAME``, or ``readyRequired: true`` in its
   ``--config`` entry), and the only server of a replica always is: with nothing else to
   serve, a replica whose one server is down cannot serve anything.
2. **No server ready**, no replica ready: whatever is required.
3. A server in its **first start** (no child of it has started or failed to start yet) holds
   the replica: the cold start (an ``npx`` download) is paid before traffic comes, as the
   pre-warm means it to be. Once a start has ended either way, the server holds nothing.
4. Otherwise a server that is not ready (failing, or restarting) is **reported**, not
   blocking: one broken server (an expired token, a removed package) must not take the
   healthy ones out of the Service on every replica, nor send a startup probe into a restart
   loop.

The answer names servers and states only (``/readyz`` is open to anyone); why a server is
not ready (its last error, which quotes the child's stderr) stays on ``/status``.

Imports the standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class ServerState(StrEnum):
    READY = "ready"
    STARTING = "starting"
    FAILING = "failing"


@dataclass(frozen=True, slots=True)
class ServerReadiness:
    """One server as the rule sees it."""

    name: str
    state: ServerState
    required: bool  # rule 1 (the only server is required: ``required_names``)
    first_start: bool = False  # rule 3: no child of it has started or failed to start yet


@dataclass(frozen=True, slots=True)
class Readiness:
    """The rule's answer: whether the replica is ready, and the line ``/readyz`` sends."""

    ready: bool
    text: str


def required_names(configured: Sequence[tuple[str, bool]]) -> frozenset[str]:
    """The servers rule 1 holds the replica for, from each server's name and whether the
    operator requires it: those, and the only server when there is one."""
    if len(configured) == 1:
        return frozenset({configured[0][0]})
    return frozenset(name for name, required in configured if required)


def replica_readiness(servers: Sequence[ServerReadiness]) -> Readiness:
    """Rules 1-4 over every server, in configuration order."""
    not_ready = [server for server in servers if server.state is not ServerState.READY]
    if not not_ready:
        return Readiness(True, "ready\n")
    several = len(servers) > 1
    words = "; ".join(_word(server, several) for server in not_ready)
    blocked = (
        len(not_ready) == len(servers)  # rule 2
        or any(server.required or server.first_start for server in not_ready)  # rules 1, 3
    )
    if blocked:
        return Readiness(False, f"not ready: {words}\n")
    return Readiness(True, f"ready; degraded: {words}\n")  # rule 4


def _word(server: ServerReadiness, several: bool) -> str:
    """``NAME failing``, ``NAME starting``; ``(required)`` after a required one of several."""
    return f"{server.name} {server.state.value}{' (required)' if server.required and several else ''}"
