"""Typed settings, validated once at start-up (``ConfigError`` names the key)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.errors import ConfigError
from gateway.http.endpoint import MAX_BODY_BYTES
from gateway.protocol.framing import DEFAULT_MAX_LINE_BYTES
from gateway.router import Isolation
from gateway.stdio.pool import PoolSettings
from gateway.stdio.spec import HANDSHAKE_TIMEOUT, PROBE_TIMEOUT

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def demo_command() -> tuple[str, ...]:
    """The built-in demo server, served when no command is given."""
    return (sys.executable, "-m", "gateway.demo.server")


@dataclass(frozen=True)
class Settings:
    command: tuple[str, ...] = field(default_factory=demo_command)
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    request_timeout: float | None = None
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_body_bytes: int = MAX_BODY_BYTES
    probe_timeout: float = PROBE_TIMEOUT
    startup_timeout: float = HANDSHAKE_TIMEOUT
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    log_level: str = "info"
    pool: PoolSettings = field(default_factory=PoolSettings)
    isolation: Isolation = Isolation.SHARED
    principal_header: str | None = None
    env_from_headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.command:
            raise ConfigError("command", "no command to run")
        if not 0 <= self.port <= 65535:
            raise ConfigError("port", f"{self.port} is not a TCP port")
        for key in ("max_line_bytes", "max_body_bytes"):
            if getattr(self, key) < 1:
                raise ConfigError(key, "must be a positive number of bytes")
        for key in ("probe_timeout", "startup_timeout"):
            if getattr(self, key) <= 0:
                raise ConfigError(key, "must be a positive number of seconds")
        if self.request_timeout is not None and self.request_timeout <= 0:
            raise ConfigError("request_timeout", "must be a positive number of seconds")
        for header, env in self.env_from_headers.items():
            if not header or not env or "=" in env or "\x00" in env:
                raise ConfigError("env_from_headers", f"{header!r} → {env!r} is not HEADER=ENV_VAR")

    @property
    def is_demo(self) -> bool:
        return self.command == demo_command()

    @property
    def loopback_only(self) -> bool:
        return self.host in ("127.0.0.1", "localhost", "::1")
