"""The npm tier of a legacy client's own cancel (issue #38 item 6): the TypeScript SDK 1.x
client, the 2.x client package and ``mcp-remote`` cancel a long legacy call, then make another.

Their transport resumes a request stream that ends without a response after a priming event
(``GET`` + ``Last-Event-ID``), and did so after their own cancel too: the gateway answered that
resume with a -31005 error for the forgotten id ("Received a response for an unknown message
ID"), and the 1.x transport, which retries a resumed stream that ends without a result, then
opened a plain GET that replaced the session's GET stream, whose connection reconnected in turn
and replaced it back: a GET a second until the session closed. Now the resume gets 405, which
the transport takes as "no stream here", silently and for good.

The checks: no error printed by the client (or forwarded by ``mcp-remote``), and the gateway's
access log holds exactly two GETs for the session: the resume (405) and the session's GET
stream, which ends when the client closes. The second call (5 × 500 ms) runs after the resume
was answered: a reconnect loop (one GET a second) would have shown in the count. Driven by
``tests/npm/cancelling_client.mjs``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from tests.conftest import server_spec
from tests.gateway_server import legacy_initialize, running_gateway
from tests.integration.test_hostile_edge import AccessLog, access_log

REPO = Path(__file__).resolve().parents[2]
PACKAGES = REPO / ".npm-servers" / "node_modules"
SDK = PACKAGES / "@modelcontextprotocol" / "sdk"
CLIENT_V2 = PACKAGES / "@modelcontextprotocol" / "client"
MCP_REMOTE = PACKAGES / "mcp-remote" / "dist" / "proxy.js"
SCRIPT = REPO / "tests" / "npm" / "cancelling_client.mjs"

if not (SDK / "dist" / "esm" / "client" / "streamableHttp.js").is_file():
    pytest.skip(
        "the TypeScript SDK is missing; install it with scripts/install-npm-servers.sh", allow_module_level=True
    )

WAIT = 60.0
pytestmark = [pytest.mark.npm, pytest.mark.anyio, pytest.mark.timeout(WAIT + 20)]

LONG = {"steps": 100, "interval_ms": 200}
SECOND = {"steps": 5, "interval_ms": 500}


def is_get(session: str, status: int | None = None) -> Callable[[logging.LogRecord], bool]:
    """A GET of ``session`` (its access line names the first 8 characters of the id)."""

    def matches(record: logging.LogRecord) -> bool:
        if getattr(record, "rpc_method", None) != "GET stream" or getattr(record, "session", None) != session[:8]:
            return False
        return status is None or getattr(record, "status", None) == status

    return matches


def statuses(log: AccessLog, session: str) -> list[int]:
    """The statuses of every GET of ``session``, sorted."""
    return sorted(record.status for record in log.records if is_get(session)(record))  # type: ignore[attr-defined]


class Lines:
    """A process's stdout, one JSON value a line, as it comes; ``wait_for`` waits on an event."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self._changed = anyio.Event()

    async def read(self, stream: Any) -> None:
        pending = b""
        async for chunk in stream:
            pending += chunk
            *complete, pending = pending.split(b"\n")
            self.values += [orjson.loads(line) for line in complete if line.strip()[:1] in (b"{", b'"')]
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_for(self, predicate: Any) -> Any:
        while True:
            changed = self._changed
            for value in self.values:
                if predicate(value):
                    return value
            await changed.wait()


@pytest.mark.parametrize("flavour", ["sdk-1.x", "client-2.x"])
async def test_a_typescript_client_cancels_a_legacy_call_without_an_error_or_a_get_loop(flavour: str) -> None:
    package, extra = (SDK, []) if flavour == "sdk-1.x" else (CLIENT_V2, ["v2"])
    if not package.is_dir():
        pytest.skip(f"{package} is missing; install it with scripts/install-npm-servers.sh")
    out = Lines()
    with anyio.fail_after(WAIT):
        async with access_log() as log, running_gateway(server_spec()) as url:
            node = await anyio.open_process(["node", str(SCRIPT), str(package), url, *extra])
            async with node, anyio.create_task_group() as tg:
                assert node.stdin is not None
                tg.start_soon(out.read, node.stdout)
                session = (await out.wait_for(lambda value: isinstance(value, dict) and "session" in value))["session"]
                await out.wait_for(lambda value: isinstance(value, dict) and "cancelled" in value)
                resumed = await log.wait_for(is_get(session))  # its GET stream is open: this is the resume
                await node.stdin.send(b"go\n")  # the second call, after the resume was answered
                await out.wait_for(lambda value: value == "ready")
                await node.stdin.send(b"quit\n")
                await node.wait()
                await log.wait_for(is_get(session, 200))  # the session's GET stream, ended by the close
    errors = [value for value in out.values if isinstance(value, dict) and ({"error", "failed"} & value.keys())]
    assert errors == [], errors
    assert out.values[0]["protocolVersion"] == "2025-11-25"  # so its request streams are primed
    [result] = [value["result"] for value in out.values if isinstance(value, dict) and "result" in value]
    assert result["content"][0]["text"] == "done after 5 steps"
    assert resumed.status == 405  # type: ignore[attr-defined]
    assert statuses(log, session) == [200, 405]


async def test_mcp_remote_forwards_nothing_for_a_cancelled_legacy_call_and_reopens_no_get() -> None:
    if not MCP_REMOTE.is_file():
        pytest.skip(f"{MCP_REMOTE} is missing; install it with scripts/install-npm-servers.sh")
    out = Lines()
    err: list[bytes] = []

    async def read_stderr(stream: Any) -> None:
        async for chunk in stream:
            err.append(chunk)

    with anyio.fail_after(WAIT):
        async with access_log() as log, running_gateway(server_spec()) as url:
            argv = ["node", str(MCP_REMOTE), url, "--transport", "http-only", "--allow-http"]  # legacy by default
            remote = await anyio.open_process(argv)
            async with remote, anyio.create_task_group() as tg:
                assert remote.stdin is not None

                async def send(message: dict[str, Any]) -> None:
                    assert remote.stdin is not None
                    await remote.stdin.send(orjson.dumps(message) + b"\n")

                tg.start_soon(out.read, remote.stdout)
                tg.start_soon(read_stderr, remote.stderr)
                await send(legacy_initialize(name="desktop"))
                await out.wait_for(lambda m: m.get("id") == 0)
                await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
                call = {"name": "countdown", "arguments": LONG, "_meta": {"progressToken": "t"}}
                await send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call})
                await out.wait_for(lambda m: m.get("method") == "notifications/progress")
                await send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
                # mcp-remote opens a session of its own, then forwards its client's initialize: the
                # call's session is the one its access line names
                called = await log.wait_for(lambda record: getattr(record, "rpc_method", None) == "tools/call")
                session = called.session  # type: ignore[attr-defined]
                resumed = await log.wait_for(is_get(session))
                second = {"name": "countdown", "arguments": SECOND}
                await send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": second})
                answer = await out.wait_for(lambda m: m.get("id") == 2)
                remote.terminate()
                await remote.wait()
                await log.wait_for(is_get(session, 200))
                tg.cancel_scope.cancel()
    assert answer["result"]["content"][0]["text"] == "done after 5 steps"
    assert [m for m in out.values if isinstance(m, dict) and m.get("id") == 1] == []  # nothing for the cancelled id
    assert b"unknown message ID" not in b"".join(err)
    assert resumed.status == 405  # type: ignore[attr-defined]
    assert statuses(log, session) == [200, 405]
