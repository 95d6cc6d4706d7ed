"""Emulated ``subscriptions/listen`` for modern clients in front of a legacy child.

A legacy child has no listen; it sends ``list_changed`` unsolicited to whoever holds its
stdio. ``Listens`` keeps the open listen streams; ``McpEndpoint.on_child_notification``
offers every unsolicited notification of a pool to the listens of that pool, and each
takes only the types it was granted, tagged with its own ``subscriptionId``
(``gateway.protocol.subscriptions``).

``resourceSubscriptions`` (when the child advertises ``resources.subscribe``): before the
acknowledgement, ``resources/subscribe`` goes to the child that answered the listen for
each URI that no other listener on that child holds (``SubscriptionCounts``); the
acknowledgement lists the URIs the child accepted. When the stream ends, each URI is
released, and ``resources/unsubscribe`` goes to the child when none holds it any more.

``ListenStream`` is the ASGI response, written by ``gateway.http.sse``: ``200
text/event-stream`` at once, the acknowledgement first, then the notifications (those queued
together in one send), a ``: keep-alive`` comment every ``KEEPALIVE_SECONDS`` while quiet.
It ends when:

- the client closes the stream (nothing to tell the child: the listen is the gateway's);
- the gateway drains (shutdown): the graceful result, response id = the listen id;
- a child of the pool crashes or the pool closes, or the child holding the listen's
  resource subscriptions exits for any reason: the stream ends *without* the graceful
  result, an unexpected drop, so the client reconnects and lists again (the restarted
  child's lists may differ, and it would not say so; its subscriptions are gone).
"""

from __future__ import annotations

import logging
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from starlette.types import Receive, Scope, Send

from gateway.errors import ChildError
from gateway.http import sse
from gateway.http.sse import KEEPALIVE_SECONDS, SSE_HEADERS, SseWriter, Watch
from gateway.protocol import subscriptions
from gateway.protocol.jsonrpc import JsonId, JsonObject, Notification, Result
from gateway.stdio.child import StdioChild
from gateway.stdio.pool import Pool

log = logging.getLogger("gateway.http")

LISTEN_BUFFER: Final = 64
"""Notifications queued for a slow listener; past that, more are dropped (a ``list_changed``
already queued makes the client list again anyway)."""


@dataclass(eq=False)
class Listen:
    id: JsonId
    pool: Pool
    granted: JsonObject
    child: StdioChild | None = None  # where resource subscriptions are made
    wanted_uris: list[str] = field(default_factory=list)  # requested, to subscribe at the child
    uris: list[str] = field(default_factory=list)  # subscribed: resources/updated for these comes
    methods: frozenset[str] = field(init=False)
    _send: MemoryObjectSendStream[JsonObject] = field(init=False)
    receive: MemoryObjectReceiveStream[JsonObject] = field(init=False)

    def __post_init__(self) -> None:
        self.methods = subscriptions.wanted_methods(self.granted)
        self._send, self.receive = anyio.create_memory_object_stream[JsonObject](LISTEN_BUFFER)

    def offer(self, notification: Notification) -> None:
        if notification.method == subscriptions.RESOURCES_UPDATED:
            if not subscriptions.covers(self.uris, (notification.params or {}).get("uri")):
                return
        elif notification.method not in self.methods:
            return
        try:
            self._send.send_nowait(subscriptions.tagged(notification.method, notification.params, self.id))
        except anyio.WouldBlock:
            log.debug("listen %r: slow reader, dropped %s", self.id, notification.method)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    def drop(self) -> None:
        """End the stream without the graceful result (the client should reconnect)."""
        self._send.close()


class SubscriptionCounts:
    """``resources/subscribe`` at a child once per URI, however many listeners hold it;
    ``resources/unsubscribe`` when the last lets go. Serialised: the calls are quick."""

    def __init__(self) -> None:
        self._counts: dict[tuple[StdioChild, str], int] = {}
        self._lock = anyio.Lock()

    async def acquire(self, child: StdioChild, uri: str) -> bool:
        """True if the child is subscribed to ``uri`` for this holder (it refused, or died: False)."""
        async with self._lock:
            key = (child, uri)
            if self._counts.get(key, 0) > 0:
                self._counts[key] += 1
                return True
            try:
                reply = await child.request("resources/subscribe", {"uri": uri})
            except ChildError:
                return False
            if not isinstance(reply, Result):
                log.info("child %s refused resources/subscribe for %r: %s", child.spec.label, uri, reply.to_dict())
                return False
            self._counts[key] = 1
            return True

    async def release(self, child: StdioChild, uri: str) -> None:
        async with self._lock:
            key = (child, uri)
            count = self._counts.get(key, 0) - 1
            if count > 0:
                self._counts[key] = count
                return
            self._counts.pop(key, None)
            if child.is_alive():
                with suppress(ChildError):
                    await child.request("resources/unsubscribe", {"uri": uri})


class Listens:
    def __init__(self) -> None:
        self.open: set[Listen] = set()
        self.counts = SubscriptionCounts()

    def offer(self, pool: Pool, notification: Notification) -> None:
        for listen in list(self.open):
            if listen.pool is pool:
                listen.offer(notification)

    def on_pool_loss(self, pool: Pool) -> None:
        for listen in list(self.open):
            if listen.pool is pool:
                log.info("listen %r ended: a child of its pool exited; the client should reconnect", listen.id)
                listen.drop()


class ListenStream:
    def __init__(self, listen: Listen, listens: Listens) -> None:
        self.listen = listen
        self.listens = listens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        listen = self.listen
        self.listens.open.add(listen)
        try:
            if listen.child is not None and listen.wanted_uris:
                for uri in listen.wanted_uris:
                    if await self.listens.counts.acquire(listen.child, uri):
                        listen.uris.append(uri)
                if listen.uris:
                    listen.granted[subscriptions.RESOURCE_SUBSCRIPTIONS] = list(listen.uris)
            writer = SseWriter(send)
            watch = Watch(scope, receive, end_on_drain=True)
            await writer.start(list(SSE_HEADERS))
            await writer.write_message(subscriptions.acknowledged(listen.id, listen.granted))

            async def relay() -> None:
                notes = listen.receive
                ready = sse.ready_from(notes)
                await sse.pump(writer, notes.receive, ready, sse.json_frame, keepalive=KEEPALIVE_SECONDS)

            async def watch_child() -> None:
                # Its subscriptions die with it (even a planned retirement): end so the client reconnects.
                assert listen.child is not None
                await listen.child.wait_exited()
                listen.drop()

            if listen.child is not None and listen.uris:
                await watch.run(relay, watch_child)
            else:
                await watch.run(relay)
            if watch.drained:
                await writer.write_message(subscriptions.graceful_end(listen.id))
            await writer.end()
        except OSError:  # pragma: no cover - the client's socket went away mid-write
            pass
        finally:
            self.listens.open.discard(listen)
            listen.drop()
            listen.receive.close()
            if listen.child is not None:
                with anyio.CancelScope(shield=True):
                    for uri in listen.uris:
                        await self.listens.counts.release(listen.child, uri)
