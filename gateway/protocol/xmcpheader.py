"""``x-mcp-header``: tool arguments mirrored into ``Mcp-Param-*`` headers (digest §2.3, §7.7).

Contract:

* ``tool_header_params(input_schema)`` lists a tool's annotated parameters, or raises
  ``InvalidToolAnnotation`` when any annotation breaks one of the five constraints.
* ``filter_tools(tools)`` keeps the valid tools of a ``tools/list`` result and names the
  dropped ones with the reason (Streamable HTTP clients MUST drop them, so the gateway
  leaves them out and the caller logs a warning).
* ``check_param_headers(params, arguments, headers)`` compares the ``Mcp-Param-*``
  headers of a modern ``tools/call`` with its arguments: a ``Rejection`` (400/-32020)
  or None. The ingress ladder cannot run it (it has no tool schemas), so the HTTP edge
  calls it after ``ingress.check_post`` accepts the request.

Policies where the spec is silent (digest §8.6):

* ``type`` may be a single name or an array holding exactly one of ``string``,
  ``integer``, ``boolean`` plus optionally ``"null"`` (``["string", "null"]`` is a
  nullable string; a null argument just means "no header"). Any other array, a missing
  ``type`` (``enum``/``const`` alone) or ``number`` makes the tool invalid.
* A body value whose JSON type does not match the declared type is refused (400/-32020):
  a conforming client could not have rendered a header for it, and the gateway must not
  let an intermediary route on a header the body contradicts. For ``integer``, ``42.0``
  counts as 42; values outside ±(2^53−1) are refused the same way (the spec limits
  mirrored integers to that range).
* Integer headers compare numerically: an optional ``-``, 1–20 digits and an optional
  all-zero fraction (``"42"``, ``"042"``, ``"42.0"`` all equal 42); booleans are exactly
  ``true``/``false``; strings compare exactly after sentinel decoding.
* An argument path through a non-object (say a string where the schema has an object)
  reads as absent, the way a client's extraction would, so the header must be absent.
* ``Mcp-Param-*`` headers no parameter declares are ignored: intermediaries forward
  them and ignore them (digest §2.3).
* Schema walks are bounded (``MAX_SCHEMA_DEPTH``, ``MAX_SCHEMA_NODES``); a schema beyond
  the bounds cannot be shown valid, so the tool is treated as invalid. ``$ref`` is never
  dereferenced: an annotation behind one is unreachable by definition.

Imports: standard library and ``gateway.protocol`` only; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from gateway.protocol import headers as h
from gateway.protocol.jsonrpc import HEADER_MISMATCH, JsonId, JsonObject
from gateway.protocol.outcome import Rejection, describe, reject

X_MCP_HEADER: Final = "x-mcp-header"
MAX_SAFE_INTEGER: Final = 2**53 - 1
"""Mirrored integers must survive IEEE 754 doubles (JavaScript clients and intermediaries)."""
MAX_SCHEMA_DEPTH: Final = 64
"""Nesting beyond this is not a real tool's schema; it bounds the walk (spec SHOULD)."""
MAX_SCHEMA_NODES: Final = 10_000
"""Subschemas visited per tool; large generated schemas stay far below it."""

ParamType: TypeAlias = Literal["string", "integer", "boolean"]
_HEADER_TYPES: Final[dict[str, ParamType]] = {"string": "string", "integer": "integer", "boolean": "boolean"}

# RFC 9110 §5.6.2 token = 1*tchar.
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Numeric comparison of integer headers; 20 digits bound int() far below its digit limit.
_INTEGER_TEXT: Final = re.compile(r"(-?[0-9]{1,20})(?:\.0+)?")

# JSON Schema keywords whose value is a subschema or an array of subschemas (2020-12, plus
# draft-07's array ``items`` and ``additionalItems``). Crossing one leaves the
# ``properties`` chain, so an annotation below it is not statically reachable.
_APPLICATORS: Final = frozenset(
    {
        "items",
        "prefixItems",
        "additionalItems",
        "contains",
        "unevaluatedItems",
        "additionalProperties",
        "unevaluatedProperties",
        "propertyNames",
        "not",
        "if",
        "then",
        "else",
        "allOf",
        "anyOf",
        "oneOf",
        "contentSchema",
    }
)
# Keywords whose value maps names to subschemas. ``properties`` is handled on its own.
_MAP_APPLICATORS: Final = frozenset({"patternProperties", "dependentSchemas", "dependencies", "$defs", "definitions"})
# Instance-data keywords (``default``, ``examples``, ``const``, ``enum``) and unknown
# keywords are not entered: a key spelled "x-mcp-header" inside data is not an annotation.


