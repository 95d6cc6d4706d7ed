"""The ingress ladder: one test per rung, then properties over arbitrary input."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.protocol import bridge, versions
from gateway.protocol.handshake import META_LOG_LEVEL as LOG_LEVEL_KEY
from gateway.protocol.handshake import ChildInfo
from gateway.protocol.headers import encode_header_value
from gateway.protocol.ingress import (
    CLIENT_CAPABILITIES_KEY,
    MAX_BATCH_MESSAGES,
    MAX_DECLARATION_BYTES,
    MAX_JSON_DEPTH,
    NAME_PARAMS,
    PROTOCOL_VERSION_KEY,
    Accepted,
    Rejection,
    check_delete,
    check_depth,
    check_get,
    check_modern,
    check_modern_rungs,
    check_post,
    exceeds_depth,
    plain_version,
)
from gateway.protocol.jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    Notification,
    Request,
    Result,
)
from gateway.protocol.outcome import describe
from gateway.protocol.versions import Era
from tests.schemas import validate

MODERN = "2026-07-28"
SESSIONS = {"s-0325": "2025-03-26", "s-1125": "2025-11-25"}
BASE = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
META = {PROTOCOL_VERSION_KEY: MODERN, CLIENT_CAPABILITIES_KEY: {}}


def modern(method: str = "tools/list", id: Any = 1, **params: Any) -> dict[str, Any]:
    """A well-formed 2026-07-28 request (a notification when ``id`` is None)."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": {"_meta": dict(META), **params}}
    if id is not None:
        message["id"] = id
    return message


def mirrored(method: str = "tools/list", name: str | None = None, version: str = MODERN) -> dict[str, str]:
    out = {"mcp-protocol-version": version, "mcp-method": method}
    if name is not None:
        out["mcp-name"] = name
    return out


def post(body: Any, headers: dict[str, str] | None = None, *, base: bool = True) -> Accepted | Rejection:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    all_headers = {**(BASE if base else {}), **(headers or {})}
    return check_post(all_headers, data, max_body_bytes=10_000, session_version=SESSIONS.get)


def rejected(result: Accepted | Rejection, status: int, code: int) -> Rejection:
    assert isinstance(result, Rejection), result
    assert result.status == status
    assert result.error is not None
    assert result.error["code"] == code
    body = result.body()
    assert body is not None
    validate(body, "JSONRPCErrorResponse")
    return result


def message_of(result: Rejection) -> str:
    assert result.error is not None
    text: str = result.error["message"]
    return text


def accepted(result: Accepted | Rejection) -> Accepted:
    assert isinstance(result, Accepted), result
    return result


# --- Rung 1: Accept -------------------------------------------------------------------------


@pytest.mark.parametrize("accept", [None, "application/json", "text/event-stream", "text/html"])
def test_a_post_whose_accept_lacks_json_or_sse_gets_406(accept: str | None) -> None:
    headers = {"content-type": "application/json", **({"accept": accept} if accept else {})}
    rejected(post(modern(), {**headers, **mirrored()}, base=False), 406, INVALID_REQUEST)


@pytest.mark.parametrize("accept", ["*/*", "application/*, text/*", "application/json;q=0.9, text/event-stream"])
def test_wildcards_and_weights_satisfy_accept(accept: str) -> None:
    accepted(post(modern(), {"accept": accept, **mirrored()}))


# --- Rung 2: Content-Type -------------------------------------------------------------------


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/jsonl", "multipart/form-data"])
def test_a_post_that_is_not_application_json_gets_415(content_type: str | None) -> None:
    headers = {"accept": BASE["accept"], **({"content-type": content_type} if content_type else {})}
    rejected(post(modern(), {**headers, **mirrored()}, base=False), 415, INVALID_REQUEST)


def test_content_type_parameters_are_accepted() -> None:
    accepted(post(modern(), {"content-type": "application/json; charset=utf-8", **mirrored()}))


# --- Rung 3: size ---------------------------------------------------------------------------


def test_a_body_over_the_limit_gets_413() -> None:
    result = check_post(BASE, b" " * 101, max_body_bytes=100, session_version=SESSIONS.get)
    rejected(result, 413, INVALID_REQUEST)


# --- Rung 4: parse --------------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"", b"{", b"not json", b"\xff\xfe", b'{"id": 1,}'])
def test_a_body_that_is_not_json_gets_400_parse_error_without_an_id(body: bytes) -> None:
    result = rejected(post(body, mirrored()), 400, PARSE_ERROR)
    assert result.id is None
    assert "id" not in (result.body() or {})


# --- Rung 4: nesting -----------------------------------------------------------------------


def nested(levels: int) -> Any:
    """``levels`` arrays and objects inside one another (the outermost is level 1)."""
    value: Any = 1
    for level in range(levels):
        value = [value] if level % 2 else {"k": value}
    return value


