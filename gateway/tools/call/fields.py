"""One field of an elicitation form: how ``call`` labels it and reads the answer typed.

The field schemas are the spec's ``PrimitiveSchemaDefinition`` (elicitation, form mode):

* strings, with ``minLength``/``maxLength`` and a ``format`` (``email``, ``uri``, ``date``,
  ``date-time``) that the answer is checked against;
* numbers and integers, with ``minimum``/``maximum``; booleans (yes/no);
* single-select enums: ``enum`` (titles from the legacy ``enumNames``), or ``oneOf`` /
  ``anyOf`` of ``{const, title}``;
* multi-select enums: ``type: array`` with ``items.enum`` or ``items.anyOf`` of
  ``{const, title}``, ``minItems``/``maxItems``.

Choices are shown by their titles, numbered; an answer may be the number, the title or
the value (case-insensitive); a multi-select takes several, separated by commas, and its
value is the array of the chosen values. ``field_value`` raises ``ValueError`` saying what
is expected, so the question is asked again. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Final
from urllib.parse import urlsplit

import orjson

from gateway.protocol.jsonrpc import JsonObject

EMAIL: Final = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
"""An address with one ``@`` and a dot in its domain: enough to catch a typo, not RFC 5322."""


@dataclass(frozen=True, slots=True)
class Choice:
    value: Any
    title: str


def choices(schema: JsonObject) -> list[Choice]:
    """The options of a single- or multi-select field, in order (none for other fields)."""
    source = schema.get("items") if schema.get("type") == "array" else schema
    if not isinstance(source, dict):
        return []
    enum = source.get("enum")
    if isinstance(enum, list):
        names = source.get("enumNames")
        titles = names if isinstance(names, list) and len(names) == len(enum) else enum
        return [Choice(value, str(title)) for value, title in zip(enum, titles, strict=True)]
    options = source.get("oneOf") or source.get("anyOf")
    if isinstance(options, list):
        return [
            Choice(o["const"], str(o.get("title", o["const"]))) for o in options if isinstance(o, dict) and "const" in o
        ]
    return []


def is_multi(schema: JsonObject) -> bool:
    return schema.get("type") == "array"


def field_label(name: str, schema: JsonObject, required: bool) -> str:
    """``title (type, required) — description [default]: `` — the prompt for one form field."""
    title = schema.get("title") if isinstance(schema.get("title"), str) else name
    options = choices(schema)
    details = [_menu(options, schema) if options else _kind(schema)]
    if required:
        details.append("required")
    description = schema.get("description")
    hint = f" — {description}" if isinstance(description, str) and description else ""
    return f"  {title} ({', '.join(details)}){hint}{_default(schema, options)}: "


def _kind(schema: JsonObject) -> str:
    kind = schema.get("type")
    text = kind if isinstance(kind, str) else "string"
    limits = []
    if isinstance(schema.get("format"), str):
        text += f", {schema['format']}"
    for key, word in (("minLength", "at least {} characters"), ("maxLength", "at most {} characters")):
        if isinstance(schema.get(key), int):
            limits.append(word.format(schema[key]))
    for key, word in (("minimum", "at least {}"), ("maximum", "at most {}")):
        if isinstance(schema.get(key), (int, float)) and not isinstance(schema.get(key), bool):
            limits.append(word.format(f"{schema[key]:g}"))
    return ", ".join([text, *limits])


def _menu(options: list[Choice], schema: JsonObject) -> str:
    numbered = ", ".join(f"{n} {choice.title}" for n, choice in enumerate(options, 1))
    if not is_multi(schema):
        return f"one of: {numbered}"
    text = f"any of: {numbered}; several separated by commas"
    for key, word in (("minItems", "at least {}"), ("maxItems", "at most {}")):
        if isinstance(schema.get(key), int):
            text += f", {word.format(schema[key])}"
    return text


def _default(schema: JsonObject, options: list[Choice]) -> str:
    if "default" not in schema:
        return ""
    default = schema["default"]
    titles = {_key(c.value): c.title for c in options}
    if options and isinstance(default, list):
        return f" [{', '.join(titles.get(_key(v), str(v)) for v in default)}]"
    if options and _key(default) in titles:
        return f" [{titles[_key(default)]}]"
    return f" [{orjson.dumps(default).decode()}]"


def _key(value: Any) -> bytes:
    """Values compared by their JSON (so 1 and "1", or 1 and True, stay apart)."""
    return orjson.dumps(value)


def field_value(text: str, schema: JsonObject) -> Any:
    """The typed value of one answer; ``ValueError`` with what is expected."""
    options = choices(schema)
    if options:
        if is_multi(schema):
            return _chosen_many(text, options, schema)
        return _chosen(text.strip(), options)
    kind = schema.get("type")
    if kind == "boolean":
        lowered = text.strip().lower()
        if lowered in ("y", "yes", "true", "1"):
            return True
        if lowered in ("n", "no", "false", "0"):
            return False
        raise ValueError("answer yes or no")
    if kind in ("integer", "number"):
        return _number(text.strip(), schema)
    return _string(text, schema)


def _chosen(text: str, options: list[Choice]) -> Any:
    """A value or title first (an enum of digits means its values), then a number."""
    for choice in options:
        if text.lower() in (choice.title.strip().lower(), str(choice.value).lower()):
            return choice.value
    if text.isdigit() and 1 <= int(text) <= len(options):
        return options[int(text) - 1].value
    listed = ", ".join(f"{n} {c.title}" for n, c in enumerate(options, 1))
    raise ValueError(f"choose one of {listed} (a number or a name)")


def _chosen_many(text: str, options: list[Choice], schema: JsonObject) -> list[Any]:
    picked: list[Any] = []
    for part in (p.strip() for p in text.split(",")):
        if part:
            value = _chosen(part, options)
            if _key(value) not in {_key(v) for v in picked}:
                picked.append(value)
    low, high = schema.get("minItems"), schema.get("maxItems")
    if isinstance(low, int) and len(picked) < low:
        raise ValueError(f"choose at least {low}, separated by commas")
    if isinstance(high, int) and len(picked) > high:
        raise ValueError(f"choose at most {high}")
    return picked


def _number(text: str, schema: JsonObject) -> int | float:
    try:
        value: int | float = int(text) if schema.get("type") == "integer" else float(text)
    except ValueError:
        raise ValueError("a whole number, please" if schema.get("type") == "integer" else "a number, please") from None
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(low, (int, float)) and value < low:
        raise ValueError(f"at least {low:g}, please")
    if isinstance(high, (int, float)) and value > high:
        raise ValueError(f"at most {high:g}, please")
    return value


def _string(text: str, schema: JsonObject) -> str:
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and len(text) < low:
        raise ValueError(f"at least {low} characters, please")
    if isinstance(high, int) and len(text) > high:
        raise ValueError(f"at most {high} characters, please")
    problem = format_problem(text, schema.get("format"))
    if problem is not None:
        raise ValueError(problem)
    return text


def format_problem(text: str, kind: object) -> str | None:
    """What is wrong with ``text`` for the string ``format`` ``kind``; None when it fits
    (or the format is not one the spec names)."""
    if kind == "email" and not EMAIL.match(text):
        return "an email address, please (name@example.com)"
    if kind == "uri":
        parts = urlsplit(text)
        if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*$", parts.scheme) or not (parts.netloc or parts.path):
            return "a URI with its scheme, please (https://example.com/page)"
    if kind == "date":
        try:
            date.fromisoformat(text)
        except ValueError:
            return "a date, please (2026-07-28)"
    if kind == "date-time":
        try:
            datetime.fromisoformat(text)
        except ValueError:
            return "a date and time, please (2026-07-28T09:30:00Z)"
        if "T" not in text.upper() and " " not in text:
            return "a date and time, please (2026-07-28T09:30:00Z)"
    return None
