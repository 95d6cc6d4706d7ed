"""Who owns which task, over fake children (issue #27, "structured concurrency throughout").

- A router opens a pool with ``TaskGroup.start`` (``gateway.relay.pools``): the pool is entered
  inside the started task, so a failure to enter it reaches the request that asked, and no
  pool that never ran is returned or kept; a request that waited for that pool opens one
  itself; a request cancelled while its pool opens leaves nothing behind.
- A parked MRTR call's keeper and a call running as a task are tasks of the service's task
  group (``gateway.relay.service``): they end with the app's lifespan, the keeper while its
  child still runs (the routers' groups close after the service's).
- No lock is held across a child's answer: a child that never answers ``resources/subscribe``
  holds up no other client's listen (the subscription counts once held one lock per server
  across it, with no timeout).
- The drain a signal starts is a task of the server's main loop (``gateway.server``), not a
  task nobody holds: it ends when the main loop does.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from gateway.http.drain import Drain
from gateway.protocol import tasks as task_rules
from gateway.protocol.handshake import META_CLIENT_CAPABILITIES
from gateway.relay.router import Router
from gateway.relay.server_config import Isolation, ServerConfig
from gateway.server import DrainingServer
from gateway.stdio.pool import Pool, PoolSettings
from tests.component.fakechild import FakeBackend, FakeChild, JsonObject, Script, fake_backend
from tests.component.harness import FAKE_SPEC, in_process_gateway, lifespan
from tests.gateway_server import MODERN_META, app_for, modern_call, modern_headers

pytestmark = pytest.mark.anyio

BOUND = 20.0
BASE_URL = "http://127.0.0.1"
SAMPLE = {"messages": [{"role": "user", "content": {"type": "text", "text": "say hi"}}], "maxTokens": 5}


class EnteringRefused(Exception):
    """What a pool raises on entering, in these tests."""


def principal_router(backend: FakeBackend) -> Router:
    """A router whose pools are opened on demand (one per principal): none pre-warms."""
    return Router(ServerConfig("test", FAKE_SPEC, PoolSettings(), Isolation.PRINCIPAL), backend=backend)


def refuse_first_entry(monkeypatch: pytest.MonkeyPatch, entering: anyio.Event, go_on: anyio.Event) -> None:
    """The first pool entered signals ``entering``, waits for ``go_on`` and raises; the others run."""
    original = Pool._run
    entries = 0

    @asynccontextmanager
    async def run(self: Pool) -> AsyncIterator[Pool]:
        nonlocal entries
        entries += 1
        if entries == 1:
            entering.set()
            await go_on.wait()
            raise EnteringRefused(self.label)
        async with original(self) as pool:
            yield pool

    monkeypatch.setattr(Pool, "_run", run)


async def test_a_pool_that_fails_to_enter_raises_to_its_caller_and_is_not_kept_and_a_waiter_opens_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entering, go_on = anyio.Event(), anyio.Event()
    refuse_first_entry(monkeypatch, entering, go_on)
    outcomes: dict[str, object] = {}
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, principal_router(backend) as router:

            async def ask(who: str) -> None:
                try:
                    outcomes[who] = await router.pool_for("alice", None, {})
                except EnteringRefused as exc:
                    outcomes[who] = exc

            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, "first")
                await entering.wait()  # the first request's pool is being entered
                assert len(router.pools) == 1  # registered while it opens, so others wait for it
                tg.start_soon(ask, "waiter")
                await anyio.wait_all_tasks_blocked()  # the waiter waits for that opening
                assert "waiter" not in outcomes
                go_on.set()
            assert isinstance(outcomes["first"], EnteringRefused)
            opened = outcomes["waiter"]
            assert isinstance(opened, Pool)  # its own, opened once the first had failed
            assert list(router.pools.values()) == [opened]
            async with opened.lease() as child:  # it runs: a child serves it
                assert child.info is not None


async def test_a_request_cancelled_while_its_pool_opens_leaves_no_pool_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    entering, never = anyio.Event(), anyio.Event()
    refuse_first_entry(monkeypatch, entering, never)
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, principal_router(backend) as router:
            async with anyio.create_task_group() as tg:

                async def ask() -> None:
                    await router.pool_for("alice", None, {})

                tg.start_soon(ask)
                await entering.wait()
                tg.cancel_scope.cancel()  # the client went away while its pool was being entered
            assert router.pools == {}
            pool = await router.pool_for("alice", None, {})  # a new request opens a new pool
            assert list(router.pools.values()) == [pool]


class KeeperWatch(logging.Handler):
    """Notes, when the keeper of a parked call says it ended, why, and whether its child runs."""

    def __init__(self, child: FakeChild) -> None:
        super().__init__()
        self.child = child
        self.ended: list[tuple[str, bool]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "parked tools/call ended" in message:
            self.ended.append((message, self.child.is_running))


async def test_a_parked_call_is_ended_by_its_keeper_when_the_lifespan_ends_while_its_child_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    call = modern_call(1, "ask", {"method": "sampling/createMessage", "params": SAMPLE})
    call["params"]["_meta"][META_CLIENT_CAPABILITIES] = {"sampling": {}}
    mrtr = logging.getLogger("gateway.mrtr")
    caplog.set_level(logging.INFO, logger="gateway.mrtr")  # the keeper says so at INFO
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era="legacy")) as backend:
            async with in_process_gateway(backend) as gw:
                first = (await gw.http.post(gw.url, headers=modern_headers("tools/call", "ask"), json=call)).json()
                assert first["result"]["resultType"] == "input_required"
                [parked] = backend.running_calls("ask")  # held at the child: its question is unanswered
                watch = KeeperWatch(parked.child)
                mrtr.addHandler(watch)
            mrtr.removeHandler(watch)
            # The service's task group (the keeper's) closed before the routers' (the child's).
            assert watch.ended == [("test: parked tools/call ended: the gateway is stopping", True)]
            assert not parked.child.is_running  # and then the child was stopped


async def test_a_call_running_as_a_task_ends_with_the_lifespan_not_after_it() -> None:
    server = ServerConfig("test", FAKE_SPEC, PoolSettings(), task_tools=("hold",))
    call = modern_call(1, "hold")
    call["params"]["_meta"][META_CLIENT_CAPABILITIES] = {"extensions": {task_rules.EXTENSION: {}}}
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era="modern")) as backend:
            app = app_for(Router(server, backend=backend))
            async with lifespan(app):
                store = app.state.service.by_name["test"].relay.tasks
                async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as http:
                    reply = await http.post("/mcp", headers=modern_headers("tools/call", "hold"), json=call)
                    created = reply.json()["result"]
                    assert created["resultType"] == "task"  # at once; the call goes on as a task
                [held] = await backend.wait_calls(1, "hold")
                assert store.live() == 1
            # The run was a task of the service's group: it ended (failed: the gateway stopped)
            # when the lifespan did, its call at the child never answered.
            assert store.status(created["taskId"]) == "failed"
            assert store.live() == 0
            assert not held.is_released


IDENTITY: dict[str, Any] = {"principal_header": "X-User", "trusted_proxies": ["127.0.0.0/8"]}
SUBSCRIBING: JsonObject = {"tools": {"listChanged": True}, "resources": {"subscribe": True}}


def listen_request(listen_id: str, uri: str) -> JsonObject:
    params = {"notifications": {"resourceSubscriptions": [uri]}, "_meta": MODERN_META}
    return {"jsonrpc": "2.0", "id": listen_id, "method": "subscriptions/listen", "params": params}


async def test_a_child_that_does_not_answer_subscribe_holds_up_no_other_clients_listen() -> None:
    stuck_arrived, release_stuck = anyio.Event(), anyio.Event()
    subscribed: list[FakeChild] = []

    async def subscribe(child: FakeChild, params: JsonObject) -> JsonObject:
        subscribed.append(child)
        if len(subscribed) == 1:  # the first child asked (alice's) answers only when released
            stuck_arrived.set()
            await release_stuck.wait()
        return {}

    script = Script(era="legacy", capabilities=SUBSCRIBING, on_request={"resources/subscribe": subscribe})
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(script) as backend,
            in_process_gateway(backend, isolation=Isolation.PRINCIPAL, **IDENTITY) as gw,
        ):
            headers = modern_headers("subscriptions/listen")
            alice = gw.open(listen_request("a", "file:///x"), {**headers, "X-User": "alice"})
            async with alice as stuck:
                await stuck_arrived.wait()  # alice's child holds her subscribe (a per-server lock would be held now)
                async with gw.open(listen_request("b", "file:///x"), {**headers, "X-User": "bob"}) as fine:
                    ack = await fine.next_message()  # bob's child answers at once: his listen goes on
                    assert ack is not None
                    assert ack["method"] == "notifications/subscriptions/acknowledged"
                    assert ack["params"]["notifications"] == {"resourceSubscriptions": ["file:///x"]}
                    assert stuck.sent_nothing()  # alice's is still waiting for her child
                    assert subscribed[0] is not subscribed[1]  # each on a child of their own pool
                release_stuck.set()
                late = await stuck.next_message()
                assert late is not None
                assert late["params"]["notifications"] == {"resourceSubscriptions": ["file:///x"]}


async def asgi_app(scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError("never called: the test runs the server's main loop without a socket")


def drain_tasks() -> list[asyncio.Task[Any]]:
    """The tasks running the drain: named for it (anyio's), or a bare task of its coroutine."""
    return [task for task in asyncio.all_tasks() if "_drain_then_exit" in f"{task.get_name()} {task.get_coro()!r}"]


async def test_the_drain_a_signal_starts_ends_with_the_servers_main_loop() -> None:
    drain = Drain()
    drain.enter()  # a request in flight that never ends: the drain waits for it
    config = uvicorn.Config(asgi_app, lifespan="off", log_level="warning")
    config.load()
    server = DrainingServer(config, drain, budget=3600)
    try:
        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.main_loop)
                await anyio.wait_all_tasks_blocked()
                server.handle_exit(signal.SIGTERM, None)  # the first signal: drain
                await drain.ending.wait()  # the drain runs: it waits for the request in flight
                assert drain_tasks() != []
                server.handle_exit(signal.SIGTERM, None)  # the second: stop now (main_loop returns)
            assert drain_tasks() == []  # the drain ended with the main loop, not left pending
    finally:
        drain.leave()
