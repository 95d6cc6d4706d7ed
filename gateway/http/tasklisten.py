"""The gateway's own ``subscriptions/listen`` for task status (``gateway.protocol.tasks`` rule 8).

A modern client that asks a listen for ``notifications.taskIds`` and nothing else gets this
stream: ``200 text/event-stream`` at once, the acknowledgement naming the task ids the gateway
holds for that client, then a ``notifications/tasks`` with the task's ``DetailedTask`` (what
``tasks/get`` would answer at that moment) each time one of them changes, tagged with the
listen's ``subscriptionId``; a ``: keep-alive`` comment every ``KEEPALIVE_SECONDS`` while quiet.
It ends when the client leaves, after ``max_seconds`` (the client reconnects, as for any
listen), or with the graceful result when the gateway drains: its answer machine decides which
(``gateway.protocol.answer``, kind ``TASK_LISTEN``; ``gateway.http.longstream``). At most
``TASK_LISTEN_BUFFER`` changes wait for a slow reader; past that the newest are dropped (the next
change, and ``tasks/get``, still tell the current state).
"""

from __future__ import annotations

from typing import Final

import anyio
from starlette.types import Receive, Scope, Send

from gateway.http import sse
from gateway.http.longstream import LongStream
from gateway.http.sse import KEEPALIVE_SECONDS, SSE_HEADERS, SseWriter
from gateway.protocol import subscriptions
from gateway.protocol import tasks as rules
from gateway.protocol.answer import Kind
from gateway.protocol.jsonrpc import JsonId
from gateway.protocol.tasks import Task
from gateway.relay.client import ClientContext
from gateway.relay.tasks import TaskStore

TASK_LISTEN_BUFFER: Final = 64
"""Task changes queued for one slow listener."""


class TaskListenStream:
    def __init__(
        self, store: TaskStore, listen_id: JsonId, task_ids: list[str], client: ClientContext, *, max_seconds: float
    ) -> None:
        self.store = store
        self.listen_id = listen_id
        self.task_ids = task_ids
        self.client = client
        self.max_seconds = max_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        changes_in, changes = anyio.create_memory_object_stream[Task](TASK_LISTEN_BUFFER)
        agreed = self.store.watch(self.task_ids, self.client, changes_in)
        graceful = subscriptions.graceful_end(self.listen_id)
        stream = LongStream(Kind.TASK_LISTEN, scope, receive, send, graceful_end=graceful)

        def frame(task: Task) -> bytes | None:
            return sse.json_frame(
                subscriptions.tagged(rules.STATUS_NOTIFICATION, rules.status_params(task), self.listen_id)
            )

        async def opening(writer: SseWriter) -> None:
            await writer.start(list(SSE_HEADERS))
            await writer.write_message(subscriptions.acknowledged(self.listen_id, {"taskIds": agreed}))
            for task_id in agreed:  # where each one is now, so no change before the listen is missed
                task = self.store.snapshot(task_id)
                if task is not None and (data := frame(task)) is not None:
                    await writer.write([data])

        async def relay(writer: SseWriter) -> None:
            await sse.pump(writer, changes.receive, sse.ready_from(changes), frame, keepalive=KEEPALIVE_SECONDS)

        try:
            with changes_in, changes:
                await stream.run(opening, relay, lifetime=self.max_seconds)
        finally:
            self.store.unwatch(agreed, changes_in)
