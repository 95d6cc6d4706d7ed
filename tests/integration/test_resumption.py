"""Long legacy calls survive a dropped connection (issue #30): SSE event ids, resumption with
``GET`` + ``Last-Event-ID``, bounded retention, and polling streams.

The proxy (``tests.cutting_proxy``) cuts every response after ``CUT`` seconds, as a proxy with
a response timeout does. A legacy client's ``COUNTDOWN_STEPS`` × ``INTERVAL_MS`` call must
still get every progress notification and its result exactly once, in order: the client
resumes each cut stream from the last event id it had. The asserts are on the events, never
on time.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import orjson
import pytest
from mcp import Client
from mcp.types import TextContent

from gateway.http.auth import TokenStore
from gateway.protocol.jsonrpc import Result
from gateway.tools.call.connection import Mode, open_connection
from tests.balancer import cluster
from tests.conftest import server_spec
from tests.cutting_proxy import CuttingProxy
from tests.gateway_server import open_legacy_session, running_gateway, serving

CUT = 2.0
HEAD_LIMIT = 30.0
"""How long the proxy waits for a response's head before a 504: a stream's head comes at once
on an idle machine; the cut is counted from it (``CuttingProxy.head_limit``)."""
COUNTDOWN_STEPS = 20
INTERVAL_MS = 500  # a 10 s call, progress every 500 ms
WAIT = 90.0
VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(WAIT + 20)]


def countdown(request_id: int, steps: int = COUNTDOWN_STEPS, interval_ms: int = INTERVAL_MS) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": "countdown",
            "arguments": {"steps": steps, "interval_ms": interval_ms},
            "_meta": {"progressToken": f"p{request_id}"},
        },
    }


@dataclass
class Event:
    id: str | None
    data: str
    retry: int | None = None


async def events_of(response: httpx.Response) -> AsyncIterator[Event]:
    """The SSE events of ``response`` as they come; ends quietly when the connection is cut."""
    fields: dict[str, str] = {}
    try:
        async for line in response.aiter_lines():
            if line == "":
                if fields:
                    retry = fields.get("retry")
                    yield Event(fields.get("id"), fields.get("data", ""), int(retry) if retry else None)
                fields = {}
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
    except httpx.HTTPError:
        return


@dataclass
class Resumed:
    """What a resuming client saw: each message once, the ids, and how many connections it took."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    connections: int = 0
    retries: list[int] = field(default_factory=list)


async def call_resuming(http: httpx.AsyncClient, url: str, headers: dict[str, str], request: dict[str, Any]) -> Resumed:
    """POST ``request``; each time its stream ends without the result, resume it (``GET`` +
    ``Last-Event-ID``: the last id seen), as the TypeScript SDK does."""
    seen = Resumed()
    last: str | None = None
    while True:
        seen.connections += 1
        assert seen.connections < 100, "the call never completed"
        if last is None:
            opened = http.stream("POST", url, headers=headers, json=request)
        else:
            opened = http.stream("GET", url, headers={**headers, "accept": "text/event-stream", "last-event-id": last})
        async with opened as response:
            assert response.status_code == 200, await response.aread()
            if last is None and response.headers["content-type"].startswith("application/json"):
                seen.messages.append(orjson.loads(await response.aread()))
                return seen
            async for event in events_of(response):
                if event.retry is not None:
                    seen.retries.append(event.retry)
                if event.id is not None:
                    seen.ids.append(event.id)
                    last = event.id
                if event.data:
                    message = orjson.loads(event.data)
                    seen.messages.append(message)
                    if message.get("id") == request["id"]:
                        return seen
        assert last is not None, "cut before any event id: nothing to resume from"


def assert_exactly_once_in_order(seen: Resumed, request_id: int, steps: int = COUNTDOWN_STEPS) -> None:
    progress = [m["params"]["progress"] for m in seen.messages if m.get("method") == "notifications/progress"]
    assert progress == list(range(1, steps + 1))
    assert {m["params"]["progressToken"] for m in seen.messages[:-1]} == {f"p{request_id}"}
    final = seen.messages[-1]
    assert final["id"] == request_id
    assert final["result"]["content"][0]["text"] == f"done after {steps} steps"
    assert len(seen.ids) == len(set(seen.ids))  # never an event twice


