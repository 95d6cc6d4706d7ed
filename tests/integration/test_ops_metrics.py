"""Metrics that need real processes: the children's memory and CPU, read from ``/proc``."""

from __future__ import annotations

import anyio
import httpx
import pytest

from gateway.stdio import usage
from tests.conftest import server_spec
from tests.gateway_server import running_gateway
from tests.integration.test_operations import call, metric

pytestmark = pytest.mark.anyio


@pytest.mark.skipif(not usage.READABLE, reason="children's usage is read from Linux's /proc")
async def test_children_memory_and_cpu_are_summed_per_server_and_cpu_never_falls() -> None:
    with anyio.fail_after(30):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            metrics_url = url.replace("/mcp", "/metrics")
            pid = int((await call(http, url, "pid")).json()["result"]["content"][0]["text"])
            await call(http, url, "fork_grandchild")  # a second process in the child's group
            before = (await http.get(metrics_url)).text
            own = usage.parse_stat(await anyio.Path(f"/proc/{pid}/stat").read_text())
            assert own is not None
            died = await call(http, url, "exit", {"code": 0})  # the child goes; the pool starts another
            assert died.json()["error"]["code"] == -31001
            again = int((await call(http, url, "pid")).json()["result"]["content"][0]["text"])
            assert again != pid
            after = (await http.get(metrics_url)).text
    resident = metric(before, "mcp_gateway_children_resident_bytes", server="test")
    assert resident > own.rss_pages * usage.PAGE_SIZE  # the grandchild's memory counts with its child's
    cpu_before = metric(before, "mcp_gateway_children_cpu_seconds_total", server="test")
    assert cpu_before > 0  # a Python interpreter's start-up, at least
    assert metric(after, "mcp_gateway_children_cpu_seconds_total", server="test") >= cpu_before
    assert metric(after, "mcp_gateway_children_resident_bytes", server="test") > 0  # the new child
