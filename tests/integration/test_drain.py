"""The drain sequence with a real gateway process and real signals."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from tests.conftest import TEST_SERVER
from tests.gateway_server import modern_call, modern_headers, open_legacy_session

pytestmark = pytest.mark.anyio


async def read_log(
    process: Process,
    lines: list[dict[str, Any]],
    port: list[int],
    listening: anyio.Event,
    ended: anyio.Event,
    draining: anyio.Event | None = None,
) -> None:
    """Drain the gateway's JSON log for the whole run (a full pipe would block its logging);
    note the port once uvicorn names it, and set ``draining`` once it says it drains."""
    assert process.stderr is not None
    buffer = ""
    async for chunk in TextReceiveStream(process.stderr):
        buffer += chunk
        *complete, buffer = buffer.split("\n")
        for line in complete:
            record = json.loads(line)
            lines.append(record)
            found = re.search(r"running on http://127\.0\.0\.1:(\d+)", record["message"])
            if found:
                port.append(int(found.group(1)))
                listening.set()
            if draining is not None and record["message"].startswith("received SIGTERM: draining"):
                draining.set()
    ended.set()


async def kill_after_failure(process: Process) -> None:
    try:
        await anyio.sleep_forever()
    finally:
        if process.returncode is None:
            process.kill()


@dataclass
class Logged:
    """A gateway process started by ``logged_gateway``: its JSON log, read as it comes."""

    process: Process
    http: httpx.AsyncClient
    port: int
    lines: list[dict[str, Any]]
    draining: anyio.Event  # the gateway logged that it drains

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def messages(self) -> list[str]:
        return [line["message"] for line in self.lines]


@asynccontextmanager
async def logged_gateway(*flags: str, child: Sequence[str] = ()) -> AsyncIterator[Logged]:
    """``python -m gateway --port 0 --log-format json FLAGS -- testserver CHILD``, once it
    listens; killed should the test fail, and its whole log read when the test has stopped it."""
    command = [
        *(sys.executable, "-m", "gateway", "--port", "0", "--log-format", "json", *flags),
        *("--", sys.executable, str(TEST_SERVER), *child),
    ]
    lines: list[dict[str, Any]] = []
    async with (
        await anyio.open_process(command) as process,
        httpx.AsyncClient(timeout=30) as http,
        anyio.create_task_group() as logs,
    ):
        found: list[int] = []
        listening, ended, draining = anyio.Event(), anyio.Event(), anyio.Event()
        logs.start_soon(read_log, process, lines, found, listening, ended, draining)
        await listening.wait()
        logs.start_soon(kill_after_failure, process)  # the gateway must not outlive a failed test
        yield Logged(process, http, found[0], lines, draining)
        await ended.wait()  # every log line read
        logs.cancel_scope.cancel()


def servers_named(marker: str) -> list[int]:
    """Test-server processes started with ``--name marker`` (not the gateway that names them)."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    argv = fh.read().split(b"\0")
            except OSError:
                continue
            if len(argv) > 1 and argv[1] == str(TEST_SERVER).encode() and marker.encode() in argv:
                pids.append(int(name))
    return pids


