"""OpenTelemetry spans for MCP requests: the one module that imports OpenTelemetry.

Imported only when tracing is on (``gateway.ops.tracing.open_tracer``). Per MCP request, with
the names and attributes of OpenTelemetry's MCP conventions where they have one
(``mcp.method.name``, ``gen_ai.tool.name``, ``jsonrpc.request.id``, ``rpc.response.status_code``,
``error.type``) and ``mcp_gateway.*`` for the gateway's own:

- the request's span (``SERVER``), named ``METHOD`` or ``METHOD TARGET`` (a tool's or
  prompt's name; a resource URI is an attribute, never in the name): from the request's arrival
  at the edge to the end of its answer (an SSE stream's end), its parent the client's W3C
  trace context (the ``traceparent`` header, else the one in the request's ``_meta``);
- under it, ``queue wait`` (``INTERNAL``): the wait for a child of the pool;
- and the child exchange (``CLIENT``, named like the request): from the request's write to
  the child to its final reply, whose ``traceparent`` the child gets in ``_meta``.

Each span is made with its parent given explicitly, never through OpenTelemetry's current
context (a context variable): no request's span can become another's parent. The request's
span is opened at its first use (its start time is the arrival's), so that a ``traceparent``
found in the body's ``_meta`` can still be its parent.

Spans go through a ``BatchSpanProcessor`` (its thread exports; ``OTEL_BSP_*``) to the OTLP
exporter, which reads ``OTEL_EXPORTER_OTLP_*``; the sampler is the SDK's (``OTEL_TRACES_SAMPLER``,
parent-based by default). The service is ``mcp-stdio-gateway`` unless ``OTEL_SERVICE_NAME``
or ``OTEL_RESOURCE_ATTRIBUTES`` names one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.errors import GatewayError
from gateway.protocol.jsonrpc import ErrorReply, JsonObject, Reply
from gateway.stdio.child import StdioChild

SERVICE_NAME: Final = "mcp-stdio-gateway"
MAX_ATTRIBUTE_CHARS: Final = 200
"""Client-chosen text (a tool name, a resource URI, a string id) is cut here, as in the access log."""
QUEUE_WAIT: Final = "queue wait"
TARGETS: Final = {"tools/call": "gen_ai.tool.name", "prompts/get": "gen_ai.prompt.name"}
"""Methods whose span name carries the name they call (low cardinality), and its attribute."""
URI_METHODS: Final = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})
ANONYMOUS: Final = "anonymous"  # gateway.relay.router.ANONYMOUS, as the access line says
W3C: Final = TraceContextTextMapPropagator()
_TRACEPARENT: Final = b"traceparent"
_TRACESTATE: Final = b"tracestate"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_ATTRIBUTE_CHARS else text[:MAX_ATTRIBUTE_CHARS] + "…"


def _name_and_target(method: str, name: object) -> tuple[str, dict[str, Any]]:
    """A span's name for ``method`` calling ``name`` (a tool, prompt or resource), and the
    attributes that say what it calls."""
    attributes: dict[str, Any] = {"mcp.method.name": method}
    if not isinstance(name, str):
        return method, attributes
    key = TARGETS.get(method)
    if key is not None:
        attributes[key] = name = _cut(name)
        return f"{method} {name}", attributes
    if method in URI_METHODS:
        attributes["mcp.resource.uri"] = _cut(name)
    return method, attributes


def _rpc_id(value: object) -> str:
    return _cut(value) if isinstance(value, str) else str(value)


def _error_code(error: BaseException) -> str:
    """``error.type``: a gateway error's JSON-RPC code, else the exception's class (a cancel)."""
    return str(error.code) if isinstance(error, GatewayError) else type(error).__name__


class OtelTracer:
    """``gateway.ops.tracing.Tracer``: spans through ``processor`` (made in ``running``)."""

    def __init__(self, processor: Callable[[], SpanProcessor], version: str) -> None:
        self._processor = processor
        self._version = version
        self._tracer: trace.Tracer | None = None

    @contextmanager
    def running(self) -> Iterator[None]:
        attributes: dict[str, Any] = {"service.version": self._version}
        if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        ):
            attributes["service.name"] = SERVICE_NAME
        # Shut down here, at the app's exit, not by the SDK's own atexit hook.
        provider = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False)
        provider.add_span_processor(self._processor())
        self._tracer = provider.get_tracer("gateway", self._version)
        try:
            yield
        finally:
            self._tracer = None
            provider.shutdown()  # exports what is still batched (bounded by the exporter's timeout)

    def request(self, scope: MutableMapping[str, Any]) -> OtelRequest | None:
        tracer = self._tracer
        return OtelRequest(tracer, scope) if tracer is not None else None


def otlp_tracer(version: str) -> OtelTracer:
    """The gateway's tracer: batched, to the OTLP/HTTP exporter the ``OTEL_*`` variables configure."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OtelTracer(lambda: BatchSpanProcessor(OTLPSpanExporter()), version)


def exporting_to(exporter: SpanExporter, version: str = "0") -> OtelTracer:
    """A tracer that batches spans to ``exporter`` (tests: the SDK's ``InMemorySpanExporter``)."""
    return OtelTracer(lambda: BatchSpanProcessor(exporter), version)


