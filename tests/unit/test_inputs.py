"""Child requests for the client (sampling, elicitation, roots): capability checks and local answers."""

from __future__ import annotations

import pytest

from gateway.errors import CODE_NO_CLIENT_INPUT
from gateway.protocol import inputs
from gateway.protocol.jsonrpc import METHOD_NOT_FOUND, MISSING_CLIENT_CAPABILITY, ErrorReply, Request, Result
from gateway.relay import translate

SAMPLE = {"messages": [], "maxTokens": 5}


@pytest.mark.parametrize(
    ("capabilities", "method", "params", "declared"),
    [
        ({"sampling": {}}, inputs.SAMPLING, SAMPLE, True),
        ({"sampling": {}}, inputs.SAMPLING, {**SAMPLE, "tools": [{"name": "x"}]}, False),
        ({"sampling": {"tools": {}}}, inputs.SAMPLING, {**SAMPLE, "tools": [{"name": "x"}]}, True),
        ({"sampling": {}}, inputs.SAMPLING, {**SAMPLE, "includeContext": "thisServer"}, False),
        ({"sampling": {}}, inputs.SAMPLING, {**SAMPLE, "includeContext": "none"}, True),
        ({}, inputs.SAMPLING, SAMPLE, False),
        ({"elicitation": {}}, inputs.ELICITATION, {"message": "m"}, True),  # empty = form
        ({"elicitation": {}}, inputs.ELICITATION, {"mode": "url", "url": "https://x"}, False),
        ({"elicitation": {"url": {}}}, inputs.ELICITATION, {"mode": "url", "url": "https://x"}, True),
        ({"elicitation": {"url": {}}}, inputs.ELICITATION, {"message": "m"}, False),
        ({"elicitation": {"form": {}}}, inputs.ELICITATION, {"mode": "form", "message": "m"}, True),
        ({"roots": {"listChanged": True}}, inputs.ROOTS, None, True),
        ({"roots": True}, inputs.ROOTS, None, False),
        ({"sampling": {}}, "ping", None, False),
    ],
)
def test_a_request_reaches_a_client_only_when_its_capabilities_cover_it(
    capabilities: dict[str, object], method: str, params: dict[str, object] | None, declared: bool
) -> None:
    assert inputs.is_declared(capabilities, method, params) is declared


def test_the_gateway_answers_what_no_client_can() -> None:
    roots = ({"uri": "file:///data", "name": "data"},)
    assert inputs.local_answer(Request(1, "ping"), None, "r") == Result(1, {})
    assert inputs.local_answer(Request(2, inputs.ROOTS), roots, "r") == Result(2, {"roots": [dict(roots[0])]})
    assert inputs.local_answer(Request(3, inputs.ELICITATION, {}), None, "r") == Result(3, {"action": "decline"})
    for method in (inputs.SAMPLING, inputs.ROOTS):
        answer = inputs.local_answer(Request("s-1", method), None, "nobody is asking")
        assert isinstance(answer, ErrorReply)
        assert answer.id == "s-1"
        assert answer.code == CODE_NO_CLIENT_INPUT
        assert not -32768 <= answer.code <= -32000  # never mistaken for a client's own error
        assert "nobody is asking" in answer.message
    refused = inputs.local_answer(Request(4, "tasks/list"), None, "r")
    assert isinstance(refused, ErrorReply)
    assert refused.code == METHOD_NOT_FOUND


def test_a_question_no_client_carries_gets_empty_roots_when_none_are_configured() -> None:
    # Outside any call (a server's start-up fetch, as server-everything's): "none", not -31006.
    roots = ({"uri": "file:///data", "name": "data"},)
    assert inputs.unattributed_answer(Request(1, inputs.ROOTS), None, "r") == Result(1, {"roots": []})
    assert inputs.unattributed_answer(Request(2, inputs.ROOTS), roots, "r") == Result(2, {"roots": [dict(roots[0])]})
    assert inputs.unattributed_answer(Request(3, inputs.ELICITATION, {}), None, "r") == Result(3, {"action": "decline"})
    sampled = inputs.unattributed_answer(Request(4, inputs.SAMPLING), None, "nobody is asking")
    assert isinstance(sampled, ErrorReply)
    assert sampled.code == CODE_NO_CLIENT_INPUT


def test_a_tasks_question_reaches_a_modern_client_without_the_childs_task_id() -> None:
    related = {"io.modelcontextprotocol/related-task": {"taskId": "child-1"}}
    params = {"message": "?", "requestedSchema": {"type": "object"}, "_meta": related}
    assert inputs.related_task(params) == "child-1"
    assert inputs.related_task({"_meta": {"io.modelcontextprotocol/related-task": {"taskId": 7}}}) is None
    assert inputs.related_task(None) is None
    assert inputs.input_request(inputs.ELICITATION, params)["params"] == {
        "message": "?",
        "requestedSchema": {"type": "object"},
    }
    kept = inputs.input_request(inputs.ELICITATION, {**params, "_meta": {**related, "trace": 1}})
    assert kept["params"]["_meta"] == {"trace": 1}


