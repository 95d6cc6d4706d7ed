"""Header names, the Base64 sentinel, character validation, Accept and Content-Type."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol import headers as h
from gateway.protocol.headers import (
    HeaderValueError,
    accepts,
    decode_header_value,
    encode_header_value,
    has_invalid_header_chars,
    media_type,
)


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def test_header_names_are_lower_case_constants() -> None:
    names = [
        h.ACCEPT,
        h.CONTENT_TYPE,
        h.ORIGIN,
        h.MCP_PROTOCOL_VERSION,
        h.MCP_METHOD,
        h.MCP_NAME,
        h.MCP_SESSION_ID,
        h.LAST_EVENT_ID,
        h.MCP_PARAM_PREFIX,
    ]
    assert all(name == name.lower() for name in names)
    assert h.MCP_PARAM_PREFIX == "mcp-param-"


# --- decode ---------------------------------------------------------------------------------


def test_a_sentinel_value_is_decoded_as_utf8() -> None:
    assert decode_header_value(b64("café ☕")) == "café ☕"


def test_a_plain_value_is_returned_literally() -> None:
    assert decode_header_value("get_weather") == "get_weather"


def test_surrounding_whitespace_is_trimmed_around_plain_and_sentinel_values() -> None:
    assert decode_header_value("  get_weather\t") == "get_weather"
    assert decode_header_value(" " + b64("x y") + " ") == "x y"


def test_an_empty_value_is_an_empty_string() -> None:
    assert decode_header_value("") == ""
    assert decode_header_value("=?base64??=") == ""


@pytest.mark.parametrize(
    "raw",
    ["=?BASE64?SGk=?=", "=?Base64?SGk=?=", "=?base64?SGk=", "base64?SGk=?=", "SGk=?=", "=?base64?="],
)
def test_a_value_without_both_exact_lower_case_markers_is_literal(raw: str) -> None:
    assert decode_header_value(raw) == raw


@pytest.mark.parametrize(
    "raw",
    [
        "=?base64?SGk?=",  # missing padding
        "=?base64?SGk==?=",  # excess padding
        "=?base64?S$k=?=",  # outside the alphabet
        "=?base64?SGk_?=",  # URL-safe alphabet
        "=?base64?SGl=?=",  # non-canonical: non-zero trailing bits
        "=?base64?SG k=?=",  # inner space
        "=?base64?é?=",  # non-ASCII payload
    ],
)
def test_bad_base64_or_padding_raises_a_value_error(raw: str) -> None:
    with pytest.raises(HeaderValueError):
        decode_header_value(raw)
    assert issubclass(HeaderValueError, ValueError)


def test_a_payload_that_is_not_utf8_raises_a_value_error() -> None:
    raw = "=?base64?" + base64.b64encode(b"\xff\xfe").decode() + "?="
    with pytest.raises(HeaderValueError, match="UTF-8"):
        decode_header_value(raw)


# --- encode ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["get_weather", "a b\tc", "file:///tmp/x.txt", "", "=?base64?x"])
def test_a_header_safe_value_is_sent_plain(value: str) -> None:
    assert encode_header_value(value) == value


@pytest.mark.parametrize(
    "value", ["café", "line\nbreak", "nul\x00", " leading", "trailing\t", "del\x7f", "=?base64?SGk=?="]
)
def test_an_unsafe_value_or_one_shaped_like_a_sentinel_is_base64_encoded(value: str) -> None:
    encoded = encode_header_value(value)
    assert encoded.startswith("=?base64?")
    assert encoded.endswith("?=")
    assert not has_invalid_header_chars(encoded)
    assert decode_header_value(encoded) == value


@given(st.text())
def test_encoding_then_decoding_any_text_gives_it_back(value: str) -> None:
    encoded = encode_header_value(value)
    assert not has_invalid_header_chars(encoded)
    assert encoded == encoded.strip(" \t")
    assert decode_header_value(encoded) == value


# --- invalid characters ---------------------------------------------------------------------


@pytest.mark.parametrize("value", ["plain", "with space", "tab\there", "", "~!#$%"])
def test_visible_ascii_spaces_and_tabs_are_valid(value: str) -> None:
    assert not has_invalid_header_chars(value)


@pytest.mark.parametrize("value", ["a\rb", "a\nb", "a\x00b", "a\x01b", "a\x7fb", "caf\xe9", "日本"])
def test_cr_lf_nul_controls_del_and_non_ascii_are_invalid(value: str) -> None:
    assert has_invalid_header_chars(value)


def test_exactly_htab_and_u0020_to_u007e_are_valid_alone_and_after_a_plain_value() -> None:
    allowed = {"\t", *map(chr, range(0x20, 0x7F))}
    for code in range(0x300):  # ASCII, Latin-1 (how ASGI hands header bytes over) and beyond
        char = chr(code)
        for value in (char, "plain" + char, char + "\t"):
            assert has_invalid_header_chars(value) is (char not in allowed), repr(value)


# --- Accept and Content-Type ----------------------------------------------------------------


@pytest.mark.parametrize(
    "accept",
    [
        "application/json, text/event-stream",
        "text/event-stream;q=0.5, application/json;q=1",
        "*/*",
        "application/*, text/*",
        "APPLICATION/JSON, Text/Event-Stream",
        "application/json;charset=utf-8, text/event-stream",
    ],
)
def test_accept_lists_json_and_sse(accept: str) -> None:
    assert accepts(accept, "application/json")
    assert accepts(accept, "text/event-stream")


def test_q_zero_means_not_acceptable() -> None:
    assert not accepts("application/json, text/event-stream;q=0", "text/event-stream")


def test_the_most_specific_range_decides() -> None:
    accept = "application/json, */*;q=0"
    assert accepts(accept, "application/json")
    assert not accepts(accept, "text/event-stream")
    assert accepts("text/*;q=0, text/event-stream", "text/event-stream")


def test_among_repeated_ranges_the_highest_weight_wins() -> None:
    assert accepts("text/event-stream;q=0, text/event-stream;q=0.5", "text/event-stream")


@pytest.mark.parametrize("accept", ["application/json;q=2", "application/json;q=abc", "application", "*/json"])
def test_malformed_media_ranges_are_ignored(accept: str) -> None:
    assert not accepts(accept, "application/json")


def test_a_missing_accept_header_accepts_nothing() -> None:
    assert not accepts(None, "application/json")


def test_content_type_parameters_are_dropped_and_case_folded() -> None:
    assert media_type("Application/JSON; charset=utf-8") == "application/json"
    assert media_type("") == ""


def test_remembered_accept_values_stay_within_their_bound() -> None:
    for number in range(h.MAX_REMEMBERED_ACCEPT * 3):  # a client that varies its Accept
        value = f"application/json, text/event-stream, x/y{number}"
        assert h.accepts_json_and_sse(value)
        assert not h.accepts_json_and_sse(value.replace("text/event-stream", "text/plain"))
    assert h._parse_accept.cache_info().currsize <= h.MAX_REMEMBERED_ACCEPT
    assert h.accepts_json_and_sse.cache_info().currsize <= h.MAX_REMEMBERED_ACCEPT


# --- plain values ---------------------------------------------------------------------------


@given(st.text() | st.sampled_from(["=?base64?ZWNobw==?=", "=?base64?", " x", "x\t", "~"]))
def test_a_value_said_plain_is_valid_and_means_itself(value: str) -> None:
    if h.is_plain(value):
        assert not h.has_invalid_header_chars(value)
        assert h.decode_header_value(value) == value


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        ("echo", True),
        ("", True),
        ("with space", True),
        ("~!#$%", True),
        (" echo", False),
        ("echo ", False),
        ("a\tb", False),
        ("caf\xe9", False),
        ("=?base64?ZWNobw==?=", False),
    ],
)
def test_plain_values_are_visible_ascii_without_edge_spaces_or_a_sentinel(value: str, plain: bool) -> None:
    assert h.is_plain(value) is plain
