"""The last failure domain, with the real process: the service failing after start-up ends
``python -m gateway`` with a non-zero code (a supervisor then replaces it), where uvicorn alone
would go on answering 503 to every MCP request while the probes said healthy (issue #37)."""

from __future__ import annotations

import sys

import anyio
import httpx
import pytest

from gateway.server import EXIT_SERVICE_FAILED
from tests.conftest import TEST_SERVER
from tests.integration.test_startup import gateway_process

pytestmark = pytest.mark.anyio


async def test_the_service_failing_after_start_up_ends_the_process_with_a_non_zero_code() -> None:
    with anyio.fail_after(60):
        argv = ("--", sys.executable, str(TEST_SERVER))
        async with gateway_process(*argv, module="tests.failing_gateway") as (process, lines):
            [running] = [line for line in lines if "running on http://" in line]
            base = running.split("running on ", 1)[1].split()[0]
            async with httpx.AsyncClient(base_url=base) as http:
                assert (await http.post("/test/fail-service")).status_code == 200
            code = await process.wait()
    assert code == EXIT_SERVICE_FAILED
    log = "\n".join(lines)
    assert "the service failed after start-up" in log
    assert "injected into the service's task group" in log  # the traceback is logged
