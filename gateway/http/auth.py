"""Who is asking: bearer tokens, or a trusted reverse proxy's identity header.

``Authentication`` (run by ``gateway.http.edge``) guards the MCP endpoints (``/healthz``,
``/readyz``, ``/metrics`` and ``/.well-known/…`` stay open for probes, scrapers and discovery;
``/status`` and ``/ui`` take the operator's credential instead, ``gateway.http.operator``):

- **Bearer tokens** (``--auth-token-file``, one per line, ``NAME:TOKEN`` or just ``TOKEN``;
  ``#`` comments; re-read when the file changes, checked at most once a second). A request
  without a valid token gets 401 with ``WWW-Authenticate: Bearer`` and never reaches a
  child. Every configured token is compared with ``hmac.compare_digest`` — no early exit,
  so the time taken does not tell which token was close. A token's NAME becomes the
  principal; an unnamed token's principal is ``token-`` and the first 8 hex digits of its
  SHA-256 (tokens themselves are never logged).
- **OAuth access tokens** (``--oauth-issuer``): a bearer token that is no static token is
  checked as a JWT by ``gateway.oauth`` against the endpoint's policy (signature, ``iss``,
  ``aud`` = the endpoint's public URL, ``exp``, scopes). A refusal is 401 ``invalid_token``
  or 403 ``insufficient_scope`` with an RFC 6750 challenge pointing at the RFC 9728 metadata
  (``gateway.http.resource``); 503 when the issuer's keys cannot be fetched. The token's
  principal claim (``sub``) becomes the principal.
- **A client certificate** (``--tls-client-ca-file``): its subject is the principal unless a
  bearer token names one (``gateway.http.tls.PeerSubjects``).
- **A trusted identity header** (``--principal-header X-Forwarded-User``) set by an
  authenticating reverse proxy becomes the principal — only when configured, and only from
  ``--trusted-proxy`` addresses (by default loopback: a proxy in the same pod or host); from
  anyone else it is ignored, so a client that reaches the gateway directly cannot claim to
  be anyone. When the header is the only authentication (no tokens, OAuth or client
  certificates), a request without it from a trusted proxy, or from anyone else, gets 401
  (``--principal-header-required auto``; ``yes`` always, ``no`` serves it under its other
  credentials, or as ``anonymous``).

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
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from starlette.types import Receive, Scope, Send

from gateway.errors import CODE_UNAVAILABLE, ConfigError
from gateway.http.resource import METADATA_PATH, ResourceMetadata
from gateway.http.wire import error_response
from gateway.oauth.gate import OAuthGate, Unavailable
from gateway.oauth.validation import Refused, challenge, invalid
from gateway.protocol.jsonrpc import error_object

if TYPE_CHECKING:  # gateway.http.tls sees uvicorn; the HTTP edge only asks it for subjects
    from gateway.http.tls import PeerSubjects

log = logging.getLogger("gateway.auth")

RELOAD_INTERVAL: Final = 1.0
"""Seconds between checks of the token file's modification time."""
LOOPBACK_NETWORKS: Final = ("127.0.0.0/8", "::1/128")
OPEN_PATHS: Final = frozenset({"/healthz", "/readyz", "/metrics", METADATA_PATH})
LOGIN_PATH: Final = "/ui/login"
OPERATOR_PATHS: Final = frozenset({"/status", "/ui", LOGIN_PATH})
"""Guarded by the operator's credential (``gateway.http.operator``), never by MCP clients' tokens."""
WELL_KNOWN: Final = "/.well-known/"
"""Discovery documents are public by definition (RFC 8615): a path under it never needs a token,
and one the gateway does not serve is 404 (a 401 would send an OAuth client looking for an
authorization server that does not exist)."""
REALM: Final = "mcp-stdio-gateway"
RETRY_AFTER: Final = 5
"""Seconds a client is told to wait when the issuer's keys cannot be fetched (``keys.RETRY_INTERVAL``)."""


OAUTH_FALLBACK_PATHS: Final = frozenset({"/authorize", "/token", "/register"})
"""Where an MCP client that found no authorization server metadata tries OAuth anyway (the
2025-03-26 defaults, which the TypeScript SDK still uses): the gateway is no authorization
server, so these are 404 for everyone, never a 401 that reads as "log in here"."""


def is_open(path: str) -> bool:
    """Probes, metrics, discovery documents (``/.well-known/…``) and the OAuth fallback paths
    (which the gateway does not serve: 404) need no token."""
    return path in OPEN_PATHS or path.startswith(WELL_KNOWN) or path in OAUTH_FALLBACK_PATHS


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
    def __init__(self, inline: Iterable[str] = (), path: str | None = None, *, flag: str = "--auth-token") -> None:
        """``flag``: the setting named in errors (``--auth-token`` and ``--auth-token-file``)."""
        self._flag = flag
        self._inline = parse_tokens(inline, flag)
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
                tokens = parse_tokens(fh, f"{self._flag}-file")
        except OSError as exc:
            if self._mtime is None:
                raise ConfigError(f"{self._flag}-file", f"cannot read {self._path}: {exc.strerror}") from exc
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

    def current(self, now: float) -> tuple[Token, ...]:
        """The tokens in force (the file re-read when it changed; ``now``: monotonic seconds)."""
        if self._path is not None and now - self._checked >= RELOAD_INTERVAL:
            self._checked = now
            self._load()
        return (*self._inline, *self._file_tokens)

    def principal_for(self, presented: bytes, now: float) -> str | None:
        match: str | None = None
        for token in self.current(now):
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


