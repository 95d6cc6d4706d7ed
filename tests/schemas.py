"""Validate messages against the official MCP JSON Schemas in ``tests/spec``.

``validate(message, "JSONRPCErrorResponse")`` raises ``jsonschema.ValidationError`` when
``message`` is not an instance of that ``$defs`` entry of the schema for ``revision``.
Each schema file is loaded once. The schemas are the spec's published files, copied
unchanged into the repository (``tests/spec/README.md``): the tests read nothing outside it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SPEC_DIR = Path(__file__).resolve().parent / "spec"


@functools.cache
def _schema(revision: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SPEC_DIR / f"schema-{revision}.json").read_text("utf-8"))
    return schema


@functools.cache
def _validator(revision: str, definition: str) -> Draft202012Validator:
    schema = _schema(revision)
    if definition not in schema["$defs"]:
        raise KeyError(f"schema {revision} has no definition {definition!r}")
    # The root keeps $defs so the definition's own "#/$defs/…" references still resolve.
    return Draft202012Validator({**schema, "$ref": f"#/$defs/{definition}"})


def validate(message: dict[str, Any], definition: str, revision: str = "2026-07-28") -> None:
    _validator(revision, definition).validate(message)
