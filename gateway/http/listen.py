"""The HTTP stream of an emulated ``subscriptions/listen`` (``gateway.relay.listens``).

``ListenStream`` is the ASGI response: ``200 text/event-stream`` at once, the
acknowledgement first (after the listen's resource subscriptions are made at the child,
``Listens.subscribe``), then the notifications, a ``: keep-alive`` comment every
``KEEPALIVE_SECONDS`` while quiet. It ends when:

- the client closes the stream (nothing to tell the child: the listen is the gateway's);
- the gateway drains (shutdown): the graceful result, response id = the listen id;
- the relay drops the listen (a child of the pool crashed or the pool closed, or the child
  holding the listen's resource subscriptions exited): the stream ends *without* the
  graceful result, an unexpected drop, so the client reconnects and lists again.

Its resource subscriptions are released when it ends (``Listens.release``).
"""

from __future__ import annotations

import anyio
import orjson
from sse_starlette.event import ServerSentEvent
from starlette.types import Receive, Scope, Send

from gateway.http.drain import Drain
from gateway.http.stream import KEEPALIVE_SECONDS, SSE_HEADERS
from gateway.protocol import subscriptions
from gateway.protocol.jsonrpc import JsonObject
from gateway.relay.listens import Listen, Listens


class ListenStream:
    def __init__(self, listen: Listen, listens: Listens) -> None:
        self.listen = listen
        self.listens = listens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        drain: Drain | None = scope.get("gateway.drain")
        listen = self.listen
        self.listens.open.add(listen)
        graceful = False
        try:
            await self.listens.subscribe(listen)
            await send({"type": "http.response.start", "status": 200, "headers": list(SSE_HEADERS)})
            await _event(send, subscriptions.acknowledged(listen.id, listen.granted))
            async with anyio.create_task_group() as tg:

                async def watch_disconnect() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                async def watch_drain() -> None:
                    assert drain is not None
                    await drain.ending.wait()
                    nonlocal graceful
                    graceful = True
                    tg.cancel_scope.cancel()

                tg.start_soon(watch_disconnect)
                if drain is not None:
                    tg.start_soon(watch_drain)
                if listen.holds_subscriptions:
                    tg.start_soon(listen.watch_child)  # they die with its child: that drops the listen
                await self._relay(send)
                tg.cancel_scope.cancel()
            if graceful:
                await _event(send, subscriptions.graceful_end(listen.id))
            await send({"type": "http.response.body", "body": b""})
        except OSError:  # pragma: no cover - the client's socket went away mid-write
            pass
        finally:
            self.listens.open.discard(listen)
            listen.drop()
            listen.receive.close()
            await self.listens.release(listen)

    async def _relay(self, send: Send) -> None:
        while True:
            with anyio.move_on_after(KEEPALIVE_SECONDS) as idle:
                try:
                    message = await self.listen.receive.receive()
                except anyio.EndOfStream:
                    return
            if idle.cancelled_caught:
                await send({"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True})
                continue
            await _event(send, message)


async def _event(send: Send, message: JsonObject) -> None:
    data = ServerSentEvent(data=orjson.dumps(message).decode()).encode()
    await send({"type": "http.response.body", "body": data, "more_body": True})
