"""What the access line correlates a request by (gateway.http.observe): the trace id of a
``traceparent``, a bounded and sanitized ``X-Request-Id``, the request's id and name."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway.http.limits import CLIENT_KEY
from gateway.http.observe import (
    MAX_LOGGED_CHARS,
    MAX_REQUEST_ID_CHARS,
    correlation_headers,
    cut,
    named_correlation_headers,
    note_request,
    observe,
    request_id_of,
    trace_id_of,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.mark.parametrize(
    ("traceparent", "trace_id"),
    [
        (f"00-{TRACE}-00f067aa0ba902b7-01", TRACE),
        (f"01-{TRACE}-00f067aa0ba902b7-00-later-fields", TRACE),  # a later version may add fields
        (f" 00-{TRACE}-00f067aa0ba902b7-01 ", TRACE),
        (f"ff-{TRACE}-00f067aa0ba902b7-01", None),  # version ff is invalid
        ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", None),  # so is an all-zero trace id
        (f"00-{TRACE.upper()}-00f067aa0ba902b7-01", None),  # lower-case hex only
        (f"00-{TRACE}-00f067aa0ba902b7-01x", None),
        ("00-abc-def-01", None),
        ("", None),
        (None, None),
    ],
)
def test_the_trace_id_comes_from_a_valid_traceparent_only(traceparent: str | None, trace_id: str | None) -> None:
    assert trace_id_of(traceparent) == trace_id


def test_a_request_id_is_cut_and_keeps_only_plain_characters() -> None:
    assert request_id_of("3f2a-9b:c/d+e=f@g.h_i") == "3f2a-9b:c/d+e=f@g.h_i"
    assert request_id_of("a b\nc\x1b[31m\u202e") == "a_b_c__31m_"
    assert request_id_of("x" * 1000) == "x" * MAX_REQUEST_ID_CHARS
    assert request_id_of("") is None
    assert request_id_of(None) is None


def test_the_correlation_headers_are_found_in_one_pass() -> None:
    headers = [(b"x-request-id", b"r1"), (b"accept", b"*/*"), (b"traceparent", b"t"), (b"mcp-name", b"echo")]
    assert correlation_headers(headers) == ("r1", "t", "echo")
    assert correlation_headers([(b"accept", b"*/*")]) == (None, None, None)


@pytest.mark.parametrize(
    "headers",
    [
        [(b"x-request-id", b"r1"), (b"accept", b"*/*"), (b"traceparent", b"t"), (b"mcp-name", b"echo")],
        [(b"x-request-id", b"first"), (b"x-request-id", b"last"), (b"mcp-name", b"\xe9\x00")],  # the last wins
        [(b"x-request-id", b""), (b"traceparent", b"")],
        [(b"accept", b"*/*")],
        [],
    ],
)
def test_the_edges_dict_of_the_headers_gives_the_same_correlation(headers: list[tuple[bytes, bytes]]) -> None:
    assert named_correlation_headers(dict(headers)) == correlation_headers(headers)


@pytest.mark.parametrize(
    ("params", "noted"),
    [
        ({"name": "echo", "_meta": {"traceparent": "tp"}}, {"rpc_id": 7, "mcp_name": "echo", "traceparent": "tp"}),
        ({"uri": "file:///a"}, {"rpc_id": 7, "mcp_name": "file:///a"}),
        ({"name": 3, "uri": "u"}, {"rpc_id": 7, "mcp_name": "u"}),
        ({"_meta": "not an object"}, {"rpc_id": 7}),
        (None, {"rpc_id": 7}),
    ],
)
def test_a_request_notes_its_id_its_name_or_uri_and_a_traceparent_in_meta(params: Any, noted: dict[str, Any]) -> None:
    fields: dict[str, Any] = {}
    note_request(fields, 7, params)
    assert fields == noted


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.parametrize("size", [MAX_LOGGED_CHARS, MAX_LOGGED_CHARS + 1, 1000])
def test_client_chosen_text_is_cut_in_the_line_only_when_long(size: int) -> None:
    """Each client-chosen value of the line is itself up to ``MAX_LOGGED_CHARS``, else ``cut``;
    the JSON fields carry the principal whole, and the method, name, id and client key as the line does."""
    long = "m" * size
    scope: dict[str, Any] = {
        "type": "http",
        "method": "P" + long,
        "path": "/" + long,
        "headers": [],
        "client": ("127.0.0.1", 1),
        "gateway.principal": "p" + long,
        CLIENT_KEY: "k" + long,
    }
    fields = {"method": "t" + long, "era": "2026-07-28", "rpc_id": "i" + long, "mcp_name": "n" + long}
    keep = _Keep()
    access = logging.getLogger("gateway.access")
    level = access.level
    access.addHandler(keep)
    access.setLevel(logging.INFO)
    try:
        observe(None, scope, fields, "s", 200, None, False, 0.001)
    finally:
        access.removeHandler(keep)
        access.setLevel(level)
    (record,) = keep.records
    expected = [cut(text) for text in ("P" + long, "/" + long, "t" + long)]
    line = record.getMessage()
    assert line.startswith(" ".join(expected) + " 200 ")
    for key, text in (("principal", "p"), ("client", "k"), ("name", "n"), ("id", "i")):
        assert f" {key}={cut(text + long)} " in line + " "
    assert record.principal == "p" + long  # type: ignore[attr-defined]
    assert record.client == cut("k" + long)  # type: ignore[attr-defined]
    assert record.rpc_method == cut("t" + long)  # type: ignore[attr-defined]
    assert record.mcp_name == cut("n" + long)  # type: ignore[attr-defined]
    assert record.rpc_id == cut("i" + long)  # type: ignore[attr-defined]
    assert (len(cut("x" * size)) == size) is (size <= MAX_LOGGED_CHARS)
