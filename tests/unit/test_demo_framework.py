"""The stdio demo framework, driven through real pipes: the demo server and the test server.

Every read waits on a line with a deadline, never on a sleep. Each server runs as a real
subprocess of ``sys.executable``, with the repository root on PYTHONPATH so it works with or
without an editable install.
"""

from __future__ import annotations

import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from gateway.tools.demo.framework import StdioServer, ToolContext

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_SERVER = REPO_ROOT / "tests" / "servers" / "testserver.py"
CONFORMANCE_FIXTURE = REPO_ROOT / "tests" / "servers" / "conformance_fixture.py"
READ_TIMEOUT = 5.0  # per line; a healthy server answers in milliseconds
MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
SERVER_INFO = "io.modelcontextprotocol/serverInfo"

Message = dict[str, Any]


class Child:
    """A server process on real pipes. Pump threads turn stdout/stderr into queues of lines."""

    def __init__(self, argv: list[str]) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT, env=env
        )
        self.seen: list[Message] = []  # messages passed over by the last response_to
        self._stdout: queue.Queue[bytes] = queue.Queue()
        self._stderr: queue.Queue[bytes] = queue.Queue()
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        self._pumps = [self._pump(self.proc.stdout, self._stdout), self._pump(self.proc.stderr, self._stderr)]

    @staticmethod
    def _pump(pipe: IO[bytes], lines: queue.Queue[bytes]) -> threading.Thread:
        def run() -> None:
            for line in iter(pipe.readline, b""):
                lines.put(line)
            lines.put(b"")  # EOF marker

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def send(self, message: Message) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def read_line(self) -> bytes:
        """The next stdout line, or b"" at EOF. Fails the test after READ_TIMEOUT."""
        try:
            return self._stdout.get(timeout=READ_TIMEOUT)
        except queue.Empty:
            pytest.fail(f"no stdout line within {READ_TIMEOUT} s")

    def read(self) -> Message:
        line = self.read_line()
        assert line, "stdout reached EOF"
        message: Message = json.loads(line)
        return message

    def read_until_eof(self) -> list[Message]:
        return [json.loads(line) for line in iter(self.read_line, b"")]

    def stderr_line(self) -> str:
        try:
            return self._stderr.get(timeout=READ_TIMEOUT).decode()
        except queue.Empty:
            pytest.fail(f"no stderr line within {READ_TIMEOUT} s")

    def stderr_text(self) -> str:
        """All of stderr; call only once the process has exited."""
        return "".join(iter(self.stderr_line, ""))

    def request(self, request_id: Any, method: str, params: Message | None = None) -> Message:
        """Send a request and return its response. Other messages met on the way are kept in ``seen``."""
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})
        return self.response_to(request_id)

    def response_to(self, request_id: Any) -> Message:
        self.seen = []
        while not _is_response_to(message := self.read(), request_id):
            self.seen.append(message)
        return message

    def send_call(self, request_id: Any, tool: str, arguments: Message | None = None, **meta: Any) -> None:
        """Send a modern tools/call without waiting; ``meta`` adds keys (e.g. progressToken) to ``_meta``."""
        params = {"name": tool, "arguments": arguments or {}, "_meta": {**META, **meta}}
        self.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})

    def call(self, request_id: Any, tool: str, arguments: Message | None = None, **meta: Any) -> Message:
        """A modern tools/call and its response."""
        self.send_call(request_id, tool, arguments, **meta)
        return self.response_to(request_id)

    def wait(self) -> int:
        return self.proc.wait(timeout=READ_TIMEOUT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=READ_TIMEOUT)
        for pump in self._pumps:
            pump.join(timeout=READ_TIMEOUT)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def _is_response_to(message: Message, request_id: Any) -> bool:
    """Ids match only with the same JSON type: 7 and "7" are different requests."""
    has_id = "id" in message and "method" not in message
    return has_id and type(message["id"]) is type(request_id) and message["id"] == request_id


