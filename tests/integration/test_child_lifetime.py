"""Children hold nothing of the gateway's and never outlive it (issue #24 items 4 and 13).

The gateway runs as a real process (``python -m gateway``, uvicorn on its default event loop,
uvloop where installed), alone or with ``--workers 2``; its child is
tests/servers/testserver.py, which here also ignores stdin EOF (it would otherwise exit when
the gateway's end of its stdin closes, and hide the bug).

- Before: uvloop's spawn ignores ``close_fds``, so a child inherited every inheritable
  descriptor: under ``--workers`` the listening socket (a child accepted 37 of 40 of the
  gateway's connections) and the supervisor's pipes, which also kept a killed worker from
  being restarted while its children lived. Now every child starts through a launcher that
  closes all but its three pipes (``gateway.stdio.process.LAUNCHER``); the ``descriptors``
  tool reports what the child holds and which of it it could accept connections on.
- Before: a SIGKILLed gateway or worker left its children running under PID 1. Now the
  launcher sets the parent-death signal (SIGKILL) before it executes the program.

Waits are on events: log lines, and a pidfd that becomes readable when a process ends.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from tests.conftest import TEST_SERVER
from tests.gateway_server import modern_call, modern_headers

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="Linux: pidfd and PR_SET_PDEATHSIG"),
]

WAIT = 60.0
WORKER_LINE = re.compile(r"worker (\d+) of \d+: pid (\d+)")
ADDRESS_LINE = re.compile(r"worker (\d+) of \d+: serving, other workers reach it at (http://\S+)")
RUNNING_LINE = re.compile(r"running on (http://\S+)")


@dataclass
class Gateway:
    process: Process
    workers: int
    url: str = ""
    pids: dict[int, int] = field(default_factory=dict)
    starts: list[tuple[int, int]] = field(default_factory=list)  # (worker, pid) as each started
    addresses: dict[int, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    ready: anyio.Event = field(default_factory=anyio.Event)
    changed: anyio.Event = field(default_factory=anyio.Event)

    async def wait_for(self, pattern: str, count: int = 1) -> None:
        while sum(1 for line in self.lines if re.search(pattern, line)) < count:
            changed = self.changed
            await changed.wait()


@asynccontextmanager
async def gateway_process(workers: int = 1) -> AsyncIterator[Gateway]:
    argv = [sys.executable, "-m", "gateway", "--port", "0", "--drain-timeout", "5"]
    if workers > 1:
        argv += ["--workers", str(workers)]
    argv += ["--", sys.executable, str(TEST_SERVER), "--ignore-stdin-eof"]
    process = await anyio.open_process(argv, stdin=None, stdout=None, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    gateway = Gateway(process, workers)

    async def read_log() -> None:
        assert process.stderr is not None
        pending = ""
        async for chunk in TextReceiveStream(process.stderr):
            pending += chunk
            *complete, pending = pending.split("\n")
            for line in complete:
                gateway.lines.append(line)
                if found := RUNNING_LINE.search(line):
                    gateway.url = found.group(1)
                if found := WORKER_LINE.search(line):
                    number, pid = int(found.group(1)), int(found.group(2))
                    gateway.pids[number] = pid
                    gateway.starts.append((number, pid))
                if found := ADDRESS_LINE.search(line):
                    gateway.addresses[int(found.group(1))] = found.group(2)
                if gateway.url and (workers == 1 or len(gateway.addresses) == workers == len(gateway.pids)):
                    gateway.ready.set()
            gateway.changed.set()
            gateway.changed = anyio.Event()

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


async def tool(http: httpx.AsyncClient, base: str, name: str) -> dict[str, Any]:
    reply = await http.post(
        base.rstrip("/") + "/mcp", headers=modern_headers("tools/call", name), json=modern_call(1, name)
    )
    assert reply.status_code == 200, reply.text
    structured: dict[str, Any] = reply.json()["result"]["structuredContent"]
    return structured


async def ended(pid: int) -> None:
    """Until process ``pid`` has ended (its pidfd turns readable; a zombie has ended too)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await anyio.wait_readable(pidfd)  # the event loop's poller wakes at its end
    finally:
        os.close(pidfd)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_child_holds_no_descriptor_but_its_three_pipes(workers: int) -> None:
    with anyio.fail_after(WAIT):
        async with gateway_process(workers) as gw, httpx.AsyncClient(timeout=WAIT) as http:
            bases = [gw.addresses[n] for n in sorted(gw.addresses)] if workers > 1 else [gw.url]
            for base in bases:  # each worker's own child
                found = await tool(http, base, "descriptors")
                assert found["listening"] == []  # it cannot accept the gateway's connections
                assert found["held"] == {}


async def test_the_children_of_a_sigkilled_gateway_die_with_it() -> None:
    with anyio.fail_after(WAIT):
        async with gateway_process() as gw, httpx.AsyncClient(timeout=WAIT) as http:
            child = (await tool(http, gw.url, "pid"))["pid"]
            assert alive(child)
            gw.process.kill()
            await gw.process.wait()
            await ended(child)  # it ignores stdin EOF: only the parent-death signal ends it
            assert not alive(child)


async def test_a_sigkilled_worker_is_replaced_at_once_and_its_children_die_with_it() -> None:
    with anyio.fail_after(WAIT):
        async with gateway_process(2) as gw, httpx.AsyncClient(timeout=WAIT) as http:
            child = (await tool(http, gw.addresses[1], "pid"))["pid"]
            doomed = gw.pids[1]
            os.kill(doomed, signal.SIGKILL)
            await ended(child)
            # The supervisor saw it die (its pipes are no longer held by the child) and
            # started worker 1 again, which serves.
            await gw.wait_for(r"worker 1 exited on its own")
            await gw.wait_for(r"worker 1 of 2: serving", count=2)
            assert [number for number, pid in gw.starts if pid != doomed].count(1) == 1
            again = (await tool(http, gw.url, "pid"))["pid"]
            assert alive(again)
            assert not alive(child)
