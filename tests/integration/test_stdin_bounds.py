"""A child that stops reading its stdin holds a bounded amount of the gateway (issue #24 item 2).

Before: the stdin writer queued a request's line before waiting for room, and a cancelled
request's line stayed queued, so a child that answered its handshake and then never read
again grew the gateway by every large call sent to it (54 → 689 MB over three rounds of
60 × 3 MB calls, never freed). Now (``gateway.stdio.writer``):

- what waits for a child's stdin is bounded (``--max-stdin-queue-bytes``), checked before a
  line is queued; a request that does not fit gets 503 (-31004) saying so;
- a request that ends before its line was written (the client left) takes its line back;
- a child whose stdin takes nothing for ``--stdin-stall-timeout`` is stopped and replaced.

The child is tests/servers/testserver.py with ``--deafen-tool``: after its ``deafen`` tool it
never reads stdin again, alive. Several concurrent clients, each on its own connection; the
tests wait on answers and access-log records, never on time.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from gateway.stdio.child import StdioChild
from gateway.stdio.pool import PoolSettings
from tests.conftest import server_spec
from tests.gateway_server import app_for, modern_call, modern_headers, open_legacy_session, serving
from tests.integration.test_hostile_edge import AccessLog, access_log, legacy_call

pytestmark = pytest.mark.anyio

BOUND = 1024 * 1024
"""What may wait for the child's stdin in these tests (``--max-stdin-queue-bytes``)."""
CALL_BYTES = 300 * 1024
"""Each call's argument: about four fit the bound, and every call is larger than the pipe."""
CLIENTS = 10


def only_child(router: Router) -> StdioChild:
    [child] = [m.child for pool in router.pools.values() for m in pool.members if m.child is not None]
    return child


async def records(log: AccessLog, count: int) -> None:
    """Until the access log holds ``count`` records (each request's line, when it ends)."""
    while len(log.records) < count:
        changed = log._changed
        if len(log.records) >= count:
            break
        await changed.wait()


@asynccontextmanager
async def keep_records(name: str) -> AsyncIterator[AccessLog]:
    logger = logging.getLogger(name)
    handler = AccessLog()
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


async def call(http: httpx.AsyncClient, url: str, request_id: int, tool: str, args: dict[str, Any]) -> httpx.Response:
    return await http.post(url, headers=modern_headers("tools/call", tool), json=modern_call(request_id, tool, args))


async def deafened_gateway(stack: AsyncExitStack, **spec_options: Any) -> tuple[Router, str]:
    spec = server_spec("--deafen-tool", max_stdin_queue_bytes=BOUND, **spec_options)
    router = Router(ServerConfig("test", spec, PoolSettings(min_size=1, max_size=1)))
    base = await stack.enter_async_context(serving(app_for(router)))
    return router, f"{base}/mcp"


async def clients(stack: AsyncExitStack, count: int) -> AsyncIterator[httpx.AsyncClient]:
    for _ in range(count):
        yield await stack.enter_async_context(httpx.AsyncClient(timeout=60))


async def test_a_child_that_never_reads_holds_at_most_the_bound_refuses_the_rest_and_frees_it_when_clients_go() -> None:
    with anyio.fail_after(90):
        async with AsyncExitStack() as stack:
            log = await stack.enter_async_context(access_log())
            router, url = await deafened_gateway(stack, stdin_stall_timeout=0)  # never recycled here
            admin = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
            assert (await call(admin, url, 0, "deafen", {})).status_code == 200
            child = only_child(router)
            expected = len(log.records)
            for _round in range(3):
                # Each round: CLIENTS clients send a large call at once and then go away.
                async with AsyncExitStack() as round_clients:
                    https = [http async for http in clients(round_clients, CLIENTS)]
                    refused: list[httpx.Response] = []
                    got_refusal = anyio.Event()

                    async def one(
                        http: httpx.AsyncClient,
                        n: int,
                        refused: list[httpx.Response] = refused,
                        got_refusal: anyio.Event = got_refusal,
                    ) -> None:
                        reply = await call(http, url, n, "echo", {"message": "x" * CALL_BYTES})
                        assert reply.status_code == 503, reply.text
                        refused.append(reply)
                        got_refusal.set()

                    async with anyio.create_task_group() as tg:
                        for n, http in enumerate(https):
                            tg.start_soon(one, http, n)
                        await got_refusal.wait()
                        assert child.stdin_queued <= BOUND
                        error = refused[0].json()["error"]
                        assert error["code"] == -31004
                        assert "not reading its stdin" in error["message"]
                        assert error["data"]["max_stdin_queue_bytes"] == BOUND
                        assert int(refused[0].headers["retry-after"]) >= 1
                        tg.cancel_scope.cancel()  # every client leaves: the calls held at the child end
                # Every request of the round has ended (its access line), the held ones cancelled.
                expected += CLIENTS
                # The lines of the calls that left were taken back; what is left is the cancels
                # of the calls the child did read (a few hundred bytes), none of the calls.
                assert child.stdin_queued < CALL_BYTES
                assert child.is_alive()


