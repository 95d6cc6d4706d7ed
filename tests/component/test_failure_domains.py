"""Failure domains (issue #37): a failure of the gateway's own code on one child stays with that
child. Its calls fail with a clear error, it is stopped, counted and restarted; every other
principal on the same server and every other server is served, and the gateway stays ready.

Before, an exception injected into one child's stderr pump climbed five task groups and ended
the app's lifespan: every MCP request of every server got 503 while the probes said healthy."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest

from gateway.protocol.attribution import AskPolicy
from gateway.protocol.jsonrpc import Notification
from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from gateway.stdio.pool import Pool, PoolSettings
from tests.component.fakechild import WAIT, FakeBackend, FakeChild, Script, fake_backend
from tests.component.harness import FAKE_SPEC, lifespan
from tests.gateway_server import OPERATOR, app_for, modern_call, modern_headers, operator_tokens

pytestmark = pytest.mark.anyio

IDENTITY: dict[str, Any] = {"principal_header": "X-User", "trusted_proxies": ["127.0.0.0/8"]}
TWO_SHARED = PoolSettings(min_size=2, max_size=2, child_asks=AskPolicy.NEVER)
"""Two children for every principal: a call goes to the one with fewer calls."""
BOOM = "notifications/test/boom"


@dataclass
class TwoServers:
    http: httpx.AsyncClient
    test: FakeBackend  # the children of server "test" (two, shared)
    other: FakeBackend  # the children of server "other"
    routers: list[Router]

    async def call(self, server: str, user: str, tool: str, args: dict[str, Any] | None = None) -> httpx.Response:
        headers = modern_headers("tools/call", tool, **{"x-user": user})
        return await self.http.post(f"/servers/{server}/mcp", headers=headers, json=modern_call(1, tool, args))

    async def pool_status(self) -> dict[str, Any]:
        status = (await self.http.get("/status", headers=OPERATOR)).json()
        server = next(s for s in status["servers"] if s["name"] == "test")
        pool: dict[str, Any] = next(iter(server["pools"].values()))
        return pool


@asynccontextmanager
async def two_servers() -> AsyncIterator[TwoServers]:
    async with fake_backend(Script(era="modern")) as test, fake_backend(Script(era="modern")) as other:
        routers = [
            Router(ServerConfig("test", FAKE_SPEC, TWO_SHARED), backend=test),
            Router(ServerConfig("other", FAKE_SPEC, PoolSettings()), backend=other),
        ]
        app = app_for(routers, operator_tokens=operator_tokens(), **IDENTITY)
        async with lifespan(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=WAIT) as http:
                yield TwoServers(http, test, other, routers)


def holding(backend: FakeBackend) -> list[FakeChild]:
    return [child for child in backend.children if child.running_calls("hold")]


async def fault_one_child_while_others_call(gw: TwoServers, fault: Callable[[FakeChild], Any]) -> FakeChild:
    """Alice's call holds one child of ``test`` and Bob's the other; ``fault`` breaks the gateway
    on Alice's child. Alice's call fails with the fault's error; Bob's, and a call to ``other``,
    are answered. Returns the faulted child."""
    answers: dict[str, httpx.Response] = {}

    async def calling(user: str) -> None:
        answers[user] = await gw.call("test", user, "hold")

    async with anyio.create_task_group() as tg:
        tg.start_soon(calling, "alice")
        await gw.test.wait_calls(1, "hold")
        [faulty] = holding(gw.test)
        tg.start_soon(calling, "bob")
        await gw.test.wait_calls(2, "hold")
        [bobs] = [child for child in holding(gw.test) if child is not faulty]  # the child with fewer calls
        await fault(faulty)
        await gw.test.until(lambda: "alice" in answers)
        other = await gw.call("other", "carol", "echo", {"message": "elsewhere"})
        assert other.status_code == 200
        assert other.json()["result"]["content"][0]["text"] == "elsewhere"
        bobs.running_calls("hold")[0].release()
    error = answers["alice"].json()["error"]
    assert answers["alice"].status_code == 200
    assert error["code"] == -31001
    assert error["data"]["kind"] == "ChildFaultError"
    assert "the gateway hit an internal error on this child" in error["message"]
    assert answers["bob"].status_code == 200
    assert "error" not in answers["bob"].json()
    return faulty


async def the_faulty_child_is_restarted_and_counted(gw: TwoServers, faulty: FakeChild) -> None:
    await gw.test.until(lambda: not faulty.is_running and len(gw.test.running()) == 2)  # after the backoff
    again = await gw.call("test", "dave", "echo", {"message": "still served"})
    assert again.json()["result"]["content"][0]["text"] == "still served"
    pool = await gw.pool_status()
    assert pool["gateway_faults"] == 1
    assert pool["restarts"] >= 1
    assert pool["failing"] is False
    metrics = (await gw.http.get("/metrics")).text
    assert 'mcp_gateway_child_exits_total{pool="shared",reason="gateway_fault",server="test"} 1.0' in metrics
    ready = await gw.http.get("/readyz")
    assert (ready.status_code, ready.text) == (200, "ready\n")


async def test_a_fault_in_one_childs_stderr_pump_stops_that_child_only_and_it_is_restarted() -> None:
    with anyio.fail_after(30):
        async with two_servers() as gw:

            async def break_its_stderr_pump(child: FakeChild) -> None:
                child.break_stderr(RuntimeError("injected into the stderr pump"))

            faulty = await fault_one_child_while_others_call(gw, break_its_stderr_pump)
            await the_faulty_child_is_restarted_and_counted(gw, faulty)


async def test_a_listener_that_fails_in_a_childs_action_task_stops_that_child_only() -> None:
    with anyio.fail_after(30):
        async with two_servers() as gw:

            def failing_listener(pool: Pool, note: Notification) -> None:
                if note.method == BOOM:
                    raise RuntimeError("injected into a listener")

            gw.routers[0].add_listener(failing_listener)

            async def notify_the_listener(child: FakeChild) -> None:
                await child.write({"jsonrpc": "2.0", "method": BOOM})

            faulty = await fault_one_child_while_others_call(gw, notify_the_listener)
            await the_faulty_child_is_restarted_and_counted(gw, faulty)


async def test_when_the_service_fails_after_start_up_readyz_is_503_and_the_serving_says_why() -> None:
    """The lifespan is the last domain: a failure no inner domain contained ends the service;
    ``/readyz`` must say so (before, it said ready: no pool was left to be unready), and
    ``Serving.wait_failed`` wakes the server, which then exits non-zero (``gateway.server``)."""
    with anyio.fail_after(30):
        async with fake_backend(Script(era="modern")) as backend:
            app = app_for(Router(ServerConfig("test", FAKE_SPEC), backend=backend))
            to_app, app_receive = anyio.create_memory_object_stream[dict[str, Any]](4)
            app_send, from_app = anyio.create_memory_object_stream[dict[str, Any]](4)
            scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
            async with to_app, app_receive, app_send, from_app, anyio.create_task_group() as tg:

                async def run_app() -> None:
                    with pytest.raises(ExceptionGroup):  # Starlette raises it on after telling the server
                        await app(scope, app_receive.receive, app_send.send)

                tg.start_soon(run_app)
                await to_app.send({"type": "lifespan.startup"})
                assert (await from_app.receive())["type"] == "lifespan.startup.complete"
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:

                    async def raise_in_the_service() -> None:
                        raise RuntimeError("injected into the service's task group")

                    app.state.service.served[0].relay.tasks.task_group.start_soon(raise_in_the_service)
                    failure = await app.state.serving.wait_failed()
                    assert "injected into the service's task group" in repr(failure.exceptions)
                    assert (await from_app.receive())["type"] == "lifespan.shutdown.failed"
                    ready = await http.get("/readyz")
                    assert (ready.status_code, ready.text) == (503, "not ready: not serving\n")
                    call = await http.post(
                        "/mcp", headers=modern_headers("tools/call", "echo"), json=modern_call(1, "echo")
                    )
                    assert call.status_code == 503


async def test_a_pool_whose_own_task_fails_is_dropped_its_waiters_get_503_and_the_next_request_opens_a_new_one() -> (
    None
):
    one_at_a_time = PoolSettings(min_size=1, max_size=1, max_in_flight=1, child_asks=AskPolicy.NEVER)
    with anyio.fail_after(30):
        async with fake_backend(Script(era="modern")) as test, fake_backend(Script(era="modern")) as other:
            routers = [
                Router(ServerConfig("test", FAKE_SPEC, one_at_a_time), backend=test),
                Router(ServerConfig("other", FAKE_SPEC, PoolSettings()), backend=other),
            ]
            app = app_for(routers, operator_tokens=operator_tokens(), **IDENTITY)
            async with (
                lifespan(app),
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=WAIT
                ) as http,
            ):
                gw = TwoServers(http, test, other, routers)
                [pool] = routers[0].pools.values()

                def fail_in_the_pools_task(*args: Any) -> Any:  # its child's task reports the exit
                    raise RuntimeError("injected into the pool's child task")

                pool.dispatch.exited = fail_in_the_pools_task  # type: ignore[method-assign]
                answers: dict[str, httpx.Response] = {}

                async def calling(user: str, tool: str, args: dict[str, Any] | None = None) -> None:
                    answers[user] = await gw.call("test", user, tool, args)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(calling, "alice", "hold")
                    await test.wait_calls(1, "hold")
                    bob_asked = anyio.Event()
                    ticket = pool.dispatch.ticket

                    def noting_bob(*args: Any) -> Any:
                        bob_asked.set()  # his request then waits, before this test runs again
                        return ticket(*args)

                    pool.dispatch.ticket = noting_bob  # type: ignore[method-assign]
                    tg.start_soon(calling, "bob", "echo", {"message": "waiting"})
                    await bob_asked.wait()
                    assert pool.dispatch.waiting == 1  # for the one child
                    await test.running_calls("hold")[0].child.exit(3)  # its pool's task then fails
                assert answers["alice"].json()["error"]["code"] == -31001  # her child died
                waiter = answers["bob"]
                assert waiter.status_code == 503
                assert "internal error on this pool" in waiter.json()["error"]["message"]
                # The pre-warmed shared pool is opened again without a request, its child warm.
                await test.until(lambda: any(p is not pool for p in routers[0].pools.values()))
                [new_pool] = routers[0].pools.values()
                await new_pool.wait_started()
                warm = new_pool.children()
                again = await gw.call("test", "carol", "echo", {"message": "a new pool"})
                assert again.json()["result"]["content"][0]["text"] == "a new pool"
                assert list(routers[0].pools.values()) == [new_pool]
                assert new_pool.children() == warm  # served by the child warmed before it came
                elsewhere = await gw.call("other", "dave", "echo", {"message": "elsewhere"})
                assert elsewhere.json()["result"]["content"][0]["text"] == "elsewhere"
                ready = await http.get("/readyz")
                assert (ready.status_code, ready.text) == (200, "ready\n")
