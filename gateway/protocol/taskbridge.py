"""Tasks bridged to a legacy child that keeps its own (2025-11-25 tasks), as pure rules.

``gateway.protocol.tasks`` is the gateway's side (SEP-2663, the extension a modern client
opts in to); this module is the child's side, where a 2025-11-25 server runs a tool as its own
task. ``gateway.relay.task_bridge`` runs them.

Rules:

1. **Which calls are bridged.** A modern ``tools/call`` that becomes a task (``tasks`` rule 2)
   on a legacy child that declares ``capabilities.tasks.requests.tools.call`` (``takes_tasks``),
   of a tool the child marks ``execution.taskSupport`` ``optional`` or ``required``. The child
   is sent the task-augmented call (``params.task``: ``{"ttl": ms}``, the gateway's task TTL);
   every other call on it is sent as before. A tool the operator names (``--task-tool``) but
   the child does not mark is run by the gateway, as on any child.
2. **Creation.** The child's ``CreateTaskResult`` (``{"task": {taskId, status, …}}``,
   ``child_task``) becomes a task of the gateway's whose id maps to the child's; the client
   gets the gateway's flat handle. A child that answers the augmented call with a plain
   result or an error answers the client with it, as for any call; a question the child asks
   *before* its handle (an MRTR round for a modern client) is answered synchronously, before
   any task exists.
3. **Status** (``tasks/get``): the gateway's task says what only it knows (the questions
   waiting for ``tasks/update``, the outcome once fetched); while it is ``working`` its
   ``statusMessage`` is the child's latest (``child_status``).
4. **Outcome**: fetched with the child's ``tasks/result`` (which blocks until the child's task
   ends, and carries the task's questions meanwhile). Its result, or its JSON-RPC error,
   settles the gateway's task as for any task.
5. **Questions** that name the child's task (``_meta`` related-task) become the task's
   ``inputRequests``; the client's answers go back to the child as the responses to those
   requests. A question the client cannot take (undeclared capability), or that ends
   unanswered (the child's own timeout, the input timeout), is answered by the gateway as any
   child question; the child decides what its tool does then, and the task goes on.
6. **Cancel**: the gateway's task is ``cancelled`` at once; the child gets ``tasks/cancel``
   with its own id (a child task that already ended refuses it: no matter).
7. **Legacy sessions** get no tasks: the gateway declares none to them (a session's
   ``initialize`` result drops the child's ``tasks``), so a shared child's task ids, statuses
   and results never reach a client that did not make them:
   - ``tasks/get``, ``tasks/result``, ``tasks/list``, ``tasks/cancel``, ``tasks/update`` and
     ``subscriptions/listen`` from a session are answered -32601 (``LEGACY_REFUSED``,
     ``legacy_refusal``), never sent to a child; a modern child is not told a session's
     Tasks extension (``bridge.legacy_capabilities_to_modern``), so it makes no task for one;
   - a child's question for a session names no task (``for_session``: its related-task
     ``_meta`` dropped);
   - its ``tools/list`` shows no ``execution.taskSupport`` (``without_task_support``): as the
     session sees them, tools run as plain calls;
   - a call of a tool the child marks ``required`` is sent task-augmented, and a child's
     ``CreateTaskResult`` for a session's call (that one, or a call the client augmented
     itself) is waited for in the child's ``tasks/result`` on the call's own stream: its
     questions reach the session there, its outcome is the call's answer, and the child's
     task is cancelled (``tasks/cancel``) when the call ends first (cancelled, deleted, timed
     out, drained, its stream not resumed: a legacy hang-up alone ends nothing).

Imports: standard library and ``gateway.protocol`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gateway.protocol.jsonrpc import METHOD_NOT_FOUND, MISSING_CLIENT_CAPABILITY, JsonObject, error_object
from gateway.protocol.tasks import EXTENSION, RELATED_TASK_META, TERMINAL, UPDATE, without_related_meta

RESULT: Final = "tasks/result"
GET: Final = "tasks/get"
CANCEL: Final = "tasks/cancel"
LIST: Final = "tasks/list"
LISTEN: Final = "subscriptions/listen"
LEGACY_REFUSED: Final = frozenset({GET, RESULT, LIST, CANCEL, UPDATE, LISTEN})
"""A legacy session's requests that the gateway answers -32601 (rule 7): the tasks methods of
both revisions, and the modern ``subscriptions/listen``, whose ``taskIds`` would watch a
modern child's tasks (a session hears list changes and resource updates on its GET stream)."""
TASK_SUPPORT: Final = frozenset({"optional", "required"})
"""``execution.taskSupport`` values that let a tool run as the child's task."""