class OtelRequest:
    """One MCP request's trace (``gateway.ops.tracing.RequestTrace``)."""

    __slots__ = ("_context", "_scope", "_span", "_start", "_tracer")

    def __init__(self, tracer: trace.Tracer, scope: MutableMapping[str, Any]) -> None:
        self._tracer = tracer
        self._scope = scope
        self._start = time.time_ns()
        self._span: Span | None = None
        self._context: Context | None = None

    def _parent(self) -> Context:
        """The client's trace context: the ``traceparent`` (and ``tracestate``) headers, else
        the ``traceparent`` of the request's ``_meta`` (``gateway.http.observe.note_request``)."""
        carrier: dict[str, str] = {}
        for name, value in self._scope["headers"]:
            if name == _TRACEPARENT:
                carrier["traceparent"] = value.decode("latin-1")
            elif name == _TRACESTATE:
                carrier["tracestate"] = value.decode("latin-1")
        if "traceparent" not in carrier:
            meta = self._scope.get("gateway.log", {}).get("traceparent")
            carrier = {"traceparent": meta} if isinstance(meta, str) else {}
        return W3C.extract(carrier)

    def _opened(self) -> Context:
        """The request span's context, the span opened at the first need (named at ``finish``)."""
        if self._context is None:
            self._span = self._tracer.start_span(
                self._scope["method"], context=self._parent(), kind=SpanKind.SERVER, start_time=self._start
            )
            self._context = trace.set_span_in_context(self._span)
        return self._context

    def queue_wait(self, pool: str) -> Timed:
        span = self._tracer.start_span(QUEUE_WAIT, self._opened(), attributes={"mcp_gateway.pool": pool})
        return Timed(span)

    def child_exchange(self, method: str, params: JsonObject | None, child: StdioChild) -> ChildExchange:
        target = params.get("name", params.get("uri")) if params else None
        name, attributes = _name_and_target(method, target)
        attributes["mcp_gateway.child.pid"] = child.pid
        attributes["network.transport"] = "pipe"
        if child.info is not None:
            attributes["mcp_gateway.child.era"] = child.info.era.value
        span = self._tracer.start_span(name, self._opened(), kind=SpanKind.CLIENT, attributes=attributes)
        return ChildExchange(span)

    def finish(self, server: str, status: int, outcome: str, code: int | None) -> str:
        self._opened()
        span = self._span
        assert span is not None
        scope = self._scope
        fields = scope.get("gateway.log", {})
        method = fields.get("method")
        if method is not None:
            name, attributes = _name_and_target(method, fields.get("mcp_name"))
            span.update_name(name)
        else:  # refused before its body was read
            attributes = {}
        attributes["mcp_gateway.server"] = server
        attributes["mcp_gateway.principal"] = scope.get("gateway.principal") or ANONYMOUS
        attributes["http.request.method"] = scope["method"]
        attributes["http.response.status_code"] = status
        attributes["mcp_gateway.outcome"] = outcome
        for key, field in (("mcp_gateway.era", "era"), ("mcp_gateway.child.pid", "child_pid")):
            value = fields.get(field)
            if value is not None:
                attributes[key] = value
        if "rpc_id" in fields:
            attributes["jsonrpc.request.id"] = _rpc_id(fields["rpc_id"])
        session = fields.get("session")
        if session:
            attributes["mcp_gateway.session"] = session  # its first 8 characters, as in the log
        peer = scope.get("client")
        if peer:
            attributes["client.address"] = str(peer[0])
        if code is not None:
            attributes["rpc.response.status_code"] = str(code)
        if outcome == "error":
            attributes["error.type"] = str(code if code is not None else status)
            span.set_status(StatusCode.ERROR, f"JSON-RPC error {code}" if code is not None else f"HTTP {status}")
        span.set_attributes(attributes)
        span.end()
        return format(span.get_span_context().trace_id, "032x")


class Timed:
    """``gateway.relay.spans.Span`` over an SDK span; a second ``end`` does nothing."""

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span: Span | None = span

    def end(self, error: BaseException | None = None) -> None:
        span, self._span = self._span, None
        if span is None:
            return
        if error is not None:
            span.set_attribute("error.type", _error_code(error))
            span.set_status(StatusCode.ERROR, type(error).__name__)
        span.end()


class ChildExchange:
    """``gateway.relay.spans.ChildSpan`` over an SDK span; a second ``end`` does nothing."""

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span: Span | None = span

    def carrier(self) -> Mapping[str, str]:
        carrier: dict[str, str] = {}
        if self._span is not None:
            W3C.inject(carrier, trace.set_span_in_context(self._span))
        return carrier

    def end(
        self, error: BaseException | None = None, reply: Reply | None = None, child_id: object | None = None
    ) -> None:
        span, self._span = self._span, None
        if span is None:
            return
        if child_id is not None:
            span.set_attribute("jsonrpc.request.id", _rpc_id(child_id))
        if error is not None:
            outcome, code = "error", _error_code(error)
        elif isinstance(reply, ErrorReply):
            outcome, code = "error", str(reply.error.get("code"))
            span.set_attribute("rpc.response.status_code", code)
        else:
            outcome, code = ("ok" if reply is not None else "unfinished"), None
        span.set_attribute("mcp_gateway.outcome", outcome)
        if code is not None:
            span.set_attribute("error.type", code)
            span.set_status(StatusCode.ERROR, f"error {code}")
        span.end()
