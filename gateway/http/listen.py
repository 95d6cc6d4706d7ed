"""The HTTP stream of an emulated ``subscriptions/listen`` (``gateway.relay.listens``).

``ListenStream`` is the ASGI response, written by ``gateway.http.sse``: ``200
text/event-stream`` at once, the acknowledgement first (after the listen's resource
subscriptions are made at the child, ``Listens.subscribe``), then the notifications (those
queued together in one send), a ``: keep-alive`` comment every ``KEEPALIVE_SECONDS`` while
quiet. It ends when:

- the client closes the stream (nothing to tell the child: the listen is the gateway's);
- its lifetime (``--max-stream-seconds``) is over: the graceful result, as at a drain, so the
  client listens again (a listen that lives forever would pin a connection and memory per
  forgotten client; it also counts as one of its client's open streams, ``gateway.http.limits``);
- the gateway drains (shutdown): the graceful result, response id = the listen id;
- the relay drops the listen (a child of the pool crashed or the pool closed, or the child
  holding the listen's resource subscriptions exited): the stream ends *without* the
  graceful result, an unexpected drop, so the client reconnects and lists again.

Which of these ends it, and whether the graceful result is sent, is its answer machine's to
decide (``gateway.protocol.answer``, kind ``EMULATED_LISTEN``; carried out by
``gateway.http.longstream``). Its resource subscriptions are released when it ends
(``Listens.release``).
"""

from __future__ import annotations

from starlette.types import Receive, Scope, Send

from gateway.http import sse
from gateway.http.longstream import LongStream
from gateway.http.sse import KEEPALIVE_SECONDS, SSE_HEADERS, SseWriter
from gateway.protocol import subscriptions
from gateway.protocol.answer import Kind
from gateway.relay.listens import Listen, Listens


class ListenStream:
    def __init__(self, listen: Listen, listens: Listens, *, max_seconds: float | None = None) -> None:
        self.listen = listen
        self.listens = listens
        self.max_seconds = max_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        listen = self.listen
        self.listens.open.add(listen)
        try:
            await self.listens.subscribe(listen)
            graceful = subscriptions.graceful_end(listen.id)
            stream = LongStream(Kind.EMULATED_LISTEN, scope, receive, send, graceful_end=graceful)

            async def opening(writer: SseWriter) -> None:
                await writer.start(list(SSE_HEADERS))
                await writer.write_message(subscriptions.acknowledged(listen.id, listen.granted))

            async def relay(writer: SseWriter) -> None:
                notes = listen.receive
                ready = sse.ready_from(notes)
                await sse.pump(writer, notes.receive, ready, sse.json_frame, keepalive=KEEPALIVE_SECONDS)

            # Its resource subscriptions die with their child: that drops the listen.
            also = (listen.watch_child,) if listen.holds_subscriptions else ()
            await stream.run(opening, relay, *also, lifetime=self.max_seconds)
        finally:
            self.listens.open.discard(listen)
            listen.drop()
            listen.receive.close()
            await self.listens.release(listen)