@pytest.mark.parametrize("modern_era", [True, False])
def test_params_nested_past_the_limit_get_400_with_the_request_id(modern_era: bool) -> None:
    # The message is level 1 and params level 2: arguments' outermost container is level 3.
    deepest_allowed = modern("tools/call", id=7, name="t", arguments=nested(MAX_JSON_DEPTH - 2))
    too_deep = modern("tools/call", id=7, name="t", arguments=nested(MAX_JSON_DEPTH - 1))
    headers = mirrored("tools/call", "t") if modern_era else {"mcp-session-id": "s-1125"}
    if not modern_era:
        for message in (deepest_allowed, too_deep):
            del message["params"]["_meta"]
    accepted(post(deepest_allowed, headers))
    result = rejected(post(too_deep, headers), 400, INVALID_REQUEST)
    assert result.id == 7
    assert message_of(result) == f"the JSON is nested more than {MAX_JSON_DEPTH} levels deep"


def test_nesting_deeper_than_orjson_writes_is_refused_at_ingress_not_later() -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"a":' + b"[" * 300 + b"]" * 300 + b"}}"
    result = rejected(post(body, {"mcp-session-id": "s-1125"}), 400, INVALID_REQUEST)
    assert result.error is not None
    assert result.error["data"] == {"maxDepth": MAX_JSON_DEPTH}


def test_a_deep_batch_is_refused_without_its_id() -> None:
    result = rejected(post([nested(MAX_JSON_DEPTH)], {"mcp-session-id": "s-0325"}), 400, INVALID_REQUEST)
    assert result.id is None


def test_many_brackets_inside_strings_or_side_by_side_are_not_nesting() -> None:
    wide = modern(name="t", arguments={"text": "[{" * 500, "list": [[1]] * 500})
    accepted(post(wide, mirrored()))


@given(
    st.recursive(
        st.integers() | st.text(max_size=3),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(max_size=2), inner),
        max_leaves=40,
    )
)
def test_exceeds_depth_agrees_with_a_recursive_count(value: Any) -> None:
    def depth(item: Any) -> int:
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            return 0
        return 1 + max((depth(child) for child in children), default=0)

    for limit in range(1, 6):
        assert exceeds_depth(value, limit) == (depth(value) > limit)


@given(
    st.recursive(
        st.integers(-(2**63), 2**63 - 1) | st.text(max_size=3),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(max_size=2), inner),
        max_leaves=40,
    )
)
def test_check_depth_skips_only_bodies_too_short_or_too_flat_to_be_deep(value: Any) -> None:
    body = orjson.dumps(value)
    for limit in range(1, 6):
        assert (check_depth(body, value, limit) is not None) == exceeds_depth(value, limit)


# --- Rung 5: batches ------------------------------------------------------------------------

LEGACY_CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def test_a_batch_from_a_2025_03_26_session_is_accepted() -> None:
    note: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 0}}
    result = accepted(post([LEGACY_CALL, note], {"mcp-session-id": "s-0325"}))
    assert result.is_batch
    assert result.era is Era.LEGACY
    assert result.version == "2025-03-26"
    assert result.messages == (Request(1, "tools/list"), Notification(note["method"], note["params"]))


@pytest.mark.parametrize("headers", [{}, {"mcp-session-id": "s-1125"}, mirrored()])
def test_a_batch_outside_a_2025_03_26_session_gets_400(headers: dict[str, str]) -> None:
    result = rejected(post([LEGACY_CALL], headers), 400, INVALID_REQUEST)
    assert message_of(result) == "batches are not supported in this protocol revision"


def test_a_batch_on_an_unknown_session_gets_404() -> None:
    rejected(post([LEGACY_CALL], {"mcp-session-id": "gone"}), 404, INVALID_REQUEST)


def test_an_empty_batch_gets_400() -> None:
    rejected(post([], {"mcp-session-id": "s-0325"}), 400, INVALID_REQUEST)


def test_a_batch_with_an_invalid_element_gets_400_with_that_elements_id() -> None:
    result = rejected(post([LEGACY_CALL, {"id": 9, "method": "x"}], {"mcp-session-id": "s-0325"}), 400, -32600)
    assert result.id == 9


def test_a_batch_with_an_unsupported_version_header_gets_400() -> None:
    headers = {"mcp-session-id": "s-0325", "mcp-protocol-version": "2030-01-01"}
    rejected(post([LEGACY_CALL], headers), 400, INVALID_REQUEST)


def test_a_batch_over_the_size_limit_gets_400_before_any_element_is_parsed() -> None:
    invalid = {"not": "json-rpc"}  # would be refused as an element, were elements parsed
    result = rejected(post([invalid] * (MAX_BATCH_MESSAGES + 1), {"mcp-session-id": "s-0325"}), 400, INVALID_REQUEST)
    assert message_of(result) == (
        f"a batch of {MAX_BATCH_MESSAGES + 1} messages is too large: at most {MAX_BATCH_MESSAGES} are accepted"
    )
    headers = {**BASE, "mcp-session-id": "s-0325"}
    small = check_post(
        headers, orjson.dumps([LEGACY_CALL] * 3), max_body_bytes=10_000, session_version=SESSIONS.get, max_batch=2
    )
    rejected(small, 400, INVALID_REQUEST)
    accepted(post([LEGACY_CALL] * MAX_BATCH_MESSAGES, {"mcp-session-id": "s-0325"}))


