"""The npm tier: two ``mcp-remote --protocol auto`` users at once, reusing request ids (issue #29 item 3).

``mcp-remote`` forwards its local client's ids (0, 1, 2…), so two users running the same
sequence have equal ids in flight at the gateway, and it POSTs their cancels as modern
``notifications/cancelled``. Without tokens, both used to be the one principal
``anonymous``: each cancel named two requests, was ignored, and both calls ran on. Now an
anonymous client is keyed by its peer address, so each user's cancel ends its own call.

The two users come from two addresses: the gateway listens on ``::`` (dual stack), one
``mcp-remote`` reaches it over IPv4 (``::ffff:127.0.0.1``), the other over IPv6 (``::1``).
``mcp-remote`` is pinned in scripts/install-npm-servers.sh; ``MCP_REMOTE_JS`` may point at
another install's ``dist/proxy.js``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from tests.conftest import TEST_SERVER
from tests.gateway_server import modern_call, modern_headers

REPO = Path(__file__).resolve().parents[2]
MCP_REMOTE = Path(
    os.environ.get("MCP_REMOTE_JS", REPO / ".npm-servers" / "node_modules" / "mcp-remote" / "dist" / "proxy.js")
)

if not MCP_REMOTE.is_file():
    pytest.skip(f"{MCP_REMOTE} is missing; install it with scripts/install-npm-servers.sh", allow_module_level=True)


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


pytestmark = [
    pytest.mark.npm,
    pytest.mark.anyio,
    pytest.mark.skipif(not _has_ipv6_loopback(), reason="needs ::1 to give the second user its own address"),
]

WAIT = 90.0
RUNNING_LINE = re.compile(r"running on (http://\S+)")
LONG = {"steps": 100, "interval_ms": 300}


class Log:
    """The gateway's log lines as they come; ``wait_for`` waits (on an event) for enough matches."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.port = 0
        self.changed = anyio.Event()

    async def wait_for(self, pattern: str, count: int) -> None:
        while sum(1 for line in self.lines if re.search(pattern, line)) < count:
            changed = self.changed
            await changed.wait()


@asynccontextmanager
async def dual_stack_gateway() -> AsyncIterator[Log]:
    """A gateway process on ``::`` (IPv4 and IPv6) with one shared child; yields its log."""
    argv = [sys.executable, "-m", "gateway", "--host", "::", "--port", "0", "--pool-min", "1", "--pool-max", "1"]
    argv += ["--", sys.executable, str(TEST_SERVER)]
    process = await anyio.open_process(argv, stdin=None, stdout=None, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    log = Log()
    ready = anyio.Event()

    async def read_log() -> None:
        assert process.stderr is not None
        pending = ""
        async for chunk in TextReceiveStream(process.stderr):
            pending += chunk
            *complete, pending = pending.split("\n")
            for line in complete:
                log.lines.append(line)
                if (match := RUNNING_LINE.search(line)) and not log.port:
                    log.port = int(match.group(1).rstrip("/").rsplit(":", 1)[1].split("/")[0])
                    ready.set()
            log.changed.set()
            log.changed = anyio.Event()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_log)
            try:
                await ready.wait()
                yield log
            finally:
                with anyio.CancelScope(shield=True):
                    if process.returncode is None:
                        process.send_signal(signal.SIGTERM)
                    with anyio.move_on_after(20):
                        await process.wait()
                    if process.returncode is None:  # pragma: no cover
                        process.kill()
                        await process.wait()
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await process.aclose()


class Remote:
    """One ``mcp-remote`` process, spoken to over its stdio as a 2025-11-25 client would."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.messages: list[dict[str, Any]] = []
        self._changed = anyio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(json.dumps(message).encode() + b"\n")

    async def read(self) -> None:
        assert self.process.stdout is not None
        pending = b""
        async for chunk in self.process.stdout:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip().startswith(b"{"):
                    self.messages.append(json.loads(line))
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_for(self, predicate: Any) -> dict[str, Any]:
        while True:
            changed = self._changed
            for message in self.messages:
                if predicate(message):
                    return message
            await changed.wait()


@asynccontextmanager
async def mcp_remote(url: str) -> AsyncIterator[Remote]:
    argv = ["node", str(MCP_REMOTE), url, "--protocol", "auto", "--transport", "http-only", "--allow-http"]
    async with await anyio.open_process(argv, stderr=None) as process, anyio.create_task_group() as tg:
        remote = Remote(process)
        tg.start_soon(remote.read)
        try:
            yield remote
        finally:
            process.terminate()
            tg.cancel_scope.cancel()


async def test_two_mcp_remote_users_reusing_ids_each_cancel_their_own_call() -> None:
    with anyio.fail_after(WAIT):
        async with (
            dual_stack_gateway() as log,
            mcp_remote(f"http://127.0.0.1:{log.port}/mcp") as first,
            mcp_remote(f"http://[::1]:{log.port}/mcp") as second,
            httpx.AsyncClient(timeout=30) as http,
        ):
            users = (first, second)
            for user in users:
                await user.send(
                    {
                        "jsonrpc": "2.0",
                        "id": 0,
                        "method": "initialize",
                        "params": {
                            "protocolVersion": "2025-11-25",
                            "capabilities": {},
                            "clientInfo": {"name": "user", "version": "0"},
                        },
                    }
                )
                await user.wait_for(lambda m: m.get("id") == 0)
                await user.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            for user in users:  # the same id, 1, from both users
                await user.send(
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "tools/call",
                        "params": {"name": "countdown", "arguments": LONG, "_meta": {"progressToken": "t"}},
                    }
                )
            for user in users:
                await user.wait_for(lambda m: m.get("method") == "notifications/progress")
            for user in users:
                await user.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
            # Each user's cancel ended its own call: the gateway logs both calls as cancelled
            # once their exchanges closed (the child was told then) …
            await log.wait_for(r"tools/call .*outcome=cancelled", 2)
            # … and the child got both cancels (read after every earlier line of its stdin).
            reply = await http.post(
                f"http://127.0.0.1:{log.port}/mcp",
                headers=modern_headers("tools/call", "cancelled_ids"),
                json=modern_call("q", "cancelled_ids"),
            )
            assert reply.status_code == 200, reply.text
            assert len(reply.json()["result"]["structuredContent"]["ids"]) == 2
