"""The SSE writer (gateway.http.sse) and the request answer on it (gateway.http.stream),
driven with a fake ASGI send/receive: batching, keep-alive, disconnect, drain, JSON vs SSE."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import orjson
import pytest
from starlette.types import Message, Scope

from gateway.http import replies
from gateway.http.connection import HANGUP, Hangup
from gateway.http.drain import DRAIN, Drain
from gateway.http.resume import EventStream
from gateway.http.sse import SseWriter, Watch, frame, id_frame, json_frame, pump, ready_from
from gateway.http.stream import LazyStream, LegacyCall
from gateway.protocol import answer as answer_rules
from gateway.protocol.jsonrpc import JsonObject
from gateway.relay import events
from gateway.relay.sessions import CancelHandle
from gateway.relay.streams import SessionStreams

pytestmark = pytest.mark.anyio

WAIT = 5.0  # the bound of every wait


def note(n: int) -> JsonObject:
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": n}}


def final(error_code: int | None = None) -> JsonObject:
    if error_code is not None:
        return {"jsonrpc": "2.0", "id": 1, "error": {"code": error_code, "message": "no"}}
    return {"jsonrpc": "2.0", "id": 1, "result": {}}


class Client:
    """A fake ASGI peer: records what is sent, and hangs up on ``leave()``."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.changed = anyio.Event()
        self._left = anyio.Event()

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        self.changed.set()
        self.changed = anyio.Event()

    async def receive(self) -> Message:
        await self._left.wait()
        return {"type": "http.disconnect"}

    def leave(self) -> None:
        self._left.set()

    async def wait_for(self, count: int) -> None:
        """Until ``count`` messages were sent."""
        with anyio.fail_after(WAIT):
            while len(self.sent) < count:
                await self.changed.wait()

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


# -- the writer ---------------------------------------------------------------------------------


async def test_events_ready_together_are_written_in_one_send() -> None:
    client = Client()
    writer = SseWriter(client.send)
    send, receive = anyio.create_memory_object_stream[JsonObject](8)
    for n in range(3):
        send.send_nowait(note(n))
    send.close()
    with receive, anyio.fail_after(WAIT):
        assert await pump(writer, receive.receive, ready_from(receive), json_frame) is None
    assert client.bodies() == [frame(note(0)) + frame(note(1)) + frame(note(2))]


async def test_without_ready_each_event_is_its_own_send() -> None:
    client = Client()
    send, receive = anyio.create_memory_object_stream[JsonObject](8)
    for n in range(2):
        send.send_nowait(note(n))
    send.close()
    with receive, anyio.fail_after(WAIT):
        await pump(SseWriter(client.send), receive.receive, None, json_frame)
    assert client.bodies() == [frame(note(0)), frame(note(1))]


async def test_a_batch_stops_at_the_last_event() -> None:
    client = Client()
    queued: list[str] = ["a", "b", "end", "after"]

    async def next_event() -> str:
        return queued.pop(0)

    def ready() -> list[str]:
        taken = list(queued)
        queued.clear()
        return taken

    with anyio.fail_after(WAIT):
        last = await pump(SseWriter(client.send), next_event, ready, str.encode, lambda e: e == "end")
    assert last == "end"
    assert client.bodies() == [b"abend"]


async def test_a_quiet_stream_gets_keep_alive_comments() -> None:
    client = Client()
    send, receive = anyio.create_memory_object_stream[JsonObject](8)
    async with receive, anyio.create_task_group() as tg:
        tg.start_soon(lambda: pump(SseWriter(client.send), receive.receive, None, json_frame, keepalive=0.01))
        await client.wait_for(2)
        send.send_nowait(note(1))
        with anyio.fail_after(WAIT):
            while frame(note(1)) not in client.bodies():
                await client.changed.wait()
        send.close()
    assert client.bodies()[:2] == [b": keep-alive\n\n"] * 2


async def test_large_frames_go_in_pieces_and_give_their_budget_back() -> None:
    client = Client()
    writer = SseWriter(client.send)
    big = {"jsonrpc": "2.0", "method": "m", "params": {"x": "y" * (replies.REPLY_CHUNK_BYTES * 2)}}
    frames = [writer.frame(note(1)), writer.frame(big), writer.frame(note(2))]
    assert all(data is not None for data in frames)
    assert replies.BUDGET.used > 0
    await writer.write([data for data in frames if data is not None])
    assert replies.BUDGET.used == 0
    assert b"".join(client.bodies()) == frame(note(1)) + frame(big) + frame(note(2))
    assert len(client.bodies()) == 1 + 3 + 1  # the small ones are not joined across the large one


