"""What a client reads of a failing child, with real processes and a real server: a child that
writes a secret to stderr and crashes in a call, and one that does so at start. The matrix of
eras and answer kinds, and ``--expose-child-errors``, is tests/component/test_child_errors.py."""

from __future__ import annotations

import sys
from typing import Final

import anyio
import httpx
import pytest

from gateway.stdio.spec import ChildSpec
from tests.conftest import server_spec
from tests.gateway_server import BASE_HEADERS, legacy_initialize, modern_call, modern_headers, running_gateway
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

SECRET: Final = "API_KEY=sk-secret-123"
FAILS_AT_START: Final = "import os, sys; sys.stderr.write(os.environ['PLANTED'] + '\\n'); sys.exit(1)"
"""A server that writes its environment's secret to stderr and exits: a bad token, say."""


async def test_a_crash_in_a_call_leaves_its_stderr_and_command_in_the_log_not_in_the_answer() -> None:
    crash = modern_call(1, "exit", {"code": 3, "stderr": f"boom: {SECRET}"})
    with anyio.fail_after(30), recording("gateway.child") as records:
        async with running_gateway(server_spec()) as url, httpx.AsyncClient(timeout=30) as http:
            reply = await http.post(url, headers=modern_headers("tools/call", "exit"), json=crash)
            await records.wait_for_text("boom: API_KEY=[redacted]")  # the log's line, redacted
    assert "sk-secret-123" not in reply.text
    assert sys.executable not in reply.text
    error = reply.json()["error"]
    assert (error["code"], error["data"]["exit_code"]) == (-31001, 3)
    assert "exited with code 3" in error["message"]


async def test_a_failed_start_leaves_its_stderr_and_command_on_status_not_in_the_answer() -> None:
    spec = ChildSpec(sys.executable, ("-c", FAILS_AT_START), env={"PLANTED": SECRET}, probe_timeout=5)
    with anyio.fail_after(30):
        async with running_gateway(spec) as url, httpx.AsyncClient(timeout=30) as http:
            modern = await http.post(url, headers=modern_headers("tools/call", "echo"), json=modern_call(1, "echo"))
            legacy = await http.post(url, headers=BASE_HEADERS, json=legacy_initialize())
            status = await http.get(url.replace("/mcp", "/status"))  # the operator's (loopback, no tokens)
    for reply in (modern, legacy):
        assert "sk-secret-123" not in reply.text
        assert sys.executable not in reply.text
        assert "exited with code 1 during start-up" in reply.json()["error"]["message"]
    assert SECRET in status.text
