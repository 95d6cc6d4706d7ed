"""What the ingress checks return: ``Accepted`` or ``Rejection``, plus their small helpers.

Contract: a ``Rejection`` carries the HTTP status, the JSON-RPC error object and the
request id when it was readable; ``Rejection.body()`` is the error response the HTTP edge
writes. An ``Accepted`` names the era, the protocol version and the parsed messages.
Kept apart from ``ingress`` so that ``xmcpheader`` can return a ``Rejection`` without
depending on the ladder. Imports: standard library, orjson and ``gateway.protocol`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson

from gateway.protocol.jsonrpc import JsonId, JsonObject, Message, error_object
from gateway.protocol.versions import Era


@dataclass(frozen=True, slots=True)
class Rejection:
    """Refuse the request with ``status``; ``error`` is the JSON-RPC error object to send."""

    status: int
    error: JsonObject | None
    id: JsonId | None = None
    headers: tuple[tuple[str, str], ...] = ()

    def body(self) -> JsonObject | None:
        """The JSON-RPC error response, or None for a bodyless answer.

        The id is omitted when unknown: the 2026-07-28 schema types ``id`` as string or
        integer and makes it optional, so ``null`` would be invalid there.
        """
        if self.error is None:
            return None
        out: JsonObject = {"jsonrpc": "2.0", "error": self.error}
        if self.id is not None:
            out["id"] = self.id
        return out


@dataclass(slots=True)  # not frozen: one is made per POST, and a frozen __init__ costs ~3k instructions more
class Accepted:
    """Serve the request. ``messages`` is empty for GET/DELETE, several for a batch.

    ``session_id`` is None for modern requests and for ``initialize`` (the caller mints
    one); ``version`` is then the version the client asked for, still to be negotiated.
    Made by the ingress ladder and only read after.
    """

    era: Era
    version: str
    messages: tuple[Message, ...]
    session_id: str | None
    is_batch: bool = False  # a default, not a keyword at each call: a class's keywords cost a dict


def reject(
    status: int,
    code: int,
    message: str,
    *,
    id: JsonId | None = None,
    data: Any = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> Rejection:
    return Rejection(status, error_object(code, message, data), id, headers)


_SHOWN_CHARS: Final = 80  # values quoted in error messages are cut here: they come from the client


def describe(value: object) -> str:
    """A short JSON rendering of a client-supplied value, for error messages."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:  # orjson.JSONEncodeError: lone surrogates, integers beyond 64 bits
        text = _safe_repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "…"


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except ValueError:  # an int too long for str() (sys.get_int_max_str_digits)
        return f"<{type(value).__name__}>"
