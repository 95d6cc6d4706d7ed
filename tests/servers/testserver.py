"""A configurable stdio MCP server for the gateway's tests: ``python tests/servers/testserver.py [flags]``.

It is built on ``gateway.tools.demo.framework`` and offers the demo tools (echo, countdown, fail,
crash) plus tools that make a child misbehave on demand. The flags shape the process itself:

--era modern|legacy|dual   which protocol eras to speak (default dual)
--silent-probe             never answer server/discover (a legacy server that ignores it)
--silent                   read stdin until EOF and never write anything
--banner TEXT              write TEXT as a non-JSON line on stdout before serving
--stderr-lines N           write "boot line 1" … "boot line N" to stderr at start
--ignore-stdin-eof         keep running after stdin EOF (until a signal ends it)
--ignore-sigterm           ignore SIGTERM (with --ignore-stdin-eof, only SIGKILL ends it)
--exit-at-start CODE       write "fatal: configured to exit" to stderr, exit with CODE
--ttl-ms N, --cache-scope  the cache hints of modern discover and tools/list results
--name NAME                serverInfo.name (default "testserver")
--page-size N              answer tools/list in pages of N tools (nextCursor = the next index)
--record FILE              append every line read from stdin to FILE
--subscribe                declare resources.subscribe (legacy subscribe, modern listen URIs)
--logging                  declare logging (the log tool honours the client's level either way)
--cache-roots              fetch roots after initialized and on roots/list_changed (cached_roots)

Start-up order: SIGTERM handling, then stderr lines, then exit-at-start, then banner, then
serving. A test that needs to know signals are set up can wait for the first stderr line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from gateway.tools.demo.framework import (
    JsonObject,
    RpcError,
    StdioServer,
    Tool,
    ToolContext,
    ToolInputError,
    int_arg,
    object_schema,
    str_arg,
    str_list_arg,
    text_result,
)
from gateway.tools.demo.server import add_demo_tools

ERAS = {"modern": ("modern",), "legacy": ("legacy",), "dual": ("modern", "legacy")}
# Grandchildren are kept referenced so that Popen.__del__ never warns about a live process.
_grandchildren: list[subprocess.Popen[bytes]] = []


def _json_result(key: str, value: Any) -> JsonObject:
    """Text JSON plus the same value as ``structuredContent[key]``."""
    return text_result(json.dumps(value), structured={key: value})


def _pid(ctx: ToolContext, args: JsonObject) -> JsonObject:
    return text_result(str(os.getpid()), structured={"pid": os.getpid()})


def _sleep(ctx: ToolContext, args: JsonObject) -> JsonObject:
    started = time.monotonic()
    if args.get("progress"):  # tells a test the sleep has begun
        ctx.progress(0, 1, "sleeping")
    ctx.cancelled.wait(int_arg(args, "ms", minimum=0) / 1000)
    # The pid tells a test which child of a pool served the call, and the monotonic clock
    # (system-wide on Linux) when: so tests can check overlap without timing assumptions.
    return text_result("slept", structured={"pid": os.getpid(), "started": started, "ended": time.monotonic()})


def _progress_burst(ctx: ToolContext, args: JsonObject) -> JsonObject:
    count, tag = int_arg(args, "count", minimum=0), str_arg(args, "tag")
    for sent in range(1, count + 1):
        ctx.progress(sent, count, tag)
    if args.get("then_sleep_ms"):  # stay busy (cancellable) after the burst
        ctx.cancelled.wait(int_arg(args, "then_sleep_ms", minimum=0) / 1000)
    return text_result(tag)


def _fork_grandchild(ctx: ToolContext, args: JsonObject) -> JsonObject:
    # stdout/stderr are inherited on purpose: a real helper process holds the child's pipes
    # too, so only killing the whole process group makes them reach EOF.
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], stdin=subprocess.DEVNULL)
    _grandchildren.append(grandchild)
    return text_result(str(grandchild.pid), structured={"pid": grandchild.pid})


def _spawn_detached(ctx: ToolContext, args: JsonObject) -> JsonObject:
    # A helper that leaves the child's session and process group (setsid), with its own
    # stdio, the way daemonizing helpers do: no group signal and no pipe EOF reaches it.
    grandchild = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _grandchildren.append(grandchild)
    return text_result(str(grandchild.pid), structured={"pid": grandchild.pid})


def _stderr(ctx: ToolContext, args: JsonObject) -> JsonObject:
    for line in str_list_arg(args, "lines"):
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    return text_result("ok")


def _exit(ctx: ToolContext, args: JsonObject) -> JsonObject:
    ctx.exit_process(int_arg(args, "code"), args.get("stderr") if isinstance(args.get("stderr"), str) else None)


def _kill_self(ctx: ToolContext, args: JsonObject) -> JsonObject:
    signum = int_arg(args, "signal", minimum=1)
    with ctx.holding_stdout():  # so the signal never lands in the middle of another line
        os.kill(os.getpid(), signum)
    return text_result(f"sent signal {signum} to myself")


def _noise(ctx: ToolContext, args: JsonObject) -> JsonObject:
    ctx.write_line(str_arg(args, "text"))
    return text_result("ok")


def _big(ctx: ToolContext, args: JsonObject) -> JsonObject:
    return text_result("x" * int_arg(args, "bytes", minimum=0))


def _error_reply(ctx: ToolContext, args: JsonObject) -> JsonObject:
    raise RpcError(1234, "custom failure", {"detail": [1, 2]})


def _malformed_error(ctx: ToolContext, args: JsonObject) -> JsonObject:
    ctx.write_raw({"jsonrpc": "2.0", "id": ctx.request_id, "error": "boom"})
    ctx.suppress_reply()
    return {}


def _env(ctx: ToolContext, args: JsonObject) -> JsonObject:
    return _json_result("env", {name: os.environ.get(name) for name in str_list_arg(args, "names")})


def _shell(ctx: ToolContext, args: JsonObject) -> JsonObject:
    """What a client of a server with a shell tool can make it do: ``sh -c COMMAND``, its exit
    status and output (the child-secrets tests read the gateway's files and /proc with it)."""
    done = subprocess.run(["/bin/sh", "-c", str_arg(args, "command")], capture_output=True, timeout=30, check=False)
    output = {"status": done.returncode, "stdout": done.stdout.decode(errors="replace")}
    return _json_result("shell", {**output, "stderr": done.stderr.decode(errors="replace")})


def _cwd(ctx: ToolContext, args: JsonObject) -> JsonObject:
    return text_result(os.getcwd())


def _ping_client(ctx: ToolContext, args: JsonObject) -> JsonObject:
    try:
        result = ctx.send_request("ping", None, timeout=10.0)
    except (RpcError, TimeoutError, ConnectionError) as exc:
        return text_result(f"ping_client failed: {type(exc).__name__}: {exc}", is_error=True)
    return text_result(f"pong: {json.dumps(result)}")


def _ask_client(ctx: ToolContext, args: JsonObject) -> JsonObject:
    """Send each of ``requests`` ({method, params}) to the client, one after another, from
    ``parallel`` threads, or ``together`` in one write, and return every answer:
    ``{"result": ...}`` or ``{"error": ...}``.
    With ``progress``, a progress notification goes out before asking and one after; with
    ``wait_ms``, the tool waits that long (or until cancelled) after the first one, before asking;
    with ``gate``, until that file exists (or until cancelled)."""
    requests = args.get("requests")
    if not isinstance(requests, list) or not all(isinstance(r, dict) for r in requests):
        raise ToolInputError("requests must be a list of {method, params} objects")
    timeout = int_arg(args, "timeout_ms", minimum=1, default=20_000) / 1000
    answers: list[JsonObject] = [{} for _ in requests]

    def ask(index: int, request: JsonObject) -> None:
        params = request.get("params")
        try:
            answers[index] = {
                "result": ctx.send_request(
                    str(request["method"]),
                    params if isinstance(params, dict) else None,
                    timeout,
                    cancel_on_timeout=args.get("cancel_on_timeout") is True,
                )
            }
        except RpcError as exc:
            answers[index] = {"error": exc.to_json()}
        except (TimeoutError, ConnectionError) as exc:
            answers[index] = {"error": {"code": 0, "message": f"{type(exc).__name__}: {exc}"}}

    if args.get("progress"):
        ctx.progress(1, 2, "asking")
    if args.get("wait_ms"):  # in flight, no question yet (a test holds the call on the child)
        ctx.cancelled.wait(int_arg(args, "wait_ms", minimum=0) / 1000)
    gate = args.get("gate")
    while isinstance(gate, str) and not os.path.exists(gate) and not ctx.cancelled.wait(0.02):
        pass  # in flight, no question yet, until a test opens the gate
    if args.get("together"):  # one write: the gateway reads them as one round
        pairs = [(str(r["method"]), r["params"] if isinstance(r.get("params"), dict) else None) for r in requests]
        for index, outcome in enumerate(ctx.send_requests(pairs, timeout)):
            if isinstance(outcome, RpcError):
                answers[index] = {"error": outcome.to_json()}
            elif isinstance(outcome, Exception):
                answers[index] = {"error": {"code": 0, "message": f"{type(outcome).__name__}: {outcome}"}}
            else:
                answers[index] = {"result": outcome}
    elif args.get("parallel"):
        threads = [threading.Thread(target=ask, args=(i, r), daemon=True) for i, r in enumerate(requests)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        for index, request in enumerate(requests):
            ask(index, request)
    if args.get("progress"):
        ctx.progress(2, 2, "answered")
    return text_result(json.dumps(answers), structured={"answers": answers})


NAME_REQUEST: JsonObject = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    },
}
FIRST_STATE = "opaque-123"


