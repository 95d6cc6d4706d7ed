"""The gateway and its tools tell the same story: one word for an anonymous principal, one
count of a child's stdout noise, and a readable report."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from gateway.relay.server_config import Isolation
from tests.conftest import TEST_SERVER, server_spec
from tests.gateway_server import modern_call, modern_headers, running_gateway
from tests.integration.test_inspect_cli import inspect

pytestmark = pytest.mark.anyio

INSTRUCTED_SERVER = """
import sys
from gateway.tools.demo.framework import StdioServer

StdioServer("told", "1.0", instructions="First line.\\nSecond line.\\n\\n  Indented.").serve()
"""


async def test_the_access_line_and_status_both_call_a_principal_less_client_anonymous(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    with anyio.fail_after(30):
        async with running_gateway(server_spec(), isolation=Isolation.PRINCIPAL) as url, httpx.AsyncClient() as http:
            reply = await http.post(url, headers=modern_headers("tools/call", "echo"), json=modern_call(1, "echo"))
            status = (await http.get(url.removesuffix("/mcp") + "/status")).json()
    assert reply.status_code == 200
    (line,) = [r for r in caplog.records if r.name == "gateway.access" and "tools/call" in r.getMessage()]
    assert "principal=anonymous" in line.getMessage()
    assert line.principal == "anonymous"  # type: ignore[attr-defined]
    assert any("principal=anonymous" in label for label in status["servers"][0]["pools"])


async def test_inspect_counts_a_json_line_that_is_not_json_rpc_as_the_gateway_drops_it() -> None:
    banner = '{"level":"info","msg":"listening"}'
    report = (await inspect("--json", "--", sys.executable, str(TEST_SERVER), "--banner", banner)).report()
    assert report["non_json_lines"] == 1
    assert report["stdout_noise"] == [banner]


async def test_inspect_indents_every_line_of_the_instructions(tmp_path: Path) -> None:
    script = tmp_path / "told.py"
    script.write_text(INSTRUCTED_SERVER)
    run = await inspect("--", sys.executable, str(script))
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("instructions"))
    assert lines[start].endswith("First line.")
    assert lines[start + 1 : start + 4] == [" " * 15 + "Second line.", "", " " * 15 + "  Indented."]