def test_initialize_inside_a_batch_gets_400() -> None:
    init = {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": "2025-03-26"}}
    rejected(post([init], {"mcp-session-id": "s-0325"}), 400, INVALID_REQUEST)


# --- Rung 6: JSON-RPC shape -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "id"),
    [(42, None), ({"id": 3, "method": "tools/list"}, 3), ({"jsonrpc": "2.0", "id": "a", "method": 5}, "a")],
)
def test_json_that_is_not_a_json_rpc_message_gets_400_with_the_id_if_readable(body: Any, id: Any) -> None:
    assert rejected(post(body, mirrored()), 400, INVALID_REQUEST).id == id


# --- Rung 7: era classification -------------------------------------------------------------


def test_a_modern_version_header_alone_makes_a_request_modern() -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    result = rejected(post(body, mirrored()), 400, INVALID_PARAMS)  # modern: so _meta is required
    assert PROTOCOL_VERSION_KEY in message_of(result) or "_meta" in message_of(result)


def test_a_meta_protocol_version_makes_a_request_modern_and_a_stray_session_id_is_ignored() -> None:
    result = accepted(post(modern(), {**mirrored(), "mcp-session-id": "whatever"}))
    assert result.era is Era.MODERN
    assert result.version == MODERN
    assert result.session_id is None
    assert not result.is_batch


def test_initialize_without_modern_markers_starts_a_legacy_session() -> None:
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}
    result = accepted(post(init))
    assert (result.era, result.version, result.session_id) == (Era.LEGACY, "2025-06-18", None)


def test_initialize_without_a_string_protocol_version_gets_400_invalid_params() -> None:
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}}
    assert rejected(post(init), 400, INVALID_PARAMS).id == 0


@pytest.mark.parametrize("name", ["capabilities", "clientInfo"])
def test_an_initialize_declaring_more_than_the_bound_is_refused_before_any_session(name: str) -> None:
    def declaring(size: int) -> dict[str, Any]:
        value = {"x": "a" * (size - len('{"x":""}'))}  # ``size`` bytes of compact JSON
        params = {"protocolVersion": "2025-11-25", name: value}
        return {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}

    def posted(body: dict[str, Any]) -> Accepted | Rejection:
        return check_post(BASE, orjson.dumps(body), max_body_bytes=100_000, session_version=SESSIONS.get)

    assert accepted(posted(declaring(MAX_DECLARATION_BYTES))).era is Era.LEGACY  # at the bound
    refused = rejected(posted(declaring(MAX_DECLARATION_BYTES + 1)), 400, INVALID_PARAMS)
    assert message_of(refused) == f"initialize params.{name} is 16,385 bytes of JSON; at most 16,384"


def test_a_known_session_is_legacy_at_its_negotiated_version() -> None:
    result = accepted(post(LEGACY_CALL, {"mcp-session-id": "s-1125", "mcp-protocol-version": "2025-11-25"}))
    assert (result.era, result.version, result.session_id) == (Era.LEGACY, "2025-11-25", "s-1125")


def test_an_unknown_session_gets_404() -> None:
    result = rejected(post(LEGACY_CALL, {"mcp-session-id": "ended"}), 404, INVALID_REQUEST)
    assert "unknown or ended session" in message_of(result)
    assert result.id == 1


@pytest.mark.parametrize("version", ["2099-01-01", "garbage"])
def test_a_legacy_session_with_an_unsupported_version_header_gets_400(version: str) -> None:
    result = rejected(post(LEGACY_CALL, {"mcp-session-id": "s-1125", "mcp-protocol-version": version}), 400, -32600)
    assert result.error is not None
    assert result.error["data"] == {"supported": list(versions.LEGACY_VERSIONS), "requested": version}


@pytest.mark.parametrize("headers", [{}, {"mcp-protocol-version": "2025-06-18"}])
def test_a_request_with_no_session_and_no_modern_markers_gets_400_header_mismatch(
    headers: dict[str, str],
) -> None:
    result = rejected(post(LEGACY_CALL, headers), 400, HEADER_MISMATCH)
    assert "MCP-Protocol-Version" in message_of(result)
    validate(result.body() or {}, "HeaderMismatchError")


# --- Rung 8: modern clients do not POST responses -------------------------------------------


def test_a_response_posted_by_a_modern_client_gets_400() -> None:
    response = {"jsonrpc": "2.0", "id": 5, "result": {}}
    result = rejected(post(response, {"mcp-protocol-version": MODERN}), 400, INVALID_REQUEST)
    assert result.id == 5