@asynccontextmanager
async def through_cutting_proxy(backend_url: str, cut_after: float = CUT) -> AsyncIterator[tuple[str, CuttingProxy]]:
    base, _, path = backend_url.partition("/mcp")
    proxy = CuttingProxy(base, cut_after, head_limit=HEAD_LIMIT)
    async with serving(proxy) as front:
        yield f"{front}/mcp{path}", proxy


async def test_legacy_calls_through_a_proxy_that_cuts_every_response_get_every_event_once_in_order() -> None:
    """Three sessions (each legacy revision with Streamable HTTP) at once, a 10 s call each."""
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(server_spec()) as url,
            through_cutting_proxy(url) as (front, proxy),
            httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as http,
        ):
            sessions = [await open_legacy_session(http, front, version=v) for v in VERSIONS]
            results: dict[int, Resumed] = {}

            async def one(n: int) -> None:
                results[n] = await call_resuming(http, front, sessions[n], countdown(n + 1))

            async with anyio.create_task_group() as tg:
                for n in range(len(VERSIONS)):
                    tg.start_soon(one, n)
    for n, version in enumerate(VERSIONS):
        seen = results[n]
        assert_exactly_once_in_order(seen, n + 1)
        assert seen.connections >= 2, "the proxy never cut this call: the test proved nothing"
        first_id = seen.ids[0]
        if version == "2025-11-25":
            assert first_id.endswith(".0")  # the priming event: an id, empty data
        else:
            assert first_id.endswith(".1")  # no priming event before 2025-11-25
    assert proxy.cuts >= 3
    resumes = [last for method, last in proxy.requests if method == "GET" and last]
    assert len(resumes) >= 3
    # Ids name their stream: one stream per call, unique across the sessions' streams.
    keys = {event_id.rpartition(".")[0] for seen in results.values() for event_id in seen.ids}
    assert len(keys) == len(VERSIONS)


async def test_a_resume_landing_on_another_replica_reaches_the_stream_at_its_owner() -> None:
    """Round-robin behind the cutting proxy: most resumes reach an instance that does not hold
    the session, which forwards them to its owner."""
    with anyio.fail_after(WAIT):
        async with (
            cluster(server_spec(), size=2) as nodes,
            through_cutting_proxy(nodes.url) as (front, _),
            httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as http,
        ):
            sessions = [await open_legacy_session(http, front) for _ in range(2)]
            results: dict[int, Resumed] = {}

            async def one(n: int) -> None:
                results[n] = await call_resuming(http, front, sessions[n], countdown(n + 1))

            async with anyio.create_task_group() as tg:
                for n in range(2):
                    tg.start_soon(one, n)
            backends = {hit.backend for hit in nodes.balancer.hits if hit.method == "GET"}
    for n in range(2):
        assert_exactly_once_in_order(results[n], n + 1)
        assert results[n].connections >= 2
    assert backends == {0, 1}  # resumes reached both instances
    assert 404 not in nodes.balancer.statuses()


async def first_events(
    http: httpx.AsyncClient, url: str, headers: dict[str, str], request: dict[str, Any], count: int
) -> list[Event]:
    """Open ``request``'s stream, read ``count`` events with data, and hang up."""
    got: list[Event] = []
    async with http.stream("POST", url, headers=headers, json=request) as response:
        async for event in events_of(response):
            if event.data:
                got.append(event)
                if len(got) == count:
                    break
    return got


async def resume(http: httpx.AsyncClient, url: str, headers: dict[str, str], last: str) -> httpx.Response:
    return await http.get(url, headers={**headers, "accept": "text/event-stream", "last-event-id": last})