def _line(message: Message) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _text(response: Message) -> str:
    text: str = response["result"]["content"][0]["text"]
    return text


@pytest.fixture
def spawn() -> Iterator[Callable[..., Child]]:
    """Start ``testserver.py`` with flags, the demo server with ``demo=True``, or the conformance
    fixture with flags and ``conformance=True``. All are stopped after."""
    children: list[Child] = []

    def start(*flags: str, demo: bool = False, conformance: bool = False) -> Child:
        server = CONFORMANCE_FIXTURE if conformance else TEST_SERVER
        argv = [sys.executable, "-m", "gateway.tools.demo.server"] if demo else [sys.executable, str(server), *flags]
        children.append(child := Child(argv))
        return child

    yield start
    for child in children:
        child.stop()


def _initialize(child: Child, version: str = "2025-06-18") -> Message:
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}
    response = child.request(0, "initialize", params)
    child.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return response


# -- eras ---------------------------------------------------------------------------------------


def test_the_demo_server_answers_discover_with_a_complete_discover_result(spawn: Callable[..., Child]) -> None:
    result = spawn(demo=True).request(1, "server/discover", {"_meta": META})["result"]

    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == [MODERN]
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert isinstance(result["ttlMs"], int)
    assert result["ttlMs"] >= 0
    assert result["cacheScope"] == "public"
    assert result["_meta"][SERVER_INFO]["name"] == "mcp-stdio-gateway-demo"
    assert "serverInfo" not in result


def test_a_legacy_server_needs_initialize_and_never_adds_modern_fields(spawn: Callable[..., Child]) -> None:
    child = spawn("--era", "legacy")

    assert child.request(1, "tools/list")["error"]["code"] == -32600
    assert child.request(2, "server/discover", {"_meta": META})["error"]["code"] == -32601
    assert child.request(3, "ping") == {"jsonrpc": "2.0", "id": 3, "result": {}}
    result = _initialize(child)["result"]
    assert result["protocolVersion"] == "2025-06-18"
    assert result["serverInfo"] == {"name": "testserver", "version": "0.1.0"}
    tools = child.request(4, "tools/list")["result"]
    assert {"echo", "countdown", "fail", "crash", "sleep", "late_reply"} <= {tool["name"] for tool in tools["tools"]}
    assert all(tool["inputSchema"]["type"] == "object" for tool in tools["tools"])
    assert tools.keys() == {"tools"}
    echo = child.request(5, "tools/call", {"name": "echo", "arguments": {"message": "hi"}})
    assert echo["result"] == {"content": [{"type": "text", "text": "hi"}]}
    unknown = _initialize(child, "1999-01-01")["result"]
    assert unknown["protocolVersion"] == "2025-11-25"


def test_a_modern_server_refuses_initialize_and_incomplete_meta(spawn: Callable[..., Child]) -> None:
    child = spawn("--era", "modern")

    refused = _initialize(child)["error"]
    assert refused["code"] == -32601
    assert MODERN in refused["message"]
    assert child.request(1, "tools/list")["error"]["code"] == -32602
    no_caps = {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}
    assert child.request(2, "tools/list", no_caps)["error"]["code"] == -32602
    future = {"_meta": {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}}
    assert child.request(3, "tools/list", future)["error"] == {
        "code": -32022,
        "message": "unsupported protocol version: 2099-01-01",
        "data": {"supported": [MODERN], "requested": "2099-01-01"},
    }
    listed = child.request(4, "tools/list", {"_meta": META})["result"]
    assert (listed["resultType"], listed["cacheScope"], listed["ttlMs"]) == ("complete", "public", 60_000)
    assert listed["_meta"][SERVER_INFO]["name"] == "testserver"


