"""Settings of the ``pool and isolation`` section: how many children, how long, who shares one.

Declared as ``gateway.settings.declaration.Setting``; ``gateway.settings`` gathers them."""

from __future__ import annotations

from typing import Final

from gateway.protocol.attribution import AskPolicy
from gateway.protocol.dispatchstate import PoolSettings
from gateway.relay.server_config import (
    MAX_ROOTS_LEARN_WAIT,
    ROOTS_LEARN_WAIT,
    CapabilityKeying,
    DualEra,
    Isolation,
    RootsKeying,
)
from gateway.settings import convert
from gateway.settings.declaration import POOL, Setting, rule

_POOL: Final = PoolSettings()

SETTINGS: Final[tuple[Setting, ...]] = (
    Setting(
        "--pool-min",
        key="pool.min",
        target="pool.min_size",
        brief=True,
        kind=int,
        default=_POOL.min_size,
        metavar="N",
        section=POOL,
        help="children started (and kept) before traffic (default: %(default)s)",
    ),
    Setting(
        "--pool-max",
        key="pool.max",
        target="pool.max_size",
        brief=True,
        kind=int,
        metavar="N",
        section=POOL,
        help="children at most, started on demand (default: --pool-min, at least 1)",
    ),
    Setting(
        "--pool-max-asking",
        check=rule(lambda v: v >= 0, "must be 0 or more"),
        key="pool.maxAsking",
        target="pool.asking_max",
        kind=int,
        default=_POOL.asking_max,
        metavar="N",
        section=POOL,
        help="children at most while calls that may ask the client (sampling, elicitation, roots) wait for a "
        "child of their own, each about 70 MB for a node server; they stop after --idle-timeout; never fewer "
        "than --pool-max, 0 = --pool-max (default: %(default)s)",
    ),
    Setting(
        "--max-parked-per-principal",
        check=rule(lambda v: v >= 0, "must be 0 or more"),
        key="pool.maxParkedPerPrincipal",
        target="pool.max_parked_per_principal",
        kind=int,
        default=_POOL.max_parked_per_principal,
        metavar="N",
        section=POOL,
        help="calls of one client (principal) waiting for its answer to the server's question (a parked MRTR "
        "call, a legacy client's open question), each holding a child; past it that client's next call that "
        "may ask gets 429; 0 = no cap (default: %(default)s)",
    ),
    Setting(
        "--max-in-flight",
        key="pool.maxInFlight",
        target="pool.max_in_flight",
        kind=int,
        default=_POOL.max_in_flight,
        metavar="N",
        section=POOL,
        help="requests at once per child; 1 serialises, 0 = no limit (default: %(default)s)",
    ),
    Setting(
        "--queue-timeout",
        key="pool.queueTimeout",
        target="pool.queue_timeout",
        kind=float,
        default=_POOL.queue_timeout,
        metavar="SECONDS",
        section=POOL,
        help="wait this long for a free child, then 503 + Retry-After (default: %(default)s)",
    ),
    Setting(
        "--idle-timeout",
        key="pool.idleTimeout",
        target="pool.idle_timeout",
        kind=float,
        default=_POOL.idle_timeout,
        metavar="SECONDS",
        section=POOL,
        help="stop children above --pool-min after this long unused (default: %(default)s)",
    ),
    Setting(
        "--max-requests",
        key="pool.maxRequests",
        target="pool.max_requests",
        kind=int,
        default=_POOL.max_requests,
        metavar="N",
        section=POOL,
        help="recycle a child after N requests; 0 = never (default: %(default)s)",
    ),
    Setting(
        "--max-age",
        key="pool.maxAge",
        target="pool.max_age",
        kind=float,
        default=_POOL.max_age,
        metavar="SECONDS",
        section=POOL,
        help="recycle a child after this long; 0 = never (default: %(default)s)",
    ),
    Setting(
        "--stall-timeout",
        key="pool.stallTimeout",
        target="pool.stall_timeout",
        kind=float,
        default=_POOL.stall_timeout,
        metavar="SECONDS",
        section=POOL,
        help="recycle a child with requests pending but silent this long; 0 = off (default: %(default)s)",
    ),
    Setting(
        "--liveness-interval",
        key="pool.livenessInterval",
        target="pool.liveness_interval",
        kind=float,
        default=_POOL.liveness_interval,
        metavar="SECONDS",
        section=POOL,
        help="ping an idle child this often, recycle it if it fails; 0 = off (default: %(default)s)",
    ),
    Setting(
        "--max-children",
        field="max_children",
        check=rule(lambda v: v >= 0, "must be 0 (sized to the machine) or more"),
        kind=int,
        default=0,
        metavar="N",
        section=POOL,
        help="children at most over all servers and isolation keys; at the cap an idle child of another "
        "pool is stopped to make room, else 503 + Retry-After; 0 = sized to the machine: 16 per CPU or "
        "one per 64 MiB of memory (in a container: its cgroup's CPU quota and memory limit, v1 or v2), "
        "the smaller, at least 8 (default: %(default)s)",
    ),
    Setting(
        "--child-asks",
        convert=AskPolicy,
        key="childAsks",
        target="pool.child_asks",
        default=_POOL.child_asks.value,
        choices=tuple(p.value for p in AskPolicy),
        section=POOL,
        help="whether the server asks its client (sampling, elicitation, roots) during tools/call, prompts/get "
        "and resources/read, so each such request needs a child to itself for its questions to reach the "
        "right client: auto = once it has asked, and from the start for a legacy child told it may ask for "
        "sampling or elicitation, learned per tool: a tool whose call once ended asking nothing shares "
        "children from then on, one that asked never does; always; never = share children, a question "
        "then reaches a client only when one request is in flight (default: %(default)s)",
    ),
    Setting(
        "--dual-era",
        convert=DualEra,
        key="dualEra",
        target="server.dual_era",
        default=DualEra.PER_CLIENT.value,
        choices=tuple(d.value for d in DualEra),
        section=POOL,
        help="for a server that speaks both eras: per-client = legacy clients get children opened with "
        "initialize (so tools that ask the legacy way work for them), modern clients children opened with "
        "server/discover; modern = every child opened with server/discover; legacy = every child opened with "
        "initialize, modern clients bridged (their questions become MRTR rounds) (default: %(default)s)",
    ),
    Setting(
        "--capability-keying",
        convert=CapabilityKeying,
        key="capabilityKeying",
        target="server.capability_keying",
        default=CapabilityKeying.SHARED.value,
        choices=tuple(c.value for c in CapabilityKeying),
        section=POOL,
        help="what legacy children are told of their clients' capabilities: shared = the configured set, so "
        "one warm pool serves every client and each question a child asks during a call is checked against "
        "that call's client (refused when it did not declare the capability); exact = each client's own set, "
        "a pool per distinct set (for a server whose behaviour depends on it) (default: %(default)s)",
    ),
    Setting(
        "--roots-keying",
        convert=RootsKeying,
        key="rootsKeying",
        target="server.roots_keying",
        default=RootsKeying.AUTO.value,
        choices=tuple(r.value for r in RootsKeying),
        section=POOL,
        help="whether a client's roots set gets children of its own: auto = once a child fetches roots "
        "outside any call (the server keeps them: server-filesystem, server-everything), else a roots/list "
        "during a call asks that call's client; always = the server keeps roots (roots are access rights); "
        "never = it reads them only during a call (default: %(default)s)",
    ),
    Setting(
        "--roots-learn-wait",
        key="rootsLearnWait",
        target="server.roots_learn_wait",
        kind=float,
        default=ROOTS_LEARN_WAIT,
        metavar="SECONDS",
        section=POOL,
        check=rule(lambda v: 0 <= v <= MAX_ROOTS_LEARN_WAIT, f"must be between 0 and {MAX_ROOTS_LEARN_WAIT:g} seconds"),
        help="with --roots-keying auto: how long after a server's first child is up a roots-declaring "
        "call waits (once per server) to learn whether the server fetches roots outside a call; raise it for "
        "a server that fetches them later, 0 = decide at once (default: %(default)s)",
    ),
    Setting(
        "--isolation",
        convert=Isolation,
        key="isolation",
        target="server.isolation",
        brief=True,
        default=Isolation.SHARED.value,
        choices=tuple(i.value for i in Isolation),
        section=POOL,
        help="who may share a child: everyone, one principal, one legacy session (default: %(default)s)",
    ),
    Setting(
        "--principal-header",
        field="principal_header",
        metavar="HEADER",
        section=POOL,
        help="trust this header (set by an authenticating reverse proxy) as the principal, from --trusted-proxy "
        "peers only (loopback when none are listed)",
    ),
    Setting(
        "--principal-header-required",
        field="principal_header_required",
        default="auto",
        choices=("auto", "yes", "no"),
        section=POOL,
        help="answer 401 to a request without --principal-header from a trusted proxy, or from any other "
        "peer; auto: yes "
        "when the header is the only client authentication (no tokens, OAuth or client "
        "certificates) (default: %(default)s)",
    ),
    Setting(
        "--env-from-header",
        convert=convert.env_mappings,
        key="envFromHeaders",
        target="server.env_from_headers",
        repeat=True,
        metavar="HEADER=ENV",
        section=POOL,
        help="pass a request header to the child as an environment variable (repeatable); "
        "children are then keyed by the values, never shared across them",
    ),
)