async def test_the_gateway_s_own_large_event_is_sent_whole_when_the_budget_is_spent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replies.BUDGET, "limit", 0)
    client = Client()
    ack = {"jsonrpc": "2.0", "method": "m", "params": {"uris": ["u" * 100] * 1000}}
    await SseWriter(client.send).write_message(ack)
    assert client.bodies() == [frame(ack)]
    assert replies.BUDGET.used == 0


# -- the watch ----------------------------------------------------------------------------------


class Told:
    """A feed that records what the watch tells the machine and, as a machine's ``stop`` would,
    ends the body when one of ``stopping`` comes."""

    def __init__(self, *stopping: answer_rules.Event) -> None:
        self.events: list[answer_rules.Event] = []
        self.stopping = stopping
        self.watch: Watch | None = None

    def __call__(self, event: answer_rules.Event) -> None:
        self.events.append(event)
        if event in self.stopping:
            assert self.watch is not None
            self.watch.stop()


async def run_until_told(watch: Watch, act: Any) -> None:
    """Run ``watch`` over a body that waits forever; ``act()`` once the body runs."""
    started = anyio.Event()

    async def body() -> None:
        started.set()
        await anyio.sleep_forever()

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.run, body)
            await started.wait()
            act()


async def test_a_disconnect_is_told_where_the_server_pushes_none() -> None:
    client = Client()
    told = Told(answer_rules.Event.CLIENT_GONE)
    watch = told.watch = Watch({}, client.receive, answer_rules.Kind.CALL, told)
    await run_until_told(watch, client.leave)
    assert told.events == [answer_rules.Event.CLIENT_GONE]


async def test_a_legacy_answer_waits_for_no_disconnect_where_the_server_pushes_none() -> None:
    async def receive() -> Message:
        raise AssertionError("a legacy answer outlives its client: nothing reads receive()")

    told = Told()
    watch = told.watch = Watch({}, receive, answer_rules.Kind.LEGACY, told)
    await run_until_told(watch, watch.stop)
    assert told.events == []


@pytest.mark.parametrize(
    ("stalled", "event"), [(False, answer_rules.Event.CLIENT_GONE), (True, answer_rules.Event.WRITE_STALLED)]
)
async def test_the_connection_s_hangup_is_told_without_reading_receive(
    stalled: bool, event: answer_rules.Event
) -> None:
    hangup = Hangup()

    async def receive() -> Message:
        raise AssertionError("the lean path never reads receive()")

    told = Told(event)
    watch = told.watch = Watch({HANGUP: hangup}, receive, answer_rules.Kind.GET_STREAM, told)

    def lose() -> None:
        hangup.stalled = stalled
        hangup.lost()

    await run_until_told(watch, lose)
    assert told.events == [event]
    assert watch.left


@pytest.mark.parametrize("kind", sorted(answer_rules.ENDS_ON_DRAIN))
async def test_the_drain_start_is_told_to_a_kind_it_ends(kind: answer_rules.Kind) -> None:
    drain = Drain()
    told = Told(answer_rules.Event.DRAIN_BEGINS)
    watch = told.watch = Watch({DRAIN: drain, HANGUP: Hangup()}, Client().receive, kind, told)
    await run_until_told(watch, drain.ending.set)
    assert told.events == [answer_rules.Event.DRAIN_BEGINS]
    assert drain.scopes == set()


@pytest.mark.parametrize("kind", [answer_rules.Kind.CALL, answer_rules.Kind.RESUMED, answer_rules.Kind.LISTEN])
async def test_the_spent_drain_budget_is_told_to_every_kind(kind: answer_rules.Kind) -> None:
    drain = Drain()
    told = Told(answer_rules.Event.BUDGET_SPENT)
    watch = told.watch = Watch({DRAIN: drain, HANGUP: Hangup()}, Client().receive, kind, told)
    await run_until_told(watch, drain.cancel_rest)
    assert told.events[0] is answer_rules.Event.BUDGET_SPENT
    # the drain's start (cancel_rest sets it too) is told only to a kind it ends, after the budget
    assert told.events[1:] in ([], [answer_rules.Event.DRAIN_BEGINS])
    if kind not in answer_rules.ENDS_ON_DRAIN:
        assert told.events == [answer_rules.Event.BUDGET_SPENT]
    assert drain.scopes == set()


@pytest.mark.parametrize("loss_first", [True, False])
async def test_the_connection_s_loss_and_the_spent_drain_budget_are_each_told_in_either_order(
    loss_first: bool,
) -> None:
    drain, hangup = Drain(), Hangup()
    told = Told(answer_rules.Event.BUDGET_SPENT)
    watch = told.watch = Watch({DRAIN: drain, HANGUP: hangup}, Client().receive, answer_rules.Kind.LEGACY, told)

    def both() -> None:
        if loss_first:
            hangup.lost()
            drain.cancel_rest()
        else:
            drain.cancel_rest()
            hangup.lost()

    await run_until_told(watch, both)
    gone, spent = answer_rules.Event.CLIENT_GONE, answer_rules.Event.BUDGET_SPENT
    assert told.events == ([gone, spent] if loss_first else [spent, gone])
    assert drain.scopes == set()


