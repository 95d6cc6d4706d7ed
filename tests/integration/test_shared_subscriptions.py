"""Resource subscriptions of many clients on one shared legacy child.

A legacy child believes it has one client: one ``resources/unsubscribe`` ends the URI for
everyone. So every holder on a child (legacy sessions and emulated listens alike) counts in
one count per (child, URI): the child is subscribed while anyone holds the URI and told to
unsubscribe when the last lets go; a session that ends lets go of what it held.

The witnesses are the child's own: its stdin record (one ``resources/subscribe`` per URI, one
``resources/unsubscribe`` after the last holder) and its ``subscribed`` tool (what the
process holds now: a real server sends updates for nothing else). Order is the witness for
delivery: the test child sends updates in the order it is told, so a stream's first message
shows what did not come before it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from gateway.protocol.dispatchstate import PoolSettings
from gateway.protocol.subscriptions import MAX_LISTEN_URIS
from tests.conftest import server_spec
from tests.filewatch import wait_until
from tests.gateway_server import BASE_HEADERS, legacy_initialize, running_gateway, sse_messages
from tests.integration.test_listen import SUBSCRIPTION_ID, listening
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

UPDATED = "notifications/resources/updated"
X = "file:///shared"
GET = {"accept": "text/event-stream"}


def spec(record: Path) -> Any:
    return server_spec("--era", "legacy", "--subscribe", "--record", str(record))


def recorded(path: Path, method: str) -> list[str]:
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    return [line["params"]["uri"] for line in lines if line.get("method") == method]


async def open_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    init = await http.post(url, headers=BASE_HEADERS, json=legacy_initialize())
    assert init.status_code == 200, init.text
    return {**BASE_HEADERS, "mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}


async def request(http: httpx.AsyncClient, url: str, headers: dict[str, str], method: str, **params: Any) -> Any:
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    reply = await http.post(url, headers=headers, json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


async def subscribe(http: httpx.AsyncClient, url: str, headers: dict[str, str], *uris: str) -> None:
    for uri in uris:
        assert await request(http, url, headers, "resources/subscribe", uri=uri) == {
            "jsonrpc": "2.0",
            "id": 7,
            "result": {},
        }


async def unsubscribe(http: httpx.AsyncClient, url: str, headers: dict[str, str], uri: str) -> None:
    assert (await request(http, url, headers, "resources/unsubscribe", uri=uri))["result"] == {}


async def updated(http: httpx.AsyncClient, url: str, headers: dict[str, str], *uris: str) -> None:
    """Have the child send ``resources/updated`` for each of ``uris``, in order."""
    for uri in uris:
        arguments = {"method": UPDATED, "params": {"uri": uri}}
        answer = await request(http, url, headers, "tools/call", name="notify", arguments=arguments)
        assert "result" in answer, answer


async def held(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> list[str]:
    """The URIs the child process holds subscriptions for now."""
    answer = await request(http, url, headers, "tools/call", name="subscribed", arguments={})
    uris: list[str] = answer["result"]["structuredContent"]["uris"]
    return uris


async def test_two_sessions_and_a_listen_share_one_subscription_and_none_drops_another(tmp_path: Path) -> None:
    record = tmp_path / "stdin.jsonl"
    with anyio.fail_after(40):
        async with running_gateway(spec(record), pool_size=1) as url, httpx.AsyncClient(timeout=20) as http:
            alice, bob, carol = [await open_session(http, url) for _ in range(3)]
            async with anyio.create_task_group() as tg:  # the sessions subscribe at the same time
                tg.start_soon(subscribe, http, url, alice, X, "file:///alice")
                tg.start_soon(subscribe, http, url, bob, X)
            async with (
                listening(http, url, "L", resourceSubscriptions=[X, "file:///listen"]) as listen,
                http.stream("GET", url, headers={**alice, **GET}) as alice_get,
                http.stream("GET", url, headers={**bob, **GET}) as bob_get,
            ):
                ack = await listen.next()
                assert ack is not None
                assert ack["params"]["notifications"] == {"resourceSubscriptions": [X, "file:///listen"]}
                # One child, subscribed once per URI however many hold it.
                assert sorted(recorded(record, "resources/subscribe")) == ["file:///alice", "file:///listen", X]
                alice_in, bob_in = sse_messages(alice_get), sse_messages(bob_get)

                # Each gets exactly its own updates (the first message of each shows what did not come).
                await updated(http, url, carol, "file:///alice", "file:///listen", X)
                assert (await anext(alice_in))["params"] == {"uri": "file:///alice"}
                assert (await anext(alice_in))["params"] == {"uri": X}
                assert (await anext(bob_in))["params"] == {"uri": X}
                for uri in ("file:///listen", X):
                    assert await listen.next() == {
                        "jsonrpc": "2.0",
                        "method": UPDATED,
                        "params": {"uri": uri, "_meta": {SUBSCRIPTION_ID: "L"}},
                    }

                # Alice lets go of X: bob and the listen still hold it, so the child does too.
                await unsubscribe(http, url, alice, X)
                assert recorded(record, "resources/unsubscribe") == []
                assert X in await held(http, url, carol)
                await updated(http, url, carol, X, "file:///alice")
                assert (await anext(alice_in))["params"] == {"uri": "file:///alice"}  # X no more
                assert (await anext(bob_in))["params"] == {"uri": X}
                assert (await listen.next() or {}).get("params", {}).get("uri") == X

            # The listen has ended (released in order: X first, then its own URI); bob holds X.
            await wait_until(record, lambda: "file:///listen" in recorded(record, "resources/unsubscribe"))
            assert recorded(record, "resources/unsubscribe") == ["file:///listen"]
            assert await held(http, url, carol) == ["file:///alice", X]

            # Bob's session ends without unsubscribing: the last holder of X is gone.
            assert (await http.delete(url, headers=bob)).status_code in (200, 204)
            await wait_until(record, lambda: X in recorded(record, "resources/unsubscribe"))
            assert recorded(record, "resources/unsubscribe") == ["file:///listen", X]
            assert await held(http, url, carol) == ["file:///alice"]


async def test_a_sessions_unsubscribe_never_drops_a_listens_subscription(tmp_path: Path) -> None:
    record = tmp_path / "stdin.jsonl"
    with anyio.fail_after(30):
        async with running_gateway(spec(record), pool_size=1) as url, httpx.AsyncClient(timeout=20) as http:
            session = await open_session(http, url)
            await subscribe(http, url, session, X)
            async with listening(http, url, "L", resourceSubscriptions=[X]) as listen:
                assert await listen.next() is not None  # acknowledged
                await unsubscribe(http, url, session, X)
                assert recorded(record, "resources/unsubscribe") == []
                assert await held(http, url, session) == [X]
                await updated(http, url, session, X)
                assert (await listen.next() or {}).get("params", {}).get("uri") == X
            await wait_until(record, lambda: recorded(record, "resources/unsubscribe") != [])
            assert recorded(record, "resources/subscribe") == [X]
            assert recorded(record, "resources/unsubscribe") == [X]


async def test_a_sessions_subscriptions_are_released_when_the_session_ends(tmp_path: Path) -> None:
    record = tmp_path / "stdin.jsonl"
    with anyio.fail_after(30):
        async with running_gateway(spec(record), pool_size=1) as url, httpx.AsyncClient(timeout=20) as http:
            leaving, staying = await open_session(http, url), await open_session(http, url)
            await subscribe(http, url, leaving, X, "file:///a", "file:///a")  # twice: held once
            await subscribe(http, url, staying, "file:///a")
            assert sorted(recorded(record, "resources/subscribe")) == ["file:///a", X]
            assert (await http.delete(url, headers=leaving)).status_code in (200, 204)
            await wait_until(record, lambda: recorded(record, "resources/unsubscribe") != [])
            assert recorded(record, "resources/unsubscribe") == [X]
            assert await held(http, url, staying) == ["file:///a"]


async def test_a_session_holds_at_most_the_bound_of_uris_and_beyond_it_nothing_is_forwarded(
    tmp_path: Path,
) -> None:
    record = tmp_path / "stdin.jsonl"
    uris = [f"file:///data/{n}" for n in range(MAX_LISTEN_URIS)]
    with anyio.fail_after(60):
        async with running_gateway(spec(record), pool_size=1) as url, httpx.AsyncClient(timeout=20) as http:
            session = await open_session(http, url)
            await subscribe(http, url, session, *uris)
            refused = await request(http, url, session, "resources/subscribe", uri="file:///one-more")
            assert refused["error"]["code"] == -32602
            assert f"at most {MAX_LISTEN_URIS}" in refused["error"]["message"]
            await subscribe(http, url, session, uris[0])  # held already: not one more
            await unsubscribe(http, url, session, uris[0])
            await subscribe(http, url, session, "file:///one-more")  # room again
            assert "file:///one-more" in await held(http, url, session)
    subscribed = recorded(record, "resources/subscribe")
    assert len(subscribed) == MAX_LISTEN_URIS + 1
    assert subscribed.count("file:///one-more") == 1


async def test_a_refused_subscribe_passes_the_childs_error_and_holds_nothing(tmp_path: Path) -> None:
    record = tmp_path / "stdin.jsonl"
    with anyio.fail_after(30):
        async with running_gateway(spec(record), pool_size=1) as url, httpx.AsyncClient(timeout=20) as http:
            session = await open_session(http, url)
            refused = await request(http, url, session, "resources/subscribe", uri="bad:thing")
            assert "error" in refused, refused
            async with http.stream("GET", url, headers={**session, **GET}) as get:
                received = sse_messages(get)
                await subscribe(http, url, session, X)
                await updated(http, url, session, "bad:thing", X)
                assert (await anext(received))["params"] == {"uri": X}


def is_move(record: logging.LogRecord) -> bool:
    """A ``subscriptions_moved`` record (one per session whose subscriptions were carried over)."""
    return getattr(record, "event", None) == "subscriptions_moved"


def since_last_start(path: Path, method: str) -> list[str]:
    """``recorded``, of the newest child only (from the last ``initialize`` it read)."""
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    start = max(n for n, line in enumerate(lines) if line.get("method") == "initialize")
    return [line["params"]["uri"] for line in lines[start:] if line.get("method") == method]


@pytest.mark.parametrize("end", ["crash", "retire"])
async def test_sessions_keep_a_subscription_when_its_child_exits(tmp_path: Path, end: str) -> None:
    record = tmp_path / "stdin.jsonl"
    # Retired at its sixth lease: the three initializes, the two subscribes, carol's call.
    pool = PoolSettings(min_size=1, max_size=1, asking_max=0, max_requests=6 if end == "retire" else 0)
    with anyio.fail_after(40), recording("gateway.relay.session_subscriptions", level=logging.INFO) as log:
        async with running_gateway(spec(record), pool=pool) as url, httpx.AsyncClient(timeout=20) as http:
            alice, bob, carol = [await open_session(http, url) for _ in range(3)]
            await subscribe(http, url, alice, X)
            await subscribe(http, url, bob, X)
            async with (
                http.stream("GET", url, headers={**alice, **GET}) as alice_get,
                http.stream("GET", url, headers={**bob, **GET}) as bob_get,
            ):
                alice_in, bob_in = sse_messages(alice_get), sse_messages(bob_get)
                if end == "crash":
                    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call"}
                    body["params"] = {"name": "exit", "arguments": {"code": 3}}
                    await http.post(url, headers=carol, json=body)  # its answer: the child died
                else:
                    assert await held(http, url, carol) == [X]  # the sixth: the child is retired
                await log.wait_for(is_move, count=2)  # one record per session
                moves = log.matching(is_move)
                assert sorted(r.count for r in moves) == [1, 1]  # type: ignore[attr-defined]
                assert len({r.old_pid for r in moves} | {r.new_pid for r in moves}) == 2  # type: ignore[attr-defined]
                assert since_last_start(record, "resources/subscribe") == [X]  # once for both
                await updated(http, url, carol, X)
                assert (await anext(alice_in))["params"] == {"uri": X}
                assert (await anext(bob_in))["params"] == {"uri": X}
