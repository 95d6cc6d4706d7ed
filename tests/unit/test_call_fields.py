"""``call``'s elicitation form fields: choices shown by title, several accepted, formats checked."""

from __future__ import annotations

import io
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from gateway.tools.call.asks import Asker
from gateway.tools.call.fields import choices, field_label, field_value, format_problem

TITLED_MULTI = {
    "type": "array",
    "title": "Toppings",
    "items": {"anyOf": [{"const": "chz", "title": "Cheese"}, {"const": "mush", "title": "Mushroom"}]},
    "minItems": 1,
    "maxItems": 2,
    "default": ["chz"],
}
UNTITLED_MULTI = {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}}
TITLED_SINGLE = {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]}
LEGACY_TITLED = {"type": "string", "enum": ["a", "b"], "enumNames": ["Alpha", "Beta"], "default": "b"}


def test_a_multi_select_shows_its_choices_by_title_with_its_bounds_and_default() -> None:
    label = field_label("toppings", TITLED_MULTI, required=True)
    assert label == (
        "  Toppings (any of: 1 Cheese, 2 Mushroom; several separated by commas, at least 1, at most 2,"
        " required) [Cheese]: "
    )
    assert "chz" not in label  # titles, not ids
    assert "any of: 1 red, 2 green, 3 blue" in field_label("colors", UNTITLED_MULTI, required=False)


def test_a_multi_select_takes_several_by_number_title_or_value_and_sends_an_array() -> None:
    assert field_value("1, Mushroom", TITLED_MULTI) == ["chz", "mush"]
    assert field_value("mush,mush", TITLED_MULTI) == ["mush"]
    assert field_value("blue, 1", UNTITLED_MULTI) == ["blue", "red"]
    assert field_value("green", UNTITLED_MULTI) == ["green"]  # one is still an array
    with pytest.raises(ValueError, match="at least 1"):
        field_value(" , ", TITLED_MULTI)
    with pytest.raises(ValueError, match="choose one of 1 Cheese, 2 Mushroom"):
        field_value("1, olives", TITLED_MULTI)


def test_titled_single_selects_show_titles_and_return_the_value() -> None:
    assert "one of: 1 Small, 2 Large" in field_label("size", TITLED_SINGLE, required=True)
    assert field_value("large", TITLED_SINGLE) == "l"
    assert field_value("1", TITLED_SINGLE) == "s"
    assert field_label("x", LEGACY_TITLED, required=False) == "  x (one of: 1 Alpha, 2 Beta) [Beta]: "
    assert field_value("Alpha", LEGACY_TITLED) == "a"


def test_an_enum_of_digits_means_its_values_before_its_positions() -> None:
    assert field_value("1", {"type": "string", "enum": ["3", "2", "1"]}) == "1"


@pytest.mark.parametrize(
    ("kind", "good", "bad"),
    [
        ("email", "ada@example.com", "ada.example.com"),
        ("uri", "https://example.com/x", "example dot com"),
        ("date", "2026-07-28", "28/07/2026"),
        ("date-time", "2026-07-28T09:30:00+00:00", "2026-07-28"),
    ],
)
def test_string_formats_are_checked(kind: str, good: str, bad: str) -> None:
    schema = {"type": "string", "format": kind}
    assert field_value(good, schema) == good
    with pytest.raises(ValueError, match="please"):
        field_value(bad, schema)
    assert f"(string, {kind})" in field_label("f", schema, required=False)


def test_lengths_and_ranges_are_checked() -> None:
    with pytest.raises(ValueError, match="at least 3 characters"):
        field_value("ab", {"type": "string", "minLength": 3})
    with pytest.raises(ValueError, match="at most 10"):
        field_value("11", {"type": "integer", "maximum": 10})
    assert field_value("10", {"type": "integer", "maximum": 10}) == 10


@given(
    st.lists(st.text(st.characters(blacklist_characters=",", blacklist_categories=("Cs",)), min_size=1), min_size=1),
    st.data(),
)
def test_every_choice_is_found_again_by_its_title(titles: list[str], data: st.DataObject) -> None:
    options = [{"const": f"v{n}", "title": title} for n, title in enumerate(titles)]
    schema: dict[str, Any] = {"type": "string", "oneOf": options}
    index = data.draw(st.integers(0, len(options) - 1))
    title = titles[index].strip()
    earlier = [t.strip().lower() for t in titles[:index]] + [f"v{n}" for n in range(index)]
    if not title or title.lower() in earlier:
        return  # an empty title, or one an earlier choice has (as title or value): that one wins
    assert field_value(title, schema) == f"v{index}"
    assert [c.value for c in choices(schema)] == [o["const"] for o in options]


def test_unknown_formats_are_not_checked() -> None:
    assert format_problem("anything", "hostname") is None


@pytest.mark.anyio
async def test_the_asker_sends_an_array_for_a_multi_select_after_a_bad_answer() -> None:
    err = io.StringIO()
    lines = iter(["1, olives\n", "2,1\n", "Large\n"])
    asker = Asker(Console(file=err, width=200), read_line=lambda: next(lines, ""))
    params = {
        "mode": "form",
        "message": "Your pizza?",
        "requestedSchema": {
            "type": "object",
            "properties": {"toppings": TITLED_MULTI, "size": TITLED_SINGLE},
            "required": ["toppings"],
        },
    }
    with anyio.fail_after(10):
        result = await asker.answer("elicitation/create", params)
    assert result == {"action": "accept", "content": {"toppings": ["mush", "chz"], "size": "l"}}
    assert "choose one of 1 Cheese, 2 Mushroom" in err.getvalue()  # asked again, with the choices
