"""The era probe and the legacy handshake, as pure decisions (digest §3, §7.2).

At start the gateway sends ``server/discover`` with the modern ``_meta``:

| outcome                                              | era    |
|------------------------------------------------------|--------|
| a ``DiscoverResult`` naming a modern version we speak | modern |
| a recognised modern error (-32022 with ``supported``) naming one | modern |
| a DiscoverResult / -32022 naming only legacy versions | legacy |
| any other error, or no reply within the probe timeout | legacy |

The fallback never keys on a single error code: legacy servers answer unknown methods
before ``initialize`` with whatever code they like, or not at all. A legacy child then gets
``initialize`` (latest legacy revision, no client capabilities by default) and
``notifications/initialized``. ``ChildInfo`` is what the rest of the gateway knows about
the child afterwards. Imports: standard library and ``gateway.protocol`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from gateway.protocol import taskbridge, tasks, versions
from gateway.protocol.jsonrpc import UNSUPPORTED_PROTOCOL_VERSION, ErrorReply, JsonObject, Reply, Result
from gateway.protocol.versions import Era

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"

DISCOVER = "server/discover"
INITIALIZE = "initialize"
INITIALIZED = "notifications/initialized"


@dataclass(frozen=True, slots=True)
class ChildInfo:
    """What the handshake learnt. ``server_info`` comes from ``_meta`` (modern) or the
    top-level ``serverInfo`` (legacy); ``raw`` is the whole DiscoverResult/InitializeResult."""

    era: Era
    version: str
    capabilities: JsonObject = field(default_factory=dict)
    server_info: JsonObject = field(default_factory=dict)
    instructions: str | None = None
    supported_versions: tuple[str, ...] = ()
    raw: JsonObject = field(default_factory=dict)
    # ``tasks.child_serves(capabilities)``, worked out once: every modern call asks it.
    serves_tasks: bool = field(init=False, repr=False, compare=False)
    # ``taskbridge.takes_tasks(capabilities)`` (2025-11-25 tasks), likewise: every legacy call asks it.
    takes_tasks: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "serves_tasks", tasks.child_serves(self.capabilities))  # (frozen)
        object.__setattr__(self, "takes_tasks", taskbridge.takes_tasks(self.capabilities))


class HandshakeError(ValueError):
    """The child's handshake answer is unusable; the message says why."""


def client_info(version: str) -> JsonObject:
    return {"name": "mcp-stdio-gateway", "version": version}


def modern_meta(gateway_version: str, capabilities: Mapping[str, Any] | None = None) -> JsonObject:
    return {
        META_PROTOCOL_VERSION: versions.LATEST_MODERN,
        META_CLIENT_CAPABILITIES: dict(capabilities or {}),
        META_CLIENT_INFO: client_info(gateway_version),
    }


def probe_params(gateway_version: str) -> JsonObject:
    return {"_meta": modern_meta(gateway_version)}


def classify_probe(reply: Reply | None) -> ChildInfo | None:
    """A ``ChildInfo`` for a modern child, or None: fall back to ``initialize``."""
    if isinstance(reply, Result):
        offered = reply.result.get("supportedVersions")
        if not _is_str_list(offered):
            return None
        version = versions.newest_common(offered, versions.MODERN_VERSIONS)
        if version is None:
            return None
        meta = reply.result.get("_meta")
        server_info = meta.get(META_SERVER_INFO) if isinstance(meta, dict) else None
        capabilities = reply.result.get("capabilities")
        instructions = reply.result.get("instructions")
        return ChildInfo(
            era=Era.MODERN,
            version=version,
            capabilities=capabilities if isinstance(capabilities, dict) else {},
            server_info=server_info if isinstance(server_info, dict) else {},
            instructions=instructions if isinstance(instructions, str) else None,
            supported_versions=tuple(offered),
            raw=reply.result,
        )
    if isinstance(reply, ErrorReply) and reply.code == UNSUPPORTED_PROTOCOL_VERSION:
        data = reply.error.get("data")
        supported = data.get("supported") if isinstance(data, dict) else None
        if _is_str_list(supported):
            version = versions.newest_common(supported, versions.MODERN_VERSIONS)
            if version is not None:
                # A modern child that refused our newest version but speaks an older modern one.
                return ChildInfo(era=Era.MODERN, version=version, supported_versions=tuple(supported))
    return None


def initialize_params(gateway_version: str, capabilities: Mapping[str, Any] | None = None) -> JsonObject:
    return {
        "protocolVersion": versions.LATEST_LEGACY,
        "capabilities": dict(capabilities or {}),
        "clientInfo": client_info(gateway_version),
    }


def accept_initialize(reply: Reply) -> ChildInfo:
    """Validate an ``InitializeResult``; raise ``HandshakeError`` with the reason."""
    if isinstance(reply, ErrorReply):
        raise HandshakeError(f"initialize failed: {reply.message} (code {reply.code})")
    result = reply.result
    version = result.get("protocolVersion")
    if not isinstance(version, str) or version not in versions.LEGACY_VERSIONS:
        raise HandshakeError(
            f"initialize answered protocol version {version!r}; the gateway speaks "
            f"{', '.join(versions.LEGACY_VERSIONS)}"
        )
    capabilities = result.get("capabilities")
    server_info = result.get("serverInfo")
    instructions = result.get("instructions")
    return ChildInfo(
        era=Era.LEGACY,
        version=version,
        capabilities=capabilities if isinstance(capabilities, dict) else {},
        server_info=server_info if isinstance(server_info, dict) else {},
        instructions=instructions if isinstance(instructions, str) else None,
        supported_versions=(version,),
        raw=result,
    )


def _is_str_list(value: Any) -> TypeGuard[list[str]]:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)