def test_a_response_posted_on_a_legacy_session_is_accepted() -> None:
    response = {"jsonrpc": "2.0", "id": 5, "result": {"roots": []}}
    result = accepted(post(response, {"mcp-session-id": "s-1125"}))
    assert result.messages == (Result(5, {"roots": []}),)


# --- Rung 9: mirrored headers ---------------------------------------------------------------


def test_a_missing_version_header_gets_400_header_mismatch() -> None:
    headers = {"mcp-method": "tools/list"}
    result = rejected(post(modern(), headers), 400, HEADER_MISMATCH)
    assert "missing MCP-Protocol-Version" in message_of(result)


def test_a_version_header_that_differs_from_meta_gets_400_naming_both() -> None:
    body = modern()
    body["params"]["_meta"][PROTOCOL_VERSION_KEY] = "2025-11-25"
    result = rejected(post(body, mirrored()), 400, HEADER_MISMATCH)
    assert '"2026-07-28"' in message_of(result)
    assert '"2025-11-25"' in message_of(result)
    validate(result.body() or {}, "HeaderMismatchError")


@pytest.mark.parametrize("method_header", [None, "tools/call", "Tools/List"])
def test_a_missing_or_different_mcp_method_gets_400(method_header: str | None) -> None:
    headers = {"mcp-protocol-version": MODERN, **({"mcp-method": method_header} if method_header else {})}
    rejected(post(modern(), headers), 400, HEADER_MISMATCH)


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("tools/call", {"name": "get_weather"}),
        ("prompts/get", {"name": "greet"}),
        ("resources/read", {"uri": "file:///a"}),
    ],
)
def test_mcp_name_must_mirror_the_name_or_uri(method: str, params: dict[str, str]) -> None:
    (value,) = params.values()
    accepted(post(modern(method, **params), mirrored(method, value)))
    rejected(post(modern(method, **params), mirrored(method)), 400, HEADER_MISMATCH)
    rejected(post(modern(method, **params), mirrored(method, value + "x")), 400, HEADER_MISMATCH)


def test_mcp_name_is_decoded_through_the_sentinel() -> None:
    name = "résumé tool"
    accepted(post(modern("tools/call", name=name), mirrored("tools/call", encode_header_value(name))))


def test_mcp_name_with_bad_base64_gets_400() -> None:
    result = post(modern("tools/call", name="Hi"), mirrored("tools/call", "=?base64?SGk?="))
    assert "base64" in message_of(rejected(result, 400, HEADER_MISMATCH))


@pytest.mark.parametrize("header", ["mcp-method", "mcp-protocol-version", "mcp-name"])
def test_a_mirrored_header_with_invalid_characters_gets_400(header: str) -> None:
    headers = {**mirrored("tools/call", "t"), header: "t\x00"}
    result = rejected(post(modern("tools/call", name="t"), headers), 400, HEADER_MISMATCH)
    assert "characters" in message_of(result)


def test_mcp_name_on_other_methods_is_ignored() -> None:
    accepted(post(modern(), mirrored("tools/list", "\x00anything")))


def test_mcp_name_is_not_checked_when_the_body_param_is_missing_so_the_child_can_answer() -> None:
    accepted(post(modern("tools/call"), mirrored("tools/call")))


# --- Rung 10: supported version -------------------------------------------------------------


@pytest.mark.parametrize("version", ["2025-06-18", "2027-01-01"])
def test_an_unsupported_modern_version_gets_400_with_the_supported_list(version: str) -> None:
    body = modern()
    body["params"]["_meta"][PROTOCOL_VERSION_KEY] = version
    result = rejected(post(body, mirrored(version=version)), 400, UNSUPPORTED_PROTOCOL_VERSION)
    assert result.error is not None
    assert result.error["data"] == {"supported": list(versions.ADVERTISED_VERSIONS), "requested": version}
    validate(result.body() or {}, "UnsupportedProtocolVersionError")


@pytest.mark.parametrize("version", ["2025-11-25", "2024-11-05", "2027-01-01", "", "latest"])
def test_the_supported_versions_of_a_32022_are_what_discover_advertises_and_it_echoes_the_request(
    version: str,
) -> None:
    body = modern()
    body["params"]["_meta"][PROTOCOL_VERSION_KEY] = version
    result = rejected(post(body, mirrored(version=version)), 400, UNSUPPORTED_PROTOCOL_VERSION)
    assert result.error is not None
    supported, requested = result.error["data"]["supported"], result.error["data"]["requested"]
    assert requested == version
    assert version not in supported  # a client retrying with one of them is served
    for listed in supported:
        retry = modern()
        retry["params"]["_meta"][PROTOCOL_VERSION_KEY] = listed
        accepted(post(retry, mirrored(version=listed)))
    # The gateway's own discover (legacy child) and a modern child's forwarded one, even when the
    # child names versions no request through the gateway may use, list a superset of them.
    info = ChildInfo(Era.LEGACY, "2025-11-25", capabilities={"tools": {}})
    own = bridge.discover_result(info)["supportedVersions"]
    child = {"supportedVersions": ["2025-11-25", MODERN, "2027-01-01"], "capabilities": {}}
    forwarded = bridge.advertised_discover(child)["supportedVersions"]
    assert set(supported) <= set(own)
    assert set(supported) <= set(forwarded)
    assert own == forwarded == list(versions.ADVERTISED_VERSIONS)


