"""Legacy sessions through the gateway: minting, requiring, ending, batches, expiry."""

from __future__ import annotations

import anyio
import httpx
import pytest

from gateway.relay.sessions import SessionStore
from tests.conftest import server_spec
from tests.gateway_server import BASE_HEADERS, parse_sse, running_gateway

pytestmark = pytest.mark.anyio


def initialize(version: str = "2025-11-25") -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }


def call(request_id: object, tool: str, arguments: dict[str, object]) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


async def open_session(http: httpx.AsyncClient, url: str, version: str = "2025-11-25") -> dict[str, str]:
    init = await http.post(url, headers=BASE_HEADERS, json=initialize(version))
    assert init.status_code == 200
    session_id = init.headers["mcp-session-id"]
    assert session_id.isascii()
    assert all(0x21 <= ord(c) <= 0x7E for c in session_id)
    assert len(session_id) >= 32
    return {
        **BASE_HEADERS,
        "mcp-session-id": session_id,
        "mcp-protocol-version": init.json()["result"]["protocolVersion"],
    }


async def test_each_initialize_mints_a_distinct_session_and_negotiates_the_version() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            first = await open_session(http, url)
            second = await open_session(http, url, "2025-03-26")
            assert first["mcp-session-id"] != second["mcp-session-id"]
            assert second["mcp-protocol-version"] == "2025-03-26"
            unknown = await http.post(url, headers=BASE_HEADERS, json=initialize("1999-01-01"))
            assert unknown.json()["result"]["protocolVersion"] == "2025-11-25"  # ours, offered instead


async def test_a_request_without_a_session_is_refused_and_an_unknown_session_gets_404() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            no_session = await http.post(url, headers=BASE_HEADERS, json=call(1, "echo", {"message": "x"}))
            assert no_session.status_code == 400
            unknown = await http.post(
                url,
                headers={**BASE_HEADERS, "mcp-session-id": "no-such-session"},
                json=call(1, "echo", {"message": "x"}),
            )
            assert unknown.status_code == 404


async def test_delete_ends_the_session_and_cancels_its_requests_in_flight() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            headers = await open_session(http, url)
            slow = call(7, "countdown", {"steps": 100, "interval_ms": 100})
            slow["params"]["_meta"] = {"progressToken": "p"}  # type: ignore[index]
            async with http.stream("POST", url, headers=headers, json=slow) as stream:
                text = ""
                chunks = stream.aiter_text()
                async for chunk in chunks:
                    text += chunk
                    if parse_sse(text):  # the first progress: the call is running at the child
                        break
                deleted = await http.delete(url, headers=headers)
                assert deleted.status_code == 204
                async for chunk in chunks:
                    text += chunk
            final = parse_sse(text)[-1]
            assert final["id"] == 7
            assert final["error"]["code"] == -31005
            after = await http.post(url, headers=headers, json=call(2, "echo", {"message": "x"}))
            assert after.status_code == 404
            other = await open_session(http, url)
            ids = (await http.post(url, headers=other, json=call(3, "cancelled_ids", {}))).json()
            assert len(ids["result"]["structuredContent"]["ids"]) == 1  # the child was told to stop


async def test_a_2025_03_26_session_may_send_a_batch_and_gets_an_array_back() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            headers = await open_session(http, url, "2025-03-26")
            batch = [
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                call(1, "echo", {"message": "a"}),
                call("two", "echo", {"message": "b"}),
                {"jsonrpc": "2.0", "id": 3, "method": "ping"},
            ]
            reply = await http.post(url, headers=headers, json=batch)
            assert reply.status_code == 200
            answers = {item["id"]: item for item in reply.json()}
            assert set(answers) == {1, "two", 3}
            assert answers[1]["result"]["content"][0]["text"] == "a"
            assert answers["two"]["result"]["content"][0]["text"] == "b"
            assert answers[3]["result"] == {}
            newer = await open_session(http, url, "2025-06-18")
            refused = await http.post(url, headers=newer, json=batch)
            assert refused.status_code == 400


async def test_get_without_a_session_is_405_and_delete_of_an_unknown_session_is_404() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            get = await http.get(url, headers={"accept": "text/event-stream"})
            assert get.status_code == 405
            deleted = await http.delete(url, headers={"mcp-session-id": "nope"})
            assert deleted.status_code == 404


async def test_idle_sessions_expire_unless_they_have_requests_in_flight() -> None:
    lasting = SessionStore(idle_timeout=3600.0)
    kept = lasting.create("2025-11-25", {}, None)
    assert lasting.get(kept.id) is kept
    expiring = SessionStore(idle_timeout=-1.0)
    gone = expiring.create("2025-11-25", {}, None)
    busy = expiring.create("2025-11-25", {}, None)
    busy.in_flight[1] = anyio.CancelScope()
    assert expiring.get(gone.id) is None
    assert expiring.get(busy.id) is busy
    assert len(expiring) == 1


async def test_a_get_stream_ends_after_the_maximum_stream_duration() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec(), max_stream_seconds=0.3) as url, httpx.AsyncClient() as http:
            headers = await open_session(http, url)
            started = anyio.current_time()
            async with http.stream("GET", url, headers={**headers, "accept": "text/event-stream"}) as stream:
                assert stream.status_code == 200
                async for _ in stream.aiter_bytes():
                    pass  # ends when the gateway closes the stream
            assert anyio.current_time() - started >= 0.3


async def test_resources_updated_reaches_only_the_sessions_that_subscribed() -> None:
    def notify(request_id: int, method: str, params: dict[str, object]) -> dict[str, object]:
        return call(request_id, "notify", {"method": method, "params": params})

    with anyio.fail_after(20):
        async with running_gateway(server_spec("--era", "legacy", "--subscribe")) as url, httpx.AsyncClient() as http:
            reader, other = await open_session(http, url), await open_session(http, url)
            subscribe = {"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe", "params": {"uri": "file:///docs"}}
            assert "result" in (await http.post(url, headers=reader, json=subscribe)).json()
            streams = {}
            async with (
                http.stream("GET", url, headers={**reader, "accept": "text/event-stream"}) as streams["reader"],
                http.stream("GET", url, headers={**other, "accept": "text/event-stream"}) as streams["other"],
            ):
                updated = "notifications/resources/updated"
                await http.post(url, headers=other, json=notify(2, updated, {"uri": "file:///docs/a.md"}))
                await http.post(url, headers=other, json=notify(3, "notifications/tools/list_changed", {}))
                firsts = {}
                for name, stream in streams.items():
                    text = ""
                    async for chunk in stream.aiter_text():
                        text += chunk
                        if parse_sse(text):
                            break
                    firsts[name] = parse_sse(text)[0]
    assert firsts["reader"] == {"jsonrpc": "2.0", "method": updated, "params": {"uri": "file:///docs/a.md"}}
    assert firsts["other"]["method"] == "notifications/tools/list_changed"  # the update never reached it
