"""URL-mode elicitation across the eras: the pure rules (``gateway.protocol.urlelicitation``)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import CODE_NO_CLIENT_INPUT
from gateway.protocol import bridge, urlelicitation
from gateway.protocol.jsonrpc import MISSING_CLIENT_CAPABILITY, URL_ELICITATION_REQUIRED
from gateway.protocol.urlelicitation import MAX_URL_ELICITATIONS
from tests.schemas import validate


def legacy_entry(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "mode": "url",
        "elicitationId": f"e-{n}",
        "url": f"https://auth.example/{n}",
        "message": f"sign in {n}",
        **extra,
    }


def url_required(*entries: Any, message: str = "sign in first") -> dict[str, Any]:
    return {"code": URL_ELICITATION_REQUIRED, "message": message, "data": {"elicitations": list(entries)}}


def test_a_legacy_error_becomes_modern_params_without_the_elicitation_id_in_order() -> None:
    error = url_required(legacy_entry(1), legacy_entry(2))
    validate({"jsonrpc": "2.0", "id": 1, "error": error}, "URLElicitationRequiredError", "2025-11-25")
    found = urlelicitation.elicitations(error)
    assert found == [
        {"mode": "url", "message": "sign in 1", "url": "https://auth.example/1"},
        {"mode": "url", "message": "sign in 2", "url": "https://auth.example/2"},
    ]
    assert found is not None
    wanted = urlelicitation.round_requests(found)
    assert list(wanted) == ["url-1", "url-2"]
    for entry in wanted.values():
        validate(entry, "InputRequest")
    validate(
        {"resultType": "input_required", "inputRequests": wanted, "requestState": "mcpgw2.x.y"}, "InputRequiredResult"
    )


def test_an_entry_without_mode_is_taken_as_url_mode() -> None:
    entry = {k: v for k, v in legacy_entry(1).items() if k != "mode"}
    assert urlelicitation.elicitations(url_required(entry)) == [
        {"mode": "url", "message": "sign in 1", "url": "https://auth.example/1"}
    ]


@pytest.mark.parametrize(
    "error",
    [
        {"code": -32603, "message": "internal"},
        {"code": URL_ELICITATION_REQUIRED, "message": "no data"},
        {"code": URL_ELICITATION_REQUIRED, "message": "m", "data": {"elicitations": "https://x"}},
        url_required(),
        url_required("https://x"),
        url_required(legacy_entry(1, mode="form")),
        url_required(legacy_entry(1, url="")),
        url_required(legacy_entry(1, url="/grant/ada")),  # not absolute
        url_required(legacy_entry(1, url="https://auth.example/a b")),  # a space: no URI
        url_required(legacy_entry(1, url="https://auth.example/\n")),
        url_required(legacy_entry(1, url="https://auth.example/" + "x" * urlelicitation.MAX_URL_CHARS)),
        url_required(legacy_entry(1, url=None)),
        url_required(legacy_entry(1, message=7)),
        url_required(*(legacy_entry(n) for n in range(MAX_URL_ELICITATIONS + 1))),
    ],
)
def test_what_is_not_a_usable_url_elicitation_is_none(error: dict[str, Any]) -> None:
    assert urlelicitation.elicitations(error) is None


def test_the_bound_itself_is_usable() -> None:
    found = urlelicitation.elicitations(url_required(*(legacy_entry(n) for n in range(MAX_URL_ELICITATIONS))))
    assert found is not None
    assert len(found) == MAX_URL_ELICITATIONS


@pytest.mark.parametrize(
    ("responses", "refused"),
    [
        ({"url-1": {"action": "accept"}, "url-2": {"action": "accept"}}, None),
        ({"url-1": {"action": "accept"}, "url-2": {"action": "decline"}}, "decline"),
        ({"url-1": {"action": "cancel"}}, "cancel"),
        ({"url-1": {}}, "no action"),
        ({"url-1": "accept"}, "no action"),
        ({"roots": {"roots": []}}, None),  # a roots round's answer: not the URL round's
        ({}, None),
    ],
)
def test_a_retry_is_refused_for_the_first_url_answer_that_is_not_accept(
    responses: dict[str, Any], refused: str | None
) -> None:
    assert urlelicitation.refusal(responses) == refused


def test_the_errors_say_what_happened_and_what_is_needed() -> None:
    error = url_required(legacy_entry(1), message="ada must sign in")
    declined = urlelicitation.declined_error("decline")
    assert declined["code"] == CODE_NO_CLIENT_INPUT
    assert declined["data"] == {"source": "mcp-stdio-gateway", "method": "elicitation/create", "action": "decline"}
    missing = urlelicitation.missing_capability_error(error)
    assert missing["code"] == MISSING_CLIENT_CAPABILITY
    assert "'ada must sign in'" in missing["message"]
    validate({"jsonrpc": "2.0", "id": 1, "error": missing}, "MissingRequiredClientCapabilityError")
    for made in (declined, missing):
        validate({"jsonrpc": "2.0", "id": 1, "error": made}, "JSONRPCErrorResponse")


def test_a_modern_client_never_gets_32042_from_the_bridge() -> None:
    usable = bridge.modernize_error(url_required(legacy_entry(1)))
    assert usable["code"] == CODE_NO_CLIENT_INPUT
    assert usable["data"]["elicitations"] == [{"mode": "url", "message": "sign in 1", "url": "https://auth.example/1"}]
    assert usable["data"]["requiredCapabilities"] == {"elicitation": {"url": {}}}
    assert "the gateway cannot ask for it here" in usable["message"]
    unusable = bridge.modernize_error(url_required())
    assert unusable["code"] == CODE_NO_CLIENT_INPUT
    assert "elicitations" not in unusable["data"]
    long_message = bridge.modernize_error(url_required(message="x" * 10_000))
    assert len(long_message["message"]) < 600  # the child's message is quoted, cut at 200 characters
    assert bridge.modernize_error({"code": 1234, "message": "m"}) == {"code": 1234, "message": "m"}


def test_a_modern_url_elicitation_gets_an_elicitation_id_for_a_legacy_client() -> None:
    modern = {"mode": "url", "message": "Sign in", "url": "https://auth.example/x"}
    given = urlelicitation.for_legacy_client("elicitation/create", modern, lambda: "gw-1")
    assert given == {**modern, "elicitationId": "gw-1"}
    validate(
        {"jsonrpc": "2.0", "id": "g-1", "method": "elicitation/create", "params": given}, "ElicitRequest", "2025-11-25"
    )
    own = {**modern, "elicitationId": "child-1"}
    assert urlelicitation.for_legacy_client("elicitation/create", own, lambda: "gw-1") is own
    form = {"mode": "form", "message": "Name?", "requestedSchema": {"type": "object", "properties": {}}}
    assert urlelicitation.for_legacy_client("elicitation/create", form, lambda: "gw-1") is form
    assert urlelicitation.for_legacy_client("elicitation/create", None, lambda: "gw-1") is None


def test_the_ids_a_legacy_child_gives_a_legacy_client_are_found_for_their_completion() -> None:
    question = {"mode": "url", "elicitationId": "q-1", "url": "https://x", "message": "m"}
    assert urlelicitation.question_ids("elicitation/create", question) == ["q-1"]
    assert urlelicitation.question_ids("elicitation/create", {**question, "mode": "form"}) == []
    assert urlelicitation.question_ids("sampling/createMessage", question) == []
    assert urlelicitation.question_ids("elicitation/create", {**question, "elicitationId": 7}) == []
    error = url_required(legacy_entry(1), legacy_entry(2), {"url": "https://y"}, "junk")
    assert urlelicitation.error_ids(error) == ["e-1", "e-2"]
    many = url_required(*(legacy_entry(n) for n in range(MAX_URL_ELICITATIONS + 5)))
    assert len(urlelicitation.error_ids(many)) == MAX_URL_ELICITATIONS  # bounded
    assert urlelicitation.error_ids({"code": -32603, "message": "m", "data": {"elicitations": []}}) == []


def test_a_32042_without_ids_gets_one_for_each_entry_for_a_legacy_client() -> None:
    ids = iter(["g1", "g2"])
    without = {k: v for k, v in legacy_entry(1).items() if k != "elicitationId"}
    error = url_required(without, legacy_entry(2), without)
    filled = urlelicitation.with_legacy_ids(error, lambda: next(ids))
    assert [entry["elicitationId"] for entry in filled["data"]["elicitations"]] == ["g1", "e-2", "g2"]
    assert error["data"]["elicitations"][0] == without  # the child's error is not changed
    complete = url_required(legacy_entry(1))
    assert urlelicitation.with_legacy_ids(complete, lambda: "never") is complete
