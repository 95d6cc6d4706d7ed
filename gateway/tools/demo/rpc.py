"""The demo framework's JSON-RPC vocabulary: versions, keys, error codes, ``RpcError`` and
the pure helpers that check ids and modern ``_meta``. ``framework.py`` re-exports it all.

Imports: standard library only.
"""

from __future__ import annotations

from typing import Any, Final, Literal, Protocol

JsonObject = dict[str, Any]
RequestId = str | int
Era = Literal["modern", "legacy"]

MODERN_VERSIONS: Final = ("2026-07-28",)
LEGACY_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_LEGACY: Final = LEGACY_VERSIONS[-1]

PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY: Final = "io.modelcontextprotocol/serverInfo"

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022

# After stdin EOF, in-flight calls get this long to reply. That is enough for a piped one-shot
# request to be answered, and short enough that a client closing stdin sees a prompt exit.
EOF_GRACE_SECONDS: Final = 1.0
# How long send_request waits for the client by default. Shorter than any sane test timeout.
SEND_REQUEST_TIMEOUT: Final = 30.0
# Methods whose modern results carry the cache hints ttlMs and cacheScope (2026-07-28 caching).
CACHEABLE_METHODS: Final = frozenset(
    {"server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"}
)
# Methods that exist only in the modern era. Without modern _meta they are not legacy requests.
MODERN_ONLY_METHODS: Final = frozenset({"server/discover", "subscriptions/listen"})
SUBSCRIPTION_ID_KEY: Final = "io.modelcontextprotocol/subscriptionId"
RESOURCES_UPDATED: Final = "notifications/resources/updated"
LISTEN_TYPES: Final = {
    "toolsListChanged": "notifications/tools/list_changed",
    "promptsListChanged": "notifications/prompts/list_changed",
    "resourcesListChanged": "notifications/resources/list_changed",
}


class LineSource(Protocol):
    """Where requests are read from: stdin, or anything with its ``readline``."""

    def readline(self) -> bytes: ...


class RpcError(Exception):
    """A JSON-RPC error reply. Raise it from a tool handler to answer with an error, not a result."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> JsonObject:
        error: JsonObject = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def is_request_id(value: Any) -> bool:
    """JSON-RPC ids are strings or integers (MCP forbids null). bool is not an integer here."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def id_key(request_id: Any) -> tuple[type, Any]:
    """A table key that keeps ``7`` and ``"7"`` apart (digest: never correlate by ``str(id)``)."""
    return (type(request_id), request_id)


def check_modern_meta(meta: Any) -> None:
    """Raise the RpcError for a modern request whose ``_meta`` is incomplete or names an unknown version."""
    if not isinstance(meta, dict):
        raise RpcError(INVALID_PARAMS, "missing params._meta (required on every 2026-07-28 request)")
    version = meta.get(PROTOCOL_VERSION_KEY)
    if not isinstance(version, str):
        raise RpcError(INVALID_PARAMS, f"missing or non-string params._meta[{PROTOCOL_VERSION_KEY!r}]")
    if not isinstance(meta.get(CLIENT_CAPABILITIES_KEY), dict):
        raise RpcError(INVALID_PARAMS, f"missing or non-object params._meta[{CLIENT_CAPABILITIES_KEY!r}]")
    if version not in MODERN_VERSIONS:
        raise RpcError(
            UNSUPPORTED_PROTOCOL_VERSION,
            f"unsupported protocol version: {version}",
            {"supported": list(MODERN_VERSIONS), "requested": version},
        )


def result_of(message: JsonObject | None) -> JsonObject:
    """The result of a client's response to a server→client request, or the error it carries."""
    if message is None:
        raise ConnectionError("stdin closed before the client replied")
    if "error" in message:
        error = message["error"]
        if isinstance(error, dict) and isinstance(error.get("code"), int):
            raise RpcError(error["code"], str(error.get("message", "")), error.get("data"))
        raise RpcError(INTERNAL_ERROR, f"malformed error from the client: {error!r}")
    result = message.get("result")
    if not isinstance(result, dict):
        raise RpcError(INTERNAL_ERROR, f"malformed result from the client: {result!r}")
    return result
