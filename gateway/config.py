"""Typed settings, validated once at start-up (``ConfigError`` names the key).

``Settings`` holds what the whole gateway shares (binding, security, limits, logging) and
the servers it fronts: one from the command line, or many from ``--config`` (see
``gateway.configfile``). Each server's child and pool settings live in its ``ServerConfig``.
Every field's default and its own check are declared in ``gateway.settings``; the checks
here are the ones between fields.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, fields, replace
from typing import Final

from gateway.errors import ConfigError
from gateway.http.edge_settings import (
    MAX_BODY_BYTES,
    MAX_REQUESTS_PER_PRINCIPAL,
    MAX_STREAM_SECONDS,
    MAX_STREAMS_PER_PRINCIPAL,
    SSE_POLL_SECONDS,
    EdgeSettings,
)
from gateway.protocol.eventlog import RESUME_WINDOW
from gateway.protocol.keyring import KeyringError
from gateway.relay.server_config import ServerConfig
from gateway.relay.statekeys import StateKeys
from gateway.settings import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DRAIN_TIMEOUT,
    GATEWAY_WIDE,
    MAX_WORKERS,
    demo_command,
)
from gateway.settings.running import listen_address
from gateway.stdio.spec import ChildSpec

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "DRAIN_TIMEOUT", "MAX_WORKERS", "Settings", "demo_command", "demo_server"]

LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1"})
ADVERTISE_AUTO: Final = "auto"
"""``--advertise-url auto``: http://ADDRESS:PORT, ADDRESS being what this host's name resolves
to (a container's or pod's own IP in Docker and Kubernetes)."""


def flag_of(field_name: str) -> str:
    """The command-line flag of a ``Settings`` field: errors name what the user typed
    (``--tls-cert-file``), not the attribute behind it (``tls_cert_file``)."""
    return next((str(s.flag) for s in GATEWAY_WIDE if s.field == field_name), field_name)


MAX_NAMED_SERVERS: Final = 20
"""Server names an unknown ``--ready-requires`` name's error lists at most: a hint, not the config."""
SECRET_FLAG: Final = flag_of("state_secret_file")
ADVERTISE_FLAG: Final = flag_of("advertise_url")


def demo_server() -> ServerConfig:
    command = demo_command()
    return ServerConfig("demo", ChildSpec(command[0], command[1:], name="demo"))