def _needs_input(ctx: ToolContext, args: JsonObject) -> JsonObject:
    """A modern MRTR tool: without input it answers ``input_required`` (an elicitation keyed
    ``name``, ``requestState`` "opaque-123"); each retry must carry the last round's
    ``requestState`` unchanged and the answers under the same keys. With ``rounds`` N > 1 it
    asks N-1 more times (key ``again-K``, state ``round-K-<name>``) before answering
    "hello <name>"; a retry that does not fit the state gets an error result. With ``roots``
    the first round also asks ``roots/list`` (key ``roots``), and the answer (with rounds 1)
    carries the roots it got."""
    rounds = int_arg(args, "rounds", minimum=1, default=1)
    state = ctx.params.get("requestState")
    given = ctx.params.get("inputResponses")
    given = given if isinstance(given, dict) else {}

    def ask(key: str, request_state: str, message: str) -> JsonObject:
        request = {**NAME_REQUEST, "params": {**NAME_REQUEST["params"], "message": message}}
        return {"resultType": "input_required", "inputRequests": {key: request}, "requestState": request_state}

    def accepted(key: str) -> str | None:
        answer = given.get(key)
        content = answer.get("content") if isinstance(answer, dict) and answer.get("action") == "accept" else None
        name = content.get("name") if isinstance(content, dict) else None
        return name if isinstance(name, str) else None

    if state is None:
        first = ask("name", FIRST_STATE, "Your name?")
        if args.get("roots"):
            first["inputRequests"]["roots"] = {"method": "roots/list"}
        return first
    if state == FIRST_STATE:
        name, done = accepted("name"), 1
    elif isinstance(state, str) and state.startswith("round-") and state.count("-") >= 2:
        _, count, name = state.split("-", 2)
        done = int(count)
        if accepted(f"again-{done}") != name:
            return text_result(f"needs_input: round {done} not confirmed: {given!r}", is_error=True)
    else:
        return text_result(f"needs_input: unexpected requestState {state!r}", is_error=True)
    if name is None:
        return text_result(f"needs_input: no name in {given!r}", is_error=True)
    if done < rounds:
        return ask(f"again-{done + 1}", f"round-{done + 1}-{name}", f"Your name again ({done + 1})?")
    structured: JsonObject = {"name": name, "rounds": done}
    if isinstance(given.get("roots"), dict):
        structured["roots"] = given["roots"].get("roots")
    return text_result(f"hello {name}", structured=structured)