async def test_a_watch_whose_registration_fails_leaves_its_scope_and_the_drain_as_they_were() -> None:
    # The connection was lost before the watch began: registering tells the machine at once. If
    # that telling fails, ``with watch:`` raises it, with its cancel scope left (not still on the
    # task's stack) and the drain no longer holding the watch.
    drain, hangup = Drain(), Hangup()
    hangup.lost()

    def broken_feed(event: answer_rules.Event) -> None:
        raise LookupError(event)

    watch = Watch({DRAIN: drain, HANGUP: hangup}, Client().receive, answer_rules.Kind.CALL, broken_feed)
    assert watch.lean
    with anyio.fail_after(WAIT), anyio.CancelScope() as outer:  # exits cleanly only if the stack is whole
        with pytest.raises(LookupError), watch:
            raise AssertionError("the body must not run")
        await anyio.lowlevel.checkpoint()
    assert not outer.cancel_called
    assert drain.scopes == set()


# -- a request's answer -------------------------------------------------------------------------


class Exchange:
    """A relay exchange: yields ``queued`` events, then waits until closed (``closed``)."""

    def __init__(self, *queued: events.Emitted) -> None:
        self.queued = list(queued)
        self.closed = anyio.Event()
        self.more = anyio.Event()

    def __aiter__(self) -> Exchange:
        return self

    async def __anext__(self) -> events.Emitted:
        while not self.queued:
            await self.more.wait()
            self.more = anyio.Event()
        return self.queued.pop(0)

    def add(self, event: events.Emitted) -> None:
        self.queued.append(event)
        self.more.set()

    async def aclose(self) -> None:
        self.closed.set()


def lean_scope() -> Scope:
    return {"type": "http", HANGUP: Hangup()}


async def answer(stream: LazyStream, scope: Scope, client: Client) -> None:
    with anyio.fail_after(WAIT):
        await stream(scope, client.receive, client.send)


async def test_a_final_first_is_one_json_start_and_one_body() -> None:
    client = Client()
    exchange = Exchange(events.Final(final()))
    await answer(LazyStream(exchange, request_id=1), lean_scope(), client)
    assert [m["type"] for m in client.sent] == ["http.response.start", "http.response.body"]
    start, body = client.sent
    assert start["status"] == 200
    assert (b"content-type", b"application/json") in start["headers"]
    assert orjson.loads(body["body"]) == final()
    assert not body.get("more_body", False)
    assert exchange.closed.is_set()  # the lease goes back


async def test_a_modern_final_error_takes_its_mapped_status() -> None:
    client = Client()
    await answer(LazyStream(Exchange(events.Final(final(-32601))), error_statuses={-32601: 404}), lean_scope(), client)
    assert client.sent[0]["status"] == 404


async def test_a_notification_first_opens_an_event_stream_and_the_final_ends_it() -> None:
    client = Client()
    exchange = Exchange(events.Notification(note(1)))
    stream = LazyStream(exchange, request_id=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, stream, lean_scope(), client)
        await client.wait_for(2)
        exchange.add(events.Final(final()))
    start = client.sent[0]
    assert start["status"] == 200
    assert (b"content-type", b"text/event-stream") in start["headers"]
    assert client.bodies() == [frame(note(1)), frame(final()), b""]


async def test_a_batch_of_notifications_goes_out_in_one_send() -> None:
    client = Client()
    batch = events.Batch((events.Progress(note(1)), events.Notification(note(2))))
    exchange = Exchange(batch, events.Final(final()))
    await answer(LazyStream(exchange, request_id=1), lean_scope(), client)
    assert client.bodies() == [frame(note(1)) + frame(note(2)), frame(final()), b""]


async def test_a_hangup_while_waiting_closes_the_exchange_and_sends_nothing() -> None:
    client = Client()
    scope = lean_scope()
    exchange = Exchange()
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, LazyStream(exchange, request_id=1), scope, client)
        await anyio.wait_all_tasks_blocked()
        hangup: Any = scope[HANGUP]
        hangup.lost()
    assert exchange.closed.is_set()  # a modern exchange closed: the child is told
    assert client.sent == []


async def test_a_cancel_before_any_answer_ends_an_empty_event_stream() -> None:
    client = Client()
    exchange = Exchange()
    stream = LazyStream(exchange, request_id=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, stream, lean_scope(), client)
        await anyio.wait_all_tasks_blocked()
        stream.cancel()
    assert [m["type"] for m in client.sent] == ["http.response.start", "http.response.body"]
    assert client.bodies() == [b""]
    assert exchange.closed.is_set()


