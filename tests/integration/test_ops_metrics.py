"""Operations that need real processes: the children's memory and CPU, read from ``/proc``, and
the ops listener (``--ops-listen``) of a real ``python -m gateway``."""

from __future__ import annotations

import signal

import anyio
import httpx
import pytest

from gateway.stdio import usage
from tests.conftest import server_spec
from tests.gateway_server import running_gateway
from tests.integration.test_operations import call, metric
from tests.integration.test_startup import gateway_process, logged

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


async def test_the_ops_listener_serves_probes_and_metrics_alone_and_stops_with_the_gateway() -> None:
    with anyio.fail_after(60):
        async with (
            gateway_process("--ops-listen", "127.0.0.1:0") as (process, lines),
            httpx.AsyncClient() as http,
        ):
            (endpoint, _) = logged(lines, "MCP endpoint:")
            (ops,) = logged(lines, "ops listener:")
            healthz, readyz, metrics = ops.split()
            base = healthz.removesuffix("/healthz")
            assert (await http.get(healthz)).text == "ok\n"
            assert (await call(http, endpoint, "echo", {"message": "warm"})).status_code == 200
            assert (await http.get(readyz)).text == "ready\n"
            scraped = (await http.get(metrics)).text
            assert metric(scraped, "mcp_gateway_requests_total", method="tools/call") == 1
            assert metric(scraped, "mcp_gateway_build_info") == 1
            for path in ("/status", "/ui", "/mcp"):  # the ops listener serves the three pages only
                assert (await http.get(base + path)).status_code == 404
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
    host, port = base.removeprefix("http://").rsplit(":", 1)
    with pytest.raises(OSError, match=r"(?i)connect|refused"):  # closed with the gateway
        await anyio.connect_tcp(host, int(port))
    assert not [line for line in lines if "Traceback" in line or " ERROR " in line], lines