def test_an_input_request_is_bare_and_drops_legacy_only_fields() -> None:
    params = {"mode": "url", "url": "https://x", "elicitationId": "e1", "task": {"ttl": 1}, "message": "m"}
    assert inputs.input_request(inputs.ELICITATION, params) == {
        "method": inputs.ELICITATION,
        "params": {"mode": "url", "url": "https://x", "message": "m"},
    }
    assert inputs.input_request(inputs.ROOTS, None) == {"method": inputs.ROOTS, "params": {}}


def test_the_modern_answers_have_their_schema_shapes() -> None:
    result = inputs.input_required_result({"k1": inputs.input_request(inputs.ROOTS, None)}, "state")
    assert result == {
        "resultType": "input_required",
        "inputRequests": {"k1": {"method": "roots/list", "params": {}}},
        "requestState": "state",
    }
    required = inputs.merge_capabilities(
        inputs.required_capability(inputs.SAMPLING, {"tools": [{}]}),
        inputs.required_capability(inputs.SAMPLING, {"includeContext": "allServers"}),
        inputs.required_capability(inputs.ELICITATION, {"mode": "url"}),
    )
    assert required == {"sampling": {"tools": {}, "context": {}}, "elicitation": {"url": {}}}
    error = inputs.missing_capability_error(inputs.SAMPLING, required)
    assert error["code"] == MISSING_CLIENT_CAPABILITY
    assert error["data"] == {"requiredCapabilities": required}
    assert "sampling.tools" in error["message"]


def test_a_child_serving_one_client_is_told_what_that_client_declared_within_what_is_configured() -> None:
    configured = {"sampling": {}, "elicitation": {}, "roots": {}}
    client = {"sampling": {"tools": {}}, "roots": {"listChanged": True}, "experimental": {"x": {}}}
    assert inputs.told_to_child(configured, client) == {"sampling": {"tools": {}}, "roots": {}}
    assert inputs.told_to_child({"sampling": {}}, {"elicitation": {}}) == {}
    assert inputs.told_to_child(configured, {"elicitation": True}) == {}  # not an object: not declared


def test_configured_sub_fields_narrow_what_a_child_is_told_and_roots_list_changed_is_the_gateways() -> None:
    configured = {"elicitation": {"form": {}}, "sampling": {}, "roots": {"listChanged": True}}
    client = {"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}}, "roots": {}}
    assert inputs.told_to_child(configured, client) == {
        "elicitation": {"form": {}},  # url was not configured
        "sampling": {"tools": {}},  # configured bare: the client's sub-fields pass
        "roots": {"listChanged": True},  # the gateway sends its own list_changed
    }
    assert inputs.told_to_child(configured, {"roots": {"listChanged": True}}) == {"roots": {"listChanged": True}}
    assert inputs.told_to_child({"roots": {}}, {"roots": {"listChanged": True}}) == {"roots": {}}


def test_a_capability_set_has_one_readable_key_whatever_the_order() -> None:
    told = {"sampling": {}, "roots": {"listChanged": True}, "elicitation": {"url": {}, "form": {}}}
    assert inputs.capability_key(told) == "elicitation.form,elicitation.url,roots.listChanged,sampling"
    assert inputs.capability_key(dict(reversed(list(told.items())))) == inputs.capability_key(told)
    assert inputs.capability_key({}) == "none"
    assert inputs.capability_key({"sampling": {"tools": {"x": 1}}}) == 'sampling.tools={"x": 1}'


def test_an_elicitation_from_a_client_that_cannot_be_asked_is_refused_not_declined() -> None:
    request = Request(3, inputs.ELICITATION, {"message": "name?"})
    assert inputs.local_answer(request, None, "nobody is there") == Result(3, {"action": "decline"})
    refused = inputs.local_answer(request, None, "the client did not declare it", decline=False)
    assert isinstance(refused, ErrorReply)
    assert refused.code == CODE_NO_CLIENT_INPUT
    assert "the client did not declare it" in refused.message


def test_a_modern_childs_round_for_a_legacy_client_carries_at_most_the_bound_of_requests() -> None:
    def round_of(count: int) -> dict[str, object]:
        return {f"k{n}": {"method": inputs.ELICITATION, "params": {"message": "?"}} for n in range(count)}

    assert translate.input_required_problem(round_of(inputs.MAX_INPUT_REQUESTS), "s") is None
    problem = translate.input_required_problem(round_of(inputs.MAX_INPUT_REQUESTS + 1), "s")
    assert problem == "input_required with 17 inputRequests; the gateway relays at most 16"
