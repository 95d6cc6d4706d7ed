"""What a fake child does with a ``tools/call``: the ``Call`` a tool runs as (progress,
questions to the client, held until released or cancelled) and the default tools."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import anyio

if TYPE_CHECKING:
    from tests.component.fakechild import FakeChild

JsonObject = dict[str, Any]
ToolHandler = Callable[["Call"], Awaitable[JsonObject]]


def text(value: str, **structured: Any) -> JsonObject:
    result: JsonObject = {"content": [{"type": "text", "text": value}]}
    if structured:
        result["structuredContent"] = structured
    return result


class Call:
    """One ``tools/call`` at a fake child."""

    def __init__(self, child: FakeChild, request_id: int | str, params: JsonObject, modern: bool) -> None:
        self.child = child
        self.id = request_id  # the child-side id (what the gateway minted)
        self.name: str = params.get("name", "")
        arguments = params.get("arguments")
        self.arguments: JsonObject = arguments if isinstance(arguments, dict) else {}
        meta = params.get("_meta")
        self.meta: JsonObject = meta if isinstance(meta, dict) else {}
        task = params.get("task")
        self.task: JsonObject | None = task if isinstance(task, dict) else None  # a task-augmented call's
        self.modern = modern
        self.cancelled = anyio.Event()
        self.answered = False  # a reply was written
        self.question_id: str | None = None  # ``withdraw``'s question, once asked
        self._release = anyio.Event()
        self._result: JsonObject = text("released")

    def __repr__(self) -> str:
        return f"<Call {self.name} id={self.id!r} on {self.child.pid}>"

    @property
    def is_released(self) -> bool:
        return self.answered or self._release.is_set()

    def release(self, result: JsonObject | None = None) -> None:
        """Let a held call answer (``result``, or "released")."""
        if result is not None:
            self._result = result
        self._release.set()

    async def held(self) -> JsonObject:
        """Wait until released (then the result to answer with); ``CallCancelled`` when the
        gateway cancels the call first (then nothing is written for it)."""
        async with anyio.create_task_group() as tg:

            async def on_cancel() -> None:
                await self.cancelled.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(on_cancel)
            await self._release.wait()
            tg.cancel_scope.cancel()
        if self.cancelled.is_set():
            raise CallCancelled
        return self._result

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        token = self.meta.get("progressToken")
        if token is None or self.cancelled.is_set():
            return
        params: JsonObject = {"progressToken": token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.child.write({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})

    async def ask(self, method: str, params: JsonObject | None = None) -> JsonObject:
        """A request to the client while this call runs; its response (result or error)."""
        return await self.child.ask(method, params)


class CallCancelled(Exception):
    """The gateway cancelled the call: nothing more is written for it."""


async def _echo(call: Call) -> JsonObject:
    return text(str(call.arguments.get("message", "")))


async def _whoami(call: Call) -> JsonObject:
    return text(str(call.child.pid), pid=call.child.pid)


async def _progress(call: Call) -> JsonObject:
    count = int(call.arguments.get("count", 3))
    tag = str(call.arguments.get("tag", "step"))
    for step in range(1, count + 1):
        await call.progress(step, count, f"{tag} {step}")
    if call.arguments.get("hold"):
        return await call.held()
    return text(tag)


async def _hold(call: Call) -> JsonObject:
    return await call.held()


async def _ask(call: Call) -> JsonObject:
    params = call.arguments.get("params")
    answer = await call.ask(str(call.arguments["method"]), params if isinstance(params, dict) else None)
    return text("asked", answer=answer)


async def _withdraw(call: Call) -> JsonObject:
    """Ask the client ``method`` (with ``params``), then, once released, withdraw the question
    (``notifications/cancelled`` naming it: nobody answered in time) and answer "withdrawn"."""
    params = call.arguments.get("params")
    ask_id = await call.child.question(str(call.arguments["method"]), params if isinstance(params, dict) else None)
    call.question_id = ask_id
    call.child.backend.changes.changed()
    await call.held()
    await call.child.withdraw(ask_id, "nobody answered in time")
    return text("withdrawn")


async def _crash(call: Call) -> JsonObject:
    stderr = call.arguments.get("stderr", [])
    await call.child.exit(int(call.arguments.get("code", 1)), stderr=[str(line) for line in stderr])
    raise CallCancelled  # never reached in practice: the exit cancelled this task


async def _stderr(call: Call) -> JsonObject:
    lines = call.arguments.get("lines", [])
    await call.child.write_stderr([str(line) for line in lines], one_chunk=bool(call.arguments.get("one_chunk")))
    return text("written")


DEFAULT_TOOLS: Final[Mapping[str, ToolHandler]] = {
    "echo": _echo,
    "whoami": _whoami,
    "progress": _progress,
    "hold": _hold,
    "ask": _ask,
    "withdraw": _withdraw,
    "crash": _crash,
    "stderr": _stderr,
}
