"""OpenTelemetry spans per MCP request (``--tracing``), read from the SDK's in-memory exporter.

Each request gives a tree: its ``SERVER`` span, with the client's ``traceparent`` as parent,
and under it ``queue wait`` and the child exchange (``CLIENT``), whose ``traceparent`` the
child gets in ``_meta``. The tracer batches as in production (``BatchSpanProcessor``); the
spans are read after the gateway's lifespan has ended, which shuts the provider down and so
exports them: that is the flush at exit, tested too.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import pytest

pytest.importorskip("opentelemetry.sdk")  # the otel extra (in dev, which CI installs)

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.ops.otel import exporting_to
from gateway.stdio.pool import PoolSettings
from tests.component.fakechild import FakeBackend, fake_backend
from tests.component.harness import Gateway, in_process_gateway, legacy_call
from tests.gateway_server import modern_call, modern_headers, open_legacy_session
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

BOUND: Final = 20.0
TRACE: Final = "0af7651916cd43dd8448eb211c80319c"
PARENT: Final = "b7ad6b7169203331"


def traceparent(trace: str = TRACE, parent: str = PARENT) -> str:
    return f"00-{trace}-{parent}-01"


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


class Tree:
    """One request's spans: its ``SERVER`` span and the spans directly under it."""

    def __init__(self, request: ReadableSpan, spans: Sequence[ReadableSpan]) -> None:
        assert request.context is not None
        self.request = request
        self.children = [s for s in spans if s.parent is not None and s.parent.span_id == request.context.span_id]

    @property
    def wait(self) -> ReadableSpan:
        [wait] = [s for s in self.children if s.name == "queue wait"]
        return wait

    @property
    def exchange(self) -> ReadableSpan:
        [exchange] = [s for s in self.children if s.kind is SpanKind.CLIENT]
        return exchange

    def child_traceparent(self) -> str:
        """What the child should have got in ``_meta``: the exchange span's context."""
        context = self.exchange.context
        assert context is not None
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-01"


def trees(spans: Sequence[ReadableSpan], method: str = "tools/call") -> list[Tree]:
    """The trees of the requests of ``method`` (a legacy session's initialize has its own)."""
    requests = [s for s in spans if s.kind is SpanKind.SERVER and (s.attributes or {}).get("mcp.method.name") == method]
    return [Tree(request, spans) for request in requests]


@asynccontextmanager
async def traced(backend: FakeBackend, exporter: InMemorySpanExporter, **options: Any) -> AsyncIterator[Gateway]:
    async with in_process_gateway(backend, tracer=exporting_to(exporter), **options) as gw:
        yield gw


def access_trace_ids(records: Sequence[logging.LogRecord]) -> list[str]:
    return [record.__dict__["trace_id"] for record in records if record.__dict__.get("rpc_method") == "tools/call"]


async def test_a_modern_call_is_a_span_tree_in_the_clients_trace_and_the_child_gets_the_exchanges_context() -> None:
    exporter = InMemorySpanExporter()
    headers = modern_headers("tools/call", "echo", traceparent=traceparent(), tracestate="vendor=1")
    with anyio.fail_after(BOUND), recording("gateway.access") as records:
        async with fake_backend() as backend, traced(backend, exporter) as gw:
            reply = await gw.http.post(gw.url, headers=headers, json=modern_call(7, "echo", {"message": "hi"}))
            assert reply.json()["result"]["content"][0]["text"] == "hi"
            [call] = backend.calls("echo")
            await records.wait_for(lambda record: record.__dict__.get("rpc_method") == "tools/call")
    [tree] = trees(exporter.get_finished_spans())
    request = tree.request
    assert (request.name, hex_trace(request)) == ("tools/call echo", TRACE)
    assert request.parent is not None
    assert (request.parent.span_id, request.parent.is_remote) == (int(PARENT, 16), True)
    assert dict(request.attributes or {}) == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "echo",
        "jsonrpc.request.id": "7",
        "mcp_gateway.server": "test",
        "mcp_gateway.era": "modern",
        "mcp_gateway.principal": "anonymous",
        "mcp_gateway.child.pid": call.child.pid,
        "mcp_gateway.outcome": "ok",
        "http.request.method": "POST",
        "http.response.status_code": 200,
        "client.address": "127.0.0.1",
    }
    assert request.status.status_code is StatusCode.UNSET
    assert {s.name for s in tree.children} == {"queue wait", "tools/call echo"}
    exchange = tree.exchange
    assert (exchange.attributes or {})["mcp_gateway.outcome"] == "ok"
    assert (exchange.attributes or {})["jsonrpc.request.id"] == str(call.id)  # the gateway's id at the child
    assert (exchange.attributes or {})["mcp_gateway.child.pid"] == call.child.pid
    # The child is told the gateway's span, in the client's trace, and the client's tracestate.
    assert call.meta["traceparent"] == tree.child_traceparent()
    assert call.meta["tracestate"] == "vendor=1"
    # In time order: the wait, then the exchange, both inside the request.
    times = [request.start_time, tree.wait.start_time, tree.wait.end_time, exchange.start_time]
    times += [exchange.end_time, request.end_time]
    assert None not in times
    assert times == sorted(times)  # type: ignore[type-var]
    assert access_trace_ids(records.records) == [TRACE]  # the access line names the span's trace