# --- Rung 11: required _meta ----------------------------------------------------------------


def test_a_modern_request_without_meta_capabilities_gets_400_invalid_params_naming_the_key() -> None:
    body = modern()
    del body["params"]["_meta"][CLIENT_CAPABILITIES_KEY]
    result = rejected(post(body, mirrored()), 400, INVALID_PARAMS)
    assert CLIENT_CAPABILITIES_KEY in message_of(result)


def test_capabilities_must_be_an_object() -> None:
    body = modern()
    body["params"]["_meta"][CLIENT_CAPABILITIES_KEY] = []
    rejected(post(body, mirrored()), 400, INVALID_PARAMS)


@pytest.mark.parametrize("level", ["verbose", "INFO", "", None, 3, {"level": "info"}])
def test_a_log_level_that_is_none_gets_400_invalid_params_listing_the_levels(level: Any) -> None:
    body = modern()
    body["params"]["_meta"][LOG_LEVEL_KEY] = level
    result = rejected(post(body, mirrored()), 400, INVALID_PARAMS)
    assert "not a log level (one of debug, info, notice, warning, error, critical, alert, emergency)" in message_of(
        result
    )


@pytest.mark.parametrize("level", ["debug", "emergency"])
def test_a_log_level_passes_the_one_pass(level: str) -> None:
    body = modern()
    body["params"]["_meta"][LOG_LEVEL_KEY] = level
    request = Request(body["id"], body["method"], body["params"])
    assert plain_version(request, {**BASE, **mirrored()}) == MODERN


def test_a_request_modern_by_header_only_is_told_the_missing_meta_version() -> None:
    body = modern()
    del body["params"]["_meta"][PROTOCOL_VERSION_KEY]
    result = rejected(post(body, mirrored()), 400, INVALID_PARAMS)
    assert PROTOCOL_VERSION_KEY in message_of(result)


# --- Rung 12: known methods -----------------------------------------------------------------


@pytest.mark.parametrize(
    "method",
    [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "roots/list",
        # 2025-11-25's experimental tasks: the Tasks extension has neither (taskbridge rule 7).
        "tasks/result",
        "tasks/list",
    ],
)
def test_a_method_removed_in_2026_07_28_gets_404_method_not_found(method: str) -> None:
    rejected(post(modern(method), mirrored(method)), 404, METHOD_NOT_FOUND)


@pytest.mark.parametrize("method", ["server/discover", "completion/complete", "subscriptions/listen", "x/ext"])
def test_inventory_and_unknown_extension_methods_are_accepted(method: str) -> None:
    accepted(post(modern(method), mirrored(method)))


# --- Rung 13: notifications -----------------------------------------------------------------


@pytest.mark.parametrize("method", ["notifications/cancelled", "notifications/initialized", "notifications/x"])
def test_a_notification_method_sent_with_an_id_is_refused_in_both_eras(method: str) -> None:
    as_request = {"jsonrpc": "2.0", "id": 9, "method": method, "params": {"requestId": 1}}
    modern_one = modern(method, id="c", requestId=1)
    for result in (
        post(modern_one, mirrored(method)),  # modern
        post(as_request, {"mcp-session-id": "s-1125"}),  # a legacy session
        post([as_request], {"mcp-session-id": "s-0325"}),  # inside a 2025-03-26 batch
    ):
        refused = rejected(result, 400, INVALID_REQUEST)
        assert "without an id" in message_of(refused)
    assert rejected(post(modern_one, mirrored(method)), 400, INVALID_REQUEST).id == "c"


def test_a_modern_cancelled_notification_is_accepted_without_mirrored_headers() -> None:
    note: dict[str, Any] = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 1, "_meta": META},
    }
    result = accepted(post(note))
    assert result.era is Era.MODERN
    assert result.messages == (Notification(note["method"], note["params"]),)


def test_other_modern_notifications_are_accepted_for_the_caller_to_drop() -> None:
    accepted(post(modern("notifications/initialized", id=None), mirrored("notifications/initialized")))


def test_a_notification_whose_present_headers_disagree_gets_400() -> None:
    note = modern("notifications/cancelled", id=None, requestId=1)
    rejected(post(note, mirrored("notifications/progress")), 400, HEADER_MISMATCH)


def test_a_notification_with_an_unsupported_version_gets_400() -> None:
    note = modern("notifications/cancelled", id=None, requestId=1)
    note["params"]["_meta"][PROTOCOL_VERSION_KEY] = "2030-01-01"
    rejected(post(note), 400, UNSUPPORTED_PROTOCOL_VERSION)
    note["params"]["_meta"][PROTOCOL_VERSION_KEY] = 7
    rejected(post(note), 400, INVALID_PARAMS)


