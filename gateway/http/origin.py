"""DNS-rebinding protection: the ``Origin`` and ``Host`` checks the edge runs on every request.

A browser page on ``http://attacker.example`` can make a visitor's browser POST to
``http://127.0.0.1:8000/mcp``; the browser then sends ``Origin: http://attacker.example``.
A request whose ``Origin`` is present and not allowed gets 403 with an id-less JSON-RPC
error (SHTTP §Security). Requests without ``Origin`` (non-browser clients) pass. When the
gateway is bound to loopback, ``Host`` must name a loopback host too, which defeats DNS
rebinding (attacker.example resolving to 127.0.0.1).

Both are parsed strictly (RFC 9110 §7.2, RFC 6454 §7): a ``Host`` is ``name[:port]`` or
``[v6][:port]`` and nothing else (``localhost:80@evil.com`` is no host: 400), an ``Origin`` is
``scheme://host[:port]`` with no user part or path (else it is not allowed: 403), and a
request carrying either header twice is refused (400): which copy would count is exactly
what a smuggling attempt hopes the checks and the application disagree on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from starlette.responses import Response

from gateway.http.wire import error_response
from gateway.protocol.jsonrpc import error_object

LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
MAX_REMEMBERED_HOSTS: Final = 64
"""Distinct ``Host`` values whose verdict is kept (a client choosing them cannot grow it further)."""
MAX_PORT: Final = 65535
SHOWN_VALUE_CHARS: Final = 100
"""How much of a refused header value an error repeats back."""
_AUTHORITY: Final = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~-]+)(?::([0-9]{1,5}))?")
"""``host[:port]``: a registered name (letters, digits, ``._~-``) or an IP literal in brackets."""
_ORIGIN: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.+)")
_SINGLE: Final = (b"origin", b"host")
"""Headers a request may carry once at most."""


def host_name(authority: str) -> str | None:
    """The host name of a well-formed ``host[:port]``, lower-cased (IPv6 kept in brackets);
    None when ``authority`` is not one (a user part, a path, a bad port, stray characters)."""
    match = _AUTHORITY.fullmatch(authority)
    if match is None:
        return None
    port = match.group(2)
    if port is not None and int(port) > MAX_PORT:
        return None
    return match.group(1).lower()


def _host_only(authority: str) -> str:
    """An allowed-host setting's name (``gw.internal`` and ``gw.internal:8000`` both allow the name)."""
    name = host_name(authority)
    return name if name is not None else authority.lower()


def _shown(value: bytes) -> str:
    return value.decode("latin-1")[:SHOWN_VALUE_CHARS]


def _bad_request(message: str) -> Response:
    return error_response(400, error_object(-32600, message))


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
        self._hosts_seen: dict[bytes, bool | None] = {}  # Host value → allowed (None: malformed)

    def _origin_ok(self, origin: str, own_host: str | None) -> bool:
        lowered = origin.rstrip("/").lower()
        if lowered in self.allowed_origins or "*" in self.allowed_origins:
            return True
        match = _ORIGIN.fullmatch(origin)
        if match is None or match.group(1).lower() not in ("http", "https"):
            return False
        if own_host is not None and match.group(2).lower() == own_host.lower():
            return True  # the page's own origin (the operator's login form posts to itself)
        name = host_name(match.group(2))
        return self.loopback_only and name is not None and name in LOOPBACK_HOSTS

    def _host_verdict(self, host: str) -> bool | None:
        name = host_name(host)
        if name is None:
            return None
        return not self.loopback_only or name in LOOPBACK_HOSTS or name in self.allowed_hosts

    def refusal(
        self, headers: Mapping[bytes, bytes], raw: Sequence[tuple[bytes, bytes]] = (), *, own_origin: bool = False
    ) -> Response | None:
        """The 400 for a malformed or repeated ``Host`` / a repeated ``Origin``, the 403 for an
        ``Origin`` or ``Host`` that is not allowed, else None. ``headers``: the request's by name;
        ``raw``: the request's header list (repeats are looked for only when it is longer than
        ``headers``). ``own_origin``: an ``Origin`` naming this very host (``http://`` or
        ``https://`` and the ``Host``: a TLS-terminating proxy changes the scheme) is allowed too."""
        if len(raw) > len(headers):
            for name in _SINGLE:
                if sum(1 for key, _ in raw if key == name) > 1:
                    return _bad_request(f"the request carries more than one {name.decode()} header")
        host = headers.get(b"host")
        verdict: bool | None = True
        if host is not None:
            verdict = self._hosts_seen[host] if host in self._hosts_seen else self._judge(host)
            if verdict is None:
                return _bad_request(f"malformed Host header {_shown(host)!r}: expected host[:port]")
        origin = headers.get(b"origin")
        if origin is not None:
            own = host.decode("latin-1") if own_origin and host is not None else None
            if not self._origin_ok(origin.decode("latin-1"), own):
                return error_response(403, error_object(-32600, f"origin {_shown(origin)!r} is not allowed"))
        if not verdict:
            assert host is not None
            return error_response(403, error_object(-32600, f"host {_shown(host)!r} is not allowed"))
        return None

    def _judge(self, host: bytes) -> bool | None:
        verdict = self._host_verdict(host.decode("latin-1"))
        if len(self._hosts_seen) < MAX_REMEMBERED_HOSTS:
            self._hosts_seen[host] = verdict
        return verdict