def _url_required(ctx: ToolContext, args: JsonObject) -> JsonObject:
    """As a 2025-11-25 server that needs its user to sign in first: error -32042 with ``urls``
    URL elicitations (default 1) until the file ``grant_dir``/``account`` exists (the user
    completed the flow out of band: the test makes it), then "connected as ACCOUNT"."""
    account, grant_dir = str_arg(args, "account"), str_arg(args, "grant_dir")
    if os.path.exists(os.path.join(grant_dir, account)):
        return text_result(f"connected as {account}", structured={"account": account})
    elicitations = [
        {
            "mode": "url",
            "elicitationId": f"{account}-{n}",
            "url": f"https://auth.example/grant/{account}/{n}",
            "message": f"Sign in as {account} ({n})",
        }
        for n in range(1, int_arg(args, "urls", minimum=0, default=1) + 1)
    ]
    if args.get("no_ids"):  # as a modern server's SDK may send it: no legacy elicitationId
        elicitations = [{k: v for k, v in e.items() if k != "elicitationId"} for e in elicitations]
    raise RpcError(-32042, f"{account} must sign in first", {"elicitations": elicitations})


URL_STATE = "url-state"


def _needs_url(ctx: ToolContext, args: JsonObject) -> JsonObject:
    """A modern MRTR tool asking for a URL visit: ``input_required`` (key ``auth``, state
    "url-state") until retried with that state and ``auth`` accepted."""
    if ctx.params.get("requestState") != URL_STATE:
        request = {
            "method": "elicitation/create",
            "params": {"mode": "url", "message": "Sign in", "url": "https://auth.example/x"},
        }
        return {"resultType": "input_required", "inputRequests": {"auth": request}, "requestState": URL_STATE}
    given = ctx.params.get("inputResponses")
    answer = given.get("auth") if isinstance(given, dict) else None
    action = answer.get("action") if isinstance(answer, dict) else None
    return text_result(f"signed in: {action}", structured={"action": action})


def _notify(ctx: ToolContext, args: JsonObject) -> JsonObject:
    params = args.get("params")
    ctx.notify(str_arg(args, "method"), params if isinstance(params, dict) else None)
    return text_result("ok")


def _late_reply(ctx: ToolContext, args: JsonObject) -> JsonObject:
    ctx.ignore_cancellation()
    ms = int_arg(args, "ms", minimum=0)
    time.sleep(ms / 1000)
    return text_result(f"late reply after {ms} ms")


def _int(description: str) -> JsonObject:
    return {"type": "integer", "description": description}


def _str(description: str) -> JsonObject:
    return {"type": "string", "description": description}


