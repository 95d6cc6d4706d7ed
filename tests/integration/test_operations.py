"""Operations: health, readiness, status, metrics, access logs, trace context.

Readiness and ``/status`` for a server whose child cannot start: tests/component/test_operations.py."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import httpx
import pytest

from gateway.http.drain import Drain
from gateway.ops.logs import JsonFormatter
from tests.conftest import server_spec
from tests.gateway_server import modern_call, modern_headers, running_gateway

pytestmark = pytest.mark.anyio

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text, 0 if absent."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def call(
    http: httpx.AsyncClient, url: str, tool: str, args: dict[str, Any] | None = None, **headers: str
) -> httpx.Response:
    return await http.post(
        url, headers=modern_headers("tools/call", tool, **headers), json=modern_call(1, tool, args or {})
    )


async def test_health_readiness_and_status_describe_the_gateway() -> None:
    drain = Drain()
    with anyio.fail_after(20):
        async with running_gateway(server_spec("--name", "ops"), drain=drain) as url, httpx.AsyncClient() as http:
            base = url.removesuffix("/mcp")
            assert (await http.get(f"{base}/healthz")).status_code == 200
            await call(http, url, "echo", {"message": "warm"})
            assert (await http.get(f"{base}/readyz")).text == "ready\n"
            status = (await http.get(f"{base}/status")).json()
            (child,) = next(iter(status["servers"][0]["pools"].values()))["children"]
            assert child["state"] == "ready"
            assert child["era"] == "modern"
            assert child["protocol_version"] == "2026-07-28"
            assert isinstance(child["pid"], int)
            drain.begin()  # as on SIGTERM: readiness fails at once, new MCP requests get 503
            assert (await http.get(f"{base}/readyz")).status_code == 503
            refused = await call(http, url, "echo", {"message": "late"})
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "5"
            assert "shutting down" in refused.json()["error"]["message"]
            assert (await http.get(f"{base}/healthz")).status_code == 200


async def test_metrics_change_as_requests_flow() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            metrics_url = url.replace("/mcp", "/metrics")
            before = (await http.get(metrics_url)).text
            for _ in range(3):
                assert (await call(http, url, "echo", {"message": "x"})).status_code == 200
            after = (await http.get(metrics_url)).text
    labels = {"server": "test", "method": "tools/call", "era": "modern", "status": "200"}
    assert (
        metric(after, "mcp_gateway_requests_total", **labels) - metric(before, "mcp_gateway_requests_total", **labels)
        >= 3
    )
    assert metric(after, "mcp_gateway_children", state="ready") == 1
    assert metric(after, "mcp_gateway_child_spawns_total") == 1
    assert metric(after, "mcp_gateway_child_bytes_out_total") > metric(before, "mcp_gateway_child_bytes_out_total")
    assert metric(after, "mcp_gateway_request_seconds_count", method="tools/call") >= 3


async def test_a_timeout_is_counted_and_cancellations_are_counted() -> None:
    spec = server_spec(request_timeout=0.2)
    with anyio.fail_after(20):
        async with running_gateway(spec) as url, httpx.AsyncClient() as http:
            timed_out = await call(http, url, "sleep", {"ms": 10_000})
            assert timed_out.json()["error"]["code"] == -31002
            text = (await http.get(url.replace("/mcp", "/metrics"))).text
    assert metric(text, "mcp_gateway_timeouts_total") == 1
    assert metric(text, "mcp_gateway_cancellations_sent_total") == 1


async def test_each_request_gets_one_access_log_line_with_its_details(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            pid = int((await call(http, url, "pid")).json()["result"]["content"][0]["text"])
    (record,) = [
        r for r in caplog.records if r.name == "gateway.access" and getattr(r, "rpc_method", "") == "tools/call"
    ]
    assert record.status == 200  # type: ignore[attr-defined]
    assert record.era == "modern"  # type: ignore[attr-defined]
    assert record.child_pid == pid  # type: ignore[attr-defined]
    assert record.server == "test"  # type: ignore[attr-defined]
    line = JsonFormatter().format(record)
    import json

    parsed = json.loads(line)
    assert parsed["event"] == "request"
    assert parsed["child_pid"] == pid
    assert parsed["duration_ms"] > 0


def test_json_logs_redact_anything_that_looks_like_a_credential() -> None:
    record = logging.LogRecord("gateway", logging.INFO, __file__, 1, "hello %s", ("world",), None)
    record.api_key = "sk-123"
    record.authorization = "Bearer abc"
    record.server = "demo"
    import json

    parsed = json.loads(JsonFormatter().format(record))
    assert parsed["message"] == "hello world"
    assert parsed["api_key"] == "[redacted]"
    assert parsed["authorization"] == "[redacted]"
    assert parsed["server"] == "demo"


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_traceparent_reaches_the_child_in_meta(era: str) -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec("--era", era)) as url, httpx.AsyncClient() as http:
            reply = await call(http, url, "meta", traceparent=TRACEPARENT, tracestate="vendor=1")
    meta = reply.json()["result"]["structuredContent"]["meta"]
    assert meta["traceparent"] == TRACEPARENT
    assert meta["tracestate"] == "vendor=1"
