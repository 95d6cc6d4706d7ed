"""What a client reads of a failing child (docs/operations.md, "What clients see").

By default a client reads what failed and how (the server, exit code or signal, the error's
kind), never the child's stderr, its command or paths from them: in a shared pool the client
that reads them may not be the one that caused them. ``--expose-child-errors`` gives clients
everything, for local development. The operator reads everything in the log and on
``/status`` either way. Both client eras, answers as JSON and as SSE; a child that crashes in a
call and one that fails at start. Every wait is on the fake's state or a log record, bounded.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

import anyio
import httpx
import pytest

from gateway.errors import GATEWAY_NAME, WITHHELD
from tests.component.fakecalls import DEFAULT_TOOLS, Call, CallCancelled, JsonObject
from tests.component.fakechild import Script, fake_backend
from tests.component.harness import FAKE_SPEC, Gateway, in_process_gateway, legacy_call
from tests.gateway_server import (
    BASE_HEADERS,
    MODERN_META,
    legacy_initialize,
    modern_call,
    modern_headers,
    open_legacy_session,
    parse_sse,
)
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

BOUND: Final = 20.0
SECRET: Final = "API_KEY=sk-secret-123"
LOGGED: Final = "API_KEY=[redacted]"
"""How the log writes it (``gateway.protocol.redaction``); ``/status`` shows it as it came."""
COMMAND: Final = "/opt/acme-internal/bin/leaky-server"
STDERR: Final = (f"loaded config: {SECRET}", f"at {COMMAND}.js:12")
LEAKS: Final = ("sk-secret-123", "API_KEY", "/opt/acme-internal")
"""What no client may read by default: the secret, and the command's path."""


async def _leak_and_crash(call: Call) -> JsonObject:
    """Writes a secret to stderr and exits unanswered; first a progress (an SSE answer) if asked."""
    if call.arguments.get("progress"):
        await call.progress(1, 2, "working")
    await call.child.exit(1, stderr=list(STDERR))
    raise CallCancelled  # never reached: the exit ended this call


CRASHING: Final = Script(tools={**DEFAULT_TOOLS, "leak": _leak_and_crash})
FAILING_START: Final = Script(exit_at_start=1, stderr_at_start=STDERR)


def gateway(backend: Any, *, exposed: bool) -> Any:
    spec = replace(FAKE_SPEC, command=COMMAND, name="leaky", expose_errors=exposed)
    return in_process_gateway(backend, spec=spec)


async def crash(gw: Gateway, era: str, *, streamed: bool) -> httpx.Response:
    """A ``leak`` call of a client of ``era`` (its answer SSE when ``streamed``)."""
    arguments = {"progress": streamed}
    token = {"progressToken": "p"} if streamed else {}
    if era == "modern":
        body = modern_call(7, "leak", arguments, **token)
        return await gw.http.post(gw.url, headers=modern_headers("tools/call", "leak"), json=body)
    session = await open_legacy_session(gw.http, gw.url)
    return await gw.http.post(gw.url, headers=session, json=legacy_call(7, "leak", arguments, **token))


def final_error(reply: httpx.Response, *, streamed: bool) -> dict[str, Any]:
    kind = reply.headers["content-type"]
    assert kind.startswith("text/event-stream" if streamed else "application/json"), kind
    final = parse_sse(reply.text)[-1] if streamed else reply.json()
    error: dict[str, Any] = final["error"]
    return error


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_crash_tells_the_client_how_the_child_ended_and_never_its_stderr_or_command(
    era: str, streamed: bool
) -> None:
    with anyio.fail_after(BOUND), recording("gateway.child") as records:
        async with fake_backend(CRASHING) as backend, gateway(backend, exposed=False) as gw:
            reply = await crash(gw, era, streamed=streamed)
            [crashed] = [child for child in backend.children if child.exited.is_set()]
            await records.wait_for_text(LOGGED)  # the operator reads the line in the log, redacted
    for leak in LEAKS:
        assert leak not in reply.text
    assert str(crashed.pid) not in reply.text
    error = final_error(reply, streamed=streamed)
    assert error["code"] == -31001
    assert error["message"] == "leaky exited with code 1" + WITHHELD
    assert error["data"] == {"source": GATEWAY_NAME, "kind": "ChildExitedError", "exit_code": 1}


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_with_expose_child_errors_a_crash_tells_the_client_the_stderr_and_command(
    era: str, streamed: bool
) -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(CRASHING) as backend, gateway(backend, exposed=True) as gw:
            reply = await crash(gw, era, streamed=streamed)
            [crashed] = [child for child in backend.children if child.exited.is_set()]
    error = final_error(reply, streamed=streamed)
    assert error["message"] == f"leaky (pid {crashed.pid}) exited with code 1; stderr: " + " | ".join(STDERR)
    assert error["data"]["stderr"] == list(STDERR)
    assert error["data"]["command"] == COMMAND
    assert error["data"]["exit_code"] == 1


async def start_failures(gw: Gateway) -> list[httpx.Response]:
    """A modern call, a modern ``server/discover`` (answered by the gateway, with the start
    error in its ``_meta``) and a legacy ``initialize``, all to a server that cannot start."""
    discover = {"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {"_meta": MODERN_META}}
    return [
        await gw.http.post(gw.url, headers=modern_headers("tools/call", "echo"), json=modern_call(1, "echo")),
        await gw.http.post(gw.url, headers=modern_headers("server/discover"), json=discover),
        await gw.http.post(gw.url, headers=BASE_HEADERS, json=legacy_initialize()),
    ]


async def test_a_failed_start_tells_the_client_how_the_child_ended_and_the_operator_everything() -> None:
    with anyio.fail_after(BOUND), recording("gateway.pool") as records:
        async with fake_backend(FAILING_START) as backend, gateway(backend, exposed=False) as gw:
            replies = await start_failures(gw)
            await records.wait_for(lambda r: "child failed to start" in r.getMessage() and LOGGED in r.getMessage())
            status = (await gw.http.get("/status")).text  # the operator's page (loopback, no tokens)
    for reply in replies:
        for leak in LEAKS:
            assert leak not in reply.text, reply.text
        assert "hint" not in reply.text
    call, discover, initialize = (reply.json() for reply in replies)
    assert call["error"]["message"] == "cannot start leaky: leaky exited with code 1 during start-up" + WITHHELD
    assert call["error"]["data"] == {"source": GATEWAY_NAME, "kind": "ChildStartError", "exit_code": 1}
    assert discover["result"]["_meta"]["mcp-stdio-gateway/child"]["error"]["code"] == -31000
    assert initialize["error"] == call["error"]
    assert SECRET in status
    assert all(child.exited.is_set() for child in backend.children)


async def test_with_expose_child_errors_a_failed_start_tells_the_client_the_stderr_and_command() -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(FAILING_START) as backend, gateway(backend, exposed=True) as gw:
            replies = await start_failures(gw)
    for reply in replies:
        assert SECRET in reply.text
        assert COMMAND in reply.text
    error = replies[0].json()["error"]
    assert error["message"].startswith(f"cannot start {COMMAND}: leaky (pid ")
    assert error["data"]["stderr"] == list(STDERR)
    assert backend.children
