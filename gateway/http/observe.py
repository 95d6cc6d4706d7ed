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

Client-chosen text (method, path, principal) is cut at ``MAX_LOGGED_CHARS``; control
characters are escaped by the log formatters (``gateway.ops.logs``). The line carries the
principal, never a credential.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

import orjson
from starlette.types import Scope

from gateway.errors import CODE_CANCELLED
from gateway.ops.metrics import GatewayMetrics
from gateway.ops.records import log_fast
from gateway.relay.router import ANONYMOUS

log = logging.getLogger("gateway.access")

MAX_LOGGED_CHARS: Final = 200
"""Client-chosen values (a JSON-RPC method, a path) longer than this are cut in the access log."""
CLIENT_CLOSED: Final = 499
"""The status logged when the client left before the gateway sent one (nginx's convention)."""
MAX_PARSED_ERROR_BYTES: Final = 65536
"""Error bodies read for their JSON-RPC code; ours are a few hundred bytes."""


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
) -> None:
    """Count the request and write its access line. ``status`` 0: none was sent (the client
    left, or the app raised); ``error_code``: read from a refusal's body (``error_code_of``);
    ``probes``: the app's memory of its probes' answers (``ProbeAnswers``)."""
    outcome = fields.get("outcome")
    code = fields.get("code", error_code)
    if status == 0:
        status, outcome = (500, "error") if raised else (CLIENT_CLOSED, "cancelled")
    elif outcome is None:
        outcome = "error" if status >= 400 else "ok"
    method = fields.get("method")
    era = fields.get("era") or "-"
    if metrics is not None and (server is not None or status >= 400):  # a healthy probe is not counted
        metrics.observe(server or "-", method or scope["method"], era, status, outcome, seconds)
    level = probes.level(scope["path"], status) if probes is not None else logging.INFO
    if not log.isEnabledFor(level):  # --log-level warning, or a probe answered as before: skip building the line
        return
    principal = scope.get("gateway.principal") or ANONYMOUS  # as /status and the pool labels say
    rpc_method = cut(method) if method else "-"  # refused before its body was read: no MCP method
    child_pid = fields.get("child_pid")
    log_fast(
        log,
        level,
        "%s %s %s %d %.1fms era=%s outcome=%s code=%s principal=%s child=%s",
        (
            cut(scope["method"]),
            cut(scope["path"]),
            rpc_method,
            status,
            seconds * 1000,
            era,
            outcome,
            "-" if code is None else code,
            cut(principal),
            child_pid or "-",
        ),
        {
            "event": "request",
            "server": server,
            "rpc_method": rpc_method,
            "era": era,
            "status": status,
            "outcome": outcome,
            "code": code,
            "duration_ms": round(seconds * 1000, 3),
            "principal": principal,
            "child_pid": child_pid,
            "session": fields.get("session"),
        },
    )
