"""The last failure domain, with the real process: the service failing after start-up ends
``python -m gateway`` with a non-zero code (a supervisor then replaces it), where uvicorn alone
would go on answering 503 to every MCP request while the probes said healthy (issue #37)."""

from __future__ import annotations

import subprocess
import sys

import anyio
import httpx
import pytest
from anyio.streams.text import TextReceiveStream

from gateway.server import EXIT_SERVICE_FAILED
from tests.conftest import TEST_SERVER

pytestmark = pytest.mark.anyio


async def test_the_service_failing_after_start_up_ends_the_process_with_a_non_zero_code() -> None:
    command = [sys.executable, "-m", "tests.failing_gateway", "--port", "0", "--", sys.executable, str(TEST_SERVER)]
    lines: list[str] = []
    started = anyio.Event()
    with anyio.fail_after(60):
        async with await anyio.open_process(command, stdout=subprocess.DEVNULL) as process:

            async def read() -> None:
                assert process.stderr is not None
                buffer = ""
                async for chunk in TextReceiveStream(process.stderr):
                    buffer += chunk
                    *complete, buffer = buffer.split("\n")
                    lines.extend(complete)
                    if any("Application startup complete" in line for line in complete):
                        started.set()
                started.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                try:
                    await started.wait()
                    [running] = [line for line in lines if "running on http://" in line]
                    base = running.split("running on ", 1)[1].split()[0]
                    async with httpx.AsyncClient(base_url=base) as http:
                        assert (await http.post("/test/fail-service")).status_code == 200
                    code = await process.wait()
                finally:
                    if process.returncode is None:
                        process.kill()
                        await process.wait()
    assert code == EXIT_SERVICE_FAILED
    log = "\n".join(lines)
    assert "the service failed after start-up" in log
    assert "injected into the service's task group" in log  # the traceback is logged