def takes_tasks(capabilities: Mapping[str, Any]) -> bool:
    """Rule 1: a legacy child that declares task-augmented ``tools/call``."""
    tasks = capabilities.get("tasks")
    requests = tasks.get("requests") if isinstance(tasks, dict) else None
    tools = requests.get("tools") if isinstance(requests, dict) else None
    return isinstance(tools, dict) and isinstance(tools.get("call"), dict)


def task_params(params: JsonObject | None, ttl_seconds: float) -> JsonObject:
    """The call's params with ``task`` (rule 1): the child keeps its task for the gateway's TTL."""
    return {**(params or {}), "task": {"ttl": round(ttl_seconds * 1000)}}


def child_task(result: object) -> JsonObject | None:
    """The child's task in its ``CreateTaskResult`` (rule 2), or None for any other result."""
    task = result.get("task") if isinstance(result, dict) else None
    return task if isinstance(task, dict) and isinstance(task.get("taskId"), str) else None


def child_status(result: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """A child's ``tasks/get`` result: its status and ``statusMessage`` (rule 3)."""
    status, message = result.get("status"), result.get("statusMessage")
    return (status if isinstance(status, str) else None, message if isinstance(message, str) else None)


def is_terminal(status: str | None) -> bool:
    return status in TERMINAL


def required_error(tool: str) -> JsonObject:
    """-32021 for a client that did not opt in and calls a tool the child runs only as a task."""
    return error_object(
        MISSING_CLIENT_CAPABILITY,
        f"tool {tool!r} runs only as a task: declare the {EXTENSION} extension in this request's "
        "_meta clientCapabilities.extensions",
        {"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
    )


def legacy_refusal(method: str) -> JsonObject:
    """Rule 7: -32601 for a legacy session's ``tasks/*`` or ``subscriptions/listen``."""
    if method == LISTEN:
        why = "a 2026-07-28 request; a session hears list changes and resource updates on its GET stream"
    else:
        why = (
            "not offered to 2025 sessions: the gateway declares no tasks to them (a tool that runs only as a "
            "task runs to its end on a plain tools/call)"
        )
    return error_object(METHOD_NOT_FOUND, f"method {method!r} is {why}")


def for_session(params: JsonObject | None) -> JsonObject | None:
    """Rule 7: a child's question's params for a session, without related-task ``_meta``."""
    meta = params.get("_meta") if params else None
    if not isinstance(meta, dict) or RELATED_TASK_META not in meta:
        return params
    assert params is not None
    return without_related_meta(params)


def without_task_support(result: JsonObject) -> JsonObject:
    """Rule 7: a ``tools/list`` result for a legacy session, no tool's ``execution`` naming
    ``taskSupport`` (an ``execution`` left empty is dropped). The result itself when no tool
    names one (most lists)."""
    tools = result.get("tools")
    if not isinstance(tools, list) or not any(_task_support_of(tool) for tool in tools):
        return result
    plain: list[object] = []
    for tool in tools:
        if _task_support_of(tool):
            execution = {k: v for k, v in tool["execution"].items() if k != "taskSupport"}
            tool = {k: v for k, v in tool.items() if k != "execution"}
            if execution:
                tool["execution"] = execution
        plain.append(tool)
    return {**result, "tools": plain}


def _task_support_of(tool: object) -> bool:
    execution = tool.get("execution") if isinstance(tool, dict) else None
    return isinstance(execution, dict) and "taskSupport" in execution
