"""A 2025-11-25 task server behind a fake child: what server-everything's task tool does.

``FakeTasks.script()`` is a legacy ``Script`` that declares ``capabilities.tasks`` and two task
tools: ``research`` (``execution.taskSupport: "required"``) and ``maybe`` (``"optional"``), beside
the default tools. A task-augmented call (``params.task``) answers at once with the child's
``CreateTaskResult``; without ``task``, ``research`` answers as the SDK does ("requires task
augmentation", ``isError``) and ``maybe`` with its result. The task itself:

- asks its questions (``arguments.ask``: how many ``elicitation/create`` at once, each with the
  task's related-task ``_meta``, its message naming ``arguments.topic``) through ``tasks/result``,
  as the TypeScript SDK delivers a task's queued requests, and completes once answered;
- without questions, runs until the test calls ``release()`` (or it is cancelled);
- with ``arguments.withdraw``, asks one question and withdraws it (``notifications/cancelled``)
  once the test calls ``release()``, then completes without its answer;
- with ``arguments.late_handle``, answers the augmented call with its handle only once the
  test releases the call (``Call.release``): a handle that comes after the call ended;
- with ``arguments.log``, writes a log line (``notifications/message``) in ``tasks/result``;
- answers ``tasks/get`` with its status and ``statusMessage``; ``tasks/cancel`` ends it
  ``cancelled`` (a second cancel is refused, as the SDK refuses a terminal task's);
- completes with a text naming its topic and the answers it was given.

Every request the child read is in ``FakeChild.received``, and each change wakes the backend's
waiters (``FakeBackend.until``).
"""

from __future__ import annotations

import itertools
from typing import Any, Final

import anyio

from tests.component.fakecalls import Call, JsonObject, text
from tests.component.fakechild import DEFAULT_TOOLS, FakeChild, Script

RELATED: Final = "io.modelcontextprotocol/related-task"
TASK_CAPABILITIES: Final = {"tools": {}, "tasks": {"cancel": {}, "requests": {"tools": {"call": {}}}}}
STAMP: Final = "2026-01-01T00:00:00.000Z"


class FakeTask:
    def __init__(self, task_id: str, call: Call) -> None:
        self.task_id = task_id
        self.call = call
        self.topic = str(call.arguments.get("topic", ""))
        self.questions = int(call.arguments.get("ask", 0))
        self.status = "working"
        self.message = f"researching {self.topic}"
        self.answers: list[Any] = []
        self.ttl = (call.task or {}).get("ttl")
        self.done = anyio.Event()  # released, answered or cancelled
        self.question_id: str | None = None  # a ``withdraw`` task's question

    def release(self) -> None:
        self.done.set()

    def wire(self) -> JsonObject:
        return {
            "taskId": self.task_id,
            "status": self.status,
            "statusMessage": self.message,
            "createdAt": STAMP,
            "lastUpdatedAt": STAMP,
            "ttl": self.ttl,
            "pollInterval": 1000,
        }


class FakeTasks:
    """The task server's state, shared by the children of one backend."""

    def __init__(self) -> None:
        self.tasks: dict[str, FakeTask] = {}
        self._ids = itertools.count(1)

    def script(self, **more: Any) -> Script:
        return Script(
            era="legacy",
            tools={**DEFAULT_TOOLS, "research": self.tool, "maybe": self.tool},
            capabilities=TASK_CAPABILITIES,
            tool_fields={
                "research": {"execution": {"taskSupport": "required"}},
                "maybe": {"execution": {"taskSupport": "optional"}},
                "echo": {"execution": {"taskSupport": "forbidden"}},
            },
            on_request={"tasks/get": self._get, "tasks/result": self._result, "tasks/cancel": self._cancel},
            **more,
        )

    def by_topic(self, topic: str) -> FakeTask:
        [task] = [task for task in self.tasks.values() if task.topic == topic]
        return task

    async def tool(self, call: Call) -> JsonObject:
        if call.task is None:
            if call.name == "research":
                return {**text("Tool research requires task augmentation (taskSupport: 'required')"), "isError": True}
            return text(f"done at once: {call.arguments.get('topic')}")
        if call.arguments.get("late_handle"):  # the handle only once the test releases it
            await call.held()
        task = FakeTask(f"child-task-{next(self._ids)}", call)
        self.tasks[task.task_id] = task
        call.child.backend.changes.changed()
        return {"task": task.wire()}

    async def _get(self, child: FakeChild, params: JsonObject) -> JsonObject:
        return self.tasks[params["taskId"]].wire()

    async def _cancel(self, child: FakeChild, params: JsonObject) -> JsonObject:
        task = self.tasks[params["taskId"]]
        if task.status in ("completed", "cancelled", "failed"):  # the SDK refuses a terminal task's cancel
            return {"refused": True}
        task.status, task.message = "cancelled", "cancelled by the client"
        task.done.set()
        child.backend.changes.changed()
        return task.wire()

    async def _result(self, child: FakeChild, params: JsonObject) -> JsonObject:
        task = self.tasks[params["taskId"]]
        if (line := task.call.arguments.get("log")) is not None:  # a log line while it runs
            note = {"level": "info", "data": f"{task.topic}: {line}"}
            await child.write({"jsonrpc": "2.0", "method": "notifications/message", "params": note})
        if task.call.arguments.get("withdraw") and task.status == "working":
            await self._withdrawn(child, task)
        elif task.questions and task.status == "working":
            await self._ask(child, task)
        await task.done.wait()
        if task.status == "working":
            task.status = "completed"
            child.backend.changes.changed()
        answers = ", ".join(str(answer) for answer in task.answers)
        result = text(f"report on {task.topic}; answers: {answers or 'none'}")
        return {**result, "_meta": {RELATED: {"taskId": task.task_id}}}

    async def _withdrawn(self, child: FakeChild, task: FakeTask) -> None:
        """One question, withdrawn once the test releases the task (its wait timed out, as the
        TypeScript SDK's does); the task then completes without its answer."""
        task.status, task.message = "input_required", "needs clarification"
        params = {"message": f"{task.topic}: still there?", "_meta": {RELATED: {"taskId": task.task_id}}}
        task.question_id = await child.question("elicitation/create", params)
        child.backend.changes.changed()
        await task.done.wait()
        await child.withdraw(task.question_id, "nobody answered in time")
        task.status, task.message = "working", "writing the report without it"
        child.backend.changes.changed()

    async def _ask(self, child: FakeChild, task: FakeTask) -> None:
        task.status = "input_required"
        task.message = "needs clarification"
        answers: list[Any] = [None] * task.questions

        async def ask(n: int) -> None:
            params = {
                "message": f"{task.topic}: question {n + 1}?",
                "requestedSchema": {"type": "object", "properties": {"pick": {"type": "string"}}},
                "_meta": {RELATED: {"taskId": task.task_id}},
            }
            reply = await child.ask("elicitation/create", params)
            answers[n] = reply.get("result", reply.get("error"))

        async with anyio.create_task_group() as tg:  # asked together, as from one await of several
            for n in range(task.questions):
                tg.start_soon(ask, n)
        task.answers = answers
        if task.status == "input_required":  # not cancelled meanwhile
            task.status, task.message = "working", "writing the report"
        task.done.set()
        child.backend.changes.changed()
