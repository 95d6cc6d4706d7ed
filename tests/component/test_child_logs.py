"""What a child writes to stderr reaches the log (issue #39): one record per line with the
child's server, pool and pid, redacted, rate-limited per child with a count of what was left
out, and nothing with ``--child-stderr-log off``. Every wait is on a log record or the fake's
state, bounded by ``fail_after``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest

from gateway.relay.server_config import Isolation
from gateway.stdio.spec import STDERR_LOG_BURST
from tests.component.fakechild import Script, fake_backend
from tests.component.harness import FAKE_SPEC, Gateway, in_process_gateway
from tests.gateway_server import modern_call, modern_headers
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

BOUND = 20.0
IDENTITY: dict[str, Any] = {"principal_header": "X-User", "trusted_proxies": ["127.0.0.0/8"]}


async def call(gw: Gateway, tool: str, args: dict[str, Any], user: str = "alice") -> httpx.Response:
    headers = modern_headers("tools/call", tool, **{"x-user": user})
    return await gw.http.post(gw.url, headers=headers, json=modern_call(1, tool, args))


def is_line(record: logging.LogRecord) -> bool:
    return getattr(record, "event", None) == "stderr"


def is_drop_count(record: logging.LogRecord) -> bool:
    return getattr(record, "event", None) == "stderr_dropped"


async def test_each_stderr_line_is_a_record_with_the_childs_server_pool_and_pid() -> None:
    lines = ["warning: quota at 90%", "retrying with API_KEY=sk-secret-123"]
    with anyio.fail_after(BOUND), recording("gateway.child.stderr") as records:
        async with (
            fake_backend() as backend,
            in_process_gateway(backend, isolation=Isolation.PRINCIPAL, **IDENTITY) as gw,
        ):
            reply = await call(gw, "stderr", {"lines": lines})
            assert reply.status_code == 200, reply.text
            await records.wait_for(is_line, count=2)
            (child,) = backend.children
    quota, keyed = records.matching(is_line)
    for record in (quota, keyed):
        assert record.levelno == logging.INFO
        assert (record.server, record.pool, record.pid) == ("test", "test principal=alice", child.pid)  # type: ignore[attr-defined]
    assert quota.line == "warning: quota at 90%"  # type: ignore[attr-defined]
    assert quota.getMessage() == f"child fake-server (pid {child.pid}) stderr: warning: quota at 90%"
    assert keyed.line == "retrying with API_KEY=[redacted]"  # type: ignore[attr-defined]
    assert "sk-secret-123" not in keyed.getMessage()


async def test_a_flood_is_cut_to_the_burst_and_what_was_left_out_is_counted_when_stderr_ends() -> None:
    flood = [f"debug line {n}" for n in range(1000)]
    with anyio.fail_after(BOUND), recording("gateway.child.stderr") as records:
        async with fake_backend() as backend, in_process_gateway(backend) as gw:
            # One chunk: the gateway reads every line at one moment, so the bucket gets no refill.
            await call(gw, "stderr", {"lines": flood, "one_chunk": True})
            await records.wait_for(is_line, count=STDERR_LOG_BURST)
            await call(gw, "crash", {"code": 1})
            dropped = await records.wait_for(is_drop_count)
    logged = records.matching(is_line)
    assert [r.line for r in logged] == flood[:STDERR_LOG_BURST]  # type: ignore[attr-defined]
    assert dropped.dropped == len(flood) - STDERR_LOG_BURST  # type: ignore[attr-defined]
    assert (dropped.server, dropped.pool) == ("test", "test")  # type: ignore[attr-defined]
    assert "900 stderr lines left out of the log before its stderr ended" in dropped.getMessage()
    assert records.matching(is_drop_count) == [dropped]


async def test_with_the_setting_off_no_line_is_logged_but_the_tail_still_keeps_them() -> None:
    spec = replace(FAKE_SPEC, stderr_log=False)
    with anyio.fail_after(BOUND), recording("gateway.child") as records:
        async with fake_backend() as backend, in_process_gateway(backend, spec=spec) as gw:
            await call(gw, "stderr", {"lines": ["one", "two"]})
            crashed = await call(gw, "crash", {"code": 3, "stderr": ["three"]})
            exit_record = await records.wait_for_text("exited with code 3")  # stderr drained before it
    assert "one | two | three" in exit_record.getMessage()  # the exit's record still quotes the tail
    assert "one" not in crashed.json()["error"]["message"]  # (which no client sees)
    assert [r for r in records.records if r.name == "gateway.child.stderr"] == []


def event_of(name: str) -> Callable[[logging.LogRecord], bool]:
    return lambda record: getattr(record, "event", None) == name


async def test_a_crash_a_kill_and_the_restarts_are_records_with_their_event_and_fields() -> None:
    with anyio.fail_after(BOUND), recording("gateway.child", "gateway.pool") as records:
        async with fake_backend() as backend, in_process_gateway(backend) as gw:
            await records.wait_for(event_of("ready"))
            crashed = await call(gw, "crash", {"code": 3, "stderr": ["fatal: PASSWORD=hunter2"]})
            assert crashed.json()["error"]["code"] == -31001
            await records.wait_for(event_of("ready"), count=2)  # replaced at once: it died serving
            backend.children[1].kill()  # idle, moments after its start: a start failure, then a backoff
            restart = await records.wait_for(event_of("restart"))
            await records.wait_for(event_of("ready"), count=3)
        first, second, third = (child.pid for child in backend.children)
    starts = records.matching(event_of("start"))
    assert [(r.pid, r.server, r.pool) for r in starts] == [(p, "test", "test") for p in (first, second, third)]  # type: ignore[attr-defined]
    ready = records.matching(event_of("ready"))
    assert [(r.pid, r.era) for r in ready] == [(first, "modern"), (second, "modern"), (third, "modern")]  # type: ignore[attr-defined]
    crash, kill, stop = records.matching(event_of("exit"))
    assert (crash.pid, crash.exit_code, crash.signal, crash.planned) == (first, 3, None, False)  # type: ignore[attr-defined]
    assert crash.levelno == logging.WARNING
    assert crash.getMessage() == f"fake-server (pid {first}) exited with code 3; stderr: fatal: PASSWORD=[redacted]"
    assert (kill.pid, kill.exit_code, kill.signal, kill.planned) == (second, None, "SIGKILL", False)  # type: ignore[attr-defined]
    assert (stop.pid, stop.exit_code, stop.planned, stop.levelno) == (third, 0, True, logging.INFO)  # type: ignore[attr-defined]
    (died,) = records.matching(event_of("died_serving"))
    assert (died.server, died.pool, died.principals, died.delay) == ("test", "test", ["anonymous@127.0.0.1"], 0.0)  # type: ignore[attr-defined]
    assert (restart.server, restart.pool, restart.delay) == ("test", "test", 0.5)  # type: ignore[attr-defined]
    assert restart.getMessage() == "test: restarting in 0.5 s"


async def test_a_child_that_cannot_start_is_a_start_failed_record_with_its_error_redacted() -> None:
    def script(index: int) -> Script:
        return Script(exit_at_start=2, stderr_at_start=("API_KEY=sk-1 rejected",)) if index == 0 else Script()

    with anyio.fail_after(BOUND), recording("gateway.child", "gateway.pool") as records:
        async with fake_backend(script) as backend, in_process_gateway(backend):
            failed = await records.wait_for(event_of("start_failed"))
            await records.wait_for(event_of("ready"))
    assert (failed.server, failed.pool, failed.levelno) == ("test", "test", logging.WARNING)  # type: ignore[attr-defined]
    assert "API_KEY=[redacted] rejected" in failed.error  # type: ignore[attr-defined]
    assert "sk-1" not in failed.getMessage()
    (restart,) = records.matching(event_of("restart"))
    assert restart.delay == 0.5  # type: ignore[attr-defined]
