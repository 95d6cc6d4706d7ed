"""``EdgeSettings``: what the HTTP edge is configured with, as one typed value.

``create_app`` takes it whole; ``gateway.config.Settings.edge()`` makes it from the gateway's
settings, whose declarations (``gateway.settings``) hold every flag, variable and default.
The defaults here are the same named limits those declarations use
(``tests/unit/test_settings.py`` checks that they agree).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.http.endpoint import BODY_TIMEOUT, MAX_BODY_BYTES, MAX_STREAM_SECONDS, SSE_POLL_SECONDS
from gateway.http.limits import MAX_REQUESTS_PER_PRINCIPAL, MAX_STREAMS_PER_PRINCIPAL
from gateway.protocol.eventlog import RESUME_WINDOW


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
    trusted_proxies: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    authorization_servers: tuple[str, ...] = ()  # named in the RFC 9728 metadata
    public_url: str | None = None
    max_requests_per_principal: int = MAX_REQUESTS_PER_PRINCIPAL
    max_streams_per_principal: int = MAX_STREAMS_PER_PRINCIPAL
    metrics: bool = True  # serve /metrics
