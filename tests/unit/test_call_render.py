"""What ``call`` prints: each thing once."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gateway.tools.call.asks import field_label, field_value
from gateway.tools.call.render import print_result


def printed(result: dict[str, object]) -> str:
    out = io.StringIO()
    print_result(result, Console(file=out, width=200, soft_wrap=True, emoji=False, highlight=False))
    return out.getvalue()


def test_structured_content_that_only_wraps_the_text_is_not_printed_again() -> None:
    text = "[FILE] a.txt\n[DIR] sub"
    result = {"content": [{"type": "text", "text": text}], "structuredContent": {"content": text}}
    assert printed(result) == text + "\n"


def test_a_text_block_that_is_the_structured_json_is_not_printed_again() -> None:
    result = {"content": [{"type": "text", "text": '{"n": 3}'}], "structuredContent": {"n": 3}}
    assert printed(result) == '{\n  "n": 3\n}\n'


def test_structured_content_with_more_than_the_text_is_printed() -> None:
    result = {"content": [{"type": "text", "text": "hello Ada"}], "structuredContent": {"name": "Ada", "rounds": 1}}
    out = printed(result)
    assert out.startswith("hello Ada\n")
    assert '"rounds": 1' in out


def test_form_fields_are_labelled_and_typed() -> None:
    schema = {"type": "integer", "title": "Age", "description": "in years", "default": 30}
    assert field_label("age", schema, required=True) == "  Age (integer, required) — in years [30]: "
    assert field_value("42", schema) == 42
    assert field_value("yes", {"type": "boolean"}) is True
    assert field_value("b", {"type": "string", "enum": ["a", "b"]}) == "b"
    for bad, kind in (("x", {"type": "integer"}), ("maybe", {"type": "boolean"}), ("c", {"enum": ["a"]})):
        with pytest.raises(ValueError, match=r"please|yes or no|choose one of"):
            field_value(bad, kind)
