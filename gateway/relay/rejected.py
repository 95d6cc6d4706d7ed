"""``Rejected``: a request refused after all, raised by the relay before it yields anything
(so the HTTP edge can still answer with the rejection's status)."""

from __future__ import annotations

from gateway.protocol.outcome import Rejection


class Rejected(Exception):
    """The request is refused after all (raised before the exchange yields anything)."""

    def __init__(self, rejection: Rejection) -> None:
        super().__init__(rejection.error)
        self.rejection = rejection
