"""``gateway.protocol.taskbridge`` rule 7 and ``tasks.without_related_task``: what a legacy
session, which the gateway offers no tasks, is shown."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.protocol import bridge, taskbridge
from gateway.protocol import tasks as rules
from gateway.protocol.jsonrpc import METHOD_NOT_FOUND
from tests.schemas import validate

RELATED = rules.RELATED_TASK_META


def test_a_tool_list_for_a_session_names_no_task_support_and_keeps_everything_else() -> None:
    result = {
        "tools": [
            {"name": "a", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}},
            {"name": "b", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "optional", "x": 1}},
            {"name": "c", "inputSchema": {"type": "object"}},
        ],
        "nextCursor": "2",
    }
    plain = taskbridge.without_task_support(result)
    validate(plain, "ListToolsResult", "2025-11-25")
    assert plain == {
        "tools": [
            {"name": "a", "inputSchema": {"type": "object"}},
            {"name": "b", "inputSchema": {"type": "object"}, "execution": {"x": 1}},
            {"name": "c", "inputSchema": {"type": "object"}},
        ],
        "nextCursor": "2",
    }
    assert result["tools"][0]["execution"] == {"taskSupport": "required"}  # the child's list is not changed


@pytest.mark.parametrize(
    "result",
    [
        {"tools": [{"name": "c", "inputSchema": {"type": "object"}}]},
        {"tools": "not a list"},
        {"tools": ["not a tool", {"name": "d", "execution": "not an object"}]},
        {},
    ],
)
def test_a_list_without_task_support_is_returned_as_it_is(result: dict[str, Any]) -> None:
    assert taskbridge.without_task_support(result) is result


@pytest.mark.parametrize("method", sorted(taskbridge.LEGACY_REFUSED))
def test_a_sessions_task_request_is_method_not_found(method: str) -> None:
    error = taskbridge.legacy_refusal(method)
    validate({"jsonrpc": "2.0", "id": 1, "error": error}, "JSONRPCErrorResponse", "2025-11-25")
    assert error["code"] == METHOD_NOT_FOUND
    assert repr(method) in error["message"]


def test_an_outcome_for_a_session_names_no_related_task_and_keeps_its_other_meta() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"content": [], "_meta": {RELATED: {"taskId": "t-1"}, "other": 1}},
    }
    assert rules.without_related_task(message) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"content": [], "_meta": {"other": 1}},
    }
    only = {"jsonrpc": "2.0", "id": 3, "result": {"content": [], "_meta": {RELATED: {"taskId": "t-1"}}}}
    assert rules.without_related_task(only) == {"jsonrpc": "2.0", "id": 3, "result": {"content": []}}


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 3, "result": {"content": []}},
        {"jsonrpc": "2.0", "id": 3, "result": {"content": [], "_meta": "odd"}},
        {"jsonrpc": "2.0", "id": 3, "error": {"code": -1, "message": "x"}},
    ],
)
def test_an_outcome_without_a_related_task_is_returned_as_it_is(message: dict[str, Any]) -> None:
    assert rules.without_related_task(message) is message


def test_a_question_for_a_session_names_no_task_and_keeps_its_other_meta() -> None:
    asked = {"message": "m", "_meta": {RELATED: {"taskId": "t-1"}, "x": 1}}
    assert taskbridge.for_session(asked) == {"message": "m", "_meta": {"x": 1}}
    assert taskbridge.for_session({"message": "m", "_meta": {RELATED: {"taskId": "t-1"}}}) == {"message": "m"}
    plain = {"message": "m"}
    assert taskbridge.for_session(plain) is plain
    assert taskbridge.for_session(None) is None


def test_a_modern_child_is_not_told_a_sessions_tasks_extension() -> None:
    declared = {"elicitation": {}, "tasks": {}, "extensions": {rules.EXTENSION: {}, "io.modelcontextprotocol/ui": {}}}
    assert bridge.legacy_capabilities_to_modern(declared) == {
        "elicitation": {},
        "extensions": {"io.modelcontextprotocol/ui": {}},
    }
