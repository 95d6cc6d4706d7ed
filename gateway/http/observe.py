"""One access-log line and one metrics observation per request.

``gateway.http.edge`` observes every request it sees, so requests its checks refuse (403
Origin/Host, 431, 401, 429) are logged and counted like the rest. Every request to an MCP endpoint is
observed; on other paths (``/metrics``, ``/status``) only refusals and errors are, so scrapes
do not flood the log. The probes (``/healthz``, ``/readyz``) are logged at INFO when their
answer changes (the first, ``ready`` → 503, 503 → ``ready``) and at DEBUG otherwise.

The endpoint fills ``scope["gateway.log"]`` as it learns things (JSON-RPC method, client
era, the child's pid); the answer's writer (``gateway.http.stream``) notes the outcome with
``note_answer``; the edge adds the HTTP status and the duration when the answer ends — for
SSE, when the stream ends — and calls ``observe``. What a line says:

- ``status``: the HTTP status sent; ``499`` (nginx's "client closed request") when the
  client went away before any was.
- ``outcome``: ``ok``; ``error`` when the answer is a JSON-RPC error (a 4xx/5xx, or a 200
  whose final message is an error, such as -31001 from a child that died); ``cancelled``
  when the client left before the answer, or cancelled the request (-31005).
- ``code``: the JSON-RPC error code of an ``error`` or ``cancelled`` answer, else ``-``.
- the third field is the JSON-RPC method (``tools/call``, ``GET stream``), or ``-`` for a
  request refused before its body was read (401, 403, 429…); ``child`` is the pid of the
  child that served it, for legacy sessions as for modern calls.
- what correlates it with the client's and the child's side (``-`` when unknown): ``client``,
  the key the limits count it under (``gateway.http.limits.client_key``: the principal, or
  ``anonymous@ADDRESS`` for an anonymous client), and ``peer``, the TCP peer's address (JSON
  only); ``name``, the tool, prompt or resource it names (``params.name`` or ``params.uri``,
  else the ``Mcp-Name`` header); ``id``, its JSON-RPC id (the first of a batch), with its JSON
  type; ``request_id``, the client's ``X-Request-Id`` (``MAX_REQUEST_ID_CHARS``, only
  ``REQUEST_ID_CHARS`` kept, any other character written ``_``); ``trace``, the trace id of
  a valid W3C ``traceparent`` (the header, else the request's ``_meta``), or with tracing on
  the trace id of the request's span (``gateway.ops.otel``: the same one when the client sent
  a valid ``traceparent``, a new one when it did not).

Client-chosen text (method, path, principal, name, a string id) is cut at
``MAX_LOGGED_CHARS``; control characters are escaped by the log formatters
(``gateway.ops.logs``). The line carries the principal, never a credential.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Final

import orjson
from starlette.types import Scope

from gateway.errors import CODE_CANCELLED
from gateway.http.limits import client_key
from gateway.ops.logs import FIXED_TYPES, line_route
from gateway.ops.metrics import GatewayMetrics
from gateway.ops.records import log_fast
from gateway.ops.tracing import RequestTrace
from gateway.protocol.headers import MCP_NAME
from gateway.relay.router import ANONYMOUS

log = logging.getLogger("gateway.access")

MAX_LOGGED_CHARS: Final = 200
"""Client-chosen values (a JSON-RPC method, a path) longer than this are cut in the access log."""
CLIENT_CLOSED: Final = 499
"""The status logged when the client left before the gateway sent one (nginx's convention)."""
MAX_PARSED_ERROR_BYTES: Final = 65536
"""Error bodies read for their JSON-RPC code; ours are a few hundred bytes."""
MAX_REQUEST_ID_CHARS: Final = 128
"""An ``X-Request-Id`` is cut here: proxies send a UUID (36) or a few of them joined."""
REQUEST_ID_CHARS: Final = re.compile(r"[^A-Za-z0-9._:/+=@\-]")
"""What an ``X-Request-Id`` may contain in the log (any other character becomes ``_``)."""
TRACEPARENT: Final = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}(?:-|$)")
"""W3C trace context: version, trace id, parent id, flags (later versions may add fields)."""
_X_REQUEST_ID: Final = b"x-request-id"
_TRACEPARENT: Final = b"traceparent"
_MCP_NAME: Final = MCP_NAME.encode()


ACCESS_LINE: Final = (
    "%s %s %s %d %.1fms era=%s outcome=%s code=%s principal=%s child=%s client=%s name=%s id=%s request_id=%s trace=%s"
)
"""The access line's message (its arguments: ``observe``)."""
ACCESS_KEYS: Final = (
    *("event", "server", "rpc_method", "era", "status", "outcome", "code", "duration_ms", "principal"),
    *("child_pid", "session", "client", "peer", "mcp_name", "rpc_id", "request_id", "trace_id", "forwarded_to"),
)
"""The access record's ``extra`` keys, in order (the JSON line's fields after its message)."""

