"""Pure helpers over tools and their schemas, for ``call`` and ``inspect``.

Contract:

* ``parse_arg("key=value")`` splits an ``--arg``; ``parse_json_arguments`` reads ``--json``
  (an object). ``build_arguments`` joins them (``--arg`` wins) and interprets each
  ``--arg`` value: JSON when it parses (``3``, ``true``, ``{"a": 1}``, ``null``), else the
  text itself — except that a property the schema types as plain ``string`` keeps the text
  (``--arg message=42`` sends ``"42"``), unless the text is a JSON string literal.
* ``mirrored_headers(params, arguments)`` renders a call's ``Mcp-Param-*`` headers the way a
  conforming 2026-07-28 client must (digest §2.3): strings plain or as the Base64
  sentinel, integers in decimal, booleans ``true``/``false``; an absent or null argument
  gets no header. A value that cannot be mirrored (``"3"`` for an integer, ``1.5``) is a
  ``UsageError``: the server would refuse the call with -32020 anyway, less clearly.
* ``argument_summary(input_schema)`` lists the top-level arguments (name, type label,
  required, the headers mirrored from it) for listings.
* ``walk_pages(fetch, key)`` walks a paginated list (``nextCursor``) with a page cap and a
  guard against a repeated cursor; it reports why it stopped early instead of raising.
* ``unlisted_tool_hint(name, tools)`` is what to add to a failed call of a tool that is not
  in the list: the listed names closest to it (``difflib``), or ``--list``.

No I/O of its own: ``walk_pages`` awaits the ``fetch`` it is given.
"""

from __future__ import annotations

import difflib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from gateway.protocol import headers as h
from gateway.protocol.jsonrpc import ErrorReply, JsonObject, Reply
from gateway.protocol.outcome import describe
from gateway.protocol.xmcpheader import MAX_SAFE_INTEGER, HeaderParam, argument_at
from gateway.tools.call.errors import UsageError

MAX_PAGES: Final = 100
"""Pages of a paginated list walked at most: a server that paginates forever cannot hang us."""
MAX_LABEL_DEPTH: Final = 3
"""How deep a type label looks into ``items`` and ``anyOf``: a listing, not a schema dump."""
MAX_SUGGESTIONS: Final = 3
"""Close tool names offered for a mistyped one: a hint, not a listing."""

# --- --arg and --json ---------------------------------------------------------------------------