def _str_list(description: str) -> JsonObject:
    return {"type": "array", "items": {"type": "string"}, "description": description}


def _descriptors(ctx: ToolContext, args: JsonObject) -> JsonObject:
    """What this process holds beyond stdin, stdout and stderr, and what it could do with it:
    every other open descriptor (what it points at), and which of them are listening sockets
    it could accept the gateway's connections on."""
    held: dict[str, str] = {}
    listening: list[int] = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the directory listing's own descriptor, closed by now
        if fd <= 2 or target == f"/proc/{os.getpid()}/fd":
            continue
        held[name] = target
        if target.startswith("socket:"):
            try:
                probe = socket.socket(fileno=os.dup(fd))
            except OSError:
                continue
            with probe:
                if probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                    listening.append(fd)
    return text_result(json.dumps(held), structured={"held": held, "listening": listening})


def add_test_tools(server: StdioServer) -> None:
    """Register the test-only tools (the demo tools come from ``add_demo_tools``)."""

    server.add_tool(
        Tool("descriptors", "List the descriptors this process holds beyond 0, 1, 2.", object_schema(), _descriptors)
    )

    def cancelled_ids(ctx: ToolContext, args: JsonObject) -> JsonObject:
        return _json_result("ids", server.cancelled_ids)

    def await_cancelled(ctx: ToolContext, args: JsonObject) -> JsonObject:
        """The cancelled ids once there are at least ``count`` (or after ``timeout_ms``)."""
        count = int_arg(args, "count", minimum=0, default=1)
        timeout = int_arg(args, "timeout_ms", minimum=1, default=10_000) / 1000
        return _json_result("ids", server.wait_cancelled(count, timeout))

    def await_idle(ctx: ToolContext, args: JsonObject) -> JsonObject:
        """How many other tool calls are in flight, once none is (or after ``timeout_ms``)."""
        timeout = int_arg(args, "timeout_ms", minimum=1, default=10_000) / 1000
        return _json_result("others", server.wait_in_flight(1, timeout) - 1)

    def wait_gate(ctx: ToolContext, args: JsonObject) -> JsonObject:
        """Report progress, then wait until the file ``gate`` exists (or the call is cancelled):
        a test opens the gate by creating the file, whichever child or replica runs the call."""
        gate = str_arg(args, "gate")
        ctx.progress(1, 2, "waiting at the gate")
        while not ctx.cancelled.wait(0.02):
            if os.path.exists(gate):
                return text_result("passed", structured={"gate": gate, "pid": os.getpid()})
        return text_result("cancelled at the gate", is_error=True)

    def end_listens(ctx: ToolContext, args: JsonObject) -> JsonObject:
        return text_result(str(server.end_listens(cancelled=args.get("cancelled") is True)))

    asked_later: list[JsonObject] = []  # answers to ask_later's questions, in arrival order
    asked_changed = threading.Condition()

    def ask_later(ctx: ToolContext, args: JsonObject) -> JsonObject:
        """Reply, and ask the client ``method`` right after the reply, in the same write: the
        client reads the question with no request of its own in flight (legacy era)."""
        method = str_arg(args, "method")
        params = args.get("params") if isinstance(args.get("params"), dict) else None
        reply = {"jsonrpc": "2.0", "id": ctx.request_id, "result": text_result("will ask")}

        def ask() -> None:
            [outcome] = server.send_requests([(method, params)], lead=[reply])
            if isinstance(outcome, RpcError):
                answer: JsonObject = {"error": outcome.to_json()}
            elif isinstance(outcome, Exception):
                answer = {"error": {"code": 0, "message": f"{type(outcome).__name__}: {outcome}"}}
            else:
                answer = {"result": outcome}
            with asked_changed:
                asked_later.append(answer)
                asked_changed.notify_all()

        ctx.suppress_reply()
        threading.Thread(target=ask, name="ask_later", daemon=True).start()
        return {}

    def answers_later(ctx: ToolContext, args: JsonObject) -> JsonObject:
        """The answers ask_later got, once there are at least ``count`` (or after ``timeout_ms``)."""
        count = int_arg(args, "count", minimum=0, default=1)
        timeout = int_arg(args, "timeout_ms", minimum=1, default=10_000) / 1000
        with asked_changed:
            asked_changed.wait_for(lambda: len(asked_later) >= count, timeout)
            found = list(asked_later)
        return text_result(json.dumps(found), structured={"answers": found})

    def needs_sampling(ctx: ToolContext, args: JsonObject) -> JsonObject:
        """As a server that checks its client's capabilities before it starts: -32021 unless
        the client declared sampling at initialize, else one sampling/createMessage."""
        if not isinstance(server.client_capabilities.get("sampling"), dict):
            raise RpcError(
                -32021, "this tool needs a client that can sample", {"requiredCapabilities": {"sampling": {}}}
            )
        message = {"role": "user", "content": {"type": "text", "text": str_arg(args, "prompt")}}
        sampled = ctx.send_request("sampling/createMessage", {"messages": [message], "maxTokens": 5}, 20.0)
        return _json_result("sampled", sampled)

    tools = [
        ("pid", "Return this process's pid.", object_schema(), _pid),
        (
            "shell",
            "Run sh -c command; return its status, stdout and stderr.",
            object_schema({"command": _str("command")}, ["command"]),
            _shell,
        ),
        (
            "await_cancelled",
            "Return the cancelled request ids once there are at least count (or after timeout_ms).",
            object_schema({"count": _int("count"), "timeout_ms": _int("timeout_ms")}),
            await_cancelled,
        ),
        (
            "await_idle",
            "Return how many other tool calls are in flight, once none is (or after timeout_ms).",
            object_schema({"timeout_ms": _int("timeout_ms")}),
            await_idle,
        ),
        (
            "wait_gate",
            "Report progress, then wait until the file gate exists (honours cancellation).",
            object_schema({"gate": _str("path of the gate file")}, ["gate"]),
            wait_gate,
        ),
        (
            "needs_sampling",
            "Sample a completion for prompt; -32021 unless the client declared sampling at initialize.",
            object_schema({"prompt": _str("prompt")}, ["prompt"]),
            needs_sampling,
        ),
        (
            "ask_later",
            "Reply 'will ask', then send method (with params) to the client outside any request.",
            object_schema({"method": _str("method"), "params": {"type": "object"}}, ["method"]),
            ask_later,
        ),
        (
            "answers_later",
            "Return the answers ask_later got, waiting (up to timeout_ms) until there are count.",
            object_schema({"count": _int("answers to wait for"), "timeout_ms": _int("ms")}),
            answers_later,
        ),
        (
            "sleep",
            "Wait ms milliseconds, then reply 'slept'. Cancellable. With progress, say so first.",
            object_schema({"ms": _int("ms"), "progress": {"type": "boolean", "description": "progress first"}}, ["ms"]),
            _sleep,
        ),
        (
            "progress_burst",
            "Send count progress notifications whose message is tag, then (optionally) wait then_sleep_ms,"
            " cancellable, then return tag.",
            object_schema(
                {"count": _int("notifications"), "tag": _str("message"), "then_sleep_ms": _int("ms")}, ["count", "tag"]
            ),
            _progress_burst,
        ),
        ("fork_grandchild", "Start a sleeping grandchild process; return its pid.", object_schema(), _fork_grandchild),
        (
            "spawn_detached",
            "Start a sleeping grandchild in a new session (setsid), stdio detached; return its pid.",
            object_schema(),
            _spawn_detached,
        ),
        ("stderr", "Write lines to stderr.", object_schema({"lines": _str_list("lines")}, ["lines"]), _stderr),
        (
            "exit",
            "Write stderr text, then exit with code at once, without replying.",
            object_schema({"code": _int("exit code"), "stderr": _str("text for stderr")}, ["code"]),
            _exit,
        ),
        (
            "kill_self",
            "Send a signal to this process.",
            object_schema({"signal": _int("signal")}, ["signal"]),
            _kill_self,
        ),
        (
            "noise",
            "Write text as a raw non-JSON line on stdout.",
            object_schema({"text": _str("line")}, ["text"]),
            _noise,
        ),
        ("big", "Return that many 'x' characters as text.", object_schema({"bytes": _int("size")}, ["bytes"]), _big),
        ("error_reply", "Answer with JSON-RPC error 1234 'custom failure'.", object_schema(), _error_reply),
        ("malformed_error", 'Answer with {"error": "boom"} (not an error object).', object_schema(), _malformed_error),
        (
            "cancelled_ids",
            "Return the requestIds of every notifications/cancelled so far.",
            object_schema(),
            cancelled_ids,
        ),
        (
            "env",
            "Return the values of environment variables.",
            object_schema({"names": _str_list("names")}, ["names"]),
            _env,
        ),
        ("cwd", "Return the working directory.", object_schema(), _cwd),
        ("ping_client", "Send a ping request to the client and return its answer.", object_schema(), _ping_client),
        (
            "ask_client",
            "Send requests (sampling, elicitation, roots) to the client; return every answer.",
            object_schema(
                {
                    "requests": {"type": "array", "items": {"type": "object"}, "description": "{method, params}"},
                    "parallel": {"type": "boolean", "description": "send from a thread each"},
                    "together": {"type": "boolean", "description": "send all in one write"},
                    "progress": {"type": "boolean", "description": "progress before and after asking"},
                    "timeout_ms": _int("how long to wait for each answer"),
                    "cancel_on_timeout": {"type": "boolean", "description": "withdraw a question left unanswered"},
                    "wait_ms": _int("ms to wait (cancellable) after the first progress, before asking"),
                },
                ["requests"],
            ),
            _ask_client,
        ),
        (
            "needs_input",
            "Modern MRTR: answer input_required (an elicitation for a name) until retried with it, rounds times.",
            object_schema(
                {
                    "rounds": _int("how many input rounds before the answer (default 1)"),
                    "roots": {"type": "boolean", "description": "also ask roots/list in the first round"},
                }
            ),
            _needs_input,
        ),
        (
            "url_required",
            "As a 2025-11-25 server: error -32042 (urls URL elicitations) until grant_dir/account exists.",
            object_schema(
                {
                    "account": _str("account"),
                    "grant_dir": _str("dir"),
                    "urls": _int("how many"),
                    "no_ids": {"type": "boolean", "description": "leave elicitationId out"},
                },
                ["account", "grant_dir"],
            ),
            _url_required,
        ),
        (
            "needs_url",
            "Modern MRTR: answer input_required (a URL elicitation, key auth) until retried with it.",
            object_schema(),
            _needs_url,
        ),
        (
            "end_listens",
            "End every open subscriptions/listen with the graceful result (or cancelled); return how many.",
            object_schema({"cancelled": {"type": "boolean", "description": "end with notifications/cancelled"}}),
            end_listens,
        ),
        (
            "notify",
            "Send an unsolicited notification of the given method.",
            object_schema({"method": _str("method"), "params": {"type": "object"}}, ["method"]),
            _notify,
        ),
        (
            "subscribed",
            "The resource URIs this process holds legacy subscriptions for (resources/subscribe).",
            object_schema({}),
            lambda ctx, args: _json_result("uris", sorted(server.subscribed)),
        ),
        (
            "late_reply",
            "Ignore cancellation: sleep ms, then reply anyway.",
            object_schema({"ms": _int("ms")}, ["ms"]),
            _late_reply,
        ),
    ]
    for name, description, schema, handler in tools:
        server.add_tool(Tool(name, description, schema, handler))


TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


def add_own_tasks(server: StdioServer) -> None:
    """``--serve-tasks``: the server serves the Tasks extension itself (a modern child that
    keeps its tasks): ``own_task`` answers a client that declared the extension with a task
    handle, and the task completes once the file ``gate`` exists; ``tasks/get`` and
    ``tasks/cancel`` are answered from this process's memory; ``own_tasks_done`` waits until
    ``count`` of them have ended."""
    server.capabilities.setdefault("extensions", {})[TASKS_EXTENSION] = {}
    tasks: dict[str, JsonObject] = {}
    changed = threading.Condition()

    def stamp() -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())

    def own_task(ctx: ToolContext, args: JsonObject) -> JsonObject:
        gate = str_arg(args, "gate")
        caps = ctx.meta.get("io.modelcontextprotocol/clientCapabilities")
        extensions = caps.get("extensions") if isinstance(caps, dict) else None
        if not isinstance(extensions, dict) or TASKS_EXTENSION not in extensions:
            return text_result("no tasks: ran synchronously", structured={"gate": gate})
        with changed:
            task_id = f"child-task-{len(tasks) + 1}"
            task: JsonObject = {"taskId": task_id, "status": "working", "createdAt": stamp(), "lastUpdatedAt": stamp()}
            task["ttlMs"] = 60_000
            tasks[task_id] = task

        def work() -> None:
            while not os.path.exists(gate):
                with changed:
                    if task["status"] != "working":
                        return
                time.sleep(0.02)
            with changed:
                if task["status"] == "working":
                    task.update(status="completed", lastUpdatedAt=stamp(), result=text_result(f"own {task_id}"))
                changed.notify_all()

        threading.Thread(target=work, name=f"own-task:{task_id}", daemon=True).start()
        return {"resultType": "task", **task}

    def get(params: JsonObject) -> JsonObject:
        with changed:
            task = tasks.get(str(params.get("taskId")))
            if task is None:
                raise RpcError(-32602, f"no task {params.get('taskId')!r}")
            return dict(task)

    def cancel(params: JsonObject) -> JsonObject:
        with changed:
            task = tasks.get(str(params.get("taskId")))
            if task is None:
                raise RpcError(-32602, f"no task {params.get('taskId')!r}")
            if task["status"] == "working":
                task.update(status="cancelled", lastUpdatedAt=stamp())
            changed.notify_all()
        return {}

    def own_tasks_done(ctx: ToolContext, args: JsonObject) -> JsonObject:
        count = int_arg(args, "count", minimum=0, default=1)
        with changed:
            changed.wait_for(lambda: sum(t["status"] != "working" for t in tasks.values()) >= count, 10)
            return _json_result("ended", sorted(t["taskId"] for t in tasks.values() if t["status"] != "working"))

    server.request_handlers.update({"tasks/get": get, "tasks/cancel": cancel})
    server.add_tool(
        Tool(
            "own_task",
            "A task of this server's own (with --serve-tasks).",
            object_schema({"gate": _str("gate")}),
            own_task,
        )
    )
    server.add_tool(
        Tool("own_tasks_done", "Wait until count own tasks ended.", object_schema({"count": _int("n")}), own_tasks_done)
    )


