"""The access line names what an operator looks for: the MCP method (``-`` before the body was
read, never the HTTP verb again), the child for legacy sessions too, and probes only when their
answer changes (issue #29 item 11); and what correlates it (issue #39): the client (the limits'
key, ``anonymous@ADDRESS`` for an anonymous one) and its address, the tool or resource name, the
JSON-RPC id, ``X-Request-Id`` and the trace id. Records are read after the gateway stopped:
every line is in."""

from __future__ import annotations

import logging

import anyio
import httpx
import pytest

from gateway.http.auth import TokenStore
from gateway.http.drain import Drain
from tests import operations_doc
from tests.conftest import server_spec
from tests.gateway_server import modern_call, modern_headers, open_legacy_session, parse_sse, running_gateway

pytestmark = pytest.mark.anyio

TOKEN = "alice:" + "s" * 32
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


def access(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "gateway.access"]


async def test_a_refusal_logs_no_mcp_method_rather_than_the_http_verb(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    with anyio.fail_after(20):
        async with running_gateway(server_spec(), tokens=TokenStore([TOKEN])) as url, httpx.AsyncClient() as http:
            refused = await http.post(url, headers=modern_headers("tools/call", "echo"), json=modern_call(1, "echo"))
    assert refused.status_code == 401
    (line,) = [r for r in access(caplog) if r.status == 401]  # type: ignore[attr-defined]
    assert line.getMessage().startswith("POST /mcp - 401 ")
    assert line.rpc_method == "-"  # type: ignore[attr-defined]


async def test_legacy_session_lines_name_the_child_that_served_them(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "pid", "arguments": {}}}
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            session = await open_legacy_session(http, url)
            answer = await http.post(url, headers=session, json=call)
    final = parse_sse(answer.text)[-1] if "data:" in answer.text else answer.json()
    pid = final["result"]["structuredContent"]["pid"]
    lines = {r.rpc_method: r for r in access(caplog)}  # type: ignore[attr-defined]
    assert lines["initialize"].child_pid == pid  # type: ignore[attr-defined]
    assert lines["tools/call"].child_pid == pid  # type: ignore[attr-defined]
    assert f" child={pid}" in lines["tools/call"].getMessage()


async def test_probes_are_logged_at_info_only_when_their_answer_changes(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.access")
    drain = Drain()
    with anyio.fail_after(20):
        async with running_gateway(server_spec(), drain=drain) as url, httpx.AsyncClient() as http:
            base = url.removesuffix("/mcp")
            await http.post(url, headers=modern_headers("tools/call", "echo"), json=modern_call(1, "echo"))
            statuses = [(await http.get(f"{base}/readyz")).status_code for _ in range(3)]
            drain.begin()
            statuses += [(await http.get(f"{base}/readyz")).status_code for _ in range(2)]
            health = [(await http.get(f"{base}/healthz")).status_code for _ in range(2)]
    assert statuses == [200, 200, 200, 503, 503]
    assert health == [200, 200]
    ready = [(r.status, r.levelno) for r in access(caplog) if r.getMessage().startswith("GET /readyz")]  # type: ignore[attr-defined]
    info, debug = logging.INFO, logging.DEBUG
    assert ready == [(200, info), (200, debug), (200, debug), (503, info), (503, debug)]
    healthz = [r.levelno for r in access(caplog) if r.getMessage().startswith("GET /healthz")]
    assert healthz == [info, debug]


async def test_a_forwarded_request_logs_its_mcp_method_where_it_came_in(caplog: pytest.LogCaptureFixture) -> None:
    from tests.balancer import cluster
    from tests.gateway_server import BASE_HEADERS, legacy_initialize

    caplog.set_level(logging.INFO, logger="gateway.access")
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with anyio.fail_after(60):
        async with cluster(server_spec("--era", "legacy")) as c, httpx.AsyncClient() as http:
            owner, entry = c.instances[0] + "/mcp", c.instances[1] + "/mcp"
            init = await http.post(owner, headers=BASE_HEADERS, json=legacy_initialize())
            session = {**BASE_HEADERS, "mcp-session-id": init.headers["mcp-session-id"]}
            assert (await http.post(entry, headers=session, json=ping)).status_code == 200
    pings = [r for r in access(caplog) if getattr(r, "rpc_method", None) == "ping"]
    assert len(pings) == 2, [r.getMessage() for r in access(caplog)]  # the entry's line and the owner's
    assert not [r for r in access(caplog) if getattr(r, "rpc_method", None) == "POST"]
    assert [r.rpc_id for r in pings] == [1, 1]  # type: ignore[attr-defined]  # the id, where it came in too
    # The entry's line names the replica it forwarded to (the operator's log: no client reads it).
    assert sorted(str(r.forwarded_to) for r in pings) == sorted([str(None), c.instances[0]])  # type: ignore[attr-defined]


async def test_a_call_line_carries_the_client_name_id_request_id_and_trace(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    correlation = {"x-request-id": "req 42;<b>" + "x" * 300, "traceparent": TRACEPARENT}
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            headers = modern_headers("tools/call", "echo", **correlation)
            answer = await http.post(url, headers=headers, json=modern_call("call-1", "echo", {"message": "hi"}))
            assert answer.status_code == 200, answer.text
            plain = await http.post(url, headers=modern_headers("tools/call", "echo"), json=modern_call(7, "echo"))
            assert plain.status_code == 200, plain.text
    first, second = [r for r in access(caplog) if r.rpc_method == "tools/call"]  # type: ignore[attr-defined]
    assert (first.client, first.peer, first.principal) == ("anonymous@127.0.0.1", "127.0.0.1", "anonymous")  # type: ignore[attr-defined]
    assert (first.mcp_name, first.rpc_id) == ("echo", "call-1")  # type: ignore[attr-defined]
    assert first.request_id == ("req_42__b_" + "x" * 300)[:128]  # type: ignore[attr-defined]
    assert first.trace_id == TRACE  # type: ignore[attr-defined]
    message = first.getMessage()
    assert " client=anonymous@127.0.0.1 name=echo id=call-1 request_id=req_42__b_x" in message
    assert message.endswith(f" trace={TRACE}")
    assert (second.rpc_id, second.request_id, second.trace_id) == (7, None, None)  # type: ignore[attr-defined]
    assert second.getMessage().endswith(" id=7 request_id=- trace=-")
    # docs/operations.md lists every field of the line, and no other.
    plain = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}
    assert set(first.__dict__) - plain == operations_doc.access_fields()


async def test_an_authenticated_client_is_its_principal_and_a_meta_traceparent_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    read = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "pid", "arguments": {}, "_meta": {"traceparent": TRACEPARENT}},
    }
    with anyio.fail_after(20):
        async with (
            running_gateway(server_spec(), tokens=TokenStore([TOKEN])) as url,
            httpx.AsyncClient(headers={"authorization": "Bearer " + "s" * 32}) as http,
        ):
            session = await open_legacy_session(http, url)
            answer = await http.post(url, headers=session, json=read)
            assert answer.status_code == 200, answer.text
    (line,) = [r for r in access(caplog) if r.rpc_method == "tools/call"]  # type: ignore[attr-defined]
    assert (line.client, line.principal, line.peer) == ("alice", "alice", "127.0.0.1")  # type: ignore[attr-defined]
    assert (line.mcp_name, line.rpc_id, line.trace_id) == ("pid", 3, TRACE)  # type: ignore[attr-defined]
    assert "s" * 32 not in line.getMessage()