def parse_arg(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UsageError(f"--arg takes KEY=VALUE, got {text!r}")
    return key, value


def parse_json_arguments(text: str) -> JsonObject:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"--json is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise UsageError(f"--json must be a JSON object of arguments, got {describe(value)}")
    return value


def arg_value(raw: str, schema: object) -> Any:
    """The value of one ``--arg`` (module docstring), given the property's schema if known."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
    if isinstance(schema, dict) and schema.get("type") == "string" and not isinstance(value, str):
        return raw
    return value


def build_arguments(base: JsonObject, pairs: Iterable[tuple[str, str]], tool: JsonObject | None) -> JsonObject:
    properties = _properties(tool.get("inputSchema") if tool else None)
    arguments = dict(base)
    for key, raw in pairs:
        arguments[key] = arg_value(raw, properties.get(key))
    return arguments


def _properties(schema: object) -> dict[str, Any]:
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return properties if isinstance(properties, dict) else {}


# --- Mcp-Param-* ----------------------------------------------------------------------------------


def mirrored_headers(params: Iterable[HeaderParam], arguments: Mapping[str, Any]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for param in params:
        value = argument_at(arguments, param.path)
        if value is not None:
            headers[param.display_name] = header_text(param, value)
    return headers


def header_text(param: HeaderParam, value: Any) -> str:
    """The header value for a present, non-null argument; ``UsageError`` if none can exist."""
    where = ".".join(param.path)
    if param.type == "string" and isinstance(value, str):
        return h.encode_header_value(value)
    if param.type == "boolean" and type(value) is bool:
        return "true" if value else "false"
    if param.type == "integer" and (type(value) is int or (type(value) is float and value.is_integer())):
        if abs(int(value)) <= MAX_SAFE_INTEGER:
            return str(int(value))
        raise UsageError(
            f"argument {where} = {describe(value)} is outside ±(2^53−1), so {param.display_name} cannot carry it"
        )
    raise UsageError(
        f"argument {where} must be {_article(param.type)} {param.type} (it is mirrored into "
        f"{param.display_name}), got {describe(value)}"
    )


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


# --- listings ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArgumentInfo:
    name: str
    type: str
    required: bool
    headers: tuple[str, ...] = ()  # Mcp-Param-* names mirrored from this argument or below it
    description: str = ""

    def short(self) -> str:
        """``name: type`` plus ``, required`` and ``→ Mcp-Param-X``, for one-line listings."""
        text = f"{self.name}: {self.type}"
        if self.required:
            text += ", required"
        if self.headers:
            text += " → " + ", ".join(self.headers)
        return text


def argument_summary(input_schema: object, header_params: Iterable[HeaderParam] = ()) -> list[ArgumentInfo]:
    required = input_schema.get("required") if isinstance(input_schema, dict) else None
    required_names = set(required) if isinstance(required, list) else set()
    by_root: dict[str, list[str]] = {}
    for param in header_params:
        by_root.setdefault(param.path[0], []).append(param.display_name)
    summary = []
    for name, schema in _properties(input_schema).items():
        description = schema.get("description") if isinstance(schema, dict) else None
        summary.append(
            ArgumentInfo(
                name,
                type_label(schema),
                name in required_names,
                tuple(by_root.get(name, ())),
                first_line(description) if isinstance(description, str) else "",
            )
        )
    return summary


def type_label(schema: object, depth: int = 0) -> str:
    """A short human label for a property schema: ``string``, ``array of integer``, ``a | b``."""
    if not isinstance(schema, dict) or depth > MAX_LABEL_DEPTH:
        return "any"
    declared = schema.get("type")
    if isinstance(declared, list) and all(isinstance(name, str) for name in declared) and declared:
        label = " | ".join(declared)
    elif declared == "array" and isinstance(schema.get("items"), dict):
        label = f"array of {type_label(schema['items'], depth + 1)}"
    elif isinstance(declared, str):
        label = declared
    elif isinstance(schema.get("anyOf") or schema.get("oneOf"), list):
        label = " | ".join(type_label(sub, depth + 1) for sub in schema.get("anyOf") or schema["oneOf"])
    elif "const" in schema:
        return f"= {describe(schema['const'])}"
    elif "$ref" in schema:
        return f"see {schema['$ref']}"
    else:
        label = "any"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        label += " (one of " + ", ".join(describe(v) for v in enum[:8]) + (", …" if len(enum) > 8 else "") + ")"
    return label


def unlisted_tool_hint(name: str, tools: Iterable[JsonObject]) -> str:
    """``'ecko' is not among the tools listed; did you mean echo?`` for a call of ``ecko``."""
    names = [tool["name"] for tool in tools if isinstance(tool.get("name"), str)]
    close = difflib.get_close_matches(name, names, n=MAX_SUGGESTIONS)
    if not close:
        return f"{name!r} is not among the {len(names)} tools listed (see them with --list)"
    return f"{name!r} is not among the tools listed; did you mean {_either(close)}?"


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def first_line(text: str) -> str:
    stripped = text.strip()
    return stripped.splitlines()[0] if stripped else ""


# --- pagination -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Listing:
    items: list[JsonObject]
    error: str | None = None  # why the walk stopped before the last page


async def walk_pages(fetch: Callable[[str | None], Awaitable[Reply]], key: str) -> Listing:
    items: list[JsonObject] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        reply = await fetch(cursor)
        if isinstance(reply, ErrorReply):
            return Listing(items, f"{reply.message} (code {reply.code})")
        page = reply.result.get(key)
        if not isinstance(page, list):
            return Listing(items, f"the result has no {key!r} list")
        items.extend(item for item in page if isinstance(item, dict))
        next_cursor = reply.result.get("nextCursor")
        if not isinstance(next_cursor, str) or not next_cursor:
            return Listing(items)
        if next_cursor in seen:
            return Listing(items, f"the server repeated the cursor {next_cursor!r}")
        seen.add(next_cursor)
        cursor = next_cursor
    return Listing(items, f"stopped after {MAX_PAGES} pages")