def legacy_call(ended: list[str]) -> LegacyCall:
    return LegacyCall(CancelHandle(), lambda: final(-32800), lambda: ended.append("forgotten"))


async def test_a_legacy_exchange_outlives_its_client_and_nothing_more_is_sent() -> None:
    client = Client()
    scope = lean_scope()
    exchange = Exchange(events.Progress(note(1)))
    ended: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, LazyStream(exchange, request_id=1, legacy=legacy_call(ended)), scope, client)
        await client.wait_for(2)
        scope[HANGUP].lost()  # the client hangs up: not a cancellation
        await anyio.wait_all_tasks_blocked()
        assert not exchange.closed.is_set()
        exchange.add(events.Final(final()))  # the work goes on to its end
    assert exchange.closed.is_set()
    assert client.bodies() == [frame(note(1))]  # nothing after the hang-up
    assert scope["gateway.log"]["outcome"] == "cancelled"
    assert ended == ["forgotten"]


async def test_a_legacy_exchange_whose_client_stops_reading_is_cancelled() -> None:
    client = Client()
    scope = lean_scope()
    exchange = Exchange()
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, LazyStream(exchange, request_id=1, legacy=legacy_call([])), scope, client)
        await anyio.wait_all_tasks_blocked()
        scope[HANGUP].stalled = True
        scope[HANGUP].lost()
    assert exchange.closed.is_set()
    assert client.sent == []


@pytest.mark.parametrize("reply", [True, False])
async def test_a_legacy_exchange_the_session_cancels_is_answered_only_when_the_gateway_ended_it(
    reply: bool,
) -> None:
    client = Client()
    exchange = Exchange()
    call = legacy_call([])
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, LazyStream(exchange, request_id=1, legacy=call), lean_scope(), client)
        await anyio.wait_all_tasks_blocked()
        call.handle.cancel(reply=reply)  # reply: a DELETE; else the client's notifications/cancelled
    assert exchange.closed.is_set()
    if reply:
        assert (b"content-type", b"application/json") in client.sent[0]["headers"]
        assert orjson.loads(client.bodies()[0]) == final(-32800)
    else:
        assert (b"content-type", b"text/event-stream") in client.sent[0]["headers"]
        assert client.bodies() == [b""]


async def test_the_legacy_get_stream_has_its_headers_and_ends_on_drain() -> None:
    client = Client()
    drain = Drain()
    streams = SessionStreams(mint_key=lambda: "k")
    reader = streams.open_get()
    streams.offer(orjson.dumps(note(1)))
    streams.offer(orjson.dumps(note(2)))
    scope = {"type": "http", HANGUP: Hangup(), DRAIN: drain}
    async with anyio.create_task_group() as tg:
        tg.start_soon(EventStream(reader, max_seconds=60), scope, client.receive, client.send)
        await client.wait_for(2)
        drain.ending.set()
    assert client.sent[0]["headers"] == [
        (b"content-type", b"text/event-stream; charset=utf-8"),
        (b"cache-control", b"no-cache"),
        (b"connection", b"keep-alive"),
        (b"x-accel-buffering", b"no"),
    ]
    assert client.bodies() == [id_frame("k.1", orjson.dumps(note(1))) + id_frame("k.2", orjson.dumps(note(2))), b""]


async def test_the_legacy_get_stream_ends_after_its_lifetime() -> None:
    client = Client()
    reader = SessionStreams().open_get()
    with anyio.fail_after(WAIT):
        await EventStream(reader, max_seconds=0)(lean_scope(), client.receive, client.send)
    assert client.bodies() == [b""]


def large_final() -> JsonObject:
    return {"jsonrpc": "2.0", "id": 1, "result": {"text": "x" * (2 * replies.REPLY_CHUNK_BYTES)}}


async def test_a_large_json_answer_goes_in_pieces_and_gives_its_budget_back() -> None:
    client = Client()
    await answer(LazyStream(Exchange(events.Final(large_final())), request_id=1), lean_scope(), client)
    start, *bodies = client.sent
    assert start["status"] == 200
    assert len(bodies) == 3
    assert [m["more_body"] for m in bodies] == [True, True, False]
    assert orjson.loads(b"".join(m["body"] for m in bodies)) == large_final()
    assert replies.BUDGET.used == 0


async def test_a_large_json_answer_over_the_budget_is_a_200_error_and_holds_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replies.BUDGET, "limit", 0)
    client, exchange = Client(), Exchange(events.Final(large_final()))
    await answer(LazyStream(exchange, request_id=1), lean_scope(), client)
    start, body = client.sent
    assert start["status"] == 200
    assert orjson.loads(body["body"])["error"]["code"] == -31004
    assert replies.BUDGET.used == 0
    assert exchange.closed.is_set()
