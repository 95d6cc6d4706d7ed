"""A stream under its answer machine (``gateway.http.longstream``): how each end reaches the wire,
with a fake ASGI peer and the connection's ``Hangup`` and the ``Drain`` pushed by hand."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from starlette.types import Message, Scope

from gateway.http.connection import HANGUP, Hangup
from gateway.http.drain import DRAIN, Drain
from gateway.http.longstream import LongStream
from gateway.http.sse import SSE_HEADERS, SseWriter, frame
from gateway.protocol.answer import Kind
from gateway.protocol.jsonrpc import JsonObject

pytestmark = pytest.mark.anyio

WAIT = 5.0  # the bound of every wait
GRACEFUL: JsonObject = {"jsonrpc": "2.0", "id": 7, "result": {}}
HELLO: JsonObject = {"jsonrpc": "2.0", "method": "hello"}


class Peer:
    """Records what is sent; ``opened`` is set once the opening event went out."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.opened = anyio.Event()

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message.get("body") == frame(HELLO):
            self.opened.set()

    async def receive(self) -> Message:
        await anyio.sleep_forever()
        raise AssertionError  # pragma: no cover

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


def scope() -> Scope:
    return {"type": "http", HANGUP: Hangup(), DRAIN: Drain()}


async def opening(writer: SseWriter) -> None:
    await writer.start(list(SSE_HEADERS))
    await writer.write_message(HELLO)


async def forever(writer: SseWriter) -> None:
    await anyio.sleep_forever()


async def run(kind: Kind, act: Any = None, *, lifetime: float | None = None, source: Any = forever) -> Peer:
    """Run a stream of ``kind``; ``act(scope)`` once it is open. What the peer got."""
    peer, where = Peer(), scope()
    stream = LongStream(kind, where, peer.receive, peer.send, graceful_end=GRACEFUL)
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: stream.run(opening, source, lifetime=lifetime))
            await peer.opened.wait()
            if act is not None:
                act(where)
    assert stream.is_over()
    return peer


def drain_begins(where: Scope) -> None:
    where[DRAIN].ending.set()


def budget_spent(where: Scope) -> None:
    drain: Drain = where[DRAIN]
    drain.cancel.set()  # the budget, without the drain's start (which cancel_rest also sets)
    for told in list(drain.scopes):
        told.cancel()


def client_gone(where: Scope) -> None:
    where[HANGUP].lost()


@pytest.mark.parametrize(
    ("kind", "act", "ending"),
    [
        (Kind.EMULATED_LISTEN, drain_begins, [frame(GRACEFUL), b""]),
        (Kind.TASK_LISTEN, drain_begins, [frame(GRACEFUL), b""]),
        (Kind.GET_STREAM, drain_begins, [b""]),
        (Kind.EMULATED_LISTEN, budget_spent, [b""]),
        (Kind.RESUMED, budget_spent, [b""]),
        (Kind.EMULATED_LISTEN, client_gone, []),
        (Kind.GET_STREAM, client_gone, []),
    ],
    ids=lambda value: getattr(value, "__name__", str(value)),
)
async def test_an_end_from_outside_is_written_as_the_kind_says(kind: Kind, act: Any, ending: list[bytes]) -> None:
    peer = await run(kind, act)
    assert peer.sent[0]["type"] == "http.response.start"
    assert peer.bodies() == [frame(HELLO), *ending]


@pytest.mark.parametrize(
    ("kind", "ending"),
    [
        (Kind.EMULATED_LISTEN, [frame(GRACEFUL), b""]),
        (Kind.TASK_LISTEN, [b""]),
        (Kind.GET_STREAM, [b""]),
    ],
)
async def test_the_lifetime_ends_a_stream_as_its_kind_says(kind: Kind, ending: list[bytes]) -> None:
    peer = await run(kind, lifetime=0)
    assert peer.bodies() == [frame(HELLO), *ending]


async def test_a_resumed_stream_runs_on_through_the_drain_start() -> None:
    started = anyio.Event()

    async def source(writer: SseWriter) -> None:
        await started.wait()  # set by the drain's start: the stream is still running then

    def begin_then_let_go(where: Scope) -> None:
        drain_begins(where)
        started.set()

    peer = await run(Kind.RESUMED, begin_then_let_go, source=source)
    assert peer.bodies() == [frame(HELLO), b""]  # ended by its source, not the drain


async def test_a_source_that_ends_ends_the_stream_without_the_graceful_result() -> None:
    async def dropped(writer: SseWriter) -> None:
        return None  # a listen the relay dropped: the client reconnects and lists again

    peer = await run(Kind.EMULATED_LISTEN, source=dropped)
    assert peer.bodies() == [frame(HELLO), b""]
