"""``ChildSession.send_line``'s answer as a record, for tests that read its fields by name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.protocol.childsession import ChildSession
from gateway.protocol.jsonrpc import JsonObject


@dataclass(frozen=True)
class Sent:
    """The child id minted, the whole line for stdin, and the request's deadline (None: none)."""

    child_id: int
    line: bytes
    deadline: float | None


def send(session: ChildSession[Any], method: str, params: JsonObject | None, owner: Any, **options: Any) -> Sent:
    """``session.send_line(...)``, its tuple as a ``Sent``."""
    return Sent(*session.send_line(method, params, owner, **options))