SPAN: Final = "gateway.span"
"""Scope key of an MCP request's trace (``gateway.ops.tracing.RequestTrace``) when tracing is on."""

PROBE_PATHS: Final = frozenset({"/healthz", "/readyz"})
"""Paths an orchestrator polls every few seconds: logged at INFO only when the answer changes."""


class ProbeAnswers:
    """The status each probe path was last answered with (one entry per ``PROBE_PATHS``)."""

    def __init__(self) -> None:
        self.last: dict[str, int] = {}

    def level(self, path: str, status: int) -> int:
        """INFO for a request that is not a probe, or a probe whose answer changed; else DEBUG."""
        if path not in PROBE_PATHS:
            return logging.INFO
        changed = self.last.get(path) != status
        self.last[path] = status
        return logging.INFO if changed else logging.DEBUG


def note_answer(scope: Scope, message: Mapping[str, Any]) -> None:
    """Record the final JSON-RPC message a request was answered with (its outcome and code)."""
    fields: dict[str, Any] = scope.setdefault("gateway.log", {})
    error = message.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        fields["code"] = code if type(code) is int else None
        fields["outcome"] = "cancelled" if code == CODE_CANCELLED else "error"
    else:
        fields["outcome"] = "ok"


def note_cancelled(scope: Scope) -> None:
    """The client went away before its answer."""
    scope.setdefault("gateway.log", {})["outcome"] = "cancelled"