# --- GET and DELETE -------------------------------------------------------------------------


@pytest.mark.parametrize("check", [check_get, check_delete])
def test_get_and_delete_without_a_session_get_405_allowing_post(check: Any) -> None:
    result = check({"accept": "text/event-stream"}, session_version=SESSIONS.get)
    assert isinstance(result, Rejection)
    assert result.status == 405
    assert result.headers == (("allow", "POST"),)


def test_a_modern_get_with_a_stray_session_gets_405() -> None:
    headers = {"accept": "text/event-stream", "mcp-session-id": "s-1125", "mcp-protocol-version": MODERN}
    result = check_get(headers, session_version=SESSIONS.get)
    assert isinstance(result, Rejection)
    assert result.status == 405


@pytest.mark.parametrize("check", [check_get, check_delete])
def test_get_and_delete_on_an_unknown_session_get_404(check: Any) -> None:
    headers = {"accept": "text/event-stream", "mcp-session-id": "ended"}
    rejected(check(headers, session_version=SESSIONS.get), 404, INVALID_REQUEST)


def test_get_needs_accept_event_stream() -> None:
    result = check_get({"accept": "application/json", "mcp-session-id": "s-1125"}, session_version=SESSIONS.get)
    rejected(result, 406, INVALID_REQUEST)


def test_get_and_delete_on_a_live_session_are_accepted() -> None:
    headers = {"accept": "text/event-stream", "mcp-session-id": "s-0325"}
    for check in (check_get, check_delete):
        result = accepted(check(headers, session_version=SESSIONS.get))
        assert (result.era, result.version, result.messages) == (Era.LEGACY, "2025-03-26", ())


def test_get_on_a_session_with_an_unsupported_version_header_gets_400() -> None:
    headers = {"accept": "text/event-stream", "mcp-session-id": "s-1125", "mcp-protocol-version": "x"}
    rejected(check_get(headers, session_version=SESSIONS.get), 400, INVALID_REQUEST)


# --- Values ---------------------------------------------------------------------------------


def test_a_rejection_without_an_error_object_has_no_body() -> None:
    assert Rejection(405, None).body() is None


def test_a_rejection_with_an_unknown_id_omits_it() -> None:
    assert Rejection(400, {"code": -32700, "message": "x"}).body() == {
        "jsonrpc": "2.0",
        "error": {"code": -32700, "message": "x"},
    }


@pytest.mark.parametrize(
    ("value", "shown"),
    [("abc", '"abc"'), (7, "7"), ("\ud800", "'\\ud800'"), (10**5000, "<int>"), (2**70, str(2**70))],
    ids=["string", "int", "lone-surrogate", "huge-int", "int-beyond-64-bits"],
)
def test_values_in_error_messages_are_rendered_safely(value: object, shown: str) -> None:
    assert describe(value) == shown


def test_long_values_in_error_messages_are_cut() -> None:
    assert describe("x" * 500).endswith("…")
    assert len(describe("x" * 500)) == 81


# --- Properties -----------------------------------------------------------------------------

