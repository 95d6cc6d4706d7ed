"""``SessionSubscriptions``: a legacy session's holdings end with the session, however it ends,
and outlive the child that holds them.

The integration tests (``tests/integration/test_shared_subscriptions.py``) cover a ``DELETE``
and a child's crash or retirement; here the other ends, with a stub child: the idle expiry,
and a session that ends while its subscribe is still at the child; and the carry-over's
edges: sessions that share a URI, a session that ends before it, a pool that has closed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

import anyio
import pytest

from gateway.errors import GatewayUnavailableError
from gateway.protocol.jsonrpc import Request
from gateway.relay.listens import SubscriptionCounts
from gateway.relay.session_subscriptions import SessionSubscriptions
from gateway.relay.sessions import SessionStore
from gateway.stdio.child import StdioChild
from gateway.stdio.pool import Pool
from tests.component.test_subscription_counts import BOUND, StubChild, child

pytestmark = pytest.mark.anyio


class MortalChild(StubChild):
    """A stub child that answers at once and can exit (``die``)."""

    def __init__(self, label: str, pid: int) -> None:
        super().__init__(label)
        self.pid = pid
        self.answer.set()
        self.exited = anyio.Event()

    def die(self) -> None:
        self.exited.set()

    def is_alive(self) -> bool:
        return not self.exited.is_set()

    async def wait_exited(self) -> None:
        await self.exited.wait()

    async def requested(self, count: int) -> None:
        """Until it has been asked ``count`` requests."""
        while len(self.requests) < count:
            self.arrived = anyio.Event()  # set by the next request
            await self.arrived.wait()


class StubPool:
    """What the carry-over uses of a pool: ``lease`` (granted once ``open`` is set; the
    ``closed`` error instead when given), ``server`` and ``label``. ``given_back(n)`` waits
    until ``n`` leases have ended (what was done under them is done)."""

    def __init__(self, *children: MortalChild) -> None:
        self.server = self.label = "test"
        self.children = list(children)
        self.open = anyio.Event()
        self.open.set()
        self.closed: GatewayUnavailableError | None = None
        self.leases: list[tuple[object, str, str | None]] = []
        self.waiting = anyio.Event()
        self.ended = 0
        self._ended = anyio.Event()

    async def given_back(self, count: int) -> None:
        while self.ended < count:
            self._ended = anyio.Event()
            await self._ended.wait()

    @asynccontextmanager
    async def lease(
        self, prefer: StdioChild | None = None, principal: str = "anonymous", method: str | None = None
    ) -> AsyncIterator[StdioChild]:
        self.leases.append((prefer, principal, method))
        self.waiting.set()
        try:
            await self.open.wait()
            if self.closed is not None:
                raise self.closed
            yield child(next(c for c in self.children if c.is_alive()))
        finally:
            self.ended += 1
            self._ended.set()


def pool(stub: StubPool) -> Pool:
    return cast(Pool, stub)


def subscribe(uri: str) -> Request:
    return Request(1, "resources/subscribe", {"uri": uri})


async def test_a_session_that_idles_out_releases_what_it_held() -> None:
    counts, stub = SubscriptionCounts(), MortalChild("one", 1)
    store = SessionStore(idle_timeout=60)
    leaving, staying = store.create("2025-11-25", {}, None), store.create("2025-11-25", {}, None)
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            held = SessionSubscriptions(counts, tg)
            for session, uri in ((leaving, "file:///a"), (leaving, "file:///b"), (staying, "file:///b")):
                assert (await held.handle(session, subscribe(uri), child(stub), pool(StubPool())))["result"] == {}
            staying.last_seen = time.monotonic() + 120  # seen later: it stays
            store.expire(time.monotonic() + 90)  # leaving idled out
            await stub.requested(3)  # the release of leaving's
            tg.cancel_scope.cancel()  # the watcher of the child, for staying's
    assert [(method, uri) for method, uri, _ in stub.requests] == [
        ("resources/subscribe", "file:///a"),
        ("resources/subscribe", "file:///b"),
        ("resources/unsubscribe", "file:///a"),  # file:///b: staying holds it
    ]
    assert leaving.subscriptions == {}
    assert list(staying.subscriptions) == ["file:///b"]
    assert len(counts) == 1
    assert len(held) == 1


async def test_a_subscribe_that_completes_after_its_session_ended_is_released_at_once() -> None:
    counts, stub = SubscriptionCounts(), StubChild("one")
    store = SessionStore()
    session = store.create("2025-11-25", {}, None)
    answers: list[object] = []

    async def run(held: SessionSubscriptions) -> None:
        answers.append(await held.handle(session, subscribe("file:///a"), child(stub), pool(StubPool())))

    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            held = SessionSubscriptions(counts, tg)
            tg.start_soon(run, held)
            await stub.arrived.wait()
            store.end(session.id)  # DELETE while the child has the subscribe
            stub.answer.set()
    assert [method for method, _, _ in stub.requests] == ["resources/subscribe", "resources/unsubscribe"]
    assert session.subscriptions == {}
    assert len(counts) == 0


async def test_two_sessions_holding_a_uri_on_a_child_that_exits_hold_it_on_a_new_child_with_one_subscribe(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counts, old, new = SubscriptionCounts(), MortalChild("old", 101), MortalChild("new", 102)
    stub_pool = StubPool(old, new)
    store = SessionStore()
    alice, bob = store.create("2025-11-25", {}, None), store.create("2025-11-25", {}, None)
    caplog.set_level(logging.INFO, "gateway.relay.session_subscriptions")
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            held = SessionSubscriptions(counts, tg)
            for session, uri in ((alice, "file:///x"), (bob, "file:///x"), (alice, "file:///a")):
                assert (await held.handle(session, subscribe(uri), child(old), pool(stub_pool)))["result"] == {}
            old.die()
            await stub_pool.given_back(2)  # one lease per session
            tg.cancel_scope.cancel()  # the watcher of the new child
    assert alice.subscriptions == {"file:///x": child(new), "file:///a": child(new)}
    assert bob.subscriptions == {"file:///x": child(new)}
    assert sorted(uri for method, uri, _ in new.requests) == ["file:///a", "file:///x"]  # X once for both
    assert {method for method, _, _ in new.requests} == {"resources/subscribe"}
    assert len(counts) == 2  # (new, X) held twice, (new, A) once; nothing of the old child
    assert [(prefer, principal) for prefer, principal, _ in stub_pool.leases] == [(None, "anonymous")] * 2
    records = [r for r in caplog.records if getattr(r, "event", None) == "subscriptions_moved"]
    assert (
        sorted((r.session, r.old_pid, r.new_pid, r.count) for r in records)
        == sorted(  # type: ignore[attr-defined]
            [(alice.id[:8], 101, 102, 2), (bob.id[:8], 101, 102, 1)]
        )
    )


async def test_a_session_that_ends_before_the_carry_over_holds_nothing_afterwards() -> None:
    counts, old, new = SubscriptionCounts(), MortalChild("old", 101), MortalChild("new", 102)
    stub_pool = StubPool(old, new)
    store = SessionStore()
    leaving, staying = store.create("2025-11-25", {}, None), store.create("2025-11-25", {}, None)
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            held = SessionSubscriptions(counts, tg)
            for session in (leaving, staying):
                assert (await held.handle(session, subscribe("file:///x"), child(old), pool(stub_pool)))["result"] == {}
            stub_pool.open = anyio.Event()  # the restarted child is not up yet
            stub_pool.waiting = anyio.Event()
            old.die()
            await stub_pool.waiting.wait()
            store.end(leaving.id)  # DELETE while its subscriptions wait for a child
            stub_pool.open.set()
            await stub_pool.given_back(2)
            tg.cancel_scope.cancel()
    assert leaving.subscriptions == {}
    assert staying.subscriptions == {"file:///x": child(new)}
    assert [method for method, _, _ in new.requests] == ["resources/subscribe"]
    assert len(counts) == 1
    assert len(held) == 1


async def test_when_the_pool_has_closed_the_carry_over_gives_up_and_a_later_subscribe_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counts, old, new = SubscriptionCounts(), MortalChild("old", 101), MortalChild("new", 102)
    stub_pool = StubPool(old, new)
    store = SessionStore()
    session = store.create("2025-11-25", {}, None)
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            held = SessionSubscriptions(counts, tg)
            assert (await held.handle(session, subscribe("file:///x"), child(old), pool(stub_pool)))["result"] == {}
            stub_pool.closed = GatewayUnavailableError("test: this pool has closed; retry", retry_after=1)
            stub_pool.waiting = anyio.Event()
            old.die()
            await stub_pool.given_back(1)
            assert session.subscriptions == {}
            assert len(counts) == 0
            assert (await held.handle(session, subscribe("file:///x"), child(new), pool(stub_pool)))["result"] == {}
            tg.cancel_scope.cancel()
    assert session.subscriptions == {"file:///x": child(new)}
    assert (
        [r.session for r in caplog.records if getattr(r, "event", None) == "subscriptions_dropped"]
        == [  # type: ignore[attr-defined]
            session.id[:8]
        ]
    )