def test_a_dual_server_serves_each_request_in_its_own_era(spawn: Callable[..., Child]) -> None:
    child = spawn("--ttl-ms", "0", "--cache-scope", "private")

    modern = child.request(1, "tools/list", {"_meta": META})["result"]
    assert (modern["ttlMs"], modern["cacheScope"]) == (0, "private")
    assert child.request(2, "tools/list")["error"]["code"] == -32600  # legacy-style: not initialized
    _initialize(child)
    assert child.request(3, "tools/list")["result"].keys() == {"tools"}
    assert child.call(4, "echo", {"message": "still modern"})["result"]["resultType"] == "complete"


# -- tools, progress, cancellation --------------------------------------------------------------


def test_echo_returns_its_message_with_the_id_in_its_exact_json_type(spawn: Callable[..., Child]) -> None:
    child = spawn()

    by_int = child.call(7, "echo", {"message": "seven"})
    by_str = child.call("7", "echo", {"message": "string seven"})

    assert (by_int["id"], _text(by_int)) == (7, "seven")
    assert (by_str["id"], _text(by_str)) == ("7", "string seven")
    assert by_int["result"]["_meta"][SERVER_INFO]["name"] == "testserver"


def test_countdown_sends_increasing_progress_then_its_result(spawn: Callable[..., Child]) -> None:
    child = spawn(demo=True)

    response = child.call(1, "countdown", {"steps": 3, "interval_ms": 1}, progressToken="tok")

    assert _text(response) == "done after 3 steps"
    assert [message["params"] for message in child.seen] == [
        {"progressToken": "tok", "progress": step, "total": 3, "message": f"step {step} of 3"} for step in (1, 2, 3)
    ]


def test_a_cancelled_slow_tool_stops_and_never_replies(spawn: Callable[..., Child]) -> None:
    child = spawn()
    child.send_call(1, "countdown", {"steps": 100, "interval_ms": 20}, progressToken=9)
    assert child.read()["method"] == "notifications/progress"  # it is running

    child.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
    echo = child.call(2, "echo", {"message": "not blocked"})  # handled after the cancellation
    before_echo = child.seen
    ids = child.call(3, "cancelled_ids")["result"]["structuredContent"]
    after_echo = child.seen
    child.close_stdin()
    after = child.read_until_eof()

    assert _text(echo) == "not blocked"
    assert not any(message.get("id") == 1 for message in before_echo)
    assert ids == {"ids": [1]}
    assert after_echo == after == [], "nothing may follow a processed cancellation for that request"
    assert child.wait() == 0


def test_a_cancellation_only_matches_an_id_of_the_same_json_type(spawn: Callable[..., Child]) -> None:
    child = spawn()
    child.send_call(7, "sleep", {"ms": 200})
    child.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "7"}})

    assert _text(child.response_to(7)) == "slept"
    assert child.call(8, "cancelled_ids")["result"]["structuredContent"] == {"ids": ["7"]}


def test_late_reply_answers_even_after_a_cancellation(spawn: Callable[..., Child]) -> None:
    child = spawn()
    child.send_call(1, "late_reply", {"ms": 50})
    child.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})

    assert _text(child.response_to(1)) == "late reply after 50 ms"


def test_a_non_json_line_gets_a_parse_error_with_a_null_id(spawn: Callable[..., Child]) -> None:
    child = spawn()

    child.send_raw(b"this is not json\n")
    assert child.read() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "parse error: a line is not UTF-8 JSON"},
    }
    child.send_raw(b"[1, 2]\n")
    assert child.read()["error"]["code"] == -32600
    assert child.request(1, "ping")["result"] == {}  # still serving


def test_errors_are_tool_errors_or_json_rpc_errors_as_each_tool_says(spawn: Callable[..., Child]) -> None:
    child = spawn()

    assert child.call(1, "fail")["result"]["isError"] is True
    assert child.call(2, "nope")["error"] == {"code": -32602, "message": "unknown tool: nope"}
    assert child.call(3, "error_reply")["error"] == {
        "code": 1234,
        "message": "custom failure",
        "data": {"detail": [1, 2]},
    }
    assert child.call(4, "malformed_error") == {"jsonrpc": "2.0", "id": 4, "error": "boom"}
    bad_argument = child.call(5, "countdown", {"steps": "many"})["result"]
    assert bad_argument["isError"] is True
    assert "'steps' must be an integer" in bad_argument["content"][0]["text"]


