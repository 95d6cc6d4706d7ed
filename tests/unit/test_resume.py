"""A legacy session's resumable request stream (``gateway.http.resume``), driven with a fake
ASGI peer and a relay exchange written as an async generator (as the real one is): ids and the
priming event, keep-alives that never end the call, a resume that takes the stream over,
exactly once across connections, polling, and a stream nobody resumes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import orjson
import pytest

from gateway.http.resume import ABANDONED, Resumable, ResumedStream
from gateway.http.sse import KEEPALIVE, frame, id_frame
from gateway.http.stream import LazyStream
from gateway.protocol import eventlog
from gateway.protocol.eventlog import Closed
from gateway.relay import events
from gateway.relay.streams import Reader, SessionStreams
from tests.unit.test_sse import WAIT, Client, answer, final, lean_scope, legacy_call, note

pytestmark = pytest.mark.anyio


class Call:
    """An exchange as an async generator: progress 1 at once, then each further event (the
    other progress, then the final answer) after one more ``step()``. ``closed`` is set when
    the generator ends (closed early or at its end)."""

    def __init__(self) -> None:
        self._permits, self._taken = anyio.create_memory_object_stream[None](16)
        self.closed = anyio.Event()

    def step(self) -> None:
        self._permits.send_nowait(None)

    async def run(self, notes: int) -> AsyncIterator[events.Emitted]:
        try:
            for n in range(1, notes + 1):
                yield events.Progress(note(n))
                await self._taken.receive()
            yield events.Final(final())
        finally:
            self._permits.close()
            self._taken.close()
            self.closed.set()


def data_of(body: bytes) -> list[tuple[str | None, bytes]]:
    """(id, data) of each event in ``body``; comments left out."""
    found = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = [line for line in block.split(b"\n") if line and not line.startswith(b":")]
        fields = dict(line.split(b": ", 1) if b": " in line else (line.rstrip(b":"), b"") for line in lines)
        if b"data" in fields:
            event_id = fields.get(b"id")
            found.append((event_id.decode() if event_id else None, fields[b"data"]))
    return found


def stream_for(call: Call, streams: SessionStreams, notes: int, **options: object) -> LazyStream:
    resumable = Resumable(streams, 1, True, **options)  # type: ignore[arg-type]
    return LazyStream(call.run(notes), request_id=1, legacy=legacy_call([]), resumable=resumable)


async def test_a_quiet_legacy_stream_gets_keep_alives_and_still_its_result() -> None:
    """The keep-alive wait must not cancel the exchange (an async generator would end)."""
    client, call, streams = Client(), Call(), SessionStreams(mint_key=lambda: "k")
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, stream_for(call, streams, 1, keepalive=0.01), lean_scope(), client)
        with anyio.fail_after(WAIT):
            while client.bodies().count(KEEPALIVE) < 3:
                await client.changed.wait()
        call.step()
    body = b"".join(client.bodies())
    assert data_of(body) == [("k.0", b""), ("k.1", orjson.dumps(note(1))), ("k.2", orjson.dumps(final()))]
    assert body.startswith(id_frame("k.0", b""))  # the priming event first


async def test_a_resume_takes_the_stream_over_and_every_event_arrives_once() -> None:
    origin, resumed, call = Client(), Client(), Call()
    streams = SessionStreams(mint_key=lambda: "k")
    scope = lean_scope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, stream_for(call, streams, 3), scope, origin)
        await origin.wait_for(3)  # start, priming, progress 1
        reader = streams.resume("k.1")
        tg.start_soon(answer, ResumedStream(reader), lean_scope(), resumed)  # type: ignore[arg-type]
        for _ in range(3):  # progress 2, 3, the result
            call.step()
    first = data_of(b"".join(origin.bodies()))
    second = data_of(b"".join(resumed.bodies()))
    assert [event_id for event_id, _ in first] == ["k.0", "k.1"]  # nothing after the resume took over
    assert [event_id for event_id, _ in second] == ["k.2", "k.3", "k.4"]
    assert orjson.loads(second[-1][1]) == final()


async def test_polling_closes_the_connection_with_a_retry_hint_and_the_call_goes_on() -> None:
    origin, call = Client(), Call()
    streams = SessionStreams(mint_key=lambda: "k")
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, stream_for(call, streams, 2, poll_seconds=0.01), lean_scope(), origin)
        with anyio.fail_after(WAIT):
            while not origin.bodies() or origin.sent[-1].get("more_body", False):
                await origin.changed.wait()  # until the connection's response is complete
        assert b"retry: 500" in b"".join(origin.bodies())
        call.step()  # progress 2, with nobody connected: kept for the resume
        reader = streams.resume("k.1")
        resumed = Client()
        tg.start_soon(answer, ResumedStream(reader), lean_scope(), resumed)  # type: ignore[arg-type]
        call.step()
    assert [event_id for event_id, _ in data_of(b"".join(resumed.bodies()))] == ["k.2", "k.3"]


async def test_a_stream_nobody_resumes_within_the_window_cancels_its_call() -> None:
    origin, call = Client(), Call()
    streams = SessionStreams(mint_key=lambda: "k", window=0.01)
    scope = lean_scope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, stream_for(call, streams, 5), scope, origin)
        await origin.wait_for(3)
        scope["gateway.hangup"].lost()  # the client is gone: nobody reads the stream from now on
        with anyio.fail_after(WAIT):
            await call.closed.wait()  # the window ran out: the exchange is closed (the child is told)
    lost = streams.resume("k.1")
    assert getattr(lost, "reason", None) == ABANDONED


async def test_a_get_stream_replaced_while_the_new_one_is_read_is_closed_to_its_resume() -> None:
    keys = iter(["g1", "g2", "g3"])
    streams = SessionStreams(mint_key=lambda: next(keys))
    first = streams.open_get(priming=True)
    assert first.opens  # its priming event goes first
    second = streams.open_get(priming=True)
    assert first.stream.log.key == "g1"
    assert streams.get_stream is second.stream
    closed = streams.resume("g1.0", priming=True)  # the first connection reconnects: the second keeps it
    assert isinstance(closed, Closed)
    assert "another connection reads" in closed.reason
    assert streams.get_stream is second.stream
    resumed = streams.resume("g2.0", priming=True)  # its own reader's resume takes it over, unprimed
    assert isinstance(resumed, Reader)
    assert resumed.stream is second.stream
    assert not resumed.opens
    resumed.detach()  # nobody reads the session's GET stream now: a stale id opens a new one
    fresh = streams.resume("g1.0", priming=True)
    assert isinstance(fresh, Reader)
    assert (fresh.stream.log.key, fresh.opens) == ("g3", True)
    for reader in (first, second, fresh):
        reader.detach()


async def test_a_request_cancelled_after_its_call_ended_is_sealed_by_its_exact_id() -> None:
    keys = iter(["one", "text", "other"])
    streams = SessionStreams(mint_key=lambda: next(keys))
    for request_id in (1, "1", 2):
        stream = streams.open_request(request_id, priming=True)
        stream.emit(b'{"result": {}}')
        stream.finish()
        stream.end()
    streams.seal_request(1)
    assert isinstance(streams.resume("one.0"), Closed)
    for key in ("text", "other"):  # "1" is another request than 1
        reader = streams.resume(f"{key}.0")
        assert isinstance(reader, Reader)
        reader.detach()


async def test_the_live_side_lets_go_of_every_stream_the_log_forgets() -> None:
    streams = SessionStreams()
    for n in range(eventlog.SESSION_MAX_FINISHED + 10):
        stream = streams.open_request(n, priming=False)
        stream.emit(b"{}")
        stream.finish()
        stream.end()
    assert len(streams.live) == len(streams.log.streams) == eventlog.SESSION_MAX_FINISHED
    streams.close()
    assert streams.live == {}
    assert streams.log.size == 0


async def test_a_quiet_modern_stream_gets_keep_alives_and_still_its_result() -> None:
    """The same for a modern answer: a keep-alive timeout never cancels the exchange."""
    client, call = Client(), Call()
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, LazyStream(call.run(1), request_id=1, keepalive=0.01), lean_scope(), client)
        with anyio.fail_after(WAIT):
            while client.bodies().count(KEEPALIVE) < 3:
                await client.changed.wait()
        call.step()
    body = b"".join(client.bodies())
    assert body.endswith(frame(final()))
    assert body.startswith(frame(note(1)))


async def test_a_resume_after_the_result_gets_what_it_missed_and_ends() -> None:
    streams = SessionStreams(mint_key=lambda: "k")
    stream = streams.open_request(1, priming=False)
    origin = stream.attach([])
    stream.emit(b"progress")
    stream.emit(orjson.dumps(final()))
    stream.finish()
    stream.end()
    origin.detach()
    client = Client()
    reader = streams.resume("k.1")
    await answer(ResumedStream(reader), lean_scope(), client)  # type: ignore[arg-type]
    assert data_of(b"".join(client.bodies())) == [("k.2", orjson.dumps(final()))]


async def test_a_requests_producer_waits_for_a_slow_reader_and_a_resume_frees_it() -> None:
    streams = SessionStreams(mint_key=lambda: "k")
    stream = streams.open_request(1, priming=False)
    slow = stream.attach([])
    for _ in range(eventlog.STREAM_MAX_EVENTS):
        await stream.put(b"{}")
    blocked = anyio.Event()
    done = anyio.Event()

    async def one_more() -> None:
        blocked.set()
        await stream.put(b"{}")
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(one_more)
        await blocked.wait()
        await anyio.wait_all_tasks_blocked()
        assert not done.is_set()  # waiting for room, not dropping the slow reader
        assert stream.reader is slow
        resumed = streams.resume("k.1000")  # a resume takes over: the producer goes on
    assert done.is_set()
    assert not isinstance(resumed, eventlog.Unknown)
    assert [n for n, _ in resumed.ready()] == list(range(1001, eventlog.STREAM_MAX_EVENTS + 2))  # type: ignore[union-attr]
    slow.detach()
    resumed.detach()  # type: ignore[union-attr]
