"""Helpers for writing tools on ``gateway.tools.demo.framework``: results, schemas and arguments.

Standard library only, like the framework. Argument readers raise ``ToolInputError``
naming the argument; the framework reports it as an ``isError`` result.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

JsonObject = dict[str, Any]


class ToolInputError(ValueError):
    """Bad tool arguments. Reported as an ``isError`` result whose text is just the message."""


def text_result(text: str, *, structured: Any = None, is_error: bool = False) -> JsonObject:
    """A ``CallToolResult`` with one text block, optional ``structuredContent`` and ``isError``."""
    result: JsonObject = {"content": [{"type": "text", "text": text}]}
    if structured is not None:
        result["structuredContent"] = structured
    if is_error:
        result["isError"] = True
    return result


def object_schema(properties: JsonObject | None = None, required: Iterable[str] = ()) -> JsonObject:
    """An ``inputSchema``: ``{"type": "object", "properties": …, "required": […]}``."""
    schema: JsonObject = {"type": "object", "properties": properties or {}}
    if needed := list(required):  # an empty "required" is invalid in older drafts
        schema["required"] = needed
    return schema


def int_arg(
    arguments: JsonObject,
    name: str,
    *,
    default: int | None = None,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """An integer argument within bounds. Raises ToolInputError naming the argument."""
    value = arguments.get(name, default)
    if value is None:
        raise ToolInputError(f"argument {name!r} is required")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolInputError(f"argument {name!r} must be an integer, got {value!r}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ToolInputError(f"argument {name!r} must be between {minimum} and {maximum}, got {value}")
    return value


def str_arg(arguments: JsonObject, name: str, *, default: str | None = None) -> str:
    """A string argument. Raises ToolInputError naming the argument."""
    value = arguments.get(name, default)
    if not isinstance(value, str):
        raise ToolInputError(f"argument {name!r} must be a string" + ("" if value is not None else " (required)"))
    return value


def str_list_arg(arguments: JsonObject, name: str) -> list[str]:
    """A required list-of-strings argument. Raises ToolInputError naming the argument."""
    value = arguments.get(name)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ToolInputError(f"argument {name!r} must be a list of strings")
    return value
