"""What the relay tells a request's trace: the small interface ``gateway.ops.otel`` implements.

With tracing off (the default) the HTTP edge makes no span, a ``ClientContext``'s ``span`` is
None, and the relay calls nothing here: one ``is None`` test where a span would start. With
tracing on, the edge opens a ``RequestSpan`` per MCP request and the relay opens its two
children on it, explicitly (never through a context variable, so concurrent requests cannot
share one):

- ``queue_wait``: from the lease's request to the pool's grant (``Pool.lease``), or its
  refusal (503, 429);
- ``child_exchange``: from the request's write to the child until its final reply; its
  ``carrier`` (W3C ``traceparent`` and ``tracestate``) goes into the child's ``_meta``
  instead of the client's (``gateway.protocol.bridge.own_trace``).

Ending a span twice does nothing (the exchange ends whatever is still open when it ends: a
client that left, a call parked for an MRTR round or become a task).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Protocol, TypeVar

from gateway.protocol.jsonrpc import JsonObject, Reply
from gateway.stdio.child import StdioChild

T = TypeVar("T")


class Span(Protocol):
    def end(self, error: BaseException | None = None) -> None:
        """Ended now; ``error``: what it ended with (a ``GatewayError`` gives its code)."""


class ChildSpan(Protocol):
    def carrier(self) -> Mapping[str, str]:
        """This span's W3C trace context, for the child's ``_meta``."""

    def end(
        self, error: BaseException | None = None, reply: Reply | None = None, child_id: object | None = None
    ) -> None:
        """Ended now: with the child's ``reply`` (an error reply gives its code), or an ``error``;
        neither: the answer ended before the reply. ``child_id``: the gateway's id for it."""


class RequestSpan(Protocol):
    def queue_wait(self, pool: str) -> Span:
        """A span for the wait for a child of the pool labelled ``pool``, started now."""

    def child_exchange(self, method: str, params: JsonObject | None, child: StdioChild) -> ChildSpan:
        """A span for the request ``method`` (with the client's ``params``) on ``child``, started now."""


async def timed(span: Span, work: Awaitable[T]) -> T:
    """``work``'s result, ``span`` ended when it is done (with what it raised, if it did)."""
    try:
        done = await work
    except BaseException as exc:  # a refusal (503, 429), or the request cancelled while it waits
        span.end(exc)
        raise
    span.end()
    return done
