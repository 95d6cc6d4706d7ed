"""Era bridging for ordinary requests, as pure functions (digest §7.6 A, B, D, E).

- **Modern client → legacy child (B):** ``server/discover`` is answered by the gateway from
  the child's ``InitializeResult``; ``io.modelcontextprotocol/*`` keys are stripped from
  ``_meta`` on the way in (the rewritten ``progressToken`` and trace keys stay); results get
  ``resultType: "complete"``, the caching hints the modern schema requires on list/read
  results (``ttlMs: 0``, ``cacheScope: "private"``: a legacy child gives no freshness
  promise, and its answers may depend on who asks), and ``_meta.serverInfo``; the legacy
  "resource not found" -32002 becomes -32602, and a -32042 (URL elicitation required) the
  gateway's -31006 with the URLs in ``data`` (``urlelicitation.unusable_error``; where a round
  can carry it, the relay makes one instead).
- **Legacy client → modern child (D):** the per-request ``_meta`` is built from the
  session (the child's version, the client's declared capabilities, its clientInfo);
  modern-only result fields are removed.
- **Same era (A, E):** pass-through; the correlator rewrites ids and tokens. A modern
  child's ``server/discover`` lists only the versions the gateway accepts too.

Imports: standard library and ``gateway.protocol`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gateway.protocol import urlelicitation, versions
from gateway.protocol.handshake import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    ChildInfo,
)
from gateway.protocol.jsonrpc import INVALID_PARAMS, LEGACY_RESOURCE_NOT_FOUND, URL_ELICITATION_REQUIRED, JsonObject
from gateway.protocol.tasks import EXTENSION as TASKS_EXTENSION

RESERVED_META_PREFIX: Final = "io.modelcontextprotocol/"
CHILD_META: Final = "mcp-stdio-gateway/child"
"""``_meta`` key of a bridged ``server/discover`` result: the legacy child's era and version."""
CACHEABLE_METHODS: Final = frozenset(
    {"server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"}
)
"""Complete results of these carry ``ttlMs`` and ``cacheScope`` (caching §1.3)."""
BRIDGED_TTL_MS: Final = 0
BRIDGED_CACHE_SCOPE: Final = "private"
MODERN_ONLY_RESULT_KEYS: Final = ("resultType", "ttlMs", "cacheScope")
# Legacy-only client capabilities that have no modern meaning (digest §7.6 D).
_LEGACY_ONLY_CAPABILITIES: Final = ("tasks",)


def strip_modern_meta(params: JsonObject | None) -> JsonObject | None:
    """Params for a legacy child: no ``io.modelcontextprotocol/*`` keys in ``_meta``."""
    if not params or not isinstance(params.get("_meta"), dict):
        return params
    meta = {k: v for k, v in params["_meta"].items() if not k.startswith(RESERVED_META_PREFIX)}
    out = {k: v for k, v in params.items() if k != "_meta"}
    if meta:
        out["_meta"] = meta
    return out


TRACE_KEYS: Final = ("traceparent", "tracestate")


def trace_context(headers: Mapping[str, str]) -> JsonObject:
    """W3C trace context from HTTP headers, to carry into ``_meta`` (2026-07-28 ``_meta`` keys)."""
    # Spelled out, not a comprehension over ``TRACE_KEYS``: every request asks this, and most
    # carry neither header (a comprehension is a call of its own).
    trace: JsonObject = {}
    if "traceparent" in headers and len(parent := headers["traceparent"]) <= 512:
        trace["traceparent"] = parent
    if "tracestate" in headers and len(state := headers["tracestate"]) <= 512:
        trace["tracestate"] = state
    return trace


def with_trace(params: JsonObject | None, trace: Mapping[str, Any]) -> JsonObject | None:
    """Params with the trace context in ``_meta``, unless the client already put one there."""
    if not trace:
        return params
    out = dict(params or {})
    meta = dict(out.get("_meta") or {})
    for key, value in trace.items():
        meta.setdefault(key, value)
    out["_meta"] = meta
    return out


def own_trace(params: JsonObject | None, trace: Mapping[str, str]) -> JsonObject | None:
    """Params whose ``_meta`` trace context is ``trace`` (the gateway's span, when it traces):
    the client's ``traceparent`` and ``tracestate`` are replaced, never merged."""
    out = dict(params or {})
    meta = {k: v for k, v in (out.get("_meta") or {}).items() if k not in TRACE_KEYS}
    meta.update(trace)
    out["_meta"] = meta
    return out


def modernize_result(method: str, result: JsonObject, child: ChildInfo) -> JsonObject:
    """A legacy child's result, made valid for a modern client."""
    out = dict(result)
    out.setdefault("resultType", "complete")
    if method in CACHEABLE_METHODS:
        out.setdefault("ttlMs", BRIDGED_TTL_MS)
        out.setdefault("cacheScope", BRIDGED_CACHE_SCOPE)
    if child.server_info:
        meta = out.get("_meta")
        meta = dict(meta) if isinstance(meta, dict) else {}
        meta.setdefault(META_SERVER_INFO, child.server_info)
        out["_meta"] = meta
    return out


def modernize_error(error: JsonObject) -> JsonObject:
    """Modern servers must not emit -32002 (its modern meaning is invalid params, -32602) nor
    -32042 (a modern client takes URL elicitations as input requests)."""
    code = error.get("code")
    if code == LEGACY_RESOURCE_NOT_FOUND:
        return {**error, "code": INVALID_PARAMS}
    if code == URL_ELICITATION_REQUIRED:
        return urlelicitation.unusable_error(error)
    return error