def test_a_tool_can_ask_the_client_and_wait_for_its_answer(spawn: Callable[..., Child]) -> None:
    child = spawn()
    child.send_call(1, "ping_client")

    asked = child.read()
    assert (asked["id"], asked["method"]) == ("s-1", "ping")
    child.send({"jsonrpc": "2.0", "id": "s-1", "result": {}})
    assert _text(child.response_to(1)) == "pong: {}"


def test_a_call_handler_may_ask_the_client_while_the_reader_goes_on(spawn: Callable[..., Child]) -> None:
    # prompts/get is answered on a thread of its own (add_call_handler): the prompt asks the
    # client, and a ping sent meanwhile is answered before the prompt is.
    child = spawn("--era", "legacy", conformance=True)
    _initialize(child, "2025-11-25")
    child.send(
        {"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": {"name": "test_input_required_result_prompt"}}
    )
    asked = child.read()
    assert (asked["id"], asked["method"]) == ("s-1", "elicitation/create")
    assert child.request(2, "ping") == {"jsonrpc": "2.0", "id": 2, "result": {}}
    child.send({"jsonrpc": "2.0", "id": "s-1", "result": {"action": "accept", "content": {"context": "tests"}}})
    [message] = child.response_to(1)["result"]["messages"]
    assert message["content"]["text"] == "Prompt with context: tests"
    unknown = child.request(3, "prompts/get", {"name": "no_such_prompt"})
    assert unknown["error"]["code"] == -32602  # an RpcError of the handler is the reply


def test_a_call_handler_that_raises_answers_with_an_internal_error() -> None:
    def broken(ctx: ToolContext, params: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("oops")

    lines = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}},
        {"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "x:"}},
    ]
    stdout = io.BytesIO()
    server = StdioServer("t", "1", eras=("legacy",), stdin=io.BytesIO(b"".join(_line(m) for m in lines)), stdout=stdout)
    server.add_call_handler("resources/read", broken)
    server.serve()  # at EOF it waits for the handler's reply
    replies = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert replies[1] == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32603, "message": "resources/read failed: KeyError"},
    }


def test_modern_results_of_cacheable_methods_carry_cache_hints(spawn: Callable[..., Child]) -> None:
    modern = spawn("--era", "dual", conformance=True)
    for method, params in [("resources/read", {"uri": "test://static-text"}), ("prompts/list", {})]:
        result = modern.request(1, method, {**params, "_meta": META})["result"]
        assert (result["ttlMs"], result["cacheScope"]) == (60_000, "public"), method
    called = modern.call(2, "test_simple_text")["result"]
    assert "ttlMs" not in called  # a tool's result is not cacheable
    _initialize(modern, "2025-11-25")
    legacy = modern.request(3, "resources/read", {"uri": "test://static-text"})["result"]
    assert "ttlMs" not in legacy
    assert "resultType" not in legacy


def test_the_small_test_tools_do_what_they_say(spawn: Callable[..., Child]) -> None:
    child = spawn()

    assert child.call(1, "pid")["result"]["structuredContent"] == {"pid": child.proc.pid}
    assert _text(child.call(2, "big", {"bytes": 100_000})) == "x" * 100_000
    env = child.call(3, "env", {"names": ["PYTHONPATH", "SURELY_UNSET_VARIABLE"]})["result"]["structuredContent"]
    assert env["env"]["SURELY_UNSET_VARIABLE"] is None
    assert env["env"]["PYTHONPATH"].startswith(str(REPO_ROOT))
    assert _text(child.call(4, "cwd")) == str(REPO_ROOT)
    child.send_call(6, "noise", {"text": "raw"})
    assert child.read_line() == b"raw\n"  # written before the reply, under the same lock
    assert _text(child.response_to(6)) == "ok"
    child.call(7, "notify", {"method": "notifications/tools/list_changed"})
    assert child.seen == [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}]
    burst = child.call(8, "progress_burst", {"count": 3, "tag": "A"}, progressToken="a")
    assert _text(burst) == "A"
    assert [m["params"]["message"] for m in child.seen] == ["A", "A", "A"]
    child.call(9, "stderr", {"lines": ["one", "two"]})
    assert (child.stderr_line(), child.stderr_line()) == ("one\n", "two\n")