HEADER_NAMES = st.sampled_from(
    ["accept", "content-type", "mcp-protocol-version", "mcp-method", "mcp-name", "mcp-session-id"]
)
HEADER_VALUES = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            BASE["accept"],
            "application/json",
            MODERN,
            *versions.LEGACY_VERSIONS,
            "tools/call",
            "tools/list",
            "initialize",
            "s-0325",
            "s-1125",
            "=?base64?SGk=?=",
        ]
    ),
)
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
METHODS = st.sampled_from(
    ["tools/call", "tools/list", "prompts/get", "resources/read", "initialize", "ping", "notifications/cancelled", "x"]
)
META_VALUES = st.fixed_dictionaries(
    {},
    optional={
        PROTOCOL_VERSION_KEY: st.sampled_from([MODERN, MODERN, "2025-06-18", "x"]) | JSON_SCALARS,
        CLIENT_CAPABILITIES_KEY: st.just({}) | JSON_VALUES,
    },
)
PARAMS = st.fixed_dictionaries(
    {},
    optional={
        "_meta": st.one_of(META_VALUES, META_VALUES, JSON_VALUES),
        "name": st.text(max_size=10),
        "uri": st.text(max_size=10),
        "protocolVersion": st.sampled_from(versions.ALL_VERSIONS) | JSON_SCALARS,
    },
)
IDS = st.one_of(st.integers(-5, 5), st.text(max_size=5), st.sampled_from([None, True, 1.5]))
REQUESTS = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": METHODS},
    optional={"id": IDS, "params": st.one_of(PARAMS, PARAMS, PARAMS, JSON_VALUES)},
)
ERRORS = st.fixed_dictionaries({"code": st.integers(-32768, 0), "message": st.text(max_size=10)}) | JSON_VALUES
RESPONSES = st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "id": IDS, "result": st.just({}) | JSON_VALUES}) | (
    st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "id": IDS, "error": ERRORS})
)
ODD_MESSAGES = st.dictionaries(st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error"]), JSON_VALUES)
MESSAGES = st.one_of(REQUESTS, REQUESTS, REQUESTS, RESPONSES)
BODIES = st.one_of(
    st.binary(max_size=200),
    JSON_VALUES.map(orjson.dumps),
    st.one_of(MESSAGES, ODD_MESSAGES).map(orjson.dumps),
    st.lists(st.one_of(MESSAGES, ODD_MESSAGES), max_size=3).map(orjson.dumps),
)


@st.composite
def mirrored_for(draw: st.DrawFn, message: Any) -> dict[str, str]:
    """Mirrored headers for ``message``: each one omitted, faithful, or arbitrary."""
    raw_params = message.get("params") if isinstance(message, dict) else None
    params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
    raw_meta = params.get("_meta")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    faithful = {
        "mcp-protocol-version": meta.get(PROTOCOL_VERSION_KEY, MODERN),
        "mcp-method": message.get("method") if isinstance(message, dict) else None,
        "mcp-name": params.get("name", params.get("uri")),
    }
    out: dict[str, str] = {}
    for name, value in faithful.items():
        choice = draw(st.sampled_from(["omit", "faithful", "faithful", "arbitrary"]))
        if choice == "faithful" and isinstance(value, str):
            out[name] = encode_header_value(value) if name == "mcp-name" else value
        elif choice == "arbitrary":
            out[name] = draw(HEADER_VALUES)
    if draw(st.booleans()):
        out["mcp-session-id"] = draw(st.sampled_from([*SESSIONS, "gone"]))
    return out


def assert_well_formed(result: Accepted | Rejection) -> None:
    if isinstance(result, Accepted):
        assert result.messages or result.era is Era.LEGACY
        return
    assert 400 <= result.status < 500
    assert result.error is not None
    assert type(result.error["code"]) is int
    assert isinstance(result.error["message"], str)
    body = result.body()
    assert body is not None
    orjson.dumps(body)  # serialisable as sent
    validate(body, "JSONRPCErrorResponse")
    if result.error["code"] == HEADER_MISMATCH:
        validate(body, "HeaderMismatchError")
    if result.error["code"] == UNSUPPORTED_PROTOCOL_VERSION:
        validate(body, "UnsupportedProtocolVersionError")


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=BODIES,
    headers=st.dictionaries(HEADER_NAMES | st.text(max_size=12), HEADER_VALUES, max_size=7),
    with_base=st.booleans(),
)
def test_check_post_never_raises_and_answers_accepted_or_a_well_formed_rejection(
    body: bytes, headers: dict[str, str], with_base: bool
) -> None:
    all_headers = {**BASE, **headers} if with_base else headers
    assert_well_formed(check_post(all_headers, body, max_body_bytes=150, session_version=SESSIONS.get))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), message=st.one_of(MESSAGES, MESSAGES, MESSAGES, st.lists(MESSAGES, max_size=3)))
def test_check_post_holds_up_under_nearly_valid_requests(data: st.DataObject, message: Any) -> None:
    first = message[0] if isinstance(message, list) and message else message
    headers = {**BASE, **data.draw(mirrored_for(first))}
    result = check_post(headers, orjson.dumps(message), max_body_bytes=10_000, session_version=SESSIONS.get)
    assert_well_formed(result)


@settings(max_examples=200)
@given(headers=st.dictionaries(HEADER_NAMES | st.text(max_size=12), HEADER_VALUES, max_size=6))
def test_get_and_delete_never_raise(headers: dict[str, str]) -> None:
    for check in (check_get, check_delete):
        result = check(headers, session_version=SESSIONS.get)
        if isinstance(result, Rejection):
            assert result.status in {400, 404, 405, 406}


@settings(max_examples=200)
@given(
    method=st.sampled_from(["tools/call", "prompts/get", "resources/read", "tools/list", "ping"]),
    name=st.text(max_size=20),
    version=st.sampled_from([MODERN, "2025-06-18", "2030-01-01"]),
    tamper=st.sampled_from(["none", "version", "method", "name"]),
    id=st.integers(-(2**53), 2**53) | st.text(max_size=8),
)
def test_modern_error_responses_validate_against_the_official_schema(
    method: str, name: str, version: str, tamper: str, id: Any
) -> None:
    key = "uri" if method == "resources/read" else "name"
    body = modern(method, id=id, **{key: name})
    body["params"]["_meta"][PROTOCOL_VERSION_KEY] = version
    headers = mirrored(method, encode_header_value(name), version)
    if tamper == "version":
        headers["mcp-protocol-version"] = MODERN if version != MODERN else "2025-06-18"
    elif tamper != "none":
        headers[f"mcp-{tamper}"] = encode_header_value(name + "!")
    result = post(body, headers)
    assert_well_formed(result)
    if isinstance(result, Rejection):
        assert result.id == id


