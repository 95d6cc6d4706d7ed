"""A modern child's own tasks, mapped under the gateway's ids (``TaskStore.adopt``): bounded per
client and per store, and no client loses a mapping to another that holds more."""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

import anyio
import pytest

from gateway.protocol import tasks as rules
from gateway.protocol.versions import Era
from gateway.relay.client import ClientContext
from gateway.relay.tasks import TaskStore
from gateway.stdio.child import StdioChild

pytestmark = pytest.mark.anyio

CHILD = cast(StdioChild, object())  # only kept by the mapping


def handle(n: int, ttl_ms: int = 60_000) -> dict[str, Any]:
    return {"resultType": "task", "taskId": f"child-{n}", "status": "working", "ttlMs": ttl_ms}


def client(who: str) -> ClientContext:
    return ClientContext(Era.MODERN, "2026-07-28", principal=who)


def holders(store: TaskStore) -> Counter[str]:
    return Counter(passed.principal for passed in store._passed.values())


async def test_a_clients_mappings_past_its_share_replace_its_own_oldest_only() -> None:
    async with anyio.create_task_group() as tg:
        store = TaskStore("srv", task_group=tg, clock=lambda: 1000.0)
        bob = store.adopt(CHILD, handle(0), client("bob"))["taskId"]
        first = store.adopt(CHILD, handle(1), client("alice"))["taskId"]
        for n in range(2, rules.MAX_HELD_TASKS_PER_PRINCIPAL + 2):
            store.adopt(CHILD, handle(n), client("alice"))
        assert holders(store) == {"alice": rules.MAX_HELD_TASKS_PER_PRINCIPAL, "bob": 1}
        assert first not in store._passed  # alice's oldest gave way
        assert bob in store._passed  # bob's never does for alice


async def test_with_the_store_full_the_client_holding_the_most_gives_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rules, "MAX_TASKS", 6)
    async with anyio.create_task_group() as tg:
        store = TaskStore("srv", task_group=tg, clock=lambda: 1000.0)
        for n, who in enumerate(["alice", "alice", "alice", "alice", "bob", "carol"]):
            store.adopt(CHILD, handle(n), client(who))
        store.adopt(CHILD, handle(6), client("dave"))  # full: alice's oldest makes room
        assert holders(store) == {"alice": 3, "bob": 1, "carol": 1, "dave": 1}
        for n in (7, 8):  # new clients: alice, holding the most, gives way again, not bob or carol
            store.adopt(CHILD, handle(n), client(f"new{n}"))
        assert holders(store) == {"alice": 1, "bob": 1, "carol": 1, "dave": 1, "new7": 1, "new8": 1}
        for n in range(9, 30):  # even shares: the oldest mapping gives way; the store stays bounded
            store.adopt(CHILD, handle(n), client(f"new{n}"))
            assert len(store._passed) == rules.MAX_TASKS
        assert list(holders(store)) == [f"new{n}" for n in range(24, 30)]


async def test_a_mapping_is_kept_for_the_childs_ttl_but_never_past_the_servers() -> None:
    async with anyio.create_task_group() as tg:
        store = TaskStore("srv", rules.TaskPolicy(ttl=600.0), task_group=tg, clock=lambda: 1000.0)
        short = store.adopt(CHILD, handle(0, ttl_ms=30_000), client("alice"))
        long = store.adopt(CHILD, handle(1, ttl_ms=10**12), client("alice"))
        assert store._passed[short["taskId"]].expires_at == 1030.0
        assert store._passed[long["taskId"]].expires_at == 1600.0
        assert (short["ttlMs"], long["ttlMs"]) == (30_000, 600_000)  # what the client is told, too
