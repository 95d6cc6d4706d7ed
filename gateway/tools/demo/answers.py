"""The requests a ``StdioServer`` (``gateway.tools.demo.framework``) answers on its reader
thread, as functions of what it holds: which era serves a request (the era ladder of the
framework's module doc), ``initialize``, ``server/discover``, ``tools/list`` pages, the cache
hints, and the fields every modern result carries.

Imports: standard library and ``rpc`` only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gateway.tools.demo.context import Tool
from gateway.tools.demo.rpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    LATEST_LEGACY,
    LEGACY_VERSIONS,
    METHOD_NOT_FOUND,
    MODERN_ONLY_METHODS,
    MODERN_VERSIONS,
    PROTOCOL_VERSION_KEY,
    SERVER_INFO_KEY,
    Era,
    JsonObject,
    RpcError,
    check_modern_meta,
)


def era_of(eras: Iterable[str], initialized: bool, method: str, params: JsonObject) -> Era:
    """Which era serves this request, or the RpcError that refuses it (the era ladder);
    ``initialized``: a legacy ``initialize`` was answered."""
    if method == "initialize":
        if "legacy" in eras:
            return "legacy"
        versions = ", ".join(MODERN_VERSIONS)
        raise RpcError(
            METHOD_NOT_FOUND,
            f"initialize is not supported: this server speaks only {versions}; use server/discover",
            {"supported": list(MODERN_VERSIONS)},
        )
    meta = params.get("_meta")
    marked_modern = isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta
    if "legacy" not in eras or ("modern" in eras and (marked_modern or method in MODERN_ONLY_METHODS)):
        check_modern_meta(meta)
        return "modern"
    if method in MODERN_ONLY_METHODS:
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")
    if not initialized and method != "ping":
        raise RpcError(INVALID_REQUEST, "not initialized: send initialize first")
    return "legacy"


def initialize_result(
    params: JsonObject, capabilities: JsonObject, server_info: JsonObject, instructions: str | None
) -> tuple[str, JsonObject, JsonObject]:
    """A legacy ``initialize``: the version negotiated, the client's capabilities, the result."""
    requested = params.get("protocolVersion")
    if not isinstance(requested, str):
        raise RpcError(INVALID_PARAMS, "initialize: params.protocolVersion must be a string")
    # Echo a supported version, else offer our latest (2025-11-25/basic/lifecycle).
    version = requested if requested in LEGACY_VERSIONS else LATEST_LEGACY
    declared = params.get("capabilities")
    result: JsonObject = {"protocolVersion": version, "capabilities": capabilities, "serverInfo": server_info}
    if instructions is not None:
        result["instructions"] = instructions
    return version, declared if isinstance(declared, dict) else {}, result


def discover_result(capabilities: JsonObject, instructions: str | None) -> JsonObject:
    result: JsonObject = {"supportedVersions": list(MODERN_VERSIONS), "capabilities": capabilities}
    if instructions is not None:
        result["instructions"] = instructions
    return result


def tools_page(tools: list[Tool], page_size: int | None, cursor: Any) -> JsonObject:
    """One page of tools; the cursor is the index of the page's first tool (None: one page)."""
    described = [tool.describe() for tool in tools]
    if page_size is None:
        return {"tools": described}
    start = int(cursor) if isinstance(cursor, str) and cursor.isdigit() else 0
    page: JsonObject = {"tools": described[start : start + page_size]}
    if start + page_size < len(described):
        page["nextCursor"] = str(start + page_size)
    return page


def cache_hints(ttl_ms: int, cache_scope: str) -> JsonObject:
    return {"ttlMs": ttl_ms, "cacheScope": cache_scope}


def decorate(era: Era, result: JsonObject, server_info: JsonObject) -> JsonObject:
    """Add the fields every modern result carries. Legacy results pass through untouched."""
    if era == "modern":
        result.setdefault("resultType", "complete")
        meta = result.get("_meta")
        result["_meta"] = {**(meta if isinstance(meta, dict) else {}), SERVER_INFO_KEY: server_info}
    return result