async def test_a_legacy_session_call_is_traced_like_a_modern_one() -> None:
    exporter = InMemorySpanExporter()
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, traced(backend, exporter) as gw:
            session = await open_legacy_session(gw.http, gw.url)
            reply = await gw.http.post(
                gw.url, headers={**session, "traceparent": traceparent()}, json=legacy_call(3, "echo", {"message": "x"})
            )
            assert reply.status_code == 200, reply.text
            [call] = backend.calls("echo")
    [tree] = trees(exporter.get_finished_spans())
    attributes = tree.request.attributes or {}
    assert (hex_trace(tree.request), tree.request.name) == (TRACE, "tools/call echo")
    assert (attributes["mcp_gateway.era"], attributes["jsonrpc.request.id"]) == ("legacy", "3")
    assert attributes["mcp_gateway.session"] == session["mcp-session-id"][:8]
    assert {s.name for s in tree.children} == {"queue wait", "tools/call echo"}
    assert call.meta["traceparent"] == tree.child_traceparent()


async def test_a_traceparent_in_meta_is_the_parent_when_no_header_carries_one() -> None:
    exporter = InMemorySpanExporter()
    other = "1" * 32
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, traced(backend, exporter) as gw:
            body = modern_call(1, "echo", {"message": "x"}, traceparent=traceparent(other))
            await gw.http.post(gw.url, headers=modern_headers("tools/call", "echo"), json=body)
            [call] = backend.calls("echo")
    [tree] = trees(exporter.get_finished_spans())
    assert hex_trace(tree.request) == other
    assert call.meta["traceparent"] == tree.child_traceparent()  # the client's replaced, not kept


async def test_concurrent_clients_each_get_their_own_trace() -> None:
    exporter = InMemorySpanExporter()
    clients = [f"{n:032x}" for n in range(1, 5)]
    with anyio.fail_after(BOUND), recording("gateway.access") as records:
        async with (
            fake_backend() as backend,
            traced(backend, exporter, pool=PoolSettings(min_size=1, max_size=4)) as gw,
            anyio.create_task_group() as tg,
        ):

            async def call(n: int, trace: str) -> None:
                headers = modern_headers("tools/call", "hold", traceparent=traceparent(trace))
                reply = await gw.http.post(gw.url, headers=headers, json=modern_call(n, "hold"))
                assert reply.status_code == 200, reply.text

            for n, trace in enumerate(clients):
                tg.start_soon(call, n, trace)
            held = await backend.wait_calls(len(clients), "hold")  # all four in flight at once
            for each in held:
                each.release()
        metas = {each.meta["traceparent"] for each in held}
    found = trees(exporter.get_finished_spans())
    assert sorted(hex_trace(tree.request) for tree in found) == clients
    for tree in found:
        assert {s.name for s in tree.children} == {"queue wait", "tools/call hold"}
        assert {hex_trace(s) for s in tree.children} == {hex_trace(tree.request)}
    assert metas == {tree.child_traceparent() for tree in found}  # each child got its own call's span
    assert sorted(access_trace_ids(records.records)) == clients


async def test_a_call_whose_child_dies_records_the_error_code() -> None:
    exporter = InMemorySpanExporter()
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, traced(backend, exporter) as gw:
            headers = modern_headers("tools/call", "crash", traceparent=traceparent())
            reply = await gw.http.post(gw.url, headers=headers, json=modern_call(1, "crash", {"code": 3}))
            code = reply.json()["error"]["code"]
    [tree] = trees(exporter.get_finished_spans())
    attributes = tree.request.attributes or {}
    assert (attributes["mcp_gateway.outcome"], attributes["error.type"]) == ("error", str(code))
    assert attributes["rpc.response.status_code"] == str(code)
    assert tree.request.status.status_code is StatusCode.ERROR
    exchange = tree.exchange
    assert ((exchange.attributes or {})["error.type"], exchange.status.status_code) == (str(code), StatusCode.ERROR)


async def test_a_child_error_reply_is_recorded_on_both_spans() -> None:
    exporter = InMemorySpanExporter()
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, traced(backend, exporter) as gw:
            session = await open_legacy_session(gw.http, gw.url)
            reply = await gw.http.post(gw.url, headers=session, json=legacy_call(2, "no-such-tool"))
            assert reply.json()["error"]["code"] == -32602
    [tree] = trees(exporter.get_finished_spans())
    assert tree.request.name == "tools/call no-such-tool"
    assert (tree.request.attributes or {})["error.type"] == "-32602"
    assert (tree.exchange.attributes or {})["rpc.response.status_code"] == "-32602"
    assert tree.exchange.status.status_code is StatusCode.ERROR


async def test_a_client_without_trace_context_starts_a_trace_the_access_line_names() -> None:
    exporter = InMemorySpanExporter()
    with anyio.fail_after(BOUND), recording("gateway.access") as records:
        async with fake_backend() as backend, traced(backend, exporter) as gw:
            await gw.http.post(gw.url, headers=modern_headers("tools/call", "echo"), json=modern_call(1, "echo"))
            await records.wait_for(lambda record: record.__dict__.get("rpc_method") == "tools/call")
    [tree] = trees(exporter.get_finished_spans())
    assert tree.request.parent is None
    assert access_trace_ids(records.records) == [hex_trace(tree.request)]
