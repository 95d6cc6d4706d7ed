"""``SubscriptionCounts`` holds no lock across a child's answer (issue #27 item 4).

It used to hold one lock per server across ``resources/subscribe`` with no timeout: one
child that never answered stopped every client's subscribe on every child of the server.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest

from gateway.protocol.jsonrpc import JsonObject, Reply, Result
from gateway.relay.listens import SUBSCRIBE_TIMEOUT, SubscriptionCounts
from gateway.stdio.child import StdioChild

pytestmark = pytest.mark.anyio

BOUND = 10.0


class StubChild:
    """What ``SubscriptionCounts`` uses of a child: ``request`` (held until ``answer`` is
    set, or forever when ``stuck``), ``is_alive`` and ``spec.label``."""

    def __init__(self, label: str, *, stuck: bool = False) -> None:
        self.spec = SimpleNamespace(label=label)
        self.stuck = stuck
        self.requests: list[tuple[str, Any, float | None]] = []
        self.arrived = anyio.Event()
        self.answer = anyio.Event()

    async def request(self, method: str, params: JsonObject | None, *, timeout: float | None = None) -> Reply:
        self.requests.append((method, (params or {}).get("uri"), timeout))
        self.arrived.set()
        if self.stuck:
            await anyio.sleep_forever()
        await self.answer.wait()
        return Result(len(self.requests), {})

    def is_alive(self) -> bool:
        return True


def child(stub: StubChild) -> StdioChild:
    return cast(StdioChild, stub)


async def test_a_child_that_never_answers_subscribe_does_not_hold_up_another_childs_subscribers() -> None:
    counts = SubscriptionCounts()
    stuck, fine = StubChild("stuck", stuck=True), StubChild("fine")
    fine.answer.set()
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            tg.start_soon(counts.acquire, child(stuck), "file:///a")
            await stuck.arrived.wait()
            assert await counts.acquire(child(fine), "file:///a")  # waited for the stuck one's lock before
            tg.cancel_scope.cancel()
    assert stuck.requests == [("resources/subscribe", "file:///a", SUBSCRIBE_TIMEOUT)]  # bounded, not None


async def test_concurrent_holders_of_one_uri_on_one_child_make_one_subscribe_and_one_unsubscribe() -> None:
    counts = SubscriptionCounts()
    stub = StubChild("one")
    got: list[bool] = []

    async def acquire() -> None:
        got.append(await counts.acquire(child(stub), "file:///a"))

    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            tg.start_soon(acquire)
            await stub.arrived.wait()
            tg.start_soon(acquire)  # coalesces on the subscribe in flight
            stub.answer.set()
        assert got == [True, True]
        await counts.release(child(stub), "file:///a")
        assert [method for method, _, _ in stub.requests] == ["resources/subscribe"]  # one holder is left
        await counts.release(child(stub), "file:///a")
    assert [method for method, _, _ in stub.requests] == ["resources/subscribe", "resources/unsubscribe"]
