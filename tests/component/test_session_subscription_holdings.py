"""``SessionSubscriptions``: a legacy session's holdings end with the session, however it ends.

The integration tests (``tests/integration/test_shared_subscriptions.py``) cover a ``DELETE``;
here the other ends, with a stub child: the idle expiry, and a session that ends while its
subscribe is still at the child.
"""

from __future__ import annotations

import time

import anyio
import pytest

from gateway.protocol.jsonrpc import Request
from gateway.relay.listens import SubscriptionCounts
from gateway.relay.session_subscriptions import SessionSubscriptions
from gateway.relay.sessions import SessionStore
from tests.component.test_subscription_counts import BOUND, StubChild, child

pytestmark = pytest.mark.anyio


def subscribe(uri: str) -> Request:
    return Request(1, "resources/subscribe", {"uri": uri})


async def test_a_session_that_idles_out_releases_what_it_held() -> None:
    counts, stub = SubscriptionCounts(), StubChild("one")
    stub.answer.set()
    store = SessionStore(idle_timeout=60)
    leaving, staying = store.create("2025-11-25", {}, None), store.create("2025-11-25", {}, None)
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            held = SessionSubscriptions(counts, tg)
            for session, uri in ((leaving, "file:///a"), (leaving, "file:///b"), (staying, "file:///b")):
                assert (await held.handle(session, subscribe(uri), child(stub)))["result"] == {}
            staying.last_seen = time.monotonic() + 120  # seen later: it stays
            store.expire(time.monotonic() + 90)  # leaving idled out
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
        answers.append(await held.handle(session, subscribe("file:///a"), child(stub)))

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