def mark_task_support(server: StdioServer, names: list[str]) -> None:
    """``--task-support NAME``: declare ``execution.taskSupport: optional`` on these tools."""
    for name in names:
        tool = server._tools[name]
        server.add_tool(Tool(tool.name, tool.description, tool.input_schema, tool.handler, {"taskSupport": "optional"}))


HEADERED_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"},
        "opts": {"type": "object", "properties": {"mode": {"type": "string", "x-mcp-header": "Mode"}}},
        "note": {"type": "string"},
    },
}


class Recorder:
    """stdin that also appends each line to a file, so a test can see exactly what arrived."""

    def __init__(self, stream: Any, path: str) -> None:
        self._stream = stream
        self._file = open(path, "ab", buffering=0)  # noqa: SIM115 - lives as long as the process

    def readline(self) -> bytes:
        line: bytes = self._stream.readline()
        if line:
            self._file.write(line if line.endswith(b"\n") else line + b"\n")
        return line


class Deafened:
    """stdin that stops being read for good once the ``deafen`` tool ran (``--deafen-tool``): a
    child that answered its handshake and then never reads its stdin again, alive, so the
    gateway's pipe to it fills up."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.deaf = threading.Event()

    def readline(self) -> bytes:
        if self.deaf.is_set():
            threading.Event().wait()
        line: bytes = self._stream.readline()
        if self.deaf.is_set():  # it was waiting in the read when the tool ran: this line is not read either
            threading.Event().wait()
        return line


def add_deafen_tool(server: StdioServer, stdin: Deafened) -> None:
    def deafen(ctx: ToolContext, args: JsonObject) -> JsonObject:
        stdin.deaf.set()
        return text_result("no longer reading stdin")

    server.add_tool(Tool("deafen", "Stop reading stdin for good (--deafen-tool).", object_schema(), deafen))


def add_header_tools(server: StdioServer) -> None:
    """Tools with ``x-mcp-header`` annotations: one valid, one invalid (on a number)."""

    def headered(ctx: ToolContext, args: JsonObject) -> JsonObject:
        return text_result(json.dumps(args, sort_keys=True), structured={"arguments": args})

    def freeze(ctx: ToolContext, args: JsonObject) -> JsonObject:
        # A hung server: alive, but the reader blocks on the stdout lock as soon as it has
        # anything to answer, so nothing is answered ever again (no signal tricks: a stopped
        # process in an orphaned group may be sent SIGCONT by the kernel).
        with ctx.holding_stdout():
            threading.Event().wait()
        return text_result("thawed")  # pragma: no cover - never reached

    def meta(ctx: ToolContext, args: JsonObject) -> JsonObject:
        return text_result(json.dumps(ctx.meta, sort_keys=True), structured={"meta": ctx.meta})

    def add_tool(ctx: ToolContext, args: JsonObject) -> JsonObject:
        name = str_arg(args, "name")
        server.add_tool(Tool(name, "Added at run time; echoes 'message'.", object_schema(), headered))
        ctx.notify("notifications/tools/list_changed")
        return text_result(f"added {name}")

    server.add_tool(Tool("headered", "Echo the arguments; four are mirrored into headers.", HEADERED_SCHEMA, headered))
    server.add_tool(Tool("meta", "Return the request's _meta as received.", object_schema(), meta))
    server.add_tool(
        Tool("freeze", "Hang: hold the stdout lock forever, so nothing is answered any more.", object_schema(), freeze)
    )
    bad_schema = {"type": "object", "properties": {"ratio": {"type": "number", "x-mcp-header": "Ratio"}}}
    server.add_tool(Tool("bad_header", "An x-mcp-header on a number: invalid for HTTP clients.", bad_schema, headered))
    server.add_tool(
        Tool(
            "add_tool",
            "Register a tool named 'name' and send notifications/tools/list_changed.",
            object_schema({"name": {"type": "string"}}, ["name"]),
            add_tool,
        )
    )


LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def add_logging_tools(server: StdioServer) -> None:
    """``log``: emit notifications/message as a real server does: a legacy one at or above
    the last ``logging/setLevel`` (everything before one), a modern one at or above the
    request's ``logLevel`` (nothing without one)."""

    def log(ctx: ToolContext, args: JsonObject) -> JsonObject:
        level = str_arg(args, "level")
        minimum = ctx.meta.get("io.modelcontextprotocol/logLevel") if ctx.era == "modern" else server.log_level
        if ctx.era == "modern" and minimum is None:
            return text_result("not logged")
        if minimum in LOG_LEVELS and LOG_LEVELS.index(level) < LOG_LEVELS.index(minimum):
            return text_result("not logged")
        ctx.notify("notifications/message", {"level": level, "data": str_arg(args, "data")})
        return text_result("logged")

    level_schema = {"type": "string", "enum": list(LOG_LEVELS)}
    schema = object_schema({"level": level_schema, "data": _str("message")}, ["level", "data"])
    server.add_tool(Tool("log", "Log data at level, if the client's level lets it through.", schema, log))


