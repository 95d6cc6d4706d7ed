"""Who is asking: bearer tokens, or a trusted reverse proxy's identity header.

``AuthGuard`` is a pure-ASGI middleware in front of the MCP endpoints and ``/status``
(``/healthz``, ``/readyz`` and ``/metrics`` stay open for probes and scrapers):

- **Bearer tokens** (``--auth-token-file``, one per line, ``NAME:TOKEN`` or just ``TOKEN``;
  ``#`` comments; re-read when the file changes, checked at most once a second). A request
  without a valid token gets 401 with ``WWW-Authenticate: Bearer`` and never reaches a
  child. Every configured token is compared with ``hmac.compare_digest`` — no early exit,
  so the time taken does not tell which token was close. A token's NAME becomes the
  principal; an unnamed token's principal is ``token-`` and the first 8 hex digits of its
  SHA-256 (tokens themselves are never logged).
- **A trusted identity header** (``--principal-header X-Forwarded-User``) set by an
  authenticating reverse proxy becomes the principal — only when configured, and only from
  ``--trusted-proxy`` addresses (by default loopback: a proxy in the same pod or host); from
  anyone else it is ignored, so a client that reaches the gateway directly cannot claim to
  be anyone.

The principal is put in the ASGI scope as ``gateway.principal``. Client credentials are
never forwarded to children: children get credentials only through an explicit
header-to-environment mapping (``envFromHeaders``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import ConfigError
from gateway.http.wire import error_response
from gateway.protocol.jsonrpc import error_object

log = logging.getLogger("gateway.auth")

RELOAD_INTERVAL: Final = 1.0
"""Seconds between checks of the token file's modification time."""
LOOPBACK_NETWORKS: Final = ("127.0.0.0/8", "::1/128")
OPEN_PATHS: Final = frozenset({"/healthz", "/readyz", "/metrics", "/.well-known/oauth-protected-resource"})


@dataclass(frozen=True)
class Token:
    principal: str
    secret: bytes


def parse_tokens(lines: Iterable[str], where: str) -> list[Token]:
    tokens = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, secret = line.partition(":")
        if not sep:
            name, secret = "", line
        name, secret = name.strip(), secret.strip()
        if len(secret) < 16:
            raise ConfigError(where, f"line {number}: a token needs at least 16 characters")
        principal = name or "token-" + hashlib.sha256(secret.encode()).hexdigest()[:8]
        tokens.append(Token(principal, secret.encode()))
    return tokens


class TokenStore:
    def __init__(self, inline: Iterable[str] = (), path: str | None = None) -> None:
        self._inline = parse_tokens(inline, "--auth-token")
        self._path = path
        self._file_tokens: list[Token] = []
        self._mtime: float | None = None
        self._checked = -RELOAD_INTERVAL
        if path is not None:
            self._load()

    @property
    def enabled(self) -> bool:
        return bool(self._inline) or self._path is not None

    def _load(self) -> None:
        assert self._path is not None
        try:
            stat = os.stat(self._path)
            if stat.st_mtime == self._mtime:
                return
            with open(self._path, encoding="utf-8") as fh:
                tokens = parse_tokens(fh, "--auth-token-file")
        except OSError as exc:
            if self._mtime is None:
                raise ConfigError("--auth-token-file", f"cannot read {self._path}: {exc.strerror}") from exc
            # Fail closed: a token file that was removed (a revoked Secret) revokes its tokens.
            log.error("cannot read the token file %s (%s); its tokens are refused until it is back", self._path, exc)
            self._file_tokens, self._mtime = [], -1.0
            return
        except ConfigError as exc:
            if self._mtime is None:
                raise
            log.error("the token file changed but is invalid (%s); keeping the tokens loaded before", exc.message)
            return
        self._file_tokens, self._mtime = tokens, stat.st_mtime
        log.info("loaded %d bearer token(s) from %s", len(tokens), self._path)

    def principal_for(self, presented: bytes, now: float) -> str | None:
        if self._path is not None and now - self._checked >= RELOAD_INTERVAL:
            self._checked = now
            self._load()
        match: str | None = None
        for token in (*self._inline, *self._file_tokens):
            if hmac.compare_digest(presented, token.secret) and match is None:
                match = token.principal
        return match


def trusted_networks(addresses: Iterable[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    out = []
    for address in addresses:
        try:
            out.append(ipaddress.ip_network(address.strip(), strict=False))
        except ValueError as exc:
            raise ConfigError("--trusted-proxy", f"{address!r} is not an address or CIDR") from exc
    return out


class AuthGuard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: TokenStore,
        principal_header: str | None = None,
        trusted_proxies: Iterable[str] = (),
        resource_metadata_url: str | None = None,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.principal_header = principal_header.lower().encode("latin-1") if principal_header else None
        # Without --trusted-proxy only a proxy on this host (loopback, the sidecar case) is
        # believed: anyone else could simply send the header themselves.
        self.trusted = trusted_networks(trusted_proxies) or trusted_networks(LOOPBACK_NETWORKS)
        challenge = 'Bearer realm="mcp-stdio-gateway"'
        if resource_metadata_url:
            challenge += f', resource_metadata="{resource_metadata_url}"'
        self.challenge = challenge

    def _from_trusted_proxy(self, scope: Scope) -> bool:
        client = scope.get("client")
        if not client:
            return False
        try:
            address = ipaddress.ip_address(client[0])
        except ValueError:
            return False
        return any(address in network for network in self.trusted)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        principal: str | None = None
        authorization = b""
        identity = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
            elif self.principal_header is not None and name == self.principal_header:
                identity = value
        if self.tokens.enabled:
            scheme, _, presented = authorization.partition(b" ")
            if scheme.lower() == b"bearer" and presented.strip():
                principal = self.tokens.principal_for(presented.strip(), anyio.current_time())
            if principal is None:
                why = "missing bearer token" if not authorization else "invalid bearer token"
                response = error_response(
                    401, error_object(-32600, f"unauthorized: {why}"), headers={"www-authenticate": self.challenge}
                )
                await response(scope, receive, send)
                return
        if identity and self._from_trusted_proxy(scope):
            principal = identity.decode("latin-1").strip() or principal
        scope["gateway.principal"] = principal
        await self.app(scope, receive, send)