class Authentication:
    """Who the request is: tokens, OAuth, a client certificate or a trusted proxy's header."""

    def __init__(
        self,
        *,
        tokens: TokenStore,
        principal_header: str | None = None,
        header_required: bool = False,
        trusted_proxies: Iterable[str] = (),
        metadata: ResourceMetadata | None = None,
        oauth: OAuthGate | None = None,
        peers: PeerSubjects | None = None,
    ) -> None:
        self.tokens = tokens
        self.principal_header = principal_header.lower().encode("latin-1") if principal_header else None
        self.header_name = principal_header or ""
        self.header_required = header_required and principal_header is not None
        # Without --trusted-proxy only a proxy on this host (loopback, the sidecar case) is
        # believed: anyone else could simply send the header themselves.
        self.trusted = trusted_networks(trusted_proxies) or trusted_networks(LOOPBACK_NETWORKS)
        self.metadata = metadata if metadata is not None and metadata.enabled else None
        self.oauth = oauth if oauth is not None and oauth.enabled else None
        self.peers = peers

    def _from_trusted_proxy(self, scope: Scope) -> bool:
        client = scope.get("client")
        if not client:
            return False
        try:
            address = ipaddress.ip_address(client[0])
        except ValueError:
            return False
        return any(address in network for network in self.trusted)

    @staticmethod
    def guards(scope: Scope) -> bool:
        """Every path but the open ones and the operator's (and CORS preflights, which carry no
        credentials)."""
        path = scope["path"]
        return scope["method"] != "OPTIONS" and not is_open(path) and path not in OPERATOR_PATHS

    async def admit(self, scope: Scope, receive: Receive, send: Send, headers: Mapping[bytes, bytes]) -> bool:
        """True: the request may go on, its principal in the scope; False: it was answered
        (401, 403 or 503). ``headers``: the request's by name (the last of a repeated one)."""
        authorization = headers.get(b"authorization", b"")
        named = self.principal_header
        identity = headers.get(named, b"") if named is not None and named != b"authorization" else b""
        path = scope["path"]
        oauth = self.oauth if self.oauth is not None and self.oauth.protects(path) else None
        # A client certificate's subject (mutual TLS) is the principal unless a token names one.
        principal: str | None = self.peers.subject_for(scope.get("client")) if self.peers is not None else None
        if self.tokens.enabled or oauth is not None:
            scheme, _, presented = authorization.partition(b" ")
            presented = presented.strip()
            if scheme.lower() != b"bearer" or not presented:
                why = "missing bearer token" if not authorization else "invalid bearer token"
                await self._refuse(scope, receive, send, Refused(401, "", why) if authorization else None, why)
                return False
            found = self.tokens.principal_for(presented, time.monotonic()) if self.tokens.enabled else None
            if found is None and oauth is not None:
                try:
                    verdict = await oauth.check(presented.decode("latin-1"), path)
                except Unavailable as exc:
                    response = error_response(503, error_object(CODE_UNAVAILABLE, str(exc)), retry_after=RETRY_AFTER)
                    await response(scope, receive, send)
                    return False
                if isinstance(verdict, Refused):
                    await self._refuse(scope, receive, send, verdict, verdict.description)
                    return False
                found = verdict.principal
            if found is None:
                why = "invalid bearer token"
                await self._refuse(scope, receive, send, invalid(why), why)
                return False
            principal = found
        if named is not None:
            trusted = self._from_trusted_proxy(scope)
            named_as = identity.decode("latin-1").strip() if trusted else ""
            if named_as:
                principal = named_as
            elif self.header_required:
                why = self._untrusted(scope) if not trusted else f"no {self.header_name} header from the proxy"
                await self._refuse(scope, receive, send, None, why)
                return False
        scope["gateway.principal"] = principal
        return True

    def _untrusted(self, scope: Scope) -> str:
        client = scope.get("client")
        peer = client[0] if client else "an unknown address"
        return (
            f"{self.header_name} is taken only from a trusted proxy (--trusted-proxy; by default "
            f"loopback), and this request came from {peer}"
        )

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, refused: Refused | None, why: str) -> None:
        """401 (or 403 for a missing scope) with the RFC 6750 / RFC 9728 challenge."""
        path = scope["path"]
        metadata = self.metadata.url_for(path, scope) if self.metadata is not None else None
        scopes = self.oauth.scopes(path) if self.oauth is not None else ()
        # No credentials at all: no RFC 6750 error code (§3.1).
        coded = refused if refused is not None and refused.error else None
        value = challenge(resource_metadata=metadata, refused=coded, scopes=scopes, realm=REALM)
        status = refused.status if refused is not None else 401
        message = f"forbidden: {why}" if status == 403 else f"unauthorized: {why}"
        response = error_response(status, error_object(-32600, message), headers={"www-authenticate": value})
        await response(scope, receive, send)