def test_fork_grandchild_returns_the_pid_of_a_live_process(spawn: Callable[..., Child]) -> None:
    child = spawn()
    pid = child.call(1, "fork_grandchild")["result"]["structuredContent"]["pid"]
    try:
        os.kill(pid, 0)  # raises if there is no such process
        assert os.getpgid(pid) == os.getpgid(child.proc.pid)
    finally:
        os.kill(pid, signal.SIGKILL)


# -- process behaviour and flags ----------------------------------------------------------------


def test_crash_exits_with_code_3_and_no_reply(spawn: Callable[..., Child]) -> None:
    child = spawn(demo=True)
    child.send_call(1, "crash")

    assert child.read_until_eof() == []
    assert child.wait() == 3
    assert "demo: crashing on request" in child.stderr_text()


def test_exit_and_kill_self_end_the_process_as_asked(spawn: Callable[..., Child]) -> None:
    exiting, killed = spawn(), spawn()
    exiting.send_call(1, "exit", {"code": 5, "stderr": "bye"})
    killed.send_call(1, "kill_self", {"signal": int(signal.SIGTERM)})

    assert (exiting.read_until_eof(), exiting.wait(), exiting.stderr_text()) == ([], 5, "bye\n")
    assert (killed.read_until_eof(), killed.wait()) == ([], -signal.SIGTERM)


def test_start_up_flags_banner_stderr_lines_and_exit_at_start(spawn: Callable[..., Child]) -> None:
    bannered = spawn("--banner", "hello, not json", "--stderr-lines", "2")
    assert bannered.read_line() == b"hello, not json\n"
    assert (bannered.stderr_line(), bannered.stderr_line()) == ("boot line 1\n", "boot line 2\n")

    fatal = spawn("--exit-at-start", "7")
    assert (fatal.wait(), fatal.stderr_text()) == (7, "fatal: configured to exit\n")


def test_silent_probe_ignores_discover_and_silent_writes_nothing(spawn: Callable[..., Child]) -> None:
    probed = spawn("--era", "legacy", "--silent-probe")
    probed.send({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}})
    assert _initialize(probed)["id"] == 0
    assert probed.seen == []  # the discover got no answer

    silent = spawn("--silent")
    silent.send({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}})
    silent.close_stdin()
    assert (silent.read_until_eof(), silent.wait()) == ([], 0)


def test_with_ignore_stdin_eof_and_ignore_sigterm_only_sigkill_ends_it(spawn: Callable[..., Child]) -> None:
    stubborn = spawn("--ignore-stdin-eof", "--ignore-sigterm", "--stderr-lines", "1")
    assert stubborn.stderr_line() == "boot line 1\n"  # SIGTERM is ignored from here on
    stubborn.close_stdin()
    stubborn.proc.terminate()
    with pytest.raises(subprocess.TimeoutExpired):
        stubborn.proc.wait(timeout=0.3)  # a bounded check that it is still alive
    stubborn.proc.kill()
    assert stubborn.wait() == -signal.SIGKILL


def test_a_server_exits_at_stdin_eof(spawn: Callable[..., Child]) -> None:
    child = spawn(demo=True)
    assert child.request(1, "server/discover", {"_meta": META})["result"]["resultType"] == "complete"
    child.close_stdin()
    assert (child.read_until_eof(), child.wait()) == ([], 0)
