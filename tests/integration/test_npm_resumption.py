"""The npm tier of resumption (issue #30): the TypeScript SDK 1.x client, which resumes a cut
SSE stream with ``Last-Event-ID`` by itself, through a proxy that cuts every response after
2 s (``tests.cutting_proxy``), to one gateway and to two replicas behind a round-robin
balancer. Driven by ``tests/npm/resuming_client.mjs``, one node process per client, several
at once; the asserts are on what each client printed (every progress once, in order, then
the result).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from tests.balancer import cluster
from tests.conftest import server_spec
from tests.gateway_server import running_gateway
from tests.integration.test_resumption import COUNTDOWN_STEPS, INTERVAL_MS, through_cutting_proxy

REPO = Path(__file__).resolve().parents[2]
SDK = REPO / ".npm-servers" / "node_modules" / "@modelcontextprotocol" / "sdk"
CLIENT = REPO / "tests" / "npm" / "resuming_client.mjs"

if not (SDK / "dist" / "esm" / "client" / "streamableHttp.js").is_file():
    pytest.skip(
        "the TypeScript SDK is missing; install it with scripts/install-npm-servers.sh", allow_module_level=True
    )

pytestmark = [pytest.mark.npm, pytest.mark.anyio]

DEADLINE = 100.0
CLIENTS = 3


async def sdk_call(url: str, steps: int = COUNTDOWN_STEPS, interval_ms: int = INTERVAL_MS) -> list[Any]:
    """What one TypeScript SDK client printed for a countdown call."""
    args = orjson.dumps({"steps": steps, "interval_ms": interval_ms}).decode()
    done = await anyio.run_process(["node", str(CLIENT), str(SDK), url, "countdown", args], check=False)
    assert done.returncode == 0, done.stderr.decode()
    lines = [orjson.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert lines[-1] == "done", (lines, done.stderr.decode()[-2000:])
    return lines[:-1]


def assert_every_progress_once_then_the_result(lines: list[Any], steps: int = COUNTDOWN_STEPS) -> None:
    assert lines[0] == {"protocolVersion": "2025-11-25"}  # the SDK's own, so a priming event comes first
    assert [line["progress"] for line in lines[1:-1]] == list(range(1, steps + 1))
    assert "error" not in lines[-1], lines[-1]
    assert lines[-1]["result"]["content"][0]["text"] == f"done after {steps} steps"


async def run_clients(url: str) -> list[list[Any]]:
    results: list[list[Any]] = [[] for _ in range(CLIENTS)]

    async def one(n: int) -> None:
        results[n] = await sdk_call(url)

    async with anyio.create_task_group() as tg:
        for n in range(CLIENTS):
            tg.start_soon(one, n)
    return results


@pytest.mark.timeout(DEADLINE + 20)
async def test_typescript_sdk_clients_get_every_progress_once_through_a_cutting_proxy() -> None:
    with anyio.fail_after(DEADLINE):
        async with running_gateway(server_spec()) as url, through_cutting_proxy(url) as (front, proxy):
            results = await run_clients(front)
    for lines in results:
        assert_every_progress_once_then_the_result(lines)
    assert proxy.cuts >= CLIENTS * 3  # each 10 s call was cut several times
    assert sum(1 for method, last in proxy.requests if method == "GET" and last) >= CLIENTS * 3  # resumed


@pytest.mark.timeout(DEADLINE + 20)
async def test_typescript_sdk_clients_resume_on_another_replica() -> None:
    with anyio.fail_after(DEADLINE):
        async with cluster(server_spec(), size=2) as nodes, through_cutting_proxy(nodes.url) as (front, _):
            results = await run_clients(front)
            resumed_at = {hit.backend for hit in nodes.balancer.hits if hit.method == "GET"}
    for lines in results:
        assert_every_progress_once_then_the_result(lines)
    assert resumed_at == {0, 1}
    assert 404 not in nodes.balancer.statuses()


@pytest.mark.timeout(DEADLINE + 20)
async def test_typescript_sdk_clients_honour_polling_streams() -> None:
    """With ``--sse-poll-seconds`` the gateway closes each request stream after a second with a
    ``retry`` hint; the SDK waits that long, resumes, and gets everything once (no proxy)."""
    with anyio.fail_after(DEADLINE):
        async with running_gateway(server_spec(), sse_poll_seconds=1.0) as url:
            results = await run_clients(url)
    for lines in results:
        assert_every_progress_once_then_the_result(lines)
