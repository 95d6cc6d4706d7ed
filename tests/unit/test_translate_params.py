"""``translate.params_for_child`` for a modern client and a modern child: the Tasks extension
is taken out of the declared capabilities unless the child serves tasks, and params without
``_meta`` pass as they are (the shortcut that skips ``_without_tasks_extension``)."""

from __future__ import annotations

from gateway.protocol import tasks
from gateway.protocol.handshake import META_CLIENT_CAPABILITIES, ChildInfo
from gateway.protocol.jsonrpc import JsonObject
from gateway.protocol.versions import LATEST_MODERN, MODERN
from gateway.relay.client import ClientContext
from gateway.relay.translate import params_for_child

CLIENT = ClientContext(MODERN, LATEST_MODERN)
PLAIN_CHILD = ChildInfo(MODERN, LATEST_MODERN)
TASK_CHILD = ChildInfo(MODERN, LATEST_MODERN, capabilities={"extensions": {tasks.EXTENSION: {}}})


def test_params_without_meta_pass_as_they_are() -> None:
    for params in (None, {}, {"name": "echo", "arguments": {"x": 1}}):
        assert params_for_child(params, CLIENT, PLAIN_CHILD) is params


def test_meta_without_the_extension_passes_as_it_is() -> None:
    params: JsonObject = {"name": "echo", "_meta": {META_CLIENT_CAPABILITIES: {"extensions": {"other": {}}}}}
    assert params_for_child(params, CLIENT, PLAIN_CHILD) is params
    assert params_for_child({"_meta": {"progressToken": 1}}, CLIENT, PLAIN_CHILD) == {"_meta": {"progressToken": 1}}


def test_the_extension_is_taken_out_unless_the_child_serves_tasks() -> None:
    declared = {"extensions": {tasks.EXTENSION: {}, "other": {}}}
    params: JsonObject = {"name": "echo", "_meta": {META_CLIENT_CAPABILITIES: declared, "progressToken": 1}}
    assert params_for_child(params, CLIENT, PLAIN_CHILD) == {
        "name": "echo",
        "_meta": {META_CLIENT_CAPABILITIES: {"extensions": {"other": {}}}, "progressToken": 1},
    }
    assert params_for_child(params, CLIENT, TASK_CHILD) is params
