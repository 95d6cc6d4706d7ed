"""``--workers 3``: one gateway process, three workers on one socket, owner routing between them.

The gateway runs as a real process (``python -m gateway --workers 3 --port 0``); the test
reads each worker's pid and loopback address from its log, then sends requests round-robin
to the workers' own addresses (``tests.balancer``) so that nearly every request reaches a
worker that does not hold the session or parked call. Killing one worker loses only its
own sessions (404, then re-initialize works); a call in flight on another completes.
SIGTERM drains every worker and the gateway exits 0.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream
from mcp import Client
from mcp import types as sdk

from tests.balancer import RoundRobin
from tests.conftest import TEST_SERVER
from tests.gateway_server import (
    MODERN_META,
    modern_headers,
    open_legacy_session,
    parse_sse,
    serving,
)

pytestmark = pytest.mark.anyio

WAIT = 90.0
CALLS = 50
WORKERS = 3
WORKER_LINE = re.compile(r"worker (\d+) of \d+: pid (\d+)")
ADDRESS_LINE = re.compile(r"worker (\d+) of \d+: serving, other workers reach it at (http://\S+)")
SAMPLING = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
RUNNING_LINE = re.compile(r"running on (http://\S+)")


@dataclass
class Gateway:
    process: Process
    url: str = ""
    pids: dict[int, int] = field(default_factory=dict)
    addresses: dict[int, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    ready: anyio.Event = field(default_factory=anyio.Event)
    new_line: anyio.Event = field(default_factory=anyio.Event)  # set (and replaced) at each line

    def worker_urls(self) -> list[str]:
        return [self.addresses[n] for n in sorted(self.addresses)]

    async def wait_for(self, text: str, count: int) -> None:
        """Until ``count`` lines of the log (since the start) contain ``text``."""
        while True:
            new_line = self.new_line
            if sum(text in line for line in self.lines) >= count:
                return
            await new_line.wait()


@asynccontextmanager
async def gateway_with_workers(*child_flags: str, gateway_flags: Sequence[str] = ()) -> AsyncIterator[Gateway]:
    argv = [sys.executable, "-m", "gateway", "--workers", str(WORKERS), "--port", "0", "--drain-timeout", "5"]
    argv += gateway_flags
    argv += ["--", sys.executable, str(TEST_SERVER), *child_flags]
    process = await anyio.open_process(argv, stdin=None, stdout=None, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    gateway = Gateway(process)

    async def read_log() -> None:
        assert process.stderr is not None
        pending = ""
        async for chunk in TextReceiveStream(process.stderr):
            pending += chunk
            *complete, pending = pending.split("\n")
            for line in complete:
                gateway.lines.append(line)
                gateway.new_line.set()
                gateway.new_line = anyio.Event()
                if found := RUNNING_LINE.search(line):
                    gateway.url = found.group(1)
                if found := WORKER_LINE.search(line):
                    gateway.pids[int(found.group(1))] = int(found.group(2))
                if found := ADDRESS_LINE.search(line):
                    gateway.addresses[int(found.group(1))] = found.group(2)
                if gateway.url and len(gateway.addresses) == WORKERS and len(gateway.pids) == WORKERS:
                    gateway.ready.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_log)
            try:
                await gateway.ready.wait()
                yield gateway
            finally:
                with anyio.CancelScope(shield=True):
                    if process.returncode is None:
                        process.send_signal(signal.SIGTERM)
                    with anyio.move_on_after(30):
                        await process.wait()
                    if process.returncode is None:  # pragma: no cover - a hung drain: do not leak it
                        process.kill()
                        await process.wait()
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await process.aclose()


async def open_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    return await open_legacy_session(http, url)


async def test_three_workers_serve_a_legacy_sdk_session_and_an_mrtr_retry_round_robin_with_zero_404s() -> None:
    progress: list[float] = []
    every_progress = anyio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)
        if len(progress) == 2 * CALLS:
            every_progress.set()

    async def on_sampling(context: Any, params: sdk.CreateMessageRequestParams) -> sdk.CreateMessageResult:
        return sdk.CreateMessageResult(role="assistant", content=sdk.TextContent(type="text", text="hi"), model="m")

    sampling = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
    with anyio.fail_after(WAIT):
        async with gateway_with_workers("--era", "legacy") as gw:
            balancer = RoundRobin([url.removesuffix("/") for url in gw.worker_urls()])
            async with serving(balancer) as front:
                async with Client(f"{front}/mcp", mode="legacy") as client:
                    for n in range(CALLS):
                        result = await client.call_tool(
                            "progress_burst", {"count": 2, "tag": f"c{n}"}, progress_callback=on_progress
                        )
                        assert result.is_error is not True, result
                    await every_progress.wait()
                async with Client(f"{front}/mcp", mode="2026-07-28", sampling_callback=on_sampling) as modern:
                    asked = await modern.call_tool("ask_client", {"requests": [sampling]})
                assert asked.structured_content is not None
                assert asked.structured_content["answers"][0]["result"]["model"] == "m"
            # The shared port answers too, and /status says which worker did.
            async with httpx.AsyncClient() as http:
                status = (await http.get(f"{gw.url}/status")).json()
                metrics = (await http.get(f"{gw.url}/metrics")).text
            assert re.fullmatch(r"worker \d of 3", status["instance"]["label"])
            assert re.search(r'mcp_gateway_instance\{.*worker="worker_\d_of_3"\} 1.0', metrics), metrics
    assert 404 not in balancer.statuses(), balancer.hits
    assert all(hit.status < 400 for hit in balancer.hits), balancer.hits
    assert {hit.backend for hit in balancer.hits} == {0, 1, 2}
    assert {"GET", "DELETE"} <= {hit.method for hit in balancer.hits}
    calls = [hit for hit in balancer.hits if hit.rpc == "tools/call"]
    assert calls[-1].backend != calls[-2].backend  # the MRTR retry went to another worker
    assert gw.process.returncode == 0


async def test_killing_a_worker_loses_only_its_sessions_and_calls_on_the_others_complete() -> None:
    with anyio.fail_after(WAIT):
        async with gateway_with_workers("--era", "legacy") as gw, httpx.AsyncClient(timeout=WAIT) as http:
            first, second, third = (url.rstrip("/") + "/mcp" for url in gw.worker_urls())
            doomed = await open_session(http, first)  # held by worker 1
            survivor = await open_session(http, second)  # held by worker 2
            # An MRTR call parked on worker 1: its token names worker 1.
            ask = {
                "jsonrpc": "2.0",
                "id": 9,
                "method": "tools/call",
                "params": {
                    "name": "ask_client",
                    "arguments": {"requests": [SAMPLING]},
                    "_meta": {**MODERN_META, "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}},
                },
            }
            parked = await http.post(first, headers=modern_headers("tools/call", "ask_client"), json=ask)
            parked_messages = (
                parse_sse(parked.text)
                if parked.headers["content-type"].startswith("text/event-stream")
                else [parked.json()]
            )
            state = parked_messages[-1]["result"]["requestState"]
            slow = {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {
                    "name": "sleep",
                    "arguments": {"ms": 1500, "progress": True},
                    "_meta": {"progressToken": "p"},
                },
            }
            # Worker 2's call, entering through worker 3, is running when worker 1 dies; so is
            # worker 1's session's GET stream, entering through worker 2.
            listening = {**doomed, "accept": "text/event-stream"}
            async with (
                http.stream("GET", second, headers=listening) as doomed_stream,
                http.stream("POST", third, headers=survivor, json=slow) as running,
            ):
                assert doomed_stream.status_code == 200
                lines = running.aiter_lines()
                async for line in lines:
                    if line.startswith("data: {"):
                        break
                os.kill(gw.pids[1], signal.SIGKILL)
                ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
                lost = await http.post(third, headers=doomed, json=ping)
                assert lost.status_code == 404
                assert "the replica that owns this session is unreachable" in lost.json()["error"]["message"]
                again = await open_session(http, third)  # re-initialize: works
                assert (await http.post(second, headers=again, json=ping)).status_code == 200
                rest = [line async for line in lines if line.startswith("data: {")]
                async for _ in doomed_stream.aiter_bytes():
                    pass  # the owner's stream ends with the owner
                retry = {
                    **ask,
                    "id": 10,
                    "params": {**ask["params"], "inputResponses": {"k1": {}}, "requestState": state},
                }
                lost_call = await http.post(third, headers=modern_headers("tools/call", "ask_client"), json=retry)
                assert lost_call.status_code == 400
                assert lost_call.json()["error"]["data"] == {"requestState": "lost"}
                assert lost_call.json()["id"] == 10
            assert len(rest) == 1
            assert '"slept"' in rest[0]
            assert (
                await http.post(third, headers=survivor, json={"jsonrpc": "2.0", "id": 2, "method": "ping"})
            ).status_code == 200
    assert gw.process.returncode == 0
    assert any("exited on its own" in line for line in gw.lines)


async def test_sigterm_lets_a_call_in_flight_on_a_worker_finish_then_every_worker_exits() -> None:
    slow = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 1500, "progress": True}, "_meta": {"progressToken": "p"}},
    }
    with anyio.fail_after(WAIT):
        async with gateway_with_workers("--era", "legacy") as gw, httpx.AsyncClient(timeout=WAIT) as http:
            url = gw.worker_urls()[0].rstrip("/") + "/mcp"
            session = await open_session(http, url)
            async with http.stream("POST", url, headers=session, json=slow) as running:
                lines = running.aiter_lines()
                async for line in lines:
                    if line.startswith("data: {"):
                        break  # the call is running at the child
                gw.process.send_signal(signal.SIGTERM)
                rest = [line async for line in lines if line.startswith("data: {")]
            await gw.process.wait()
    assert len(rest) == 1
    assert '"slept"' in rest[0]
    assert gw.process.returncode == 0
    assert sum("drained: every request finished" in line for line in gw.lines) == WORKERS


async def test_every_worker_reads_the_state_key_file_and_takes_a_rotation_without_a_restart(tmp_path: Path) -> None:
    old, new = b"the key every worker had first, 32+", b"the key the operator rotates to, 32+"
    path = tmp_path / "state-secret"
    path.write_bytes(old + b"\n")

    def write(*keys: bytes) -> None:  # as a Kubernetes Secret update: a new file moved over the old
        fresh = tmp_path / "state-secret.new"
        fresh.write_bytes(b"".join(key + b"\n" for key in keys))
        os.replace(fresh, path)

    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with anyio.fail_after(WAIT):
        async with (
            gateway_with_workers("--era", "legacy", gateway_flags=("--state-secret-file", str(path))) as gw,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            first, second, third = (url.rstrip("/") + "/mcp" for url in gw.worker_urls())
            await gw.wait_for("state keys loaded", WORKERS)  # each worker watches the file itself
            before = await open_session(http, first)
            write(old, new)
            await gw.wait_for("state keys reloaded", WORKERS)
            write(new, old)
            await gw.wait_for("state keys reloaded", 2 * WORKERS)
            after = await open_session(http, second)  # signed with the new key
            assert (await http.post(third, headers=before, json=ping)).status_code == 200
            assert (await http.post(first, headers=after, json=ping)).status_code == 200
            write(new)
            await gw.wait_for("state keys reloaded", 3 * WORKERS)
            assert (await http.post(second, headers=before, json=ping)).status_code == 404  # its key is gone
            assert (await http.post(third, headers=after, json=ping)).status_code == 200
    assert gw.process.returncode == 0


async def test_a_signal_after_every_worker_exited_is_noted_and_the_supervisor_still_exits_zero() -> None:
    """The supervisor put back the default handlers when its workers were gone: a signal then
    (an operator's second Ctrl-C, a supervisor's second SIGTERM) ended it by that signal
    (exit status -15, its last log lines cut). Now it is noted, and the exit code is 0."""
    with anyio.fail_after(WAIT):
        async with gateway_with_workers() as gw:
            # Each worker's signal handlers are uvicorn's from its start-up on (a SIGTERM before
            # that ends the worker by it: it runs no child yet).
            await gw.wait_for("Application startup complete", WORKERS)
            gw.process.send_signal(signal.SIGTERM)
            await gw.wait_for("exited (0)", WORKERS)  # the supervisor's "worker N exited (0)", for each
            if gw.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    gw.process.send_signal(signal.SIGTERM)  # late: every worker has exited
            assert await gw.process.wait() == 0