async def test_a_child_whose_stdin_stays_full_past_the_stall_timeout_is_stopped_and_replaced() -> None:
    with anyio.fail_after(90):
        async with AsyncExitStack() as stack:
            warnings = await stack.enter_async_context(keep_records("gateway.child"))
            router, url = await deafened_gateway(stack, stdin_stall_timeout=1.0)
            https = [http async for http in clients(stack, 3)]
            assert (await call(https[0], url, 0, "deafen", {})).status_code == 200
            deaf = only_child(router)
            replies: list[httpx.Response] = []
            async with anyio.create_task_group() as tg:
                for n, http in enumerate(https):

                    async def one(http: httpx.AsyncClient = http, n: int = n) -> None:
                        replies.append(await call(http, url, n + 1, "echo", {"message": "y" * CALL_BYTES}))

                    tg.start_soon(one)
            # Every call ended with an error (none hangs), and the child was stopped for it …
            for reply in replies:
                assert reply.status_code in (200, 503), reply.text
                assert reply.json()["error"]["code"] in (-31001, -31004), reply.text
            await deaf.wait_exited()
            assert any("stopped reading its stdin" in r.getMessage() for r in warnings.records)
            # … and its pool serves again with a new child.
            served = await call(https[0], url, 9, "echo", {"message": "back"})
            assert served.status_code == 200
            assert "error" not in served.json(), served.text
            assert only_child(router) is not deaf


async def test_while_a_childs_stdin_is_stalled_other_clients_are_served_by_another_child() -> None:
    """Issue #37 item 4: the pool (at most one child) routes around a child that stopped reading
    (it waits for the pipe past ``STDIN_STALL_NOTICE``) instead of holding every call until the
    stall timeout, here never (0): a modern and a legacy client are answered by a new child."""
    with anyio.fail_after(90):
        async with AsyncExitStack() as stack:
            notes = await stack.enter_async_context(keep_records("gateway.pool"))
            router, url = await deafened_gateway(stack, stdin_stall_timeout=0)
            stuck_client, modern, legacy = [http async for http in clients(stack, 3)]
            assert (await call(stuck_client, url, 0, "deafen", {})).status_code == 200
            deaf = only_child(router)
            async with anyio.create_task_group() as tg:
                # A call larger than the pipe: its write waits, and stays waiting.
                tg.start_soon(call, stuck_client, url, 1, "echo", {"message": "z" * CALL_BYTES})
                routed = await wait_for_record(notes, "has read nothing of its stdin")
                assert str(deaf.pid) in routed
                reply = await call(modern, url, 2, "echo", {"message": "modern"})
                assert reply.status_code == 200, reply.text
                assert reply.json()["result"]["content"][0]["text"] == "modern"
                served_by = await call(modern, url, 4, "pid", {})
                assert served_by.json()["result"]["content"][0]["text"] != str(deaf.pid)  # another child
                session = await open_legacy_session(legacy, url)
                sent = legacy_call(3, "echo", {"message": "legacy"})
                legacy_reply = await legacy.post(url, headers=session, json=sent)
                assert legacy_reply.status_code == 200, legacy_reply.text
                assert "legacy" in legacy_reply.text
                pool = next(iter(router.pools.values()))
                live = [m.child for m in pool.members if m.child is not None]
                assert len(live) == 2
                assert deaf in live
                assert deaf.is_alive()
                # Operators see it (the metrics page answered 500 while a child was stalled).
                metrics = await modern.get(url.replace("/mcp", "/metrics"))
                assert metrics.status_code == 200, metrics.text
                stalled = [line for line in metrics.text.splitlines() if line.startswith("mcp_gateway_children{")]
                assert any('state="stalled"' in line and line.endswith(" 1.0") for line in stalled), stalled
                tg.cancel_scope.cancel()  # the stuck client leaves


async def test_a_child_that_leaves_small_calls_unread_is_routed_around_and_stopped_at_the_stall_timeout() -> None:
    """Calls that fit in the pipe: no write ever waits, so only the looks at the pipe
    (``LineWriter.stalled_since``, once a tick) find them unread. Before, a call written to a
    child that had stopped reading was held until the request timeout (an hour), and the child
    kept getting new calls (a soak had every client of a principal stuck on it in seconds).
    Now the pool routes around it, and the stall timeout stops it and fails what it held."""
    with anyio.fail_after(90):
        async with AsyncExitStack() as stack:
            notes = await stack.enter_async_context(keep_records("gateway.pool"))
            warnings = await stack.enter_async_context(keep_records("gateway.child"))
            router, url = await deafened_gateway(stack, stdin_stall_timeout=4.0)
            stuck_client, modern, legacy = [http async for http in clients(stack, 3)]
            assert (await call(stuck_client, url, 0, "deafen", {})).status_code == 200
            deaf = only_child(router)
            held: list[httpx.Response] = []
            async with anyio.create_task_group() as tg:

                async def small_call() -> None:
                    held.append(await call(stuck_client, url, 1, "echo", {"message": "small"}))

                tg.start_soon(small_call)  # written to the deaf child, the pool's only one
                routed = await wait_for_record(notes, "has read nothing of its stdin")
                assert str(deaf.pid) in routed
                # Other clients are served by another child meanwhile, modern and legacy.
                served_by = await call(modern, url, 2, "pid", {})
                assert served_by.status_code == 200, served_by.text
                assert served_by.json()["result"]["content"][0]["text"] != str(deaf.pid)
                session = await open_legacy_session(legacy, url)
                legacy_reply = await legacy.post(url, headers=session, json=legacy_call(3, "echo", {"message": "l"}))
                assert legacy_reply.status_code == 200, legacy_reply.text
                assert '"text":"l"' in legacy_reply.text.replace(" ", "")
            # The held call ended (the task group waited for it) with the exit error: not held
            # until the request timeout.
            [reply] = held
            assert reply.json()["error"]["code"] == -31001, reply.text
            await deaf.wait_exited()
            stopped = [r.getMessage() for r in warnings.records if "stopped reading its stdin" in r.getMessage()]
            assert stopped
            assert "read nothing of its stdin, and wrote nothing, for 4 s" in stopped[0]


async def wait_for_record(log: AccessLog, text: str) -> str:
    while True:
        changed = log._changed
        for record in log.records:
            if text in (message := record.getMessage()):
                return message
        await changed.wait()