# --- The one pass for the usual modern request ------------------------------------------------

ODD_NAMES = st.sampled_from(
    ["echo", "", "with space", " echo", "echo ", "a\tb", "caf\xe9", "x\r\ny", "=?base64?ZWNobw==?=", "=?base64?!?="]
)
USUAL_METHODS = st.sampled_from(["tools/call", "prompts/get", "resources/read", "tasks/get", "tools/list"])
ODD_METHODS = st.sampled_from(["ping", "roots/list", "logging/setLevel", "x y", " x", "x\n", "caf\xe9"])
HEADER_PARTS = ("version header", "method header", "name header")
PARTS = ("method", "meta", "version", "capabilities", "log level", "name", "params", *HEADER_PARTS)


@st.composite
def usual_requests(draw: st.DrawFn) -> tuple[Request, dict[str, str]]:
    """Modern requests of the usual shape and their headers, with up to two parts (``PARTS``)
    made odd: a wrong, absent or unusual value."""
    odd = draw(st.sets(st.sampled_from(PARTS), max_size=2))
    method = draw(ODD_METHODS if "method" in odd else USUAL_METHODS)
    meta: dict[str, Any] = {PROTOCOL_VERSION_KEY: MODERN, CLIENT_CAPABILITIES_KEY: {}}
    if "version" in odd:
        meta[PROTOCOL_VERSION_KEY] = draw(st.sampled_from(["2025-06-18", "x", " 2026-07-28"]) | JSON_SCALARS)
    if "capabilities" in odd:
        meta[CLIENT_CAPABILITIES_KEY] = draw(JSON_VALUES)
    if "log level" in odd:
        meta[LOG_LEVEL_KEY] = draw(st.sampled_from(["info", "Info", "verbose"]) | JSON_VALUES)
    for key in draw(st.sets(st.sampled_from(list(meta)))) if "meta" in odd else ():
        del meta[key]
    key = NAME_PARAMS.get(method, "name")
    name: Any = draw(ODD_NAMES if "name" in odd else st.just("echo"))
    params: dict[str, Any] = {"_meta": meta, key: name}
    if "params" in odd:
        params = draw(st.sampled_from([{key: name}, {"_meta": draw(JSON_VALUES), key: name}, {"_meta": meta}]))
    request = Request(draw(st.integers(0, 3) | st.text(max_size=3)), method, params)
    headers = {**BASE, "mcp-protocol-version": MODERN, "mcp-method": method}
    if isinstance(name, str):
        headers["mcp-name"] = name
    for header in HEADER_PARTS:
        if header in odd:
            field = "mcp-" + {"version header": "protocol-version", "method header": "method"}.get(header, "name")
            change = draw(st.sampled_from(["omit", "encoded", "arbitrary"]))
            if change == "omit":
                headers.pop(field, None)
            elif change == "encoded":
                headers[field] = encode_header_value(headers.get(field, ""))
            else:
                headers[field] = draw(HEADER_VALUES | ODD_NAMES)
    return request, headers


@settings(max_examples=1000)
@given(usual_requests())
def test_the_one_pass_agrees_with_the_rungs_on_every_request(case: tuple[Request, dict[str, str]]) -> None:
    request, headers = case
    answer = check_modern_rungs(request, headers)
    assert check_modern(request, headers) == answer
    if plain_version(request, headers) is not None:  # it only ever accepts what the rungs accept
        assert isinstance(answer, Accepted)
        assert plain_version(request, headers) == answer.version


@pytest.mark.parametrize(
    "headers",
    [
        mirrored("tools/call", "echo"),
        {**mirrored("tools/list"), "mcp-name": "anything"},  # a method without a name parameter
    ],
)
def test_the_usual_modern_request_takes_the_one_pass(headers: dict[str, str]) -> None:
    request = Request(1, headers["mcp-method"], modern(headers["mcp-method"], name="echo")["params"])
    assert plain_version(request, {**BASE, **headers}) == MODERN
    assert check_modern(request, {**BASE, **headers}) == Accepted(Era.MODERN, MODERN, (request,), None)


@pytest.mark.parametrize(
    ("name", "header"),
    [
        (" echo", " echo"),  # read without its edge whitespace: a mismatch
        ("echo", "=?base64?ZWNobw==?="),  # a sentinel: decoded by the rungs, accepted there
        ("=?base64?!?=", "=?base64?!?="),  # not base64: refused by the rungs
        ("a\tb", "a\tb"),
        ("caf\xe9", "caf\xe9"),
    ],
)
def test_a_name_that_is_not_plain_goes_up_the_rungs(name: str, header: str) -> None:
    request = Request(1, "tools/call", modern("tools/call", name=name)["params"])
    headers = {**BASE, **mirrored("tools/call", header)}
    assert plain_version(request, headers) is None
    assert check_modern(request, headers) == check_modern_rungs(request, headers)