async def test_sigterm_drains_then_stops_children_and_exits_zero() -> None:
    marker = f"drain-test-{os.getpid()}"
    with anyio.fail_after(60):
        async with logged_gateway("--drain-timeout", "2", child=("--name", marker)) as gw:
            gateway, http, port, url = gw.process, gw.http, gw.port, gw.url
            results: dict[str, Any] = {}

            running: list[str] = []
            both_running = anyio.Event()

            async def sleep_call(name: str, ms: int) -> None:
                body = modern_call(name, "sleep", {"ms": ms, "progress": True}, progressToken=name)
                async with http.stream("POST", url, headers=modern_headers("tools/call", "sleep"), json=body) as reply:
                    async for line in reply.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        message = json.loads(line[5:])
                        if message.get("method") == "notifications/progress":  # the sleep has begun at the child
                            running.append(name)
                            if len(running) == 2:
                                both_running.set()
                        else:
                            results[name] = message

            async with anyio.create_task_group() as tg:
                tg.start_soon(sleep_call, "short", 1500)
                tg.start_soon(sleep_call, "long", 60_000)
                await both_running.wait()  # both calls leased to the child and running there
                assert len(servers_named(marker)) == 1
                gateway.send_signal(signal.SIGTERM)
                await gw.draining.wait()  # the gateway logged that it drains: readiness says so from then on
                readiness = await http.get(f"http://127.0.0.1:{port}/readyz")
                assert readiness.status_code == 503
                assert "draining" in readiness.text
                refused = await http.post(
                    url, headers=modern_headers("tools/call", "echo"), json=modern_call(3, "echo", {"message": "x"})
                )
                assert refused.status_code == 503
            assert results["short"]["result"]["content"][0]["text"] == "slept"  # finished within the drain
            assert results["long"]["error"]["code"] == -31004  # cut at the drain budget, with a clear error
            assert "shutting down" in results["long"]["error"]["message"]
            assert await gateway.wait() == 0
    assert servers_named(marker) == []
    messages = gw.messages
    assert any("draining" in m for m in messages)
    assert (
        "drain budget spent with 1 request(s) in flight and 0 parked call(s) or task(s) held; ending them" in messages
    )


async def test_a_signal_runs_the_drain_as_a_loop_callback_not_inside_the_code_it_interrupted() -> None:
    # uvicorn installs handle_exit with signal.signal: it may run between any two bytecodes of
    # a step. Nothing of the drain happens there; it runs as the loop's next callback.
    import asyncio

    import uvicorn
    from starlette.applications import Starlette

    from gateway.http.drain import Drain
    from gateway.server import DrainingServer

    drain = Drain()
    server = DrainingServer(uvicorn.Config(Starlette(), lifespan="off"), drain, 1.0)
    loop = asyncio.get_running_loop()
    server.handle_exit(signal.SIGTERM, None)
    assert not drain.draining  # not yet: only scheduled
    after = loop.create_future()
    loop.call_soon(after.set_result, None)  # queued behind the signal's callback
    await after
    assert drain.draining
    server.handle_exit(signal.SIGTERM, None)  # the second: stop now, on the loop too
    assert not server.should_exit
    after = loop.create_future()
    loop.call_soon(after.set_result, None)
    await after
    assert server.should_exit
    assert drain.cancel.is_set()


async def test_a_legacy_clients_answer_during_the_drain_reaches_its_call_and_new_requests_are_refused() -> None:
    """A call in flight waits on its client's answer to the server's question when the drain
    begins: the answer (a POST of the session) is let in and the call finishes within the
    drain. Before, every POST was refused (503) before its body was read, so the call waited on
    an answer its client had sent until the drain budget ended it. A request in the same
    session's POST is still refused."""
    elicit = {"method": "elicitation/create", "params": {"message": "Name?", "requestedSchema": {"type": "object"}}}
    arguments = {"requests": [elicit]}
    ask = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "ask_client", "arguments": arguments}}
    with anyio.fail_after(60):
        async with logged_gateway("--drain-timeout", "30", child=("--era", "legacy")) as gw:
            gateway, http, url = gw.process, gw.http, gw.url
            session = await open_legacy_session(http, url, capabilities={"elicitation": {}})
            messages: list[dict[str, Any]] = []
            async with http.stream("POST", url, headers=session, json=ask) as reply:
                async for line in reply.aiter_lines():
                    if not line.startswith("data:") or not line[5:].strip():
                        continue
                    message = json.loads(line[5:])
                    messages.append(message)
                    if message.get("method") == "elicitation/create":
                        gateway.send_signal(signal.SIGTERM)
                        await gw.draining.wait()
                        refused = await http.post(url, headers=session, json={**ask, "id": 8})
                        answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"action": "accept", "content": {}}}
                        taken = await http.post(url, headers=session, json=answer)
            assert await gateway.wait() == 0
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == -31004
    assert taken.status_code == 202, taken.text
    final = messages[-1]
    assert final["id"] == 7
    assert final["result"]["structuredContent"]["answers"] == [{"result": {"action": "accept", "content": {}}}]
    assert "drained: every request finished" in gw.messages


