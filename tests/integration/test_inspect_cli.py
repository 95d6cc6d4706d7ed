"""``mcp-stdio-gateway inspect``: real stdio servers started the way the gateway starts them."""

from __future__ import annotations

import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console

from gateway.tools.inspect import STDOUT_HINT, run_inspect
from tests.conftest import TEST_SERVER

pytestmark = pytest.mark.anyio

# A modern-only (or legacy-only) server that also offers prompts and resources, the latter in
# two pages. The framework refuses a modern request without a complete _meta (-32602), so a
# listed section proves inspect sent it.
RICH_SERVER = """
import sys
from gateway.tools.demo.framework import StdioServer

class Server(StdioServer):
    def _answer(self, era, method, params):
        if method == "prompts/list":
            return {"prompts": [{"name": "greet", "arguments": [{"name": "who", "required": True}]}]}
        if method == "resources/list":
            if params.get("cursor") == "2":
                return {"resources": [{"uri": "file:///b.txt", "name": "b"}]}
            return {"resources": [{"uri": "file:///a.txt", "name": "a", "mimeType": "text/plain"}], "nextCursor": "2"}
        if method == "resources/templates/list":
            return {"resourceTemplates": [{"uriTemplate": "file:///{path}", "name": "files"}]}
        return super()._answer(era, method, params)

capabilities = {"tools": {}, "prompts": {}, "resources": {"subscribe": True}}
Server("rich", "2.0", eras=(sys.argv[1],), capabilities=capabilities).serve()
"""


@dataclass
class Run:
    code: int
    out: str
    err: str

    def report(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.out)
        return parsed


async def inspect(*argv: str) -> Run:
    out, err = io.StringIO(), io.StringIO()
    with anyio.fail_after(30):
        code = await run_inspect(
            argv,
            out=Console(file=out, width=300, soft_wrap=True, emoji=False, highlight=False),
            err=Console(file=err, width=300, soft_wrap=True, emoji=False, highlight=False),
        )
    return Run(code, out.getvalue(), err.getvalue())


def server_argv(*flags: str) -> tuple[str, ...]:
    return ("--", sys.executable, str(TEST_SERVER), *flags)


async def test_a_modern_server_is_reported_with_its_era_info_and_tools() -> None:
    run = await inspect(*server_argv())
    assert run.code == 0, run.err
    assert run.out.startswith("testserver 0.1.0\n")
    assert "modern, protocol 2026-07-28 (supports 2026-07-28)" in run.out
    assert "tools (listChanged)" in run.out
    assert "A test server for mcp-stdio-gateway." in run.out
    assert " ms\n" in run.out  # the start-up time
    assert "echo             message: string, required\n" in run.out
    assert "prompts: not advertised" in run.out
    assert "stdout:" not in run.out  # a clean server has no noise section


async def test_a_legacy_server_is_reported_after_initialize() -> None:
    run = await inspect("--json", *server_argv("--era", "legacy"))
    assert run.code == 0, run.err
    report = run.report()
    assert report["era"] == "legacy"
    assert report["protocol_version"] == "2025-11-25"
    assert report["server_info"] == {"name": "testserver", "version": "0.1.0"}
    assert "echo" in {tool["name"] for tool in report["tools"]}
    assert report["tools_error"] is None
    assert isinstance(report["startup_ms"], int)


async def test_a_server_that_prints_a_banner_is_reported_as_stdout_noise_with_the_hint() -> None:
    run = await inspect(*server_argv("--banner", "Server listening", "--stderr-lines", "2"))
    assert run.code == 0, run.err
    assert "stdout: 1 line(s) that are not JSON-RPC\n  Server listening\n" in run.out
    assert f"hint: {STDOUT_HINT}" in run.out
    assert "boot line 2" in run.out  # the stderr tail
    report = (await inspect("--json", *server_argv("--banner", "Server listening"))).report()
    assert report["stdout_noise"] == ["Server listening"]
    assert report["non_json_lines"] == 1
    assert report["stdout_hint"] == STDOUT_HINT


async def test_a_tool_with_an_invalid_header_annotation_is_flagged_with_the_reason() -> None:
    run = await inspect(*server_argv())
    (line,) = [line for line in run.out.splitlines() if line.strip().startswith("bad_header")]
    assert "INVALID x-mcp-header" in line
    assert "'Ratio'" in line
    assert '"number"' in line
    tools = {tool["name"]: tool for tool in (await inspect("--json", *server_argv())).report()["tools"]}
    assert "number" in tools["bad_header"]["invalid_header"]
    assert tools["headered"]["invalid_header"] is None
    region = next(arg for arg in tools["headered"]["arguments"] if arg["name"] == "region")
    assert region["headers"] == ["Mcp-Param-Region"]


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_prompts_and_resources_are_listed_when_advertised(era: str, tmp_path: Path) -> None:
    script = tmp_path / "rich_server.py"
    script.write_text(RICH_SERVER)
    run = await inspect("--json", "--", sys.executable, str(script), era)
    assert run.code == 0, run.err
    report = run.report()
    assert report["era"] == era
    assert report["prompts"] == {
        "advertised": True,
        "items": [{"name": "greet", "arguments": [{"name": "who", "required": True}]}],
        "error": None,
    }
    assert [r["uri"] for r in report["resources"]["items"]] == ["file:///a.txt", "file:///b.txt"]
    assert report["resources"]["error"] is None
    assert report["resource_templates"]["items"][0]["uriTemplate"] == "file:///{path}"
    text = (await inspect("--", sys.executable, str(script), era)).out
    assert "greet  who, required" in text
    assert "file:///a.txt  (a, text/plain)" in text


async def test_a_missing_command_exits_non_zero_with_cannot_start() -> None:
    run = await inspect("--", "/nonexistent/mcp-server", "--flag")
    assert run.code == 1
    assert "cannot start /nonexistent/mcp-server" in run.err
    assert run.out == ""


async def test_a_server_that_exits_at_start_exits_non_zero_with_its_stderr() -> None:
    run = await inspect("--probe-timeout", "5", *server_argv("--exit-at-start", "3"))
    assert run.code == 1
    assert "cannot start" in run.err
    assert "fatal: configured to exit" in run.err


async def test_no_command_is_a_usage_error() -> None:
    run = await inspect()
    assert run.code == 2
    assert "inspect -- COMMAND" in run.err
