"""The era probe and the legacy handshake as pure decisions (digest §3, §7.2)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from gateway.protocol import tasks as task_rules
from gateway.protocol import versions
from gateway.protocol.handshake import (
    DISCOVER,
    INITIALIZE,
    INITIALIZED,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    ChildInfo,
    HandshakeError,
    accept_initialize,
    classify_probe,
    initialize_params,
    modern_meta,
    probe_params,
)
from gateway.protocol.jsonrpc import ErrorReply, Notification, Request, Result
from gateway.protocol.versions import Era
from tests.schemas import validate

MODERN = "2026-07-28"


def discover_result(**overrides: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "resultType": "complete",
        "supportedVersions": [MODERN],
        "capabilities": {"tools": {"listChanged": True}},
        "instructions": "Use the echo tool.",
        "ttlMs": 0,
        "cacheScope": "public",
        "_meta": {META_SERVER_INFO: {"name": "echo-server", "version": "1.2.3"}},
    }
    result.update(overrides)
    return result


def unsupported_version(data: Any) -> ErrorReply:
    return ErrorReply(1, {"code": -32022, "message": "Unsupported protocol version", "data": data})


# --- the probe request ------------------------------------------------------------------


def test_the_probe_is_a_valid_server_discover_request_for_the_latest_modern_version() -> None:
    request = Request(1, DISCOVER, probe_params("0.1.0")).to_dict()

    validate(request, "DiscoverRequest", "2026-07-28")
    assert request["params"]["_meta"][META_PROTOCOL_VERSION] == versions.LATEST_MODERN
    assert request["params"]["_meta"][META_CLIENT_CAPABILITIES] == {}
    assert request["params"]["_meta"][META_CLIENT_INFO] == {"name": "mcp-stdio-gateway", "version": "0.1.0"}


def test_the_schema_check_can_fail_a_probe_without_its_required_meta() -> None:
    request = Request(1, DISCOVER, {"_meta": {META_CLIENT_INFO: {"name": "x", "version": "1"}}}).to_dict()

    with pytest.raises(jsonschema.ValidationError):
        validate(request, "DiscoverRequest", "2026-07-28")


def test_modern_meta_copies_the_capabilities_it_is_given() -> None:
    capabilities: dict[str, Any] = {"elicitation": {}}

    meta = modern_meta("0.1.0", capabilities)

    assert meta[META_CLIENT_CAPABILITIES] == capabilities
    assert meta[META_CLIENT_CAPABILITIES] is not capabilities
    validate(Request(1, DISCOVER, {"_meta": meta}).to_dict(), "DiscoverRequest", "2026-07-28")


# --- classify_probe: modern -------------------------------------------------------------


def test_a_discover_result_naming_a_modern_version_makes_the_child_modern() -> None:
    result = discover_result(supportedVersions=["2025-11-25", MODERN])

    info = classify_probe(Result(1, result))

    assert info == ChildInfo(
        era=Era.MODERN,
        version=MODERN,
        capabilities={"tools": {"listChanged": True}},
        server_info={"name": "echo-server", "version": "1.2.3"},
        instructions="Use the echo tool.",
        supported_versions=("2025-11-25", MODERN),
        raw=result,
    )


def test_a_discover_result_with_odd_optional_members_still_makes_the_child_modern_with_defaults() -> None:
    result = {"supportedVersions": [MODERN], "capabilities": [], "instructions": 3, "_meta": "x"}

    info = classify_probe(Result(1, result))

    assert info is not None
    assert info.era is Era.MODERN
    assert info.capabilities == {}
    assert info.server_info == {}
    assert info.instructions is None


def test_a_discover_result_whose_meta_lacks_server_info_gives_empty_server_info() -> None:
    info = classify_probe(Result(1, discover_result(_meta={})))

    assert info is not None
    assert info.server_info == {}


def test_an_unsupported_version_error_naming_a_modern_version_makes_the_child_modern() -> None:
    info = classify_probe(unsupported_version({"supported": [MODERN, "2025-11-25"], "requested": "2099-01-01"}))

    assert info == ChildInfo(era=Era.MODERN, version=MODERN, supported_versions=(MODERN, "2025-11-25"))


# --- classify_probe: legacy (None) ------------------------------------------------------


@pytest.mark.parametrize(
    "supported",
    [["2025-11-25"], list(versions.LEGACY_VERSIONS), ["2099-01-01"], []],
    ids=["latest-legacy", "all-legacy", "unknown-future", "empty"],
)
def test_a_discover_result_naming_no_modern_version_we_speak_means_legacy(supported: list[str]) -> None:
    assert classify_probe(Result(1, discover_result(supportedVersions=supported))) is None


@pytest.mark.parametrize(
    "result",
    [{}, {"supportedVersions": MODERN}, {"supportedVersions": [MODERN, 2026]}, {"supportedVersions": None}],
    ids=["empty-result", "string-not-list", "non-string-item", "null"],
)
def test_a_result_without_a_list_of_version_strings_means_legacy(result: dict[str, Any]) -> None:
    assert classify_probe(Result(1, result)) is None


@pytest.mark.parametrize(
    "data",
    [
        {"supported": ["2025-06-18", "2025-11-25"], "requested": MODERN},
        {"supported": [], "requested": MODERN},
        {"supported": MODERN},
        {"requested": MODERN},
        [MODERN],
        None,
    ],
    ids=["only-legacy", "empty", "string-not-list", "no-supported", "data-is-a-list", "no-data"],
)
def test_an_unsupported_version_error_naming_no_modern_version_means_legacy(data: Any) -> None:
    assert classify_probe(unsupported_version(data)) is None


@pytest.mark.parametrize("code", [-32601, -32602, -32600, -32603, -32000, -32002, 1])
def test_any_other_error_means_legacy_even_if_it_names_a_modern_version(code: int) -> None:
    # Legacy servers refuse an unknown method before initialize with a code of their own
    # choosing; -32602 with data.supported is even the spec's legacy negotiation example.
    reply = ErrorReply(1, {"code": code, "message": "no", "data": {"supported": [MODERN], "requested": MODERN}})

    assert classify_probe(reply) is None


def test_no_reply_within_the_probe_timeout_means_legacy() -> None:
    assert classify_probe(None) is None


# --- the legacy handshake ---------------------------------------------------------------


@pytest.mark.parametrize("capabilities", [None, {"roots": {"listChanged": True}, "sampling": {}}])
def test_initialize_params_are_a_valid_initialize_request_for_the_latest_legacy_version(
    capabilities: dict[str, Any] | None,
) -> None:
    params = initialize_params("0.1.0", capabilities)

    validate(Request(0, INITIALIZE, params).to_dict(), "InitializeRequest", "2025-11-25")
    assert params["protocolVersion"] == versions.LATEST_LEGACY
    assert params["capabilities"] == (capabilities or {})
    assert params["capabilities"] is not capabilities
    assert params["clientInfo"] == {"name": "mcp-stdio-gateway", "version": "0.1.0"}


def test_the_schema_check_can_fail_initialize_params_without_client_info() -> None:
    params = initialize_params("0.1.0")
    del params["clientInfo"]

    with pytest.raises(jsonschema.ValidationError):
        validate(Request(0, INITIALIZE, params).to_dict(), "InitializeRequest", "2025-11-25")


def test_the_initialized_notification_is_valid_for_the_legacy_schema() -> None:
    validate(Notification(INITIALIZED).to_dict(), "InitializedNotification", "2025-11-25")


@pytest.mark.parametrize("version", versions.LEGACY_VERSIONS)
def test_an_initialize_result_with_a_legacy_version_is_accepted(version: str) -> None:
    result = {
        "protocolVersion": version,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "legacy", "version": "0.9"},
        "instructions": "Be nice.",
    }

    info = accept_initialize(Result(0, result))

    assert info == ChildInfo(
        era=Era.LEGACY,
        version=version,
        capabilities={"tools": {}},
        server_info={"name": "legacy", "version": "0.9"},
        instructions="Be nice.",
        supported_versions=(version,),
        raw=result,
    )


def test_an_initialize_result_with_odd_optional_members_is_accepted_with_defaults() -> None:
    info = accept_initialize(Result(0, {"protocolVersion": "2025-11-25", "capabilities": None, "instructions": 1}))

    assert info.capabilities == {}
    assert info.server_info == {}
    assert info.instructions is None


@pytest.mark.parametrize("version", [MODERN, "1999-01-01", "", 20251125, None])
def test_an_initialize_result_with_a_version_the_gateway_does_not_speak_is_refused(version: Any) -> None:
    result = {"capabilities": {}, "serverInfo": {"name": "x", "version": "1"}}
    if version is not None:
        result["protocolVersion"] = version

    with pytest.raises(HandshakeError, match="initialize answered protocol version") as caught:
        accept_initialize(Result(0, result))

    assert repr(version) in str(caught.value)
    assert "2025-11-25" in str(caught.value)


def test_an_error_reply_to_initialize_is_refused_with_its_message_and_code() -> None:
    reply = ErrorReply(0, {"code": -32602, "message": "Unsupported protocol version", "data": {"supported": []}})

    with pytest.raises(HandshakeError) as caught:
        accept_initialize(reply)

    assert str(caught.value) == "initialize failed: Unsupported protocol version (code -32602)"


def test_whether_a_child_serves_tasks_is_worked_out_once_as_the_tasks_rule_says() -> None:
    """``ChildInfo.serves_tasks`` stands for ``tasks.child_serves(capabilities)`` (asked on
    every modern call): equal for each shape, and left out of equality and repr."""
    shapes: list[dict[str, Any]] = [
        {},
        {"extensions": {task_rules.EXTENSION: {}}},
        {"extensions": {task_rules.EXTENSION: True}},
        {"extensions": []},
        {"tasks": {}},
    ]
    for capabilities in shapes:
        info = ChildInfo(Era.MODERN, versions.LATEST_MODERN, capabilities)
        assert info.serves_tasks is task_rules.child_serves(capabilities)
        assert info == ChildInfo(Era.MODERN, versions.LATEST_MODERN, capabilities)
        assert "serves_tasks" not in repr(info)
    assert ChildInfo(Era.LEGACY, "2025-06-18", {"extensions": {task_rules.EXTENSION: {}}}).serves_tasks
