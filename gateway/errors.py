"""The gateway's exceptions, typed by who is at fault.

Each class carries the JSON-RPC ``code`` and the HTTP ``status`` it is answered with, so
the HTTP edge writes every error to the wire in one place (``gateway.http.wire``).
Gateway-local codes sit outside the spec-reserved range -32768..-32000 (digest §0.2,
§7.8), so a client never mistakes them for an error from the server behind the gateway.

::

    GatewayError                    base; never raised itself
    ├── ConfigError                 bad settings, named by key; raised at start-up only
    ├── ChildError                  the stdio child failed the request (HTTP 502-ish, sent as 200 + error)
    │   ├── ChildStartError         the command could not be started (missing, not executable, bad cwd, NUL byte)
    │   ├── ChildExitedError        the child exited (or closed stdout) with the request in flight
    │   │   └── ChildFaultError     the gateway hit an internal error on the child, and stopped it
    │   ├── ChildTimeoutError       no reply within the request's timeout; the child was sent notifications/cancelled
    │   └── ChildProtocolError      the child answered with something that is not a valid reply
    └── GatewayUnavailableError     no child can take the request now (starting, draining, overloaded): 503
        └── ClientThrottledError    this client is over one of its own limits (sessions, crashes): 429

**What a client sees.** An error has two readings. ``message`` and ``data`` are what any
client may read: what failed and its class (an exit code, a signal, a timeout). ``detailed``
and ``private`` are the operator's: the child's stderr, its command, its pid, paths, hints
drawn from its output. The log and ``/status`` carry ``detailed``; ``error_object`` (the
wire) carries the operator's reading only for an error made with ``exposed=True``, which the
stdio edge sets from the server's ``--expose-child-errors`` (off by default: in a shared
pool the client that reads a child's stderr may not be the one that caused it).

Errors from the *client* (bad headers, bad JSON) are not exceptions: the ingress ladder
returns them as ``Rejection`` values (``gateway.protocol.ingress``). A JSON-RPC error the
child sends on purpose is not an exception either: it is a normal reply, passed through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final

GATEWAY_NAME = "mcp-stdio-gateway"
WITHHELD: Final = " (details in the gateway's log)"
"""Appended to a client's message when the operator's reading has more (``GatewayError.withholds``)."""

# Gateway-local JSON-RPC codes (outside -32768..-32000, see the module docstring).
CODE_CHILD_START = -31000
CODE_CHILD_EXITED = -31001
CODE_CHILD_TIMEOUT = -31002
CODE_CHILD_PROTOCOL = -31003
CODE_UNAVAILABLE = -31004
CODE_CANCELLED = -31005
# Sent to a *child* that asked the client something (sampling, elicitation, roots).
CODE_NO_CLIENT_INPUT = -31006  # no client can answer: unattributable, or not declared by the client
CODE_INPUT_TIMEOUT = -31007  # the client did not answer (or retry) within the input timeout
CODE_THROTTLED = -31008  # this principal is over a limit of its own; others are served


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""

    code: ClassVar[int] = -32603
    status: ClassVar[int] = 500

    def __init__(
        self,
        message: str,
        *,
        detailed: str | None = None,
        private: Mapping[str, Any] | None = None,
        exposed: bool = False,
        **data: Any,
    ) -> None:
        """``message`` and ``data``: what any client may read; ``detailed`` (the message with
        what only an operator may read; default ``message``) and ``private`` (data of that
        kind); ``exposed``: the client reads those too (module docstring)."""
        super().__init__(detailed or message)
        self.message = message
        self.detailed = detailed or message
        self.data: dict[str, Any] = {k: v for k, v in data.items() if v is not None}
        self.private: dict[str, Any] = {k: v for k, v in (private or {}).items() if v is not None}
        self.exposed = exposed

    @property
    def withholds(self) -> bool:
        """The client's reading leaves something out (the log has it)."""
        return not self.exposed and (self.detailed != self.message or bool(self.private))

    def error_object(self) -> dict[str, Any]:
        """The JSON-RPC error object: a human message and the details under ``data``; what only
        an operator may read is left out unless the error is ``exposed``."""
        data = {"source": GATEWAY_NAME, "kind": type(self).__name__, **self.data}
        if self.exposed:
            return {"code": self.code, "message": self.detailed, "data": {**data, **self.private}}
        message = self.message + WITHHELD if self.withholds else self.message
        return {"code": self.code, "message": message, "data": data}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.detailed!r})"


class ConfigError(GatewayError):
    """A setting is invalid. The message names the key and what is wrong with it."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}", key=key)
        self.key = key


class ChildError(GatewayError):
    """The stdio child could not serve the request. Sent with HTTP 200 as a JSON-RPC error."""

    status = 200


class ChildStartError(ChildError):
    """``cannot start PROGRAM: REASON`` — every request to that child fails at once with this."""

    code = CODE_CHILD_START


class ChildExitedError(ChildError):
    """The child exited, or closed its stdout, while the request was in flight."""

    code = CODE_CHILD_EXITED


class ChildFaultError(ChildExitedError):
    """The gateway's own code failed on this child (a bug, contained to the child: its failure
    domain, ``gateway.stdio.boundary``): the child was stopped and is restarted with the pool's
    backoff. Same code as any exit (-31001): for the client, the child went away."""


class ChildTimeoutError(ChildError):
    """The child did not answer in time. It was sent ``notifications/cancelled``."""

    code = CODE_CHILD_TIMEOUT


class ChildProtocolError(ChildError):
    """The child answered the request with something that is not a valid JSON-RPC reply."""

    code = CODE_CHILD_PROTOCOL


class GatewayUnavailableError(GatewayError):
    """No child can take the request now; the client should retry later (``Retry-After``)."""

    code = CODE_UNAVAILABLE
    status = 503

    def __init__(self, message: str, *, retry_after: int = 1, **data: Any) -> None:
        super().__init__(message, **data)
        self.retry_after = retry_after


class ClientThrottledError(GatewayUnavailableError):
    """This principal is over a limit of its own (legacy sessions, children its requests
    crashed); everyone else is still served. 429 + ``Retry-After``."""

    code = CODE_THROTTLED
    status = 429
