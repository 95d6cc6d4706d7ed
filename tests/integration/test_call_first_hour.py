"""``call`` as a newcomer meets it: errors that name the cause, output shown once, and the
server's questions answered in the terminal (driven through a real pty)."""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

import anyio
import httpx
import pytest

from gateway.http.auth import TokenStore
from tests.conftest import server_spec
from tests.gateway_server import running_gateway
from tests.integration.test_call_cli import Run
from tests.integration.test_call_cli import call as call_wrapped
from tests.logrecords import recording

pytestmark = pytest.mark.anyio


async def call(*argv: str, transport: httpx.AsyncBaseTransport | None = None) -> Run:
    """``call`` with stderr's line wrapping undone (the test console is 120 columns wide)."""
    run = await call_wrapped(*argv, transport=transport)
    return Run(run.code, run.out, " ".join(run.err.split()))


# --- a gateway that is not up yet -----------------------------------------------------------------------


def unlistening_socket() -> socket.socket:
    """A socket bound to a free 127.0.0.1 port that does not listen yet: connections are refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


async def test_call_started_before_its_gateway_keeps_trying_and_succeeds_once_it_listens() -> None:
    sock = unlistening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    runs: list[Run] = []
    done = anyio.Event()

    async def run_call() -> None:
        runs.append(await call(url, "echo", "--arg", "message=late", "--connect-timeout", "25"))
        done.set()

    with anyio.fail_after(30), recording("gateway.tools.call") as records:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_call)
            await records.wait_for_text("nothing accepts a connection")  # its first attempt was refused
            sock.listen(128)
            async with running_gateway(server_spec(), sock=sock):
                await done.wait()
    assert runs[0].code == 0, runs[0].err
    assert runs[0].out == "late\n"


async def test_call_with_nothing_listening_gives_up_asking_whether_the_gateway_runs() -> None:
    sock = unlistening_socket()
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        with anyio.fail_after(10):
            run = await call(url, "echo", "--connect-timeout", "0.3")
    finally:
        sock.close()
    assert run.code == 2
    assert f"cannot reach {url}: nothing accepted a connection for 0.3 s" in run.err
    assert "Is the gateway running at that URL?" in run.err
    assert f"Start one with: mcp-stdio-gateway --port {port} -- SERVER-COMMAND" in run.err


async def test_an_error_other_than_a_refused_connection_is_not_retried() -> None:
    attempts: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        raise httpx.ReadError("the connection broke", request=request)

    with anyio.fail_after(10):
        run = await call("http://gateway.test/mcp", "echo", transport=httpx.MockTransport(handle))
    assert run.code == 2
    assert len(attempts) == 1
    assert "cannot reach http://gateway.test/mcp: ReadError: the connection broke" in run.err


async def test_a_modern_call_cut_by_a_proxy_names_tasks_and_the_legacy_mode_as_the_ways_out() -> None:
    # A proxy that cuts requests at its limit: the gateway answered the probe and the tool list,
    # then the connection of the long call is dropped before any answer (issue #38 item 9).
    def handle(request: httpx.Request) -> httpx.Response:
        message = json.loads(request.content)
        method, request_id = message["method"], message.get("id")
        if method == "server/discover":
            result: dict[str, Any] = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}}
        elif method == "tools/list":
            result = {"tools": [{"name": "crawl", "inputSchema": {"type": "object"}}]}
        else:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": request_id, "result": result})

    with anyio.fail_after(10):
        run = await call("http://gateway.test/mcp", "crawl", transport=httpx.MockTransport(handle))
    assert run.code == 2
    assert "the connection to http://gateway.test/mcp was cut before the answer to tools/call came" in run.err
    assert "(RemoteProtocolError: Server disconnected without sending a response.)" in run.err
    assert "A tool the server runs as a task survives it" in run.err
    assert "--task-tool NAME" in run.err
    assert "retry with --mode legacy" in run.err
    assert "cannot reach" not in run.err


# --- the probe's own refusal is reported, not an initialize that never ran -----------------------------


async def test_a_missing_token_is_reported_as_401_with_the_header_to_pass() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec(), tokens=TokenStore(["alice:" + "s" * 32])) as url:
            run = await call(url, "echo", "--arg", "message=hi")
    assert run.code == 2
    assert "requires authorization (HTTP 401" in run.err
    assert "pass --header 'Authorization: Bearer TOKEN'" in run.err
    assert "initialize" not in run.err


async def test_a_wrong_token_is_reported_as_not_accepted() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec(), tokens=TokenStore(["alice:" + "s" * 32])) as url:
            run = await call(url, "echo", "--header", "Authorization: Bearer wrong-token-wrong-token")
    assert run.code == 2
    assert "HTTP 401" in run.err
    assert "the token given with --header was not accepted" in run.err


async def test_a_wrong_path_is_reported_as_404_with_the_mcp_path_suggested() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec()) as url:
            base = url.removesuffix("/mcp")
            run = await call(base + "/", "echo")
    assert run.code == 2
    assert f"nothing answers MCP at {base}/ (HTTP 404" in run.err
    assert f"did you mean {base}/mcp?" in run.err
    assert "initialize" not in run.err


async def test_a_mistyped_path_gets_the_closest_served_endpoint_suggested() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec()) as url:
            base = url.removesuffix("/mcp")
            run = await call(base + "/mpc", "echo", "--arg", "message=x")
    assert run.code == 2
    assert f"did you mean {base}/mcp?" in run.err
    assert "/mpc/mcp" not in run.err


async def test_an_sse_path_gets_the_endpoint_the_gateway_serves_suggested() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec()) as url:
            base = url.removesuffix("/mcp")
            run = await call(base + "/sse", "echo")
    assert run.code == 2
    assert f"did you mean {base}/mcp?" in run.err
    assert "did you mean " + base + "/servers/" not in run.err


@pytest.mark.parametrize("mode", ["auto", "modern", "legacy"])
async def test_a_trailing_slash_is_followed_to_the_endpoint_and_named(mode: str) -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec()) as url:
            run = await call(url + "/", "echo", "--arg", "message=slash", "--mode", mode)
    assert run.code == 0, run.err
    assert run.out == "slash\n"
    assert f"note: {url}/ redirects to {url}; use that URL" in run.err


async def test_a_server_that_cannot_start_is_reported_with_its_exit_not_as_a_failed_initialize() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec("--exit-at-start", "3")) as url:
            run = await call(url, "echo")
    assert run.code == 2
    assert "answers, but its server cannot start: cannot start" in run.err
    assert "exited with code 3" in run.err
    assert "initialize failed" not in run.err


async def test_forced_legacy_mode_reports_a_401_the_same_way() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec(), tokens=TokenStore(["alice:" + "s" * 32])) as url:
            run = await call(url, "echo", "--mode", "legacy")
    assert run.code == 2
    assert "requires authorization (HTTP 401" in run.err


# --- a mistyped tool name --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_mistyped_tool_gets_the_closest_listed_names_suggested(mode: str) -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec()) as url:
            run = await call(url, "ecko", "--arg", "message=x", "--mode", mode)
    assert run.code == 1
    assert "unknown tool: ecko" in run.err  # the server's own words first
    assert "'ecko' is not among the tools listed; did you mean echo?" in run.err


async def test_a_tool_name_like_none_listed_points_to_the_list() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec()) as url:
            run = await call(url, "zzzzzz")
    assert run.code == 1
    assert "'zzzzzz' is not among the" in run.err
    assert "tools listed (see them with --list)" in run.err
    assert "did you mean" not in run.err


async def test_a_listed_tool_that_fails_gets_no_suggestion() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec()) as url:
            run = await call(url, "error_reply")
    assert run.code == 1
    assert "custom failure" in run.err
    assert "not among the tools listed" not in run.err


async def test_an_unknown_tool_answered_as_a_tool_error_gets_the_suggestion_too() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        message = json.loads(request.content)
        if message["method"] == "server/discover":
            result: dict[str, Any] = {"resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": {}}
        elif message["method"] == "tools/list":
            tools = [{"name": n, "inputSchema": {"type": "object"}} for n in ("list_directory", "read_file")]
            result = {"resultType": "complete", "tools": tools}
        else:  # as the Python SDK answers: a tool error, not a JSON-RPC error
            text = f"Unknown tool: {message['params']['name']}"
            result = {"resultType": "complete", "isError": True, "content": [{"type": "text", "text": text}]}
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": message["id"], "result": result})

    with anyio.fail_after(10):
        run = await call("http://modern.test/mcp", "list_dir", transport=httpx.MockTransport(handle))
    assert run.code == 1
    assert "Unknown tool: list_dir" in run.err
    assert "'list_dir' is not among the tools listed; did you mean list_directory?" in run.err


# --- output ---------------------------------------------------------------------------------------------


async def test_list_names_the_endpoint_era_and_the_legacy_child_behind_it() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec("--era", "legacy")) as url:
            run = await call(url, "--list")
    assert run.code == 0, run.err
    assert "endpoint modern (2026-07-28) · child legacy (2025-11-25)" in run.out


async def test_raw_prints_the_result_as_json() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec()) as url:
            run = await call(url, "echo", "--arg", "message=hi", "--raw")
    assert run.code == 0, run.err
    result = json.loads(run.out)
    assert result["content"] == [{"type": "text", "text": "hi"}]


async def test_raw_list_prints_the_tools_as_json() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec()) as url:
            run = await call(url, "--list", "--raw")
    assert run.code == 0, run.err
    assert "echo" in [tool["name"] for tool in json.loads(run.out)["tools"]]


async def test_without_a_terminal_an_elicitation_stops_the_call_with_a_clear_message() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec()) as url:
            run = await call(url, "needs_input")
    assert run.code == 1
    assert "needs input that call cannot give" in run.err
    assert "run call in a terminal" in run.err


def _modern_server(input_request: dict[str, Any]) -> httpx.MockTransport:
    """A modern endpoint whose one tool answers ``input_required`` with ``input_request``."""

    def handle(request: httpx.Request) -> httpx.Response:
        message = json.loads(request.content)
        if message["method"] == "server/discover":
            result: dict[str, Any] = {"resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": {}}
        elif message["method"] == "tools/list":
            result = {"resultType": "complete", "tools": [{"name": "ask", "inputSchema": {"type": "object"}}]}
        else:
            result = {"resultType": "input_required", "inputRequests": {"k": input_request}, "requestState": "s"}
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": message["id"], "result": result})

    return httpx.MockTransport(handle)


async def test_sampling_is_refused_with_a_clear_message() -> None:
    transport = _modern_server({"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}})
    with anyio.fail_after(10):
        run = await call("http://modern.test/mcp", "ask", transport=transport)
    assert run.code == 1
    assert "sampling/createMessage (an LLM completion); call has no model" in run.err


# --- the elicitation prompt, through a pty --------------------------------------------------------------


class Terminal:
    """``python -m gateway call …`` with a pty as its stdin, stdout and stderr."""

    def __init__(self, process: anyio.abc.Process, master: int) -> None:
        self.process = process
        self.master = master
        self.seen = b""

    async def expect(self, text: str) -> None:
        while text.encode() not in self.seen:
            await anyio.wait_readable(self.master)
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # EIO: the child closed the terminal
                chunk = b""
            if not chunk:
                raise AssertionError(f"{text!r} never came; the terminal showed: {self.screen()!r}")
            self.seen += chunk

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\r")

    async def finish(self) -> int:
        with pytest.raises(AssertionError):
            await self.expect("\x00never\x00")  # read until the terminal closes
        return await self.process.wait()

    def screen(self) -> str:
        return self.seen.decode("utf-8", "replace")


async def run_in_terminal(*argv: str) -> Terminal:
    master, slave = os.openpty()
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"}
    process = await anyio.open_process(
        [sys.executable, "-m", "gateway", "call", *argv], stdin=slave, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    os.set_blocking(master, False)
    return Terminal(process, master)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_call_asks_the_elicitation_form_in_the_terminal_and_sends_the_answer(mode: str) -> None:
    # auto: the modern input_required round; legacy: the gateway's elicitation/create on the stream.
    with anyio.fail_after(45):
        async with running_gateway(server_spec()) as url:
            terminal = await run_in_terminal(url, "needs_input", "--mode", mode, "--timeout", "40")
            try:
                await terminal.expect("the server asks: Your name?")
                await terminal.expect("name (string, required): ")
                terminal.type("Ada")
                code = await terminal.finish()
            finally:
                os.close(terminal.master)
    assert code == 0, terminal.screen()
    assert "hello Ada" in terminal.screen()


async def test_call_answers_roots_from_the_root_flags_and_the_form_in_one_round() -> None:
    with anyio.fail_after(45):
        async with running_gateway(server_spec()) as url:
            terminal = await run_in_terminal(url, "needs_input", "--arg", "roots=true", "--root", "/srv/data", "--raw")
            try:
                await terminal.expect("name (string, required): ")
                terminal.type("Grace")
                code = await terminal.finish()
            finally:
                os.close(terminal.master)
    assert code == 0, terminal.screen()
    assert '"file:///srv/data"' in terminal.screen()
    assert '"name": "Grace"' in terminal.screen()


async def test_a_spinner_runs_on_a_terminal_while_the_first_answer_is_awaited() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec()) as url:
            run = await call_wrapped(url, "echo", "--arg", "message=hi")  # stderr is a terminal there
    assert run.code == 0
    assert f"waiting for {url} to answer" in " ".join(run.err.split())
