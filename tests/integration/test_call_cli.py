"""``mcp-stdio-gateway call`` against the real gateway (and one scripted legacy-only server).

The command's async entry ``run_call`` is awaited in the test's event loop, next to the
gateway it talks to; its output goes to in-memory rich consoles (stderr as a terminal, so
the progress bar is drawn).
"""

from __future__ import annotations

import io
import json
import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from rich.console import Console

from gateway.protocol.headers import encode_header_value
from gateway.tools.call.command import run_call
from gateway.tools.call.errors import EXIT_TIMEOUT
from tests.conftest import server_spec
from tests.gateway_server import running_gateway

pytestmark = pytest.mark.anyio

HEADERED_ARGS = {"region": "Zürich", "count": 3, "dry": True, "opts": {"mode": "fast"}, "note": "not mirrored"}


@dataclass
class Run:
    code: int
    out: str
    err: str


class Recorder(httpx.AsyncBaseTransport):
    """A real HTTP transport that keeps every request it sends, for header checks."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def posted(self, method: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == "POST" and json.loads(r.content).get("method") == method]


async def call(*argv: str, transport: httpx.AsyncBaseTransport | None = None) -> Run:
    out, err = io.StringIO(), io.StringIO()
    code = await run_call(
        argv,
        out=Console(file=out, width=200, soft_wrap=True, emoji=False, highlight=False),
        err=Console(file=err, width=120, force_terminal=True, emoji=False, highlight=False),
        transport=transport,
    )
    return Run(code, out.getvalue(), err.getvalue())


@asynccontextmanager
async def gateway(*flags: str) -> AsyncIterator[str]:
    with anyio.fail_after(30):
        async with running_gateway(server_spec(*flags)) as url:
            yield url


async def test_echo_prints_the_text_of_the_result() -> None:
    async with gateway() as url:
        run = await call(url, "echo", "--arg", "message=hello there")
    assert run.code == 0, run.err
    assert run.out == "hello there\n"


async def test_a_countdown_draws_its_progress_bar_and_then_prints_the_result() -> None:
    async with gateway() as url:
        run = await call(url, "countdown", "--arg", "steps=3", "--arg", "interval_ms=0")
    assert run.code == 0, run.err
    assert run.out == "done after 3 steps\n"
    for step in (1, 2, 3):
        assert f"step {step} of 3" in run.err
    assert "100%" in run.err
    assert "━" in run.err  # the bar itself


async def test_progress_messages_are_shown_as_text_never_as_rich_markup() -> None:
    async with gateway() as url:
        run = await call(url, "progress_burst", "--arg", "count=2", "--arg", "tag=[/oops] [bold]x")
    assert run.code == 0, run.err
    assert "[/oops] [bold]x" in run.err
    assert run.out == "[/oops] [bold]x\n"


async def test_annotated_arguments_are_mirrored_into_headers_that_the_gateway_accepts() -> None:
    recorder = Recorder()
    async with gateway() as url:
        run = await call(url, "headered", "--json", json.dumps(HEADERED_ARGS), transport=recorder)
    # The gateway refuses a mismatched Mcp-Param-* with 400, so success proves the mirroring.
    assert run.code == 0, run.err
    assert '"region": "Zürich"' in run.out  # structuredContent, pretty-printed
    (request,) = recorder.posted("tools/call")
    assert request.headers["mcp-protocol-version"] == "2026-07-28"
    assert request.headers["mcp-method"] == "tools/call"
    assert request.headers["mcp-name"] == "headered"
    assert request.headers["mcp-param-region"] == encode_header_value("Zürich")
    assert request.headers["mcp-param-region"].startswith("=?base64?")
    assert request.headers["mcp-param-count"] == "3"
    assert request.headers["mcp-param-dry-run"] == "true"
    assert request.headers["mcp-param-mode"] == "fast"
    assert not any(name.startswith("mcp-param-note") for name in request.headers)


async def test_arg_values_are_json_except_where_the_schema_wants_a_string() -> None:
    async with gateway() as url:
        run = await call(url, "headered", "--arg", "region=042", "--arg", "count=42", "--arg", "dry=false")
    assert run.code == 0, run.err
    assert '"region": "042"' in run.out
    assert '"count": 42' in run.out
    assert '"dry": false' in run.out


async def test_a_header_the_user_overrides_is_refused_by_the_gateway_with_its_message() -> None:
    recorder = Recorder()
    async with gateway() as url:
        run = await call(url, "headered", "--arg", "count=3", "--header", "mcp-param-count: 4", transport=recorder)
    assert run.code == 1
    assert "Mcp-Param-Count" in run.err
    assert "-32020" in run.err
    (request,) = recorder.posted("tools/call")
    assert request.headers.get_list("mcp-param-count") == ["4"]  # replaced, whatever the case


async def test_legacy_mode_opens_a_session_calls_and_deletes_the_session() -> None:
    recorder = Recorder()
    async with gateway() as url:
        run = await call(
            url, "countdown", "--mode", "legacy", "--arg", "steps=2", "--arg", "interval_ms=0", transport=recorder
        )
    assert run.code == 0, run.err
    assert run.out == "done after 2 steps\n"
    assert "step 2 of 2" in run.err
    assert not recorder.posted("server/discover")  # --mode skips the detection
    (initialize,) = recorder.posted("initialize")
    assert "mcp-session-id" not in initialize.headers
    (initialized,) = recorder.posted("notifications/initialized")
    session = initialized.headers["mcp-session-id"]
    (tool_call,) = recorder.posted("tools/call")
    assert tool_call.headers["mcp-session-id"] == session
    assert tool_call.headers["mcp-protocol-version"] == "2025-11-25"
    assert "mcp-method" not in tool_call.headers
    assert recorder.requests[-1].method == "DELETE"
    assert recorder.requests[-1].headers["mcp-session-id"] == session


async def test_auto_mode_picks_modern_for_the_gateway() -> None:
    recorder = Recorder()
    async with gateway("--era", "legacy") as url:  # the gateway bridges a legacy child for modern clients
        run = await call(url, "echo", "--arg", "message=hi", transport=recorder)
    assert run.code == 0, run.err
    assert [json.loads(r.content)["method"] for r in recorder.requests] == [
        "server/discover",
        "tools/list",
        "tools/call",
    ]


async def test_a_tool_error_exits_1_and_prints_the_text() -> None:
    async with gateway() as url:
        run = await call(url, "fail")
    assert run.code == 1
    assert "this tool always fails" in run.err
    assert run.out == ""


async def test_a_json_rpc_error_exits_1_with_the_server_message() -> None:
    async with gateway() as url:
        run = await call(url, "no_such_tool")
    assert run.code == 1
    assert "unknown tool: no_such_tool" in run.err


async def test_list_shows_the_tools_and_their_arguments_but_not_invalid_ones() -> None:
    async with gateway() as url:
        run = await call(url, "--list")
    assert run.code == 0, run.err
    # The count follows the test server's tool set (minus the hidden one); the header's shape is the point.
    assert re.search(r"testserver 0\.1\.0 · endpoint modern \(2026-07-28\) · \d+ tools\n", run.out), run.out
    assert "\necho  Return the given message unchanged, as text.\n" in run.out
    assert "message: string, required" in run.out
    assert "region: string → Mcp-Param-Region" in run.out
    assert "bad_header" not in run.out


async def test_timeout_gives_up_with_its_own_exit_code() -> None:
    async with gateway() as url:
        run = await call(url, "sleep", "--arg", "ms=20000", "--timeout", "0.5")
    assert run.code == EXIT_TIMEOUT == 124
    assert "no answer within 0.5 s" in run.err


async def test_options_may_come_between_the_url_and_the_tool() -> None:
    async with gateway() as url:
        run = await call(url, "--mode", "legacy", "echo", "--arg", "message=hi")
        before = await call("--mode", "modern", "--arg", "message=ho", url, "echo")
    assert (run.code, run.out) == (0, "hi\n"), run.err
    assert (before.code, before.out) == (0, "ho\n"), before.err


@pytest.mark.parametrize(
    ("era", "mode", "header"),
    [
        ("legacy", "modern", "endpoint modern (2026-07-28) · child legacy (2025-11-25)"),
        ("legacy", "legacy", "endpoint legacy (2025-11-25) · child legacy (2025-11-25)"),
        ("modern", "modern", "endpoint modern (2026-07-28) · "),
        ("modern", "legacy", "endpoint legacy (2025-11-25) · child modern (2026-07-28)"),
    ],
)
async def test_list_with_a_forced_mode_still_names_the_server_and_the_child_s_era(
    era: str, mode: str, header: str
) -> None:
    async with gateway("--era", era) as url:
        run = await call(url, "--list", "--mode", mode)
    assert run.code == 0, run.err
    assert run.out.startswith(f"testserver 0.1.0 · {header}"), run.out


async def test_a_refused_connection_exits_2() -> None:
    with socket.socket() as sock:  # bound, never listening: refused, and no other test is given the port
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        with anyio.fail_after(20):
            run = await call(f"http://127.0.0.1:{port}/mcp", "echo", "--connect-timeout", "0.5")  # not the 10 s
    assert run.code == 2
    assert "cannot reach" in run.err
    assert "nothing accepted a connection for 0.5 s" in run.err


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["echo", "--arg", "message"], "--arg takes KEY=VALUE"),
        (["echo", "--json", "[1]"], "--json must be a JSON object"),
        (["echo", "--json", "{"], "--json is not valid JSON"),
        (["echo", "--header", "no colon"], "--header takes 'NAME: VALUE'"),
        ([], "name a TOOL"),
    ],
)
async def test_usage_errors_exit_2_before_connecting(argv: list[str], complaint: str) -> None:
    with anyio.fail_after(5):
        run = await call("http://127.0.0.1:9/mcp", *argv)
    assert run.code == 2
    assert complaint in run.err


# --- a scripted legacy-only server: the auto-detection fallback -----------------------------------------


class LegacyOnlyServer:
    """Answers like a 2025-11-25 SDK server: 400 without a session, a session from initialize,
    and a tools/call answered on SSE with progress, a ping to the client, then the result."""

    SESSION = "legacy-session-1"

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            self.seen.append(("DELETE", request.headers.get("mcp-session-id")))
            return httpx.Response(204)
        message = json.loads(request.content)
        self.seen.append(("POST", message.get("method", message.get("result"))))
        if message.get("method") == "initialize":
            result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "old"}}
            return self._json(
                {"jsonrpc": "2.0", "id": message["id"], "result": result}, {"mcp-session-id": self.SESSION}
            )
        if request.headers.get("mcp-session-id") != self.SESSION:
            error = {"code": -32000, "message": "Bad Request: No valid session ID provided"}
            return self._json({"jsonrpc": "2.0", "id": "server-error", "error": error}, status=400)
        if "method" not in message or message["method"].startswith("notifications/"):
            return httpx.Response(202)
        if message["method"] == "tools/list":
            tool = {"name": "slow", "inputSchema": {"type": "object", "properties": {}}}
            return self._json({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": [tool]}})
        token = message["params"]["_meta"]["progressToken"]
        events = [
            {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": token, "progress": 1, "total": 2, "message": "half way"},
            },
            {"jsonrpc": "2.0", "id": "s-1", "method": "ping"},
            {"jsonrpc": "2.0", "id": message["id"], "result": {"content": [{"type": "text", "text": "slow done"}]}},
        ]
        body = ": keep-alive\n\nid: prime\ndata:\n\n" + "".join(
            f"event: message\ndata: {json.dumps(e)}\n\n" for e in events
        )
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())

    @staticmethod
    def _json(payload: Any, headers: dict[str, str] | None = None, status: int = 200) -> httpx.Response:
        return httpx.Response(status, json=payload, headers=headers)


async def test_auto_mode_falls_back_to_a_legacy_session_and_answers_the_server_s_ping() -> None:
    server = LegacyOnlyServer()
    with anyio.fail_after(10):
        run = await call("http://legacy.test/mcp", "slow", transport=httpx.MockTransport(server))
    assert run.code == 0, run.err
    assert run.out == "slow done\n"
    assert "half way" in run.err
    assert server.seen == [
        ("POST", "server/discover"),
        ("POST", "initialize"),
        ("POST", "notifications/initialized"),
        ("POST", "tools/list"),
        ("POST", "tools/call"),
        ("POST", {}),  # our answer to the server's ping
        ("DELETE", LegacyOnlyServer.SESSION),
    ]
