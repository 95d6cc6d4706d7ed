"""Legacy sessions subscribed to resources on a modern or dual child (issue #12 item 4), and
on a legacy child that keeps roots, where a session's subscriptions run with its calls (#36).

A 2026-07-28 child has no ``resources/subscribe``: each legacy session's subscriptions
become one ``subscriptions/listen`` at the child with ``resourceSubscriptions``, and the
child's ``resources/updated`` reaches that session's GET stream only. Unsubscribing
replaces the listen (the old one is cancelled at the child); ending the session closes it.

Order is the witness, never time: the test child sends updates in the order it is told,
so a session's *first* message on its GET stream shows what did (and did not) come before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway.relay.server_config import DualEra, RootsKeying
from tests.conftest import server_spec
from tests.filewatch import wait_until
from tests.gateway_server import BASE_HEADERS, legacy_initialize, running_gateway, sse_messages
from tests.integration.test_shared_settings import call

pytestmark = pytest.mark.anyio

UPDATED = "notifications/resources/updated"
LISTEN = "subscriptions/listen"


async def open_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    init = await http.post(url, headers=BASE_HEADERS, json=legacy_initialize())
    assert init.status_code == 200, init.text
    assert init.json()["result"]["capabilities"]["resources"] == {"subscribe": True}
    return {**BASE_HEADERS, "mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}


async def request(http: httpx.AsyncClient, url: str, headers: dict[str, str], method: str, **params: Any) -> Any:
    body = {"jsonrpc": "2.0", "id": method, "method": method, "params": params}
    reply = await http.post(url, headers=headers, json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


async def updated(http: httpx.AsyncClient, url: str, headers: dict[str, str], uri: str) -> None:
    """Have the child send ``resources/updated`` for ``uri`` (through any session's call)."""
    arguments = {"method": UPDATED, "params": {"uri": uri}}
    answer = await request(http, url, headers, "tools/call", name="notify", arguments=arguments)
    assert "result" in answer, answer


def recorded(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def listen_id(path: Path, uris: list[str]) -> Any:
    [found] = [
        m["id"]
        for m in recorded(path)
        if m.get("method") == LISTEN and m["params"]["notifications"].get("resourceSubscriptions") == uris
    ]
    return found


async def wait_cancelled(record: Path, child_id: Any) -> None:
    """Until the child has read a ``notifications/cancelled`` for ``child_id`` (its stdin record,
    watched with inotify; bounded by the caller)."""

    def told() -> bool:
        return any(
            m.get("method") == "notifications/cancelled" and m["params"].get("requestId") == child_id
            for m in recorded(record)
        )

    await wait_until(record, told)


# Every child is opened in the modern era (``DualEra.MODERN``), so the legacy sessions of these
# tests share one modern child, as they would behind any modern-only server once it is known.
@pytest.mark.parametrize("child_era", ["modern", "dual"])
async def test_each_legacy_session_gets_the_updates_it_subscribed_to_until_it_unsubscribes(
    child_era: str, tmp_path: Path
) -> None:
    record = tmp_path / "stdin.jsonl"
    spec = server_spec("--era", child_era, "--subscribe", "--record", str(record))
    with anyio.fail_after(30):
        async with (
            running_gateway(spec, pool_size=1, dual_era=DualEra.MODERN) as url,
            httpx.AsyncClient(timeout=20) as http,
        ):
            alice, bob, carol = [await open_session(http, url) for _ in range(3)]

            async def subscribe(headers: dict[str, str], *uris: str) -> None:
                for uri in uris:
                    assert await request(http, url, headers, "resources/subscribe", uri=uri) == {
                        "jsonrpc": "2.0",
                        "id": "resources/subscribe",
                        "result": {},
                    }

            async with anyio.create_task_group() as tg:  # the sessions subscribe at the same time
                tg.start_soon(subscribe, alice, "file:///docs", "file:///alice")
                tg.start_soon(subscribe, bob, "file:///bob")
            refused = await request(http, url, carol, "resources/subscribe", uri="bad:thing")
            assert refused["error"]["code"] == -32602  # the child's acknowledgement left it out

            get = {"accept": "text/event-stream"}
            async with (
                http.stream("GET", url, headers={**alice, **get}) as alice_get,
                http.stream("GET", url, headers={**bob, **get}) as bob_get,
                http.stream("GET", url, headers={**carol, **get}) as carol_get,
            ):
                alice_in, bob_in, carol_in = sse_messages(alice_get), sse_messages(bob_get), sse_messages(carol_get)
                await updated(http, url, carol, "file:///docs/a.md")  # alice's only
                await updated(http, url, carol, "file:///bob")
                assert await anext(alice_in) == {
                    "jsonrpc": "2.0",
                    "method": UPDATED,
                    "params": {"uri": "file:///docs/a.md"},
                }
                assert (await anext(bob_in))["params"] == {"uri": "file:///bob"}  # docs/a.md never reached bob

                # Unsubscribing replaces alice's listen: the old one is cancelled at the child.
                unsubscribed = await request(http, url, alice, "resources/unsubscribe", uri="file:///docs")
                assert unsubscribed["result"] == {}
                await updated(http, url, carol, "file:///docs/b.md")  # nobody's now
                await updated(http, url, carol, "file:///alice/1")
                assert (await anext(alice_in))["params"] == {"uri": "file:///alice/1"}
                # A dual child may serve legacy sessions in their own era (initialize): then the
                # subscriptions are its own, and there is no listen to look for.
                as_modern = not [m for m in recorded(record) if m.get("method") == "initialize"]
                if as_modern:
                    await wait_cancelled(record, listen_id(record, ["file:///docs", "file:///alice"]))

                # Carol subscribed to nothing the child took, and got nothing until now.
                await subscribe(carol, "file:///carol")
                await updated(http, url, bob, "file:///carol")
                assert (await anext(carol_in))["params"] == {"uri": "file:///carol"}

                # Ending a session closes its listen at the child.
                assert (await http.delete(url, headers=bob)).status_code == 204
                if as_modern:
                    await wait_cancelled(record, listen_id(record, ["file:///bob"]))
            if as_modern:  # one listen per session and per change, never a legacy subscribe
                assert not [m for m in recorded(record) if m.get("method") == "resources/subscribe"]


async def test_a_modern_child_without_resource_subscriptions_refuses_the_subscribe() -> None:
    with anyio.fail_after(20):
        async with (
            running_gateway(server_spec("--era", "modern"), dual_era=DualEra.MODERN) as url,
            httpx.AsyncClient(timeout=20) as http,
        ):
            init = await http.post(url, headers=BASE_HEADERS, json=legacy_initialize())
            headers = {**BASE_HEADERS, "mcp-session-id": init.headers["mcp-session-id"]}
            refused = await request(http, url, headers, "resources/subscribe", uri="file:///docs")
    assert refused["error"]["code"] == -32601
    assert "resource subscriptions" in refused["error"]["message"]


@pytest.mark.parametrize("loss", ["crash", "end_listens", "end_listens_cancelled"])
async def test_a_sessions_listen_is_opened_again_when_the_child_crashes_or_ends_it(loss: str, tmp_path: Path) -> None:
    record = tmp_path / "stdin.jsonl"
    spec = server_spec("--era", "modern", "--subscribe", "--record", str(record))
    with anyio.fail_after(30):
        async with (
            running_gateway(spec, pool_size=1, dual_era=DualEra.MODERN) as url,
            httpx.AsyncClient(timeout=20) as http,
        ):
            session = await open_session(http, url)
            assert (await request(http, url, session, "resources/subscribe", uri="file:///docs"))["result"] == {}
            async with http.stream("GET", url, headers={**session, "accept": "text/event-stream"}) as get:
                received = sse_messages(get)
                tool, arguments = loss.removesuffix("_cancelled"), {"cancelled": loss.endswith("_cancelled")}
                lost = await request(
                    http, url, session, "tools/call", name=tool, arguments=arguments if tool != "crash" else {}
                )
                if loss == "crash":  # the pool restarts the child; the listen follows it there
                    assert lost["error"]["code"] == -31001
                else:  # the child ends the listens: the session's and the gateway's own (its list changes)
                    assert lost["result"]["content"] == [{"type": "text", "text": "2"}]

                def listens() -> int:  # the session's: those naming resources
                    return sum(
                        1
                        for m in recorded(record)
                        if m.get("method") == LISTEN and "resourceSubscriptions" in m["params"]["notifications"]
                    )

                # Nothing signals the re-opened listen to a client: the child's stdin record is watched.
                await wait_until(record, lambda: listens() >= 2)
                await updated(http, url, session, "file:///docs/after-crash")
                note = await anext(received)
                while note["method"] == "notifications/tools/list_changed":  # the gateway's own listen,
                    note = await anext(received)  # opened again too, takes the child's lists as changed
                assert note["params"] == {"uri": "file:///docs/after-crash"}


ROOTS = {name: [{"uri": f"file:///home/{name}", "name": name}] for name in ("alice", "bob")}


async def test_a_roots_sessions_subscription_runs_where_its_calls_do_so_its_own_changes_reach_it() -> None:
    """Issue #36 item 4: on a server that keeps roots, a session declaring roots has its calls
    run on children given its roots set, and its ``resources/subscribe`` now goes there too:
    the ``resources/updated`` that its own call makes the child send reaches its GET stream,
    and only its (another roots set's session, and a rootless one, get nothing of it)."""
    spec = server_spec("--era", "legacy", "--subscribe", "--cache-roots", client_capabilities={"roots": {}})
    with anyio.fail_after(40):
        async with (
            running_gateway(spec, roots_keying=RootsKeying.ALWAYS) as url,
            httpx.AsyncClient(timeout=20) as http,
        ):
            sessions = {}
            for name in ("alice", "bob", "carol"):
                init = legacy_initialize(capabilities={"roots": {}} if name in ROOTS else {})
                reply = await http.post(url, headers=BASE_HEADERS, json=init)
                assert reply.status_code == 200, reply.text
                sessions[name] = {
                    **BASE_HEADERS,
                    "mcp-session-id": reply.headers["mcp-session-id"],
                    "mcp-protocol-version": "2025-11-25",
                }

            async def send(who: str, method: str, **params: Any) -> dict[str, Any]:
                body = {"jsonrpc": "2.0", "id": f"{who}-{method}", "method": method, "params": params}
                got, _ = await call(http, url, sessions[who], body, ROOTS.get(who))
                return got[-1]

            for name in ("alice", "bob", "carol"):
                assert (await send(name, "resources/subscribe", uri=f"file:///home/{name}/notes"))["result"] == {}
                # The child its calls run on holds its subscription (a real server sends updates
                # only for what the process was subscribed to).
                held = await send(name, "tools/call", name="subscribed", arguments={})
                assert f"file:///home/{name}/notes" in held["result"]["structuredContent"]["uris"], held
            get = {"accept": "text/event-stream"}
            async with (
                http.stream("GET", url, headers={**sessions["alice"], **get}) as alice_get,
                http.stream("GET", url, headers={**sessions["bob"], **get}) as bob_get,
                http.stream("GET", url, headers={**sessions["carol"], **get}) as carol_get,
            ):
                alice_in, bob_in, carol_in = sse_messages(alice_get), sse_messages(bob_get), sse_messages(carol_get)
                for name in ("alice", "bob", "carol"):  # each changes its own resource, on its own children
                    arguments = {"method": UPDATED, "params": {"uri": f"file:///home/{name}/notes"}}
                    assert "result" in await send(name, "tools/call", name="notify", arguments=arguments)
                assert (await anext(alice_in))["params"] == {"uri": "file:///home/alice/notes"}
                assert (await anext(bob_in))["params"] == {"uri": "file:///home/bob/notes"}
                assert (await anext(carol_in))["params"] == {"uri": "file:///home/carol/notes"}
