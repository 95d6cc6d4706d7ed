"""A modern child's list changes, heard on the gateway's own listen (``gateway.stdio.changes``),
over the fake backend: a 2026-07-28 child says a list changed only on a listen that asked for it."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.protocol.jsonrpc import Notification
from gateway.protocol.subscriptions import LISTEN
from gateway.stdio import changes
from gateway.stdio.launch import open_child
from tests.component.fakechild import Script, fake_backend
from tests.component.harness import FAKE_SPEC
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

BOUND = 10.0
EVERY_LIST = {"tools": {"listChanged": True}, "prompts": {"listChanged": True}, "resources": {"listChanged": True}}


class Heard:
    """What the child's pool would hear (its ``on_notification``), with an event per message."""

    def __init__(self) -> None:
        self.notes: list[Notification] = []
        self.changed = anyio.Event()

    def __call__(self, note: Notification) -> None:
        self.notes.append(note)
        self.changed.set()

    async def until(self, count: int) -> None:
        while len(self.notes) < count:
            self.changed = anyio.Event()
            await self.changed.wait()


async def test_a_modern_childs_list_changes_reach_the_pool_untagged_and_a_tools_change_bumps_the_cache() -> None:
    heard = Heard()
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="modern", capabilities=EVERY_LIST)) as backend,
            open_child(FAKE_SPEC, backend=backend, on_notification=heard) as child,
        ):
            [fake] = backend.children
            await backend.changes.until(lambda: len(fake.listens) == 1)
            [(listen_id, granted)] = fake.listens.items()
            assert granted == {"toolsListChanged": True, "promptsListChanged": True, "resourcesListChanged": True}
            [listen] = [m for m in fake.received if m.get("method") == LISTEN]
            assert listen["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
            generation = child.tools_generation
            assert await fake.list_changed("prompts") == 1
            await heard.until(1)
            assert child.tools_generation == generation  # a prompts change: the tool caches stay
            assert await fake.list_changed("tools") == 1
            await heard.until(2)
            assert child.tools_generation == generation + 1
            assert child.reading(0).in_flight == 0  # the listen is no work the stall check waits on
            assert child.in_flight == 1
            async with child.exchange("tools/call", {"name": "echo", "arguments": {"message": "m"}}) as ex:
                assert ex.stdin_ticket is None  # beside a listen only, a request is written at once
                async for _ in ex:
                    pass
    assert [(n.method, n.params) for n in heard.notes] == [
        ("notifications/prompts/list_changed", None),
        ("notifications/tools/list_changed", None),
    ]
    assert fake.listens == {listen_id: granted}  # open until the child was stopped


async def test_only_the_lists_the_child_says_change_are_asked_for_and_none_on_legacy_or_quiet_children() -> None:
    quiet = {"tools": {}, "prompts": {"listChanged": False}}
    with anyio.fail_after(BOUND):
        tools_only = Script(era="modern", capabilities={"tools": {"listChanged": True}})
        async with fake_backend(tools_only) as backend, open_child(FAKE_SPEC, backend=backend):
            [fake] = backend.children
            await backend.changes.until(lambda: len(fake.listens) == 1)
            assert list(fake.listens.values()) == [{"toolsListChanged": True}]
        for script in (Script(era="modern", capabilities=quiet), Script(era="legacy")):
            async with fake_backend(script) as backend, open_child(FAKE_SPEC, backend=backend) as child:
                assert changes.wanted(child) == {}
                await child.request("ping", None)  # served: nothing more was written before it
            assert [m.get("method") for m in backend.children[0].received if m.get("method") == LISTEN] == []


async def test_a_listen_the_child_ends_is_opened_again(monkeypatch: Any) -> None:
    monkeypatch.setattr(changes, "REOPEN_DELAY", 0.0)
    heard = Heard()
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="modern")) as backend,
            open_child(FAKE_SPEC, backend=backend, on_notification=heard) as child,
        ):
            [fake] = backend.children
            await backend.changes.until(lambda: len(fake.listens) == 1)
            [first] = fake.listens
            del fake.listens[first]
            end = {"resultType": "complete", "_meta": {"io.modelcontextprotocol/subscriptionId": first}}
            await fake.write({"jsonrpc": "2.0", "id": first, "result": end})  # the graceful end
            await heard.until(1)  # open again: a change may have gone unheard meanwhile
            assert [note.method for note in heard.notes] == ["notifications/tools/list_changed"]
            assert len(fake.listens) == 1
            assert first not in fake.listens
            generation = child.tools_generation
            assert await fake.list_changed("tools") == 1  # heard on the new listen
            await heard.until(2)
            assert child.tools_generation == generation + 1


async def test_a_listen_the_child_refuses_is_not_asked_again() -> None:
    with anyio.fail_after(BOUND), recording("gateway.child") as records:
        async with (
            fake_backend(Script(era="modern", refuse_listens=True)) as backend,
            open_child(FAKE_SPEC, backend=backend) as child,
        ):
            await records.wait_for_text("refused the gateway's listen for list changes")
            await child.request("ping", None)
    [fake] = backend.children
    assert [m.get("method") for m in fake.received].count(LISTEN) == 1


async def test_a_failure_of_the_gateways_own_ends_the_listening_not_the_child() -> None:
    def broken(note: Notification) -> None:
        raise RuntimeError("a bug in the gateway")

    with anyio.fail_after(BOUND):
        with recording("gateway.child") as records:
            async with (
                fake_backend(Script(era="modern")) as backend,
                open_child(FAKE_SPEC, backend=backend, on_notification=broken) as child,
            ):
                [fake] = backend.children
                await backend.changes.until(lambda: len(fake.listens) == 1)
                await fake.list_changed("tools")
                await backend.changes.until(lambda: not fake.listens)  # the listening ended: cancelled
                assert child.is_alive()
                await child.request("ping", None)  # serving on
    assert [text for text in records.errors() if "failed listening" in text] == [
        "the gateway failed listening to child fake-server (pid 10000000): RuntimeError('a bug in the gateway')"
    ]
