"""Task storage is fair and accounted (issue #38 items 4 and 5), with fake children in process.

A task belongs to its client key (``ClientContext.charged``): the principal, or for an
anonymous client its peer address (``anonymous@ADDRESS``), as every other limit. Each owner has
a share of its server's store (``MAX_HELD_TASKS_PER_PRINCIPAL``): past it, its further calls
run synchronously, and nobody else's tasks are touched. Kept outcomes are counted as the bytes
stored (their serialized form), per owner and over the whole process (``MAX_KEPT_BYTES``).

Clients on different addresses are ``httpx.ASGITransport(client=(ADDRESS, PORT))``; a task's end
is awaited on the store's change event, never polled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import orjson
import pytest

from gateway.protocol import tasks as rules
from gateway.relay import tasks as tasks_module
from gateway.relay.router import Router
from gateway.relay.server_config import Isolation, ServerConfig
from gateway.relay.tasks import TaskStore
from gateway.stdio.pool import PoolSettings
from tests.component.fakechild import FakeBackend, Script, fake_backend
from tests.component.harness import FAKE_SPEC, WAIT, Gateway, in_process_servers
from tests.gateway_server import MODERN_META, modern_headers
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

BOUND = 60.0
WITH_TASKS = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {rules.EXTENSION: {}}}}
IDENTITY: dict[str, Any] = {"principal_header": "X-User", "trusted_proxies": ["127.0.0.0/8"]}


class Client:
    """One client of the gateway: its own peer address, and a principal when given (``X-User``)."""

    def __init__(self, gw: Gateway, store: TaskStore, address: str, user: str | None = None) -> None:
        transport = httpx.ASGITransport(app=gw.app, client=(address, 40000))
        self.http = httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=WAIT)
        self.url, self.store = gw.url, store
        self.user = {"x-user": user} if user else {}
        self.ids = iter(range(1_000_000))

    async def post(self, method: str, params: dict[str, Any], name: str | None = None) -> Any:
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        reply = await self.http.post(self.url, headers={**modern_headers(method, name), **self.user}, json=body)
        assert reply.status_code == 200, reply.text
        return reply.json()

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        params = {"name": tool, "arguments": arguments, "_meta": {**MODERN_META, **WITH_TASKS}}
        result: dict[str, Any] = (await self.post("tools/call", params, tool))["result"]
        return result

    async def task(self, tool: str, **arguments: Any) -> str:
        """A call that must become a task: its id."""
        result = await self.call(tool, **arguments)
        assert result["resultType"] == "task", result
        return str(result["taskId"])

    async def get(self, task_id: str) -> dict[str, Any]:
        params = {"taskId": task_id, "_meta": {**MODERN_META, **WITH_TASKS}}
        reply: dict[str, Any] = await self.post(rules.GET, params, task_id)
        return reply

    async def ended(self, task_id: str) -> None:
        with anyio.fail_after(WAIT):
            while self.store.status(task_id) not in rules.TERMINAL:
                await self.store.changed()


@asynccontextmanager
async def task_gateway(backend: FakeBackend, **app_options: Any) -> AsyncIterator[tuple[Gateway, TaskStore]]:
    # "hold" and "echo" become tasks for a client that opts in; a dual child serves modern calls
    # modern-style, so held calls share one child. No first round: these tools never ask, and a
    # held call would otherwise wait out the whole round (1 s) before its handle, 32 times.
    server = ServerConfig(
        "test", FAKE_SPEC, PoolSettings(), Isolation.SHARED, task_tools=("hold", "echo"), task_first_round=0
    )
    async with in_process_servers([Router(server, backend=backend)], **app_options) as gw:
        yield gw, gw.app.state.task_stores["test"]


async def test_anonymous_clients_on_two_addresses_are_two_owners_in_the_task_store() -> None:
    # One address's flood neither evicts another address's unread result nor takes its running cap.
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era="dual")) as backend, task_gateway(backend) as (gw, store):
            flooder, other = Client(gw, store, "127.0.0.2"), Client(gw, store, "127.0.0.3")
            unread = await other.task("echo", message="the other address's result")
            await other.ended(unread)
            held = [await flooder.task("hold", n=n) for n in range(rules.MAX_TASKS_PER_PRINCIPAL)]
            await backend.wait_calls(rules.MAX_TASKS_PER_PRINCIPAL, "hold")
            # The flooder is at its running cap: its next call runs synchronously; the other's does not.
            assert (await flooder.call("echo", message="now"))["content"][0]["text"] == "now"
            second = await other.task("echo", message="still a task")
            for call in backend.running_calls("hold"):
                call.release()
            for task_id in held:
                await flooder.ended(task_id)
            while store.held("anonymous@127.0.0.2") < rules.MAX_HELD_TASKS_PER_PRINCIPAL:
                await flooder.ended(await flooder.task("echo", message="x" * 1000))
            # At its share (none read): the flooder's calls run synchronously, nothing of anyone dropped.
            assert (await flooder.call("echo", message="synchronous"))["resultType"] == "complete"
            assert store.held("anonymous@127.0.0.2") == rules.MAX_HELD_TASKS_PER_PRINCIPAL
            read = await other.get(unread)
            assert read["result"]["status"] == rules.COMPLETED
            assert read["result"]["result"]["content"][0]["text"] == "the other address's result"
            assert (await other.get(second))["result"]["status"] == rules.COMPLETED
            # Each address's tasks are its own: the other address's id is unknown to the flooder.
            assert (await flooder.get(unread))["error"]["code"] == -32602


async def test_one_principals_flood_leaves_anothers_tasks_working_and_read_results_give_way() -> None:
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="dual")) as backend,
            task_gateway(backend, **IDENTITY) as (gw, store),
        ):
            alice, bob = Client(gw, store, "127.0.0.2", "alice"), Client(gw, store, "127.0.0.2", "bob")
            floods = []
            for n in range(rules.MAX_HELD_TASKS_PER_PRINCIPAL):
                floods.append(await alice.task("echo", message=f"never read {n}"))
                await alice.ended(floods[-1])
            assert (await alice.call("echo", message="over her share"))["resultType"] == "complete"
            # Bob, meanwhile, makes and reads tasks as ever (alice's flood is hers alone).
            async with anyio.create_task_group() as tg:
                for n in range(4):

                    async def bobs(n: int = n) -> None:
                        task_id = await bob.task("echo", message=f"bob {n}")
                        await bob.ended(task_id)
                        got = await bob.get(task_id)
                        assert got["result"]["result"]["content"][0]["text"] == f"bob {n}"

                    tg.start_soon(bobs)
            # Alice reads her oldest: at her share, that read result gives way to her next task.
            assert (await alice.get(floods[0]))["result"]["status"] == rules.COMPLETED
            await alice.task("echo", message="after reading one")
            assert (await alice.get(floods[0]))["error"]["code"] == -32602
            assert (await alice.get(floods[1]))["result"]["status"] == rules.COMPLETED  # unread: kept
            assert store.held("alice") == rules.MAX_HELD_TASKS_PER_PRINCIPAL


async def test_kept_outcomes_are_counted_as_stored_and_held_within_the_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    # Small bounds, so a few 10 KB results reach them: 40 KB per owner, 64 KB per process.
    monkeypatch.setattr(rules, "MAX_BYTES_PER_PRINCIPAL", 40_000)
    monkeypatch.setattr(rules, "MAX_KEPT_BYTES", 64_000)
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="dual")) as backend,
            task_gateway(backend, **IDENTITY) as (gw, store),
        ):
            alice, bob, carol = (Client(gw, store, "127.0.0.2", who) for who in ("alice", "bob", "carol"))
            mine: dict[str, list[str]] = {"alice": [], "bob": [], "carol": []}

            async def make(client: Client, who: str, count: int) -> None:
                for n in range(count):
                    task_id = await client.task("echo", message=f"{who} {n} " + "x" * 10_000)
                    await client.ended(task_id)
                    mine[who].append(task_id)

            async with anyio.create_task_group() as tg:
                tg.start_soon(make, alice, "alice", 8)
                tg.start_soon(make, bob, "bob", 2)
            await make(carol, "carol", 2)

            kept = {who: [t for t in ids if store.snapshot(t) is not None] for who, ids in mine.items()}
            stored = sum(task.size for ids in kept.values() for t in ids if (task := store.snapshot(t)) is not None)
            assert store.kept_bytes() == store.outcomes.bytes.used == stored <= 64_000
            assert all(store.kept_bytes(who) <= 40_000 for who in mine)
            # Bob and carol hold under an even share: none of theirs gave way; alice's oldest did.
            assert kept["bob"] == mine["bob"]
            assert kept["carol"] == mine["carol"]
            assert kept["alice"] == mine["alice"][-len(kept["alice"]) :]
            assert len(kept["alice"]) < 8
            # What is counted is what a client reads back, byte for byte.
            reply, task = await bob.get(mine["bob"][0]), store.snapshot(mine["bob"][0])
            assert task is not None
            assert len(orjson.dumps(reply["result"]["result"])) == task.size


async def test_a_principal_calling_on_at_its_bounds_is_logged_a_few_times_not_once_a_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With the notes' clock stopped the bucket never refills: its burst is logged, the rest
    # counted, and the count reported with the first line once the clock moves on.
    clock = [1000.0]
    monkeypatch.setattr(tasks_module, "_monotonic", lambda: clock[0])
    calls = 4 * tasks_module.SYNCHRONOUS_NOTES_BURST
    with anyio.fail_after(BOUND), recording("gateway.tasks") as records:
        async with fake_backend(Script(era="dual")) as backend, task_gateway(backend) as (gw, store):
            flooder = Client(gw, store, "127.0.0.2")
            held = [await flooder.task("hold", n=n) for n in range(rules.MAX_TASKS_PER_PRINCIPAL)]
            await backend.wait_calls(rules.MAX_TASKS_PER_PRINCIPAL, "hold")
            for n in range(calls):  # at its running cap: each call runs synchronously
                assert (await flooder.call("echo", message=f"{n}"))["content"][0]["text"] == f"{n}"
            notes = [r.getMessage() for r in records.records if "runs synchronously" in r.getMessage()]
            assert len(notes) == tasks_module.SYNCHRONOUS_NOTES_BURST
            clock[0] += 1 / tasks_module.SYNCHRONOUS_NOTES_RATE
            await flooder.call("echo", message="later")
            later = [r.getMessage() for r in records.records if "runs synchronously" in r.getMessage()]
            assert len(later) == tasks_module.SYNCHRONOUS_NOTES_BURST + 1
            left_out = calls - tasks_module.SYNCHRONOUS_NOTES_BURST
            assert f"({left_out} more calls ran synchronously since the last such line, not logged)" in later[-1]
            for call in backend.running_calls("hold"):
                call.release()
            for task_id in held:
                await flooder.ended(task_id)