async def test_resumes_with_an_unknown_id_another_sessions_id_or_another_principal_are_refused() -> None:
    tokens = TokenStore(["alice:alice-token-0123456789abcdef", "bob:bob-token-0123456789abcdef0"])
    alice = {"authorization": "Bearer alice-token-0123456789abcdef"}
    bob = {"authorization": "Bearer bob-token-0123456789abcdef0"}
    with anyio.fail_after(WAIT):
        async with running_gateway(server_spec(), tokens=tokens) as url, httpx.AsyncClient(timeout=30.0) as http:
            mine = await open_legacy_session(http, url, headers=alice)
            other = await open_legacy_session(http, url, headers=alice)
            bobs = await open_legacy_session(http, url, headers=bob)
            [event] = await first_events(http, url, mine, countdown(1, steps=3, interval_ms=50), 1)
            assert event.id is not None
            for bogus in ("nonsense", "x" * 500, event.id.rpartition(".")[0] + ".999", "unknown-key.3"):
                refused = await resume(http, url, mine, bogus)
                assert refused.status_code == 400
                assert refused.json()["error"]["code"] == -32600
                assert "cannot resume" in refused.json()["error"]["message"]
            # Another session of the same principal: its streams are not this one's.
            assert (await resume(http, url, other, event.id)).status_code == 400
            # Another principal, with the session id of alice's: the session is unknown to bob.
            stolen = {**bobs, "mcp-session-id": mine["mcp-session-id"]}
            assert (await resume(http, url, stolen, event.id)).status_code == 404
            # The owner resumes it: the rest, then the result.
            resumed = await resume(http, url, mine, event.id)
            assert resumed.status_code == 200
            messages = [orjson.loads(line[5:]) for line in resumed.text.splitlines() if line.startswith("data: {")]
            assert [m["params"]["progress"] for m in messages[:-1]] == [2, 3]
            assert messages[-1]["result"]["content"][0]["text"] == "done after 3 steps"