ELICIT_ARGUMENTS = {
    "requests": [
        {"method": "elicitation/create", "params": {"message": "Name?", "requestedSchema": {"type": "object"}}}
    ]
}
ELICITING = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}


async def test_a_modern_clients_retry_during_the_drain_resumes_its_parked_call() -> None:
    """A modern client was answered ``input_required`` (its call parked on a legacy child) when
    the drain begins: the drain waits for that call, and the client's retry with its
    ``requestState`` is let in and finishes it. Before, the drain counted only HTTP requests in
    flight, so it ended at once and took the parked call with it, and the retry was refused
    (503 "retry on another replica", where no replica holds the call). A new call is still
    refused, and so is a retry naming a call this gateway does not hold."""
    capabilities, arguments = ELICITING, ELICIT_ARGUMENTS
    headers = modern_headers("tools/call", "ask_client")
    with anyio.fail_after(60):
        async with logged_gateway("--drain-timeout", "30", child=("--era", "legacy")) as gw:
            gateway, http, url = gw.process, gw.http, gw.url
            first = await http.post(url, headers=headers, json=modern_call(1, "ask_client", arguments, **capabilities))
            round_ = first.json()["result"]
            assert round_["resultType"] == "input_required", round_
            [(key, asked)] = round_["inputRequests"].items()
            assert asked["method"] == "elicitation/create"
            gateway.send_signal(signal.SIGTERM)
            await gw.draining.wait()
            new_call = await http.post(
                url, headers=headers, json=modern_call(2, "ask_client", arguments, **capabilities)
            )
            stranger = modern_call(3, "ask_client", arguments, **capabilities)
            stranger["params"].update(inputResponses={key: {"action": "decline"}}, requestState="not-a-state")
            strange = await http.post(url, headers=headers, json=stranger)
            retry = modern_call(4, "ask_client", arguments, **capabilities)
            accepted = {"action": "accept", "content": {"name": "Ada"}}
            retry["params"].update(inputResponses={key: accepted}, requestState=round_["requestState"])
            resumed = await http.post(url, headers=headers, json=retry)
            assert await gateway.wait() == 0
    for refused in (new_call, strange):
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == -31004
        assert "shutting down" in refused.json()["error"]["message"]
    assert resumed.status_code == 200, resumed.text
    result = resumed.json()["result"]
    assert result["structuredContent"]["answers"] == [{"result": accepted}], result
    messages = gw.messages
    drained = messages.index("drained: every request finished")
    [retried] = [i for i, m in enumerate(messages) if m.startswith("POST /mcp tools/call 200") and " id=4 " in m]
    assert retried < drained  # the drain waited for the parked call (before: it ended at the signal)


async def test_a_modern_clients_cancel_during_the_drain_ends_its_parked_call_and_the_drain() -> None:
    """A client that gives up its dialog while the gateway drains (``notifications/cancelled``
    naming the request answered ``input_required``): the cancel is let in, the parked call
    ends, and with it the drain, well before its budget."""
    headers = modern_headers("tools/call", "ask_client")
    with anyio.fail_after(60):
        async with logged_gateway("--drain-timeout", "30", child=("--era", "legacy")) as gw:
            gateway, http, url = gw.process, gw.http, gw.url
            first = await http.post(
                url, headers=headers, json=modern_call(1, "ask_client", ELICIT_ARGUMENTS, **ELICITING)
            )
            assert first.json()["result"]["resultType"] == "input_required", first.text
            gateway.send_signal(signal.SIGTERM)
            await gw.draining.wait()
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
            cancelled = await http.post(url, headers=modern_headers("notifications/cancelled"), json=cancel)
            assert await gateway.wait() == 0
    assert cancelled.status_code == 202, cancelled.text
    messages = gw.messages
    [ended] = [i for i, m in enumerate(messages) if "parked tools/call ended: the client cancelled it" in m]
    assert ended < messages.index("drained: every request finished")
