"""JSON-RPC 2.0 messages, parsed once with orjson.

Contract: ``decode`` turns bytes into JSON values (``ParseError`` on bad JSON);
``parse_message`` turns one JSON value into a ``Request``, ``Notification``, ``Result`` or
``ErrorReply`` (``InvalidMessage`` otherwise, carrying the id when it was readable, so a
malformed reply can still end the request it answers); ``encode`` writes compact UTF-8,
``encode_line`` the same with the newline that ends a message on stdio.

Ids keep their exact JSON type: ``7`` and ``"7"`` are different ids, and ``true`` or
``1.0`` are not ids at all (``bool`` is a subclass of ``int`` in Python, so the check is on
the exact type). Imports: standard library and orjson only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import orjson

JsonId: TypeAlias = int | str
JsonObject: TypeAlias = dict[str, Any]

# Standard JSON-RPC codes (digest §0.2).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# MCP 2026-07-28 codes.
HEADER_MISMATCH = -32020
MISSING_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
# Legacy "resource not found" (modern servers must not emit it).
LEGACY_RESOURCE_NOT_FOUND = -32002
# Legacy (2025-11-25) URLElicitationRequired (modern servers must not emit it either).
URL_ELICITATION_REQUIRED = -32042

PROGRESS = "notifications/progress"
"""The one request-scoped notification every layer knows by name (it is coalesced, retagged, rendered)."""


class ParseError(ValueError):
    """The bytes are not JSON."""


class InvalidMessage(ValueError):
    """The JSON is not a JSON-RPC 2.0 message. ``id`` is set when one could be read."""

    def __init__(self, reason: str, *, id: JsonId | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.id = id


def is_id(value: object) -> bool:
    """A JSON-RPC id: a string or an integer, never a boolean, a float or null."""
    return type(value) is int or type(value) is str


# The four messages are values: made by the parsers and the steps, never changed after. They
# are not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__,
# and a call makes several of them (its request, the child's, the child's reply): about 7k
# instructions of a modern call's ~840k (``python -m bench.instructions``).
@dataclass(slots=True)
class Request:
    id: JsonId
    method: str
    params: JsonObject | None = None

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"jsonrpc": "2.0", "id": self.id, "method": self.method}
        if self.params is not None:
            out["params"] = self.params
        return out


@dataclass(slots=True)
class Notification:
    method: str
    params: JsonObject | None = None

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"jsonrpc": "2.0", "method": self.method}
        if self.params is not None:
            out["params"] = self.params
        return out


@dataclass(slots=True)
class Result:
    id: JsonId
    result: JsonObject

    def to_dict(self) -> JsonObject:
        return {"jsonrpc": "2.0", "id": self.id, "result": self.result}


@dataclass(slots=True)
class ErrorReply:
    """An error response. ``error`` is kept whole, so ``code``, ``message`` and ``data`` survive."""

    id: JsonId | None
    error: JsonObject

    @property
    def code(self) -> int:
        code: int = self.error["code"]
        return code

    @property
    def message(self) -> str:
        message: str = self.error["message"]
        return message

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"jsonrpc": "2.0", "error": self.error}
        if self.id is not None:
            out["id"] = self.id
        return out


Message: TypeAlias = Request | Notification | Result | ErrorReply
Reply: TypeAlias = Result | ErrorReply


def error_object(code: int, message: str, data: Any = None) -> JsonObject:
    out: JsonObject = {"code": code, "message": message}
    if data is not None:
        out["data"] = data
    return out


def decode(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ParseError(f"not valid JSON: {exc}") from exc


def encode(message: Message | JsonObject) -> bytes:
    payload = message if isinstance(message, dict) else message.to_dict()
    return orjson.dumps(payload)


def encode_line(message: Message) -> bytes:
    """``encode`` with its newline, for stdio: written by orjson, not copied again to add it."""
    return orjson.dumps(message.to_dict(), option=orjson.OPT_APPEND_NEWLINE)


def parse_message(obj: Any) -> Message:
    """Classify one decoded JSON value; raise ``InvalidMessage`` if it is not JSON-RPC 2.0."""
    if not isinstance(obj, dict):
        raise InvalidMessage(f"a JSON-RPC message is an object, not {_json_type(obj)}")
    raw_id = obj.get("id")
    readable_id = raw_id if type(raw_id) is int or type(raw_id) is str else None  # is_id, inline: two calls a request
    if obj.get("jsonrpc") != "2.0":
        raise InvalidMessage('"jsonrpc" must be "2.0"', id=readable_id)
    params = obj.get("params")
    if "method" in obj:
        method = obj["method"]
        if not isinstance(method, str) or not method:
            raise InvalidMessage('"method" must be a non-empty string', id=readable_id)
        if params is not None and not isinstance(params, dict):
            raise InvalidMessage('"params" must be an object (MCP uses named parameters)', id=readable_id)
        if "result" in obj or "error" in obj:
            raise InvalidMessage("a message cannot be both a request and a response", id=readable_id)
        if "id" not in obj:
            return Notification(method, params)
        if readable_id is None:
            raise InvalidMessage('"id" must be a string or an integer', id=None)
        return Request(readable_id, method, params)
    if "result" in obj:
        if "error" in obj:
            raise InvalidMessage('a response has "result" or "error", not both', id=readable_id)
        if readable_id is None:
            raise InvalidMessage('a result needs a string or integer "id"')
        result = obj["result"]
        if not isinstance(result, dict):
            raise InvalidMessage(f'"result" must be an object, not {_json_type(result)}', id=readable_id)
        return Result(readable_id, result)
    if "error" in obj:
        if raw_id is not None and readable_id is None:
            raise InvalidMessage('"id" must be a string, an integer or null')
        error = obj["error"]
        problem = _error_object_problem(error)
        if problem:
            raise InvalidMessage(f"malformed error object: {problem}", id=readable_id)
        return ErrorReply(readable_id, error)
    raise InvalidMessage('no "method", "result" or "error"', id=readable_id)


def _error_object_problem(error: Any) -> str | None:
    if not isinstance(error, dict):
        return f"expected an object, got {_json_type(error)}"
    if type(error.get("code")) is not int:
        return '"code" must be an integer'
    if not isinstance(error.get("message"), str):
        return '"message" must be a string'
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
