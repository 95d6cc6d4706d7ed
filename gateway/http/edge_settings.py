"""``EdgeSettings``: what the HTTP edge is configured with, as one typed value.

``create_app`` takes it whole; ``gateway.config.Settings.edge()`` makes it from the gateway's
settings, whose declarations (``gateway.settings``) hold every flag, variable and default.
The defaults here are the same named limits those declarations use
(``tests/unit/test_settings.py`` checks that they agree).

The edge's configurable limits are named here, with their reasons, rather than in the modules
that apply them (``endpoint``, ``limits``), so that the settings and ``--help`` read them
without loading Starlette: this module imports the standard library and pure values only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gateway.protocol.eventlog import RESUME_WINDOW

MAX_STREAM_SECONDS: Final = 3600.0
"""A legacy GET stream ends after this long; clients reconnect (L-TR allows either side to close)."""
SSE_POLL_SECONDS: Final = 0.0
"""Off by default: a 2025-11-25 session's request stream stays on its connection to the end.
When set, the gateway closes that connection after this many seconds (with a ``retry``
hint), the call going on, and the client resumes with ``Last-Event-ID`` (docs/bridging.md)."""
MAX_BODY_BYTES: Final = 4 * 1024 * 1024
"""Largest POST body accepted (413 above): tool arguments, not file uploads."""
BODY_TIMEOUT: Final = 30.0
"""Seconds to receive a whole POST body once the headers are in (408 after, and the connection
is closed): 4 MiB at ~1 Mbit/s. A body that trickles in holds a connection, never a request slot."""
MAX_REQUESTS_PER_PRINCIPAL: Final = 256
"""Requests one client key may have in flight at once (``gateway.http.limits``); past it, 429."""
MAX_STREAMS_PER_PRINCIPAL: Final = 32
"""Open legacy GET and ``subscriptions/listen`` streams per client key; past it, 429."""


MAX_CONNECTIONS_CEILING: Final = 16_384
"""The most connections the default (``default_max_connections``) allows, whatever the
descriptor limit: a gateway serves agents, and each connection holds buffers and a task."""
MIN_CONNECTIONS: Final = 64
"""The fewest connections the default allows, on a process with very few descriptors."""
OPS_MAX_CONNECTIONS: Final = 64
"""Connections the ops listener (``--ops-listen``) holds at once: probes and scrapers."""


def default_max_connections() -> int:
    """``--max-connections`` when not set: half the process's open-file limit (``RLIMIT_NOFILE``,
    soft), between ``MIN_CONNECTIONS`` and ``MAX_CONNECTIONS_CEILING``. Each connection holds a
    descriptor; the other half stays for the children's pipes (three or four each), their
    process handles, the log and the files the gateway reads, so that a flood of connections
    cannot leave a pool unable to start a child."""
    try:
        import resource  # POSIX only

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return MIN_CONNECTIONS * 16
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return MAX_CONNECTIONS_CEILING
    return max(MIN_CONNECTIONS, min(MAX_CONNECTIONS_CEILING, soft // 2))


@dataclass(frozen=True)
class EdgeSettings:
    max_body_bytes: int = MAX_BODY_BYTES
    max_stream_seconds: float = MAX_STREAM_SECONDS  # a legacy GET stream's lifetime
    stream_resume_seconds: float = RESUME_WINDOW  # a legacy stream nobody reads is kept this long
    sse_poll_seconds: float = SSE_POLL_SECONDS  # 2025-11-25 polling streams (0: off)
    body_timeout: float = BODY_TIMEOUT  # not a setting: how long a POST body may take to arrive
    loopback_only: bool = True  # bound to loopback: only loopback Host headers (DNS rebinding)
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    principal_header: str | None = None  # trusted from trusted_proxies only
    principal_header_required: str = "auto"  # 401 without it: yes, no, auto (when nothing else authenticates)
    trusted_proxies: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    authorization_servers: tuple[str, ...] = ()  # named in the RFC 9728 metadata
    public_url: str | None = None
    max_requests_per_principal: int = MAX_REQUESTS_PER_PRINCIPAL
    max_streams_per_principal: int = MAX_STREAMS_PER_PRINCIPAL
    max_connections: int | None = None  # connections the listener holds at once (None: default_max_connections)
    metrics: bool = True  # serve /metrics
