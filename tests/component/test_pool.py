"""The pool over fake children: lease, least-loaded dispatch, start on demand, crash and
restart, the queue bound. Every wait is on the fake's state changes, bounded by ``fail_after``.

Moved here from tests/integration/test_pool.py (they polled ``/status`` and timed real sleeps):
max-in-flight serialisation, saturation 503 (modern, legacy and batch), a legacy session
staying on its child, idle stop."""

from __future__ import annotations

from collections import Counter
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx
import pytest

from gateway.relay.server_config import DualEra
from gateway.stdio.budget import ChildBudget
from gateway.stdio.pool import Pool, PoolSettings
from tests.component.fakechild import Call, Script, fake_backend, text
from tests.component.harness import FAKE_SPEC, Gateway, in_process_gateway, legacy_call
from tests.gateway_server import modern_call, modern_headers, open_legacy_session

pytestmark = pytest.mark.anyio

BOUND = 20.0


async def call(gw: Gateway, tool: str, args: dict[str, Any] | None = None, request_id: Any = 1) -> httpx.Response:
    return await gw.http.post(
        gw.url, headers=modern_headers("tools/call", tool), json=modern_call(request_id, tool, args or {})
    )


async def post(gw: Gateway, headers: dict[str, str], body: dict[str, Any]) -> None:
    await gw.http.post(gw.url, headers=headers, json=body)


def per_child(calls: list[Call]) -> Counter[int]:
    return Counter(c.child.pid for c in calls)


async def test_concurrent_calls_are_spread_over_the_least_loaded_children() -> None:
    answers: dict[str, httpx.Response] = {}
    with anyio.fail_after(BOUND):
        async with (
            fake_backend() as backend,
            in_process_gateway(backend, pool=PoolSettings(3, 3)) as gw,
            anyio.create_task_group() as tg,
        ):
            for n in range(9):

                async def one(tag: str = f"c{n}") -> None:
                    answers[tag] = await call(gw, "hold", {"tag": tag}, request_id=tag)

                tg.start_soon(one)
            held = await backend.wait_calls(9, "hold")
            assert sorted(per_child(held).values()) == [3, 3, 3]
            for c in reversed(held):
                c.release(text(c.arguments["tag"]))
    assert len(backend.children) == 3
    for tag, reply in answers.items():  # each client got its own answer, under its own id
        assert reply.json()["id"] == tag
        assert reply.json()["result"]["content"][0]["text"] == tag


async def test_max_in_flight_one_serialises_within_a_child_and_parallelises_across_children() -> None:
    settings = PoolSettings(min_size=2, max_size=2, max_in_flight=1)
    done: list[httpx.Response] = []
    with anyio.fail_after(BOUND):
        async with (
            fake_backend() as backend,
            in_process_gateway(backend, pool=settings) as gw,
            anyio.create_task_group() as tg,
        ):
            for n in range(6):

                async def one(tag: str = f"c{n}") -> None:
                    done.append(await call(gw, "hold", {"tag": tag}, request_id=tag))

                tg.start_soon(one)
            for released in range(6):
                # Two at a time, one per child: parallel across children, serial within each.
                expected = min(2, 6 - released)
                await backend.until(lambda n=expected: len(backend.running_calls()) == n)  # type: ignore[misc]
                running = backend.running_calls()
                assert len(per_child(running)) == expected, running
                assert len(backend.calls()) == released + expected  # the others wait in the gateway's queue
                running[0].release()
    assert [r.status_code for r in done] == [200] * 6
    assert len(per_child(backend.calls())) == 2


async def test_a_child_is_started_on_demand_when_every_child_is_busy() -> None:
    settings = PoolSettings(min_size=0, max_size=2, max_in_flight=1)
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, in_process_gateway(backend, pool=settings) as gw:
            assert backend.children == []  # no minimum: nothing is started before a request
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, gw, "hold")
                await backend.wait_calls(1)
                assert len(backend.children) == 1
                tg.start_soon(call, gw, "hold")
                await backend.wait_calls(2)
                assert len(backend.children) == 2
                assert len(per_child(backend.running_calls())) == 2
                for c in backend.running_calls():
                    c.release()