class Abandoned(logging.Handler):
    """Sets ``seen`` when the gateway logs that a stream's call was cancelled for want of a client."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "not resumed in time" in record.getMessage():
            self.seen.set()


async def test_a_stream_nobody_resumes_cancels_its_call_and_a_late_resume_gets_its_error() -> None:
    handler = Abandoned()
    logger = logging.getLogger("gateway.http")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        with anyio.fail_after(WAIT):
            async with (
                running_gateway(server_spec(), stream_resume_seconds=0.5) as url,
                httpx.AsyncClient(timeout=30.0) as http,
            ):
                sessions = [await open_legacy_session(http, url) for _ in range(2)]
                kept = await first_events(http, url, sessions[1], countdown(2, steps=3, interval_ms=50), 3)
                [event] = await first_events(http, url, sessions[0], countdown(1, steps=100, interval_ms=100), 1)
                assert event.id is not None
                await handler.seen.wait()
                cancelled = await http.post(
                    url,
                    headers=sessions[1],
                    json={"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "cancelled_ids"}},
                )
                late = await resume(http, url, sessions[0], event.id)
                done = await resume(http, url, sessions[1], kept[-1].id or "")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert len(cancelled.json()["result"]["structuredContent"]["ids"]) == 1  # the child was told to stop
    # The other session's stream finished, and its window has passed too: its resume says so.
    assert done.status_code == 200
    assert "its result was sent, but nobody resumed the stream" in done.text
    assert late.status_code == 200
    [message] = [orjson.loads(line[5:]) for line in late.text.splitlines() if line.startswith("data: {")]
    assert message["id"] == 1
    assert message["error"]["code"] == -31005
    assert message["error"]["data"]["stream"] == "lost"
    assert "nobody resumed" in message["error"]["message"]


async def test_polling_closes_a_2025_11_25_request_stream_with_a_retry_hint_and_the_call_completes() -> None:
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(server_spec(), sse_poll_seconds=1.0) as url,
            httpx.AsyncClient(timeout=30.0) as http,
        ):
            sessions = [await open_legacy_session(http, url, version=v) for v in ("2025-11-25", "2025-06-18")]
            results = {}

            async def one(n: int) -> None:
                results[n] = await call_resuming(http, url, sessions[n], countdown(n + 1, steps=10, interval_ms=300))

            async with anyio.create_task_group() as tg:
                for n in range(2):
                    tg.start_soon(one, n)
    polled, older = results[0], results[1]
    assert_exactly_once_in_order(polled, 1, steps=10)
    assert polled.connections >= 2  # closed by the gateway, and resumed
    assert polled.retries  # with a retry hint first
    assert_exactly_once_in_order(older, 2, steps=10)
    assert older.connections == 1  # polling streams exist from 2025-11-25 only
    assert not older.retries


async def test_the_python_sdk_in_legacy_mode_resumes_through_the_cutting_proxy_too() -> None:
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    with anyio.fail_after(WAIT):
        async with (
            running_gateway(server_spec()) as url,
            through_cutting_proxy(url) as (front, proxy),
            Client(front, mode="legacy") as client,
        ):
            result = await client.call_tool(
                "countdown", {"steps": COUNTDOWN_STEPS, "interval_ms": INTERVAL_MS}, progress_callback=on_progress
            )
    assert progress == [float(step) for step in range(1, COUNTDOWN_STEPS + 1)]
    assert isinstance(result.content[0], TextContent)
    assert result.content[0].text == f"done after {COUNTDOWN_STEPS} steps"
    assert proxy.cuts >= 3


async def test_the_call_commands_connection_resumes_a_cut_legacy_stream() -> None:
    notes: list[float] = []
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(server_spec()) as url,
            through_cutting_proxy(url) as (front, proxy),
            open_connection(front, Mode.LEGACY) as connection,
        ):
            reply = await connection.request(
                "tools/call",
                {"name": "countdown", "arguments": {"steps": COUNTDOWN_STEPS, "interval_ms": INTERVAL_MS}},
                meta={"progressToken": "c"},
                on_notification=lambda note: notes.append((note.params or {})["progress"]),
            )
    assert isinstance(reply, Result)
    assert reply.result["content"][0]["text"] == f"done after {COUNTDOWN_STEPS} steps"
    assert notes == list(range(1, COUNTDOWN_STEPS + 1))
    assert proxy.cuts >= 3
    assert any(method == "GET" and last for method, last in proxy.requests)


async def test_the_get_stream_is_resumed_with_what_it_missed_and_another_sessions_stream_is_its_own() -> None:
    def notify(request_id: int) -> dict[str, Any]:
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "notify", "arguments": {"method": "notifications/tools/list_changed"}},
        }

    primings: list[Event] = []

    async def take(stream: httpx.Response, count: int) -> list[Event]:
        got: list[Event] = []
        async for event in events_of(stream):
            if not event.data:  # a new 2025-11-25 GET stream's priming event
                primings.append(event)
                continue
            got.append(event)
            if len(got) == count:
                break
        return got

    get = {"accept": "text/event-stream"}
    with anyio.fail_after(WAIT):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient(timeout=30.0) as http:
            mine = await open_legacy_session(http, url)
            other = await open_legacy_session(http, url)
            async with http.stream("GET", url, headers={**other, **get}) as others:
                async with http.stream("GET", url, headers={**mine, **get}) as stream:
                    assert (await http.post(url, headers=mine, json=notify(1))).status_code == 200
                    [first] = await take(stream, 1)
                for n in (2, 3):  # the first session's GET stream has no connection now
                    assert (await http.post(url, headers=mine, json=notify(n))).status_code == 200
                resume = {**mine, **get, "last-event-id": first.id or ""}
                async with http.stream("GET", url, headers=resume) as resumed:
                    missed = await take(resumed, 2)
                theirs = await take(others, 3)
    key = (first.id or "").rpartition(".")[0]
    assert [event.id for event in missed] == [f"{key}.2", f"{key}.3"]
    assert all(orjson.loads(e.data)["method"] == "notifications/tools/list_changed" for e in [first, *missed])
    assert [(e.id or "").rpartition(".")[2] for e in theirs] == ["1", "2", "3"]  # its own stream, live
    assert {(e.id or "").rpartition(".")[0] for e in theirs} != {key}
    # each new GET stream opened with a priming event; the resumed one did not again
    assert sorted(e.id or "" for e in primings) == sorted([f"{key}.0", f"{(theirs[0].id or '').rpartition('.')[0]}.0"])