@dataclass(frozen=True)
class Settings:
    servers: tuple[ServerConfig, ...] = field(default_factory=lambda: (demo_server(),))
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    max_body_bytes: int = MAX_BODY_BYTES
    max_stream_seconds: float = MAX_STREAM_SECONDS
    stream_resume_seconds: float = RESUME_WINDOW
    sse_poll_seconds: float = SSE_POLL_SECONDS
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    log_level: str = "info"
    log_format: str = "text"
    principal_header: str | None = None
    principal_header_required: str = "auto"  # yes, no, or auto: yes when it is the only authentication
    trusted_proxies: tuple[str, ...] = ()
    auth_token_file: str | None = None
    auth_tokens: tuple[str, ...] = ()
    operator_token_file: str | None = None
    operator_tokens: tuple[str, ...] = ()
    operator_scope: str | None = None
    drain_timeout: float = DRAIN_TIMEOUT
    ready_requires: tuple[str, ...] = ()  # server names (or comma-separated lists of them)
    max_requests_per_principal: int = MAX_REQUESTS_PER_PRINCIPAL
    max_streams_per_principal: int = MAX_STREAMS_PER_PRINCIPAL
    max_connections: int | None = None  # None: half the open-file limit (edge_settings.default_max_connections)
    max_children: int = 0  # over all pools; 0 = sized to the machine (gateway.stdio.budget)
    metrics: bool = True
    ops_listen: str | None = None  # HOST:PORT of the ops listener (gateway.http.routes.ops_app)
    tracing: str = "auto"  # otlp, off, or auto: as the OTEL_* variables say (gateway.ops.tracing)
    cors_origins: tuple[str, ...] = ()
    oauth_authorization_servers: tuple[str, ...] = ()
    public_url: str | None = None
    state_secret_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_client_ca_file: str | None = None
    advertise_url: str | None = None
    workers: int = 1

    def __post_init__(self) -> None:
        if not self.servers:
            raise ConfigError("--config", "no server to run")
        names = [s.name for s in self.servers]
        if len(set(names)) != len(names):
            raise ConfigError("--config", "server names must be unique")
        for setting in GATEWAY_WIDE:  # each value's own check, as gateway.settings declares it
            problem = setting.problem(getattr(self, str(setting.field)))
            if problem is not None:
                raise ConfigError(setting.flag, problem)
        self._require_ready(names)
        for server in self.servers:
            if server.max_sessions_per_principal < 1:
                raise ConfigError(f"--max-sessions-per-principal (server {server.name})", "must be at least 1")
        if self.trusted_proxies and self.principal_header is None:
            raise ConfigError("--trusted-proxy", "only means something with --principal-header")
        if self.principal_header_required == "yes" and self.principal_header is None:
            raise ConfigError("--principal-header-required", "only means something with --principal-header")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ConfigError(flag_of("tls_cert_file"), "--tls-cert-file and --tls-key-file go together")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ConfigError(flag_of("tls_client_ca_file"), "mutual TLS needs --tls-cert-file and --tls-key-file")
        if self.advertise_url is not None:
            self._check_advertise_url(self.advertise_url)

    def _require_ready(self, names: list[str]) -> None:
        """Mark the servers ``--ready-requires`` names as ``ready_required`` (the file's
        ``readyRequired`` may have marked others already); an unknown name is refused."""
        required = {name.strip() for item in self.ready_requires for name in item.split(",") if name.strip()}
        unknown = sorted(required - set(names))
        if unknown:
            shown = ", ".join(names[:MAX_NAMED_SERVERS]) + (", …" if len(names) > MAX_NAMED_SERVERS else "")
            what = "is not a configured server" if len(unknown) == 1 else "are not configured servers"
            raise ConfigError(flag_of("ready_requires"), f"{', '.join(map(repr, unknown))} {what} (servers: {shown})")
        if required:
            servers = tuple(replace(s, ready_required=True) if s.name in required else s for s in self.servers)
            object.__setattr__(self, "servers", servers)  # frozen: the one derived field, set once here

    def _check_advertise_url(self, url: str) -> None:
        scheme, sep, rest = url.partition("://")
        if url == ADVERTISE_AUTO:
            pass
        elif not sep or scheme not in ("http", "https") or not rest.strip("/") or "/" in rest.rstrip("/"):
            raise ConfigError(ADVERTISE_FLAG, f"{url!r} is not a base URL like http://10.0.0.7:8000")
        if self.workers > 1:
            raise ConfigError(
                "advertise_url",
                "give --advertise-url (one instance per address) or --workers (each worker "
                "advertises its own loopback port), not both",
            )
        if self.state_secret_file is None:
            raise ConfigError(
                "advertise_url",
                "needs --state-secret-file: the instances verify each other's session ids, "
                "tokens and forwarded requests with that shared secret",
            )

    def own_advertise_url(self) -> str | None:
        """``advertise_url``, with ``auto`` resolved; ``ConfigError`` when no reachable address is found."""
        if self.advertise_url != ADVERTISE_AUTO:
            return self.advertise_url
        try:
            address = socket.gethostbyname(socket.gethostname())
        except OSError as exc:
            raise ConfigError(ADVERTISE_FLAG, f"auto: cannot resolve this host's name ({exc}); give a URL") from exc
        if address.startswith("127.") or self.port == 0:
            raise ConfigError(
                "advertise_url",
                f"auto: this host's name resolves to {address} (port {self.port}), which other "
                "instances cannot reach; give a URL",
            )
        return f"http://{address}:{self.port}"

    def state_keys(self) -> StateKeys | None:
        """The keyring of ``state_secret_file`` (re-read when it changes, once the app runs);
        None: use a random key. ``ConfigError`` when the file cannot be read or is no keyring."""
        if self.state_secret_file is None:
            return None
        try:
            return StateKeys.load(self.state_secret_file)
        except OSError as exc:
            raise ConfigError(SECRET_FLAG, f"cannot read {self.state_secret_file}: {exc.strerror or exc}") from exc
        except KeyringError as exc:
            raise ConfigError(SECRET_FLAG, f"{self.state_secret_file}: {exc.message}") from exc

    def edge(self) -> EdgeSettings:
        """What ``create_app`` is configured with: the fields of the same names (the metadata's
        authorization servers aside) and whether the bind address is loopback."""
        names = {f.name for f in fields(EdgeSettings)} & {f.name for f in fields(self)}
        return EdgeSettings(
            **{name: getattr(self, name) for name in names},
            loopback_only=self.loopback_only,
            authorization_servers=self.oauth_authorization_servers,
        )

    @property
    def secret_files(self) -> tuple[str, ...]:
        """The files whose contents give a reader the gateway's trust: the token files, the
        state secret and the TLS key. Children cannot read them (``gateway.stdio.confinement``)."""
        files = (self.auth_token_file, self.operator_token_file, self.state_secret_file, self.tls_key_file)
        return tuple(dict.fromkeys(os.path.abspath(f) for f in files if f))

    @property
    def is_demo(self) -> bool:
        return len(self.servers) == 1 and self.servers[0].spec.argv == list(demo_command())

    @property
    def ops_address(self) -> tuple[str, int] | None:
        """``ops_listen`` as (host, port) to bind; None: no ops listener."""
        return None if self.ops_listen is None else listen_address(self.ops_listen)

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert_file else "http"

    @property
    def loopback_only(self) -> bool:
        return self.host in LOOPBACK
