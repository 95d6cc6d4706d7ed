"""Failure domains with real processes (issue #37).

- The last domain: the service failing after start-up ends ``python -m gateway`` with a
  non-zero code (a supervisor then replaces it), where uvicorn alone would go on answering 503
  to every MCP request while the probes said healthy.
- A legacy session's child listen on a modern child, and its re-open loop, are domains of their
  own (``gateway.relay.session_listen``): a fault in one ends that listen, which is opened
  again; the other session's listen, its updates and every call go on, and the replica stays
  ready. Without the boundary each fault reached the service's task group and ended it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway.protocol.jsonrpc import Notification
from gateway.relay import session_listen
from gateway.relay.server_config import DualEra
from gateway.relay.session_listen import SessionListen
from gateway.server import EXIT_SERVICE_FAILED
from gateway.stdio import boundary
from tests.conftest import TEST_SERVER, server_spec
from tests.filewatch import wait_until
from tests.gateway_server import running_gateway, sse_messages
from tests.integration.test_session_subscriptions import (
    LISTEN,
    UPDATED,
    open_session,
    recorded,
    request,
    updated,
)
from tests.integration.test_startup import gateway_process
from tests.logrecords import recording

pytestmark = pytest.mark.anyio


async def test_the_service_failing_after_start_up_ends_the_process_with_a_non_zero_code() -> None:
    with anyio.fail_after(60):
        argv = ("--", sys.executable, str(TEST_SERVER))
        async with gateway_process(*argv, module="tests.failing_gateway") as (process, lines):
            [running] = [line for line in lines if "running on http://" in line]
            base = running.split("running on ", 1)[1].split()[0]
            async with httpx.AsyncClient(base_url=base) as http:
                assert (await http.post("/test/fail-service")).status_code == 200
            code = await process.wait()
    assert code == EXIT_SERVICE_FAILED
    log = "\n".join(lines)
    assert "the service failed after start-up" in log
    assert "injected into the service's task group" in log  # the traceback is logged


# -- a legacy session's child listen, and its re-open loop (service tasks, relay/session_listen.py)


@asynccontextmanager
async def subscribed_sessions(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, str, Path, list[Session]]]:
    """alice and bob, legacy sessions on one modern child, each subscribed to its own URIs, each
    with its GET stream open; the child's stdin is recorded (what listens it was sent)."""
    record = tmp_path / "stdin.jsonl"
    spec = server_spec("--era", "modern", "--subscribe", "--record", str(record))
    async with (
        running_gateway(spec, pool_size=1, dual_era=DualEra.MODERN) as url,
        httpx.AsyncClient(timeout=20) as http,
    ):
        sessions = []
        for name in ("alice", "bob"):
            headers = await open_session(http, url)
            subscribed = await request(http, url, headers, "resources/subscribe", uri=f"file:///{name}")
            assert subscribed["result"] == {}
            sessions.append(Session(name, headers))
        async with AsyncExitStack() as streams:
            for session in sessions:
                get = {**session.headers, "accept": "text/event-stream"}
                session.received = sse_messages(await streams.enter_async_context(http.stream("GET", url, headers=get)))
            yield http, url, record, sessions


@dataclass
class Session:
    name: str
    headers: dict[str, str]
    received: AsyncIterator[dict[str, Any]] | None = None

    async def next_uri(self) -> str:
        assert self.received is not None
        message = await anext(self.received)
        assert message["method"] == UPDATED, message
        uri: str = message["params"]["uri"]
        return uri


def listens_for(record: Path, uri: str) -> int:
    return sum(
        1
        for m in recorded(record)
        if m.get("method") == LISTEN and m["params"]["notifications"].get("resourceSubscriptions") == [uri]
    )


async def still_served(http: httpx.AsyncClient, url: str, sessions: list[Session]) -> None:
    """Every session is sent its own next update (and nobody else's), a call is answered, and
    the replica is ready."""
    for session in sessions:
        await updated(http, url, sessions[0].headers, f"file:///{session.name}/next")
    for session in sessions:
        assert await session.next_uri() == f"file:///{session.name}/next"
    echo = await request(http, url, sessions[1].headers, "tools/call", name="echo", arguments={"message": "hi"})
    assert echo["result"]["content"][0]["text"] == "hi"
    base = url.removesuffix("/mcp")
    ready = await http.get(f"{base}/readyz")
    assert (ready.status_code, ready.text) == (200, "ready\n")


async def test_a_fault_in_a_sessions_child_listen_ends_that_listen_only_and_it_is_opened_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An update alice's listen takes makes the gateway fail in it (in the listen's task, where a
    # fault used to reach the service's task group and end the service). The boundary logs it,
    # that listen ends and is opened again; bob's listen, and everything else, runs on.
    monkeypatch.setattr(session_listen, "REOPEN_DELAY", 0.1)
    delivers = SessionListen._delivers

    def failing_delivers(self: SessionListen, opened: Any, note: Notification) -> bool:
        if (note.params or {}).get("uri") == "file:///alice/boom":
            raise RuntimeError("injected into a session's child listen")
        return delivers(self, opened, note)

    monkeypatch.setattr(SessionListen, "_delivers", failing_delivers)
    with anyio.fail_after(30), recording("gateway.relay.session_listen") as records:
        async with subscribed_sessions(tmp_path) as (http, url, record, sessions):
            await updated(http, url, sessions[1].headers, "file:///alice/boom")
            fault = await records.wait_for_text("injected into a session's child listen")
            assert fault.levelno == logging.ERROR
            assert fault.exc_info is not None
            assert "child listen" in fault.getMessage()
            await wait_until(record, lambda: listens_for(record, "file:///alice") >= 2)  # opened again
            await records.wait_for_text("opening it again")
            assert listens_for(record, "file:///bob") == 1  # bob's listen never ended
            await still_served(http, url, sessions)


async def test_a_fault_in_a_sessions_listen_re_open_loop_is_retried_and_the_listen_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The child ends its listens; alice's and bob's re-open loops start, and alice's fails (as a
    # bug in it would; it used to end the service). It runs again after its pause, and opens the
    # listen; nothing else is touched.
    monkeypatch.setattr(session_listen, "REOPEN_DELAY", 0.1)
    monkeypatch.setattr(boundary, "RESTART_PAUSE", 0.1)
    reopen, failed = SessionListen._reopen, []

    async def failing_reopen(self: SessionListen) -> None:
        if self.uris == ["file:///alice"] and not failed:
            failed.append(self)
            raise RuntimeError("injected into a session's listen re-open loop")
        await reopen(self)

    monkeypatch.setattr(SessionListen, "_reopen", failing_reopen)
    with anyio.fail_after(30), recording("gateway.relay.session_listen") as records:
        async with subscribed_sessions(tmp_path) as (http, url, record, sessions):
            ended = await request(http, url, sessions[1].headers, "tools/call", name="end_listens", arguments={})
            # alice's, bob's and the gateway's own (``gateway.stdio.changes``: the child's list changes)
            assert ended["result"]["content"] == [{"type": "text", "text": "3"}]
            fault = await records.wait_for_text("injected into a session's listen re-open loop")
            assert fault.levelno == logging.ERROR
            assert fault.exc_info is not None
            assert "runs again in 0.1 s" in fault.getMessage()
            await wait_until(record, lambda: listens_for(record, "file:///alice") >= 2)
            await wait_until(record, lambda: listens_for(record, "file:///bob") >= 2)
            await still_served(http, url, sessions)
