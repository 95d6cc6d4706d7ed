"""A legacy client's own cancel ends its request's stream cleanly, and a session keeps one GET
stream without two connections taking it from each other (issue #38 item 6), with raw HTTP.

A 2025-11-25 request stream opens with a priming event, so a client whose stream ends without
a response resumes it (the TypeScript SDKs do). After the client's own
``notifications/cancelled`` that resume must not be answered for the request (the client has
forgotten its id): it gets 405, the one answer to a GET besides an event stream, which the SDK
clients take as "no stream" without retrying. A new GET replaces the session's GET stream; the
replaced connection's resume (by the priming event's id) gets 405 too while the new one is read.
The SDK clients themselves: ``test_npm_cancelled_calls.py``.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import orjson
import pytest

from tests.conftest import server_spec
from tests.gateway_server import open_legacy_session, parse_sse, running_gateway
from tests.integration.test_hostile_edge import access_log
from tests.integration.test_resumption import Event, countdown, events_of, resume

WAIT = 60.0

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(WAIT + 20)]


def cancel(request_id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}


def messages(events: list[Event]) -> list[dict[str, Any]]:
    return [orjson.loads(event.data) for event in events if event.data]


def assert_closed(answer: httpx.Response) -> None:
    """A resume of a stream that is over for this client: 405, and no response for its request."""
    assert answer.status_code == 405, answer.text
    assert answer.headers["allow"] == "POST, GET, DELETE"
    body = answer.json()
    assert body.get("id") is None  # no response for any request
    assert body["error"]["code"] == -32600
    assert "nothing more comes on this stream" in body["error"]["message"]


async def test_after_its_own_cancel_a_legacy_stream_ends_unanswered_and_its_resume_gets_405() -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient(timeout=30.0) as http:
            session = await open_legacy_session(http, url)
            seen: list[Event] = []
            async with http.stream("POST", url, headers=session, json=countdown(1, steps=100, interval_ms=100)) as sse:
                async for event in events_of(sse):
                    seen.append(event)
                    if len(messages(seen)) == 1:  # its first progress: the client cancels
                        assert (await http.post(url, headers=session, json=cancel(1))).status_code == 202
            # The client resumes from its last id, or from the priming event: nothing for id 1.
            for last in (seen[-1].id, seen[0].id):
                assert_closed(await resume(http, url, session, last or ""))
            after = await http.post(url, headers=session, json=countdown(2, steps=2, interval_ms=10))
    assert (seen[0].id or "").endswith(".0")  # the priming event
    assert not seen[0].data
    assert all("method" in message for message in messages(seen))  # progress only: no response
    final = parse_sse(after.text)[-1] if after.headers["content-type"].startswith("text/") else after.json()
    assert final["result"]["content"][0]["text"] == "done after 2 steps"  # the session goes on


async def test_a_cancel_while_a_polling_streams_connection_is_closed_seals_it_too() -> None:
    """The client cancels between two connections of a polling stream: its resume gets 405."""
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(server_spec(), sse_poll_seconds=0.5) as url,
            httpx.AsyncClient(timeout=30.0) as http,
        ):
            session = await open_legacy_session(http, url)
            async with http.stream("POST", url, headers=session, json=countdown(1, steps=100, interval_ms=100)) as sse:
                seen = [event async for event in events_of(sse)]  # until the gateway closes it
            assert seen[-1].retry is not None  # closed for polling, the call going on
            assert (await http.post(url, headers=session, json=cancel(1))).status_code == 202
            assert_closed(await resume(http, url, session, next(e.id for e in reversed(seen) if e.id) or ""))


async def test_a_cancel_after_the_call_ended_seals_the_result_its_client_had_not_read() -> None:
    """The call ends while its polling stream has no connection; the client then cancels it
    (the two crossed): its resume gets 405, not the result of a request it has forgotten."""
    with anyio.fail_after(WAIT):
        async with (
            access_log() as log,
            running_gateway(server_spec(), sse_poll_seconds=0.5) as url,
            httpx.AsyncClient(timeout=30.0) as http,
        ):
            session = await open_legacy_session(http, url)
            async with http.stream("POST", url, headers=session, json=countdown(1, steps=4, interval_ms=250)) as sse:
                seen = [event async for event in events_of(sse)]  # until the gateway closes it
            await log.wait_for(lambda record: getattr(record, "rpc_method", None) == "tools/call")  # the call ended
            assert (await http.post(url, headers=session, json=cancel(1))).status_code == 202
            assert_closed(await resume(http, url, session, next(e.id for e in reversed(seen) if e.id) or ""))
    assert seen[-1].retry is not None
    assert all("method" in message for message in messages(seen))  # the result came after the close


async def test_a_get_stream_replaced_by_a_new_get_is_told_405_when_it_resumes() -> None:
    notify = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "notify", "arguments": {"method": "notifications/tools/list_changed"}},
    }
    with anyio.fail_after(WAIT):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient(timeout=30.0) as http:
            session = await open_legacy_session(http, url)
            get = {**session, "accept": "text/event-stream"}
            async with http.stream("GET", url, headers=get) as first:
                firsts = events_of(first)
                primed = await firsts.__anext__()
                async with http.stream("GET", url, headers=get) as second:
                    seconds = events_of(second)
                    current = await seconds.__anext__()
                    rest = [event async for event in firsts]  # the replaced one ends
                    # Its client resumes it by the priming event's id: it is over, the new one is read.
                    assert_closed(await resume(http, url, session, primed.id or ""))
                    assert (await http.post(url, headers=session, json=notify)).status_code == 200
                    delivered = await seconds.__anext__()
    for priming in (primed, current):
        assert (priming.id or "").endswith(".0")
        assert not priming.data
    assert primed.id != current.id
    assert rest == []
    assert orjson.loads(delivered.data)["method"] == "notifications/tools/list_changed"
    assert (delivered.id or "").rpartition(".")[0] == (current.id or "").rpartition(".")[0]