def note_request(fields: dict[str, Any], request_id: object, params: object) -> None:
    """Note what correlates a request (the module doc): its JSON-RPC id, the tool, prompt or
    resource it names, and a ``traceparent`` in its ``_meta``."""
    fields["rpc_id"] = request_id
    if not isinstance(params, dict):
        return
    name = params.get("name")
    if not isinstance(name, str):
        name = params.get("uri")
    if isinstance(name, str):
        fields["mcp_name"] = name
    meta = params.get("_meta")
    if isinstance(meta, dict):
        parent = meta.get("traceparent")
        if isinstance(parent, str):
            fields["traceparent"] = parent


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id of a valid W3C ``traceparent`` (not version ``ff``, not all zeros)."""
    if traceparent is None:
        return None
    found = TRACEPARENT.match(traceparent.strip())
    if found is None or found[1] == "ff" or found[2] == "0" * 32:
        return None
    return found[2]


def request_id_of(value: str | None) -> str | None:
    """An ``X-Request-Id`` as the log shows it: cut at ``MAX_REQUEST_ID_CHARS``, other
    characters than ``REQUEST_ID_CHARS`` written ``_`` (None: none, or empty)."""
    if not value:
        return None
    return REQUEST_ID_CHARS.sub("_", value[:MAX_REQUEST_ID_CHARS])


def correlation_headers(headers: list[tuple[bytes, bytes]]) -> tuple[str | None, str | None, str | None]:
    """(``X-Request-Id``, ``traceparent``, ``Mcp-Name``) as sent, each None when absent (the
    last of a repeated one)."""
    return named_correlation_headers(dict(headers))


def named_correlation_headers(named: Mapping[bytes, bytes]) -> tuple[str | None, str | None, str | None]:
    """``correlation_headers`` from the headers as a dict (``dict(headers)``, as the edge has them)."""
    request_id, traceparent, mcp_name = named.get(_X_REQUEST_ID), named.get(_TRACEPARENT), named.get(_MCP_NAME)
    return (
        None if request_id is None else request_id.decode("latin-1"),
        None if traceparent is None else traceparent.decode("latin-1"),
        None if mcp_name is None else mcp_name.decode("latin-1"),
    )


def cut(text: str) -> str:
    return text if len(text) <= MAX_LOGGED_CHARS else text[:MAX_LOGGED_CHARS] + f"…({len(text)} chars)"


def error_code_of(body: bytes) -> int | None:
    """The JSON-RPC error code in a (refusal's) body, if it has one."""
    try:
        error = orjson.loads(body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    code = error.get("code") if isinstance(error, dict) else None
    return code if type(code) is int else None


def observe(
    metrics: GatewayMetrics | None,
    scope: Scope,
    fields: dict[str, Any],
    server: str | None,
    status: int,
    error_code: int | None,
    raised: bool,
    seconds: float,
    probes: ProbeAnswers | None = None,
    traced: RequestTrace | None = None,
    named: Mapping[bytes, bytes] | None = None,
) -> None:
    """Count the request, end its span and write its access line. ``status`` 0: none was sent
    (the client left, or the app raised); ``error_code``: read from a refusal's body
    (``error_code_of``); ``probes``: the app's memory of its probes' answers (``ProbeAnswers``);
    ``traced``: the request's trace, when tracing is on (it ends with the line's status,
    outcome and code, and names the line's trace id); ``named``: ``dict(scope["headers"])``
    when the caller has it (the edge's), so the headers are not looked through again."""
    outcome = fields.get("outcome")
    code = fields.get("code", error_code)
    if status == 0:
        status, outcome = (500, "error") if raised else (CLIENT_CLOSED, "cancelled")
    elif outcome is None:
        outcome = "error" if status >= 400 else "ok"
    span_trace_id = traced.finish(server or "-", status, outcome, code) if traced is not None else None
    method = fields.get("method")
    era = fields.get("era") or "-"
    if metrics is not None and (server is not None or status >= 400):  # a healthy probe is not counted
        metrics.observe(server or "-", method or scope["method"], era, status, outcome, seconds)
    path = scope["path"]
    level = probes.level(path, status) if probes is not None and path in PROBE_PATHS else logging.INFO
    if not log.isEnabledFor(level):  # --log-level warning, or a probe answered as before: skip building the line
        return
    # Client-chosen text is cut (``cut``) only when it is long: one call fewer for each value.
    limit = MAX_LOGGED_CHARS
    principal = scope.get("gateway.principal") or ANONYMOUS  # as /status and the pool labels say
    logged_principal = principal if len(principal) <= limit else cut(principal)  # the JSON field is whole
    http_method = scope["method"]
    http_method = http_method if len(http_method) <= limit else cut(http_method)
    logged_path = path if len(path) <= limit else cut(path)
    rpc_method = method or "-"  # none: refused before its body was read (no MCP method)
    rpc_method = rpc_method if len(rpc_method) <= limit else cut(rpc_method)
    child_pid = fields.get("child_pid")
    client = client_key(scope)
    client = client if len(client) <= limit else cut(client)
    if named is None:
        named = dict(scope["headers"])  # the last of a repeated header, as correlation_headers reads them
    # Each header is decoded only when the line reads it: the name when the request named none,
    # the traceparent when no span names the trace.
    mcp_name = fields.get("mcp_name")
    if not mcp_name:
        header = named.get(_MCP_NAME)
        mcp_name = None if header is None else header.decode("latin-1")
    if not mcp_name:
        mcp_name = None
    elif len(mcp_name) > limit:
        mcp_name = cut(mcp_name)
    rpc_id = fields.get("rpc_id")
    if isinstance(rpc_id, str) and len(rpc_id) > limit:
        rpc_id = cut(rpc_id)
    header = named.get(_X_REQUEST_ID)
    request_id = request_id_of(header.decode("latin-1")) if header else None
    trace_id = span_trace_id
    if not trace_id:
        header = named.get(_TRACEPARENT)
        traceparent = (header.decode("latin-1") if header else None) or fields.get("traceparent")
        trace_id = None if traceparent is None else trace_id_of(traceparent)
    args = (
        http_method,
        logged_path,
        rpc_method,
        status,
        seconds * 1000,
        era,
        outcome,
        "-" if code is None else code,
        logged_principal,
        child_pid or "-",
        client,
        mcp_name or "-",
        "-" if rpc_id is None else rpc_id,
        request_id or "-",
        trace_id or "-",
    )
    # The line's arguments are formatted on the log's thread, as a record's whose arguments are
    # text and numbers (``DeferredQueueHandler``): all of them are, but the id of a forwarded
    # request, read from its body unchecked, may be an array or an object: its record is made.
    route = line_route(log, level) if type(rpc_id) in FIXED_TYPES else None
    # The record's ``extra`` values, in ``ACCESS_KEYS``' order; none when the line goes by a
    # route whose formatter writes none (the text line): then only that formatter sees the line.
    values = (
        (
            "request",
            server,
            rpc_method,
            era,
            status,
            outcome,
            code,
            round(seconds * 1000, 3),
            principal,
            child_pid,
            fields.get("session"),
            client,
            str(scope["client"][0]) if scope.get("client") else None,
            mcp_name,
            rpc_id,
            request_id,
            trace_id,
            fields.get("forwarded_to"),  # the owning replica, for the operator only
        )
        if route is None or route.extras
        else ()
    )
    if route is not None and route.write(level, log.name, ACCESS_LINE, args, ACCESS_KEYS, values):
        return
    log_fast(log, level, ACCESS_LINE, args, dict(zip(ACCESS_KEYS, values, strict=False)))  # () on a text route
