"""Pure parts of the hostile-input bounds: escaped log lines, fixed metric labels, batch slots."""

from __future__ import annotations

import json
import logging
import sys
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from gateway.http.limits import MAX_HEADERS, MAX_MCP_HEADER_BYTES, Slots, header_problem
from gateway.http.observe import MAX_LOGGED_CHARS, cut
from gateway.ops.logs import JsonFormatter, TextFormatter, escape_controls
from gateway.ops.metrics import METHOD_LABELS, method_label

FORGERY = "tools/list\n2026-12-01 00:00:00,000 INFO gateway.access: GET /admin 200\r\x1b[2K\u202e"


def record(message: str, *args: object, exc_info: bool = False) -> logging.LogRecord:
    info = sys.exc_info() if exc_info else None
    return logging.LogRecord("gateway.access", logging.INFO, __file__, 1, message, args, info)


def test_control_characters_are_escaped_and_printable_text_is_left_alone() -> None:
    assert escape_controls("tools/call é ✓ \\n") == "tools/call é ✓ \\n"
    assert escape_controls("a\nb\rc\x00\x1b\x7f\x85\u2028\u202e") == "a\\x0ab\\x0dc\\x00\\x1b\\x7f\\x85\\u2028\\u202e"
    assert escape_controls("a\nb\tc", keep_newlines=True) == "a\nb\\x09c"


@given(st.text())
def test_an_escaped_text_has_no_line_breaks_or_control_characters(text: str) -> None:
    escaped = escape_controls(text)
    assert len(escaped.splitlines()) <= 1
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in escaped)


def test_the_text_format_writes_one_line_per_record_whatever_the_client_sent() -> None:
    line = TextFormatter("%(levelname)s %(name)s: %(message)s").format(record("POST /mcp %s 200", FORGERY))
    assert "\n" not in line
    assert "\r" not in line
    assert "\x1b" not in line
    assert line.startswith("INFO gateway.access: POST /mcp tools/list\\x0a2026-12-01")


def test_a_traceback_keeps_its_lines_but_the_message_does_not() -> None:
    try:
        raise ValueError("bad\x1b[31m")
    except ValueError:
        line = TextFormatter("%(message)s").format(record("failed for %s", "a\nb", exc_info=True))
    first, *rest = line.split("\n")
    assert first == "failed for a\\x0ab"
    assert rest[0] == "Traceback (most recent call last):"
    assert rest[-1] == "ValueError: bad\\x1b[31m"


def test_the_json_format_escapes_the_message_and_every_string_extra() -> None:
    entry = record("%s", FORGERY)
    entry.rpc_method = FORGERY
    line = JsonFormatter().format(entry)
    assert "\n" not in line
    assert "\x1b" not in line
    assert "\u202e" not in line
    parsed = json.loads(line)
    assert parsed["message"] == parsed["rpc_method"] == escape_controls(FORGERY)


def test_long_client_values_are_cut_in_the_access_line() -> None:
    assert cut("m" * MAX_LOGGED_CHARS) == "m" * MAX_LOGGED_CHARS
    assert cut("m" * 2**20) == "m" * MAX_LOGGED_CHARS + f"…({2**20} chars)"


def test_metric_method_labels_come_from_a_fixed_set() -> None:
    assert method_label("tools/call") == "tools/call"
    assert method_label("GET stream") == "get_stream"
    assert method_label("DELETE session") == "delete_session"
    assert method_label("tools/call\n") == "other"
    assert method_label("m" * 2**20) == "other"
    assert all(len(label) < 40 for label in METHOD_LABELS)


def test_a_batch_takes_slots_up_to_the_limit_and_never_past_it() -> None:
    table: Counter[str] = Counter({"alice": 249})
    slots = Slots(table, "alice", 256, "requests in flight")
    assert slots.take(1)  # admitted: this request's own slot makes 250
    assert not slots.take(7)
    assert table["alice"] == 250
    assert slots.held == 1
    assert slots.take(6)
    assert table["alice"] == 256
    assert slots.held == 7
    assert Slots(table, "bob", 0, "requests in flight").take(10_000)  # 0: no limit


_HEADER = st.tuples(st.binary(min_size=1, max_size=12), st.binary(max_size=600))


@given(st.lists(_HEADER, max_size=120) | st.lists(_HEADER, min_size=90, max_size=110), st.integers(0, 9000))
def test_a_bound_on_the_head_never_changes_what_the_header_checks_answer(
    headers: list[tuple[bytes, bytes]], more: int
) -> None:
    """Any bound at least the headers' own bytes (a head holds them all) gives the answer the full checks give."""
    total = sum(len(name) + len(value) for name, value in headers)
    assert header_problem(headers, total + more) == header_problem(headers)


def test_a_head_within_the_mcp_limit_is_not_summed_but_still_counted() -> None:
    many = [(b"x-%d" % n, b"") for n in range(MAX_HEADERS + 1)]
    assert header_problem(many, 2_000) == header_problem(many) is not None
    big = [(b"mcp-name", b"n" * (MAX_MCP_HEADER_BYTES + 1))]
    assert header_problem(big, MAX_MCP_HEADER_BYTES + 100) == header_problem(big) is not None
