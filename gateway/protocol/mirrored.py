"""Rung 9 of the ingress ladder (``ingress.py``): the mirrored headers of a modern POST.

Digest §2.1, §2.4: a 2026-07-28 request carries ``MCP-Protocol-Version``, ``Mcp-Method``
and, for ``tools/call``, ``prompts/get`` and ``resources/read``, ``Mcp-Name``. Each must be
present, hold only characters allowed in a header value, and equal what the body says
(``Mcp-Name`` after its Base64 sentinel is decoded), else 400 with -32020
(``HEADER_MISMATCH``). For notifications a missing header is tolerated: their header rules
are undefined (digest §8.5), so only the headers present are checked.

``Mcp-Param-*`` needs the child's tool schemas and lives in ``xmcpheader.py``.

Imports: standard library and ``gateway.protocol`` only. No I/O, clock or async.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gateway.protocol import headers as h
from gateway.protocol.jsonrpc import HEADER_MISMATCH, JsonId, Message, Notification, Request
from gateway.protocol.outcome import Rejection, describe, reject

PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
# Methods whose ``Mcp-Name`` header mirrors a body parameter (digest §2.1).
# The Tasks extension adds tasks/*, whose Mcp-Name is params.taskId (ext-tasks §Routing Headers).
NAME_PARAMS: Final = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}


def message_id(message: Message) -> JsonId | None:
    return None if isinstance(message, Notification) else message.id


def meta_of(message: Message) -> Mapping[str, Any] | None:
    """``params._meta`` when it is an object."""
    if isinstance(message, (Request, Notification)) and message.params is not None:
        meta = message.params.get("_meta")
        if isinstance(meta, dict):
            return meta
    return None


def check_mirrored_headers(
    message: Request | Notification, headers: Mapping[str, str], meta: Mapping[str, Any] | None
) -> Rejection | None:
    """Rung 9 (digest §2.1, §2.4): mirrored headers present, well-formed and equal to the body.
    ``meta``: the message's ``meta_of``, which the ladder has already read.

    For notifications a missing header is tolerated (their header rules are undefined).
    """
    return (
        check_version_header(message, headers, meta)
        or check_method_header(message, headers)
        or check_name_header(message, headers)
    )


def _mismatch(message: Request | Notification, text: str) -> Rejection:
    return reject(400, HEADER_MISMATCH, text, id=message_id(message))


def _bad_chars(message: Request | Notification, header: str) -> Rejection:
    return _mismatch(message, f"{header} header holds characters not allowed in a header value")


def check_version_header(
    message: Request | Notification, headers: Mapping[str, str], meta: Mapping[str, Any] | None
) -> Rejection | None:
    header = headers.get(h.MCP_PROTOCOL_VERSION)
    if header is not None and h.has_invalid_header_chars(header):
        return _bad_chars(message, "MCP-Protocol-Version")
    if meta is None or PROTOCOL_VERSION_KEY not in meta:
        # Modern by the header alone: the missing _meta key is reported by rung 11 as -32602,
        # the code the spec gives for a missing required field.
        return None
    body = meta[PROTOCOL_VERSION_KEY]
    if header is None:
        if isinstance(message, Notification):
            return None
        return _mismatch(message, f"missing MCP-Protocol-Version header; params._meta names version {describe(body)}")
    if header != body:
        return _mismatch(
            message,
            f"MCP-Protocol-Version header {describe(header)} does not match "
            f"params._meta protocol version {describe(body)}",
        )
    return None


def check_method_header(message: Request | Notification, headers: Mapping[str, str]) -> Rejection | None:
    header = headers.get(h.MCP_METHOD)
    if header is None:
        if isinstance(message, Notification):
            return None
        return _mismatch(message, f"missing Mcp-Method header; the body's method is {describe(message.method)}")
    if h.has_invalid_header_chars(header):
        return _bad_chars(message, "Mcp-Method")
    if header != message.method:
        return _mismatch(
            message,
            f"Mcp-Method header {describe(header)} does not match the body's method {describe(message.method)}",
        )
    return None


def check_name_header(message: Request | Notification, headers: Mapping[str, str]) -> Rejection | None:
    """``Mcp-Name`` for ``tools/call``, ``prompts/get``, ``resources/read``; ignored elsewhere.

    When the body parameter is missing or not a string the request is malformed anyway;
    the check is skipped and the child answers -32602, the code for bad params.
    """
    key = NAME_PARAMS.get(message.method)
    if key is None or not isinstance(message, Request):
        return None
    expected = (message.params or {}).get(key)
    if not isinstance(expected, str):
        return None
    raw = headers.get(h.MCP_NAME)
    if raw is None:
        return _mismatch(message, f"missing Mcp-Name header; params.{key} is {describe(expected)}")
    if h.has_invalid_header_chars(raw):
        return _bad_chars(message, "Mcp-Name")
    try:
        decoded = h.decode_header_value(raw)
    except h.HeaderValueError as exc:
        return _mismatch(message, f"Mcp-Name header: {exc}")
    if decoded != expected:
        return _mismatch(
            message, f"Mcp-Name header {describe(decoded)} does not match params.{key} {describe(expected)}"
        )
    return None
