"""What an exchange yields for its client: typed relay events.

``Relay.exchange`` yields these, in order: any number of ``Progress``, ``Notification`` and
``Ask`` events, then (unless the client cancelled) exactly one ``Final``. Notifications the
child sent together (read from its stdout at once) come as one ``Batch``, so the HTTP edge
writes them in one send. Each carries the
JSON-RPC message as the client gets it, in the client's era, ready to serialise; the HTTP
edge dispatches on the type (JSON or SSE, which status) and never looks inside to decide.

- ``Progress``: a ``notifications/progress`` (a slow reader's backlog may coalesce them
  per token, ``gateway.stdio.inbox``);
- ``Notification``: any other request-scoped notification (log messages, a forwarded
  listen's notifications);
- ``Ask``: a request to a legacy client from the child (sampling, elicitation, roots), under
  a gateway id; the client POSTs its answer;
- ``Final``: the response carrying the client's id;
- ``Batch``: several ``Progress`` / ``Notification`` in order, ready at the same time.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.protocol.jsonrpc import PROGRESS, JsonObject


@dataclass(frozen=True, slots=True)
class Progress:
    message: JsonObject


@dataclass(frozen=True, slots=True)
class Notification:
    message: JsonObject


@dataclass(frozen=True, slots=True)
class Ask:
    message: JsonObject


@dataclass(frozen=True, slots=True)
class Final:
    message: JsonObject

    @property
    def error_code(self) -> int | None:
        """The JSON-RPC error code when this is an error response (its HTTP status may follow it)."""
        error = self.message.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        return code if type(code) is int else None


RelayEvent = Progress | Notification | Ask | Final
"""An event that carries one message."""


@dataclass(frozen=True, slots=True)
class Batch:
    notes: tuple[Progress | Notification, ...]


Emitted = RelayEvent | Batch
"""What an exchange yields."""


def notification(message: JsonObject) -> Progress | Notification:
    """A notification for the client, typed by its method."""
    return Progress(message) if message.get("method") == PROGRESS else Notification(message)
