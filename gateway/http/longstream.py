"""A response that is an event stream from its first byte, its end decided by its answer machine.

An emulated listen (``gateway.http.listen``), the gateway's listen for task status
(``gateway.http.tasklisten``), a legacy session's GET stream and a resume of a request's stream
(``gateway.http.resume``) each run one ``LongStream`` of their kind (``answer.STREAMS``).
``run(opening, source)``:

1. steps ``first_note`` (the machine's ``stream``) and writes ``opening`` (the headers and the
   first frames: an acknowledgement, a priming event) before anything from outside is watched,
   so the response has begun whatever ends it;
2. runs ``source`` (the stream's events until its source ends) under the ``Watch``
   (``gateway.http.sse``), within the stream's lifetime: the source's end is ``exhausted``,
   the lifetime's ``deadline`` (the stream's own events: their actions are done at once), a
   failed write (``OSError``: the socket went away) is ``client_gone``;
3. what the watch tells the machine from outside (the client left, the drain started, its
   budget was spent) is stepped where it happens: a leading ``stop`` cancels the watch's
   scope at once, the rest waits until the body is over and is then done, shielded.

Nothing here keeps a flag about the stream's end: the machine's state is the one record, and
``is_over()`` reads it (``gateway.http.resume.deliver`` writes nothing once it is).

Imports: ``gateway.protocol.answer``, ``gateway.http.sse``, anyio, starlette's types.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
from starlette.types import Receive, Scope, Send

from gateway.http.sse import SseWriter, Watch
from gateway.protocol.answer import STREAMS, Action, Actions, Answer, Event, Kind
from gateway.protocol.jsonrpc import JsonObject


class LongStream:
    """One streamed response of a kind in ``answer.STREAMS`` (see the module docstring)."""

    __slots__ = ("_closing", "_graceful_end", "_machine", "watch", "writer")

    def __init__(
        self, kind: Kind, scope: Scope, receive: Receive, send: Send, *, graceful_end: JsonObject | None = None
    ) -> None:
        assert kind in STREAMS, kind
        self._machine = Answer(kind)
        self._graceful_end = graceful_end  # a listen's graceful result (its kind says when it is sent)
        self._closing: Actions = ()  # actions of events from outside, done once the body is over
        self.writer = SseWriter(send)
        self.watch = Watch(scope, receive, kind, self._feed)

    def is_over(self) -> bool:
        """Whether the stream's end is decided (nothing more of its source is written)."""
        return not self._machine.is_live

    async def run(
        self,
        opening: Callable[[SseWriter], Awaitable[None]],
        source: Callable[[SseWriter], Awaitable[None]],
        *also: Callable[[], Coroutine[Any, Any, None]],
        lifetime: float | None = None,
    ) -> None:
        """Open the stream, run ``source`` (``also`` beside it) until the machine decides its
        end, and carry out that end."""
        machine, writer = self._machine, self.writer
        actions = machine.step(Event.FIRST_NOTE)
        assert actions == (Action.STREAM,), actions

        async def body() -> None:
            try:
                with anyio.move_on_after(math.inf if lifetime is None else lifetime) as timer:
                    await source(writer)
                await self._do(machine.step(Event.DEADLINE if timer.cancelled_caught else Event.EXHAUSTED))
            except OSError:  # pragma: no cover - a server that raises on a lost client's socket
                self._feed(Event.CLIENT_GONE)

        try:
            await opening(writer)
        except OSError:  # pragma: no cover - as above
            self._feed(Event.CLIENT_GONE)
        else:
            await self.watch.run(body, *also)
        with anyio.CancelScope(shield=True):
            closing, self._closing = self._closing, ()
            if machine.is_live:  # the body returned and told the machine nothing (never, today)
                closing += machine.step(Event.STOPPED)
            await self._do(closing)

    def _feed(self, event: Event) -> None:
        """What happened from outside (the watch): a leading ``stop`` now, the rest after the body."""
        actions = self._machine.step(event)
        if actions and actions[0] is Action.STOP:
            self.watch.stop()
            actions = actions[1:]
        if actions:
            self._closing += actions

    async def _do(self, actions: Actions) -> None:
        writer = self.writer
        for action in actions:
            if action is Action.WRITE_GRACEFUL:
                assert self._graceful_end is not None
                await writer.write_message(self._graceful_end)
            elif action is Action.END_SSE:
                await writer.end()
            else:  # pragma: no cover - a stream's machine gives no other action after its opening
                raise AssertionError(action)