class InvalidToolAnnotation(ValueError):
    """A tool's ``x-mcp-header`` annotations break the spec; ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class HeaderParam:
    """One annotated parameter: ``header`` as annotated, ``path`` of property names from the root.

    An ``integer`` parameter also implies values within ±``MAX_SAFE_INTEGER``.
    """

    header: str
    path: tuple[str, ...]
    type: ParamType

    @property
    def header_name(self) -> str:
        """The lower-cased HTTP header name, as the edge hands headers over."""
        return h.MCP_PARAM_PREFIX + self.header.lower()

    @property
    def display_name(self) -> str:
        return "Mcp-Param-" + self.header


@dataclass(frozen=True, slots=True)
class _Position:
    node: dict[str, Any]
    path: tuple[str, ...] | None  # None once any keyword other than ``properties`` was crossed
    where: str  # JSON Pointer, for messages
    depth: int


def _positions(root: dict[str, Any]) -> Iterator[_Position]:
    """Every subschema of ``root`` in document order, within the walk bounds."""
    stack = [_Position(root, (), "", 0)]
    visited = 0
    while stack:
        position = stack.pop()
        visited += 1
        if visited > MAX_SCHEMA_NODES:
            raise InvalidToolAnnotation(f"inputSchema has more than {MAX_SCHEMA_NODES} subschemas")
        if position.depth > MAX_SCHEMA_DEPTH:
            raise InvalidToolAnnotation(f"inputSchema nests deeper than {MAX_SCHEMA_DEPTH} at {position.where}")
        yield position
        children = list(_children(position))
        stack.extend(reversed(children))


def _children(parent: _Position) -> Iterator[_Position]:
    depth = parent.depth + 1
    for keyword, value in parent.node.items():
        where = f"{parent.where}/{_pointer_escape(keyword)}"
        if keyword == "properties" and isinstance(value, dict):
            for name, sub in value.items():
                if isinstance(sub, dict):
                    path = None if parent.path is None else (*parent.path, name)
                    yield _Position(sub, path, f"{where}/{_pointer_escape(name)}", depth)
        elif keyword in _APPLICATORS:
            subs = value if isinstance(value, list) else [value]
            for index, sub in enumerate(subs):
                if isinstance(sub, dict):
                    suffix = f"/{index}" if isinstance(value, list) else ""
                    yield _Position(sub, None, where + suffix, depth)
        elif keyword in _MAP_APPLICATORS and isinstance(value, dict):
            for name, sub in value.items():
                if isinstance(sub, dict):
                    yield _Position(sub, None, f"{where}/{_pointer_escape(name)}", depth)


def _pointer_escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def tool_header_params(input_schema: Any) -> tuple[HeaderParam, ...]:
    """The tool's header parameters in schema order; ``InvalidToolAnnotation`` if any is invalid.

    A schema that is not an object has no subschemas and so no annotations.
    """
    if not isinstance(input_schema, dict):
        return ()
    params: list[HeaderParam] = []
    seen: dict[str, str] = {}  # lower-cased header → where it was declared
    for position in _positions(input_schema):
        if X_MCP_HEADER in position.node:
            param = _header_param(position)
            where = position.where or "the schema root"
            if param.header.lower() in seen:
                raise InvalidToolAnnotation(
                    f"x-mcp-header {param.header!r} at {where} repeats the one at "
                    f"{seen[param.header.lower()]} (names are case-insensitive)"
                )
            seen[param.header.lower()] = where
            params.append(param)
    return tuple(params)


def _header_param(position: _Position) -> HeaderParam:
    where = position.where or "the schema root"
    if not position.path:  # None: off the properties chain; (): the root itself
        raise InvalidToolAnnotation(f"x-mcp-header at {where} is not reachable through properties alone")
    header = position.node[X_MCP_HEADER]
    if not isinstance(header, str) or not header:
        raise InvalidToolAnnotation(f"x-mcp-header at {where} must be a non-empty string")
    if not _TOKEN.fullmatch(header):
        raise InvalidToolAnnotation(f"x-mcp-header {describe(header)} at {where} is not an HTTP token")
    param_type = _param_type(position.node.get("type"))
    if param_type is None:
        declared = position.node.get("type")
        found = "declares no type" if declared is None else f"has type {describe(declared)}"
        raise InvalidToolAnnotation(
            f"x-mcp-header {header!r} at {where} is on a property that {found}; "
            "it must be string, integer or boolean (optionally with null)"
        )
    return HeaderParam(header, position.path, param_type)


def _param_type(declared: Any) -> ParamType | None:
    """``"string"``, or ``["string", "null"]``: one header type, optionally nullable."""
    names = declared if isinstance(declared, list) else [declared]
    non_null = [name for name in names if name != "null"]
    if len(non_null) != 1 or not isinstance(non_null[0], str):
        return None
    return _HEADER_TYPES.get(non_null[0])


def filter_tools(tools: list[JsonObject]) -> tuple[list[JsonObject], list[tuple[str, str]]]:
    """``(kept tools, [(name, reason), …] for the dropped ones)``, order preserved."""
    kept: list[JsonObject] = []
    dropped: list[tuple[str, str]] = []
    for tool in tools:
        if not isinstance(tool, dict):  # the list comes from a child: trust no shape
            dropped.append((describe(tool), "a tool must be a JSON object"))
            continue
        try:
            tool_header_params(tool.get("inputSchema"))
        except InvalidToolAnnotation as exc:
            name = tool.get("name")
            dropped.append((name if isinstance(name, str) else describe(name), exc.reason))
        else:
            kept.append(tool)
    return kept, dropped


# --- Request-time validation ----------------------------------------------------------------


def check_param_headers(
    params: tuple[HeaderParam, ...],
    arguments: Mapping[str, Any] | None,
    headers: Mapping[str, str],
    *,
    request_id: JsonId | None = None,
) -> Rejection | None:
    """Each declared header present exactly when its argument is, and equal to it (digest §2.3).

    ``headers`` has lower-cased names. ``request_id`` goes into the rejection's response.
    """
    for param in params:
        problem = _param_problem(param, arguments, headers)
        if problem is not None:
            return reject(400, HEADER_MISMATCH, problem, id=request_id)
    return None


def _param_problem(param: HeaderParam, arguments: Mapping[str, Any] | None, headers: Mapping[str, str]) -> str | None:
    raw = headers.get(param.header_name)
    value = argument_at(arguments, param.path)
    where = "arguments." + ".".join(param.path)
    if value is None:
        if raw is None:
            return None
        return f"{param.display_name} header is present but {where} is absent or null"
    value_problem = _value_problem(param.type, value)
    if value_problem is not None:
        return f"{where} {value_problem}, so it cannot be mirrored into {param.display_name}"
    if raw is None:
        return f"missing {param.display_name} header; {where} is {describe(value)}"
    if h.has_invalid_header_chars(raw):
        return f"{param.display_name} header holds characters not allowed in a header value"
    try:
        decoded = h.decode_header_value(raw)
    except h.HeaderValueError as exc:
        return f"{param.display_name} header: {exc}"
    if not _matches(param.type, decoded, value):
        return f"{param.display_name} header {describe(decoded)} does not match {where} {describe(value)}"
    return None


def argument_at(arguments: Mapping[str, Any] | None, path: tuple[str, ...]) -> Any:
    """The argument at ``path``, or None when absent, null, or below a non-object."""
    node: Any = arguments
    for step in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(step)
    return node


def _value_problem(param_type: ParamType, value: Any) -> str | None:
    if param_type == "string":
        return None if isinstance(value, str) else f"is {describe(value)}, not a string"
    if param_type == "boolean":
        return None if isinstance(value, bool) else f"is {describe(value)}, not a boolean"
    # bool subclasses int, so the checks are on the exact type.
    if not (type(value) is int or (type(value) is float and value.is_integer())):
        return f"is {describe(value)}, not an integer"
    if abs(int(value)) > MAX_SAFE_INTEGER:
        return f"is {describe(value)}, outside ±(2^53−1)"
    return None


def _matches(param_type: ParamType, decoded: str, value: Any) -> bool:
    if param_type == "string":
        return bool(decoded == value)
    if param_type == "boolean":
        return decoded == ("true" if value else "false")
    match = _INTEGER_TEXT.fullmatch(decoded)
    return match is not None and int(match.group(1)) == int(value)
