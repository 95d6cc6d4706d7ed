"""The roots refresh before a legacy session's call holds nothing across I/O or a ``yield``
(issue #27 item 4).

A child that caches roots (server-everything) is told ``notifications/roots/list_changed``
before a call of another session than the one whose roots it holds, and the child's
``roots/list`` goes to that session on the call's stream (``gateway.relay.shared_settings``).
The refresh used to hold a per-pool lock across the notify, the wait for the question, the
``yield`` of that question to the HTTP edge and the wait for the client's answer; the relay
iterated it without ``aclosing``. A consumer that closes the exchange while it is suspended
at that ``yield`` (a stalled legacy client's write timeout does) left the lock with a
finished task: every later refresh on the pool waited forever.
"""

from __future__ import annotations

import gc
from dataclasses import replace
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette

from gateway.errors import CODE_NO_CLIENT_INPUT
from gateway.http.drain import DrainGuard
from gateway.http.endpoint import McpEndpoint
from gateway.protocol.jsonrpc import Request, Result
from gateway.relay import events
from gateway.relay.client import ClientContext
from gateway.relay.sessions import LegacySession
from gateway.stdio.pool import PoolSettings
from tests.component.fakechild import FakeChild, JsonObject, Script, fake_backend
from tests.component.harness import FAKE_SPEC, in_process_gateway
from tests.gateway_server import modern_call, modern_headers, open_legacy_session

pytestmark = pytest.mark.anyio

BOUND = 20.0
ROOTS_SPEC = replace(FAKE_SPEC, client_capabilities={"roots": {"listChanged": True}})
DECLARES_ROOTS = {"roots": {"listChanged": True}}


def caching_script(fetched: list[Any]) -> Script:
    """A legacy child that fetches roots after ``initialized`` and on each ``list_changed``."""

    async def fetch(child: FakeChild, params: JsonObject) -> None:
        fetched.append(await child.ask("roots/list", None))
        child.backend.changes.changed()

    handlers = {"notifications/initialized": fetch, "notifications/roots/list_changed": fetch}
    return Script(era="legacy", on_notification=handlers)


def call(request_id: int, message: str) -> Request:
    return Request(request_id, "tools/call", {"name": "echo", "arguments": {"message": message}})


def endpoint_of(app: Starlette) -> McpEndpoint:
    for route in app.routes:
        lane = getattr(route, "endpoint", None)
        if isinstance(lane, DrainGuard) and isinstance(lane.app, McpEndpoint):
            return lane.app
    raise AssertionError("no MCP endpoint in the app")


def session_of(endpoint: McpEndpoint, headers: dict[str, str]) -> LegacySession:
    session = endpoint.sessions.get(headers["mcp-session-id"])
    assert session is not None
    return session


async def test_a_refresh_closed_while_its_question_is_with_the_client_does_not_stop_later_refreshes() -> None:
    fetched: list[Any] = []
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(caching_script(fetched)) as backend,
            in_process_gateway(backend, spec=ROOTS_SPEC, pool=PoolSettings(min_size=1, max_size=1)) as gw,
        ):
            endpoint = endpoint_of(gw.app)
            await backend.until(lambda: len(fetched) == 1)  # the child's own fetch at start (answered by the gateway)
            alice = session_of(endpoint, await open_legacy_session(gw.http, gw.url, capabilities=DECLARES_ROOTS))
            bob = session_of(endpoint, await open_legacy_session(gw.http, gw.url, capabilities=DECLARES_ROOTS))

            # Alice's call, in a task of its own as the HTTP edge runs it: the refresh yields
            # the child's roots/list for her; the edge then closes the exchange while it is
            # suspended there (her writes stalled).
            async def alices_call() -> None:
                alices = endpoint.relay.exchange(call(1, "a"), ClientContext.of_session(alice))
                asked = await alices.__anext__()
                assert isinstance(asked, events.Ask)
                assert asked.message["method"] == "roots/list"
                await alices.aclose()  # type: ignore[attr-defined]

            async with anyio.create_task_group() as tg:
                tg.start_soon(alices_call)
            gc.collect()  # an inner generator left open is finalized now, in another task

            # Bob's call on the same pool, in another task, is refreshed at once, with his roots.
            bobs_roots = [{"uri": "file:///bob"}]
            got: list[events.Emitted] = []

            async def bobs_call() -> None:
                bobs = endpoint.relay.exchange(call(2, "b"), ClientContext.of_session(bob))
                with anyio.fail_after(BOUND / 2):  # the leak: this waited forever for the lock
                    asked = await bobs.__anext__()
                assert isinstance(asked, events.Ask)
                assert asked.message["method"] == "roots/list"
                assert bob.answer_ask(Result(asked.message["id"], {"roots": bobs_roots}))
                got.extend([event async for event in bobs])  # type: ignore[attr-defined]

            async with anyio.create_task_group() as tg:
                tg.start_soon(bobs_call)
            [final] = got
            assert isinstance(final, events.Final)
            assert final.message["result"]["content"] == [{"type": "text", "text": "b"}]
    assert fetched[-1]["result"] == {"roots": bobs_roots}


async def test_a_modern_clients_roots_asked_for_after_its_call_do_not_count_as_given() -> None:
    """The child asks ``roots/list`` only after the modern call ended, so the gateway answers it
    (-31006 here): the child then holds nobody's roots, and the same client's next call tells
    it again that roots changed (the gateway used to note the client as the owner for good)."""
    fetched: list[Any] = []
    go = anyio.Event()

    async def fetch_later(child: FakeChild, params: JsonObject) -> None:
        await go.wait()
        fetched.append(await child.ask("roots/list", None))
        child.backend.changes.changed()

    async def fetch(child: FakeChild, params: JsonObject) -> None:
        fetched.append(await child.ask("roots/list", None))
        child.backend.changes.changed()

    script = Script(
        era="legacy",
        on_notification={"notifications/initialized": fetch, "notifications/roots/list_changed": fetch_later},
    )
    declares = {"io.modelcontextprotocol/clientCapabilities": DECLARES_ROOTS}

    def told(child: FakeChild) -> int:
        return sum(m.get("method") == "notifications/roots/list_changed" for m in child.received)

    with anyio.fail_after(BOUND):
        async with fake_backend(script) as backend, in_process_gateway(backend, spec=ROOTS_SPEC) as gw:
            await backend.until(lambda: len(fetched) == 1)
            [child] = backend.children
            first = await gw.http.post(
                gw.url, headers=modern_headers("tools/call", "echo"), json=modern_call(1, "echo", {}, **declares)
            )
            assert first.json()["result"]["resultType"] == "complete"
            assert told(child) == 1
            go.set()  # the child asks now, with no call in flight: the gateway answers
            await backend.until(lambda: len(fetched) == 2)
            assert fetched[1]["error"]["code"] == CODE_NO_CLIENT_INPUT
            second = await gw.http.post(
                gw.url, headers=modern_headers("tools/call", "echo"), json=modern_call(2, "echo", {}, **declares)
            )
            assert second.json()["result"]["resultType"] == "complete"
            assert told(child) == 2
