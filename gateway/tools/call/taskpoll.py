"""``call`` following a task (the Tasks extension, ``gateway.protocol.tasks``): when a
``tools/call`` is answered with a task handle, ``TaskFollower`` polls ``tasks/get`` at the
task's ``pollIntervalMs`` until it ends, shows its ``statusMessage`` on the progress bar, asks
the user what the task's ``inputRequests`` ask (as for MRTR) and answers with
``tasks/update``, keeps polling through a dropped connection (the task lives on at the
gateway), and sends ``tasks/cancel`` when it is interrupted."""

from __future__ import annotations

from typing import Final

import anyio
from rich.console import Console

from gateway.protocol import tasks
from gateway.protocol.jsonrpc import ErrorReply, JsonObject
from gateway.tools.call import render
from gateway.tools.call.asks import Asker, AskRefused
from gateway.tools.call.connection import McpConnection
from gateway.tools.call.errors import ConnectionFailed, ServerError

PROGRESS_TOKEN: Final = "mcp-stdio-gateway-call"  # as command.py's: polls carry no progress


class TaskFollower:
    """Polls a task (``tasks/get``) to its end: its ``statusMessage`` on the bar, its questions
    asked and answered with ``tasks/update``, a dropped connection retried (the task lives on at
    the gateway), and an interrupt sent on as ``tasks/cancel``."""

    def __init__(self, connection: McpConnection, asker: Asker, err: Console, screen: render.Screen, name: str) -> None:
        self.connection = connection
        self.asker = asker
        self.err = err
        self.screen = screen
        self.name = name
        self.answered: set[str] = set()  # inputRequests keys answered (a later poll may still show them)

    async def follow(self, created: JsonObject) -> JsonObject:
        task_id = str(created["taskId"])
        interval = _poll_seconds(created)
        try:
            with render.ProgressView(self.err, self.name, PROGRESS_TOKEN, self.screen) as view:
                view.on_status(f"task {task_id[:16]}… {created.get('status', tasks.WORKING)}")
                while True:
                    task = await self._get(task_id, view)
                    status = task.get("status")
                    if isinstance(task.get("statusMessage"), str):
                        view.on_status(task["statusMessage"])
                    if status == tasks.COMPLETED and isinstance(task.get("result"), dict):
                        result: JsonObject = task["result"]
                        return result
                    if status == tasks.FAILED:
                        error = task.get("error")
                        raise ServerError(render.error_text(ErrorReply(None, error if isinstance(error, dict) else {})))
                    if status == tasks.CANCELLED:
                        raise ServerError(f"the task {task_id} was cancelled")
                    if status == tasks.INPUT_REQUIRED:
                        with self.screen.paused():
                            await self._answer(task_id, task.get("inputRequests"))
                        continue
                    interval = _poll_seconds(task, interval)
                    await anyio.sleep(interval)
        except (anyio.get_cancelled_exc_class(), KeyboardInterrupt):
            with anyio.CancelScope(shield=True), anyio.move_on_after(TASK_CANCEL_SECONDS):
                await self.connection.request(tasks.CANCEL, {"taskId": task_id})
            raise

    async def _get(self, task_id: str, view: render.ProgressView) -> JsonObject:
        """``tasks/get``, retried while the gateway cannot be reached (within ``TASK_RECONNECTS``)."""
        for attempt in range(TASK_RECONNECTS + 1):
            try:
                reply = await self.connection.request(tasks.GET, {"taskId": task_id})
            except ConnectionFailed as exc:
                if attempt == TASK_RECONNECTS:
                    raise ConnectionFailed(f"{exc}; the task {task_id} may still be running at the gateway") from exc
                view.on_status(f"connection lost; polling again (attempt {attempt + 1} of {TASK_RECONNECTS})")
                await anyio.sleep(min(TASK_RECONNECT_MAX_SECONDS, 2**attempt))
                continue
            if isinstance(reply, ErrorReply):
                raise ServerError(render.error_text(reply))
            return reply.result
        raise AssertionError("unreachable")  # pragma: no cover

    async def _answer(self, task_id: str, requests: object) -> None:
        wanted = {k: v for k, v in requests.items() if k not in self.answered} if isinstance(requests, dict) else {}
        if not wanted:
            return
        try:
            responses = await self.asker.answer_all(wanted)
        except AskRefused as exc:
            await self.connection.request(tasks.CANCEL, {"taskId": task_id})
            raise ServerError(f"{self.name} needs input that call cannot give: {exc.message}") from exc
        reply = await self.connection.request(tasks.UPDATE, {"taskId": task_id, "inputResponses": responses})
        if isinstance(reply, ErrorReply):
            raise ServerError(render.error_text(reply))
        self.answered.update(wanted)


TASK_RECONNECTS: Final = 8
"""Polls in a row that may fail to reach the gateway before ``call`` gives up on a task."""
TASK_RECONNECT_MAX_SECONDS: Final = 10.0
TASK_CANCEL_SECONDS: Final = 5.0
"""How long an interrupted ``call`` waits for its ``tasks/cancel`` to be sent."""


def _poll_seconds(task: JsonObject, default: float = 1.0) -> float:
    """The task's ``pollIntervalMs`` (bounded to 0.05–30 s), else ``default``."""
    interval = task.get("pollIntervalMs")
    if isinstance(interval, int) and not isinstance(interval, bool) and interval > 0:
        return min(30.0, max(0.05, interval / 1000))
    return default