def add_roots_cache(server: StdioServer) -> None:
    """``--cache-roots``: fetch roots once after ``initialized`` and again on each
    ``notifications/roots/list_changed`` (as server-everything does); ``cached_roots``
    returns what the last fetch got, after any fetch in progress has finished."""
    state: JsonObject = {"roots": None, "fetching": 0}
    changed = threading.Condition()

    def fetch() -> None:
        try:
            roots: Any = server.send_request("roots/list", None, timeout=10.0).get("roots")
        except RpcError as exc:
            roots = {"error": exc.to_json()}
        except (TimeoutError, ConnectionError) as exc:
            roots = {"error": str(exc)}
        with changed:
            state["roots"], state["fetching"] = roots, state["fetching"] - 1
            changed.notify_all()

    def refresh(params: JsonObject) -> None:
        with changed:  # counted on the reader thread: a later call waits for this fetch
            state["fetching"] += 1
        threading.Thread(target=fetch, daemon=True).start()

    def cached_roots(ctx: ToolContext, args: JsonObject) -> JsonObject:
        with changed:
            changed.wait_for(lambda: state["fetching"] == 0, timeout=15.0)
            roots = state["roots"]
        return _json_result("roots", roots)

    server.notification_handlers["notifications/initialized"] = refresh
    server.notification_handlers["notifications/roots/list_changed"] = refresh
    server.add_tool(
        Tool("cached_roots", "Return the roots fetched last (--cache-roots).", object_schema(), cached_roots)
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A configurable stdio MCP server for tests.")
    parser.add_argument("--era", choices=sorted(ERAS), default="dual")
    parser.add_argument("--silent-probe", action="store_true", help="never answer server/discover")
    parser.add_argument("--silent", action="store_true", help="read stdin until EOF, write nothing")
    parser.add_argument("--banner", help="a non-JSON line to write on stdout before serving")
    parser.add_argument("--stderr-lines", type=int, default=0, metavar="N")
    parser.add_argument("--ignore-stdin-eof", action="store_true")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--exit-at-start", type=int, metavar="CODE")
    parser.add_argument("--ttl-ms", type=int, default=60_000)
    parser.add_argument("--cache-scope", choices=("public", "private"), default="public")
    parser.add_argument("--name", default="testserver")
    parser.add_argument(
        "--subscribe",
        action="store_true",
        help="declare resources.subscribe: legacy resources/subscribe, modern listen resourceSubscriptions",
    )
    parser.add_argument("--page-size", type=int, default=None, help="tools/list pages of N tools")
    parser.add_argument("--logging", action="store_true", help="declare logging; the log tool honours levels")
    parser.add_argument("--cache-roots", action="store_true", help="fetch roots at start and on roots/list_changed")
    parser.add_argument("--record", default=None, metavar="FILE", help="append every line read from stdin to FILE")
    parser.add_argument("--serve-tasks", action="store_true", help="serve the Tasks extension itself (own_task)")
    parser.add_argument(
        "--task-support", action="append", default=[], metavar="TOOL", help="mark TOOL execution.taskSupport optional"
    )
    parser.add_argument("--deafen-tool", action="store_true", help="a tool deafen: stop reading stdin after it")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    if options.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for number in range(1, options.stderr_lines + 1):
        sys.stderr.write(f"boot line {number}\n")
    sys.stderr.flush()
    if options.exit_at_start is not None:
        sys.stderr.write("fatal: configured to exit\n")
        sys.stderr.flush()
        sys.exit(options.exit_at_start)
    if options.silent:
        while os.read(sys.stdin.fileno(), 65536):
            pass
    else:
        stdin: Any = Recorder(sys.stdin.buffer, options.record) if options.record else None
        deafened = Deafened(stdin or sys.stdin.buffer) if options.deafen_tool else None
        stdin = deafened or stdin
        server = StdioServer(
            options.name,
            "0.1.0",
            eras=ERAS[options.era],
            instructions="A test server for mcp-stdio-gateway.",
            capabilities={
                "tools": {"listChanged": True},
                **({"resources": {"subscribe": True}} if options.subscribe else {}),
                **({"logging": {}} if options.logging else {}),
            },
            ttl_ms=options.ttl_ms,
            cache_scope=options.cache_scope,
            silent_methods={"server/discover"} if options.silent_probe else (),
            page_size=options.page_size,
            stdin=stdin,
        )
        if deafened is not None:
            add_deafen_tool(server, deafened)
        add_demo_tools(server)
        add_test_tools(server)
        add_header_tools(server)
        add_logging_tools(server)
        mark_task_support(server, options.task_support)
        if options.serve_tasks:
            add_own_tasks(server)
        if options.cache_roots:
            add_roots_cache(server)
        if options.banner is not None:
            server.write_line(options.banner)
        server.serve()
    if options.ignore_stdin_eof:
        threading.Event().wait()  # only a signal ends the process now


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