async def test_a_crashed_child_fails_only_its_own_calls_and_is_replaced() -> None:
    answers: dict[str, httpx.Response] = {}
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, in_process_gateway(backend, pool=PoolSettings(2, 2)) as gw:
            async with anyio.create_task_group() as tg:
                for n in range(6):

                    async def one(tag: str = f"c{n}") -> None:
                        answers[tag] = await call(gw, "hold", {"tag": tag}, request_id=tag)

                    tg.start_soon(one)
                held = await backend.wait_calls(6)
                victim, survivor = backend.children
                await victim.exit(3, stderr=["boot ok", "fatal: out of cheese"])
                for c in held:
                    if c.child is survivor:
                        c.release(text(c.arguments["tag"]))
            await backend.until(lambda: len(backend.running()) == 2)  # the replacement
            assert len(backend.children) == 3
            after = await call(gw, "whoami")
            assert after.json()["result"]["structuredContent"]["pid"] in {c.pid for c in backend.running()}
    lost = {c.arguments["tag"] for c in held if c.child is victim}
    assert len(lost) == 3
    for tag, reply in answers.items():
        body = reply.json()
        assert body["id"] == tag
        if tag in lost:
            assert body["error"]["code"] == -31001
            assert "exited with code 3" in body["error"]["message"]
            assert body["error"]["data"]["exit_code"] == 3
            assert "stderr" not in body["error"]["data"]  # the log's (tests/component/test_child_errors.py)
        else:
            assert body["result"]["content"][0]["text"] == tag


async def test_a_child_that_exits_at_start_fails_the_request_with_its_exit() -> None:
    def script(index: int) -> Script:
        return Script(exit_at_start=1, stderr_at_start=("fatal: configured to exit",)) if index == 0 else Script()

    with anyio.fail_after(BOUND):
        async with (
            fake_backend(script) as backend,
            in_process_gateway(backend, pool=PoolSettings(min_size=0, max_size=1)) as gw,
        ):
            failed = (await call(gw, "echo", {"message": "x"})).json()
            assert failed["error"]["message"].startswith("cannot start fake-server")
            assert "exited with code 1 during start-up" in failed["error"]["message"]
            assert len(backend.children) == 1


async def test_saturation_beyond_the_queue_gets_503_with_retry_after() -> None:
    settings = PoolSettings(min_size=1, max_size=1, max_in_flight=1, queue_timeout=0.2)
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, in_process_gateway(backend, pool=settings) as gw:
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, gw, "hold")
                [busy] = await backend.wait_calls(1)
                refused = await call(gw, "echo", {"message": "no room"}, request_id=2)
                busy.release()
            assert (await call(gw, "echo", {"message": "room"})).json()["result"]["content"][0]["text"] == "room"
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == -31004
    assert "no slot freed within 0.2 s" in refused.json()["error"]["message"]
    assert [c.name for c in backend.calls()] == ["hold", "echo"]  # the refused call never reached the child


async def test_a_saturated_pool_answers_legacy_requests_and_batches_with_503_and_keeps_serving() -> None:
    settings = PoolSettings(min_size=1, max_size=1, max_in_flight=1, queue_timeout=0.2)
    with anyio.fail_after(BOUND):
        async with (
            fake_backend() as backend,
            in_process_gateway(backend, pool=settings, dual_era=DualEra.MODERN) as gw,
        ):
            session = await open_legacy_session(gw.http, gw.url, version="2025-03-26")
            body = legacy_call(5, "echo", {"message": "x"})
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, gw, "hold")
                [busy] = await backend.wait_calls(1)
                single = await gw.http.post(gw.url, headers=session, json=body)
                batch = await gw.http.post(gw.url, headers=session, json=[body])
                busy.release()
            assert single.status_code == 503
            assert single.headers["retry-after"] == "1"
            assert single.json()["error"]["code"] == -31004
            assert batch.status_code == 200
            assert batch.json()[0]["error"]["code"] == -31004
            after = await gw.http.post(gw.url, headers=session, json=body)  # the gateway still serves
            assert after.json()["result"]["content"][0]["text"] == "x"


async def test_a_legacy_session_stays_on_the_child_that_first_served_it() -> None:
    with anyio.fail_after(BOUND):
        async with (
            fake_backend() as backend,
            in_process_gateway(backend, pool=PoolSettings(2, 2), dual_era=DualEra.MODERN) as gw,
        ):
            await backend.until(lambda: len(backend.children) == 2)
            session = await open_legacy_session(gw.http, gw.url)
            who = await gw.http.post(gw.url, headers=session, json=legacy_call(1, "whoami"))
            home = who.json()["result"]["structuredContent"]["pid"]
            async with anyio.create_task_group() as tg:
                for n in range(3):
                    # Each call waits for the last to be running: least-loaded dispatch alone
                    # would put the second on the idle child.
                    tg.start_soon(post, gw, session, legacy_call(10 + n, "hold"))
                    await backend.wait_calls(n + 1)
                assert per_child(backend.running_calls()) == {home: 3}
                for c in backend.running_calls():
                    c.release()


