"""A request's answer (``gateway.http.stream.LazyStream``) ended from outside, as its machine
(``gateway.protocol.answer``) decides: the spent drain budget, a listen's drain and lifetime,
a POSTed cancel, the session's cancel. Driven with test_sse's fake ASGI peer and exchange."""

from __future__ import annotations

import gc
import weakref

import anyio
import orjson
import pytest

from gateway.http.connection import HANGUP, Hangup
from gateway.http.drain import CUT_BY_DRAIN, DRAIN, Drain
from gateway.http.sse import frame
from gateway.http.stream import LazyStream
from gateway.protocol.jsonrpc import JsonObject
from gateway.relay import events
from tests.unit.test_sse import Client, Exchange, answer, final, lean_scope, legacy_call, note

pytestmark = pytest.mark.anyio

GRACEFUL: JsonObject = {"jsonrpc": "2.0", "id": 1, "result": {}}


def drain_scope(drain: Drain) -> dict[str, object]:
    return {"type": "http", HANGUP: Hangup(), DRAIN: drain}


def error_code(body: bytes) -> int:
    code = orjson.loads(body.removeprefix(b"data: ").strip())["error"]["code"]
    assert isinstance(code, int)
    return code


async def test_the_spent_drain_budget_answers_a_running_call_with_200_never_a_retryable_503() -> None:
    # The call was admitted and may be at its child: a 503 would make a proxy run it again
    # elsewhere (proxy_next_upstream http_503), so its error goes out as a child's would.
    client, drain, exchange = Client(), Drain(), Exchange()
    scope = drain_scope(drain)
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, LazyStream(exchange, request_id=1), scope, client)
        await anyio.wait_all_tasks_blocked()
        drain.cancel_rest()
    assert client.sent[0]["status"] == 200
    assert not any(name == b"retry-after" for name, _ in client.sent[0]["headers"])
    assert (b"content-type", b"application/json") in client.sent[0]["headers"]
    assert error_code(client.bodies()[0]) == -31004
    message = orjson.loads(client.bodies()[0])["error"]["message"]
    assert message == CUT_BY_DRAIN
    assert "retry" not in message
    assert exchange.closed.is_set()
    assert scope["gateway.log"]["code"] == -31004


async def test_the_spent_drain_budget_ends_an_open_stream_with_its_error_last() -> None:
    client, drain = Client(), Drain()
    exchange = Exchange(events.Notification(note(1)))
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, LazyStream(exchange, request_id=1), drain_scope(drain), client)
        await client.wait_for(2)
        drain.cancel_rest()
    bodies = client.bodies()
    assert bodies[0] == frame(note(1))
    assert error_code(bodies[1]) == -31004
    assert bodies[2:] == [b""]
    assert exchange.closed.is_set()


async def test_a_drain_ends_a_listen_s_open_stream_with_its_graceful_result() -> None:
    client, drain = Client(), Drain()
    exchange = Exchange(events.Notification(note(1)))
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, LazyStream(exchange, request_id=1, graceful_end=GRACEFUL), drain_scope(drain), client)
        await client.wait_for(2)
        drain.ending.set()
    assert client.bodies() == [frame(note(1)), frame(GRACEFUL), b""]
    assert exchange.closed.is_set()


async def test_a_drain_abandons_a_listen_not_answered_yet() -> None:
    client, drain, exchange = Client(), Drain(), Exchange()
    scope = drain_scope(drain)
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, LazyStream(exchange, request_id=1, graceful_end=GRACEFUL), scope, client)
        await anyio.wait_all_tasks_blocked()
        drain.ending.set()
    assert client.sent == []
    assert scope["gateway.log"]["outcome"] == "cancelled"
    assert exchange.closed.is_set()


async def test_a_listen_s_lifetime_ends_it_with_its_graceful_result_even_before_any_event() -> None:
    client = Client()
    stream = LazyStream(Exchange(), request_id=1, graceful_end=GRACEFUL, max_seconds=0)
    await answer(stream, lean_scope(), client)
    assert (b"content-type", b"text/event-stream") in client.sent[0]["headers"]
    assert client.bodies() == [frame(GRACEFUL), b""]


async def test_a_posted_cancel_ends_an_open_stream_without_its_final() -> None:
    client = Client()
    scope = lean_scope()
    exchange = Exchange(events.Notification(note(1)))
    stream = LazyStream(exchange, request_id=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, stream, scope, client)
        await client.wait_for(2)
        stream.cancel()
        exchange.add(events.Final(final()))  # too late: not sent
    assert client.bodies() == [frame(note(1)), b""]
    assert scope["gateway.log"]["outcome"] == "cancelled"
    assert exchange.closed.is_set()


async def test_a_cancel_before_the_answer_began_is_an_empty_stream_and_reads_nothing() -> None:
    client = Client()
    exchange = Exchange(events.Final(final()))
    stream = LazyStream(exchange, request_id=1)
    stream.cancel()  # InFlight found it before its task ran
    await answer(stream, lean_scope(), client)
    assert client.bodies() == [b""]
    assert exchange.queued == [events.Final(final())]  # never read
    assert exchange.closed.is_set()


async def test_a_session_s_cancel_with_a_reply_ends_an_open_stream_with_it() -> None:
    client = Client()
    scope = lean_scope()
    exchange = Exchange(events.Progress(note(1)))
    call = legacy_call([])
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, LazyStream(exchange, request_id=1, legacy=call), scope, client)
        await client.wait_for(2)
        call.handle.cancel(reply=True)  # DELETE, expiry
    assert client.bodies() == [frame(note(1)), frame(final(-32800)), b""]
    assert scope["gateway.log"]["code"] == -32800
    assert exchange.closed.is_set()


async def test_a_legacy_call_cancelled_before_it_began_is_answered_without_reading_it() -> None:
    client = Client()
    exchange = Exchange(events.Final(final()))
    call = legacy_call([])
    call.handle.cancel(reply=False)  # the client's notifications/cancelled came first
    await answer(LazyStream(exchange, request_id=1, legacy=call), lean_scope(), client)
    assert client.bodies() == [b""]
    assert exchange.queued == [events.Final(final())]


@pytest.mark.parametrize("kind", ["json", "sse", "legacy", "cancelled"])
async def test_an_answer_leaves_no_cycle_to_the_garbage_collector(kind: str) -> None:
    """What tells the machine (the watch, the session's handle, the writer) refers back to the
    answer: once it is over it is freed at once, not by a collection (which costs every call)."""
    client = Client()
    first = events.Notification(note(1)) if kind == "sse" else events.Final(final())
    exchange = Exchange(first, events.Final(final()))
    legacy = legacy_call([]) if kind == "legacy" else None
    stream = LazyStream(exchange, request_id=1, legacy=legacy)
    if kind == "cancelled":
        stream.cancel()
    gone = weakref.ref(stream)
    gc.disable()
    try:
        await answer(stream, lean_scope(), client)
        del stream
        assert gone() is None
    finally:
        gc.enable()
