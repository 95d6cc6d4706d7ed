"""JSON-RPC 2.0 messages: exact id types, every rejection, whole error objects, compact encoding."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.jsonrpc import (
    ErrorReply,
    InvalidMessage,
    Message,
    Notification,
    ParseError,
    Request,
    Result,
    decode,
    encode,
    encode_line,
    error_object,
    is_id,
    parse_message,
)

# --- strategies -------------------------------------------------------------------------

# Integers orjson can write (it refuses anything outside the 64-bit range) and strings of
# any Unicode scalar value (no lone surrogates: those are not UTF-8).
json_ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
json_text = st.text(st.characters(codec="utf-8"), max_size=20)
json_scalars = st.none() | st.booleans() | json_ints | st.floats(allow_nan=False, allow_infinity=False) | json_text
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(json_text, inner, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(json_text, json_values, max_size=4)
ids = json_ints | json_text
methods = json_text.filter(bool)

requests = st.builds(Request, ids, methods, st.none() | json_objects)
notifications = st.builds(Notification, methods, st.none() | json_objects)
results = st.builds(Result, ids, json_objects)
error_objects = st.fixed_dictionaries(
    {"code": json_ints, "message": json_text}, optional={"data": json_values, "extra": json_values}
)
error_replies = st.builds(ErrorReply, st.none() | ids, error_objects)
messages = requests | notifications | results | error_replies

# Objects that look like messages, with every member sometimes present, sometimes of the
# wrong type, so that the property below reaches every branch of parse_message.
message_like = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.just("2.0") | json_values,
        "id": ids | json_values,
        "method": methods | json_values,
        "params": json_objects | json_values,
        "result": json_objects | json_values,
        "error": error_objects | json_values,
    },
)


def rejection(obj: Any) -> InvalidMessage:
    with pytest.raises(InvalidMessage) as caught:
        parse_message(obj)
    return caught.value


# --- ids --------------------------------------------------------------------------------


def test_an_integer_id_and_the_same_digits_as_a_string_are_different_ids() -> None:
    as_int = parse_message(decode(b'{"jsonrpc":"2.0","id":7,"method":"ping"}'))
    as_str = parse_message(decode(b'{"jsonrpc":"2.0","id":"7","method":"ping"}'))

    assert isinstance(as_int, Request)
    assert isinstance(as_str, Request)
    assert type(as_int.id) is int
    assert type(as_str.id) is str
    assert as_int != as_str
    assert len({as_int.id, as_str.id}) == 2


@pytest.mark.parametrize("raw", [b"true", b"false", b"1.0", b"null", b"[1]", b"{}", b"7e0"])
def test_a_request_whose_id_is_not_a_string_or_an_integer_is_rejected_without_an_id(raw: bytes) -> None:
    error = rejection(decode(b'{"jsonrpc":"2.0","id":' + raw + b',"method":"ping"}'))

    assert error.id is None
    assert '"id"' in error.reason


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        *[(0, True), (-1, True), (2**63, True), ("", True), ("7", True)],
        *[(True, False), (False, False), (1.0, False), (None, False), ([], False), ({}, False)],
    ],
)
def test_is_id_accepts_exactly_strings_and_integers(value: object, expected: bool) -> None:
    assert is_id(value) is expected


# --- each kind of message ---------------------------------------------------------------


def test_a_request_with_params_is_parsed_into_a_request() -> None:
    message = parse_message(decode(b'{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x"}}'))

    assert message == Request("a", "tools/call", {"name": "x"})


def test_a_request_without_params_has_none_for_params() -> None:
    assert parse_message({"jsonrpc": "2.0", "id": 0, "method": "ping"}) == Request(0, "ping", None)


def test_a_null_params_member_is_read_as_no_params() -> None:
    assert parse_message({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": None}) == Request(1, "ping")


def test_a_message_with_a_method_and_no_id_member_is_a_notification() -> None:
    message = parse_message({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})

    assert message == Notification("notifications/progress", {"progress": 1})


def test_a_result_is_parsed_with_its_id_and_whole_result_object() -> None:
    message = parse_message(decode(b'{"jsonrpc":"2.0","id":3,"result":{"tools":[],"nextCursor":"c"}}'))

    assert message == Result(3, {"tools": [], "nextCursor": "c"})


def test_an_empty_result_object_is_a_valid_result() -> None:
    assert parse_message({"jsonrpc": "2.0", "id": "x", "result": {}}) == Result("x", {})


def test_an_error_reply_keeps_code_message_and_data_whole() -> None:
    error = {
        "code": -32022,
        "message": "Unsupported protocol version",
        "data": {"supported": ["2026-07-28"], "requested": "1999-01-01"},
        "vendorExtra": [1, 2],
    }
    message = parse_message({"jsonrpc": "2.0", "id": 9, "error": error})

    assert isinstance(message, ErrorReply)
    assert message.id == 9
    assert message.error == error
    assert message.code == -32022
    assert message.message == "Unsupported protocol version"
    assert message.to_dict()["error"] == error


@pytest.mark.parametrize("obj", [{"jsonrpc": "2.0", "id": None}, {"jsonrpc": "2.0"}], ids=["null-id", "no-id"])
def test_an_error_reply_with_a_null_or_missing_id_is_accepted_without_an_id(obj: dict[str, Any]) -> None:
    message = parse_message({**obj, "error": {"code": -32700, "message": "Parse error"}})

    assert message == ErrorReply(None, {"code": -32700, "message": "Parse error"})
    assert "id" not in message.to_dict()


def test_error_object_leaves_out_data_when_there_is_none() -> None:
    assert error_object(-32601, "Method not found") == {"code": -32601, "message": "Method not found"}
    assert error_object(-32601, "Method not found", {"method": "x"}) == {
        "code": -32601,
        "message": "Method not found",
        "data": {"method": "x"},
    }


# --- every InvalidMessage branch --------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (b"[]", "an array"),
        (b'"x"', "a string"),
        (b"1", "a number"),
        (b"1.5", "a number"),
        (b"true", "a boolean"),
        (b"null", "null"),
    ],
)
def test_a_value_that_is_not_an_object_is_not_a_message(raw: bytes, kind: str) -> None:
    error = rejection(decode(raw))

    assert error.reason == f"a JSON-RPC message is an object, not {kind}"
    assert error.id is None


def test_a_batch_is_not_a_message() -> None:
    assert rejection(decode(b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]')).id is None


@pytest.mark.parametrize("version", [None, "1.0", "2", 2.0, 2])
def test_a_wrong_or_missing_jsonrpc_version_is_rejected_with_the_id_recovered(version: object) -> None:
    obj: dict[str, Any] = {"id": "req-1", "method": "ping"}
    if version is not None:
        obj["jsonrpc"] = version

    error = rejection(obj)

    assert '"jsonrpc"' in error.reason
    assert error.id == "req-1"


@pytest.mark.parametrize("method", ["", 1, None, ["ping"], {"name": "ping"}])
def test_a_method_that_is_not_a_non_empty_string_is_rejected_with_the_id_recovered(method: object) -> None:
    error = rejection({"jsonrpc": "2.0", "id": 5, "method": method})

    assert '"method"' in error.reason
    assert error.id == 5


@pytest.mark.parametrize("params", [[1, 2], "x", 3, True])
def test_positional_or_scalar_params_are_rejected_with_the_id_recovered(params: object) -> None:
    error = rejection({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params})

    assert '"params"' in error.reason
    assert error.id == 5


@pytest.mark.parametrize("member", [{"result": {}}, {"error": {"code": 1, "message": "m"}}])
def test_a_message_that_is_both_a_request_and_a_response_is_rejected(member: dict[str, Any]) -> None:
    error = rejection({"jsonrpc": "2.0", "id": 5, "method": "ping", **member})

    assert "both a request and a response" in error.reason
    assert error.id == 5


def test_a_response_with_both_result_and_error_is_rejected_with_the_id_recovered() -> None:
    error = rejection({"jsonrpc": "2.0", "id": "r", "result": {}, "error": {"code": 1, "message": "m"}})

    assert "not both" in error.reason
    assert error.id == "r"


@pytest.mark.parametrize("id_member", [{}, {"id": None}, {"id": True}, {"id": 1.0}, {"id": [1]}])
def test_a_result_without_a_readable_id_is_rejected_without_an_id(id_member: dict[str, Any]) -> None:
    error = rejection({"jsonrpc": "2.0", "result": {}, **id_member})

    assert '"id"' in error.reason
    assert error.id is None


@pytest.mark.parametrize(("result", "kind"), [([], "an array"), ("ok", "a string"), (None, "null"), (1, "a number")])
def test_a_result_that_is_not_an_object_is_rejected_with_the_id_recovered(result: object, kind: str) -> None:
    error = rejection({"jsonrpc": "2.0", "id": 4, "result": result})

    assert error.reason == f'"result" must be an object, not {kind}'
    assert error.id == 4


@pytest.mark.parametrize("bad_id", [True, 1.5, [], {}])
def test_an_error_reply_with_an_unreadable_non_null_id_is_rejected(bad_id: object) -> None:
    error = rejection({"jsonrpc": "2.0", "id": bad_id, "error": {"code": -1, "message": "m"}})

    assert '"id"' in error.reason
    assert error.id is None


@pytest.mark.parametrize(
    ("error_member", "problem"),
    [
        ("boom", "expected an object, got a string"),
        (None, "expected an object, got null"),
        ([], "expected an object, got an array"),
        ({"message": "m"}, '"code" must be an integer'),
        ({"code": "-1", "message": "m"}, '"code" must be an integer'),
        ({"code": -1.0, "message": "m"}, '"code" must be an integer'),
        ({"code": True, "message": "m"}, '"code" must be an integer'),
        ({"code": -1}, '"message" must be a string'),
        ({"code": -1, "message": None}, '"message" must be a string'),
    ],
)
def test_a_malformed_error_object_is_rejected_with_the_id_recovered(error_member: object, problem: str) -> None:
    error = rejection({"jsonrpc": "2.0", "id": "e", "error": error_member})

    assert error.reason == f"malformed error object: {problem}"
    assert error.id == "e"


def test_an_object_with_no_method_result_or_error_is_rejected_with_the_id_recovered() -> None:
    error = rejection({"jsonrpc": "2.0", "id": 12, "params": {}})

    assert error.reason == 'no "method", "result" or "error"'
    assert error.id == 12


def test_invalid_message_is_a_value_error_whose_text_is_the_reason() -> None:
    error = InvalidMessage("why", id=3)

    assert isinstance(error, ValueError)
    assert str(error) == "why"
    assert error.id == 3


# --- decode and encode ------------------------------------------------------------------


@pytest.mark.parametrize("raw", [b"", b"{", b"{'a': 1}", b"NaN", b"1e400", b'"\\ud800"', b"\xff"])
def test_bytes_that_are_not_json_raise_parse_error(raw: bytes) -> None:
    with pytest.raises(ParseError, match="not valid JSON"):
        decode(raw)


def test_decode_accepts_text_as_well_as_bytes() -> None:
    assert decode('{"a": [1, "é"]}') == {"a": [1, "é"]}


def test_encode_writes_compact_json_with_members_in_a_fixed_order() -> None:
    assert encode(Request(1, "ping")) == b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    assert encode(Request("1", "tools/list", {"cursor": "c"})) == (
        b'{"jsonrpc":"2.0","id":"1","method":"tools/list","params":{"cursor":"c"}}'
    )
    assert (
        encode(Notification("notifications/initialized")) == b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    )
    assert encode(Result(2, {})) == b'{"jsonrpc":"2.0","id":2,"result":{}}'
    assert encode(ErrorReply(3, {"code": -1, "message": "m"})) == (
        b'{"jsonrpc":"2.0","error":{"code":-1,"message":"m"},"id":3}'
    )


def test_encode_writes_non_ascii_as_raw_utf8_and_escapes_newlines() -> None:
    line = encode(Result(1, {"text": "é\nü"}))

    assert line == '{"jsonrpc":"2.0","id":1,"result":{"text":"é\\nü"}}'.encode()


def test_encode_writes_a_plain_dict_as_it_is() -> None:
    assert encode({"jsonrpc": "2.0", "id": 1, "result": {"x": None}}) == b'{"jsonrpc":"2.0","id":1,"result":{"x":null}}'


# --- properties -------------------------------------------------------------------------


@given(json_values | message_like)
def test_any_json_value_parses_to_a_message_or_raises_invalid_message(obj: Any) -> None:
    outcome: Message | InvalidMessage
    try:
        outcome = parse_message(obj)
    except InvalidMessage as error:
        outcome = error
    if isinstance(outcome, InvalidMessage):
        assert outcome.id is None or is_id(outcome.id)
        return
    message = outcome
    assert isinstance(message, Request | Notification | Result | ErrorReply)
    if isinstance(message, Request | Result):
        assert is_id(message.id)
        assert message.id == obj["id"]
    if isinstance(message, ErrorReply):
        assert message.id is None or is_id(message.id)
        assert type(message.code) is int
        assert isinstance(message.message, str)


@given(messages)
def test_any_valid_message_round_trips_through_encode_decode_and_parse(message: Message) -> None:
    line = encode(message)

    assert b"\n" not in line
    again = parse_message(decode(line))
    assert again == message
    assert type(getattr(again, "id", None)) is type(getattr(message, "id", None))


@given(messages)
def test_a_stdio_line_is_the_encoded_message_and_one_newline(message: Message) -> None:
    assert encode_line(message) == encode(message) + b"\n"