async def test_children_above_the_minimum_stop_when_idle() -> None:
    settings = PoolSettings(min_size=0, max_size=2, idle_timeout=0.2)
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, in_process_gateway(backend, pool=settings) as gw:
            assert (await call(gw, "echo", {"message": "x"})).status_code == 200
            [first] = backend.children
            await backend.until(lambda: not first.is_running)  # the maintenance tick retires it
            assert first.returncode == 0  # stopped at stdin close, the ladder's first rung
            assert (await call(gw, "echo", {"message": "again"})).status_code == 200
            assert len(backend.children) == 2


async def test_a_request_arriving_as_the_busy_child_frees_up_does_not_overtake_the_waiter() -> None:
    """Issue #37: B arrives in the very turn the child frees up, before waiter A has run again.
    The pool is driven directly so that nothing can come between the release and B's arrival
    (leaving a lease and entering one do not yield when they need not wait)."""
    served: list[str] = []
    settings = PoolSettings(min_size=1, max_size=1, max_in_flight=1)
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, Pool(FAKE_SPEC, settings, backend=backend) as pool:
            await pool.wait_started()
            busy = pool.lease(principal="busy")
            child = await busy.__aenter__()
            async with anyio.create_task_group() as tg:

                async def waiter_a() -> None:
                    async with pool.lease(principal="a") as mine:
                        assert mine is child
                        served.append("a")

                tg.start_soon(waiter_a)
                await anyio.wait_all_tasks_blocked()
                assert pool.dispatch.waiting == 1  # A queues
                await busy.__aexit__(None, None, None)  # the child frees up: granted to A here
                async with pool.lease(principal="b") as mine:  # B arrives at once, and waits
                    assert mine is child
                    served.append("b")
    assert served == ["a", "b"]


async def test_queued_requests_reach_the_child_in_the_order_they_arrived() -> None:
    settings = PoolSettings(min_size=1, max_size=1, max_in_flight=1)
    tags = ["a", "b", "c", "d"]
    with anyio.fail_after(BOUND):
        async with (
            fake_backend() as backend,
            in_process_gateway(backend, pool=settings) as gw,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(call, gw, "hold", {"tag": "busy"})
            [held] = await backend.wait_calls(1)
            for tag in tags:
                tg.start_soon(call, gw, "hold", {"tag": tag})
                await anyio.wait_all_tasks_blocked()  # queued in the pool before the next comes
            for _ in tags:
                held.release()
                await backend.until(lambda: len(backend.running_calls()) == 1)
                [held] = backend.running_calls()
            held.release()
    assert [c.arguments["tag"] for c in backend.calls()] == ["busy", *tags]


async def test_across_pools_room_in_the_child_budget_goes_to_the_waiter_that_arrived_first() -> None:
    """Issue #37: the gateway runs one child (``--max-children 1``), busy in pool ``busy``; a
    request arrives at each of five other pools, in an order unlike the pools' own, and each is
    held back for room. The busy child frees up: the first to arrive evicts it and is served;
    its child then frees up for the second, and so on. (The pools waiting for room were woken
    in set order: any of them could take it.)"""
    budget = ChildBudget(1)
    settings = PoolSettings(min_size=0, max_size=1, queue_timeout=BOUND * 2)
    arrivals = ["e", "b", "d", "a", "c"]
    served: list[str] = []
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, AsyncExitStack() as stack:

            async def pool(label: str) -> Pool:
                opened = Pool(FAKE_SPEC, settings, backend=backend, budget=budget, label=label)
                return await stack.enter_async_context(opened)

            busy = await pool("busy")
            pools = {label: await pool(label) for label in sorted(arrivals)}
            held = busy.lease(principal="busy")
            await held.__aenter__()  # the gateway's one child
            async with anyio.create_task_group() as tg:
                for label in arrivals:

                    async def waiter(label: str = label) -> None:
                        async with pools[label].lease(principal=label):
                            served.append(label)  # and leaves: its child is idle for the next

                    tg.start_soon(waiter)
                    await anyio.wait_all_tasks_blocked()
                    assert pools[label].dispatch.held_back == 1  # waiting for room, before the next comes
                await held.__aexit__(None, None, None)
    assert served == arrivals
    assert budget.evictions == len(arrivals)