def discover_result(child: ChildInfo) -> JsonObject:
    """``server/discover`` answered for a legacy child (modern clients may always call it)."""
    # ``logging`` stays: the child's log messages reach a request that sets logLevel when they
    # can be attributed to it (``gateway.protocol.childsession``), so the gateway emits them.
    capabilities = {k: v for k, v in child.capabilities.items() if k != "tasks"}
    out: JsonObject = {
        "resultType": "complete",
        "supportedVersions": list(versions.ADVERTISED_VERSIONS),
        "capabilities": capabilities,
        "ttlMs": BRIDGED_TTL_MS,
        "cacheScope": BRIDGED_CACHE_SCOPE,
    }
    if child.instructions:
        out["instructions"] = child.instructions
    # The child behind the bridge, for tools that show it (``call --list``); a name outside
    # the reserved ``io.modelcontextprotocol/`` prefix, as _meta allows.
    meta: JsonObject = {CHILD_META: {"era": child.era.value, "protocolVersion": child.version}}
    if child.server_info:
        meta[META_SERVER_INFO] = child.server_info
    out["_meta"] = meta
    return out


UNAVAILABLE_CAPABILITIES: Final = ("tools", "prompts", "resources")
"""What a gateway that cannot start its server advertises: every list a client may send, so
that request reaches the gateway and gets the start error (clients skip, and answer empty,
a list the capabilities leave out: the TypeScript client 2.x does)."""


def unavailable_discover(error: JsonObject, server_info: JsonObject) -> JsonObject:
    """``server/discover`` answered by the gateway while its server cannot start.

    A modern client in pin mode takes any error to its probe but -32022 for "not a modern
    server" and shows no cause (the TypeScript client 2.x); so the probe succeeds, and the
    start error (``error``, a -31xxx error object) arrives with the client's next request,
    which every client shows. The result is not cached (``ttlMs`` 0) and names the error
    under ``_meta`` (``CHILD_META``) for tools that look (``call``)."""
    return {
        "resultType": "complete",
        "supportedVersions": list(versions.ADVERTISED_VERSIONS),
        "capabilities": {name: {} for name in UNAVAILABLE_CAPABILITIES},
        "ttlMs": BRIDGED_TTL_MS,
        "cacheScope": BRIDGED_CACHE_SCOPE,
        "_meta": {CHILD_META: {"error": error}, META_SERVER_INFO: server_info},
    }


def advertised_discover(result: JsonObject) -> JsonObject:
    """A modern child's ``DiscoverResult`` as the gateway forwards it: ``supportedVersions``
    keeps only the versions the gateway itself accepts in a request (the child may know
    others, legacy ones included, that no request through the gateway can name), so it
    agrees with the gateway's own -32022 (``versions.ADVERTISED_VERSIONS``)."""
    offered = result.get("supportedVersions")
    if not isinstance(offered, list):
        return result
    return {**result, "supportedVersions": [v for v in offered if v in versions.ADVERTISED_VERSIONS]}


def legacy_capabilities_to_modern(capabilities: Mapping[str, Any]) -> JsonObject:
    out = {k: v for k, v in capabilities.items() if k not in _LEGACY_ONLY_CAPABILITIES}
    extensions = out.get("extensions")
    if isinstance(extensions, dict) and TASKS_EXTENSION in extensions:
        # A session has no tasks (``taskbridge`` rule 7): its child must make none for it.
        out["extensions"] = {k: v for k, v in extensions.items() if k != TASKS_EXTENSION}
    roots = out.get("roots")
    if isinstance(roots, dict) and "listChanged" in roots:
        out["roots"] = {k: v for k, v in roots.items() if k != "listChanged"}
    return out


def add_modern_meta(
    params: JsonObject | None,
    *,
    version: str,
    capabilities: Mapping[str, Any],
    client_info: Mapping[str, Any] | None,
    log_level: str | None = None,
) -> JsonObject:
    """Params for a modern child on behalf of a legacy session."""
    out = dict(params or {})
    meta = dict(out.get("_meta") or {})
    meta[META_PROTOCOL_VERSION] = version
    meta[META_CLIENT_CAPABILITIES] = legacy_capabilities_to_modern(capabilities)
    if client_info:
        meta[META_CLIENT_INFO] = dict(client_info)
    if log_level is not None:
        meta[META_LOG_LEVEL] = log_level
    out["_meta"] = meta
    return out


def legacy_result(result: JsonObject) -> JsonObject:
    """A modern child's result for a legacy client: modern-only fields and ``_meta`` keys removed."""
    out = dict(result)  # copied and its modern keys taken out: no comprehension (every legacy reply)
    for key in MODERN_ONLY_RESULT_KEYS:
        out.pop(key, None)
    meta = out.get("_meta")
    if isinstance(meta, dict) and any(k.startswith(RESERVED_META_PREFIX) for k in meta):
        kept = {k: v for k, v in meta.items() if not k.startswith(RESERVED_META_PREFIX)}
        if kept:
            out["_meta"] = kept
        else:
            del out["_meta"]
    return out


def initialize_result(requested: str, child: ChildInfo) -> JsonObject:
    """The gateway's answer to a legacy client's ``initialize`` (legacy lifecycle)."""
    server_info = child.server_info or {"name": "mcp-stdio-gateway", "version": "0"}
    out: JsonObject = {
        "protocolVersion": versions.negotiate_legacy(requested),
        "capabilities": {k: v for k, v in child.capabilities.items() if k != "tasks"},
        "serverInfo": {"name": "unknown", "version": "0", **server_info},
    }
    if child.instructions:
        out["instructions"] = child.instructions
    out["_meta"] = {CHILD_META: {"era": child.era.value, "protocolVersion": child.version}}  # as discover_result
    return out
