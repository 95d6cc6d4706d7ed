"""Who a relayed request is for: ``ClientContext``.

The HTTP edge builds one per request and hands it to ``Relay.exchange``; the exchange, the
per-client settings of shared children (``gateway.relay.shared_settings``) and the parked
MRTR calls read it. A legacy client's context carries its ``LegacySession``, which pins the
session to the child that served it first (``affinity``, ``bind``), so that state the
session set up there (``resources/subscribe``, ``logging/setLevel``) stays put.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.protocol import bridge
from gateway.protocol.ingress import CLIENT_CAPABILITIES_KEY
from gateway.protocol.jsonrpc import JsonObject, Request
from gateway.protocol.versions import LEGACY, MODERN, Era
from gateway.relay.sessions import LegacySession
from gateway.relay.spans import RequestSpan
from gateway.stdio.child import StdioChild
from gateway.stdio.pool import Pool


@dataclass
class ClientContext:
    """Who is asking, in which era; for legacy clients, what their session negotiated."""

    era: Era
    version: str
    capabilities: JsonObject = field(default_factory=dict)
    client_info: JsonObject | None = None
    log_level: str | None = None
    session: LegacySession | None = None  # legacy only
    principal: str | None = None
    owner: str | None = None  # whose limits and crash strikes (``http.limits.client_key``); else the principal
    log: dict[str, Any] = field(default_factory=dict)  # what the access log should say
    trace: JsonObject = field(default_factory=dict)  # W3C traceparent/tracestate from the HTTP request
    accepts_requests: bool = True  # False where the answer cannot carry requests (legacy batches)
    span: RequestSpan | None = None  # the request's trace, when tracing is on (gateway.relay.spans)
    # The key this client's leases are charged to: crash strikes, and whatever a pool counts per
    # client. Worked out once (``__post_init__``): a call asks it three times.
    charged: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.charged = self.owner or self.principal or "anonymous"  # router.ANONYMOUS

    @classmethod
    def of_request(
        cls,
        request: Request,
        version: str,
        principal: str | None,
        headers: Mapping[str, str],
        log: dict[str, Any] | None = None,
        *,
        owner: str | None = None,
        span: RequestSpan | None = None,
    ) -> ClientContext:
        """A modern client's request: what it can do is what this request's ``_meta`` declares."""
        meta = (request.params or {}).get("_meta")
        capabilities = meta.get(CLIENT_CAPABILITIES_KEY) if isinstance(meta, dict) else None
        return cls(
            MODERN,
            version,
            capabilities if isinstance(capabilities, dict) else {},  # this request's, never an earlier one's
            principal=principal,
            owner=owner,
            log=log if log is not None else {},
            # No call for the usual request, which carries neither trace header.
            trace=bridge.trace_context(headers) if "traceparent" in headers or "tracestate" in headers else {},
            span=span,
        )

    @classmethod
    def of_session(
        cls,
        session: LegacySession,
        headers: Mapping[str, str] | None = None,
        *,
        streamed: bool = True,
        log: dict[str, Any] | None = None,
        span: RequestSpan | None = None,
    ) -> ClientContext:
        """A legacy session's request; ``streamed`` False where its answer cannot carry requests;
        ``log``: the request's access-log fields (the child that serves it is noted there);
        ``span``: the request's trace (the HTTP edge's, when tracing is on)."""
        return cls(
            LEGACY,
            session.version,
            session.capabilities,
            session.client_info,
            session.log_level,
            session,
            session.principal,
            session.owner,
            trace=bridge.trace_context(headers)
            if headers is not None and ("traceparent" in headers or "tracestate" in headers)
            else {},
            accepts_requests=streamed,
            log=log if log is not None else {},
            span=span,
        )

    @property
    def session_id(self) -> str | None:
        return self.session.id if self.session is not None else None

    def affinity(self) -> StdioChild | None:
        child = self.session.child if self.session is not None else None
        return child if child is not None and child.is_alive() else None

    def bind(self, child: StdioChild, pool: Pool | None = None) -> None:
        self.log["child_pid"] = child.pid
        session = self.session
        if session is None:
            return
        home = session.child  # (``affinity()`` spelled out: a legacy call asked it before its lease)
        if home is None or not home.is_alive():  # a call lent to another child keeps the home
            session.child = child
            if pool is not None:
                session.pool = pool
