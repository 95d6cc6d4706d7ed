"""Start-up as a newcomer watches it: a port in use, the endpoint URLs, a helpful 404, and a
slow or failing child that says so in the log while it happens."""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from gateway.errors import ChildStartError
from gateway.stdio import handshake as stdio_handshake
from gateway.stdio.launch import open_child
from gateway.stdio.pool import Pool, PoolSettings
from tests.conftest import TEST_SERVER, server_spec
from tests.gateway_server import modern_call, modern_headers

pytestmark = pytest.mark.anyio


async def test_a_port_in_use_exits_2_with_one_line_naming_port_before_starting_anything() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "gateway", "--port", str(port), "--", sys.executable, str(TEST_SERVER)]
        with anyio.fail_after(30):
            result = await anyio.run_process(command, check=False)
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode == 2
    assert lines == [f"mcp-stdio-gateway: --port: 127.0.0.1:{port} is already in use; choose another port with --port"]


@asynccontextmanager
async def gateway_process(*argv: str, module: str = "gateway") -> AsyncIterator[tuple[Process, list[str]]]:
    """``python -m MODULE ARGV`` on port 0; yields it once started (every line it logs is
    appended to the list, as it comes)."""
    command = [sys.executable, "-m", module, "--port", "0", *argv]
    lines: list[str] = []
    listening = anyio.Event()
    async with await anyio.open_process(command, stdout=subprocess.DEVNULL) as process:

        async def read() -> None:
            assert process.stderr is not None
            buffer = ""
            async for chunk in TextReceiveStream(process.stderr):
                buffer += chunk
                *complete, buffer = buffer.split("\n")
                lines.extend(complete)
                if any("Application startup complete" in line for line in complete):
                    listening.set()
            listening.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            try:
                await listening.wait()
                yield process, lines
            finally:
                if process.returncode is None:
                    process.terminate()
                await process.wait()


def logged(lines: list[str], prefix: str) -> list[str]:
    return [line.split(prefix, 1)[1].strip() for line in lines if prefix in line]


async def test_the_demo_logs_its_endpoints_and_a_call_to_try() -> None:
    with anyio.fail_after(30):
        async with gateway_process() as (_, lines):
            endpoints = logged(lines, "MCP endpoint:")
            tries = logged(lines, "try:")
            (operations,) = logged(lines, "operations:")
    assert len(endpoints) == 2, lines
    base = endpoints[0].removesuffix("/mcp")
    assert operations.split() == [f"{base}/{page}" for page in ("ui", "status", "metrics", "healthz", "readyz")]
    assert endpoints[0].endswith("/mcp")
    assert endpoints[1].endswith("/servers/demo/mcp")
    assert tries == [f"mcp-stdio-gateway call {endpoints[0]} echo --arg message=hello"]


async def test_a_config_file_logs_every_endpoint_and_a_wrong_path_answers_with_them(tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    servers = {name: {"command": sys.executable, "args": [str(TEST_SERVER), "--name", name]} for name in ("a", "b")}
    config.write_text(json.dumps({"mcpServers": servers}))
    with anyio.fail_after(30):
        async with gateway_process("--config", str(config)) as (_, lines), httpx.AsyncClient() as http:
            endpoints = logged(lines, "MCP endpoint:")
            base = endpoints[0].rsplit("/servers/", 1)[0]
            wrong = await http.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert [url.removeprefix(base) for url in endpoints] == ["/servers/a/mcp", "/servers/b/mcp"]
    assert wrong.status_code == 404
    assert "this gateway serves /servers/{a,b}/mcp" in wrong.json()["error"]["message"]


async def test_answers_name_no_server_software_but_carry_a_date() -> None:
    with anyio.fail_after(30):
        async with gateway_process() as (_, lines), httpx.AsyncClient() as http:
            endpoint = logged(lines, "MCP endpoint:")[0]
            health = await http.get(endpoint.rsplit("/mcp", 1)[0] + "/healthz")
            refused = await http.post(endpoint, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    for answer in (health, refused):
        assert "server" not in answer.headers, answer.headers
        assert answer.headers["date"].endswith(" GMT")
    assert refused.status_code == 400  # refused by the gateway itself (no protocol version), not by uvicorn


async def test_a_child_that_never_answers_logs_what_it_still_owes(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stdio_handshake, "WAITING_LOG_INTERVAL", 0.01)
    caplog.set_level(logging.INFO, logger="gateway")
    spec = server_spec("--silent", probe_timeout=1.0, handshake_timeout=1.0)
    with anyio.fail_after(30), pytest.raises(ChildStartError, match="no answer to initialize within 1 s"):
        async with open_child(spec):
            pass
    waiting = [r.getMessage() for r in caplog.records if "still waiting for" in r.getMessage()]
    assert all(r.levelno == logging.INFO for r in caplog.records if "still waiting for" in r.getMessage())
    assert any("to answer server/discover (" in m and "of 1)" in m for m in waiting), waiting
    assert any("to answer initialize (" in m for m in waiting), waiting


async def test_every_failed_start_is_logged_at_warning_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    pool = Pool(server_spec("--exit-at-start", "3"), PoolSettings(min_size=0, max_size=1))
    with anyio.fail_after(30):
        async with pool:
            with pytest.raises(ChildStartError):
                async with pool.lease():
                    pass
    failures = [r for r in caplog.records if "child failed to start" in r.getMessage()]
    assert failures, [r.getMessage() for r in caplog.records]
    assert failures[0].levelno == logging.WARNING
    assert "exited with code 3" in failures[0].getMessage()
    assert "fatal: configured to exit" in failures[0].getMessage()


GC_COLLECTIONS = re.compile(r'^python_gc_collections_total\{generation="(\d)"\} (\S+)$', re.MULTILINE)


async def gc_collections(http: httpx.AsyncClient, base: str) -> dict[str, float]:
    """The served process's cyclic-collector runs so far, by generation (its /metrics)."""
    page = await http.get(f"{base}/metrics")
    assert page.status_code == 200, page.text
    return {generation: float(count) for generation, count in GC_COLLECTIONS.findall(page.text)}


async def test_calls_in_flight_run_no_collection_of_the_heap_that_start_up_left() -> None:
    # serve() freezes what start-up made and collects the young generation at 10,000 objects
    # (gateway.server.settle_heap). 32 calls in flight hold a few thousand objects that die with
    # their answers: CPython's defaults ran a young collection every ~16 calls here, and a full
    # one over the ~60,000 objects of the imported modules every ~2,000, each finding nothing.
    clients, calls = 32, 10
    with anyio.fail_after(60):
        async with gateway_process() as (_, lines), httpx.AsyncClient(timeout=30) as http:
            (endpoint, _) = logged(lines, "MCP endpoint:")
            base = endpoint.removesuffix("/mcp")

            async def client(number: int) -> None:
                for call in range(calls):
                    message = f"client {number} call {call}"
                    body = modern_call(call, "echo", {"message": message})
                    answer = await http.post(endpoint, json=body, headers=modern_headers("tools/call", "echo"))
                    assert answer.status_code == 200, answer.text
                    assert message in answer.text, answer.text

            before = await gc_collections(http, base)
            async with anyio.create_task_group() as tg:
                for number in range(clients):
                    tg.start_soon(client, number)
            after = await gc_collections(http, base)
    assert set(before) == {"0", "1", "2"}, before
    ran = {generation: after[generation] - before[generation] for generation in before}
    assert ran["2"] == 0, ran
    assert ran["0"] <= 1, ran  # CPython's default young threshold (700) ran about 20 here
