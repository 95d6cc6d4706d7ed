"""A request's answer over ``Relay.begin``'s opening (``gateway.http.stream.LazyStream``):
the common shape (``Answered``) leaves its holdings, the lease and the child exchange, once
the client has its answer, and exactly once however the answer ends; an opening that is
never awaited is closed. Driven with test_sse's fake ASGI peer and exchange."""

from __future__ import annotations

import warnings
from typing import cast

import anyio
import orjson
import pytest
from starlette.types import Message

from gateway.http.sse import frame
from gateway.http.stream import LazyStream
from gateway.relay import events
from gateway.relay.exchange import Answered, Begun
from gateway.relay.turn import Leased
from tests.unit.test_sse import Client, Exchange, answer, final, lean_scope, note

pytestmark = pytest.mark.anyio


class Stack:
    """What ``Answered`` leaves: records when, against what the client was sent."""

    def __init__(self, client: Client, order: list[str]) -> None:
        self.client = client
        self.order = order

    def close(self) -> None:  # ``Holdings.close``: leaving never waits
        self.order.append(f"left after {len(self.client.sent)} sent")


class On:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.child_span = None


def answered(client: Client, order: list[str]) -> Answered:
    return Answered(events.Final(final()), cast(Leased, On(Stack(client, order))))


async def opening(begun: Begun) -> Begun:
    return begun


async def test_the_common_shape_leaves_its_holdings_after_the_answer_is_sent_once() -> None:
    client, order = Client(), []
    done = answered(client, order)
    await answer(LazyStream(opening(done), request_id=1), lean_scope(), client)
    assert [m["type"] for m in client.sent] == ["http.response.start", "http.response.body"]
    assert orjson.loads(client.sent[1]["body"]) == final()
    assert order == ["left after 2 sent"]  # the child was given back after the client had its answer
    await done.aclose()
    assert order == ["left after 2 sent"]  # once


async def test_the_common_shape_leaves_its_holdings_when_sending_the_answer_fails() -> None:
    client, order = Client(), []

    async def failing(message: Message) -> None:
        raise OSError("the connection broke")

    with pytest.raises(OSError, match="connection broke"), anyio.fail_after(5):
        await LazyStream(opening(answered(client, order)), request_id=1)(lean_scope(), client.receive, failing)
    assert order == ["left after 0 sent"]  # no finalizer would have left them


async def test_a_final_known_without_the_child_is_sent_and_nothing_is_left() -> None:
    client = Client()
    await answer(LazyStream(opening(events.Final(final(-32601))), request_id=1), lean_scope(), client)
    assert orjson.loads(client.sent[1]["body"]) == final(-32601)


async def test_an_opening_that_streams_is_read_and_closed_as_an_exchange() -> None:
    client = Client()
    exchange = Exchange(events.Notification(note(1)), events.Final(final()))
    await answer(LazyStream(opening(exchange), request_id=1), lean_scope(), client)  # type: ignore[arg-type]
    assert (b"content-type", b"text/event-stream") in client.sent[0]["headers"]
    assert exchange.closed.is_set()


async def test_a_json_answer_makes_no_event_stream_writer() -> None:
    client, order = Client(), []
    stream = LazyStream(opening(answered(client, order)), request_id=1)
    await answer(stream, lean_scope(), client)
    assert stream._writer is None  # made only when the answer is an event stream


async def test_an_opening_that_streams_a_batch_first_writes_all_of_it_in_one_send() -> None:
    client = Client()
    batch = events.Batch((events.Progress(note(1)), events.Notification(note(2))))
    exchange = Exchange(batch, events.Final(final()))
    stream = LazyStream(opening(exchange), request_id=1)  # type: ignore[arg-type]
    await answer(stream, lean_scope(), client)
    assert (b"content-type", b"text/event-stream") in client.sent[0]["headers"]
    assert client.bodies() == [frame(note(1)) + frame(note(2)), frame(final()), b""]  # the rest went with it
    assert stream._writer is not None
    assert stream._writer.ended
    assert exchange.closed.is_set()


async def test_an_opening_never_awaited_is_closed_without_a_warning() -> None:
    client, order = Client(), []
    begun = opening(answered(client, order))
    stream = LazyStream(begun, request_id=1)
    stream.cancel()  # InFlight found it before its task ran
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would be one
        await answer(stream, lean_scope(), client)
    assert client.bodies() == [b""]
    assert begun.cr_frame is None  # closed
    assert order == []  # it never ran: it held nothing
