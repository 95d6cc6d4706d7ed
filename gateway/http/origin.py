"""DNS-rebinding protection: a pure-ASGI middleware that checks ``Origin`` and ``Host``.

A browser page on ``http://attacker.example`` can make a visitor's browser POST to
``http://127.0.0.1:8000/mcp``; the browser then sends ``Origin: http://attacker.example``.
A request whose ``Origin`` is present and not allowed gets 403 with an id-less JSON-RPC
error (SHTTP §Security). Requests without ``Origin`` (non-browser clients) pass. When the
gateway is bound to loopback, ``Host`` must name a loopback host too, which defeats DNS
rebinding (attacker.example resolving to 127.0.0.1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final
from urllib.parse import urlsplit

from starlette.responses import Response

from gateway.http.wire import error_response
from gateway.protocol.jsonrpc import error_object

LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
MAX_REMEMBERED_HOSTS: Final = 64
"""Distinct ``Host`` values whose verdict is kept (a client choosing them cannot grow it further)."""


def _host_only(authority: str) -> str:
    if authority.startswith("["):
        return authority[: authority.find("]") + 1].lower()
    return authority.rsplit(":", 1)[0].lower() if authority.count(":") == 1 else authority.lower()


class OriginPolicy:
    """Which ``Origin`` and ``Host`` values are allowed; ``refusal`` is the check."""

    def __init__(
        self, *, loopback_only: bool, allowed_origins: Iterable[str] = (), allowed_hosts: Iterable[str] = ()
    ) -> None:
        self.loopback_only = loopback_only
        self.allowed_origins = {o.rstrip("/").lower() for o in allowed_origins}
        # Compared by host name: "--allowed-host gw.internal" and "gw.internal:8000" both allow the
        # name (a Host header carries the port when it is not the scheme's default).
        self.allowed_hosts = {_host_only(h) for h in allowed_hosts}
        self._hosts_seen: dict[bytes, bool] = {}  # Host values already judged (a handful in practice)

    def _origin_ok(self, origin: str) -> bool:
        if origin.rstrip("/").lower() in self.allowed_origins or "*" in self.allowed_origins:
            return True
        parts = urlsplit(origin)
        return self.loopback_only and parts.scheme in ("http", "https") and _host_only(parts.netloc) in LOOPBACK_HOSTS

    def _host_ok(self, host: str) -> bool:
        if not self.loopback_only:
            return True
        name = _host_only(host)
        return name in LOOPBACK_HOSTS or name in self.allowed_hosts

    def refusal(self, headers: Mapping[bytes, bytes]) -> Response | None:
        """The 403 for a request whose ``Origin`` or ``Host`` is not allowed, else None.
        ``headers``: the request's by name (the last of a repeated one)."""
        origin = headers.get(b"origin")
        host = headers.get(b"host")
        if origin is not None and not self._origin_ok(origin.decode("latin-1")):
            return error_response(403, error_object(-32600, f"origin {origin.decode('latin-1')!r} is not allowed"))
        if host is not None:
            ok = self._hosts_seen.get(host)
            if ok is None:
                ok = self._host_ok(host.decode("latin-1"))
                if len(self._hosts_seen) < MAX_REMEMBERED_HOSTS:
                    self._hosts_seen[host] = ok
            if not ok:
                return error_response(403, error_object(-32600, f"host {host.decode('latin-1')!r} is not allowed"))
        return None
