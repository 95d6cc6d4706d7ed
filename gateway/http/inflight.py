"""Modern requests being answered, so that a POSTed ``notifications/cancelled`` can name one.

In 2026-07-28 a client cancels by closing its SSE stream (SHTTP §Cancellation); the spec
defines no client notification over HTTP. Some clients (``mcp-remote --protocol auto``)
POST ``notifications/cancelled`` anyway, and the gateway accepts it leniently (digest
§7.1.4): it cancels when ``requestId`` names **exactly one** request in flight of the same
client, with the id's exact JSON type (``7`` is not ``"7"``). The client is its key of
``gateway.http.limits.client_key``: the principal, or for an anonymous request its peer
address (``anonymous@ADDRESS``), so two anonymous clients on different addresses that reuse
ids 0, 1, 2 (``mcp-remote`` forwards its local client's ids) each cancel their own. Two
requests of one client may share an id (modern clients are stateless; anonymous clients
behind one address are one client): then it is not known which was meant, and nothing is
cancelled. Another client's requests are never found. Invalid or unknown cancellations are ignored (the
spec's SHOULD), and the POST is answered 202 either way.

What a cancel does is the stream's (``LazyStream.cancel``): the relay's exchange closes,
so the child gets ``notifications/cancelled`` with its own id and the pool slot is freed,
and the request gets no answer (its stream ends without a final message).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

log = logging.getLogger("gateway.http")

Key = tuple[str | None, type, Any]


class Cancellable(Protocol):
    def cancel(self) -> None: ...


def key_of(principal: str | None, request_id: Any) -> Key | None:
    """The registry key, or None for a value that is no request id."""
    if type(request_id) not in (int, str):
        return None
    return (principal, type(request_id), request_id)


class InFlight:
    def __init__(self) -> None:
        self._by_key: dict[Key, list[Cancellable]] = {}

    def __len__(self) -> int:
        return sum(len(streams) for streams in self._by_key.values())

    def add(self, principal: str | None, request_id: Any, stream: Cancellable) -> Key | None:
        # ``principal``: the client key (``gateway.http.limits.client_key``), not only the principal.
        """Register ``stream`` while its request is answered; the key to ``discard`` it with
        (None: not a request id, nothing registered)."""
        key = key_of(principal, request_id)
        if key is not None:
            self._by_key.setdefault(key, []).append(stream)
        return key

    def discard(self, key: Key, stream: Cancellable) -> None:
        streams = self._by_key[key]
        streams.remove(stream)
        if not streams:
            del self._by_key[key]

    @contextmanager
    def track(self, principal: str | None, request_id: Any, stream: Cancellable) -> Iterator[None]:
        """Registered while the request is being answered (``add`` and ``discard`` around the block)."""
        key = self.add(principal, request_id, stream)
        try:
            yield
        finally:
            if key is not None:
                self.discard(key, stream)

    def cancel(self, principal: str | None, request_id: Any) -> bool:
        """Cancel the one request ``request_id`` names for ``principal``; False if none or several."""
        key = key_of(principal, request_id)
        streams = self._by_key.get(key, []) if key is not None else []
        if len(streams) != 1:
            log.debug("notifications/cancelled for %r names %d requests in flight; ignored", request_id, len(streams))
            return False
        streams[0].cancel()
        return True
