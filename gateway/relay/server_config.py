"""``ServerConfig``: one stdio server behind the gateway, as a value, with the policies that
key its pools (``Isolation``, ``DualEra``, ``CapabilityKeying``, ``RootsKeying``; what each
does is drawn in ``gateway.relay.router``, which applies them).

The command line, ``--config`` and ``gateway.config.Settings`` build and hold these before
anything runs, so this module stays light: it imports values (``ChildSpec``, ``PoolSettings``,
``OAuthPolicy``, ``TaskPolicy``) and named limits, never the router, a pool or anyio's
machinery, so that ``mcp-stdio-gateway --help`` loads no server (issue #41 item 7).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from gateway.oauth.policy import OAuthPolicy
from gateway.protocol.dispatchstate import PoolSettings
from gateway.protocol.ingress import MAX_BATCH_MESSAGES
from gateway.protocol.tasks import DEFAULT_FIRST_ROUND as DEFAULT_TASK_FIRST_ROUND
from gateway.protocol.tasks import DEFAULT_TTL as DEFAULT_TASK_TTL
from gateway.protocol.tasks import TaskPolicy
from gateway.stdio.spec import ChildSpec

MAX_SESSIONS_PER_PRINCIPAL: Final = 256
"""Live sessions one principal may hold per server (as many as the requests it may have in
flight, ``--max-requests-per-principal``); past this, 429. Anonymous clients are counted by
peer address (their ``owner``). ``gateway.relay.sessions`` enforces it."""


class Isolation(StrEnum):
    SHARED = "shared"
    PRINCIPAL = "principal"
    SESSION = "session"


class DualEra(StrEnum):
    PER_CLIENT = "per-client"
    MODERN = "modern"
    LEGACY = "legacy"


class CapabilityKeying(StrEnum):
    """What a server's legacy children are told of their clients' capabilities."""

    SHARED = "shared"  # the configured set: one pool serves every client, each question checked per call
    EXACT = "exact"  # each client's own set within the configured one: a pool per set told


class RootsKeying(StrEnum):
    """Whether a client's roots set gets children of its own."""

    AUTO = "auto"  # learned: once a child fetches roots outside any call (it keeps them)
    ALWAYS = "always"  # the server keeps roots (a filesystem server: roots are access rights)
    NEVER = "never"  # the server reads roots only inside a call, from that call's client


ROOTS_LEARN_WAIT: Final = 5.0
"""Seconds after a server's first child is up in which a call of a client that declares roots
waits to learn whether the server keeps roots (its children fetch them outside any call: the npm
servers that do, server-filesystem and server-everything, within ~10 ms of ``initialized``).
A server none of whose children asked by then is taken not to keep them, until one asks. The
default of ``--roots-learn-wait`` (per server: a server that fetches later needs more; 0 decides
at once, for a server known to fetch none at start-up, as ``--roots-keying never`` would)."""
MAX_ROOTS_LEARN_WAIT: Final = 60.0
"""The longest ``--roots-learn-wait``: a call waits it out once per server, at most."""


@dataclass(frozen=True)
class ServerConfig:
    """One stdio server behind the gateway, with its pool and isolation policy."""

    name: str
    spec: ChildSpec
    pool: PoolSettings = field(default_factory=PoolSettings)
    isolation: Isolation = Isolation.SHARED
    env_from_headers: Mapping[str, str] = field(default_factory=dict)  # lower-case header → env var
    max_sessions_per_principal: int = MAX_SESSIONS_PER_PRINCIPAL  # legacy sessions one principal may hold
    max_batch_size: int = MAX_BATCH_MESSAGES  # messages in one 2025-03-26 batch
    oauth: OAuthPolicy | None = None  # access tokens checked against an issuer (gateway.oauth)
    dual_era: DualEra = DualEra.PER_CLIENT
    capability_keying: CapabilityKeying = CapabilityKeying.SHARED
    roots_keying: RootsKeying = RootsKeying.AUTO
    roots_learn_wait: float = ROOTS_LEARN_WAIT  # seconds ``auto`` learns for (``--roots-learn-wait``)
    task_tools: tuple[str, ...] = ()  # tool-name patterns whose calls become tasks (gateway.protocol.tasks)
    task_ttl: float = DEFAULT_TASK_TTL  # seconds a task and its outcome are kept
    task_first_round: float = DEFAULT_TASK_FIRST_ROUND  # seconds to wait for a first question
    ready_required: bool = False  # not ready, it makes the replica unready (gateway.relay.readiness)

    def task_policy(self) -> TaskPolicy:
        return TaskPolicy(tools=self.task_tools, ttl=self.task_ttl, first_round=self.task_first_round)
